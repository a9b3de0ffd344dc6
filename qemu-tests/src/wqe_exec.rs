//! Where the model executes WQEs: the send doorbell, segment parsing, key checks, data movement
//! between QPs of this HCA, and the requester and responder completions (mlx5-reference 05
//! §3–6, 04 §6).
//!
//! What is modelled: RC, UC and UD SEND (with immediate), RC/UC RDMA WRITE (with immediate),
//! RC RDMA READ and 8-byte atomics; lkey/rkey validity, PD and rights; receive-buffer length;
//! UD Q_Key and the 40-byte GRH area; a missing receive (RC: RNR retries exhausted when
//! `rnr_retry` is 0, otherwise the request waits for the next doorbell; UC and UD: dropped).
//! Receives on a QP with `rq_type` SRQ take the WQEs of its SRQ/RMP in linked-list order
//! (rdma-core 56 providers/mlx5/srq.c), with the WQE's index as the CQE's `wqe_counter`, and
//! may raise the SRQ limit event. Every CQE carries `srqn_uidx` as CQE version 1 defines it
//! ([`Hca::cqe_srqn_uidx`]).
//!
//! Transport (RC, and UC for sequence numbers only). Messages are whole: no packet is lost,
//! reordered or split, so what follows is about a requester and a responder whose PSNs or
//! states disagree.
//! - PSNs: a request spends `ceil(len / path MTU)` PSNs (at least one; READ counts its
//!   response packets, an atomic one) from the requester's `next_send_psn`, and the responder's
//!   `next_rcv_psn` advances the same way when it accepts it; both are 24 bits and wrap, and
//!   QUERY_QP reports them.
//! - RC responder: PSN as expected, executed and acknowledged; ahead of it (within half the
//!   PSN space), NAK PSN sequence error; behind it, a duplicate: SEND and WRITE acknowledged and
//!   not executed again (the requester completes with success and nothing is delivered), READ
//!   read again, an atomic answered with the target's current value, unchanged.
//! - UC responder: a message whose PSN is not the expected one starts a new message, as a
//!   First/Only packet does after a gap (Linux rxe `check_psn`); it is delivered and the
//!   expected PSN resynchronises to the sender's.
//! - RC retransmission: no response (no such QP, a QP not in RTR/RTS/SQE/SQD or of another
//!   type, a LID nobody owns) or a PSN sequence error NAK makes the requester send again, back
//!   to back (there is no ACK timer): after `retry_count` retries the request completes with
//!   RETRY_EXC_ERR. With `ack_timeout` 0 (infinite) a request without response is sent again
//!   once per engine round for ever: no completion, the QP stays in RTS and can be destroyed.
//!   [`Hca::qp_retries`] counts the retries.
//! - Remote invalid request (RC): an operation the responder QP does not enable (rwe, rre, rae;
//!   mlx5 clears rre and rae for `max_dest_rd_atomic` 0), an RDMA longer than 2^31 bytes, a
//!   misaligned atomic, a receive too small. Remote access error: the rkey, its rights or
//!   bounds. A message longer than the requester's `log_msg_max` fails locally (LOC_LEN_ERR).
//! - Receive completions carry the DLID path bits (the DLID's low LMC bits) in `ml_path`.
//!
//! An error completion moves an RC QP to ERR and flushes what is outstanding, send and
//! receive. A send error on a UC or UD QP moves it to SQE instead: the other send requests,
//! and any posted later, are flushed, receives go on, and SQERR2RTS_QP resumes sending.

use bareverbs_firmware_cmd::ifc::{
    eqe_qp_srq, event_type, fm_ce_se, qpc_scatter, wqe_data_seg, wqe_opcode, wqe_srq_next_seg,
    CqeOpcode, EqeQpSrq, WqeAtomicSeg, WqeCtrlSeg, WqeDataSeg, WqeDatagramSeg, WqeInlineSeg,
    WqeRaddrSeg, WqeSrqNextSeg, WqeXrcSeg, EQE_DCT_DCTN, INLINE_SEG,
};
use bareverbs_firmware_cmd::layout::{Layout, View, ViewMut};
use bareverbs_firmware_cmd::wqe_codec::{self as codec, ctrl, datagram, inline, raddr, xrc};

use crate::cqe_write::{err_cqe, ok_cqe, CqeFields};
use crate::dma::{AddressSpaceExt, DmaFault};
use crate::hca::Hca;
use crate::mkey::{KeyFault, Pieces};
use crate::pma::Traffic;
use crate::qp::{Qp, QpState, ServiceType, CQE_V0_UIDX, PSN_MASK};

/// The CQE error syndromes the model writes: short names for the values of
/// [`CqeSyndrome`](bareverbs_firmware_cmd::ifc::CqeSyndrome), the one table.
pub(crate) mod synd {
    use bareverbs_firmware_cmd::ifc::CqeSyndrome as S;
    pub const LOCAL_LENGTH: u8 = S::LocalLengthErr.raw();
    pub const LOCAL_QP_OP: u8 = S::LocalQpOpErr.raw();
    pub const LOCAL_PROT: u8 = S::LocalProtErr.raw();
    pub const REMOTE_INVAL_REQ: u8 = S::RemoteInvalReqErr.raw();
    pub const REMOTE_ACCESS: u8 = S::RemoteAccessErr.raw();
    pub const TRANSPORT_RETRY_EXC: u8 = S::TransportRetryExcErr.raw();
    pub const RNR_RETRY_EXC: u8 = S::RnrRetryExcErr.raw();
    pub const WR_FLUSH: u8 = S::WrFlushErr.raw();
}

/// The data of a QP/SRQ asynchronous event EQE (`eqe_qp_srq`): resource type and number.
pub(crate) fn qp_srq_event_data(ty: u8, n: u32) -> [u8; 28] {
    let mut d = [0u8; 28];
    if let Ok(mut v) = ViewMut::<EqeQpSrq>::new_checked(&mut d[..]) {
        v.set(eqe_qp_srq::r#type, ty).set(eqe_qp_srq::qp_srq_n, n);
    }
    d
}

/// Why a send WQE could not be taken.
pub(crate) enum WqeFault {
    /// Its basic blocks could not be read: the queue cannot go on (a catastrophic error).
    Fetch(DmaFault),
    /// It was read and does not parse: a local QP operation error, completed as such.
    Malformed,
    /// It is a UMR WQE (on a user QP: `mlx5dv_wr_mr_list` and friends), which `umr.rs`
    /// executes.
    Umr,
}

impl From<DmaFault> for WqeFault {
    fn from(f: DmaFault) -> Self {
        WqeFault::Fetch(f)
    }
}

/// A receive WQE found for a message.
pub(crate) struct Recv {
    /// What the CQE's `wqe_counter` carries: the RQ's consumer counter, or the SRQ WQE's index.
    counter: u16,
    sges: SgeList,
    /// Taken from SRQ `.0`, whose head then moves to `.1`.
    srq: Option<(u32, u16)>,
}

/// The XRC SRQ an XRC request is delivered through, found by [`Hca::xrc_target_srq`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct XrcTarget {
    srqn: u32,
    /// `xrc_srqc.pd`: the PD of its WQEs' lkeys and of the request's rkey.
    pd: u32,
    /// `xrc_srqc.cqn`: where its receives complete.
    cqn: u32,
}

/// One gather/scatter entry of a WQE.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sge {
    pub lkey: u32,
    pub addr: u64,
    pub len: u32,
}

/// A WQE's gather or scatter list; up to four entries without allocating.
pub(crate) type SgeList = crate::small_list::SmallList<Sge, 4>;

/// The largest send WQE: `ds` is six bits of 16-byte units, so 63 units in 16 basic blocks.
const MAX_SEND_WQE: usize = 16 * 64;

/// A parsed send WQE; inline data stays in the bytes it was read into.
struct SendWqe<'a> {
    opcode: u8,
    wqe_index: u16,
    bbs: u16,
    signaled: bool,
    solicited: bool,
    imm: u32,
    raddr: u64,
    rkey: u32,
    swap_add: u64,
    compare: u64,
    ud_dqpn: u32,
    ud_qkey: u32,
    /// Service level from the UD address vector.
    ud_sl: u8,
    /// Destination LID from the UD address vector.
    ud_rlid: u16,
    /// The UD address vector's global route, when its GRH flag is set.
    ud_grh: Option<AvGrh>,
    inline: Option<&'a [u8]>,
    sges: SgeList,
    /// The XRC segment's `xrc_srqn` (XRC initiator QPs).
    xrc_srqn: Option<u32>,
    /// DCI: the address vector's DC access key (the first 8 bytes of `mlx5_av`, where UD has
    /// its Q_Key) and the control segment's stream (`dci_stream_channel_id`).
    dc_key: u64,
    dci_stream: u16,
    /// The control segment's fence mode (`fm_ce_se` bits 7:5).
    fence_mode: u8,
}

/// The global route of a UD address vector (`mlx5_av` bytes 26–47).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AvGrh {
    tclass: u8,
    hop_limit: u8,
    flow_label: u32,
    sgid_index: u8,
    dgid: [u8; 16],
}

/// What a request asks of the responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    Write,
    Read,
    Atomic { fetch_add: bool },
}

