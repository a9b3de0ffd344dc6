//! Indirect memory keys (`mlx5dv_create_mkey`) and the work requests that lay them out
//! (`mlx5dv_wr_mr_list`, `mlx5dv_wr_mr_interleaved`, `mlx5dv_wr_mkey_configure` with its
//! access and layout setters): seed 004's `MLX5DV_QP_EX_WITH_*` send operations.
//!
//! An indirect key is created empty and free (CREATE_MKEY, access mode KLMS, `umr_en`, as
//! rdma-core 56 verbs.c `mlx5dv_create_mkey`); a UMR work request on a QP of the same PD gives
//! it its layout — a list of (address, length, key) pieces, or an interleaving of pieces
//! repeated with a stride — its access rights and its length, and enables it. Requests that
//! then name the key read and write through that layout. The WQE is rdma-core's (qp.c
//! `mlx5_send_wr_mkey_configure`, `mlx5_send_wr_set_mkey_layout`, `umr_sg_list_create`,
//! `umr_strided_seg_create`): control segment (opcode UMR, the key in `imm`), UMR control
//! segment (inline, the mask of what changes), mkey context, then the entries inline. The
//! request after it is fenced (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`), as rdma-core does, so
//! nothing uses the key before its layout is in place.
//!
//! Signature, crypto, tag-update and remote-invalidate keys are refused by name: this driver
//! has none of those offloads.

use bareverbs_firmware_cmd::commands::{CreateMkey, DestroyMkey};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View, ViewMut};
use bareverbs_hal::Hal;
use bitflags::bitflags;

use crate::device::input;
use crate::error::{DvFeature, DvRefusal};
use crate::error::{Error, Invalid, Limit};
use crate::verbs::mr::{AccessFlags, Lkey};
use crate::verbs::pd::Pd;
use crate::verbs::post::Sge;

bitflags! {
    /// `MLX5DV_MKEY_INIT_ATTR_FLAGS_*`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct MkeyInitFlags: u32 {
        /// An indirect key, laid out by work requests.
        const INDIRECT = 1 << 0;
        /// With a block signature (T10-DIF, CRC).
        const BLOCK_SIGNATURE = 1 << 1;
        /// With crypto.
        const CRYPTO = 1 << 2;
        /// Work requests may change the key's tag (low byte).
        const UPDATE_TAG = 1 << 3;
        /// Remote invalidation allowed.
        const REMOTE_INVALIDATE = 1 << 4;
    }
}

/// `struct mlx5dv_mkey_init_attr` (the PD is the one `create_mkey` is called on).
/// Non-exhaustive (it grows with `comp_mask`): [`MkeyInitAttr::new`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MkeyInitAttr {
    /// What kind of key; [`MkeyInitFlags::INDIRECT`] is required.
    pub create_flags: MkeyInitFlags,
    /// Most entries a layout of it may have.
    pub max_entries: u16,
}

impl MkeyInitAttr {
    /// A key of `create_flags` whose layouts have at most `max_entries` entries.
    pub fn new(create_flags: MkeyInitFlags, max_entries: u16) -> Self {
        MkeyInitAttr {
            create_flags,
            max_entries,
        }
    }
}

/// One piece of an interleaved layout (`struct mlx5dv_mr_interleaved`): each round takes
/// `bytes_count` bytes at `addr` through `lkey`, then skips `bytes_skip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInterleaved {
    /// Address of the first round's bytes.
    pub addr: u64,
    /// Bytes taken per round.
    pub bytes_count: u32,
    /// Bytes skipped after them before the next round.
    pub bytes_skip: u32,
    /// Key of the memory.
    pub lkey: Lkey,
}

/// The layout a [`SendBatch::mkey_configure`](crate::verbs::SendBatch::mkey_configure) gives
/// (`mlx5dv_wr_set_mkey_layout_list` / `_interleaved`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MkeyLayout<'a> {
    /// Leave the key's layout as it is.
    Unchanged,
    /// The pieces one after the other.
    List(&'a [Sge]),
    /// `repeat_count` rounds over the pieces.
    Interleaved {
        /// Rounds.
        repeat_count: u32,
        /// Pieces.
        entries: &'a [MrInterleaved],
    },
}

/// What a [`SendBatch::mkey_configure`](crate::verbs::SendBatch::mkey_configure) sets
/// (`struct mlx5dv_mkey_conf_attr` plus the setters rdma-core calls after
/// `mlx5dv_wr_mkey_configure`). Signature and crypto setters have no field: this driver has
/// no such keys. Non-exhaustive (they would add fields): [`MkeyConf::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MkeyConf<'a> {
    /// New access rights (`mlx5dv_wr_set_mkey_access_flags`), if any.
    pub access: Option<AccessFlags>,
    /// New layout.
    pub layout: MkeyLayout<'a>,
}

