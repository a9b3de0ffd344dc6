//! Log shim: `log` xor `defmt`, or nothing; arguments are still evaluated-as-used when both are off.
#![allow(unused_macros)]

#[cfg(all(feature = "log", feature = "defmt"))]
compile_error!("features `log` and `defmt` are mutually exclusive");

macro_rules! trace {
    ($($arg:tt)*) => {{
        #[cfg(feature = "log")] ::log::trace!($($arg)*);
        #[cfg(feature = "defmt")] ::defmt::trace!($($arg)*);
        #[cfg(not(any(feature = "log", feature = "defmt")))] { let _ = ($($arg)*); }
    }};
}
macro_rules! debug {
    ($($arg:tt)*) => {{
        #[cfg(feature = "log")] ::log::debug!($($arg)*);
        #[cfg(feature = "defmt")] ::defmt::debug!($($arg)*);
        #[cfg(not(any(feature = "log", feature = "defmt")))] { let _ = ($($arg)*); }
    }};
}
macro_rules! warn {
    ($($arg:tt)*) => {{
        #[cfg(feature = "log")] ::log::warn!($($arg)*);
        #[cfg(feature = "defmt")] ::defmt::warn!($($arg)*);
        #[cfg(not(any(feature = "log", feature = "defmt")))] { let _ = ($($arg)*); }
    }};
}

macro_rules! info {
    ($($arg:tt)*) => {{
        #[cfg(feature = "log")] ::log::info!($($arg)*);
        #[cfg(feature = "defmt")] ::defmt::info!($($arg)*);
        #[cfg(not(any(feature = "log", feature = "defmt")))] { let _ = ($($arg)*); }
    }};
}