/// A request on the wire, reduced to what the responder needs.
#[derive(Clone)]
pub(crate) struct Request {
    pub(crate) kind: Kind,
    pub(crate) st: ServiceType,
    /// PSN of the request's first packet (RC and UC).
    pub(crate) psn: u32,
    pub(crate) src_qpn: u32,
    pub(crate) slid: u16,
    /// The destination LID the request was sent to (its low LMC bits are the path bits).
    pub(crate) dlid: u16,
    pub(crate) sl: u8,
    pub(crate) dst_qpn: u32,
    pub(crate) payload: Vec<u8>,
    pub(crate) imm: Option<u32>,
    pub(crate) solicited: bool,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u64,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) qkey: u32,
    /// The 40-byte GRH the packet carries (UD with a global route), as the receiver's HCA
    /// writes it into the start of the receive buffer.
    pub(crate) grh: Option<[u8; 40]>,
    /// Packets the message takes on the wire (and a READ's response), for the port counters.
    pub(crate) pkts: u32,
    /// XRC: the XRC SRQ at the target the request is for (the XRCETH's XRCSRQ).
    pub(crate) xrc_srqn: Option<u32>,
    /// DC: the access key the DCT must hold.
    pub(crate) dc_key: u64,
}

/// The responder's answer.
pub(crate) enum Response {
    /// Done; data for READ and atomics.
    Ack(Vec<u8>),
    /// Refused with a requester syndrome.
    Nak(u8),
    /// No receive posted (RC), with the responder's RNR timer encoding.
    Rnr(u8),
    /// Silently dropped (UC, UD) or unanswered.
    Dropped,
    /// No such QP behind that LID, or not one that answers: no response at all (RC: the
    /// requester retransmits until `retry_count` runs out).
    NoQp,
    /// NAK "PSN sequence error": the request's PSN is ahead of the one expected (RC: the
    /// requester retransmits, each retry counting against `retry_count`).
    NakSeq,
}

impl Request {
    /// Bytes the message carries (SEND, WRITE) or asks for (READ); 8 for atomics.
    fn msg_len(&self) -> u64 {
        match self.kind {
            Kind::Send | Kind::Write => self.payload.len() as u64,
            Kind::Read => self.len,
            Kind::Atomic { .. } => 8,
        }
    }
}

/// Largest RDMA length the IB spec allows (ibv_poll_cq(3): a longer RDMA request is a remote
/// invalid request).
const MAX_RDMA_LEN: u64 = 1 << 31;

/// Packets a request of `kind` and `len` bytes spends in the PSN space at path MTU `mtu` (IB
/// enum): SEND, WRITE and READ (its response packets) one per MTU, at least one; atomics one.
fn packets(kind: Kind, len: u64, mtu: u8) -> u32 {
    let mtu_bytes = 128u64 << mtu.clamp(1, 5);
    match kind {
        Kind::Atomic { .. } => 1,
        _ => u32::try_from(len.div_ceil(mtu_bytes).max(1)).unwrap_or(u32::MAX),
    }
}

/// `psn + n` in the 24-bit PSN space.
fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// What happened to a send WQE.
enum Outcome {
    /// Completed; `byte_cnt` for READ and atomics.
    Done(u32),
    /// A READ or atomic completed whose result goes in its CQE, not to memory (requester
    /// scatter to CQE).
    DoneInline(Vec<u8>),
    /// Completed with an error syndrome.
    Failed(u8),
    /// Leave it queued (receiver not ready, retries left).
    Wait,
    /// Completed with WR_FLUSH_ERR already (a DCI stream in error): the queue goes on.
    Flushed,
}

impl Hca {
    /// Send doorbell (BlueFlame register): the low dword carries `qpn << 8 | ds`.
    pub(crate) fn sq_doorbell(&mut self, uar: u32, val: u64) {
        if self.cfg.faults.lose_doorbells > 0 {
            self.cfg.faults.lose_doorbells -= 1;
            log::warn!("model: send doorbell {val:#x} lost (injected)");
            return;
        }
        let qpn = (val as u32) >> 8;
        if self.halted() {
            log::warn!("model: send doorbell of QP {qpn:#x} ignored: the device is halted");
            return;
        }
        let Some(qp) = self.qps.get(&qpn) else {
            self.eth_sq_doorbell(uar, qpn);
            return;
        };
        if qp.uar != uar {
            log::warn!(
                "model: QP {qpn:#x} rung through UAR {uar}, expected {}",
                qp.uar
            );
            return;
        }
        self.run_sq(qpn);
    }

    /// Executes the QP's posted send WQEs in order, up to the doorbell record's counter.
    pub fn run_sq(&mut self, qpn: u32) {
        // The WQE bytes are read into a buffer the HCA keeps (taken here, so the parsed WQE can
        // borrow it while the HCA executes it); a nested run of another queue makes its own.
        let mut buf = std::mem::take(&mut self.wqe_buf);
        buf.resize(MAX_SEND_WQE, 0);
        self.run_sq_with(qpn, &mut buf);
        self.wqe_buf = buf;
    }

    fn run_sq_with(&mut self, qpn: u32, buf: &mut [u8]) {
        loop {
            let Some(qp) = self.qps.get(&qpn).cloned() else {
                return;
            };
            if matches!(qp.state, QpState::Sqer | QpState::Err) && !qp.no_sq {
                // Send requests posted while the send queue is in error are flushed, and so
                // are those posted to a QP in ERR (IBA: the Error state flushes what is posted; umr.c
                // `mlx5r_umr_recover` waits for exactly that flush).
                self.flush_sq(qpn);
                return;
            }
            if !matches!(qp.state, QpState::Rts | QpState::Sqd) || qp.no_sq {
                return;
            }
            let head = match self.dma.read_be32(qp.dbr + 4) {
                Ok(v) => v as u16,
                Err(f) => {
                    self.record_fault(f);
                    self.qp_fatal(qpn);
                    return;
                }
            };
            if qp.sq_consumed == head {
                return;
            }
            if qp.resend_at_ns > self.now_ns() {
                // Waiting out an RNR NAK's timer or an ACK timeout.
                self.stalled_sqs.insert(qpn);
                return;
            }
            if qp.st == ServiceType::RegUmr {
                if self.step_umr(&qp) {
                    continue;
                }
                return;
            }
            let w = match self.read_send_wqe(&qp, buf) {
                Ok(w) => w,
                Err(WqeFault::Umr) => {
                    if self.step_umr(&qp) {
                        continue;
                    }
                    return;
                }
                Err(WqeFault::Fetch(f)) => {
                    self.record_fault(f);
                    self.qp_fatal(qpn);
                    return;
                }
                Err(WqeFault::Malformed) => {
                    log::debug!(
                        "model: QP {qpn:#x}: send WQE {} does not parse",
                        qp.sq_consumed
                    );
                    self.complete_send_error(&qp, qp.sq_consumed, 0, synd::LOCAL_QP_OP);
                    return;
                }
            };
            // The model runs a send queue in order, so fences change nothing; the initiator
            // small fence (mode 1, what rdma-core puts after a UMR) is counted for tests.
            if w.fence_mode == 1 {
                self.small_fenced += 1;
            }
            let outcome = match self.dci_stream_check(&qp, &w) {
                Some(o) => o,
                None => self.execute(&qp, &w),
            };
            match outcome {
                Outcome::Wait => {
                    self.stalled_sqs.insert(qpn);
                    return;
                }
                Outcome::Flushed => {
                    if let Some(q) = self.qps.get_mut(&qpn) {
                        q.sq_consumed = q.sq_consumed.wrapping_add(w.bbs);
                    }
                }
                Outcome::Done(_) | Outcome::DoneInline(_) => {
                    if let Some(q) = self.qps.get_mut(&qpn) {
                        q.sq_consumed = q.sq_consumed.wrapping_add(w.bbs);
                        q.rnr_tries = 0;
                        q.retry_tries = 0;
                    }
                    if w.signaled {
                        let (byte_cnt, inline) = match &outcome {
                            Outcome::DoneInline(data) => {
                                self.scattered_to_cqe += 1;
                                (data.len() as u32, Some(&data[..]))
                            }
                            Outcome::Done(bytes) => (*bytes, None),
                            _ => (0, None),
                        };
                        let c = ok_cqe(
                            CqeOpcode::Req,
                            &CqeFields {
                                sop_drop_qpn: (u32::from(w.opcode) << 24) | qpn,
                                wqe_counter: w.wqe_index,
                                srqn_uidx: self.cqe_srqn_uidx(&qp, None),
                                byte_cnt,
                                inline,
                                ..CqeFields::default()
                            },
                        );
                        self.post_cqe(qp.cqn_snd, c, false);
                    }
                }
                Outcome::Failed(s) => {
                    if let Some(q) = self.qps.get_mut(&qpn) {
                        q.sq_consumed = q.sq_consumed.wrapping_add(w.bbs);
                    }
                    if self.dci_stream_failed(&qp, &w, s) {
                        continue;
                    }
                    self.complete_send_error(&qp, w.wqe_index, w.opcode, s);
                    return;
                }
            }
        }
    }

    /// A DCI request's stream before it runs: `Some` outcome when it must not run, because its
    /// stream is in error (flushed: WR_FLUSH_ERR, and the send queue goes on).
    fn dci_stream_check(&mut self, qp: &Qp, w: &SendWqe<'_>) -> Option<Outcome> {
        let d = qp.dci.as_ref()?;
        if d.errored.contains(&w.dci_stream) {
            self.send_error_cqe(qp, w.wqe_index, w.opcode, synd::WR_FLUSH);
            return Some(Outcome::Flushed);
        }
        None
    }

