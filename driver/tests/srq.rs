//! Receives through a shared receive queue, against the model: an RMP made as Linux 6.12
//! mlx5_ib makes a user SRQ at ISSI 1 (srq_cmd.c `create_rmp_cmd`: linked-list `wq`, the
//! queue `page_offset` 64ths into its first page), two RC QPs receiving from it (`rq_type`
//! SRQ), WQEs posted the way rdma-core 56 providers/mlx5/srq.c `mlx5_post_srq_recv` posts
//! them (a linked list whose free WQEs are relinked at the tail), and messages from our
//! driver's QPs landing in them in list order. The receive CQEs are read raw to check the
//! fields rdma-core's cq.c `handle_responder` uses: `wqe_counter`, `byte_cnt`, the QPN and
//! `srqn_uidx`.

use std::time::Duration;

use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device};
use bareverbs_firmware_cmd::commands::*;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View, ViewMut};
use bareverbs_hal::{Hal, SharedDma};
use bareverbs_model::{SimDma, SimHal};

mod common;
use common::{exec, poll_one, raw_rst2rtr, region, send_wr, sge};

const PAGE: usize = 4096;
/// log2 of the SRQ's WQEs.
const LOG_SRQ: u8 = 3;
/// WQE stride: the 16-byte next segment and three data segments.
const LOG_STRIDE: u8 = 6;
/// `wq.page_offset`: the queue starts 16/64 of a page (1 KiB) into its first page.
const PAGE_OFFSET: u8 = 16;
/// Data segments per WQE.
const MAX_GS: usize = 3;

/// The SRQ's buffer and doorbell record, posted to as rdma-core 56 srq.c does: WQEs linked
/// 0 → 1 → … → n−1 at creation (`mlx5_alloc_srq_buf`, here without a wait queue), head 0,
/// tail n−1; a completed WQE is marked free (`mlx5_free_srq_wqe`) and relinked at the tail
/// only when the list runs out (`set_next_tail`, else `set_next_contig_wqes`).
struct SrqRing {
    buf: SharedDma<SimDma>,
    head: usize,
    tail: usize,
    free: Vec<bool>,
    counter: u16,
}

impl SrqRing {
    const N: usize = 1 << LOG_SRQ;
    /// Byte offset of WQE 0 in the buffer.
    const START: usize = PAGE * PAGE_OFFSET as usize / 64;
    /// Where the doorbell record sits: the buffer's second page.
    const DBR: usize = PAGE;

    fn new(hal: &SimHal) -> Self {
        let buf = hal.dma_alloc(2 * PAGE, PAGE).unwrap().share();
        buf.fill(0, 2 * PAGE, 0).unwrap();
        let r = SrqRing {
            buf,
            head: 0,
            tail: Self::N - 1,
            free: vec![false; Self::N],
            counter: 0,
        };
        for i in 0..Self::N - 1 {
            r.set_next(i, i + 1);
        }
        r
    }

    fn at(i: usize) -> usize {
        Self::START + (i << LOG_STRIDE)
    }

    fn next(&self, i: usize) -> usize {
        let mut b = [0u8; 16];
        self.buf.read_bytes(Self::at(i), &mut b).unwrap();
        View::<WqeSrqNextSeg>::new_checked(&b)
            .unwrap()
            .get(wqe_srq_next_seg::next_wqe_index) as usize
    }

    fn set_next(&self, i: usize, next: usize) {
        let mut b = [0u8; 16];
        ViewMut::<WqeSrqNextSeg>::zeroed(&mut b)
            .unwrap()
            .set(wqe_srq_next_seg::next_wqe_index, next as u16);
        self.buf.write_bytes(Self::at(i), &b).unwrap();
    }

    fn set_next_tail(&mut self, next: usize) {
        self.set_next(self.tail, next);
        self.tail = next;
        self.free[next] = false;
    }

    /// The first run of free WQEs in `first..last`: (start, length).
    fn contig(&self, first: usize, last: usize) -> (usize, usize) {
        let mut n = 0;
        let mut i = first;
        while i < last {
            if self.free[i] {
                n += 1;
            } else if n > 0 {
                break;
            }
            i += 1;
        }
        (i - n, n)
    }

    /// `set_next_contig_wqes`: links the free run nearest after the head at the tail.
    fn set_next_contig(&mut self) -> bool {
        let (mut start, mut n) = self.contig(self.head + 1, Self::N);
        if n == 0 {
            (start, n) = self.contig(0, self.head);
            if n == 0 {
                return false;
            }
        }
        self.set_next(self.tail, start);
        self.tail = start + n - 1;
        self.free[self.tail] = false;
        for i in start..self.tail {
            self.set_next(i, i + 1);
            self.free[i] = false;
        }
        true
    }

