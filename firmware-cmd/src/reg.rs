//! `hi:lo` fields of 32-bit BAR0 registers (used by `reg!`).

/// Bits `hi..=lo` of a 32-bit register value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegField {
    /// Most significant bit (31 = MSB).
    pub hi: u32,
    /// Least significant bit.
    pub lo: u32,
}

impl RegField {
    /// The field `hi:lo`.
    pub const fn new(hi: u32, lo: u32) -> Self {
        RegField { hi, lo }
    }

    /// The mask of the field in place.
    pub const fn mask(self) -> u32 {
        let width = self.hi - self.lo + 1;
        if width == 32 {
            u32::MAX
        } else {
            ((1u32 << width) - 1) << self.lo
        }
    }

    /// The field's value in `reg`.
    pub const fn get(self, reg: u32) -> u32 {
        (reg & self.mask()) >> self.lo
    }

    /// `reg` with the field replaced by `val` (bits of `val` beyond the field are dropped).
    pub const fn set(self, reg: u32, val: u32) -> u32 {
        (reg & !self.mask()) | ((val << self.lo) & self.mask())
    }

    /// True when the single-bit field is set.
    pub const fn is_set(self, reg: u32) -> bool {
        self.get(reg) != 0
    }
}

/// Compile-time check run by `reg!`: fields are `hi >= lo`, within 31:0, listed from the MSB
/// down and not overlapping.
#[doc(hidden)]
pub const fn check_reg(fields: &[(u32, u32)]) {
    let mut prev_lo = 32;
    let mut i = 0;
    while i < fields.len() {
        let (hi, lo) = fields[i];
        assert!(hi >= lo && hi <= 31, "reg: bad hi:lo");
        assert!(
            hi < prev_lo,
            "reg: fields overlap or are not listed MSB first"
        );
        prev_lo = lo;
        i += 1;
    }
}