    /// After request `w` of DCI `qp` failed with `syndrome`: its stream is in error. While
    /// fewer streams than the DCI tolerates are, only the error completion is written and
    /// the send queue goes on (true); at the limit the DCI goes to ERR as any RC QP (false).
    fn dci_stream_failed(&mut self, qp: &Qp, w: &SendWqe<'_>, syndrome: u8) -> bool {
        let Some(d) = self.qps.get_mut(&qp.qpn).and_then(|q| q.dci.as_mut()) else {
            return false;
        };
        d.errored.insert(w.dci_stream);
        if d.errored.len() >= 1usize << d.log_errored {
            return false;
        }
        if let Some(q) = self.qps.get_mut(&qp.qpn) {
            q.rnr_tries = 0;
            q.retry_tries = 0;
        }
        self.send_error_cqe(qp, w.wqe_index, w.opcode, syndrome);
        true
    }

    pub(crate) fn complete_send_error(
        &mut self,
        qp: &Qp,
        wqe_index: u16,
        opcode: u8,
        syndrome: u8,
    ) {
        self.send_error_cqe(qp, wqe_index, opcode, syndrome);
        // A send error stops only the send queue of an unreliable QP (SQE); RC goes to ERR.
        // The UMR QP goes to ERR too: Linux 6.12 umr.c `mlx5r_umr_recover` expects only
        // WR_FLUSH_ERR after a failed UMR and resets the QP.
        match qp.st {
            ServiceType::Uc | ServiceType::Ud | ServiceType::Qp0 | ServiceType::Qp1 => {
                self.qp_to_sqe(qp.qpn)
            }
            ServiceType::Rc
            | ServiceType::Xrc
            | ServiceType::RegUmr
            | ServiceType::Dci
            | ServiceType::Dct => self.qp_to_error(qp.qpn),
        }
    }

    /// The requester error CQE of WQE `wqe_index` (`opcode`) of `qp`.
    fn send_error_cqe(&mut self, qp: &Qp, wqe_index: u16, opcode: u8, syndrome: u8) {
        log::debug!(
            "model: QP {:#x} ({:?}) WQE {wqe_index} opcode {opcode:#x}: error CQE syndrome {syndrome:#x}",
            qp.qpn,
            qp.st
        );
        let uidx = self.cqe_srqn_uidx(qp, None);
        let c = err_cqe(CqeOpcode::ReqErr, opcode, qp.qpn, wqe_index, syndrome, uidx);
        self.post_cqe(qp.cqn_snd, c, false);
    }