    /// Posts one receive over `sg`; the WQE index it took, or `None` when the SRQ is full.
    fn post(&mut self, sg: &[Sge]) -> Option<usize> {
        if self.head == self.tail {
            let next = (self.tail + 1) % Self::N;
            if self.free[next] {
                self.set_next_tail(next);
            } else if !self.set_next_contig() {
                return None;
            }
        }
        let idx = self.head;
        self.head = self.next(idx);
        let mut segs = [0u8; 16 * MAX_GS];
        for (k, chunk) in segs.chunks_mut(16).enumerate() {
            let mut d = ViewMut::<WqeDataSeg>::zeroed(chunk).unwrap();
            match sg.get(k) {
                Some(s) => {
                    d.set(wqe_data_seg::byte_count, s.length)
                        .set(wqe_data_seg::lkey, s.lkey.raw())
                        .set(wqe_data_seg::addr, s.addr);
                }
                None => {
                    d.set(wqe_data_seg::lkey, INVALID_LKEY);
                    break;
                }
            }
        }
        self.buf.write_bytes(Self::at(idx) + 16, &segs).unwrap();
        self.counter = self.counter.wrapping_add(1);
        self.buf
            .write_bytes(Self::DBR, &u32::from(self.counter).to_be_bytes())
            .unwrap();
        Some(idx)
    }
}

/// A CQ read raw, on the driver's asynchronous EQ (never armed).
struct RawCq {
    cqn: u32,
    buf: SharedDma<SimDma>,
    ci: u32,
}

impl RawCq {
    fn new(hal: &SimHal, dev: &Device<&SimHal>) -> Self {
        let buf = hal.dma_alloc(2 * PAGE, PAGE).unwrap().share();
        buf.fill(0, PAGE, 0xff).unwrap();
        buf.fill(PAGE, PAGE, 0).unwrap();
        let mut i = vec![0u8; CreateCqIn::BYTES + 8];
        {
            let mut v = ViewMut::<CreateCqIn>::zeroed(&mut i).unwrap();
            v.sub(create_cq_in::cq_context)
                .set(cqc::log_cq_size, 6u8)
                .set(cqc::uar_page, dev.uar().unwrap().index().raw())
                .set(
                    cqc::c_eqn_or_apu_element,
                    u32::from(dev.async_eqn().unwrap().0),
                )
                .set(cqc::dbr_addr, buf.iova().0 + PAGE as u64);
            v.set_array(create_cq_in::pas, 0, buf.iova().0).unwrap();
        }
        let o = exec::<CreateCq>(dev, &mut i).unwrap();
        let cqn = View::<CreateCqOut>::new_checked(&o)
            .unwrap()
            .get32(create_cq_out::cqn);
        RawCq { cqn, buf, ci: 0 }
    }

    /// The next CQE, consumed.
    fn poll(&mut self) -> Option<[u8; 64]> {
        let mut c = [0u8; 64];
        self.buf
            .read_bytes((self.ci as usize % 64) * 64, &mut c)
            .unwrap();
        let owner = (self.ci / 64) as u8 & 1;
        if c[63] >> 4 == 0xf || c[63] & 1 != owner {
            return None;
        }
        self.ci += 1;
        self.buf.write_bytes(PAGE, &self.ci.to_be_bytes()).unwrap();
        Some(c)
    }
}

/// The fields rdma-core's `handle_responder` reads from a receive CQE.
#[derive(Debug, PartialEq, Eq)]
struct Recv {
    opcode: u8,
    wqe_counter: u16,
    byte_cnt: u32,
    qpn: u32,
    srqn_uidx: u32,
}

fn recv(c: &[u8; 64]) -> Recv {
    let v = View::<Cqe64>::new_checked(c).unwrap();
    Recv {
        opcode: get_cqe_opcode(v.get(cqe64::op_own) as u8),
        wqe_counter: v.get(cqe64::wqe_counter) as u16,
        byte_cnt: v.get32(cqe64::byte_cnt),
        qpn: cqe_qpn(v.get32(cqe64::sop_drop_qpn)),
        srqn_uidx: cqe_srqn(v.get32(cqe64::srqn)),
    }
}

/// An RMP over `ring`'s buffer as Linux 6.12 srq_cmd.c `create_rmp_cmd` builds it: state
/// The next receive CQE on `cq` is message `msg` of `len` bytes taken from SRQ WQE `wqe` of
/// QP `qpn`, and the message fills the WQE's buffer at `at` in `buf` and no more. rdma-core 56
/// cq.c `handle_responder`: with an SRQ, wr_id = srq->wrid[wqe_counter], the SRQ WQE's index;
/// `get_cur_rsc` finds the QP (or, for XRC, `get_resp_ctx_v1` the SRQ) by `srqn_uidx` (CQE
/// version 1), or the SRQ by it (version 0).
fn check_recv(
    cq: &mut RawCq,
    buf: &SharedDma<SimDma>,
    at: usize,
    wqe: usize,
    qpn: u32,
    uidx: u32,
    (len, msg): (u32, u8),
) {
    let c = cq.poll().expect("a receive completion");
    assert_eq!(
        recv(&c),
        Recv {
            opcode: CqeOpcode::RespSend.into(),
            wqe_counter: wqe as u16,
            byte_cnt: len,
            qpn,
            srqn_uidx: uidx,
        },
        "message {msg}"
    );
    let mut b = vec![0u8; len as usize + 1];
    buf.read_bytes(at, &mut b).unwrap();
    assert!(
        b[..len as usize].iter().all(|&x| x == msg) && b[len as usize] == 0,
        "message {msg} fills WQE {wqe}'s buffer and no more"
    );
}

