//! Memory regions (`ibv_reg_mr`): DMA memory registered with a memory key whose MTT maps it
//! page by page (CREATE_MKEY in MTT mode; mlx5-reference 06 §4).
//!
//! A region owns its buffer while registered: the memory cannot be freed while the device may
//! use it, and [`Mr::dereg`] hands it back.

use bareverbs_firmware_cmd::commands::{CreateMkey, DestroyMkey};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, Rkey, View};
use bareverbs_hal::{Hal, SharedDma};
use bitflags::bitflags;

use crate::cmdq::MAX_MESSAGE;
use crate::device::input;
use crate::error::{Error, Invalid, Limit};
use crate::verbs::pd::Pd;

bitflags! {
    /// Access a region grants (`enum ibv_access_flags`; local read is always allowed).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The HCA may write the region for local operations (receives, RDMA READ results).
        const LOCAL_WRITE = 1 << 0;
        /// Remote peers may write it with RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// Remote peers may read it with RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Remote peers may run atomics on it.
        const REMOTE_ATOMIC = 1 << 3;
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for AccessFlags {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "AccessFlags({=u32:#x})", self.bits())
    }
}

/// A failed registration: the error and, unless the device may still use it, the buffer.
pub type RegMrError<D> = (Error, Option<SharedDma<D>>);

/// Most MTT entries one CREATE_MKEY carries.
pub const MAX_MR_PAGES: usize = (MAX_MESSAGE - CreateMkeyIn::BYTES) / 8;
/// Smallest and largest translation page: 4 KiB, and what the mkey context's 5-bit
/// `log_page_size` holds (Linux `mlx5_umem_mkc_find_best_pgsz` without
/// `umr_log_entity_size_5`).
const MIN_LOG_MTT_PAGE: u32 = 12;
const MAX_LOG_MTT_PAGE: u32 = 31;

/// The translation of an IOVA-contiguous range: log2 of the page size, the first page's
/// address and the number of pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MttLayout {
    log_page: u32,
    first: u64,
    pages: u64,
}

/// The page size Linux picks for a range that is contiguous in device addresses
/// (`ib_umem_find_best_pgsz`): the smallest page, at least 4 KiB, whose aligned frame holds
/// the whole range, capped at 2 GiB — one MTT entry up to the cap, a few beyond it. The mkey's
/// start and length keep the device inside the range; the frame around it is never touched.
fn mtt_layout(start: u64, len: u64) -> MttLayout {
    let last = start + (len - 1);
    // The low bits in which the range's first and last byte addresses differ.
    let varying = u64::BITS - (start ^ last).leading_zeros();
    let log_page = varying.clamp(MIN_LOG_MTT_PAGE, MAX_LOG_MTT_PAGE);
    let first = start & !((1u64 << log_page) - 1);
    MttLayout {
        log_page,
        first,
        pages: ((last - first) >> log_page) + 1,
    }
}

/// A registered memory region. Deregistered on drop.
pub struct Mr<'p, 'd, H: Hal> {
    pd: &'p Pd<'d, H>,
    buf: Option<SharedDma<H::Dma>>,
    index: u32,
    key: u32,
    access: AccessFlags,
}

