//! Test fixtures (feature `testing`): queue sizes, registered regions and scoped set-ups of
//! connected RC, UD and XRC pairs and of two Ethernet ends on one wire, over any [`Hal`].
//!
//! Each `with_*` fixture builds its objects, hands them to a closure and releases them all
//! when the closure returns (queue pairs first, then regions and CQs, then the PD), so a test
//! states only what it checks. Set-up failures panic (at the caller, `#[track_caller]`):
//! these are for tests, benchmarks and demonstrations, not for programs that must recover.
//!
//! ```
//! use bareverbs::testing::{cap, with_rc_pair, PairAttr};
//! use bareverbs::verbs::{SendFlags, WcStatus};
//! use bareverbs::{Config, Device};
//! use bareverbs_model::SimHal;
//!
//! let hal = SimHal::synchronous();
//! let dev = Device::bring_up(&hal, Config::default()).unwrap();
//! with_rc_pair(&dev, PairAttr::new(cap(16, 1, 64)), |p| {
//!     p.mr.buf().write_bytes(0, b"hello").unwrap();
//!     let (addr, rkey) = p.remote(2048);
//!     let src = [p.sge(0, 5)];
//!     p.a.send_batch(|b| b.rdma_write(7, SendFlags::SIGNALED, addr, rkey, &src))
//!         .unwrap()
//!         .unwrap();
//!     assert_eq!(bareverbs::testing::poll_one(&mut p.scq).status, WcStatus::Success);
//!     let mut got = [0u8; 5];
//!     p.mr.buf().read_bytes(2048, &mut got).unwrap();
//!     assert_eq!(&got, b"hello");
//! });
//! ```

use bareverbs_hal::Hal;

use crate::device::{AsyncEvent, Device};
use crate::eth::{
    EthPort, FlowDest, FlowMatch, FlowRule, PktPool, RxQueue, RxQueueAttr, TxQueue, TxQueueAttr,
};
use crate::verbs::{
    AccessFlags, Ah, AhAttr, Cq, Mr, Mtu, Pd, Qp, QpCap, QpInitAttr, QpType, Sge, SrqAttr, UdDest,
    Wc, XrcSrq, Xrcd,
};

/// Queue sizes: `wr` work requests and `sge` scatter/gather entries each way, `inline` bytes
/// of inline data per send.
pub const fn cap(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// Every access right a region or a QP can grant.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// `len` bytes of fresh DMA memory of `pd`'s device, registered with `access`.
///
/// # Panics
/// When the memory cannot be allocated or registered.
#[track_caller]
pub fn region<'p, 'd, H: Hal>(pd: &'p Pd<'d, H>, len: usize, access: AccessFlags) -> Mr<'p, 'd, H> {
    let buf = match pd.dev.hal().dma_alloc(len, 4096) {
        Ok(b) => b,
        Err(e) => panic!("fixture: allocating {len} bytes of DMA memory: {e}"),
    };
    match pd.reg_mr(buf.share(), access) {
        Ok(mr) => mr,
        Err((e, _)) => panic!("fixture: registering a region: {e}"),
    }
}

/// `len` bytes at `off` in `mr`.
pub fn sge<H: Hal>(mr: &Mr<'_, '_, H>, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    }
}

/// The one completion `cq` must hold now.
///
/// # Panics
/// When `cq` holds none.
#[track_caller]
pub fn poll_one<H: Hal>(cq: &mut Cq<'_, H>) -> Wc {
    let mut wc = [Wc::EMPTY; 1];
    assert_eq!(cq.poll(&mut wc), 1, "expected a completion");
    wc[0]
}

/// The event an event queue entry reports, decoded as [`Device::poll_events`] decodes the
/// entries it does not handle itself (page requests and command completions): for feeding
/// the decoder bytes no device wrote (fuzzing). Unknown types come back as
/// [`AsyncEvent::Other`].
pub fn decode_eqe(eqe: &[u8; 64]) -> AsyncEvent {
    AsyncEvent::from_eqe(eqe)
}

/// The path to port 1 of `dev` itself (its LID as read at bring-up or by the last
/// [`Device::query_port`]): what a QP of `dev` uses to reach another QP of `dev`.
pub fn loopback_path<H: Hal>(dev: &Device<H>) -> AhAttr {
    let dlid = dev.ports().first().map_or(0, |p| p.lid);
    AhAttr {
        dlid,
        port_num: 1,
        ..AhAttr::default()
    }
}