/// ready, linked-list `wq`, the queue `page_offset` 64ths into its first page.
fn create_rmp(dev: &Device<&SimHal>, ring: &SrqRing, pdn: u32, lwm: u16) -> u32 {
    let mut i = vec![0u8; CreateRmpIn::BYTES + 8];
    {
        let mut v = ViewMut::<CreateRmpIn>::zeroed(&mut i).unwrap();
        let mut c = v.sub(create_rmp_in::ctx);
        c.set(rmpc::state, rmpc_state::RDY);
        c.sub(rmpc::wq)
            .set(wq::wq_type, wq_type::LINKED_LIST)
            .set(wq::page_offset, PAGE_OFFSET)
            .set(wq::lwm, lwm)
            .set(wq::pd, pdn)
            .set(wq::dbr_addr, ring.buf.iova().0 + SrqRing::DBR as u64)
            .set(wq::log_wq_stride, LOG_STRIDE)
            .set(wq::log_wq_pg_sz, 0u8)
            .set(wq::log_wq_sz, LOG_SRQ);
        v.set_array(create_rmp_in::pas, 0, ring.buf.iova().0)
            .unwrap();
    }
    let o = exec::<CreateRmp>(dev, &mut i).unwrap();
    View::<CreateRmpOut>::new_checked(&o)
        .unwrap()
        .get32(create_rmp_out::rmpn)
}

/// MODIFY_RMP setting the limit watermark (srq_cmd.c `arm_rmp_cmd`).
fn arm_rmp(dev: &Device<&SimHal>, rmpn: u32, lwm: u16) {
    let mut i = vec![0u8; ModifyRmpIn::BYTES];
    {
        let mut v = ViewMut::<ModifyRmpIn>::zeroed(&mut i).unwrap();
        v.set(modify_rmp_in::rmp_state, rmpc_state::RDY)
            .set(modify_rmp_in::rmpn, rmpn);
        v.sub(modify_rmp_in::bitmask).set(rmp_bitmask::lwm, 1u8);
        let mut c = v.sub(modify_rmp_in::ctx);
        c.set(rmpc::state, rmpc_state::RDY);
        c.sub(rmpc::wq).set(wq::lwm, lwm);
    }
    exec::<ModifyRmp>(dev, &mut i).unwrap();
}

/// An RC QP receiving from SRQ `srqn` (`rq_type` SRQ, `xrcd` Linux's default domain, as
/// qp.c `create_qp_common` fills them) with `user_index`, brought to RTR towards `peer`.
fn srq_qp(
    hal: &SimHal,
    dev: &Device<&SimHal>,
    pdn: u32,
    cq: &RawCq,
    (srqn, xrcd): (u32, u32),
    user_index: u32,
    peer: u32,
) -> (u32, SharedDma<SimDma>) {
    let uar = dev.uar().unwrap().index().raw();
    let buf = hal.dma_alloc(2 * PAGE, PAGE).unwrap().share();
    buf.fill(0, 2 * PAGE, 0).unwrap();
    let mut i = vec![0u8; CreateQpIn::BYTES + 8];
    {
        let mut v = ViewMut::<CreateQpIn>::zeroed(&mut i).unwrap();
        v.sub(create_qp_in::qpc)
            .set(qpc::st, qpc_st::RC)
            .set(qpc::pm_state, qpc_pm_state::MIGRATED)
            .set(qpc::pd, pdn)
            .set(qpc::log_sq_size, 2u8)
            .set(qpc::rq_type, qpc_rq_type::SRQ_RQ)
            .set(qpc::uar_page, uar)
            .set(qpc::user_index, user_index)
            .set(qpc::cqn_snd, cq.cqn)
            .set(qpc::cqn_rcv, cq.cqn)
            .set(qpc::srqn_rmpn_xrqn, srqn)
            .set(qpc::xrcd, xrcd)
            .set(qpc::dbr_addr, buf.iova().0 + PAGE as u64);
        v.set_array(create_qp_in::pas, 0, buf.iova().0).unwrap();
    }
    let o = exec::<CreateQp>(dev, &mut i).unwrap();
    let qpn = View::<CreateQpOut>::new_checked(&o)
        .unwrap()
        .get32(create_qp_out::qpn);
    raw_rst2rtr(dev, qpn, |c| {
        c.set(qpc::mtu, qpc_mtu::MTU_4K)
            .set(qpc::log_msg_max, 30u8)
            .set(qpc::remote_qpn, peer)
            .set(qpc::min_rnr_nak, 12u8);
        c.sub(qpc::primary_address_path).set(ads::rlid, 1u16);
    });
    (qpn, buf)
}

