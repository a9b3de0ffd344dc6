//! PCI configuration space of the modelled HCA: identity (15b3, ConnectX-5), a 64-bit
//! prefetchable BAR0, a PCI Express capability and MSI-X with its table and PBA in BAR0
//! (mlx5-reference 01 §1–2; layout measured in RIG.md §3.1).

use crate::config::ModelConfig;
use crate::msix::{MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};

/// Mellanox vendor id.
pub const VENDOR_ID: u16 = 0x15b3;
/// Size of the (PCI Express) configuration space.
pub const CONFIG_BYTES: usize = 4096;
/// Offset of the PCI Express capability.
pub const PCIE_CAP: usize = 0x60;
/// Offset of the MSI-X capability.
pub const MSIX_CAP: usize = 0x9c;
/// Offset of the vendor-specific capability (the "VSC" gateway Linux looks for in
/// `mlx5_pci_vsc_init`: id 0x09, length 24, type 0; space at +4, counter +8, semaphore +0xc,
/// address +0x10, data +0x14). Its registers are plain storage here: the CR-space gateway
/// behind them (used by Linux only for crash dumps and SW reset) is not modelled.
pub const VSC_CAP: usize = 0xb0;
/// PCI command register bits.
pub mod command {
    /// Memory space decoding.
    pub const MEMORY: u16 = 1 << 1;
    /// Bus mastering (DMA).
    pub const BUS_MASTER: u16 = 1 << 2;
    /// INTx disabled.
    pub const INTX_DISABLE: u16 = 1 << 10;
}

/// The configuration space: contents plus a mask of the bits software may write.
#[derive(Clone)]
pub struct PciConfig {
    bytes: Vec<u8>,
    wmask: Vec<u8>,
}

impl PciConfig {
    /// Configuration space for the HCA `cfg` describes.
    pub fn new(cfg: &ModelConfig) -> Self {
        let mut c = PciConfig {
            bytes: vec![0; CONFIG_BYTES],
            wmask: vec![0; CONFIG_BYTES],
        };
        c.set16(0x00, VENDOR_ID);
        c.set16(0x02, cfg.device_id);
        c.set16(0x06, 0x0010); // status: capability list
        c.set32(0x08, 0x0200_0000); // class 02 (network), subclass 00, prog-if 00, revision 0
                                    // BAR0: 64-bit, prefetchable memory; the size mask makes sizing work.
        let size = cfg.bar0_size as u64;
        c.set32(0x10, 0x0000_000c);
        c.set16(0x2c, VENDOR_ID);
        c.set16(0x2e, 0x0008);
        c.bytes[0x34] = PCIE_CAP as u8;
        // PCI Express capability v2, endpoint; 8 GT/s x16.
        c.bytes[PCIE_CAP] = 0x10;
        c.bytes[PCIE_CAP + 1] = MSIX_CAP as u8;
        c.set16(PCIE_CAP + 2, 0x0002);
        c.set32(PCIE_CAP + 4, 0x1000_8022);
        c.set32(PCIE_CAP + 0xc, (16 << 4) | 3);
        c.set16(PCIE_CAP + 0x12, (16 << 4) | 3);
        c.set32(PCIE_CAP + 0x2c, 0x0e);
        // MSI-X: table and PBA in BAR0.
        c.bytes[MSIX_CAP] = 0x11;
        c.bytes[MSIX_CAP + 1] = VSC_CAP as u8;
        c.set16(MSIX_CAP + 2, cfg.msix_vectors.saturating_sub(1) & 0x7ff);
        c.set32(MSIX_CAP + 4, MSIX_TABLE_OFFSET as u32);
        c.set32(MSIX_CAP + 8, MSIX_PBA_OFFSET as u32);
        c.bytes[VSC_CAP] = 0x09;
        c.bytes[VSC_CAP + 1] = 0;
        c.bytes[VSC_CAP + 2] = 24;
        c.bytes[VSC_CAP + 3] = 0;

        // What software may change.
        c.wmask[0x04..0x06].copy_from_slice(&0x0547u16.to_le_bytes());
        c.wmask[0x0c] = 0xff; // cache line size
        c.wmask[0x0d] = 0xff; // latency timer
        let bar_mask = !(size - 1);
        c.wmask[0x10..0x14].copy_from_slice(&((bar_mask as u32) & 0xffff_fff0).to_le_bytes());
        c.wmask[0x14..0x18].copy_from_slice(&((bar_mask >> 32) as u32).to_le_bytes());
        c.wmask[0x3c] = 0xff; // interrupt line
        c.wmask[PCIE_CAP + 8..PCIE_CAP + 0xa].copy_from_slice(&0xffffu16.to_le_bytes()); // DevCtl
        c.wmask[PCIE_CAP + 0x10..PCIE_CAP + 0x12].copy_from_slice(&0xffffu16.to_le_bytes()); // LinkCtl
        c.wmask[PCIE_CAP + 0x28..PCIE_CAP + 0x2a].copy_from_slice(&0xffffu16.to_le_bytes()); // DevCtl2
        c.wmask[MSIX_CAP + 2..MSIX_CAP + 4].copy_from_slice(&0xc000u16.to_le_bytes()); // enable, mask
        c.wmask[VSC_CAP + 4..VSC_CAP + 8].fill(0xff); // space / control
        c.wmask[VSC_CAP + 0xc..VSC_CAP + 0x18].fill(0xff); // semaphore, address, data
        c
    }

