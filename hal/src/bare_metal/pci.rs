//! PCIe through ECAM: finding functions by vendor, sizing and enabling their BAR0, bus
//! mastering. The BARs stay where the firmware put them; MSI-X is never enabled: the driver
//! polls.

/// Mellanox's PCI vendor id.
pub const VENDOR_MELLANOX: u16 = 0x15b3;

/// Why a function's BAR0 cannot be used.
#[derive(Clone, Copy, Debug)]
pub enum PciError {
    /// BAR0 is not a memory BAR.
    NotMemory,
    /// BAR0 has no address (the firmware did not assign it) or no size.
    Unassigned,
    /// BAR0 lies above 4 GiB, outside the image's identity map.
    Unmapped {
        /// Its address.
        addr: u64,
    },
}

impl core::fmt::Display for PciError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PciError::NotMemory => write!(f, "BAR0 is not a memory BAR"),
            PciError::Unassigned => write!(f, "BAR0 has no address or no size"),
            PciError::Unmapped { addr } => {
                write!(
                    f,
                    "BAR0 at {addr:#x} is above 4 GiB, outside the identity map"
                )
            }
        }
    }
}

/// An ECAM window: configuration space of buses `start_bus..=end_bus` at `base`.
#[derive(Clone, Copy, Debug)]
pub struct Ecam {
    base: u64,
    start_bus: u8,
    end_bus: u8,
}

impl Ecam {
    /// The window at `base` (bus 0's configuration space, even when `start_bus` is not 0).
    ///
    /// # Safety
    /// `base` is the platform's ECAM window for these buses, mapped (identity) uncached, and
    /// nothing else uses it.
    pub const unsafe fn new(base: u64, start_bus: u8, end_bus: u8) -> Self {
        Ecam {
            base,
            start_bus,
            end_bus,
        }
    }

    /// Physical address of the window.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Buses decoded.
    pub fn buses(&self) -> core::ops::RangeInclusive<u8> {
        self.start_bus..=self.end_bus
    }
}

/// A PCI function in the ECAM window.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    ecam: Ecam,
    /// Bus number.
    pub bus: u8,
    /// Device number.
    pub dev: u8,
    /// Function number.
    pub func: u8,
}

impl Function {
    fn cfg(&self, off: u16) -> *mut u32 {
        let a = self.ecam.base
            + (u64::from(self.bus) << 20)
            + (u64::from(self.dev) << 15)
            + (u64::from(self.func) << 12)
            + u64::from(off & !3);
        a as usize as *mut u32
    }

    /// Configuration dword at `off`.
    pub fn read32(&self, off: u16) -> u32 {
        // SAFETY: the ECAM window (`Ecam::new`'s contract) holds this function's 4 KiB of
        // configuration space; a dword read there is a configuration read.
        unsafe { core::ptr::read_volatile(self.cfg(off)) }
    }

    /// Writes configuration dword `off`.
    pub fn write32(&self, off: u16, v: u32) {
        // SAFETY: as `read32`; the registers written (command, BARs) are the ones this module
        // owns.
        unsafe { core::ptr::write_volatile(self.cfg(off), v) }
    }

    /// Vendor and device id.
    pub fn ids(&self) -> (u16, u16) {
        let v = self.read32(0);
        (v as u16, (v >> 16) as u16)
    }

    /// BAR0's address and size: the BAR read back after writing all ones (memory decoding off
    /// meanwhile), then restored. A 64-bit BAR takes BAR1 as its upper half.
    ///
    /// # Errors
    /// [`PciError`] for an I/O BAR, an unassigned one, or one above 4 GiB.
    pub fn bar0(&self) -> Result<(u64, u64), PciError> {
        let lo = self.read32(0x10);
        if lo & 1 != 0 {
            return Err(PciError::NotMemory);
        }
        let wide = (lo >> 1) & 3 == 2;
        let hi = if wide { self.read32(0x14) } else { 0 };
        let cmd = self.read32(0x04);
        self.write32(0x04, cmd & !0x2);
        self.write32(0x10, u32::MAX);
        let mut mask = u64::from(self.read32(0x10) & !0xf);
        if wide {
            self.write32(0x14, u32::MAX);
            mask |= u64::from(self.read32(0x14)) << 32;
            self.write32(0x14, hi);
        } else {
            mask |= 0xffff_ffff_0000_0000;
        }
        self.write32(0x10, lo);
        self.write32(0x04, cmd);
        let addr = (u64::from(hi) << 32) | u64::from(lo & !0xf);
        let size = (!mask).wrapping_add(1);
        if addr == 0 || size == 0 || mask == 0 {
            return Err(PciError::Unassigned);
        }
        if addr.checked_add(size).is_none_or(|e| e > 1 << 32) {
            return Err(PciError::Unmapped { addr });
        }
        Ok((addr, size))
    }

    /// Memory decoding and bus mastering on (command register bits 1 and 2), legacy INTx off
    /// (bit 10): the driver polls.
    pub fn enable(&self) {
        let cmd = self.read32(0x04) & 0xffff;
        self.write32(0x04, cmd | 0x2 | 0x4 | 0x400);
    }

    /// Bus mastering and memory decoding off again (after the device's teardown).
    pub fn disable(&self) {
        let cmd = self.read32(0x04) & 0xffff;
        self.write32(0x04, cmd & !0x6);
    }
}

/// Every function of `vendor` in the window, in bus order, at most `N` (the rest ignored).
pub fn find_functions<const N: usize>(ecam: Ecam, vendor: u16) -> ([Option<Function>; N], usize) {
    let mut out = [None; N];
    let mut n = 0;
    for bus in ecam.buses() {
        for dev in 0..32u8 {
            for func in 0..8u8 {
                let f = Function {
                    ecam,
                    bus,
                    dev,
                    func,
                };
                let (v, _) = f.ids();
                if v == 0xffff {
                    if func == 0 {
                        break;
                    }
                    continue;
                }
                if v == vendor && n < N {
                    out[n] = Some(f);
                    n += 1;
                }
                // Header type bit 7: more functions than function 0.
                if func == 0 && (f.read32(0x0c) >> 16) & 0x80 == 0 {
                    break;
                }
            }
        }
    }
    (out, n)
}