/// Our driver's RC QP sending to `peer` with `rnr_retry`.
fn sender<'p, 'd, 'h>(
    pd: &'p Pd<'d, &'h SimHal>,
    cq: &Cq<'d, &'h SimHal>,
) -> Qp<'p, 'd, &'h SimHal> {
    let attr = QpInitAttr::new(
        QpType::Rc,
        cq,
        cq,
        QpCap {
            max_send_wr: 8,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
    );
    pd.create_qp(&attr).unwrap()
}

fn connect(q: &mut Qp<'_, '_, &SimHal>, peer: u32, rnr_retry: u8) {
    q.to_init(1, 0, AccessFlags::LOCAL_WRITE, 0).unwrap();
    let path = AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    q.to_rtr(peer, 0, path, Mtu::Mtu4096).unwrap();
    let mut attr = QpAttr::default();
    attr.qp_state = QpState::Rts;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = rnr_retry;
    let mask = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    q.modify(&attr, mask).unwrap();
}

fn alloc_xrcd(dev: &Device<&SimHal>) -> u32 {
    let mut i = vec![0u8; AllocXrcdIn::BYTES];
    let o = exec::<AllocXrcd>(dev, &mut i).unwrap();
    View::<AllocXrcdOut>::new_checked(&o)
        .unwrap()
        .get32(alloc_xrcd_out::xrcd)
}

/// The asynchronous events the driver has seen since the last call that `want` picks.
fn events_of(dev: &Device<&SimHal>, want: impl Fn(AsyncEvent) -> bool) -> usize {
    dev.poll_events();
    let mut n = 0;
    while let Some(e) = dev.next_event() {
        if want(e) {
            n += 1;
        }
    }
    n
}

