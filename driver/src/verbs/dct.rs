//! DC targets (`mlx5dv_create_qp` with `MLX5DV_DCTYPE_DCT`): the responder end of the DC
//! transport. Any DC initiator that knows the DCT's number and access key can send to it;
//! it answers as an RC responder would, taking receives from its SRQ and completing them on
//! its CQ.
//!
//! As Linux 6.12 mlx5_ib does (`mlx5_ib_modify_dct`, qpc.c `mlx5_core_create_dct` and
//! `mlx5_core_destroy_dct`): the DCT exists only in the driver until it is modified to RTR,
//! which sends CREATE_DCT with every attribute; destroying it sends DRAIN_DCT, waits for the
//! DCT_DRAINED event, then DESTROY_DCT.

use bareverbs_firmware_cmd::commands::QueryDct;
use bareverbs_firmware_cmd::commands::{ArmDctForKeyViolation, CreateDct, DestroyDct, DrainDct};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, Qpn, View};
use bareverbs_hal::{Hal, SharedDma};
use core::time::Duration;

use crate::device::{input, AsyncEvent, Device};
use crate::error::{Error, Invalid};
use crate::verbs::mr::AccessFlags;
use crate::verbs::pd::Pd;
use crate::verbs::qp::{QpAttr, QpInitAttr};
use crate::verbs::qp_state::{QpAttrMask, QpState};
use crate::wq::book::Book;

/// How long [`Dct::destroy`] waits for DCT_DRAINED before destroying the DCT anyway.
pub const DCT_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A DC target. Destroyed on drop.
pub struct Dct<'p, 'd, H: Hal> {
    pd: &'p Pd<'d, H>,
    cqn: u32,
    srqn: u32,
    access_key: u64,
    state: QpState,
    attr: QpAttr,
    /// Its number once CREATE_DCT ran (at RTR).
    dctn: Option<Qpn>,
    /// The book the tables hold for its number (created with it, so creation cannot fail
    /// for room after CREATE_DCT); `None` once handed to the tables.
    book: Option<SharedDma<H::Dma>>,
    context: u64,
}

/// What QUERY_DCT reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DctStatus {
    /// `dctc.state`: 0 active, 1 draining, 2 drained.
    pub state: u8,
    /// Requests dropped for a wrong access key.
    pub key_violations: u32,
    /// The access key the device holds.
    pub access_key: u64,
}

/// A DCT of `pd` for `attr` (its receive CQ and SRQ), not yet on the device.
pub(crate) fn create<'p, 'd, H: Hal>(
    pd: &'p Pd<'d, H>,
    attr: &QpInitAttr<'_, 'd, H>,
    access_key: u64,
) -> Result<Dct<'p, 'd, H>, Error> {
    let dev = pd.dev;
    let Some(srq) = attr.srq else {
        return Err(Error::InvalidArgument {
            what: Invalid::DctWithoutSrq,
        });
    };
    if !core::ptr::eq(attr.recv_cq.device(), dev) || !core::ptr::eq(srq.device(), dev) {
        return Err(Error::InvalidArgument {
            what: Invalid::ForeignObject,
        });
    }
    let book = dev.hal.dma_alloc(Book::<H>::bytes(0, 0), 64)?.share();
    srq.add_user();
    Ok(Dct {
        pd,
        cqn: attr.recv_cq.cqn().raw(),
        srqn: srq.srqn(),
        access_key,
        state: QpState::Reset,
        attr: QpAttr::default(),
        dctn: None,
        book: Some(book),
        context: attr.qp_context,
    })
}