/// Brings two RC (or UC) QPs of one device to RTS towards each other through port 1 (its
/// own LID), PSNs 0, granting `access` to remote operations.
///
/// # Panics
/// When a transition fails.
#[track_caller]
pub fn connect_pair<'p, 'd, H: Hal>(
    a: &mut Qp<'p, 'd, H>,
    b: &mut Qp<'p, 'd, H>,
    access: AccessFlags,
    mtu: Mtu,
) {
    let path = loopback_path(a.pd.dev);
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    for (q, peer) in [(a, bn), (b, an)] {
        if let Err(e) = q.to_init(1, 0, access, 0) {
            panic!("fixture: QP {:#x} to INIT: {e}", q.qpn().raw());
        }
        if let Err(e) = q.to_rtr(peer, 0, path, mtu) {
            panic!("fixture: QP {:#x} to RTR: {e}", q.qpn().raw());
        }
        if let Err(e) = q.to_rts(0) {
            panic!("fixture: QP {:#x} to RTS: {e}", q.qpn().raw());
        }
    }
}

/// Brings a UD QP to RTS on port 1 with `qkey` (P_Key index 0, send PSN 0).
///
/// # Panics
/// When a transition fails.
#[track_caller]
pub fn ud_up<H: Hal>(q: &mut Qp<'_, '_, H>, qkey: u32) {
    let r = q
        .to_init(1, 0, AccessFlags::empty(), qkey)
        .and_then(|()| q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096))
        .and_then(|()| q.to_rts(0));
    if let Err(e) = r {
        panic!("fixture: UD QP {:#x} to RTS: {e}", q.qpn().raw());
    }
}

/// How a QP pair fixture is built: the same attributes for both QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairAttr {
    /// Both QPs' sizes.
    pub cap: QpCap,
    /// Entries of the send CQ both QPs share.
    pub send_cqe: u32,
    /// Entries of the receive CQ both QPs share.
    pub recv_cqe: u32,
    /// Every send completes with a CQE (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// The rights the QPs grant remote peers (RC, XRC) and the region is registered with.
    pub access: AccessFlags,
    /// Path MTU (RC, XRC).
    pub mtu: Mtu,
    /// Bytes of the pair's registered region.
    pub region_len: usize,
    /// The Q_Key of both QPs (UD).
    pub qkey: u32,
}

impl PairAttr {
    /// QPs of `cap`, CQs of 64 entries, every access right, MTU 1024, a region of 4096
    /// bytes, Q_Key `0x1111_1111`.
    pub fn new(cap: QpCap) -> Self {
        PairAttr {
            cap,
            send_cqe: 64,
            recv_cqe: 64,
            sq_sig_all: false,
            access: all_access(),
            mtu: Mtu::Mtu1024,
            region_len: 4096,
            qkey: 0x1111_1111,
        }
    }
}

/// What [`with_rc_pair`] hands its closure: two RC QPs `a` and `b` of one device connected to
/// each other, sharing the send CQ `scq` and the receive CQ `rcq`, and one region `mr`.
pub struct RcPair<'p, 'd, H: Hal> {
    /// One end.
    pub a: Qp<'p, 'd, H>,
    /// The other end.
    pub b: Qp<'p, 'd, H>,
    /// Both QPs' send CQ.
    pub scq: Cq<'d, H>,
    /// Both QPs' receive CQ.
    pub rcq: Cq<'d, H>,
    /// A region of the PD, registered with the pair's access rights.
    pub mr: Mr<'p, 'd, H>,
    /// The QPs' PD.
    pub pd: &'p Pd<'d, H>,
    /// The device.
    pub dev: &'d Device<H>,
}

impl<H: Hal> RcPair<'_, '_, H> {
    /// `len` bytes at `off` of the pair's region.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        sge(&self.mr, off, len)
    }

    /// The region's remote address at `off`, and its rkey.
    pub fn remote(&self, off: u64) -> (u64, u32) {
        (self.mr.addr() + off, self.mr.rkey().raw())
    }
}