#[test]
fn two_qps_share_an_rmp_and_take_its_wqes_in_list_order() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let pdn = pd.pdn().raw();
    let scq = dev.create_cq(64).unwrap();
    let mut rcq = RawCq::new(&hal, &dev);
    let xrcd = alloc_xrcd(&dev);
    let mut ring = SrqRing::new(&hal);
    let rmpn = create_rmp(&dev, &ring, pdn, 0);

    let mut a = sender(&pd, &scq);
    let mut b = sender(&pd, &scq);
    // QP s1 asks for version 1 CQEs with user index 0x11; s2 for version 0 (Linux 6.12 qp.c:
    // "0xffffff means we ask to work with cqe version 0").
    let (s1, _b1) = srq_qp(&hal, &dev, pdn, &rcq, (rmpn, xrcd), 0x11, a.qpn().raw());
    let (s2, _b2) = srq_qp(
        &hal,
        &dev,
        pdn,
        &rcq,
        (rmpn, xrcd),
        0xff_ffff,
        b.qpn().raw(),
    );
    connect(&mut a, s1, 7);
    connect(&mut b, s2, 7);

    // Each receive buffer is 256 bytes of `dst`, one per SRQ WQE; the messages are 100 + k
    // bytes of byte value k.
    let dst = region(&pd, SrqRing::N * 256, AccessFlags::LOCAL_WRITE);
    let src = region(&pd, PAGE, AccessFlags::LOCAL_WRITE);
    let slot = |i: usize| [sge(&dst, (i * 256) as u64, 256)];
    // Message k: 100 + k bytes of value k.
    let sent = std::cell::Cell::new(0u8);
    let send = |q: &mut Qp<'_, '_, &SimHal>| -> (u32, u8) {
        let msg = sent.get() + 1;
        sent.set(msg);
        let len = 100 + u32::from(msg);
        src.buf().fill(0, len as usize, msg).unwrap();
        let one = [sge(&src, 0, len)];
        q.post_send(&[send_wr(u64::from(msg), &one, SendOp::Send)])
            .unwrap();
        (len, msg)
    };
    let check = |rcq: &mut RawCq, wqe: usize, qpn: u32, uidx: u32, m: (u32, u8)| {
        check_recv(rcq, dst.buf(), wqe * 256, wqe, qpn, uidx, m)
    };

    // Three receives: WQEs 0, 1, 2, taken in that order whichever QP a message arrives on.
    for i in 0..3 {
        assert_eq!(ring.post(&slot(i)), Some(i));
    }
    let m = send(&mut a);
    check(&mut rcq, 0, s1, 0x11, m);
    let m = send(&mut b);
    check(&mut rcq, 1, s2, rmpn, m);
    let m = send(&mut a);
    check(&mut rcq, 2, s1, 0x11, m);
    // The application polls the completions of WQEs 1 and 2, not yet 0's.
    ring.free[1] = true;
    ring.free[2] = true;

    // Five more take 3..=7; the list then runs out and rdma-core links the free run 1, 2 at the
    // tail (7 → 1 → 2), so the next post takes WQE 1 (a ring would have taken 0), and the SRQ
    // is then full (2 is the unposted tail).
    let order: Vec<_> = (0..6).map(|_| ring.post(&slot(0)).unwrap()).collect();
    assert_eq!(order, [3, 4, 5, 6, 7, 1]);
    // Point each WQE's scatter entry at its own slot.
    for &wqe in &order {
        let mut seg = [0u8; 16];
        ViewMut::<WqeDataSeg>::zeroed(&mut seg)
            .unwrap()
            .set(wqe_data_seg::byte_count, 256u32)
            .set(wqe_data_seg::lkey, dst.lkey().raw())
            .set(wqe_data_seg::addr, dst.addr() + (wqe * 256) as u64);
        ring.buf.write_bytes(SrqRing::at(wqe) + 16, &seg).unwrap();
    }
    assert_eq!(ring.post(&slot(0)), None, "SRQ full");
    for (n, &wqe) in order.iter().enumerate() {
        let (q, s, uidx) = if n % 2 == 0 {
            (&mut a, s1, 0x11)
        } else {
            (&mut b, s2, rmpn)
        };
        let m = send(q);
        check(&mut rcq, wqe, s, uidx, m);
    }
    for wqe in order.iter().chain(&[0]) {
        ring.free[*wqe] = true;
    }

    // Nothing posted: the SEND is refused with RNR NAKs (rnr_retry 7 waits for ever) and
    // nothing is consumed; once a WQE is posted the retry after the responder's RNR timer
    // (min_rnr_nak 12, 0.64 ms) lands in it.
    let m = send(&mut a);
    assert!(rcq.poll().is_none());
    let tries = |q: u32| hal.model().with(|h| h.qp(q).map(|q| q.rnr_tries));
    assert!(tries(a.qpn().raw()).unwrap() > 0, "RNR NAKed");
    assert_eq!(ring.post(&slot(2)), Some(2));
    hal.delay(Duration::from_micros(700));
    check(&mut rcq, 2, s1, 0x11, m);
    ring.free[2] = true;

    // The limit event: armed at 2, it fires once when the WQEs left drop below 2
    // (ibv_modify_srq(3): the limit is then disarmed), as EQE type 0x14 (mlx5_ifc / device.h
    // MLX5_EVENT_TYPE_SRQ_RQ_LIMIT) on the asynchronous EQ.
    assert_eq!(
        events_of(&dev, |e| e == AsyncEvent::SrqLimitReached { srqn: rmpn }),
        0
    );
    arm_rmp(&dev, rmpn, 2);
    let next: Vec<_> = (3..6).map(|i| ring.post(&slot(i)).unwrap()).collect();
    assert_eq!(next, [3, 4, 5]);
    let m = send(&mut b);
    check(&mut rcq, 3, s2, rmpn, m);
    assert_eq!(
        events_of(&dev, |e| e == AsyncEvent::SrqLimitReached { srqn: rmpn }),
        0,
        "2 left: not below 2"
    );
    let m = send(&mut b);
    check(&mut rcq, 4, s2, rmpn, m);
    assert_eq!(
        events_of(&dev, |e| e == AsyncEvent::SrqLimitReached { srqn: rmpn }),
        1,
        "1 left"
    );
    assert_eq!(hal.model().with(|h| h.srq(rmpn).map(|s| s.lwm)), Some(0));
    let m = send(&mut b);
    check(&mut rcq, 5, s2, rmpn, m);
    assert_eq!(
        events_of(&dev, |e| e == AsyncEvent::SrqLimitReached { srqn: rmpn }),
        0,
        "disarmed"
    );

    // s1 to ERR: it has no receive WQEs of its own, so nothing is flushed and the SRQ keeps
    // its WQEs for s2; the QP announces its last WQE (event 0x13, SRQ_LAST_WQE).
    let mut i = vec![0u8; Qp2ErrIn::BYTES];
    ViewMut::<Qp2ErrIn>::zeroed(&mut i)
        .unwrap()
        .set(qp_2err_in::qpn, s1);
    exec::<Qp2Err>(&dev, &mut i).unwrap();
    assert!(rcq.poll().is_none(), "no flush completion");
    assert_eq!(
        events_of(&dev, |e| e == AsyncEvent::QpLastWqeReached { qpn: s1 }),
        1
    );
    assert_eq!(ring.post(&slot(6)), Some(6));
    let m = send(&mut b);
    check(&mut rcq, 6, s2, rmpn, m);

    // Every SEND completed at its requester.
    let mut scq = scq;
    for _ in 0..sent.get() {
        assert_eq!(poll_one(&mut scq).status, WcStatus::Success);
    }
}

/// An XRC SRQ over `ring`'s buffer as Linux 6.12 srq_cmd.c `create_xrc_srq_cmd` builds it
/// (`xrc_srqc`: domain, CQ, PD, user index, the queue `page_offset` 64ths into its page).
fn create_xrc_srq(
    dev: &Device<&SimHal>,
    ring: &SrqRing,
    pdn: u32,
    (xrcd, cqn): (u32, u32),
    user_index: u32,
) -> u32 {
    let dbr = ring.buf.iova().0 + SrqRing::DBR as u64;
    let mut i = vec![0u8; CreateXrcSrqIn::BYTES + 8];
    {
        let mut v = ViewMut::<CreateXrcSrqIn>::zeroed(&mut i).unwrap();
        v.sub(create_xrc_srq_in::xrc_srq_context_entry)
            .set(xrc_srqc::log_xrc_srq_size, LOG_SRQ)
            .set(xrc_srqc::log_rq_stride, LOG_STRIDE - 4)
            .set(xrc_srqc::page_offset, PAGE_OFFSET)
            .set(xrc_srqc::xrcd, xrcd)
            .set(xrc_srqc::cqn, cqn)
            .set(xrc_srqc::pd, pdn)
            .set(xrc_srqc::user_index, user_index)
            .set(xrc_srqc::db_record_addr_h, dbr >> 32)
            .set(xrc_srqc::db_record_addr_l, (dbr & 0xffff_ffff) >> 2);
        v.set_array(create_xrc_srq_in::pas, 0, ring.buf.iova().0)
            .unwrap();
    }
    let o = exec::<CreateXrcSrq>(dev, &mut i).unwrap();
    View::<CreateXrcSrqOut>::new_checked(&o)
        .unwrap()
        .get32(create_xrc_srq_out::xrc_srqn)
}

