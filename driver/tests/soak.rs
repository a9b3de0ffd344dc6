//! A seeded soak: random operations on an RC, a UC and a UD pair sharing one send CQ and one
//! receive CQ, with faults injected at random — lost doorbells, late CQEs, late and lost
//! EQEs, RC requests the responder refuses (the pair goes to ERR, everything posted is
//! flushed, both are reset and reconnected) — and at the end a fatal device error, after
//! which the software flush completes what is left. Checked throughout: every posted work
//! request completes exactly once (success, or an error or flush status), and every byte a
//! successful SEND or RDMA WRITE delivered is the byte sent.
//!
//! The test command runs `SOAK_OPS` operations; `BAREVERBS_SOAK_OPS=1000000 cargo test
//! --release -p bareverbs --test soak -- --nocapture` runs a long one (and
//! `BAREVERBS_SOAK_SEED` another seed). It prints what it ran and survived.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::rng::{env_or, Rng};
use bareverbs_model::SimHal;

mod common;
use common::{connect_pair, region};

/// Operations the test command runs.
const SOAK_OPS: u64 = 30_000;
/// Work requests each queue holds.
const DEPTH: u32 = 16;
/// Buffer slots per queue and area (more than `DEPTH`, so an outstanding request's slot is
/// never reused).
const SLOTS: u64 = 32;
/// Bytes per slot; a payload is at most `MAX_LEN`, a UD receive also takes 40 bytes of GRH.
const SLOT: u64 = 512;
const MAX_LEN: u64 = 256;
const GRH: u64 = 40;
const QKEY: u32 = 0x5157;
/// The three areas of the region: sources, receive buffers, RDMA WRITE targets; each holds
/// `SLOTS` slots per pair.
const AREA: u64 = 3 * SLOTS * SLOT;
const REMOTE: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

/// What a posted request is, to check its completion against.
#[derive(Clone, Debug)]
enum Pending {
    /// A send of `data` (SEND: to the peer's next receive; WRITE: to `target`).
    Send {
        write_to: Option<u64>,
        data: Vec<u8>,
    },
    /// A receive into `at`.
    Recv { at: u64 },
}

/// One pair: `a` sends, `b` receives (and is written to).
struct Pair<'p, 'd, 'h> {
    kind: QpType,
    a: Qp<'p, 'd, &'h SimHal>,
    b: Qp<'p, 'd, &'h SimHal>,
    ud: Option<UdDest>,
    /// Requests posted per side and not yet polled, by `wr_id`.
    sends_out: usize,
    recvs_out: usize,
    /// SEND payloads on their way, in order: each successful receive takes the oldest.
    in_flight: VecDeque<Vec<u8>>,
    send_seq: u64,
    recv_seq: u64,
}

#[derive(Default, Debug)]
struct Tally {
    ops: u64,
    posted: u64,
    completed_ok: u64,
    completed_err: u64,
    flushed_at_fatal: u64,
    bytes_checked: u64,
    faults: HashMap<&'static str, u64>,
    events: u64,
}

#[test]
fn a_seeded_soak_completes_every_request_once_and_corrupts_nothing() {
    let ops = env_or("BAREVERBS_SOAK_OPS", SOAK_OPS);
    let seed = env_or("BAREVERBS_SOAK_SEED", 0x50a4);
    let t = soak(ops, seed);
    println!("soak seed {seed:#x}: {t:?}");
    assert!(t.ops >= ops);
    assert!(t.completed_ok > 0 && t.completed_err > 0 && t.flushed_at_fatal > 0);
    for f in [
        "lost doorbell",
        "late CQE",
        "late EQE",
        "lost EQE",
        "refused by responder",
    ] {
        assert!(
            t.faults.get(f).copied().unwrap_or(0) > 0,
            "{f} never injected"
        );
    }
}