/// Runs `f` with a fresh [`RcPair`] of `dev` built as `attr` says, connected through port 1,
/// and releases it all after.
///
/// # Panics
/// When a set-up step fails.
#[track_caller]
pub fn with_rc_pair<H: Hal, R>(
    dev: &Device<H>,
    attr: PairAttr,
    f: impl FnOnce(&mut RcPair<'_, '_, H>) -> R,
) -> R {
    let pd = must(dev.alloc_pd(), "allocating a PD");
    let (scq, rcq) = cqs(dev, &attr);
    let init = init_attr(QpType::Rc, &scq, &rcq, &attr);
    let mut a = must(pd.create_qp(&init), "creating QP a");
    let mut b = must(pd.create_qp(&init), "creating QP b");
    connect_pair(&mut a, &mut b, attr.access, attr.mtu);
    let mr = region(&pd, attr.region_len, attr.access);
    let mut pair = RcPair {
        a,
        b,
        scq,
        rcq,
        mr,
        pd: &pd,
        dev,
    };
    let r = f(&mut pair);
    // QPs first, then the region and the CQs, then the PD.
    drop(pair);
    r
}

/// What [`with_ud_pair`] hands its closure: two UD QPs `a` and `b` of one device at RTS with
/// the same Q_Key, sharing the send CQ `scq` and the receive CQ `rcq`, an address handle `ah`
/// to port 1 of the device itself, and one region `mr`.
pub struct UdPair<'p, 'd, H: Hal> {
    /// One end.
    pub a: Qp<'p, 'd, H>,
    /// The other end.
    pub b: Qp<'p, 'd, H>,
    /// Both QPs' send CQ.
    pub scq: Cq<'d, H>,
    /// Both QPs' receive CQ.
    pub rcq: Cq<'d, H>,
    /// The path to port 1 of the device.
    pub ah: Ah<'p, 'd, H>,
    /// A region of the PD, registered with the pair's access rights.
    pub mr: Mr<'p, 'd, H>,
    /// Both QPs' Q_Key.
    pub qkey: u32,
    /// The QPs' PD.
    pub pd: &'p Pd<'d, H>,
    /// The device.
    pub dev: &'d Device<H>,
}

impl<H: Hal> UdPair<'_, '_, H> {
    /// `len` bytes at `off` of the pair's region.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        sge(&self.mr, off, len)
    }

    /// The destination of a datagram from `a` to `b` (`b`'s number, the pair's Q_Key).
    ///
    /// # Panics
    /// Never for a pair the fixture built (its QP numbers fit 24 bits).
    pub fn to_b(&self) -> UdDest {
        self.dest(self.b.qpn().raw())
    }

    /// The destination of a datagram from `b` to `a`.
    ///
    /// # Panics
    /// As [`UdPair::to_b`].
    pub fn to_a(&self) -> UdDest {
        self.dest(self.a.qpn().raw())
    }

    fn dest(&self, qpn: u32) -> UdDest {
        must(self.ah.dest(qpn, self.qkey), "a UD destination")
    }
}

/// Runs `f` with a fresh [`UdPair`] of `dev` built as `attr` says (its `access` applies to
/// the region, its `mtu` to nothing: a datagram's limit is the port's), and releases it all
/// after.
///
/// A datagram from `a` lands in `b`'s receive after the 40 bytes of room for a GRH:
///
/// ```
/// use bareverbs::testing::{cap, poll_one, with_ud_pair, PairAttr};
/// use bareverbs::verbs::{RecvWr, SendFlags, SendOp, SendWr};
/// use bareverbs::{Config, Device};
/// use bareverbs_model::SimHal;
///
/// let hal = SimHal::synchronous();
/// let dev = Device::bring_up(&hal, Config::default()).unwrap();
/// with_ud_pair(&dev, PairAttr::new(cap(4, 1, 0)), |p| {
///     let into = [p.sge(0, 40 + 64)];
///     p.b.post_recv(&[RecvWr { wr_id: 1, sg_list: &into }]).unwrap();
///     p.mr.buf().write_bytes(1024, b"datagram").unwrap();
///     let from = [p.sge(1024, 8)];
///     let wr = SendWr {
///         wr_id: 2,
///         sg_list: &from,
///         inline_data: &[],
///         op: SendOp::Send,
///         flags: SendFlags::SIGNALED,
///         ud: Some(p.to_b()),
///     };
///     p.a.post_send(&[wr]).unwrap();
///     assert_eq!(poll_one(&mut p.scq).wr_id, 2);
///     let wc = poll_one(&mut p.rcq);
///     assert_eq!((wc.wr_id, wc.byte_len, wc.src_qp), (1, 40 + 8, p.a.qpn().raw()));
///     let mut got = [0u8; 8];
///     p.mr.buf().read_bytes(40, &mut got).unwrap();
///     assert_eq!(&got, b"datagram");
/// });
/// ```
///
/// # Panics
/// When a set-up step fails.
#[track_caller]
pub fn with_ud_pair<H: Hal, R>(
    dev: &Device<H>,
    attr: PairAttr,
    f: impl FnOnce(&mut UdPair<'_, '_, H>) -> R,
) -> R {
    let pd = must(dev.alloc_pd(), "allocating a PD");
    let (scq, rcq) = cqs(dev, &attr);
    let init = init_attr(QpType::Ud, &scq, &rcq, &attr);
    let mut a = must(pd.create_qp(&init), "creating QP a");
    let mut b = must(pd.create_qp(&init), "creating QP b");
    ud_up(&mut a, attr.qkey);
    ud_up(&mut b, attr.qkey);
    let ah = must(pd.create_ah(loopback_path(dev)), "creating an AH");
    let mr = region(&pd, attr.region_len, attr.access);
    let mut pair = UdPair {
        a,
        b,
        scq,
        rcq,
        ah,
        mr,
        qkey: attr.qkey,
        pd: &pd,
        dev,
    };
    let r = f(&mut pair);
    drop(pair);
    r
}