/// An XRC QP (`st` XRC, `rq_type` SRQ naming the default SRQ `s0` and `xrcd`; Linux 6.12 qp.c
/// `get_rx_type`): with `target`, as `create_xrc_tgt_qp` makes it (`no_sq`, no UAR and no
/// pages, the CQs mlx5_ib's placeholder `c0`), else the initiator with a 4-WQEBB send queue
/// completing on `cq`. Brought to RTS towards `peer` with remote write enabled.
fn xrc_qp(
    hal: &SimHal,
    dev: &Device<&SimHal>,
    pdn: u32,
    cq: &RawCq,
    (s0, xrcd): (u32, u32),
    target: bool,
    user_index: u32,
) -> (u32, SharedDma<SimDma>) {
    let buf = hal.dma_alloc(2 * PAGE, PAGE).unwrap().share();
    buf.fill(0, 2 * PAGE, 0).unwrap();
    let mut i = vec![0u8; CreateQpIn::BYTES + 8];
    {
        let mut v = ViewMut::<CreateQpIn>::zeroed(&mut i).unwrap();
        let mut c = v.sub(create_qp_in::qpc);
        c.set(qpc::st, qpc_st::XRC)
            .set(qpc::pm_state, qpc_pm_state::MIGRATED)
            .set(qpc::pd, pdn)
            .set(qpc::rq_type, qpc_rq_type::SRQ_RQ)
            .set(qpc::user_index, user_index)
            .set(qpc::cqn_snd, cq.cqn)
            .set(qpc::cqn_rcv, cq.cqn)
            .set(qpc::srqn_rmpn_xrqn, s0)
            .set(qpc::xrcd, xrcd)
            .set(qpc::dbr_addr, buf.iova().0 + PAGE as u64);
        if target {
            c.set(qpc::no_sq, 1u8);
        } else {
            c.set(qpc::log_sq_size, 2u8)
                .set(qpc::uar_page, dev.uar().unwrap().index().raw());
            v.set_array(create_qp_in::pas, 0, buf.iova().0).unwrap();
        }
    }
    let o = exec::<CreateQp>(dev, &mut i).unwrap();
    let qpn = View::<CreateQpOut>::new_checked(&o)
        .unwrap()
        .get32(create_qp_out::qpn);
    (qpn, buf)
}

/// RST2INIT (remote write, read and atomics on), INIT2RTR towards `peer` and RTR2RTS with
/// `rnr_retry`, as hand-built commands.
fn xrc_to_rts(dev: &Device<&SimHal>, qpn: u32, peer: u32, rnr_retry: u8) {
    let mut i = vec![0u8; Rst2InitQpIn::BYTES];
    {
        let mut v = ViewMut::<Rst2InitQpIn>::zeroed(&mut i).unwrap();
        v.set(rst2init_qp_in::qpn, qpn);
        let mut c = v.sub(rst2init_qp_in::qpc);
        c.set(qpc::rre, 1u8).set(qpc::rwe, 1u8).set(qpc::rae, 1u8);
        c.sub(qpc::primary_address_path)
            .set(ads::vhca_port_num, 1u8);
    }
    exec::<Rst2InitQp>(dev, &mut i).unwrap();
    let mut i = vec![0u8; Init2RtrQpIn::BYTES];
    {
        let mut v = ViewMut::<Init2RtrQpIn>::zeroed(&mut i).unwrap();
        v.set(init2rtr_qp_in::qpn, qpn);
        let mut c = v.sub(init2rtr_qp_in::qpc);
        c.set(qpc::mtu, qpc_mtu::MTU_4K)
            .set(qpc::log_msg_max, 30u8)
            .set(qpc::remote_qpn, peer)
            .set(qpc::min_rnr_nak, 12u8);
        c.sub(qpc::primary_address_path).set(ads::rlid, 1u16);
    }
    exec::<Init2RtrQp>(dev, &mut i).unwrap();
    let mut i = vec![0u8; Rtr2RtsQpIn::BYTES];
    {
        let mut v = ViewMut::<Rtr2RtsQpIn>::zeroed(&mut i).unwrap();
        v.set(rtr2rts_qp_in::qpn, qpn);
        v.sub(rtr2rts_qp_in::qpc)
            .set(qpc::retry_count, 7u8)
            .set(qpc::rnr_retry, rnr_retry);
    }
    exec::<Rtr2RtsQp>(dev, &mut i).unwrap();
}