impl<'a> MkeyConf<'a> {
    /// `layout`, the access rights unchanged.
    pub fn new(layout: MkeyLayout<'a>) -> Self {
        MkeyConf {
            access: None,
            layout,
        }
    }
}

/// An indirect memory key (`struct mlx5dv_mkey`). Destroyed on drop.
pub struct DvMkey<'p, 'd, H: Hal> {
    pd: &'p Pd<'d, H>,
    index: u32,
    key: u32,
    /// Entries a layout may have (`num_desc`: `max_entries` rounded up to 4).
    entries: u16,
    live: bool,
}

impl<'d, H: Hal> Pd<'d, H> {
    /// Creates an indirect memory key of this PD (`mlx5dv_create_mkey`), free until a work
    /// request lays it out.
    ///
    /// # Errors
    /// [`Invalid::MkeyFlags`] without [`MkeyInitFlags::INDIRECT`] or with bits outside
    /// [`MkeyInitFlags`], [`Invalid::ZeroEntries`] for `max_entries` 0;
    /// [`Error::DvRefused`] for a signature, crypto, tag-update or remote-invalidate key, or
    /// a device without indirect keys; [`Error::ExceedsLimit`] past `log_max_klm_list_size`;
    /// a command error.
    pub fn create_mkey(&self, attr: &MkeyInitAttr) -> Result<DvMkey<'_, 'd, H>, Error> {
        let f = attr.create_flags;
        if !f.contains(MkeyInitFlags::INDIRECT) || f.bits() & !MkeyInitFlags::all().bits() != 0 {
            return Err(Error::InvalidArgument {
                what: Invalid::MkeyFlags,
            });
        }
        for (flag, needs) in [
            (MkeyInitFlags::BLOCK_SIGNATURE, "signature offload"),
            (MkeyInitFlags::CRYPTO, "crypto offload"),
            (
                MkeyInitFlags::UPDATE_TAG,
                "mkey tag updates by work request",
            ),
            (MkeyInitFlags::REMOTE_INVALIDATE, "remote invalidation"),
        ] {
            if f.contains(flag) {
                return Err(Error::DvRefused {
                    feature: DvFeature::MkeyConfigure,
                    why: DvRefusal::NotInDriver { needs },
                });
            }
        }
        if attr.max_entries == 0 {
            return Err(Error::InvalidArgument {
                what: Invalid::ZeroEntries,
            });
        }
        let caps = self.dev.info().caps;
        if !caps.umr_indirect_mkey {
            return Err(Error::DvRefused {
                feature: DvFeature::MkeyConfigure,
                why: DvRefusal::NoDeviceCap {
                    cap: "umr_indirect_mkey_disabled clear",
                },
            });
        }
        // Rounded up to 4 as rdma-core's `num_desc` (in 32 bits: u16::MAX rounds past 16).
        let rounded = u32::from(attr.max_entries).next_multiple_of(4);
        let max = 1u64 << caps.log_max_klm_list_size.min(32);
        let Some(entries) = u16::try_from(rounded).ok().filter(|&e| u64::from(e) <= max) else {
            return Err(Error::ExceedsLimit {
                limit: Limit::MkeyEntries,
                requested: attr.max_entries.into(),
                max: max.min(u64::from(u16::MAX - 3)),
            });
        };
        let mut i = [0u8; CreateMkeyIn::BYTES];
        {
            let mut v = input::<CreateMkey>(&mut i)?;
            let mut c = v.sub(create_mkey_in::memory_key_mkey_entry);
            set_access_mode(&mut c, mkc_access_mode::KLMS);
            c.set(mkc::free, 1u8)
                .set(mkc::umr_en, 1u8)
                .set(mkc::lr, 1u8)
                .set(mkc::qpn, MKC_QPN_NONE)
                .set(mkc::mkey_7_0, 0u8)
                .set(mkc::pd, self.pdn().raw())
                .set(mkc::translations_octword_size, u32::from(entries));
        }
        let mut o = [0u8; CreateMkeyOut::BYTES];
        self.dev.exec::<CreateMkey>(&mut i, &mut o)?;
        let index = View::<CreateMkeyOut>::new_checked(&o)?.get32(create_mkey_out::mkey_index);
        Ok(DvMkey {
            pd: self,
            index,
            key: idx_to_mkey(index, 0),
            entries,
            live: true,
        })
    }
}

