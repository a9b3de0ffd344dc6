//! Just enough ACPI to find the PCIe ECAM window: the RSDP (from PVH's start info, or the BIOS
//! area scan), the XSDT or RSDT, and the MCFG's first allocation (ACPI 6.5 §5.2.5-5.2.8; PCI
//! Firmware Specification 3.3 §4.1.2 for MCFG).

use super::pci::Ecam;

/// `hvm_start_info.magic` (Xen `arch-x86/hvm/start_info.h`).
const PVH_MAGIC: u32 = 0x336e_c578;

/// Physical memory as the tables are read from it: a byte at an address.
struct Mem<F: Fn(u64) -> u8>(F);

impl<F: Fn(u64) -> u8> Mem<F> {
    fn bytes<const N: usize>(&self, addr: u64) -> [u8; N] {
        let mut b = [0u8; N];
        for (i, v) in b.iter_mut().enumerate() {
            *v = (self.0)(addr + i as u64);
        }
        b
    }

    fn u8_at(&self, addr: u64) -> u8 {
        (self.0)(addr)
    }

    fn u32_at(&self, addr: u64) -> u32 {
        u32::from_le_bytes(self.bytes(addr))
    }

    fn u64_at(&self, addr: u64) -> u64 {
        u64::from_le_bytes(self.bytes(addr))
    }

    fn checksum_ok(&self, addr: u64, len: u32) -> bool {
        (0..u64::from(len)).fold(0u8, |s, i| s.wrapping_add(self.u8_at(addr + i))) == 0
    }
}

/// Below 4 GiB and not absurdly long: the only tables the platform can reach. Every table is
/// checked with this before any byte of it is read.
fn reachable(addr: u64, len: u64) -> bool {
    addr != 0 && len <= 1 << 20 && addr.checked_add(len).is_some_and(|e| e <= 1 << 32)
}

fn rsdp<F: Fn(u64) -> u8>(m: &Mem<F>, start_info: u64) -> Option<u64> {
    // PVH start info: `rsdp_paddr` at byte 32.
    if reachable(start_info, 40) && m.u32_at(start_info) == PVH_MAGIC {
        let p = m.u64_at(start_info + 32);
        if reachable(p, 36) && &m.bytes::<8>(p) == b"RSD PTR " && m.checksum_ok(p, 20) {
            return Some(p);
        }
    }
    // The BIOS read-only area, on 16-byte boundaries (ACPI §5.2.5.1).
    (0xe_0000u64..0x10_0000)
        .step_by(16)
        .find(|&p| &m.bytes::<8>(p) == b"RSD PTR " && m.checksum_ok(p, 20))
}

/// The first MCFG allocation as (base, start bus, end bus).
fn mcfg<F: Fn(u64) -> u8>(m: &Mem<F>, start_info: u64) -> Option<(u64, u8, u8)> {
    let rsdp = rsdp(m, start_info)?;
    let (root, entry) = if m.u8_at(rsdp + 15) >= 2 && m.u64_at(rsdp + 24) != 0 {
        (m.u64_at(rsdp + 24), 8u64)
    } else {
        (u64::from(m.u32_at(rsdp + 16)), 4u64)
    };
    if !reachable(root, 36) {
        return None;
    }
    let root_len = u64::from(m.u32_at(root + 4));
    if root_len < 36 || !reachable(root, root_len) {
        return None;
    }
    for i in 0..(root_len - 36) / entry {
        let at = root + 36 + i * entry;
        let table = if entry == 8 {
            m.u64_at(at)
        } else {
            u64::from(m.u32_at(at))
        };
        if !reachable(table, 60) || &m.bytes::<4>(table) != b"MCFG" {
            continue;
        }
        let len = m.u32_at(table + 4);
        if len < 60 || !reachable(table, u64::from(len)) || !m.checksum_ok(table, len) {
            return None;
        }
        // Header (36), reserved (8), then 16-byte allocations: base, segment, start and end bus.
        let a = table + 44;
        return Some((m.u64_at(a), m.u8_at(a + 10), m.u8_at(a + 11)));
    }
    None
}