/// Posts one signaled WQE on XRC initiator `qpn` (buffer `buf`, doorbell record at its second
/// page) as rdma-core 56 providers/mlx5/qp.c `_mlx5_post_send` lays it out for
/// IBV_QPT_XRC_SEND: control segment, XRC segment naming `xrc_srqn`, for RDMA WRITE the remote
/// address segment, one data segment; then runs the send queue.
fn xrc_post(
    hal: &SimHal,
    (qpn, buf): (u32, &SharedDma<SimDma>),
    pi: &mut u16,
    opcode: u8,
    xrc_srqn: u32,
    raddr: Option<(u64, u32)>,
    sg: Sge,
) {
    let ds = 3 + u8::from(raddr.is_some());
    let mut w = vec![0u8; usize::from(ds) * 16];
    ViewMut::<WqeCtrlSeg>::new_checked(&mut w[..16])
        .unwrap()
        .set(wqe_ctrl_seg::opcode, opcode)
        .set(wqe_ctrl_seg::wqe_index, *pi)
        .set(wqe_ctrl_seg::qpn, qpn)
        .set(wqe_ctrl_seg::ds, ds)
        .set(wqe_ctrl_seg::fm_ce_se, fm_ce_se::CQ_UPDATE);
    ViewMut::<WqeXrcSeg>::new_checked(&mut w[16..32])
        .unwrap()
        .set(wqe_xrc_seg::xrc_srqn, xrc_srqn);
    let mut off = 32;
    if let Some((addr, rkey)) = raddr {
        ViewMut::<WqeRaddrSeg>::new_checked(&mut w[off..off + 16])
            .unwrap()
            .set(wqe_raddr_seg::raddr, addr)
            .set(wqe_raddr_seg::rkey, rkey);
        off += 16;
    }
    ViewMut::<WqeDataSeg>::new_checked(&mut w[off..off + 16])
        .unwrap()
        .set(wqe_data_seg::byte_count, sg.length)
        .set(wqe_data_seg::lkey, sg.lkey.raw())
        .set(wqe_data_seg::addr, sg.addr);
    // A WQE of up to 4 segments fits one 64-byte WQEBB of the 4-WQEBB queue.
    buf.write_bytes(usize::from(*pi % 4) * 64, &w).unwrap();
    *pi = pi.wrapping_add(1);
    buf.write_bytes(PAGE + 4, &u32::from(*pi).to_be_bytes())
        .unwrap();
    hal.model().with(|h| h.run_sq(qpn));
}

