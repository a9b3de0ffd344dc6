//! Just enough ACPI to find the PCIe ECAM window: the RSDP (from PVH's start info, or the BIOS
//! area scan), the XSDT or RSDT, and the MCFG's first allocation (ACPI 6.5 §5.2.5-5.2.8; PCI
//! Firmware Specification 3.3 §4.1.2 for MCFG).

use super::pci::Ecam;

/// `hvm_start_info.magic` (Xen `arch-x86/hvm/start_info.h`).
const PVH_MAGIC: u32 = 0x336e_c578;

fn rd<const N: usize>(addr: u64) -> [u8; N] {
    let mut b = [0u8; N];
    for (i, v) in b.iter_mut().enumerate() {
        // SAFETY: `find_ecam`'s contract: memory below 4 GiB is identity-mapped and reading
        // it has no side effect; `reachable` kept `addr` there. Addresses come from the tables.
        *v = unsafe { core::ptr::read_volatile((addr as usize + i) as *const u8) };
    }
    b
}

fn u32_at(addr: u64) -> u32 {
    u32::from_le_bytes(rd::<4>(addr))
}

fn u64_at(addr: u64) -> u64 {
    u64::from_le_bytes(rd::<8>(addr))
}

fn checksum_ok(addr: u64, len: u32) -> bool {
    let mut sum = 0u8;
    for i in 0..u64::from(len) {
        sum = sum.wrapping_add(rd::<1>(addr + i)[0]);
    }
    sum == 0
}

/// Below 4 GiB and not absurdly long: the only tables this image can reach.
fn reachable(addr: u64, len: u64) -> bool {
    addr != 0 && len <= 1 << 20 && addr.checked_add(len).is_some_and(|e| e <= 1 << 32)
}

fn rsdp(start_info: u64) -> Option<u64> {
    // PVH start info: `rsdp_paddr` at byte 32.
    if reachable(start_info, 40) && u32_at(start_info) == PVH_MAGIC {
        let p = u64_at(start_info + 32);
        if reachable(p, 36) && &rd::<8>(p) == b"RSD PTR " {
            return Some(p);
        }
    }
    // The BIOS read-only area, on 16-byte boundaries (ACPI §5.2.5.1).
    (0xe_0000u64..0x10_0000)
        .step_by(16)
        .find(|&p| &rd::<8>(p) == b"RSD PTR " && checksum_ok(p, 20))
}

/// The first ECAM window the MCFG table names, or `None` without ACPI or MCFG. `start_info` is
/// the physical address of PVH's `hvm_start_info` (0: scan the BIOS area for the RSDP).
///
/// # Safety
/// Physical memory below 4 GiB is identity-mapped and reading it has no side effect (RAM and
/// firmware tables), and the ECAM window the table names is mapped uncached and used by
/// nothing else: the returned [`Ecam`] reaches configuration space through it.
pub unsafe fn find_ecam(start_info: u64) -> Option<Ecam> {
    let rsdp = rsdp(start_info)?;
    let revision = rd::<1>(rsdp + 15)[0];
    let (root, entry) = if revision >= 2 && u64_at(rsdp + 24) != 0 {
        (u64_at(rsdp + 24), 8u64)
    } else {
        (u64::from(u32_at(rsdp + 16)), 4u64)
    };
    let root_len = u64::from(u32_at(root + 4));
    if !reachable(root, root_len) || root_len < 36 {
        return None;
    }
    for i in 0..(root_len - 36) / entry {
        let at = root + 36 + i * entry;
        let table = if entry == 8 {
            u64_at(at)
        } else {
            u64::from(u32_at(at))
        };
        if !reachable(table, 60) || &rd::<4>(table) != b"MCFG" {
            continue;
        }
        let len = u32_at(table + 4);
        if len < 60 || !reachable(table, u64::from(len)) || !checksum_ok(table, len) {
            return None;
        }
        // Header (36), reserved (8), then 16-byte allocations: base, segment, start and end bus.
        let a = table + 44;
        // SAFETY: the caller's promise covers the window MCFG names.
        return Some(unsafe { Ecam::new(u64_at(a), rd::<1>(a + 10)[0], rd::<1>(a + 11)[0]) });
    }
    None
}
