//! The declaration macros: `ifc!` for firmware structures, `reg!` for BAR0 registers, and
//! `enum_with_unknown!` for code lists that must keep values newer firmware may return.

/// Declares firmware structures as bit tables, the way `mlx5_ifc.h` does.
///
/// ```
/// bareverbs_firmware_cmd::ifc! {
///     /// Example.
///     pub struct Demo => demo: 0x40 bits {
///         0x00 opcode: 16,
///         0x20 addr_hi: 32,
///     }
/// }
/// fn main() {
///     let mut buf = [0u8; 8];
///     bareverbs_firmware_cmd::layout::ViewMut::<Demo>::zeroed(&mut buf)
///         .unwrap()
///         .set(demo::opcode, 0x104u16);
///     assert_eq!(buf[..2], [0x01, 0x04]);
/// }
/// ```
///
/// The checks reject a field that straddles a dword:
///
/// ```compile_fail
/// bareverbs_firmware_cmd::ifc! {
///     /// Bad.
///     pub struct Bad => bad: 0x40 bits { 0x10 straddles: 32 }
/// }
/// fn main() {}
/// ```
///
/// fields that overlap or are out of order:
///
/// ```compile_fail
/// bareverbs_firmware_cmd::ifc! {
///     /// Bad.
///     pub struct Bad => bad: 0x40 bits { 0x00 a: 16, 0x08 b: 8 }
/// }
/// fn main() {}
/// ```
///
/// and a field past the end of the struct:
///
/// ```compile_fail
/// bareverbs_firmware_cmd::ifc! {
///     /// Bad.
///     pub struct Bad => bad: 0x40 bits { 0x40 past: 8 }
/// }
/// fn main() {}
/// ```
///
/// Each field is `bit_offset name: kind` where kind is a width in bits, `[u8; N]` (byte string),
/// another layout's type (nested struct) or `[u32]`/`[u64]` (flexible array at the end). The
/// macro makes a marker type implementing [`Layout`](crate::layout::Layout), a module of typed
/// field constants named as in mlx5_ifc, a compile-time layout check and a round-trip test per
/// field.
#[macro_export]
macro_rules! ifc {
    ($(
        $(#[$m:meta])*
        $vis:vis struct $ty:ident => $module:ident : $bits:literal bits {
            $( $(#[$fm:meta])* $off:literal $field:ident : $kind:tt ),* $(,)?
        }
    )*) => {$(
        $(#[$m])*
        #[doc = ""]
        #[doc = concat!("mlx5_ifc `", stringify!($module), "`; fields in [`", stringify!($module), "`].")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis struct $ty;

        impl $crate::layout::Layout for $ty {
            const NAME: &'static str = stringify!($module);
            const BITS: usize = $bits;
        }

        #[doc = concat!("Fields of [`", stringify!($ty), "`], named as in mlx5_ifc.")]
        #[allow(non_upper_case_globals, missing_docs, unused_imports)]
        $vis mod $module {
            use super::*;
            $(
                $(#[$fm])*
                pub const $field: $crate::__ifc_ty!($ty, $kind) =
                    $crate::__ifc_val!(stringify!($field), $off, $kind);
            )*

            const _: () = $crate::layout::check_layout(
                &[$( ($off, $crate::__ifc_width!($kind), $crate::__ifc_kind!($kind)) ),*],
                $bits,
            );

            #[cfg(test)]
            #[test]
            fn field_round_trip() {
                $(
                    $crate::layout::test_round_trip::<$ty>(
                        stringify!($field), $off, $crate::__ifc_width!($kind), $crate::__ifc_kind!($kind),
                    );
                )*
            }
        }
    )*};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __ifc_ty {
    ($ty:ident, $w:literal) => { $crate::layout::Field<$ty> };
    ($ty:ident, [u8; $n:literal]) => { $crate::layout::Bytes<$ty> };
    ($ty:ident, [u32]) => { $crate::layout::Array<$ty> };
    ($ty:ident, [u64]) => { $crate::layout::Array<$ty> };
    ($ty:ident, $sub:ident) => { $crate::layout::Sub<$ty, $sub> };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __ifc_val {
    ($name:expr, $off:literal, $w:literal) => {
        $crate::layout::Field::new($name, $off, $w)
    };
    ($name:expr, $off:literal, [u8; $n:literal]) => {
        $crate::layout::Bytes::new($name, $off, $n)
    };
    ($name:expr, $off:literal, [u32]) => {
        $crate::layout::Array::new($name, $off, 32)
    };
    ($name:expr, $off:literal, [u64]) => {
        $crate::layout::Array::new($name, $off, 64)
    };
    ($name:expr, $off:literal, $sub:ident) => {
        $crate::layout::Sub::new($name, $off)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __ifc_width {
    ($w:literal) => {
        $w
    };
    ([u8; $n:literal]) => {
        $n * 8
    };
    ([u32]) => {
        32
    };
    ([u64]) => {
        64
    };
    ($sub:ident) => {
        <$sub as $crate::layout::Layout>::BITS
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __ifc_kind {
    ($w:literal) => {
        $crate::layout::kind::BITS
    };
    ([u8; $n:literal]) => {
        $crate::layout::kind::BYTES
    };
    ([u32]) => {
        $crate::layout::kind::ARRAY
    };
    ([u64]) => {
        $crate::layout::kind::ARRAY
    };
    ($sub:ident) => {
        $crate::layout::kind::SUB
    };
}

/// Declares a 32-bit big-endian BAR0 register and its `hi:lo` fields, in the style of Linux's
/// nova-core `register!`.
///
/// ```
/// bareverbs_firmware_cmd::reg! {
///     /// Example register.
///     pub mod demo_reg @ 0x14 {
///         31:12 addr,
///         3:0 stride,
///     }
/// }
/// assert_eq!(demo_reg::stride.get(0x1234_5676), 6);
/// assert_eq!(demo_reg::addr.set(0, 0xabcde), 0xabcd_e000);
/// ```
#[macro_export]
macro_rules! reg {
    ($(
        $(#[$m:meta])*
        $vis:vis mod $name:ident @ $off:literal {
            $( $(#[$fm:meta])* $hi:literal : $lo:literal $field:ident ),* $(,)?
        }
    )*) => {$(
        $(#[$m])*
        #[allow(non_upper_case_globals, missing_docs)]
        $vis mod $name {
            /// Offset of the register in BAR0.
            pub const OFFSET: $crate::BarOffset = $crate::BarOffset($off);
            $(
                $(#[$fm])*
                pub const $field: $crate::reg::RegField = $crate::reg::RegField::new($hi, $lo);
            )*
            const _: () = $crate::reg::check_reg(&[$( ($hi, $lo) ),*]);
        }
    )*};
}

/// Declares a `u8`/`u16` code list as an enum that keeps unknown values
/// (smoltcp's `enum_with_unknown!`), with the PRM name of each value.
#[macro_export]
macro_rules! enum_with_unknown {
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident($repr:ty) {
            $( $(#[$vm:meta])* $variant:ident = $value:literal => $text:literal ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        $vis enum $name {
            $( $(#[$vm])* $variant, )*
            /// A value this build does not know.
            Unknown($repr),
        }

        impl From<$repr> for $name {
            fn from(v: $repr) -> Self {
                match v {
                    $( $value => $name::$variant, )*
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for $repr {
            fn from(v: $name) -> $repr {
                match v {
                    $( $name::$variant => $value, )*
                    $name::Unknown(other) => other,
                }
            }
        }

        impl $name {
            /// The raw value (usable in constants, unlike `From`).
            pub const fn raw(self) -> $repr {
                match self {
                    $( $name::$variant => $value, )*
                    $name::Unknown(other) => other,
                }
            }

            /// The PRM / Linux description of the value.
            pub fn text(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                    $name::Unknown(_) => "unknown",
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{} ({:#x})", self.text(), <$repr>::from(*self))
            }
        }
    };
}