impl<'d, H: Hal> Dct<'_, 'd, H> {
    /// Its number, which initiators address (known once it reached RTR).
    pub fn dctn(&self) -> Option<Qpn> {
        self.dctn
    }

    /// Its state: RESET, INIT or RTR.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Its access key.
    pub fn access_key(&self) -> u64 {
        self.access_key
    }

    /// The CQ its receives complete on and the SRQ they come from.
    pub fn cqn_srqn(&self) -> (u32, u32) {
        (self.cqn, self.srqn)
    }

    /// The user's value it was created with.
    pub fn context(&self) -> u64 {
        self.context
    }

    /// Modifies the DCT (`ibv_modify_qp` on a DCT, Linux `mlx5_ib_modify_dct`): RESET → INIT
    /// with exactly `STATE | ACCESS_FLAGS | PKEY_INDEX | PORT`, then INIT → RTR with exactly
    /// `STATE | MIN_RNR_TIMER | AV | PATH_MTU`, which creates it on the device.
    ///
    /// # Errors
    /// [`Invalid::DctTransition`] for any other transition or mask; an attribute out of
    /// range ([`Error::InvalidArgument`]); a command error (the DCT stays in INIT).
    pub fn modify(&mut self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        let dev = self.pd.dev;
        let init = QpAttrMask::STATE
            | QpAttrMask::ACCESS_FLAGS
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT;
        let rtr =
            QpAttrMask::STATE | QpAttrMask::MIN_RNR_TIMER | QpAttrMask::AV | QpAttrMask::PATH_MTU;
        let caps = dev.info().caps;
        match (self.state, attr.qp_state) {
            (QpState::Reset, QpState::Init) if mask == init => {
                crate::verbs::qp_attr_check::check_attr(attr, mask, &caps, false)?;
                self.attr.qp_access_flags = attr.qp_access_flags;
                self.attr.pkey_index = attr.pkey_index;
                self.attr.port_num = attr.port_num;
                self.state = QpState::Init;
                Ok(())
            }
            (QpState::Init, QpState::Rtr) if mask == rtr => {
                crate::verbs::qp_attr_check::check_attr(attr, mask, &caps, false)?;
                let mut a = self.attr;
                a.min_rnr_timer = attr.min_rnr_timer;
                a.ah_attr = attr.ah_attr;
                a.path_mtu = attr.path_mtu;
                self.create_on_device(&a)?;
                self.attr = a;
                self.state = QpState::Rtr;
                Ok(())
            }
            _ => Err(Error::InvalidArgument {
                what: Invalid::DctTransition,
            }),
        }
    }

    /// RESET → INIT on `port` with `pkey_index`, granting `access` to remote requests (the
    /// mask Linux takes: `STATE | ACCESS_FLAGS | PKEY_INDEX | PORT`).
    ///
    /// # Errors
    /// As [`Dct::modify`].
    pub fn to_init(&mut self, port: u8, pkey_index: u16, access: AccessFlags) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: access,
            pkey_index,
            port_num: port,
            ..QpAttr::default()
        };
        self.modify(
            &a,
            QpAttrMask::STATE
                | QpAttrMask::ACCESS_FLAGS
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT,
        )
    }

    /// INIT → RTR with path `ah` (its GRH fields, if any), `mtu` and the RNR NAK timer
    /// `min_rnr_timer`: the DCT is created on the device and gets its number.
    ///
    /// # Errors
    /// As [`Dct::modify`].
    pub fn to_rtr(
        &mut self,
        ah: crate::verbs::qp::AhAttr,
        mtu: crate::verbs::qp::Mtu,
        min_rnr_timer: u8,
    ) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: ah,
            path_mtu: mtu,
            min_rnr_timer,
            ..QpAttr::default()
        };
        self.modify(
            &a,
            QpAttrMask::STATE | QpAttrMask::MIN_RNR_TIMER | QpAttrMask::AV | QpAttrMask::PATH_MTU,
        )
    }

    /// CREATE_DCT with attributes `a`, and the DCT's entry in the tables.
    fn create_on_device(&mut self, a: &QpAttr) -> Result<(), Error> {
        let dev = self.pd.dev;
        let Some(book) = self.book.take() else {
            return Err(Error::NotUp);
        };
        if !dev.books.has_room(1) {
            self.book = Some(book);
            return Err(crate::verbs::qp::qp_count_exceeded());
        }
        let mut i = [0u8; CreateDctIn::BYTES];
        {
            let mut v = input::<CreateDct>(&mut i)?;
            let mut c = v.sub(create_dct_in::dct_context_entry);
            let f = a.qp_access_flags;
            let g = &a.ah_attr.grh;
            c.set(dctc::pd, self.pd.pdn().raw())
                .set(dctc::cqn, self.cqn)
                .set(dctc::srqn_xrqn, self.srqn)
                // CQE version 0 for this DCT: its receive completions carry the SRQ number,
                // where the poll finds the receive's `wr_id` (as for QPs on an SRQ).
                .set(dctc::user_index, crate::verbs::xrc::CQE_V0_UIDX)
                .set(dctc::dc_access_key, self.access_key)
                .set(dctc::rre, f.contains(AccessFlags::REMOTE_READ))
                .set(dctc::rwe, f.contains(AccessFlags::REMOTE_WRITE))
                .set(dctc::rae, f.contains(AccessFlags::REMOTE_ATOMIC))
                .set(dctc::pkey_index, a.pkey_index)
                .set(dctc::port, a.port_num)
                .set(dctc::min_rnr_nak, a.min_rnr_timer)
                .set(dctc::mtu, a.path_mtu as u8)
                .set(dctc::tclass, g.traffic_class)
                .set(dctc::flow_label, g.flow_label)
                .set(dctc::my_addr_index, g.sgid_index)
                .set(dctc::hop_limit, g.hop_limit);
        }
        let mut o = [0u8; CreateDctOut::BYTES];
        if let Err(e) = dev.exec::<CreateDct>(&mut i, &mut o) {
            self.book = Some(book);
            return Err(e);
        }
        let dctn = View::<CreateDctOut>::new_checked(&o)?.get32(create_dct_out::dctn);
        let b = match Book::new(dctn, book, 0, 0, [self.cqn, self.cqn]) {
            Ok(b) => b,
            // Not reached: the memory was allocated for these sizes.
            Err(e) => {
                let _ = destroy_on_device(dev, dctn);
                return Err(e.into());
            }
        };
        if let Err(e) = crate::verbs::qp::register(dev, b, [self.cqn, self.cqn]) {
            // Another thread filled the table after the check above.
            let _ = destroy_on_device(dev, dctn);
            return Err(e);
        }
        self.dctn = Some(Qpn(dctn));
        Ok(())
    }

    /// Reads the DCT's state and key-violation count from the device (QUERY_DCT).
    ///
    /// # Errors
    /// [`Error::NotUp`] before RTR (it is not on the device); a command error.
    pub fn query(&self) -> Result<DctStatus, Error> {
        let dctn = self.dctn.ok_or(Error::NotUp)?;
        let dev = self.pd.dev;
        let mut i = [0u8; QueryDctIn::BYTES];
        input::<QueryDct>(&mut i)?.set(query_dct_in::dctn, dctn.raw());
        let mut o = [0u8; QueryDctOut::BYTES];
        dev.exec::<QueryDct>(&mut i, &mut o)?;
        let v = View::<QueryDctOut>::new_checked(&o)?;
        let c = v.sub(query_dct_out::dct_context_entry);
        Ok(DctStatus {
            state: c.get(dctc::state) as u8,
            key_violations: c.get32(dctc::dc_access_key_violation_count),
            access_key: c.get(dctc::dc_access_key),
        })
    }

    /// Asks for one [`AsyncEvent::DctKeyViolation`] at the next request with a wrong access
    /// key (ARM_DCT_FOR_KEY_VIOLATION).
    ///
    /// # Errors
    /// [`Error::NotUp`] before RTR; a command error.
    pub fn arm_key_violation(&self) -> Result<(), Error> {
        let dctn = self.dctn.ok_or(Error::NotUp)?;
        let dev = self.pd.dev;
        let mut i = [0u8; ArmDctIn::BYTES];
        input::<ArmDctForKeyViolation>(&mut i)?.set(arm_dct_in::dct_number, dctn.raw());
        let mut o = [0u8; ArmDctOut::BYTES];
        dev.exec::<ArmDctForKeyViolation>(&mut i, &mut o)
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        let dev = self.pd.dev;
        if let Some(dctn) = self.dctn {
            drain(dev, dctn.raw())?;
            destroy_on_device(dev, dctn.raw())?;
            self.dctn = None;
            // The purge before the book goes, as for a QP (`Qp::destroy`).
            dev.purge_qp_completions(dctn.raw(), [self.cqn, self.cqn]);
            crate::verbs::qp::unregister(dev, dctn.raw(), [self.cqn, self.cqn]);
            dev.reap_orphan_cqs(&[self.cqn]);
        }
        if self.srqn != u32::MAX {
            crate::verbs::srq::remove_user(&mut dev.ctl.lock(), self.srqn);
            self.srqn = u32::MAX;
        }
        Ok(())
    }

    /// Destroys the DCT (`ibv_destroy_qp`): drained, then destroyed.
    ///
    /// # Errors
    /// A command error; the DCT is returned.
    // The DCT is handed back so the caller can retry; without allocation it cannot be boxed.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> Result<(), (Error, Self)> {
        match self.destroy_inner() {
            Ok(()) => Ok(()),
            Err(e) => Err((e, self)),
        }
    }
}