    /// Reads the WQE at `qp`'s send queue head into `buf` (basic block by basic block: the
    /// ring may wrap inside it) and parses it.
    fn read_send_wqe<'a>(&mut self, qp: &Qp, buf: &'a mut [u8]) -> Result<SendWqe<'a>, WqeFault> {
        let mask = (1u16 << qp.log_sq_size) - 1;
        let bb = |i: u16| qp.buf_iova(qp.sq_offset() + u64::from(i & mask) * 64);
        self.dma.read(bb(qp.sq_consumed), &mut buf[..64])?;
        if buf[3] == wqe_opcode::UMR {
            return Err(WqeFault::Umr);
        }
        let ds = u16::from(buf[7] & 0x3f);
        if ds == 0 {
            return Err(WqeFault::Malformed);
        }
        let bbs = ds.div_ceil(4);
        for k in 1..bbs {
            let at = usize::from(k) * 64;
            self.dma
                .read(bb(qp.sq_consumed.wrapping_add(k)), &mut buf[at..at + 64])?;
        }
        let raw: &'a [u8] = buf
            .get(..usize::from(bbs) * 64)
            .ok_or(WqeFault::Malformed)?;
        Self::parse_send_wqe(qp, raw, bbs).ok_or(WqeFault::Malformed)
    }

    /// The send WQE in `raw` (`bbs` basic blocks, read from `qp`'s send queue), or `None` when
    /// its segments do not parse.
    fn parse_send_wqe<'a>(qp: &Qp, raw: &'a [u8], bbs: u16) -> Option<SendWqe<'a>> {
        // Every field through the data-path codec (`wqe_codec`), which places it by the
        // segment layouts; a segment cut off by the WQE's own size (`ds`) does not parse.
        let w0 = codec::load(raw, ctrl::OPCODE.byte())?;
        let ds = ctrl::DS.get(w0) as usize;
        let raw = raw.get(..ds * 16)?;
        let word = |at: usize| codec::load(raw, at);
        let w1 = word(ctrl::IMM.byte())?;
        let opcode = ctrl::OPCODE.get(w0) as u8;
        let flags = ctrl::FM_CE_SE.get(w1) as u8;
        let mut w = SendWqe {
            opcode,
            wqe_index: ctrl::WQE_INDEX.get(w0) as u16,
            bbs,
            signaled: flags & fm_ce_se::CQ_UPDATE != 0,
            solicited: flags & fm_ce_se::SOLICITED != 0,
            imm: ctrl::IMM.get(w1) as u32,
            raddr: 0,
            rkey: 0,
            swap_add: 0,
            compare: 0,
            ud_dqpn: 0,
            ud_qkey: 0,
            ud_sl: 0,
            ud_rlid: 0,
            ud_grh: None,
            inline: None,
            sges: SgeList::new(),
            xrc_srqn: None,
            dc_key: 0,
            dci_stream: dci_channel(qp, ctrl::STREAM.get(w1) as u16),
            fence_mode: flags >> 5,
        };
        let mut off = WqeCtrlSeg::BYTES;
        // An XRC initiator's WQEs carry the XRC segment right after the control segment
        // (rdma-core 56 providers/mlx5/qp.c `_mlx5_post_send`, IBV_QPT_XRC_SEND; Linux 6.12
        // qp.c `sq_overhead` counts it for IB_QPT_XRC_INI); then come RC's segments.
        if qp.st == ServiceType::Xrc {
            let x = word(off + xrc::XRC_SRQN.byte())?;
            w.xrc_srqn = Some(xrc::XRC_SRQN.get(x) as u32 & 0xff_ffff);
            off += WqeXrcSeg::BYTES;
        }
        if matches!(qp.st, ServiceType::Ud | ServiceType::Dci) {
            if raw.len() < off + WqeDatagramSeg::BYTES {
                return None;
            }
            // A DCI's address vector holds the DC access key where UD's holds the Q_Key
            // (rdma-core 56 mlx5dv.h `struct mlx5_wqe_av`: `key.dc_key`), and the target DCT's
            // number in `dqp_dct` (qp.c `mlx5_send_wr_set_dc_addr`).
            let key = word(off + datagram::QKEY.byte())?;
            let dest = word(off + datagram::RLID.byte())?;
            let grh = word(off + datagram::GRH_GID_FL.byte())?;
            w.dc_key = key;
            w.ud_qkey = datagram::QKEY.get(key) as u32;
            w.ud_dqpn = datagram::DQP_DCT.get(dest) as u32 & 0x00ff_ffff;
            w.ud_sl = datagram::STAT_RATE_SL.get(dest) as u8 & 0xf;
            w.ud_rlid = datagram::RLID.get(dest) as u16;
            // grh_gid_fl: bit 30 says a GRH follows; source GID index 27:20, flow label 19:0.
            let gid_fl = datagram::GRH_GID_FL.get(grh) as u32;
            if gid_fl & (1 << 30) != 0 {
                let at = off + datagram::RGID_BYTE;
                let dgid: [u8; 16] = raw.get(at..at + 16)?.try_into().ok()?;
                w.ud_grh = Some(AvGrh {
                    tclass: datagram::TCLASS.get(grh) as u8,
                    hop_limit: datagram::HOP_LIMIT.get(grh) as u8,
                    flow_label: gid_fl & 0xf_ffff,
                    sgid_index: (gid_fl >> 20) as u8,
                    dgid,
                });
            }
            off += WqeDatagramSeg::BYTES;
        }
        if qp.st != ServiceType::Ud
            && matches!(
                opcode,
                wqe_opcode::RDMA_WRITE
                    | wqe_opcode::RDMA_WRITE_IMM
                    | wqe_opcode::RDMA_READ
                    | wqe_opcode::ATOMIC_CS
                    | wqe_opcode::ATOMIC_FA
            )
        {
            let r = word(off + raddr::RKEY.byte())?;
            w.raddr = raddr::RADDR.get(word(off + raddr::RADDR.byte())?);
            w.rkey = raddr::RKEY.get(r) as u32;
            off += WqeRaddrSeg::BYTES;
            if matches!(opcode, wqe_opcode::ATOMIC_CS | wqe_opcode::ATOMIC_FA) {
                w.swap_add = word(off + codec::atomic::SWAP_ADD.byte())?;
                w.compare = word(off + codec::atomic::COMPARE.byte())?;
                off += WqeAtomicSeg::BYTES;
            }
        }
        // Inline data or data segments: the inline header's top bit tells them apart.
        if let Some(h) = word(off + inline::BYTE_COUNT.byte()) {
            let hdr = inline::BYTE_COUNT.get(h) as u32;
            if hdr & INLINE_SEG != 0 {
                let n = (hdr & !INLINE_SEG) as usize;
                let at = off + WqeInlineSeg::BYTES;
                w.inline = Some(raw.get(at..at + n)?);
                return Some(w);
            }
        }
        while let (Some(w0), Some(addr)) = (
            word(off + codec::data::LKEY.byte()),
            word(off + codec::data::ADDR.byte()),
        ) {
            let lkey = codec::data::LKEY.get(w0) as u32;
            let len = codec::data::BYTE_COUNT.get(w0) as u32;
            if lkey == bareverbs_firmware_cmd::ifc::INVALID_LKEY && len == 0 {
                break;
            }
            w.sges.push(Sge { lkey, addr, len });
            off += WqeDataSeg::BYTES;
        }
        Some(w)
    }

    /// Translates `len` bytes at `addr` through key `key` for PD `pd`.
    fn key_range(
        &self,
        key: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: impl Fn(&crate::mkey::Rights) -> bool,
    ) -> Result<Pieces, KeyFault> {
        let k = self
            .mkeys
            .get(&(key >> 8))
            // A free key grants nothing until a UMR enables it (mkc.free).
            .filter(|k| k.key == key && !k.free)
            .ok_or(KeyFault::Rights)?;
        if k.pd != pd {
            return Err(KeyFault::Pd);
        }
        if !need(&k.rights) {
            return Err(KeyFault::Rights);
        }
        let mut out = Pieces::new();
        self.resolve_into(k, addr, len, 0, &mut out)?;
        Ok(out)
    }

    /// The device-address pieces of `addr..addr + len` through `k`, following an indirect
    /// key's entries into the keys they name, at most `max_indirection` levels deep
    /// (`cmd_hca_cap.max_indirection`). The entries' keys must be live and of the same PD;
    /// the rights checked are the outer key's (the indirect key is what the request names).
    fn resolve_into(
        &self,
        k: &crate::mkey::Mkey,
        addr: u64,
        len: u64,
        depth: u64,
        out: &mut Pieces,
    ) -> Result<(), KeyFault> {
        let end = addr.checked_add(len).ok_or(KeyFault::Bounds)?;
        if addr < k.start || end > k.start.saturating_add(k.len) {
            return Err(KeyFault::Bounds);
        }
        let Some(pieces) = k.translation.indirect_pieces(addr - k.start, len) else {
            return k.translate_into(addr, len, out);
        };
        if depth >= self.cap(bareverbs_firmware_cmd::ifc::cmd_hca_cap::max_indirection) {
            return Err(KeyFault::Bounds);
        }
        for (key, a, n) in pieces? {
            let inner = self
                .mkeys
                .get(&(key >> 8))
                .filter(|i| i.key == key && !i.free)
                .ok_or(KeyFault::Rights)?;
            if inner.pd != k.pd {
                return Err(KeyFault::Pd);
            }
            self.resolve_into(inner, a, n, depth + 1, out)?;
        }
        Ok(())
    }

    /// Appends the bytes `sges` name (through their lkeys, in PD `pd`) to `out`.
    pub(crate) fn gather_sges(
        &mut self,
        pd: u32,
        sges: &[Sge],
        out: &mut Vec<u8>,
    ) -> Result<(), u8> {
        for s in sges {
            let pieces = self
                .key_range(s.lkey, pd, s.addr, s.len.into(), |_| true)
                .map_err(|_| synd::LOCAL_PROT)?;
            for &(a, n) in &pieces {
                if let Err(f) = self.dma.read_append(a, n as usize, out) {
                    self.record_fault(f);
                    return Err(synd::LOCAL_PROT);
                }
            }
        }
        Ok(())
    }

    /// Scatters `data` over `sges` (local write required). Err(LOCAL_LENGTH) when it does not
    /// fit, Err(LOCAL_PROT) on a key problem.
    pub(crate) fn scatter(
        &mut self,
        pd: u32,
        sges: &[Sge],
        skip: u64,
        data: &[u8],
    ) -> Result<(), u8> {
        let room: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        if skip + data.len() as u64 > room {
            return Err(synd::LOCAL_LENGTH);
        }
        let mut at = 0usize;
        let mut skip = skip;
        for s in sges {
            let len = u64::from(s.len);
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = ((len - skip) as usize).min(data.len() - at);
            if n == 0 {
                break;
            }
            let pieces = self
                .key_range(
                    s.lkey,
                    pd,
                    s.addr.checked_add(skip).ok_or(synd::LOCAL_PROT)?,
                    n as u64,
                    |r| r.local_write,
                )
                .map_err(|_| synd::LOCAL_PROT)?;
            for &(a, l) in &pieces {
                self.dma
                    .write(a, &data[at..at + l as usize])
                    .map_err(|_| synd::LOCAL_PROT)?;
                at += l as usize;
            }
            skip = 0;
        }
        Ok(())
    }

    /// The message of send WQE `w` of `qp`, in the HCA's reused payload buffer.
    fn payload(&mut self, qp: &Qp, w: &SendWqe<'_>) -> Result<Vec<u8>, u8> {
        let mut out = std::mem::take(&mut self.payload_buf);
        out.clear();
        match w.inline {
            Some(d) => out.extend_from_slice(d),
            None => self.gather_sges(qp.pd, w.sges.as_slice(), &mut out)?,
        }
        Ok(out)
    }

    /// The scatter list of a receive WQE: data segments up to the first with
    /// [`INVALID_LKEY`](bareverbs_firmware_cmd::ifc::INVALID_LKEY) or the end of the WQE.
    pub(crate) fn recv_sges(raw: &[u8]) -> SgeList {
        let mut sges = SgeList::new();
        for seg in raw.chunks_exact(16) {
            let Ok(d) = View::<WqeDataSeg>::new_checked(seg) else {
                break;
            };
            let lkey = d.get32(wqe_data_seg::lkey);
            if lkey == bareverbs_firmware_cmd::ifc::INVALID_LKEY {
                break;
            }
            sges.push(Sge {
                lkey,
                addr: d.get(wqe_data_seg::addr),
                len: d.get32(wqe_data_seg::byte_count),
            });
        }
        sges
    }

    /// The receive WQE `rqp` takes next, if one is posted: the head of its RQ, or of the
    /// SRQ/RMP it receives from, or for an XRC request of the XRC SRQ `xrc` it names.
    fn next_recv(&mut self, rqp: &Qp, xrc: Option<XrcTarget>) -> Option<Recv> {
        if let Some(x) = xrc {
            return self.next_srq_recv(x.srqn);
        }
        if let Some((srqn, _)) = self.qp_srq(rqp.qpn) {
            return self.next_srq_recv(srqn);
        }
        // A zero-length RQ never receives.
        if rqp.no_rq {
            return None;
        }
        let idx = rqp.rq_consumed & ((1u16 << rqp.log_rq_size) - 1);
        let stride = 1u64 << rqp.rq_wqe_shift;
        let fetched = self.dma.read_be32(rqp.dbr).and_then(|head| {
            if rqp.rq_consumed == head as u16 {
                return Ok(None);
            }
            self.dma
                .read_vec(rqp.buf_iova(u64::from(idx) * stride), stride as usize)
                .map(Some)
        });
        // A receive queue that cannot be read cannot go on (see `catas.rs`).
        let raw = match fetched {
            Ok(raw) => raw?,
            Err(f) => {
                self.record_fault(f);
                self.qp_fatal(rqp.qpn);
                return None;
            }
        };
        Some(Recv {
            counter: rqp.rq_consumed,
            sges: Self::recv_sges(&raw),
            srq: None,
        })
    }

    /// The WQE SRQ/RMP `srqn` gives next, if one is posted: the one at the device's head while
    /// fewer WQEs were taken than the doorbell record's counter says were posted (rdma-core 56
    /// srq.c `mlx5_post_srq_recv`: `*srq->db = htobe32(srq->counter)`, the number posted).
    /// The WQE starts with `mlx5_wqe_srq_next_seg`, whose `next_wqe_index` is the next head;
    /// its data segments follow.
    fn next_srq_recv(&mut self, srqn: u32) -> Option<Recv> {
        let srq = self.srq(srqn)?;
        if !srq.good {
            return None;
        }
        let (dbr, head, taken) = (srq.dbr, srq.hw_head, srq.taken);
        let at = srq.wqe_iova(u32::from(head));
        let stride = 1usize << srq.wqe_shift;
        let fetched = self.dma.read_be32(dbr).and_then(|posted| {
            if posted as u16 == taken {
                return Ok(None);
            }
            self.dma.read_vec(at, stride).map(Some)
        });
        // An SRQ that cannot be read cannot go on (see `catas.rs`).
        let raw = match fetched {
            Ok(raw) => raw?,
            Err(f) => {
                self.record_fault(f);
                self.srq_fatal(srqn);
                return None;
            }
        };
        let next = View::<WqeSrqNextSeg>::new_checked(&raw)
            .ok()?
            .get(wqe_srq_next_seg::next_wqe_index) as u16;
        Some(Recv {
            counter: head,
            sges: Self::recv_sges(&raw[WqeSrqNextSeg::BYTES..]),
            srq: Some((srqn, next)),
        })
    }

    /// Takes the receive `r` found by [`Self::next_recv`] from `rqp`'s queue; an SRQ whose
    /// armed limit is now above the WQEs left raises the limit event and disarms.
    fn take_recv(&mut self, rqp: &Qp, r: &Recv) {
        let Some((srqn, next)) = r.srq else {
            if let Some(q) = self.qps.get_mut(&rqp.qpn) {
                q.rq_consumed = q.rq_consumed.wrapping_add(1);
            }
            return;
        };
        let Some(s) = self.srqs.get_mut(&srqn) else {
            return;
        };
        s.hw_head = next;
        s.taken = s.taken.wrapping_add(1);
        let (dbr, taken, lwm) = (s.dbr, s.taken, s.lwm);
        if lwm == 0 {
            return;
        }
        let Ok(posted) = self.dma.read_be32(dbr) else {
            return;
        };
        let left = (posted as u16).wrapping_sub(taken);
        if left < lwm {
            if let Some(s) = self.srqs.get_mut(&srqn) {
                s.lwm = 0;
            }
            self.post_event(event_type::SRQ_RQ_LIMIT, 0, qp_srq_event_data(0, srqn));
        }
    }

    /// The XRC SRQ `srqn` named by a request to XRC target QP `r`, if it is an XRC SRQ of the
    /// QP's XRC domain (`qpc.xrcd`, Linux 6.12 qp.c `create_xrc_tgt_qp`; `xrc_srqc.xrcd`).
    fn xrc_target_srq(&self, r: &Qp, srqn: u32) -> Option<XrcTarget> {
        let (_, xrcd) = self.qp_srq(r.qpn)?;
        let s = self.srq(srqn)?;
        if s.kind != crate::srq::SrqKind::XrcSrq || s.xrcd != Some(xrcd) {
            return None;
        }
        Some(XrcTarget {
            srqn,
            pd: s.pd,
            cqn: s.cqn?,
        })
    }

    /// What a CQE of `qp` carries in `srqn_uidx` (`mlx5_cqe64.srqn`) for a WQE taken from
    /// `srqn` (receives through an SRQ) or from the QP's own queues. CQE version 1 (the model
    /// reports `cmd_hca_cap.cqe_version` 1): the QP's `user_index`, or for a receive from an
    /// XRC SRQ that SRQ's; rdma-core 56 cq.c `get_cur_rsc` looks the QP up by it
    /// (`mlx5_find_uidx`) for every CQE when the context's `cqe_version` is 1. A QP created
    /// with user index [`CQE_V0_UIDX`] gets version 0 CQEs: the SRQ number for receives through
    /// an SRQ, otherwise 0 (cq.c `get_cur_rsc`: `srqn_uidx` non-zero means an SRQ; Linux
    /// mlx5_ib cq.c `handle_responder` reads `cqe->srqn` for XRC).
    pub(crate) fn cqe_srqn_uidx(&self, qp: &Qp, srqn: Option<u32>) -> u32 {
        let srq = srqn.and_then(|n| self.srq(n));
        let uidx = match srq {
            Some(s) if s.kind == crate::srq::SrqKind::XrcSrq => s.user_index,
            _ => qp.user_index,
        };
        if uidx == CQE_V0_UIDX {
            srqn.unwrap_or(0)
        } else {
            uidx
        }
    }

    /// Delivers `req`'s message into `rqp`'s next receive; responder CQE on its receive CQ.
    /// An XRC request (`xrc`) takes its XRC SRQ's next receive, scatters with that SRQ's PD and
    /// completes on that SRQ's CQ (`xrc_srqc.pd`, `xrc_srqc.cqn`; the target QP's own CQs are
    /// mlx5_ib's placeholders).
    fn deliver(
        &mut self,
        rqp: &Qp,
        req: &Request,
        rdma_imm: bool,
        xrc: Option<XrcTarget>,
    ) -> Result<(), u8> {
        let Some(recv) = self.next_recv(rqp, xrc) else {
            return Err(0);
        };
        let (pd, cqn) = xrc.map_or((rqp.pd, rqp.cqn_rcv), |x| (x.pd, x.cqn));
        self.take_recv(rqp, &recv);
        let Recv { counter, sges, srq } = recv;
        let ud = req.st == ServiceType::Ud;
        let skip = if ud { 40 } else { 0 };
        // A UD message with a GRH fills the 40-byte area first; without one the area keeps
        // what it held.
        let grh = match (ud, &req.grh) {
            (true, Some(h)) => self.scatter(pd, &sges, 0, h),
            _ => Ok(()),
        };
        // Scatter to CQE (`qpc.cs_res`, Linux sets it for RC and UC): a SEND of up to 32
        // bytes lands in the first 32 bytes of the CQE, where rdma-core 56 cq.c
        // `handle_responder` copies it from (`MLX5_INLINE_SCATTER_32`); the receive buffers
        // are left to the driver. The CQE fields in those bytes (path bits, SLID, source QP)
        // are then the data's.
        let inline =
            !rdma_imm && !ud && rqp.cs_res == qpc_scatter::RES_DATA32 && req.payload.len() <= 32;
        let r = if rdma_imm || inline {
            Ok(())
        } else {
            grh.and_then(|()| self.scatter(pd, &sges, skip, &req.payload))
        };
        let uidx = self.cqe_srqn_uidx(rqp, srq.map(|(n, _)| n));
        if let Err(s) = r {
            let c = err_cqe(CqeOpcode::RespErr, 0, rqp.qpn, counter, s, uidx);
            self.post_cqe(cqn, c, false);
            self.qp_to_error(rqp.qpn);
            return Err(s);
        }
        if inline {
            self.scattered_to_cqe += 1;
        }
        // flags_rqpn: bits 29:28 say a GRH arrived (1: IB GRH), 27:24 the SL, 23:0 the QPN.
        let g = if ud && req.grh.is_some() {
            1u32 << 28
        } else {
            0
        };
        let op = match (rdma_imm, req.imm.is_some()) {
            (true, _) => CqeOpcode::RespWrImm,
            (false, true) => CqeOpcode::RespSendImm,
            (false, false) => CqeOpcode::RespSend,
        };
        let c = ok_cqe(
            op,
            &CqeFields {
                sop_drop_qpn: rqp.qpn,
                wqe_counter: counter,
                srqn_uidx: uidx,
                byte_cnt: (req.payload.len() + skip as usize) as u32,
                imm_inval_pkey: req.imm.unwrap_or(u32::from(rqp.pkey_index)),
                // ml_path: the DLID's path bits, the low LMC bits (rdma-core: ml_path & 0x7f).
                ml_path: self.path_bits(req.dlid),
                slid: req.slid,
                flags_rqpn: g | (u32::from(req.sl & 0xf) << 24) | req.src_qpn,
                solicited: req.solicited,
                inline: inline.then_some(&req.payload[..]),
            },
        );
        self.post_cqe(cqn, c, req.solicited);
        Ok(())
    }

    /// The responder: answers a request addressed to one of this HCA's QPs.
    ///
    /// RC checks the request's PSN against the one expected (IB spec 9.7.5.1, as Linux rxe
    /// `check_psn`): equal, the request is executed and the expected PSN advances by its
    /// packets; ahead (within half the PSN space), NAK "PSN sequence error"; behind, a
    /// duplicate: SEND and WRITE are acknowledged without executing again, READ is read again,
    /// an atomic returns the target's current value without changing it (hardware replays the
    /// saved original result; the model keeps none). UC has no ACKs: a message whose PSN is
    /// not the expected one starts a new message (rxe `check_psn`: a First or Only packet
    /// resynchronises) and the expected PSN follows it.
    pub(crate) fn respond(&mut self, req: &Request) -> Response {
        self.count_traffic(req.dlid, Traffic::Rcv, req.payload.len() as u64, req.pkts);
        let resp = self.respond_at_port(req);
        if let Response::Ack(data) = &resp {
            if !data.is_empty() {
                self.count_traffic(req.dlid, Traffic::Xmit, data.len() as u64, req.pkts);
            }
        }
        resp
    }

    fn respond_at_port(&mut self, req: &Request) -> Response {
        let rc = req.st.reliable();
        let Some(r) = self
            .qps
            .get(&req.dst_qpn)
            .filter(|r| {
                // A QP in SQE (UC, UD) still receives.
                matches!(
                    r.state,
                    QpState::Rtr | QpState::Rts | QpState::Sqer | QpState::Sqd
                ) && (r.st == req.st || (req.st == ServiceType::Dci && r.st == ServiceType::Dct))
            })
            .cloned()
        else {
            return if rc {
                Response::NoQp
            } else {
                Response::Dropped
            };
        };
        if req.st == ServiceType::Dci {
            return self.respond_at_dct(&r, req);
        }
        if req.st == ServiceType::Ud {
            if r.qkey == req.qkey {
                let _ = self.deliver(&r, req, false, None);
            }
            return Response::Dropped;
        }
        // The first packet at a connected QP still in RTR: communication established
        // (IBA 11.6.3 affiliated event; mlx5 MLX5_EVENT_TYPE_COMM_EST, which Linux mlx5_ib
        // `mlx5_ib_qp_event` reports as IB_EVENT_COMM_EST), once per stay in RTR.
        if r.state == QpState::Rtr && !r.comm_est {
            if let Some(q) = self.qps.get_mut(&r.qpn) {
                q.comm_est = true;
            }
            self.post_event(event_type::COMM_EST, 0, qp_srq_event_data(0, r.qpn));
        }
        let npkts = packets(req.kind, req.msg_len(), r.mtu);
        let ahead = req.psn.wrapping_sub(r.next_rcv_psn) & PSN_MASK;
        let duplicate = rc && ahead >= 1 << 23;
        if rc && ahead != 0 && !duplicate {
            return Response::NakSeq;
        }
        let resp = self.execute_request(&r, req, duplicate);
        // An RC responder that NAKs a remote access error or an invalid request goes to ERR
        // and reports it on the QP (IBA 9.9.3.1, responder class C errors; Linux rxe
        // `do_class_ac_error`; mlx5 WQ_ACCESS_ERROR / WQ_INVAL_REQ_ERROR, which Linux
        // mlx5_ib reports as IB_EVENT_QP_ACCESS_ERR / IB_EVENT_QP_REQ_ERR).
        if rc && !duplicate {
            let event = match resp {
                Response::Nak(synd::REMOTE_ACCESS) => Some(event_type::WQ_ACCESS_ERROR),
                Response::Nak(synd::REMOTE_INVAL_REQ) => Some(event_type::WQ_INVAL_REQ_ERROR),
                _ => None,
            };
            if let Some(ty) = event {
                self.qp_to_error(r.qpn);
                self.post_event(ty, 0, qp_srq_event_data(0, r.qpn));
            }
        }
        // UC: whatever became of the message, the next one is expected after it.
        let accepted = !rc || (matches!(resp, Response::Ack(_)) && !duplicate);
        if accepted {
            if let Some(q) = self.qps.get_mut(&r.qpn) {
                q.next_rcv_psn = psn_add(req.psn, npkts);
            }
        }
        resp
    }

    /// A DC request at DCT `r`: executed as an RC responder would, through the DCT's SRQ, CQ,
    /// PD and remote-access enables, once its access key matches. A wrong key is dropped
    /// without an answer, so the requester retries until `retry_count` runs out
    /// (IBV_WC_RETRY_EXC_ERR); the DCT counts it (`dc_access_key_violation_count`) and, when
    /// armed (ARM_DCT_FOR_KEY_VIOLATION), raises DCT_KEY_VIOLATION once. Public sources do not
    /// say what hardware answers a wrong key with; dropping it is what keeps the key secret
    /// from a prober. A DCT serves many initiators, so neither a bad request nor a PSN it has
    /// not seen moves it to ERR: each DC message stands alone here.
    fn respond_at_dct(&mut self, r: &Qp, req: &Request) -> Response {
        let Some(d) = r.dct.as_ref() else {
            return Response::NoQp;
        };
        if d.access_key != req.dc_key {
            let mut raise = false;
            if let Some(d) = self.qps.get_mut(&r.qpn).and_then(|q| q.dct.as_mut()) {
                d.key_violations = d.key_violations.wrapping_add(1);
                raise = std::mem::take(&mut d.armed);
            }
            if raise {
                let mut data = [0u8; 28];
                data[EQE_DCT_DCTN..EQE_DCT_DCTN + 4].copy_from_slice(&r.qpn.to_be_bytes());
                self.post_event(event_type::DCT_KEY_VIOLATION, 0, data);
            }
            return Response::NoQp;
        }
        self.execute_request(r, req, false)
    }

    /// Executes `req` at responder QP `r` (`duplicate`: an RC request seen before).
    fn execute_request(&mut self, r: &Qp, req: &Request, duplicate: bool) -> Response {
        let rc = req.st.reliable();
        let dropped = |nak: Response| if rc { nak } else { Response::Dropped };
        if duplicate && matches!(req.kind, Kind::Send | Kind::Write) {
            return Response::Ack(Vec::new());
        }
        // XRC: the request names its XRC SRQ, which must be one of the target QP's domain; it
        // gives the receive WQEs, the CQ and the PD that every key of the request is checked
        // against (IBA Annex A14: the XRC domain is what lets a target deliver into an SRQ).
        let xrc = match req.xrc_srqn {
            Some(n) => match self.xrc_target_srq(r, n) {
                Some(x) => Some(x),
                None => return Response::Nak(synd::REMOTE_ACCESS),
            },
            None => None,
        };
        let pd = xrc.map_or(r.pd, |x| x.pd);
        // ibv_poll_cq(3), IBV_WC_REM_INV_REQ_ERR: an operation the receive queue does not
        // support (the QP's remote-access enables; with mlx5 a QP with max_dest_rd_atomic 0
        // has rre and rae clear, as Linux mlx5_ib `to_mlx5_access_flags` sets them), or an RDMA
        // longer than 2^31 bytes.
        let enabled = match req.kind {
            Kind::Send => true,
            Kind::Write => r.rwe,
            Kind::Read => r.rre,
            Kind::Atomic { .. } => r.rae,
        };
        let too_long = matches!(req.kind, Kind::Write | Kind::Read) && req.msg_len() > MAX_RDMA_LEN;
        if !enabled || too_long {
            return dropped(Response::Nak(synd::REMOTE_INVAL_REQ));
        }
        let needs_recv = matches!(req.kind, Kind::Send)
            || (matches!(req.kind, Kind::Write) && req.imm.is_some());
        if needs_recv && self.next_recv(r, xrc).is_none() {
            // Looking for the receive may have found its queue unreadable and moved the QP to
            // ERR (`catas.rs`): a QP in ERR answers nothing.
            if self
                .qps
                .get(&r.qpn)
                .is_some_and(|q| q.state == QpState::Err)
            {
                return if rc {
                    Response::NoQp
                } else {
                    Response::Dropped
                };
            }
            return dropped(Response::Rnr(r.min_rnr_nak));
        }
        match req.kind {
            Kind::Send => match self.deliver(r, req, false, xrc) {
                Ok(()) => Response::Ack(Vec::new()),
                Err(_) => dropped(Response::Nak(synd::REMOTE_INVAL_REQ)),
            },
            Kind::Write => {
                let dest = self.key_range(req.rkey, pd, req.raddr, req.payload.len() as u64, |k| {
                    k.remote_write
                });
                let Ok(dest) = dest else {
                    return dropped(Response::Nak(synd::REMOTE_ACCESS));
                };
                let mut at = 0;
                for &(a, n) in &dest {
                    let _ = self.dma.write(a, &req.payload[at..at + n as usize]);
                    at += n as usize;
                }
                if req.imm.is_some() {
                    let _ = self.deliver(r, req, true, xrc);
                }
                Response::Ack(Vec::new())
            }
            Kind::Read => {
                let Ok(src) = self.key_range(req.rkey, pd, req.raddr, req.len, |k| k.remote_read)
                else {
                    return Response::Nak(synd::REMOTE_ACCESS);
                };
                let mut data = Vec::new();
                for &(a, n) in &src {
                    data.extend(self.dma.read_vec(a, n as usize).unwrap_or_default());
                }
                Response::Ack(data)
            }
            Kind::Atomic { fetch_add } => {
                if req.raddr % 8 != 0 {
                    return Response::Nak(synd::REMOTE_INVAL_REQ);
                }
                let Ok(t) = self.key_range(req.rkey, pd, req.raddr, 8, |k| k.atomic) else {
                    return Response::Nak(synd::REMOTE_ACCESS);
                };
                let Some(&(target, _)) = t.first() else {
                    return Response::Nak(synd::REMOTE_ACCESS);
                };
                let old = self.atomic_load(target);
                let new = if duplicate {
                    old
                } else if fetch_add {
                    old.wrapping_add(req.swap_add)
                } else if old == req.compare {
                    req.swap_add
                } else {
                    old
                };
                if !duplicate {
                    let _ = self.dma.write(target, &self.atomic_bytes(new));
                }
                // On the wire the original value is big-endian, as every IB field.
                Response::Ack(old.to_be_bytes().to_vec())
            }
        }
    }

    /// Whether 8-byte atomic operands sit in memory little-endian, at the responder, and the
    /// original value is written back so, at the requester: in the host's order once the
    /// driver set `atomic_req_8b_endianness_mode` to host endianness (Linux does whenever it
    /// is supported, and otherwise reports no IB atomics), big-endian before. The host's order
    /// is what the HOST_ENDIANNESS register says, little-endian if it was never written.
    fn atomic_little_endian(&self) -> bool {
        use bareverbs_firmware_cmd::ifc::{atomic, atomic_caps, HOST_ENDIANNESS_BIG};
        let f = atomic_caps::atomic_req_8b_endianness_mode;
        let mode = bareverbs_firmware_cmd::layout::get_bits(&self.atomic_caps_cur, f.bit, f.width);
        mode == u64::from(atomic::REQ_MODE_HOST_ENDIANNESS)
            && self.host_endianness != Some(HOST_ENDIANNESS_BIG)
    }

    /// `v` as an 8-byte atomic operand in memory.
    fn atomic_bytes(&self, v: u64) -> [u8; 8] {
        if self.atomic_little_endian() {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        }
    }

    /// The 8-byte atomic operand at `target`.
    fn atomic_load(&self, target: u64) -> u64 {
        let b: [u8; 8] = self
            .dma
            .read_vec(target, 8)
            .ok()
            .and_then(|v| v.try_into().ok())
            .unwrap_or([0; 8]);
        if self.atomic_little_endian() {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        }
    }

    /// The GRH a UD packet from `port` carries for route `g` (IBA 8.3): IP version 6, the
    /// traffic class and flow label, the payload length (BTH, DETH, immediate data, the message
    /// padded to 4 bytes, ICRC), next header 0x1B (IBA transport), the hop limit, the port's
    /// GID (subnet prefix fe80::/64 and port GUID; the model's ports have that one GID), and the
    /// destination GID.
    fn grh(&self, port: u8, g: &AvGrh, len: u64, imm: bool) -> [u8; 40] {
        let mut h = [0u8; 40];
        let word0 = (6u32 << 28) | (u32::from(g.tclass) << 20) | (g.flow_label & 0xf_ffff);
        h[0..4].copy_from_slice(&word0.to_be_bytes());
        let pay_len = 12 + 8 + if imm { 4 } else { 0 } + len.next_multiple_of(4) + 4;
        h[4..6].copy_from_slice(&(pay_len as u16).to_be_bytes());
        h[6] = 0x1b;
        h[7] = g.hop_limit;
        h[8..16].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
        h[16..24].copy_from_slice(&(self.cfg.node_guid + u64::from(port)).to_be_bytes());
        h[24..40].copy_from_slice(&g.dgid);
        h
    }

    /// The path bits of `dlid` at this HCA: its low LMC bits.
    fn path_bits(&self, dlid: u16) -> u8 {
        (dlid & ((1u16 << self.cfg.lmc.min(7)) - 1)) as u8
    }

    /// Sends `req` towards `dlid`: this HCA answers for its own LIDs, the fabric finds the
    /// others. `None`: the responder's HCA is busy, try again.
    fn route(&mut self, dlid: u16, req: &Request) -> Option<Response> {
        let resp = self.route_to(dlid, req)?;
        if let Some(f) = self.fabric.as_ref().filter(|f| f.capturing()) {
            f.record(&crate::ib_wire::packets(req, &resp));
        }
        // What left and came back through the requester's port (READ and atomic responses
        // carry data back; acknowledgements are not counted).
        self.count_traffic(req.slid, Traffic::Xmit, req.payload.len() as u64, req.pkts);
        if let Response::Ack(data) = &resp {
            if !data.is_empty() {
                self.count_traffic(req.slid, Traffic::Rcv, data.len() as u64, req.pkts);
            }
        }
        Some(resp)
    }

    fn route_to(&mut self, dlid: u16, req: &Request) -> Option<Response> {
        // IBA 4.1.1: LIDs 0xC000–0xFFFE are multicast (0xFFFF is the permissive LID).
        if (0xc000..0xffff).contains(&dlid) && !req.st.reliable() {
            return self.multicast(req);
        }
        if self.owns_lid(dlid) {
            return Some(self.respond(req));
        }
        let unreachable = if req.st.reliable() {
            Response::NoQp
        } else {
            Response::Dropped
        };
        let Some(dev) = self.fabric.as_ref().and_then(|f| f.find(dlid)) else {
            return Some(unreachable);
        };
        let mut remote = dev.try_lock()?;
        let resp = remote.respond(req);
        drop(remote);
        dev.notify();
        Some(resp)
    }

    /// A UD datagram to a multicast LID: one copy to every UD QP attached to the group its
    /// GRH's destination GID names (the MGID; a multicast packet carries a GRH, IBA 8.3), on
    /// this HCA and on every HCA of the fabric, the sender's own QP included when attached
    /// (mlx5 loops multicast back unless the QP blocks it, `qpc.block_lb_mc`, which Linux sets
    /// only for IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK; IPoIB drops its own looped-back
    /// datagrams for that reason). Every HCA's lock is taken first: if one is busy, nothing
    /// is delivered and the send is retried, so no QP gets a copy twice.
    fn multicast(&mut self, req: &Request) -> Option<Response> {
        let Some(grh) = req.grh else {
            return Some(Response::Dropped);
        };
        let mut mgid = [0u8; 16];
        mgid.copy_from_slice(&grh[24..40]);
        let others = match self.fabric.as_ref() {
            Some(f) => f.members_except(|lid| self.owns_lid(lid)),
            None => Vec::new(),
        };
        let mut locked = Vec::with_capacity(others.len());
        for dev in &others {
            locked.push(dev.try_lock()?);
        }
        let copy = |qpn| Request {
            dst_qpn: qpn,
            ..req.clone()
        };
        for qpn in self.mcg_members(&mgid) {
            self.respond(&copy(qpn));
        }
        for remote in locked.iter_mut() {
            for qpn in remote.mcg_members(&mgid) {
                remote.respond(&copy(qpn));
            }
        }
        drop(locked);
        for dev in &others {
            dev.notify();
        }
        Some(Response::Dropped)
    }

    /// The requester: builds the request for `w`, routes it and turns the answer into the
    /// send completion.
    fn execute(&mut self, qp: &Qp, w: &SendWqe<'_>) -> Outcome {
        // The ACK timeout of an unanswered request ran out: retransmit it, counting against
        // `retry_count`, or fail it once the retries are spent.
        if qp.ack_pending {
            let Some(q) = self.qps.get_mut(&qp.qpn) else {
                return Outcome::Wait;
            };
            q.ack_pending = false;
            if q.retry_tries >= u32::from(q.retry_count) {
                return Outcome::Failed(synd::TRANSPORT_RETRY_EXC);
            }
            q.retry_tries = q.retry_tries.saturating_add(1);
            q.transport_retries = q.transport_retries.saturating_add(1);
        }
        let imm =
            matches!(w.opcode, wqe_opcode::SEND_IMM | wqe_opcode::RDMA_WRITE_IMM).then_some(w.imm);
        let kind = match (qp.st, w.opcode) {
            // MADs on QP0/QP1 are answered through MAD_IFC; the model sends none itself.
            (ServiceType::Qp0 | ServiceType::Qp1 | ServiceType::RegUmr, _) => {
                return Outcome::Failed(synd::LOCAL_QP_OP)
            }
            (_, wqe_opcode::SEND | wqe_opcode::SEND_IMM) => Kind::Send,
            (
                ServiceType::Rc | ServiceType::Uc | ServiceType::Xrc | ServiceType::Dci,
                wqe_opcode::RDMA_WRITE | wqe_opcode::RDMA_WRITE_IMM,
            ) => Kind::Write,
            (st, wqe_opcode::RDMA_READ) if st.reliable() => Kind::Read,
            (st, wqe_opcode::ATOMIC_CS) if st.reliable() => Kind::Atomic { fetch_add: false },
            (st, wqe_opcode::ATOMIC_FA) if st.reliable() => Kind::Atomic { fetch_add: true },
            _ => return Outcome::Failed(synd::LOCAL_QP_OP),
        };
        // ibv_poll_cq(3), IBV_WC_LOC_LEN_ERR: a message longer than the QP may send
        // (`log_msg_max`) fails at the requester.
        let msg_len = match (w.inline, kind) {
            (_, Kind::Atomic { .. }) => 8,
            (Some(d), _) => d.len() as u64,
            (None, _) => w.sges.as_slice().iter().map(|s| u64::from(s.len)).sum(),
        };
        if qp.st != ServiceType::Ud && msg_len > 1u64 << qp.log_msg_max.min(63) {
            return Outcome::Failed(synd::LOCAL_LENGTH);
        }
        let payload = match kind {
            Kind::Send | Kind::Write => match self.payload(qp, w) {
                Ok(d) => d,
                Err(s) => return Outcome::Failed(s),
            },
            _ => Vec::new(),
        };
        let (dlid, dst_qpn, sl) = if matches!(qp.st, ServiceType::Ud | ServiceType::Dci) {
            (w.ud_rlid, w.ud_dqpn, w.ud_sl)
        } else {
            (qp.rlid, qp.remote_qpn, qp.sl)
        };
        let slid = self
            .ports
            .get(usize::from(qp.port).wrapping_sub(1))
            .map_or(0, |p| p.lid);
        let req = Request {
            kind,
            st: qp.st,
            psn: qp.next_send_psn,
            src_qpn: qp.qpn,
            slid,
            dlid,
            sl,
            dst_qpn,
            payload,
            imm,
            solicited: w.solicited,
            raddr: w.raddr,
            rkey: w.rkey,
            len: w.sges.as_slice().iter().map(|s| u64::from(s.len)).sum(),
            swap_add: w.swap_add,
            compare: w.compare,
            // The QP's own Q_Key is used when the request's has its top bit set (IB spec).
            qkey: if w.ud_qkey & 0x8000_0000 != 0 {
                qp.qkey
            } else {
                w.ud_qkey
            },
            grh: w
                .ud_grh
                .map(|g| self.grh(qp.port, &g, msg_len, imm.is_some())),
            pkts: if qp.st == ServiceType::Ud {
                1
            } else {
                packets(kind, msg_len, qp.mtu)
            },
            xrc_srqn: w.xrc_srqn,
            dc_key: w.dc_key,
        };
        let out = loop {
            let Some(resp) = self.route(dlid, &req) else {
                break Outcome::Wait;
            };
            let out = match resp {
                Response::Ack(data) => match kind {
                    Kind::Read | Kind::Atomic { .. } => {
                        let data = match (kind, <[u8; 8]>::try_from(&data[..])) {
                            (Kind::Atomic { .. }, Ok(wire)) => {
                                self.atomic_bytes(u64::from_be_bytes(wire)).to_vec()
                            }
                            _ => data,
                        };
                        // Requester scatter to CQE (`qpc.cs_req`): a result of up to 32 bytes
                        // goes in the CQE (rdma-core 56 cq.c `mlx5_copy_to_send_wqe`). Linux
                        // asks for it only when every request is signaled (or with
                        // MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE); what hardware does for an
                        // unsignaled one is not in public sources: here it goes to memory.
                        if qp.cs_req == qpc_scatter::REQ_DATA32 && w.signaled && data.len() <= 32 {
                            Outcome::DoneInline(data)
                        } else {
                            match self.scatter(qp.pd, w.sges.as_slice(), 0, &data) {
                                Ok(()) => Outcome::Done(data.len() as u32),
                                Err(s) => Outcome::Failed(s),
                            }
                        }
                    }
                    _ => Outcome::Done(0),
                },
                Response::Dropped => Outcome::Done(0),
                Response::Nak(s) => Outcome::Failed(s),
                // A PSN sequence error NAK: retransmitted at once, counting against
                // `retry_count`.
                Response::NakSeq => {
                    let Some(q) = self.qps.get_mut(&qp.qpn) else {
                        break Outcome::Wait;
                    };
                    if q.retry_tries >= u32::from(q.retry_count) {
                        Outcome::Failed(synd::TRANSPORT_RETRY_EXC)
                    } else {
                        q.retry_tries = q.retry_tries.saturating_add(1);
                        q.transport_retries = q.transport_retries.saturating_add(1);
                        continue;
                    }
                }
                // No response: the request waits for the local ACK timeout (never, with
                // `ack_timeout` 0), then goes again or fails (see the start of `execute`).
                Response::NoQp => {
                    let at = self
                        .now_ns()
                        .saturating_add(crate::qp::ack_timeout_ns(qp.ack_timeout));
                    if let Some(q) = self.qps.get_mut(&qp.qpn) {
                        q.resend_at_ns = at;
                        q.ack_pending = true;
                    }
                    Outcome::Wait
                }
                // rnr_retry 7 retries forever; 0–6 that many times (one retry per engine round).
                Response::Rnr(_) if qp.rnr_retry != 7 && qp.rnr_tries >= qp.rnr_retry => {
                    Outcome::Failed(synd::RNR_RETRY_EXC)
                }
                // The request goes again once the responder's RNR timer has run out.
                Response::Rnr(timer) => {
                    let ready = self.now_ns() + crate::qp::rnr_timer_ns(timer);
                    if let Some(q) = self.qps.get_mut(&qp.qpn) {
                        q.rnr_tries = q.rnr_tries.saturating_add(1);
                        q.resend_at_ns = ready;
                    }
                    Outcome::Wait
                }
            };
            if matches!(out, Outcome::Done(_) | Outcome::DoneInline(_)) && qp.st != ServiceType::Ud
            {
                // The request's packets are spent: the next one starts after them.
                if let Some(q) = self.qps.get_mut(&qp.qpn) {
                    q.next_send_psn = psn_add(req.psn, packets(kind, msg_len, qp.mtu));
                }
            }
            break out;
        };
        // The payload buffer serves the next request.
        self.payload_buf = req.payload;
        out
    }
}