/// The first ECAM window the MCFG table names, or `None` without ACPI or MCFG. `start_info` is
/// the physical address of PVH's `hvm_start_info` (0: scan the BIOS area for the RSDP).
///
/// # Safety
/// Physical memory below 4 GiB is identity-mapped and reading it has no side effect (RAM and
/// firmware tables), and the ECAM window the table names is mapped uncached and used by
/// nothing else: the returned [`Ecam`] reaches configuration space through it.
pub unsafe fn find_ecam(start_info: u64) -> Option<Ecam> {
    let m = Mem(|addr: u64| {
        // SAFETY: the caller's promise; `mcfg` reads only addresses `reachable` (below 4 GiB).
        unsafe { core::ptr::read_volatile(addr as usize as *const u8) }
    });
    let (base, start, end) = mcfg(&m, start_info)?;
    // SAFETY: the caller's promise covers the window MCFG names.
    Some(unsafe { Ecam::new(base, start, end) })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// The first MiB of physical memory with firmware tables laid out in it; above it,
    /// everything reads as zero.
    struct Fake(Vec<u8>);

    impl Default for Fake {
        fn default() -> Self {
            Fake(std::vec![0; 1 << 20])
        }
    }

    impl Fake {
        fn put(&mut self, at: u64, bytes: &[u8]) {
            let at = at as usize;
            self.0[at..at + bytes.len()].copy_from_slice(bytes);
        }

        fn mem(&self) -> Mem<impl Fn(u64) -> u8 + '_> {
            Mem(|a| {
                usize::try_from(a)
                    .ok()
                    .and_then(|a| self.0.get(a))
                    .copied()
                    .unwrap_or(0)
            })
        }
    }

    fn fix_checksum(t: &mut [u8], at: usize) {
        let s = t.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        t[at] = t[at].wrapping_sub(s);
    }

    fn rsdp(rev: u8, rsdt: u32, xsdt: u64) -> Vec<u8> {
        let mut r = std::vec![0u8; 36];
        r[..8].copy_from_slice(b"RSD PTR ");
        r[15] = rev;
        r[16..20].copy_from_slice(&rsdt.to_le_bytes());
        r[20..24].copy_from_slice(&36u32.to_le_bytes());
        r[24..32].copy_from_slice(&xsdt.to_le_bytes());
        let (head, _) = r.split_at_mut(20);
        fix_checksum(head, 8);
        r
    }

    fn sdt(sig: &[u8; 4], entries: &[u64], wide: bool) -> Vec<u8> {
        let w = if wide { 8 } else { 4 };
        let mut t = std::vec![0u8; 36 + w * entries.len()];
        t[..4].copy_from_slice(sig);
        let len = t.len() as u32;
        t[4..8].copy_from_slice(&len.to_le_bytes());
        for (k, e) in entries.iter().enumerate() {
            t[36 + w * k..36 + w * (k + 1)].copy_from_slice(&e.to_le_bytes()[..w]);
        }
        fix_checksum(&mut t, 9);
        t
    }

    fn mcfg_table(base: u64, start: u8, end: u8) -> Vec<u8> {
        let mut t = std::vec![0u8; 60];
        t[..4].copy_from_slice(b"MCFG");
        t[4..8].copy_from_slice(&60u32.to_le_bytes());
        t[44..52].copy_from_slice(&base.to_le_bytes());
        t[54] = start;
        t[55] = end;
        fix_checksum(&mut t, 9);
        t
    }

    #[test]
    fn the_ecam_window_through_pvh_xsdt_rsdt_and_the_bios_scan() {
        // PVH start info -> RSDP rev 2 -> XSDT -> (FACP, MCFG).
        let mut f = Fake::default();
        let mut info = std::vec![0u8; 40];
        info[..4].copy_from_slice(&PVH_MAGIC.to_le_bytes());
        info[32..40].copy_from_slice(&0x9_0000u64.to_le_bytes());
        f.put(0x1000, &info);
        f.put(0x9_0000, &rsdp(2, 0, 0xa_0000));
        f.put(0xa_0000, &sdt(b"XSDT", &[0xb_0000, 0xc_0000], true));
        f.put(0xb_0000, &sdt(b"FACP", &[], true));
        f.put(0xc_0000, &mcfg_table(0xb000_0000, 0, 255));
        assert_eq!(mcfg(&f.mem(), 0x1000), Some((0xb000_0000, 0, 255)));

        // No start info: the BIOS-area scan finds an RSDP rev 0 -> RSDT (32-bit entries).
        let mut g = Fake::default();
        g.put(0xe_0040, &rsdp(0, 0x7_0000, 0));
        g.put(0x7_0000, &sdt(b"RSDT", &[0x7_1000], false));
        g.put(0x7_1000, &mcfg_table(0xe000_0000, 0, 63));
        assert_eq!(mcfg(&g.mem(), 0), Some((0xe000_0000, 0, 63)));

        // A corrupted MCFG (checksum), no MCFG at all, a root table above 4 GiB: nothing.
        let mut bad = mcfg_table(0xe000_0000, 0, 63);
        bad[50] ^= 1;
        g.put(0x7_1000, &bad);
        assert_eq!(mcfg(&g.mem(), 0), None);
        let mut h = Fake::default();
        h.put(0xe_0040, &rsdp(0, 0x7_0000, 0));
        h.put(0x7_0000, &sdt(b"RSDT", &[], false));
        assert_eq!(mcfg(&h.mem(), 0), None);
        let mut far = Fake::default();
        far.put(0xe_0000, &rsdp(2, 0, 0x1_0000_0000));
        assert_eq!(mcfg(&far.mem(), 0), None);
        // Nothing anywhere.
        assert_eq!(mcfg(&Fake::default().mem(), 0), None);
    }
}