impl<'d, H: Hal> Pd<'d, H> {
    /// Registers `buf` for DMA with `access` (`ibv_reg_mr`). The region's address, as used in
    /// work requests, is the buffer's IOVA.
    ///
    /// # Errors
    /// The error and, unless the device may still use it, the buffer back:
    /// [`Error::InvalidArgument`] for remote write or atomic without local write or an empty
    /// buffer, [`Error::ExceedsLimit`] for a buffer spanning more than [`MAX_MR_PAGES`]
    /// translation pages of 2 GiB (about 2 TiB; smaller buffers take one or two), or a command
    /// error. After a command timeout the buffer is leaked (`None`), never freed.
    pub fn reg_mr(
        &self,
        buf: SharedDma<H::Dma>,
        access: AccessFlags,
    ) -> Result<Mr<'_, 'd, H>, RegMrError<H::Dma>> {
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err((
                Error::InvalidArgument {
                    what: Invalid::RemoteWriteWithoutLocalWrite,
                },
                Some(buf),
            ));
        }
        if buf.is_empty() {
            return Err((
                Error::InvalidArgument {
                    what: Invalid::ZeroLength,
                },
                Some(buf),
            ));
        }
        // Another HAL's IOVA names other memory here (two model arenas, two VFIO containers
        // hand out the same addresses): the device would read and write that instead.
        if buf.domain() != self.dev.hal().dma_domain() {
            return Err((
                Error::InvalidArgument {
                    what: Invalid::ForeignMemory,
                },
                Some(buf),
            ));
        }
        let start = buf.iova().0;
        let mtt = mtt_layout(start, buf.len() as u64);
        if mtt.pages > MAX_MR_PAGES as u64 {
            let e = Error::ExceedsLimit {
                limit: Limit::MrPages,
                requested: mtt.pages,
                max: MAX_MR_PAGES as u64,
            };
            return Err((e, Some(buf)));
        }
        let pages = mtt.pages as usize;
        let key_byte = {
            let mut ctl = self.dev.ctl.lock();
            ctl.key_byte = ctl.key_byte.wrapping_add(1);
            ctl.key_byte
        };
        let len = CreateMkeyIn::BYTES + 8 * pages;
        // The message (up to 8 KiB) is built in DMA memory used as plain memory, not on the
        // stack (bare-metal stacks are small).
        let mut scratch = match self.dev.hal().dma_alloc(len, 64) {
            Ok(b) => b,
            Err(e) => return Err((e.into(), Some(buf))),
        };
        let i = scratch.as_mut_slice();
        let built = (|| -> Result<(), Error> {
            let mut v = input::<CreateMkey>(&mut i[..len])?;
            v.set(
                create_mkey_in::translations_octword_actual_size,
                mtt_octwords(pages as u32),
            );
            let mut c = v.sub(create_mkey_in::memory_key_mkey_entry);
            set_access_mode(&mut c, mkc_access_mode::MTT);
            c.set(mkc::lr, 1u8)
                .set(mkc::lw, access.contains(AccessFlags::LOCAL_WRITE))
                .set(mkc::rr, access.contains(AccessFlags::REMOTE_READ))
                .set(mkc::rw, access.contains(AccessFlags::REMOTE_WRITE))
                .set(mkc::a, access.contains(AccessFlags::REMOTE_ATOMIC))
                .set(mkc::qpn, MKC_QPN_NONE)
                .set(mkc::mkey_7_0, key_byte)
                .set(mkc::pd, self.pdn().raw())
                .set(mkc::start_addr, start)
                .set(mkc::len, buf.len() as u64)
                .set(mkc::translations_octword_size, mtt_octwords(pages as u32))
                .set(mkc::log_page_size, mtt.log_page as u8);
            for k in 0..pages {
                let page = mtt.first + ((k as u64) << mtt.log_page);
                v.set_array(create_mkey_in::klm_pas_mtt, k, page)?;
            }
            Ok(())
        })();
        if let Err(e) = built {
            return Err((e, Some(buf)));
        }
        let mut o = [0u8; CreateMkeyOut::BYTES];
        match self.dev.exec::<CreateMkey>(&mut i[..len], &mut o) {
            Ok(()) => {}
            Err(e @ Error::Command(_)) => return Err((e, Some(buf))),
            Err(e) => {
                // The device may hold the key: the buffer is never freed.
                buf.leak();
                return Err((e, None));
            }
        }
        let index = match View::<CreateMkeyOut>::new_checked(&o) {
            Ok(v) => v.get32(create_mkey_out::mkey_index),
            Err(e) => return Err((e.into(), Some(buf))),
        };
        Ok(Mr {
            pd: self,
            buf: Some(buf),
            index,
            key: idx_to_mkey(index, key_byte),
            access,
        })
    }
}

/// The local key of a memory region this driver registered: only [`Mr::lkey`] makes one,
/// so a scatter/gather entry can never carry a special key (the device's reserved lkey
/// addresses memory without any region's checks). A key can outlive its region: posting with
/// it after `ibv_dereg_mr` fails at the device (a local protection error), as ibverbs says.
///
/// ```compile_fail,E0423
/// let k = bareverbs::verbs::Lkey(0x100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Lkey(u32);

impl Lkey {
    /// A key as the device encodes it (the driver's unit tests).
    #[cfg(test)]
    pub(crate) const fn from_raw(key: u32) -> Self {
        Lkey(key)
    }