    fn set16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn set32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Reads `dst.len()` bytes at `off`; bytes past the end read as zero.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = off
                .checked_add(i)
                .and_then(|at| self.bytes.get(at))
                .copied()
                .unwrap_or(0);
        }
    }

    /// Writes `src` at `off`, changing only writable bits.
    pub fn write(&mut self, off: usize, src: &[u8]) {
        for (i, s) in src.iter().enumerate() {
            let Some(at) = off.checked_add(i) else {
                break;
            };
            if at < CONFIG_BYTES {
                let m = self.wmask[at];
                self.bytes[at] = (self.bytes[at] & !m) | (s & m);
            }
        }
    }

    /// True (once) when software has set Initiate Function Level Reset (PCIe Device Control
    /// bit 15; the device advertises FLR in Device Capabilities bit 28). The bit always reads
    /// back as 0 (PCIe Base Spec 7.5.3.4). Linux vfio-pci resets the function this way when a
    /// user opens and releases the device (`vfio_pci_core_enable` / `_disable`).
    pub fn take_flr(&mut self) -> bool {
        let at = PCIE_CAP + 9;
        let flr = self.bytes[at] & 0x80 != 0;
        self.bytes[at] &= !0x80;
        flr
    }

    /// One byte.
    pub fn read_u8(&self, off: usize) -> u8 {
        self.bytes.get(off).copied().unwrap_or(0)
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        u16::from_le_bytes([self.bytes[4], self.bytes[5]])
    }

    /// True when bus mastering is enabled (the device may DMA).
    pub fn bus_master(&self) -> bool {
        self.command() & command::BUS_MASTER != 0
    }

    /// True when MSI-X is enabled and not function-masked.
    pub fn msix_enabled(&self) -> bool {
        let ctl = u16::from_le_bytes([self.bytes[MSIX_CAP + 2], self.bytes[MSIX_CAP + 3]]);
        ctl & 0x8000 != 0 && ctl & 0x4000 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r32(c: &PciConfig, off: usize) -> u32 {
        let mut b = [0u8; 4];
        c.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn identity_bar_sizing_and_capabilities() {
        let c0 = PciConfig::new(&ModelConfig::default());
        let mut c = c0.clone();
        assert_eq!(r32(&c, 0), 0x1017_15b3);
        assert_eq!(r32(&c, 8) >> 8, 0x02_0000);
        // Sizing: all ones in, size mask out, type bits kept.
        c.write(0x10, &u32::MAX.to_le_bytes());
        c.write(0x14, &u32::MAX.to_le_bytes());
        assert_eq!(r32(&c, 0x10), !((32 << 20) - 1) as u32 | 0xc);
        assert_eq!(r32(&c, 0x14), u32::MAX);
        c.write(0x10, &0xfe00_0000u32.to_le_bytes());
        assert_eq!(r32(&c, 0x10), 0xfe00_000c);
        // Read-only identity, writable command bits only.
        c.write(0, &0u32.to_le_bytes());
        assert_eq!(r32(&c, 0), 0x1017_15b3);
        c.write(4, &0xffffu16.to_le_bytes());
        assert_eq!(c.command(), 0x0547);
        assert!(c.bus_master());
        // Capability chain: PCIe at 0x60 -> MSI-X at 0x9c -> vendor-specific at 0xb0 -> end.
        // Linux mlx5_pci_vsc_init warns when the vendor-specific capability is missing.
        assert_eq!(c.read_u8(0x34), 0x60);
        assert_eq!((c.read_u8(0x60), c.read_u8(0x61)), (0x10, 0x9c));
        assert_eq!((c.read_u8(0x9c), c.read_u8(0x9d)), (0x11, 0xb0));
        assert_eq!(
            (
                c.read_u8(0xb0),
                c.read_u8(0xb1),
                c.read_u8(0xb2),
                c.read_u8(0xb3)
            ),
            (0x09, 0, 24, 0)
        );
        assert_eq!(r32(&c, 0x9c) >> 16 & 0x7ff, 63);
        assert_eq!(r32(&c, 0xa0), 0x2000);
        assert_eq!(r32(&c, 0xa4), 0x3000);
        assert!(!c.msix_enabled());
        c.write(0x9e, &0x8000u16.to_le_bytes());
        assert!(c.msix_enabled());
    }

    /// PCIe Base Spec: Device Capabilities bit 28 = FLR capable; Device Control bit 15 =
    /// Initiate FLR, which always reads 0.
    #[test]
    fn flr_is_advertised_taken_once_and_reads_zero() {
        let mut c = PciConfig::new(&ModelConfig::default());
        assert_ne!(r32(&c, PCIE_CAP + 4) & (1 << 28), 0);
        assert!(!c.take_flr());
        c.write(PCIE_CAP + 8, &0x8000u16.to_le_bytes());
        assert!(c.take_flr());
        assert_eq!(r32(&c, PCIE_CAP + 8) & 0x8000, 0);
        assert!(!c.take_flr());
    }
}
