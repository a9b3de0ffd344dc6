//! Memory regions (`ibv_reg_mr`): DMA memory registered with a memory key whose MTT maps it
//! page by page (CREATE_MKEY in MTT mode; mlx5-reference 06 §4).
//!
//! A region owns its buffer while registered: the memory cannot be freed while the device may
//! use it, and [`Mr::dereg`] hands it back.

use bareverbs_firmware_cmd::commands::{CreateMkey, DestroyMkey};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, Lkey, Rkey, View};
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

/// Page size of the translation table.
const MTT_PAGE: u64 = 4096;
/// Most MTT entries one CREATE_MKEY carries.
pub const MAX_MR_PAGES: usize = (MAX_MESSAGE - CreateMkeyIn::BYTES) / 8;

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
    /// buffer, [`Error::ExceedsLimit`] for more than [`MAX_MR_PAGES`] pages, or a command
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
        let start = buf.iova().0;
        let first = start & !(MTT_PAGE - 1);
        let pages = ((start + buf.len() as u64 - first).div_ceil(MTT_PAGE)) as usize;
        if pages > MAX_MR_PAGES {
            let e = Error::ExceedsLimit {
                limit: Limit::MrPages,
                requested: pages as u64,
                max: MAX_MR_PAGES as u64,
            };
            return Err((e, Some(buf)));
        }
        let key_byte = {
            let mut ctl = self.dev.ctl.lock();
            ctl.key_byte = ctl.key_byte.wrapping_add(1);
            ctl.key_byte
        };
        let mut i = [0u8; MAX_MESSAGE];
        let len = CreateMkeyIn::BYTES + 8 * pages;
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
                .set(mkc::log_page_size, 12u8);
            for k in 0..pages {
                v.set_array(create_mkey_in::klm_pas_mtt, k, first + k as u64 * MTT_PAGE)?;
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