impl<H: Hal> DvMkey<'_, '_, H> {
    /// The key as a local key (`lkey`): scatter/gather entries through its layout.
    pub fn lkey(&self) -> Lkey {
        Lkey::new(self.key)
    }

    /// The key as a remote key (`rkey`): RDMA through its layout.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// Entries a layout of it may have.
    pub fn max_entries(&self) -> u16 {
        self.entries
    }

    /// Its PD's number.
    pub(crate) fn pdn(&self) -> u32 {
        self.pd.pdn().raw()
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        if !self.live {
            return Ok(());
        }
        let mut i = [0u8; DestroyMkeyIn::BYTES];
        input::<DestroyMkey>(&mut i)?.set(destroy_mkey_in::mkey_index, self.index);
        let mut o = [0u8; DestroyMkeyOut::BYTES];
        self.pd.dev.exec::<DestroyMkey>(&mut i, &mut o)?;
        self.live = false;
        Ok(())
    }

    /// Destroys the key (`mlx5dv_destroy_mkey`).
    ///
    /// # Errors
    /// A command error; the key is returned.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> Result<(), (Error, Self)> {
        match self.destroy_inner() {
            Ok(()) => Ok(()),
            Err(e) => Err((e, self)),
        }
    }
}

impl<H: Hal> Drop for DvMkey<'_, '_, H> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_inner() {
            warn!("DESTROY_MKEY {:#x}: {}", self.key, e);
        }
    }
}

/// The UMR WQE of `mkey_configure`, built apart from the ring (it is written with one copy):
/// its bytes and its length in 16-byte units.
pub(crate) struct UmrWqeBytes {
    pub(crate) bytes: [u8; MAX_UMR_WQE],
    pub(crate) units: usize,
}

/// Largest UMR WQE: what the 6-bit DS count of a control segment can say (63 units).
pub(crate) const MAX_UMR_WQE: usize = wqe_ctrl_seg::ds.max() as usize * SEND_WQE_DS;