#[test]
fn an_xrc_initiator_sends_through_one_target_into_the_srq_each_message_names() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let pdn = pd.pdn().raw();
    // Linux's device resources: the domain of the default SRQ s0, and mlx5_ib's c0.
    let mut c0 = RawCq::new(&hal, &dev);
    let x_default = alloc_xrcd(&dev);
    let ring0 = SrqRing::new(&hal);
    let s0 = create_rmp(&dev, &ring0, pdn, 0);
    // The application's domain, its two XRC SRQs each completing on its own CQ, and an XRC
    // SRQ of another domain.
    let xrcd = alloc_xrcd(&dev);
    let other = alloc_xrcd(&dev);
    let (mut cq1, mut cq2, mut cq3) = (
        RawCq::new(&hal, &dev),
        RawCq::new(&hal, &dev),
        RawCq::new(&hal, &dev),
    );
    let (mut ring1, mut ring2, mut ring3) =
        (SrqRing::new(&hal), SrqRing::new(&hal), SrqRing::new(&hal));
    let srq1 = create_xrc_srq(&dev, &ring1, pdn, (xrcd, cq1.cqn), 0x21);
    let srq2 = create_xrc_srq(&dev, &ring2, pdn, (xrcd, cq2.cqn), 0x22);
    let srq3 = create_xrc_srq(&dev, &ring3, pdn, (other, cq3.cqn), 0x23);

    let mut scq = RawCq::new(&hal, &dev);
    let (tgt, _tb) = xrc_qp(&hal, &dev, pdn, &c0, (s0, xrcd), true, 0x30);
    let (ini, ib) = xrc_qp(&hal, &dev, pdn, &scq, (s0, x_default), false, 0x40);
    xrc_to_rts(&dev, tgt, ini, 0);
    xrc_to_rts(&dev, ini, tgt, 7);

    let dst = region(
        &pd,
        4 * SrqRing::N * 256,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let src = region(&pd, PAGE, AccessFlags::LOCAL_WRITE);
    let mut pi = 0u16;
    let mut msg = 0u8;
    let mut send = |hal: &SimHal, pi: &mut u16, srqn: u32| -> (u32, u8) {
        msg += 1;
        let len = 100 + u32::from(msg);
        src.buf().fill(0, len as usize, msg).unwrap();
        xrc_post(
            hal,
            (ini, &ib),
            pi,
            wqe_opcode::SEND,
            srqn,
            None,
            sge(&src, 0, len),
        );
        (len, msg)
    };
    // The receive CQE on the XRC SRQ's CQ: the target QP's number, the SRQ WQE's index, and in
    // srqn_uidx the XRC SRQ's user index (rdma-core 56 cq.c `get_resp_ctx_v1` finds the SRQ by
    // it: `mlx5_find_uidx`, then `is_srq`), data in that WQE's buffer.
    let check = |cq: &mut RawCq, base: usize, wqe: usize, uidx: u32, m: (u32, u8)| {
        check_recv(cq, dst.buf(), base + wqe * 256, wqe, tgt, uidx, m)
    };
    // The send CQE on the initiator's CQ: its QPN and user index (Linux 6.12 qp.c sets
    // qpc.user_index for every QP with CQE version 1).
    let sent = |scq: &mut RawCq, wqe: u16, op: u8| {
        let c = scq.poll().expect("a send completion");
        let v = View::<Cqe64>::new_checked(&c).unwrap();
        assert_eq!(
            get_cqe_opcode(v.get(cqe64::op_own) as u8),
            u8::from(CqeOpcode::Req)
        );
        assert_eq!(cqe_qpn(v.get32(cqe64::sop_drop_qpn)), ini);
        assert_eq!(v.get(cqe64::sop_drop_qpn) >> 24, u64::from(op));
        assert_eq!(v.get(cqe64::wqe_counter) as u16, wqe);
        assert_eq!(cqe_srqn(v.get32(cqe64::srqn)), 0x40);
    };
    let (b1, b2) = (0, SrqRing::N * 256);
    for i in 0..2 {
        assert_eq!(
            ring1.post(&[sge(&dst, (b1 + i * 256) as u64, 256)]),
            Some(i)
        );
    }
    assert_eq!(ring2.post(&[sge(&dst, b2 as u64, 256)]), Some(0));

    // Three SENDs through the one target QP, each into the XRC SRQ its WQE names.
    let m = send(&hal, &mut pi, srq1);
    check(&mut cq1, b1, 0, 0x21, m);
    let m = send(&hal, &mut pi, srq2);
    check(&mut cq2, b2, 0, 0x22, m);
    let m = send(&hal, &mut pi, srq1);
    check(&mut cq1, b1, 1, 0x21, m);
    for w in 0..3 {
        sent(&mut scq, w, wqe_opcode::SEND);
    }
    assert!(
        cq1.poll().is_none() && cq2.poll().is_none(),
        "one CQE per message"
    );
    assert!(c0.poll().is_none(), "nothing on the target QP's own CQ");

    // RDMA WRITE on XRC works as on RC; the rkey is checked against the XRC SRQ's PD.
    let wbase = 2 * SrqRing::N * 256;
    src.buf().fill(0, 64, 0x77).unwrap();
    xrc_post(
        &hal,
        (ini, &ib),
        &mut pi,
        wqe_opcode::RDMA_WRITE,
        srq2,
        Some((dst.addr() + wbase as u64, dst.rkey().raw())),
        sge(&src, 0, 64),
    );
    sent(&mut scq, 3, wqe_opcode::RDMA_WRITE);
    let mut b = [0u8; 65];
    dst.buf().read_bytes(wbase, &mut b).unwrap();
    assert!(b[..64].iter().all(|&x| x == 0x77) && b[64] == 0);
    assert!(cq2.poll().is_none(), "a WRITE takes no receive");

    // An empty XRC SRQ: RNR NAKs (rnr_retry 7 retries for ever), nothing delivered; once a
    // receive is posted the retry after the target's RNR timer (min_rnr_nak 12, 0.64 ms)
    // lands in it.
    let m = send(&hal, &mut pi, srq2);
    assert!(cq2.poll().is_none() && scq.poll().is_none());
    let tries = hal.model().with(|h| h.qp(ini).map(|q| q.rnr_tries));
    assert!(tries.unwrap() > 0, "RNR NAKed");
    assert_eq!(ring2.post(&[sge(&dst, (b2 + 256) as u64, 256)]), Some(1));
    hal.delay(Duration::from_micros(700));
    check(&mut cq2, b2, 1, 0x22, m);
    sent(&mut scq, 4, wqe_opcode::SEND);

    // An XRC SRQ of another domain: the target refuses the request with a remote access
    // error, nothing lands there, and the initiator's RC-like error moves it to ERR.
    assert_eq!(ring3.post(&[sge(&dst, 0, 256)]), Some(0));
    let _ = send(&hal, &mut pi, srq3);
    let c = scq.poll().expect("an error completion");
    let e = View::<ErrCqe>::new_checked(&c).unwrap();
    assert_eq!(
        CqeSyndrome::from(e.get(err_cqe::syndrome) as u8),
        CqeSyndrome::RemoteAccessErr
    );
    assert!(cq3.poll().is_none());
    assert_eq!(
        hal.model().with(|h| h.qp(ini).map(|q| q.state)),
        Some(bareverbs_model::qp::QpState::Err)
    );
}