fn soak(ops: u64, seed: u64) -> Tally {
    let mut rng = Rng(seed);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(256).unwrap(), dev.create_cq(256).unwrap());
    let mr = region(&pd, (3 * AREA) as usize, REMOTE);
    let cap = QpCap {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut pairs: Vec<Pair<'_, '_, '_>> = [QpType::Rc, QpType::Uc, QpType::Ud]
        .into_iter()
        .map(|kind| {
            let init = QpInitAttr::new(kind, &scq, &rcq, cap);
            let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
            Pair {
                kind,
                a,
                b,
                ud: None,
                sends_out: 0,
                recvs_out: 0,
                in_flight: VecDeque::new(),
                send_seq: 0,
                recv_seq: 0,
            }
        })
        .collect();
    for p in pairs.iter_mut() {
        connect(&pd, p);
    }
    // Outstanding requests by (QPN, wr_id): each must complete exactly once.
    let mut pending: HashMap<(u32, u64), Pending> = HashMap::new();
    let mut next_id = 1u64;
    let mut t = Tally::default();
    let mut wc = [Wc::EMPTY; 16];
    while t.ops < ops {
        t.ops += 1;
        let i = rng.below(3) as usize;
        match rng.below(100) {
            // Receives first, so a SEND always finds one.
            0..=29 => {
                let p = &mut pairs[i];
                if p.recvs_out < DEPTH as usize {
                    let at = AREA + slot(i, p.recv_seq);
                    p.recv_seq += 1;
                    let sg = [Sge {
                        addr: mr.addr() + at,
                        length: SLOT as u32,
                        lkey: mr.lkey(),
                    }];
                    let id = next_id;
                    next_id += 1;
                    p.b.post_recv(&[RecvWr {
                        wr_id: id,
                        sg_list: &sg,
                    }])
                    .unwrap();
                    p.recvs_out += 1;
                    t.posted += 1;
                    pending.insert((p.b.qpn().raw(), id), Pending::Recv { at });
                }
            }
            30..=64 => {
                let p = &mut pairs[i];
                let write = p.kind != QpType::Ud && rng.coin();
                // A SEND needs a receive not yet promised to an earlier SEND.
                if p.sends_out >= DEPTH as usize || (!write && p.in_flight.len() >= p.recvs_out) {
                    continue;
                }
                let len = rng.below(MAX_LEN + 1) as usize;
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let src = slot(i, p.send_seq);
                let target = 2 * AREA + slot(i, p.send_seq);
                p.send_seq += 1;
                mr.buf().write_bytes(src as usize, &data).unwrap();
                let sg = [Sge {
                    addr: mr.addr() + src,
                    length: len as u32,
                    lkey: mr.lkey(),
                }];
                // Now and then an RC WRITE the responder refuses (a key it does not know).
                let refused = write && p.kind == QpType::Rc && rng.below(40) == 0;
                let op = if write {
                    SendOp::RdmaWrite {
                        remote_addr: mr.addr() + target,
                        rkey: if refused {
                            mr.rkey().raw() ^ 0xff00
                        } else {
                            mr.rkey().raw()
                        },
                    }
                } else {
                    SendOp::Send
                };
                // (Not the refused one's: the recovery waits for its error.)
                if !refused && rng.below(50) == 0 {
                    hal.model().set_faults(|f| f.lose_doorbells += 1);
                    *t.faults.entry("lost doorbell").or_default() += 1;
                }
                let id = next_id;
                next_id += 1;
                let wr = SendWr {
                    wr_id: id,
                    sg_list: &sg,
                    inline_data: &[],
                    op,
                    flags: SendFlags::SIGNALED,
                    ud: p.ud,
                };
                p.a.post_send(&[wr]).unwrap();
                p.sends_out += 1;
                t.posted += 1;
                if !write {
                    p.in_flight.push_back(data.clone());
                }
                pending.insert(
                    (p.a.qpn().raw(), id),
                    Pending::Send {
                        write_to: write.then_some(target),
                        data,
                    },
                );
                if refused {
                    *t.faults.entry("refused by responder").or_default() += 1;
                    recover(
                        i,
                        &pd,
                        &hal,
                        &mut pairs,
                        [&mut scq, &mut rcq],
                        &mr,
                        &mut pending,
                        &mut t,
                    );
                }
            }
            65..=89 => {
                for cq in [&mut scq, &mut rcq] {
                    let n = cq.poll(&mut wc[..1 + rng.below(16) as usize]);
                    for w in &wc[..n] {
                        check(w, &mut pairs, &mr, &mut pending, &mut t);
                    }
                }
            }
            90..=93 => {
                let late_by = Duration::from_micros(rng.below(2000));
                match rng.below(3) {
                    0 => {
                        hal.model().set_faults(|f| {
                            f.late_cqes += 1;
                            f.late_by = late_by;
                        });
                        *t.faults.entry("late CQE").or_default() += 1;
                    }
                    1 => {
                        hal.model().set_faults(|f| {
                            f.late_eqes += 1;
                            f.late_by = late_by;
                        });
                        *t.faults.entry("late EQE").or_default() += 1;
                    }
                    _ => {
                        hal.model().set_faults(|f| f.lose_eqes += 1);
                        *t.faults.entry("lost EQE").or_default() += 1;
                    }
                }
            }
            94..=96 => {
                // Events: arm the CQs, read and acknowledge what came.
                let _ = scq.req_notify(false);
                let _ = rcq.req_notify(false);
                dev.poll_events();
                while let Some(e) = dev.next_event() {
                    t.events += 1;
                    if let AsyncEvent::Completion { cqn } = e {
                        let cq = if cqn == scq.cqn().raw() {
                            &mut scq
                        } else {
                            &mut rcq
                        };
                        cq.ack_events(1).unwrap();
                    }
                }
            }
            _ => hal.delay(Duration::from_micros(rng.below(1000))),
        }
    }
    // Faults armed but not met (no doorbell, CQE or EQE came after them) were not injected.
    let left = hal.model().with(|h| {
        let f = h.faults();
        [
            ("lost doorbell", f.lose_doorbells),
            ("late CQE", f.late_cqes),
            ("late EQE", f.late_eqes),
            ("lost EQE", f.lose_eqes),
        ]
    });
    for (name, n) in left {
        *t.faults.entry(name).or_default() -= u64::from(n);
    }
    // The device fails: whatever is still outstanding (behind lost doorbells, late CQEs, or
    // simply not polled) completes once, flushed.
    hal.model().set_health(0x1, true);
    assert!(dev.check_health().fatal.is_some());
    assert!(dev.is_fatal());
    for cq in [&mut scq, &mut rcq] {
        loop {
            let n = cq.poll(&mut wc);
            if n == 0 {
                break;
            }
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::WrFlushErr);
                t.flushed_at_fatal += 1;
                check(w, &mut pairs, &mr, &mut pending, &mut t);
            }
        }
    }
    assert!(pending.is_empty(), "never completed: {:?}", pending.keys());
    t
}

