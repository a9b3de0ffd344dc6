//! Typed object numbers so that an EQ number cannot be passed where a UAR index is expected.

macro_rules! handle {
    ($($(#[$m:meta])* $name:ident($t:ty);)*) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct $name(pub $t);

        impl $name {
            /// The raw number as firmware encodes it.
            pub const fn raw(self) -> $t {
                self.0
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    )*};
}

handle! {
    /// Event queue number (8 bits).
    Eqn(u8);
    /// UAR page index (24 bits): the UAR lives at BAR0 + index × 4 KiB.
    UarIndex(u32);
    /// Function id used by page management and ENABLE_HCA.
    FunctionId(u16);
    /// Completion queue number (24 bits).
    Cqn(u32);
    /// Queue pair number (24 bits).
    Qpn(u32);
    /// Protection domain number (24 bits).
    Pdn(u32);
    /// Local key of a memory key.
    Lkey(u32);
    /// Remote key of a memory key.
    Rkey(u32);
}