/// What [`with_xrc_pair`] hands its closure: an XRC initiator `ini` (of the PD, completing
/// sends on `scq`) connected to a target QP `tgt` of the domain `xrcd`, an XRC SRQ `srq` of
/// the domain completing on `rcq` (sends from `ini` name it with
/// [`Qp::post_send_xrc`]/[`Qp::send_batch_xrc`]), and one region `mr`.
pub struct XrcPair<'p, 'd, H: Hal> {
    /// The initiator (`IBV_QPT_XRC_SEND`).
    pub ini: Qp<'p, 'd, H>,
    /// The target (`IBV_QPT_XRC_RECV`) of `xrcd`.
    pub tgt: Qp<'p, 'd, H>,
    /// An XRC SRQ of `xrcd`, empty.
    pub srq: XrcSrq<'p, 'd, H>,
    /// The initiator's CQ (send and receive).
    pub scq: Cq<'d, H>,
    /// The SRQ's CQ.
    pub rcq: Cq<'d, H>,
    /// A region of the PD, registered with the pair's access rights.
    pub mr: Mr<'p, 'd, H>,
    /// The domain.
    pub xrcd: &'p Xrcd<'d, H>,
    /// The initiator's, the SRQ's and the region's PD.
    pub pd: &'p Pd<'d, H>,
    /// The device.
    pub dev: &'d Device<H>,
}

impl<H: Hal> XrcPair<'_, '_, H> {
    /// `len` bytes at `off` of the pair's region.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        sge(&self.mr, off, len)
    }
}