/// DRAIN_DCT, then the DCT_DRAINED event (or [`DCT_DRAIN_TIMEOUT`], or a device in its error
/// state, after which Linux destroys without waiting).
fn drain<H: Hal>(dev: &Device<H>, dctn: u32) -> Result<(), Error> {
    let mut i = [0u8; DrainDctIn::BYTES];
    input::<DrainDct>(&mut i)?.set(drain_dct_in::dctn, dctn);
    let mut o = [0u8; DrainDctOut::BYTES];
    if let Err(e) = dev.exec::<DrainDct>(&mut i, &mut o) {
        return if dev.is_fatal() { Ok(()) } else { Err(e) };
    }
    let deadline = dev.hal.now().after(DCT_DRAIN_TIMEOUT);
    loop {
        dev.poll_events();
        if dev.take_event(AsyncEvent::DctDrained { dctn }) || dev.is_fatal() {
            return Ok(());
        }
        if dev.hal.now() >= deadline {
            warn!("DCT {}: no DCT_DRAINED in time; destroying it", dctn);
            return Ok(());
        }
        dev.hal.relax();
    }
}

fn destroy_on_device<H: Hal>(dev: &Device<H>, dctn: u32) -> Result<(), Error> {
    let mut i = [0u8; DestroyDctIn::BYTES];
    input::<DestroyDct>(&mut i)?.set(destroy_dct_in::dctn, dctn);
    let mut o = [0u8; DestroyDctOut::BYTES];
    dev.exec::<DestroyDct>(&mut i, &mut o)
}

impl<H: Hal> Drop for Dct<'_, '_, H> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_inner() {
            warn!("DESTROY_DCT {}: {}", self.dctn.map_or(0, |d| d.raw()), e);
        }
    }
}