/// The stream a DCI request runs on: the low `log_num_dci_stream_channels` bits of its control
/// segment's `dci_stream_channel_id` (0 on any other QP). Hardware takes any id: perftest
/// (src/perftest_resources.c, built with rdma-core's DCS) posts ids 0, 1, 2, ... through
/// `mlx5dv_wr_set_dc_addr_stream` on a DCI created without streams (its mask
/// `0xffffffff >> (32 - 0)` is all ones on x86), and its DC tests run on ConnectX; so an id
/// past the DCI's streams is not an error. Which channel such an id lands on is not in public
/// sources: the low bits is this model's choice (with one stream, every id is stream 0).
fn dci_channel(qp: &Qp, id: u16) -> u16 {
    qp.dci.as_ref().map_or(0, |d| {
        let channels = 1u32 << d.log_channels.min(16);
        (u32::from(id) & (channels - 1)) as u16
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimHal;

    #[test]
    fn qp_srq_event_data_carries_type_and_number() {
        // Linux device.h `struct mlx5_eqe_qp_srq`: __be32 reserved1[5], u8 type, reserved2[3],
        // __be32 qp_srq_n (srq_cmd.c `srq_event_notifier` masks it with 0xffffff).
        let d = qp_srq_event_data(1, 0x12_3456);
        let mut want = [0u8; 28];
        want[20] = 1;
        want[25..28].copy_from_slice(&[0x12, 0x34, 0x56]);
        assert_eq!(d, want);
    }

    #[test]
    fn requests_spend_one_psn_per_mtu_and_psns_wrap() {
        let send = Kind::Send;
        // MTU 3 = 1024 bytes.
        assert_eq!(packets(send, 0, 3), 1);
        assert_eq!(packets(send, 1024, 3), 1);
        assert_eq!(packets(send, 1025, 3), 2);
        assert_eq!(packets(Kind::Read, 8192, 5), 2);
        assert_eq!(packets(Kind::Write, 300, 1), 2);
        assert_eq!(packets(Kind::Atomic { fetch_add: true }, 8, 1), 1);
        assert_eq!(psn_add(0xff_ffff, 1), 0);
        assert_eq!(psn_add(0xff_fffe, 5), 3);
    }

    fn rc_qp(qpn: u32, next_rcv_psn: u32) -> Qp {
        Qp {
            qpn,
            st: ServiceType::Rc,
            state: QpState::Rts,
            pd: 0,
            cqn_snd: 0,
            cqn_rcv: 0,
            uar: 0,
            log_sq_size: 0,
            log_rq_size: 0,
            rq_wqe_shift: 4,
            no_sq: true,
            no_rq: false,
            pas: Default::default(),
            page_size: 4096,
            page_offset: 0,
            dbr: 0,
            user_index: 0,
            port: 1,
            pkey_index: 0,
            qkey: 0,
            rre: true,
            rwe: true,
            rae: true,
            mtu: 3,
            remote_qpn: 0,
            rlid: 1,
            sl: 0,
            next_send_psn: 0,
            next_rcv_psn,
            log_msg_max: 31,
            retry_count: 0,
            rnr_retry: 0,
            min_rnr_nak: 0,
            ack_timeout: 0,
            sq_consumed: 0,
            rq_consumed: 0,
            rnr_tries: 0,
            resend_at_ns: 0,
            ack_pending: false,
            retry_tries: 0,
            transport_retries: 0,
            comm_est: false,
            dct: None,
            dci: None,
            cs_req: 0,
            cs_res: 0,
            e2e_credit_mode: 0,
        }
    }

    fn request(kind: Kind, psn: u32, len: u64) -> Request {
        Request {
            kind,
            st: ServiceType::Rc,
            psn,
            src_qpn: 0x200,
            slid: 1,
            dlid: 1,
            sl: 0,
            dst_qpn: 0x100,
            payload: vec![0; if kind == Kind::Write { len as usize } else { 0 }],
            imm: None,
            solicited: false,
            raddr: 0x1000,
            // No such key: a request that gets as far as its rkey is refused with an access
            // error, so an ACK proves it was not executed.
            rkey: 0x4242,
            len,
            swap_add: 0,
            compare: 0,
            qkey: 0,
            grh: None,
            pkts: 1,
            xrc_srqn: None,
            dc_key: 0,
        }
    }

    #[test]
    fn a_dci_request_runs_on_the_low_bits_of_its_stream_id() {
        let mut qp = rc_qp(0x100, 0);
        qp.st = ServiceType::Dci;
        // Not a DCI: no streams.
        assert_eq!(dci_channel(&rc_qp(0x100, 0), 7), 0);
        // A DCI created without streams (as perftest's, which still names ids 0, 1, 2, ...).
        qp.dci = Some(crate::qp::DciStreams::default());
        assert_eq!(dci_channel(&qp, 0), 0);
        assert_eq!(dci_channel(&qp, 1), 0);
        assert_eq!(dci_channel(&qp, 0xffff), 0);
        // Four streams.
        qp.dci = Some(crate::qp::DciStreams {
            log_channels: 2,
            ..Default::default()
        });
        assert_eq!(dci_channel(&qp, 3), 3);
        assert_eq!(dci_channel(&qp, 6), 2);
        // As parsed from a WQE: control segment bytes 9..11 (rdma-core mlx5dv.h
        // `mlx5_wqe_ctrl_seg.dci_stream_channel_id`).
        let mut raw = vec![0u8; 128];
        raw[3] = wqe_opcode::RDMA_WRITE;
        raw[7] = 6; // control, address vector (3 x 16 bytes), remote address, data
        raw[9..11].copy_from_slice(&5u16.to_be_bytes());
        let w = Hca::parse_send_wqe(&qp, &raw, 2);
        assert_eq!(w.map(|w| w.dci_stream), Some(1));
        // A `ds` that leaves no room for the remote address segment: malformed, no panic.
        raw[7] = 4;
        assert!(Hca::parse_send_wqe(&qp, &raw, 2).is_none());
    }

    #[test]
    fn the_responder_checks_the_psn_then_the_rdma_length() {
        let hal = SimHal::synchronous();
        hal.model().with(|h| {
            let expected = 0xff_fffe;
            h.qps.insert(0x100, rc_qp(0x100, expected));
            let epsn = |h: &Hca| h.qp(0x100).map(|q| q.next_rcv_psn);
            // An RDMA READ longer than 2^31 bytes: remote invalid request, nothing accepted.
            let r = h.respond(&request(Kind::Read, expected, MAX_RDMA_LEN + 1));
            assert!(matches!(r, Response::Nak(synd::REMOTE_INVAL_REQ)));
            assert_eq!(epsn(h), Some(expected));
            // The responder went to ERR (IBA 9.9.3.1 class C); back to RTS for what follows.
            let rearm = |h: &mut Hca| {
                let q = h.qps.get_mut(&0x100).unwrap();
                assert_eq!(q.state, QpState::Err);
                q.state = QpState::Rts;
            };
            rearm(h);
            // Ahead (across the wrap), up to half the PSN space: sequence error NAK.
            for psn in [0, psn_add(expected, (1 << 23) - 1)] {
                let r = h.respond(&request(Kind::Write, psn, 4));
                assert!(matches!(r, Response::NakSeq), "psn {psn:#x}");
            }
            // Behind, down to half the PSN space: a duplicate WRITE, acknowledged unexecuted.
            for psn in [expected - 1, psn_add(expected, 1 << 23)] {
                let r = h.respond(&request(Kind::Write, psn, 4));
                assert!(
                    matches!(r, Response::Ack(ref d) if d.is_empty()),
                    "psn {psn:#x}"
                );
            }
            assert_eq!(epsn(h), Some(expected));
            // The expected PSN is executed (here: refused for its rkey) and does not advance.
            let r = h.respond(&request(Kind::Write, expected, 4));
            assert!(matches!(r, Response::Nak(synd::REMOTE_ACCESS)));
            assert_eq!(epsn(h), Some(expected));
            rearm(h);
            // A QP without remote read: remote invalid request, not an access error.
            if let Some(q) = h.qps.get_mut(&0x100) {
                q.rre = false;
            }
            let r = h.respond(&request(Kind::Read, expected, 8));
            assert!(matches!(r, Response::Nak(synd::REMOTE_INVAL_REQ)));
        });
    }
}