/// Runs `f` with a fresh [`XrcPair`] of `dev` built as `attr` says (the SRQ holds
/// `cap.max_recv_wr` receives of `cap.max_recv_sge` entries and completes on a CQ of
/// `recv_cqe` entries), connected through port 1, and releases it all after.
///
/// A send from the initiator naming the SRQ takes the SRQ's receive and completes on its CQ
/// with the target's QP number:
///
/// ```
/// use bareverbs::testing::{cap, poll_one, with_xrc_pair, PairAttr};
/// use bareverbs::verbs::{RecvWr, SendFlags, SendOp, SendWr};
/// use bareverbs::{Config, Device};
/// use bareverbs_model::SimHal;
///
/// let hal = SimHal::synchronous();
/// let dev = Device::bring_up(&hal, Config::default()).unwrap();
/// with_xrc_pair(&dev, PairAttr::new(cap(4, 1, 0)), |p| {
///     let into = [p.sge(0, 64)];
///     p.srq.post_recv(&[RecvWr { wr_id: 1, sg_list: &into }]).unwrap();
///     p.mr.buf().write_bytes(1024, b"xrc").unwrap();
///     let from = [p.sge(1024, 3)];
///     let wr = SendWr {
///         wr_id: 2,
///         sg_list: &from,
///         inline_data: &[],
///         op: SendOp::Send,
///         flags: SendFlags::SIGNALED,
///         ud: None,
///     };
///     p.ini.post_send_xrc(p.srq.srq_num(), &[wr]).unwrap();
///     assert_eq!(poll_one(&mut p.scq).wr_id, 2);
///     let wc = poll_one(&mut p.rcq);
///     assert_eq!((wc.wr_id, wc.qp_num, wc.byte_len), (1, p.tgt.qpn().raw(), 3));
/// });
/// ```
///
/// # Panics
/// When a set-up step fails.
#[track_caller]
pub fn with_xrc_pair<H: Hal, R>(
    dev: &Device<H>,
    attr: PairAttr,
    f: impl FnOnce(&mut XrcPair<'_, '_, H>) -> R,
) -> R {
    let pd = must(dev.alloc_pd(), "allocating a PD");
    let xrcd = must(dev.alloc_xrcd(), "allocating an XRC domain");
    let (scq, rcq) = cqs(dev, &attr);
    let init = init_attr(QpType::XrcIni, &scq, &scq, &attr);
    let mut ini = must(pd.create_qp(&init), "creating the initiator");
    let mut tgt = must(xrcd.create_tgt_qp(), "creating the target");
    let want = SrqAttr {
        max_wr: attr.cap.max_recv_wr,
        max_sge: attr.cap.max_recv_sge,
        srq_limit: 0,
    };
    let srq = must(xrcd.create_xrc_srq(&pd, &rcq, want), "creating an XRC SRQ");
    let path = loopback_path(dev);
    let r = ini
        .to_init(1, 0, attr.access, 0)
        .and_then(|()| tgt.to_init(1, 0, attr.access, 0))
        .and_then(|()| ini.to_rtr(tgt.qpn().raw(), 0, path, attr.mtu))
        .and_then(|()| tgt.to_rtr(ini.qpn().raw(), 0, path, attr.mtu))
        .and_then(|()| ini.to_rts(0));
    must(r, "connecting the initiator and the target");
    let mr = region(&pd, attr.region_len, attr.access);
    let mut pair = XrcPair {
        ini,
        tgt,
        srq,
        scq,
        rcq,
        mr,
        xrcd: &xrcd,
        pd: &pd,
        dev,
    };
    let r = f(&mut pair);
    drop(pair);
    r
}

/// How one end of an Ethernet pair is built.
#[derive(Clone, Copy, Debug)]
pub struct EthEndAttr {
    /// Buffers of the end's packet pool.
    pub pool_bufs: u32,
    /// Bytes of each buffer.
    pub buf_size: usize,
    /// The end's send queue.
    pub tx: TxQueueAttr,
    /// The end's receive queue (its entries are filled from the pool at once).
    pub rx: RxQueueAttr,
    /// Steer frames to the end's MAC to its receive queue (the port's first rule); without,
    /// the port has no rule and the test adds its own.
    pub steer: bool,
}

impl Default for EthEndAttr {
    /// 64 buffers of 2048 bytes, a send queue of 256 entries, a receive queue of 16, steered.
    fn default() -> Self {
        EthEndAttr {
            pool_bufs: 64,
            buf_size: 2048,
            tx: TxQueueAttr::default(),
            rx: RxQueueAttr {
                entries: 16,
                ..RxQueueAttr::default()
            },
            steer: true,
        }
    }
}

/// One end of an [`EthPair`]: an Ethernet port, its packet pool, a send and a receive queue,
/// and the rule steering the port's MAC to the receive queue.
pub struct EthEnd<'p, 'd, H: Hal> {
    /// Frames to [`EthPort::mac`] to [`EthEnd::rxq`] (when the end was built with `steer`).
    /// Declared before the queue: a rule goes before the queue it names.
    pub rule: Option<FlowRule<'p, 'd, H>>,
    /// The receive queue.
    pub rxq: RxQueue<'p, 'd, H>,
    /// The send queue.
    pub txq: TxQueue<'p, 'd, H>,
    /// The queues' packet pool.
    pub pool: &'p PktPool<'p, 'd, H>,
    /// The port.
    pub port: &'p EthPort<'d, H>,
}

/// What [`with_eth_pair`] hands its closure: the two ends, each on its own device, the devices
/// on one wire.
pub struct EthPair<'p, 'd, H: Hal> {
    /// The end on the first device.
    pub a: EthEnd<'p, 'd, H>,
    /// The end on the second device.
    pub b: EthEnd<'p, 'd, H>,
}

