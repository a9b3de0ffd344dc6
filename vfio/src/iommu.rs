//! The container's IOMMU: what `VFIO_IOMMU_GET_INFO` reports (page sizes, the usable IOVA
//! ranges of its capability chain) and the allocator that places DMA chunks inside them
//! (include/uapi/linux/vfio.h, `vfio_iommu_type1_info` and its capabilities).

use std::fs::File;
use std::io;
use std::mem::{offset_of, size_of};

use vfio_bindings::bindings::vfio::{
    vfio_info_cap_header, vfio_iommu_type1_info, vfio_iommu_type1_info_cap_iova_range,
    vfio_iommu_type1_info_dma_avail, vfio_iova_range, VFIO_IOMMU_INFO_CAPS,
    VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL,
};

use crate::sys;

/// Size and IOVA alignment of a DMA chunk: one 2 MiB hugepage.
pub(crate) const CHUNK: usize = 2 << 20;

/// Where IOVAs start when the IOMMU allows it: low enough for any device, high enough that a
/// stray small address (0, a length mistaken for an address) never hits DMA memory.
pub(crate) const IOVA_BASE: u64 = 1 << 30;

/// Assumed usable ranges when the kernel reports none (before Linux 5.4): everything from
/// `IOVA_BASE` to 2^48, less the x86 MSI window at 0xfee00000.
const DEFAULT_RANGES: [IovaRange; 2] = [
    IovaRange {
        start: IOVA_BASE,
        end: 0xfedf_ffff,
    },
    IovaRange {
        start: 0xfef0_0000,
        end: (1 << 48) - 1,
    },
];

/// An inclusive range of IOVAs the IOMMU can map (`vfio_iova_range`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IovaRange {
    /// First usable address.
    pub(crate) start: u64,
    /// Last usable address.
    pub(crate) end: u64,
}

/// What the Type1 IOMMU reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IommuInfo {
    /// Supported page sizes (bit n set: 2^n bytes), 0 when not reported.
    pub(crate) pgsizes: u64,
    /// Usable IOVA ranges, when the capability chain has them.
    pub(crate) iova_ranges: Option<Vec<IovaRange>>,
    /// How many more DMA mappings the container accepts, when reported.
    pub(crate) dma_avail: Option<u32>,
}

/// Asks the container for its IOMMU info: once with the bare struct, and again with the size
/// the kernel asks for when it has capabilities to add.
pub(crate) fn query(container: &File) -> io::Result<IommuInfo> {
    let mut argsz = size_of::<vfio_iommu_type1_info>() as u32;
    for _ in 0..4 {
        let buf = sys::iommu_get_info(container, argsz)?;
        let want = u32_at(&buf, offset_of!(vfio_iommu_type1_info, argsz)).unwrap_or(0);
        let flags = u32_at(&buf, offset_of!(vfio_iommu_type1_info, flags)).unwrap_or(0);
        if flags & VFIO_IOMMU_INFO_CAPS != 0 && want > argsz {
            argsz = want;
            continue;
        }
        return Ok(parse(&buf));
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "VFIO_IOMMU_GET_INFO keeps asking for a larger buffer",
    ))
}

fn bytes<const N: usize>(buf: &[u8], off: usize) -> Option<[u8; N]> {
    buf.get(off..off.checked_add(N)?)?.try_into().ok()
}

fn u16_at(buf: &[u8], off: usize) -> Option<u16> {
    bytes(buf, off).map(u16::from_ne_bytes)
}

fn u32_at(buf: &[u8], off: usize) -> Option<u32> {
    bytes(buf, off).map(u32::from_ne_bytes)
}

fn u64_at(buf: &[u8], off: usize) -> Option<u64> {
    bytes(buf, off).map(u64::from_ne_bytes)
}

/// Decodes a `vfio_iommu_type1_info` and its capability chain. Capability offsets count from
/// the start of the struct; a chain that points backwards or out of the buffer ends the walk.
pub(crate) fn parse(buf: &[u8]) -> IommuInfo {
    let mut info = IommuInfo::default();
    let flags = u32_at(buf, offset_of!(vfio_iommu_type1_info, flags)).unwrap_or(0);
    if flags & VFIO_IOMMU_INFO_PGSIZES != 0 {
        info.pgsizes = u64_at(buf, offset_of!(vfio_iommu_type1_info, iova_pgsizes)).unwrap_or(0);
    }
    if flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return info;
    }
    let mut at = u32_at(buf, offset_of!(vfio_iommu_type1_info, cap_offset)).unwrap_or(0) as usize;
    while at >= size_of::<vfio_iommu_type1_info>() {
        let (Some(id), Some(next)) = (
            u16_at(buf, at + offset_of!(vfio_info_cap_header, id)),
            u32_at(buf, at + offset_of!(vfio_info_cap_header, next)),
        ) else {
            break;
        };
        match u32::from(id) {
            VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE => {
                info.iova_ranges = iova_ranges(buf, at);
            }
            VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL => {
                info.dma_avail =
                    u32_at(buf, at + offset_of!(vfio_iommu_type1_info_dma_avail, avail));
            }
            _ => {}
        }
        let next = next as usize;
        if next <= at {
            break;
        }
        at = next;
    }
    info
}