/// Builds the UMR WQE that gives `key` what `conf` says; the control segment's first 8 bytes
/// (opcode, index, QPN, DS) and `fm_ce_se` are the caller's. `max_entries` bounds the layout
/// (the key's and the QP's inline room, as rdma-core bounds it); a layout the WQE cannot hold
/// is refused too.
///
/// Every byte goes through the `firmware-cmd` layouts: [`UmrWqe`] (control, UMR control and
/// mkey segments), then [`Klm`] entries or a [`WqeUmrRepeatBlockSeg`] and its
/// [`WqeUmrRepeatEntSeg`]s, zeros up to a whole [`UMR_MTT_ALIGNMENT`].
pub(crate) fn build(
    key: u32,
    conf: &MkeyConf<'_>,
    max_entries: usize,
) -> Result<UmrWqeBytes, Error> {
    let too_many = || Error::InvalidArgument {
        what: Invalid::TooManySge,
    };
    let mut w = UmrWqeBytes {
        bytes: [0u8; MAX_UMR_WQE],
        units: UmrWqe::BYTES / SEND_WQE_DS,
    };
    let (head, xlt) = w.bytes.split_at_mut(UmrWqe::BYTES);
    let mut v = ViewMut::<UmrWqe>::new_checked(head)?;
    v.sub(umr_wqe::ctrl_seg).set(wqe_ctrl_seg::imm, key);
    let mut mask = mkey_mask::FREE | mkey_mask::KEY;
    // The mkey context: free 0 (enabled), the key's tag, rights, length.
    v.sub(umr_wqe::mkey_seg)
        .set(mkc::qpn, MKC_QPN_NONE)
        .set(mkc::mkey_7_0, key as u8);
    if let Some(a) = conf.access {
        let known = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        if !known.contains(a) {
            return Err(Error::InvalidArgument {
                what: Invalid::AccessFlags,
            });
        }
        mask |= mkey_mask::LW | mkey_mask::RR | mkey_mask::RW | mkey_mask::A;
        let bit = |f| u8::from(a.contains(f));
        v.sub(umr_wqe::mkey_seg)
            .set(mkc::a, bit(AccessFlags::REMOTE_ATOMIC))
            .set(mkc::rw, bit(AccessFlags::REMOTE_WRITE))
            .set(mkc::rr, bit(AccessFlags::REMOTE_READ))
            .set(mkc::lw, bit(AccessFlags::LOCAL_WRITE));
    }
    // The entries fill whole 64-byte units (zeros after the last): `n` octowords must leave
    // the WQE within its 63 units. Checked after the entries themselves, so a bad entry is
    // named first.
    let fits = |n: usize| (n * UMR_OCTOWORD).next_multiple_of(UMR_MTT_ALIGNMENT) <= xlt.len();
    let (len, octowords) = match conf.layout {
        MkeyLayout::Unchanged => (None, 0),
        MkeyLayout::List(sges) => {
            if sges.is_empty() {
                return Err(Error::InvalidArgument {
                    what: Invalid::ZeroEntries,
                });
            }
            if sges.len() > max_entries {
                return Err(too_many());
            }
            if sges.iter().any(|s| (s.length as i32) < 0) {
                return Err(Error::InvalidArgument {
                    what: Invalid::SgeLength,
                });
            }
            if !fits(sges.len()) {
                return Err(too_many());
            }
            for (s, e) in sges.iter().zip(xlt.chunks_exact_mut(Klm::BYTES)) {
                ViewMut::<Klm>::new_checked(e)?
                    .set(klm::byte_count, s.length)
                    .set(klm::mkey, s.lkey.raw())
                    .set(klm::address, s.addr);
            }
            let total = sges.iter().map(|s| u64::from(s.length)).sum();
            (Some(total), sges.len())
        }
        MkeyLayout::Interleaved {
            repeat_count,
            entries,
        } => {
            if entries.is_empty() || repeat_count == 0 {
                return Err(Error::InvalidArgument {
                    what: Invalid::ZeroEntries,
                });
            }
            if entries.len() + 1 > max_entries {
                return Err(too_many());
            }
            let bad_length = || Error::InvalidArgument {
                what: Invalid::SgeLength,
            };
            // The entry's byte count and stride are 16-bit fields, a round's bytes 32 bits.
            let fields = |e: &MrInterleaved| {
                let stride = e.bytes_count.checked_add(e.bytes_skip)?;
                Some((
                    u16::try_from(e.bytes_count).ok()?,
                    u16::try_from(stride).ok()?,
                ))
            };
            if entries.iter().any(|e| fields(e).is_none()) {
                return Err(bad_length());
            }
            let round: u64 = entries.iter().map(|e| u64::from(e.bytes_count)).sum();
            let round32 = u32::try_from(round).map_err(|_| bad_length())?;
            if !fits(entries.len() + 1) {
                return Err(too_many());
            }
            let (block, ents) = xlt.split_at_mut(WqeUmrRepeatBlockSeg::BYTES);
            for (e, seg) in entries
                .iter()
                .zip(ents.chunks_exact_mut(WqeUmrRepeatEntSeg::BYTES))
            {
                let (count, stride) = fields(e).ok_or_else(bad_length)?;
                ViewMut::<WqeUmrRepeatEntSeg>::new_checked(seg)?
                    .set(wqe_umr_repeat_ent_seg::stride, stride)
                    .set(wqe_umr_repeat_ent_seg::byte_count, count)
                    .set(wqe_umr_repeat_ent_seg::memkey, e.lkey.raw())
                    .set(wqe_umr_repeat_ent_seg::va, e.addr);
            }
            ViewMut::<WqeUmrRepeatBlockSeg>::new_checked(block)?
                .set(wqe_umr_repeat_block_seg::byte_count, round32)
                .set(wqe_umr_repeat_block_seg::op, UMR_REPEAT_BLOCK_OP)
                .set(wqe_umr_repeat_block_seg::repeat_count, repeat_count)
                .set(wqe_umr_repeat_block_seg::num_ent, entries.len() as u16);
            (Some(round * u64::from(repeat_count)), entries.len() + 1)
        }
    };
    let mut xlt_octowords = 0;
    if let Some(len) = len {
        mask |= mkey_mask::LEN;
        v.sub(umr_wqe::mkey_seg).set(mkc::len, len);
        let padded = (octowords * UMR_OCTOWORD).next_multiple_of(UMR_MTT_ALIGNMENT);
        xlt_octowords = padded / UMR_OCTOWORD;
        w.units += padded / SEND_WQE_DS;
    }
    v.sub(umr_wqe::umr_ctrl_seg)
        .set(wqe_umr_ctrl_seg::flags, umr_flags::INLINE)
        .set(wqe_umr_ctrl_seg::xlt_octowords, xlt_octowords as u16)
        .set(wqe_umr_ctrl_seg::mkey_mask, mask);
    Ok(w)
}