    /// The key of a memory key the driver created (an indirect key, `dv_mkey.rs`).
    pub(crate) const fn new(key: u32) -> Self {
        Lkey(key)
    }

    /// The key as the device encodes it.
    pub const fn raw(self) -> u32 {
        self.0
    }
}

impl core::fmt::Display for Lkey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl<H: Hal> Mr<'_, '_, H> {
    /// The local key.
    pub fn lkey(&self) -> Lkey {
        Lkey(self.key)
    }

    /// The remote key.
    pub fn rkey(&self) -> Rkey {
        Rkey(self.key)
    }

    /// The region's address in work requests (its IOVA).
    pub fn addr(&self) -> u64 {
        self.buf.as_ref().map_or(0, |b| b.iova().0)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.as_ref().map_or(0, SharedDma::len)
    }

    /// True for an empty region (never: registration refuses them).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The access the region grants.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The memory, for reading and writing (volatile: the device may access it).
    pub fn buf(&self) -> &SharedDma<H::Dma> {
        match &self.buf {
            Some(b) => b,
            // INVARIANT: buf is Some from registration until dereg/drop take it.
            None => unreachable!("a live Mr always holds its buffer"),
        }
    }

    fn destroy(&self) -> Result<(), Error> {
        let mut i = [0u8; DestroyMkeyIn::BYTES];
        input::<DestroyMkey>(&mut i)?.set(destroy_mkey_in::mkey_index, self.index);
        let mut o = [0u8; DestroyMkeyOut::BYTES];
        self.pd.dev.exec::<DestroyMkey>(&mut i, &mut o)
    }

    /// Deregisters the region (`ibv_dereg_mr`) and returns its buffer.
    ///
    /// # Errors
    /// A command error; the region stays registered and is returned.
    pub fn dereg(mut self) -> Result<SharedDma<H::Dma>, (Error, Self)> {
        match self.destroy() {
            Ok(()) => match self.buf.take() {
                Some(b) => Ok(b),
                None => unreachable!("a live Mr always holds its buffer"),
            },
            Err(e) => Err((e, self)),
        }
    }
}

impl<H: Hal> Drop for Mr<'_, '_, H> {
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else { return };
        if let Err(e) = self.destroy() {
            warn!("DESTROY_MKEY {:#x}: {}; leaking the region", self.key, e);
            buf.leak();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest aligned frame holding the range, as `ib_umem_find_best_pgsz` picks it.
    #[test]
    fn translation_pages_are_the_smallest_frame_holding_the_range() {
        let l = |log_page, first, pages| MttLayout {
            log_page,
            first,
            pages,
        };
        // Inside one 4 KiB page.
        assert_eq!(mtt_layout(0x1234, 1), l(12, 0x1000, 1));
        assert_eq!(mtt_layout(0x1000, 0x1000), l(12, 0x1000, 1));
        // 0x1000..0x3000 crosses an 8 KiB boundary: the 16 KiB frame at 0 holds it.
        assert_eq!(mtt_layout(0x1000, 0x2000), l(14, 0, 1));
        // 16 MiB from a 2 MiB boundary (4096 pages of 4 KiB before): one 32 MiB page.
        assert_eq!(mtt_layout(0x20_0000, 16 << 20), l(25, 0, 1));
        // Past 2 GiB the page size stops growing: 5 GiB from 0x7000 spans three 2 GiB pages.
        assert_eq!(mtt_layout(0x7000, 5 << 30), l(31, 0, 3));
        // The last byte of the address space.
        assert_eq!(
            mtt_layout(u64::MAX - 0xfff, 0x1000),
            l(12, u64::MAX - 0xfff, 1)
        );
        // Every range is covered: first page at or below the start, last page end above the end.
        for (start, len) in [
            (0x1fffu64, 2u64),
            (0x3000, 0x10_0001),
            (0x8000_0000, 1 << 33),
        ] {
            let m = mtt_layout(start, len);
            assert!(m.first <= start && m.first % (1 << m.log_page) == 0);
            assert!(m.first + (m.pages << m.log_page) >= start + len);
            assert!(m.first + ((m.pages - 1) << m.log_page) < start + len);
        }
    }
}