fn iova_ranges(buf: &[u8], cap: usize) -> Option<Vec<IovaRange>> {
    let n = u32_at(
        buf,
        cap + offset_of!(vfio_iommu_type1_info_cap_iova_range, nr_iovas),
    )?;
    let first = cap + offset_of!(vfio_iommu_type1_info_cap_iova_range, iova_ranges);
    (0..n as usize)
        .map(|i| {
            let at = first + i * size_of::<vfio_iova_range>();
            Some(IovaRange {
                start: u64_at(buf, at + offset_of!(vfio_iova_range, start))?,
                end: u64_at(buf, at + offset_of!(vfio_iova_range, end))?,
            })
        })
        .collect()
}

/// Hands out chunk-aligned IOVAs inside the usable ranges, upwards, never reusing one: a
/// stale address then faults in the IOMMU instead of reaching memory that moved on.
#[derive(Debug)]
pub(crate) struct IovaSpace {
    ranges: Vec<IovaRange>,
    next: u64,
}

impl IovaSpace {
    /// A space over the ranges the kernel reported, or the defaults. Starts at `IOVA_BASE`
    /// when a range reaches that high, else at the first chunk above 0.
    pub(crate) fn new(reported: Option<&[IovaRange]>) -> Self {
        let mut ranges = reported.map_or_else(|| DEFAULT_RANGES.to_vec(), <[_]>::to_vec);
        ranges.retain(|r| r.start <= r.end);
        ranges.sort_by_key(|r| r.start);
        let high = IOVA_BASE + CHUNK as u64 - 1;
        let next = if ranges.iter().any(|r| r.end >= high) {
            IOVA_BASE
        } else {
            CHUNK as u64
        };
        IovaSpace { ranges, next }
    }

    /// `size` bytes (a multiple of `CHUNK`) of IOVA, `CHUNK`-aligned, or `None` when no range
    /// has room left.
    pub(crate) fn alloc(&mut self, size: u64) -> Option<u64> {
        let last = size.checked_sub(1)?;
        for r in &self.ranges {
            let Some(start) = r
                .start
                .max(self.next)
                .checked_next_multiple_of(CHUNK as u64)
            else {
                continue;
            };
            if start.checked_add(last).is_some_and(|end| end <= r.end) {
                self.next = start + size;
                return Some(start);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake;

    const MIB2: u64 = CHUNK as u64;

    #[test]
    fn two_step_query_reads_ranges_and_dma_avail() {
        fake::reset();
        let container = fake::file("container");
        let info = query(&container).unwrap();
        assert_eq!(info.pgsizes, 0x4020_1000);
        assert_eq!(
            info.iova_ranges.as_deref(),
            Some(
                &[
                    IovaRange {
                        start: 0,
                        end: 0xfedf_ffff
                    },
                    IovaRange {
                        start: 0xfef0_0000,
                        end: 0x7f_ffff_ffff
                    }
                ][..]
            )
        );
        assert_eq!(info.dma_avail, Some(65535));
        // First with the bare struct, then with the size the kernel asked for.
        let sizes: Vec<String> = fake::calls()
            .into_iter()
            .filter(|c| c.starts_with("VFIO_IOMMU_GET_INFO"))
            .collect();
        assert_eq!(sizes.len(), 2);
        assert!(sizes[0].ends_with("argsz=24"), "{sizes:?}");
        assert!(!sizes[1].ends_with("argsz=24"), "{sizes:?}");
    }

    #[test]
    fn no_capabilities_means_no_ranges() {
        fake::reset();
        fake::with(|f| {
            f.iova_ranges = None;
            f.dma_avail = None;
        });
        let info = query(&fake::file("container")).unwrap();
        assert_eq!(info.pgsizes, 0x4020_1000);
        assert_eq!(info.iova_ranges, None);
        assert_eq!(fake::calls().len(), 1);
    }

    #[test]
    fn a_looping_chain_ends() {
        let mut buf = vec![0u8; 40];
        buf[4..8].copy_from_slice(&VFIO_IOMMU_INFO_CAPS.to_ne_bytes());
        buf[16..20].copy_from_slice(&24u32.to_ne_bytes());
        buf[24..26].copy_from_slice(&99u16.to_ne_bytes());
        buf[28..32].copy_from_slice(&24u32.to_ne_bytes()); // next points at itself
        assert_eq!(parse(&buf), IommuInfo::default());
    }

    #[test]
    fn iovas_start_at_1gib_stay_aligned_and_skip_holes() {
        let ranges = [
            IovaRange {
                start: 0,
                end: 0xfedf_ffff,
            },
            IovaRange {
                start: 0xfef0_0000,
                end: u64::MAX,
            },
        ];
        let mut s = IovaSpace::new(Some(&ranges));
        assert_eq!(s.alloc(MIB2), Some(IOVA_BASE));
        assert_eq!(s.alloc(4 * MIB2), Some(IOVA_BASE + MIB2));
        // Fill up to the MSI hole: the next chunk lands after it, 2 MiB aligned.
        s.next = 0xfed0_0000;
        assert_eq!(s.alloc(MIB2), Some(0xff00_0000));
        assert_eq!(s.alloc(0), None);
    }

    #[test]
    fn small_iommus_are_used_from_the_bottom() {
        let mut s = IovaSpace::new(Some(&[IovaRange {
            start: 0,
            end: 0x3fff_ffff,
        }]));
        assert_eq!(s.alloc(MIB2), Some(MIB2));
        let mut none = IovaSpace::new(Some(&[IovaRange {
            start: 0x1000,
            end: 0x2fff,
        }]));
        assert_eq!(none.alloc(MIB2), None);
        let mut defaults = IovaSpace::new(None);
        assert_eq!(defaults.alloc(MIB2), Some(IOVA_BASE));
    }
}
