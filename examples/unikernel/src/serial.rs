//! The console: COM1 through `bareverbs_hal::bare_metal::Serial`, with `print!`/`println!` and
//! the driver's `log` records on it ([`Logger`]).

use core::fmt::{self, Write};

use bareverbs_hal::bare_metal::Serial;

/// COM1.
// SAFETY: q35 has its 16550 at 0x3f8, and nothing else in this image drives it.
pub static COM1: Serial = unsafe { Serial::new(0x3f8) };

/// The console as a `fmt::Write`.
pub struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut port = COM1;
        port.write_str(s)
    }
}

/// `print!` to the console.
#[macro_export]
macro_rules! print {
    ($($t:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::serial::Console, format_args!($($t)*));
    }};
}

/// `println!` to the console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($t:tt)*) => {{ $crate::print!($($t)*); $crate::print!("\n"); }};
}

/// The driver's log shim (`bareverbs` with feature `log`) on the console: one line per record,
/// `LEVEL target: message`.
pub struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            crate::println!("{} {}: {}", r.level(), r.target(), r.args());
        }
    }

    fn flush(&self) {}
}