/// Slot `seq` of pair `i` in an area (offset from the area's start).
fn slot(i: usize, seq: u64) -> u64 {
    (i as u64 * SLOTS + seq % SLOTS) * SLOT
}

/// Brings pair `p` (both QPs in RESET) to RTS towards each other.
fn connect<'p, 'd, 'h>(pd: &'p Pd<'d, &'h SimHal>, p: &mut Pair<'p, 'd, 'h>) {
    if p.kind == QpType::Ud {
        for q in [&mut p.a, &mut p.b] {
            q.to_init(1, 0, AccessFlags::empty(), QKEY).unwrap();
            q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096).unwrap();
            q.to_rts(1).unwrap();
        }
        let ah = AhAttr {
            dlid: 1,
            port_num: 1,
            ..AhAttr::default()
        };
        p.ud = Some(common::ud_dest(pd, ah, p.b.qpn().raw(), QKEY));
    } else {
        connect_pair(&mut p.a, &mut p.b, REMOTE, Mtu::Mtu1024);
    }
}

/// One completion: it must be of a request outstanding now (so each completes once); a
/// successful one delivered exactly its bytes.
fn check(
    w: &Wc,
    pairs: &mut [Pair<'_, '_, '_>],
    mr: &Mr<'_, '_, &SimHal>,
    pending: &mut HashMap<(u32, u64), Pending>,
    t: &mut Tally,
) {
    let p = pending
        .remove(&(w.qp_num, w.wr_id))
        .unwrap_or_else(|| panic!("completion of nothing outstanding (or twice): {w:?}"));
    let pair = pairs
        .iter_mut()
        .find(|q| q.a.qpn().raw() == w.qp_num || q.b.qpn().raw() == w.qp_num)
        .unwrap();
    if w.status == WcStatus::Success {
        t.completed_ok += 1;
    } else {
        t.completed_err += 1;
    }
    match p {
        Pending::Send { write_to, data } => {
            pair.sends_out -= 1;
            if let (Some(at), WcStatus::Success) = (write_to, w.status) {
                let mut got = vec![0u8; data.len()];
                mr.buf().read_bytes(at as usize, &mut got).unwrap();
                assert_eq!(got, data, "RDMA WRITE {} delivered other bytes", w.wr_id);
                t.bytes_checked += data.len() as u64;
            }
        }
        Pending::Recv { at } => {
            pair.recvs_out -= 1;
            if w.status != WcStatus::Success {
                return;
            }
            let data = pair.in_flight.pop_front().expect("a receive nobody sent");
            assert_eq!(
                w.byte_len as usize,
                data.len()
                    + if pair.kind == QpType::Ud {
                        GRH as usize
                    } else {
                        0
                    }
            );
            let skip = if pair.kind == QpType::Ud { GRH } else { 0 };
            let mut got = vec![0u8; data.len()];
            mr.buf().read_bytes((at + skip) as usize, &mut got).unwrap();
            assert_eq!(got, data, "receive {} holds other bytes", w.wr_id);
            t.bytes_checked += data.len() as u64;
        }
    }
}

/// After a refused RC request: both QPs of pair `i` went to ERR; poll until everything they
/// had posted completed (the refused one with its error, the rest flushed), then reset and
/// reconnect them.
#[allow(clippy::too_many_arguments)]
fn recover<'p, 'd, 'h>(
    i: usize,
    pd: &'p Pd<'d, &'h SimHal>,
    hal: &SimHal,
    pairs: &mut [Pair<'p, 'd, 'h>],
    cqs: [&mut Cq<'_, &SimHal>; 2],
    mr: &Mr<'_, '_, &SimHal>,
    pending: &mut HashMap<(u32, u64), Pending>,
    t: &mut Tally,
) {
    let mut wc = [Wc::EMPTY; 16];
    let [scq, rcq] = cqs;
    let mut rounds = 0;
    while pairs[i].sends_out + pairs[i].recvs_out > 0 {
        rounds += 1;
        assert!(rounds < 1000, "pair {i} never drained after its error");
        // Late CQEs come due; the model flushes receives of a QP in ERR on its ticks.
        hal.delay(Duration::from_millis(2));
        for cq in [&mut *scq, &mut *rcq] {
            let n = cq.poll(&mut wc);
            for w in &wc[..n] {
                check(w, pairs, mr, pending, t);
            }
        }
    }
    let p = &mut pairs[i];
    for q in [&mut p.a, &mut p.b] {
        assert_eq!(
            q.query_qp(QpAttrMask::STATE).unwrap().0.qp_state,
            QpState::Err
        );
        q.modify(&QpAttr::default(), QpAttrMask::STATE).unwrap();
    }
    p.in_flight.clear();
    connect(pd, p);
}