/// Runs `f` with an [`EthPair`]: an end on `da` built as `attrs[0]` says and one on `db` as
/// `attrs[1]` says (two devices whose Ethernet ports share a wire), and releases it all after.
///
/// A frame `a` sends to `b`'s MAC arrives on `b`'s receive queue:
///
/// ```
/// use bareverbs::eth::Pkt;
/// use bareverbs::testing::{with_eth_pair, EthEndAttr};
/// use bareverbs::{Config, Device};
/// use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};
///
/// let wire = Fabric::new();
/// let hca = |n: u64| {
///     let cfg = ModelConfig {
///         port_type_eth: true,
///         node_guid: ModelConfig::default().node_guid + (n << 8),
///         base_lid: 1 + 16 * n as u16,
///         ..ModelConfig::default()
///     };
///     SimHal::on_fabric(cfg, Drive::Synchronous, &wire)
/// };
/// let (ha, hb) = (hca(0), hca(1));
/// let da = Device::bring_up(&ha, Config::default()).unwrap();
/// let db = Device::bring_up(&hb, Config::default()).unwrap();
/// with_eth_pair(&da, &db, [EthEndAttr::default(); 2], |p| {
///     let mut frame = [0u8; 60];
///     frame[..6].copy_from_slice(&p.b.port.mac());
///     frame[6..12].copy_from_slice(&p.a.port.mac());
///     frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
///     let mut pkt = p.a.pool.alloc().unwrap();
///     p.a.pool.write(&mut pkt, 0, &frame).unwrap();
///     assert_eq!(p.a.txq.tx_burst(&[pkt]), 1);
///     let mut got = [Pkt::EMPTY; 4];
///     assert_eq!(p.b.rxq.rx_burst(&mut got), 1);
///     assert_eq!(got[0].len(), 60);
///     p.b.pool.free(got[0]).unwrap();
/// });
/// ```
///
/// # Panics
/// When a set-up step fails (a device without an Ethernet port among them).
#[track_caller]
pub fn with_eth_pair<H: Hal, R>(
    da: &Device<H>,
    db: &Device<H>,
    attrs: [EthEndAttr; 2],
    f: impl FnOnce(&mut EthPair<'_, '_, H>) -> R,
) -> R {
    let pa = must(da.open_eth(), "opening the first Ethernet port");
    let pb = must(db.open_eth(), "opening the second Ethernet port");
    let [attr_a, attr_b] = attrs;
    let pool_a = must(
        PktPool::new(&pa, attr_a.pool_bufs, attr_a.buf_size),
        "creating the first pool",
    );
    let pool_b = must(
        PktPool::new(&pb, attr_b.pool_bufs, attr_b.buf_size),
        "creating the second pool",
    );
    let mut pair = EthPair {
        a: eth_end(&pa, &pool_a, attr_a),
        b: eth_end(&pb, &pool_b, attr_b),
    };
    let r = f(&mut pair);
    // Rules, then queues (their buffers go back to the pools), then pools and ports.
    drop(pair);
    r
}

#[track_caller]
fn eth_end<'p, 'd, H: Hal>(
    port: &'p EthPort<'d, H>,
    pool: &'p PktPool<'p, 'd, H>,
    attr: EthEndAttr,
) -> EthEnd<'p, 'd, H> {
    let rxq = must(
        RxQueue::new(port, pool, attr.rx),
        "creating a receive queue",
    );
    let txq = must(TxQueue::new(port, pool, attr.tx), "creating a send queue");
    let rule = attr.steer.then(|| {
        must(
            port.add_rule(&FlowMatch::any().dmac(port.mac()), FlowDest::Queue(&rxq)),
            "steering the port's MAC to its receive queue",
        )
    });
    EthEnd {
        rule,
        rxq,
        txq,
        pool,
        port,
    }
}

fn cqs<'d, H: Hal>(dev: &'d Device<H>, attr: &PairAttr) -> (Cq<'d, H>, Cq<'d, H>) {
    (
        must(dev.create_cq(attr.send_cqe), "creating the send CQ"),
        must(dev.create_cq(attr.recv_cqe), "creating the receive CQ"),
    )
}

fn init_attr<'c, 'd, H: Hal>(
    qp_type: QpType,
    scq: &'c Cq<'d, H>,
    rcq: &'c Cq<'d, H>,
    attr: &PairAttr,
) -> QpInitAttr<'c, 'd, H> {
    let mut init = QpInitAttr::new(qp_type, scq, rcq, attr.cap);
    init.sq_sig_all = attr.sq_sig_all;
    init
}

/// `r`'s value, or a panic naming the set-up step `what` and the error.
#[track_caller]
fn must<T, E: core::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("fixture: {what}: {e}"),
    }
}
