//! Seeded random traffic against the model: SEND (gathered or inline, with and without
//! immediate), RDMA WRITE (gathered or inline, with and without immediate) and RDMA READ over
//! three RC pairs that share one send CQ and one receive CQ, posted through `post_send` or
//! the batch API in batches of one to four, signaled or not, polled now and then in slices of
//! random length. Every byte moved and every completion is checked against what was asked.

use std::collections::VecDeque;

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use bareverbs_model::rng::Rng;
use common::{cap, connect_pair, region, with, with_rc_pair, PairAttr, RcPair};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
}

/// One planned request: `len` bytes from `src` offset `from` to the destination slot `slot`.
#[derive(Clone, Copy, Debug)]
struct Plan {
    kind: Kind,
    wr_id: u64,
    len: u32,
    inline: bool,
    signaled: bool,
    from: u64,
    slot: u64,
    imm: u32,
}

const PAIRS: usize = 3;
/// Each request of a batch has its own 1 KiB destination slot, so a batch's requests never
/// touch each other's bytes.
const SLOT: u64 = 1024;
const MAX_LEN: u64 = 300;
const MAX_INLINE: u32 = 128;

/// A send completion the test expects: wr_id, opcode, byte_len.
type SendExp = (u64, WcOpcode, u32);
/// A receive completion the test expects: wr_id, opcode, byte_len, immediate.
type RecvExp = (u64, WcOpcode, u32, Option<u32>);

/// The remote access the RC pairs of these tests give each other.
const REMOTE: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

fn connect<'p, 'd, H: Hal>(a: &mut Qp<'p, 'd, H>, b: &mut Qp<'p, 'd, H>) {
    connect_pair(a, b, REMOTE, Mtu::Mtu1024);
}

/// The gather (or scatter) list of `len` bytes at `base + off` of `mr`, split in up to three
/// pieces.
fn split<H: Hal>(rng: &mut Rng, mr: &Mr<'_, '_, H>, off: u64, len: u32) -> Vec<Sge> {
    let pieces = 1 + rng.below(3) as u32;
    let mut out = Vec::new();
    let mut at = 0u32;
    for k in 0..pieces {
        let n = if k + 1 == pieces {
            len - at
        } else {
            rng.below(u64::from(len - at) + 1) as u32
        };
        if n > 0 || (len == 0 && k == 0) {
            out.push(Sge {
                addr: mr.addr() + off + u64::from(at),
                length: n,
                lkey: mr.lkey(),
            });
        }
        at += n;
    }
    if len == 0 {
        out.clear();
    }
    out
}

/// What the test still expects to be polled, per pair, and what it has seen.
struct Expect {
    sqpn: Vec<u32>,
    rqpn: Vec<u32>,
    send: Vec<VecDeque<SendExp>>,
    recv: Vec<VecDeque<RecvExp>>,
    sends: usize,
    recvs: usize,
}

impl Expect {
    fn check_send(&mut self, w: &Wc) {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        let k = self.sqpn.iter().position(|&q| q == w.qp_num).unwrap();
        let (id, op, len) = self.send[k].pop_front().expect("unexpected send CQE");
        assert_eq!((w.wr_id, w.opcode), (id, op), "send on pair {k}");
        if op == WcOpcode::RdmaRead {
            assert_eq!(w.byte_len, len);
        }
        self.sends += 1;
    }

    fn check_recv(&mut self, w: &Wc) {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        let k = self.rqpn.iter().position(|&q| q == w.qp_num).unwrap();
        let (id, op, len, imm) = self.recv[k].pop_front().expect("unexpected receive CQE");
        assert_eq!(
            (w.wr_id, w.opcode, w.byte_len),
            (id, op, len),
            "receive on pair {k}"
        );
        assert_eq!(w.wc_flags.contains(WcFlags::WITH_IMM), imm.is_some());
        if let Some(imm) = imm {
            assert_eq!(w.imm_data, imm);
        }
        self.recvs += 1;
    }

    /// Polls both CQs dry in slices of random length; everything expected must have come.
    fn drain<H: Hal>(&mut self, rng: &mut Rng, scq: &mut Cq<'_, H>, rcq: &mut Cq<'_, H>) {
        loop {
            let mut wc = vec![Wc::EMPTY; 1 + rng.below(7) as usize];
            let n = scq.poll(&mut wc);
            wc[..n].iter().for_each(|w| self.check_send(w));
            if n == 0 {
                break;
            }
        }
        loop {
            let mut wc = vec![Wc::EMPTY; 1 + rng.below(7) as usize];
            let n = rcq.poll(&mut wc);
            wc[..n].iter().for_each(|w| self.check_recv(w));
            if n == 0 {
                break;
            }
        }
        assert!(self.send.iter().all(|q| q.is_empty()), "{:?}", self.send);
        assert!(self.recv.iter().all(|q| q.is_empty()), "{:?}", self.recv);
    }
}

#[test]
fn random_traffic_on_three_pairs_sharing_cqs_moves_every_byte_and_completes_in_order() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(1024).unwrap(), dev.create_cq(1024).unwrap());
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 3,
        max_recv_sge: 3,
        max_inline_data: MAX_INLINE,
    };
    let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap);
    let mut tx: Vec<_> = (0..PAIRS).map(|_| pd.create_qp(&init).unwrap()).collect();
    let mut rx: Vec<_> = (0..PAIRS).map(|_| pd.create_qp(&init).unwrap()).collect();
    for (a, b) in tx.iter_mut().zip(rx.iter_mut()) {
        connect(a, b);
    }
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let region = |len: usize| region(&pd, len, access);
    // Sources hold a random pattern; destinations and READ landing areas get 4 KiB per pair.
    let (src, dst, rd) = (region(16 << 10), region(16 << 10), region(16 << 10));
    let pattern: Vec<u8> = (0..16 << 10).map(|_| rng.next() as u8).collect();
    src.buf().write_bytes(0, &pattern).unwrap();
    dst.buf()
        .write_bytes(
            0,
            &(0..16 << 10).map(|_| rng.next() as u8).collect::<Vec<_>>(),
        )
        .unwrap();

    let mut e = Expect {
        sqpn: tx.iter().map(|q| q.qpn().raw()).collect(),
        rqpn: rx.iter().map(|q| q.qpn().raw()).collect(),
        send: vec![VecDeque::new(); PAIRS],
        recv: vec![VecDeque::new(); PAIRS],
        sends: 0,
        recvs: 0,
    };
    let mut undrained = [0usize; PAIRS];
    let mut next_id = 1u64;

    for _ in 0..6000 {
        let k = rng.below(PAIRS as u64) as usize;
        if undrained[k] >= 3 {
            e.drain(&mut rng, &mut scq, &mut rcq);
            undrained = [0; PAIRS];
        }
        // A batch of one to four requests; the last is signaled so that the queue drains.
        let n = 1 + rng.below(4) as usize;
        let plans: Vec<Plan> = (0..n)
            .map(|j| {
                let kind = match rng.below(5) {
                    0 => Kind::Send,
                    1 => Kind::SendImm,
                    2 => Kind::Write,
                    3 => Kind::WriteImm,
                    _ => Kind::Read,
                };
                let len = rng.below(MAX_LEN + 1) as u32;
                let inline = kind != Kind::Read && len <= MAX_INLINE && rng.below(3) == 0;
                let plan = Plan {
                    kind,
                    wr_id: next_id,
                    len,
                    inline,
                    signaled: j + 1 == n || rng.coin(),
                    from: k as u64 * 4096 + rng.below(4096 - MAX_LEN),
                    slot: k as u64 * 4096 + j as u64 * SLOT + rng.below(SLOT - MAX_LEN),
                    imm: rng.next() as u32,
                };
                next_id += 1;
                plan
            })
            .collect();
        // Receives for the requests that consume one, in order.
        for p in &plans {
            let op = match p.kind {
                Kind::Send => WcOpcode::Recv,
                Kind::SendImm => WcOpcode::Recv,
                Kind::WriteImm => WcOpcode::RecvRdmaWithImm,
                _ => continue,
            };
            let sg = if p.kind == Kind::WriteImm {
                Vec::new()
            } else {
                split(&mut rng, &dst, p.slot, p.len)
            };
            rx[k]
                .post_recv(&[RecvWr {
                    wr_id: p.wr_id | 1 << 40,
                    sg_list: &sg,
                }])
                .unwrap();
            let imm = (p.kind != Kind::Send).then_some(p.imm);
            e.recv[k].push_back((p.wr_id | 1 << 40, op, p.len, imm));
        }
        // The requests, through post_send or the batch API.
        let sgs: Vec<Vec<Sge>> = plans
            .iter()
            .map(|p| match p.kind {
                Kind::Read => split(&mut rng, &rd, p.slot, p.len),
                _ if p.inline => Vec::new(),
                _ => split(&mut rng, &src, p.from, p.len),
            })
            .collect();
        let data = |p: &Plan| &pattern[p.from as usize..(p.from + u64::from(p.len)) as usize];
        let flags = |p: &Plan| {
            let mut f = if p.signaled {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            if p.inline {
                f |= SendFlags::INLINE;
            }
            f
        };
        if rng.coin() {
            let wrs: Vec<SendWr<'_>> = plans
                .iter()
                .zip(&sgs)
                .map(|(p, sg)| {
                    let remote_addr = dst.addr() + p.slot;
                    let rkey = dst.rkey().raw();
                    SendWr {
                        wr_id: p.wr_id,
                        sg_list: sg,
                        inline_data: if p.inline { data(p) } else { &[] },
                        op: match p.kind {
                            Kind::Send => SendOp::Send,
                            Kind::SendImm => SendOp::SendWithImm(p.imm),
                            Kind::Write => SendOp::RdmaWrite { remote_addr, rkey },
                            Kind::WriteImm => SendOp::RdmaWriteWithImm {
                                remote_addr,
                                rkey,
                                imm: p.imm,
                            },
                            Kind::Read => SendOp::RdmaRead { remote_addr, rkey },
                        },
                        flags: flags(p),
                        ud: None,
                    }
                })
                .collect();
            tx[k].post_send(&wrs).unwrap();
        } else {
            tx[k]
                .send_batch(|b| {
                    for (p, sg) in plans.iter().zip(&sgs) {
                        let (raddr, rkey) = (dst.addr() + p.slot, dst.rkey().raw());
                        let r = match (p.kind, p.inline) {
                            (Kind::Send, true) => b.send_inline(p.wr_id, flags(p), data(p)),
                            (Kind::Send, false) => b.send(p.wr_id, flags(p), sg),
                            (Kind::Write, true) => {
                                b.rdma_write_inline(p.wr_id, flags(p), raddr, rkey, data(p))
                            }
                            (Kind::Write, false) => {
                                b.rdma_write(p.wr_id, flags(p), raddr, rkey, sg)
                            }
                            (Kind::Read, _) => b.rdma_read(p.wr_id, flags(p), raddr, rkey, sg),
                            // The methods have no immediate: post the request itself.
                            (kind, _) => b.post(&SendWr {
                                wr_id: p.wr_id,
                                sg_list: sg,
                                inline_data: if p.inline { data(p) } else { &[] },
                                op: if kind == Kind::SendImm {
                                    SendOp::SendWithImm(p.imm)
                                } else {
                                    SendOp::RdmaWriteWithImm {
                                        remote_addr: raddr,
                                        rkey,
                                        imm: p.imm,
                                    }
                                },
                                flags: flags(p),
                                ud: None,
                            }),
                        };
                        r.unwrap();
                    }
                })
                .unwrap();
        }
        for p in &plans {
            if p.signaled {
                let op = match p.kind {
                    Kind::Send | Kind::SendImm => WcOpcode::Send,
                    Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
                    Kind::Read => WcOpcode::RdmaRead,
                };
                e.send[k].push_back((p.wr_id, op, p.len));
            }
        }
        undrained[k] += 1;
        // The model executed the batch at its doorbell: every byte is where it belongs.
        for p in &plans {
            let mut got = vec![0u8; p.len as usize];
            let (buf, off, want) = match p.kind {
                Kind::Read => {
                    let mut want = vec![0u8; p.len as usize];
                    dst.buf().read_bytes(p.slot as usize, &mut want).unwrap();
                    (&rd, p.slot, want)
                }
                _ => (&dst, p.slot, data(p).to_vec()),
            };
            buf.buf().read_bytes(off as usize, &mut got).unwrap();
            assert_eq!(got, want, "{p:?}");
        }
        if rng.below(3) == 0 {
            e.drain(&mut rng, &mut scq, &mut rcq);
            undrained = [0; PAIRS];
        }
    }
    e.drain(&mut rng, &mut scq, &mut rcq);
    // Enough of each to mean something.
    assert!(
        e.sends > 6000 && e.recvs > 4000,
        "{} sends, {} receives",
        e.sends,
        e.recvs
    );
}

#[test]
fn random_lists_past_a_full_queue_stop_at_their_index_and_resume_without_loss() {
    // Lists of up to 80 requests of one to three WQEBBs against a 128-WQEBB queue: a list
    // that does not fit stops at a QueueFull index, the completions are polled, and the rest
    // of the list is posted again. Every signaled request completes exactly once, in order;
    // at most three unsignaled ones run in a row, so a poll always frees room.
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(256).unwrap(), dev.create_cq(16).unwrap());
    let init = QpInitAttr::new(
        QpType::Rc,
        &scq,
        &rcq,
        QpCap {
            max_send_wr: 32,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: MAX_INLINE,
        },
    );
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = region(&pd, 8192, access);
    let payload: Vec<u8> = (0..MAX_INLINE as usize).map(|_| rng.next() as u8).collect();
    let (mut expected, mut seen) = (Vec::new(), Vec::new());
    let (mut next_id, mut fulls, mut run) = (1u64, 0usize, 0usize);
    let poll = |scq: &mut Cq<'_, &SimHal>, seen: &mut Vec<u64>| loop {
        let mut wc = [Wc::EMPTY; 8];
        let n = scq.poll(&mut wc);
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            seen.push(w.wr_id);
        }
        if n == 0 {
            break;
        }
    };
    for _ in 0..400 {
        let len = 1 + rng.below(80) as usize;
        let wrs: Vec<SendWr<'_>> = (0..len)
            .map(|_| {
                let n = rng.below(u64::from(MAX_INLINE) + 1) as usize;
                let signaled = run == 3 || rng.coin();
                run = if signaled { 0 } else { run + 1 };
                let w = SendWr {
                    wr_id: next_id,
                    sg_list: &[],
                    inline_data: &payload[..n],
                    op: SendOp::RdmaWrite {
                        remote_addr: mr.addr() + 4096,
                        rkey: mr.rkey().raw(),
                    },
                    flags: if signaled {
                        SendFlags::INLINE | SendFlags::SIGNALED
                    } else {
                        SendFlags::INLINE
                    },
                    ud: None,
                };
                next_id += 1;
                w
            })
            .collect();
        let mut rest = &wrs[..];
        loop {
            let r = a.post_send(rest);
            let posted = match r {
                Ok(()) => rest.len(),
                Err(e) => {
                    assert_eq!(e.error, bareverbs::Error::QueueFull);
                    fulls += 1;
                    e.index
                }
            };
            expected.extend(
                rest[..posted]
                    .iter()
                    .filter(|w| w.flags.contains(SendFlags::SIGNALED))
                    .map(|w| w.wr_id),
            );
            rest = &rest[posted..];
            poll(&mut scq, &mut seen);
            if rest.is_empty() {
                break;
            }
        }
    }
    poll(&mut scq, &mut seen);
    assert_eq!(seen, expected);
    assert!(fulls > 50, "the queue filled only {fulls} times");
}

#[test]
fn one_thread_posts_while_another_polls_against_a_model_on_its_own_thread() {
    // The QP and its CQ live on different threads and the model executes on a third: the
    // poster sees room only through the completions the poller consumes (the book's tail),
    // so every request must complete once, in order, with its bytes in place.
    let hal = SimHal::new(
        bareverbs_model::ModelConfig::default(),
        bareverbs_model::Drive::Background,
    );
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(16).unwrap());
    let init = QpInitAttr::new(
        QpType::Rc,
        &scq,
        &rcq,
        QpCap {
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        },
    );
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = region(&pd, 1 << 16, access);
    // Under Miri (the test command runs it there: it found the model's byte accesses racing
    // with the driver's atomics, and a poll reading a CQE before its read barrier) a few
    // dozen requests, with time for Miri's pace.
    let (n, secs) = if cfg!(miri) { (48, 3600) } else { (3000, 120) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let seen = std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut seen = Vec::new();
            let mut wc = [Wc::EMPTY; 8];
            while (seen.len() as u64) < n / 2 {
                assert!(std::time::Instant::now() < deadline, "poller stalled");
                let n = scq.poll(&mut wc);
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    seen.push(w.wr_id);
                }
            }
            seen
        });
        // Every other request signaled; each writes its id into its own 8 bytes.
        for id in 0..n {
            let bytes = id.to_le_bytes();
            let flags = if id % 2 == 1 {
                SendFlags::INLINE | SendFlags::SIGNALED
            } else {
                SendFlags::INLINE
            };
            let wr = SendWr {
                wr_id: id,
                sg_list: &[],
                inline_data: &bytes,
                op: SendOp::RdmaWrite {
                    remote_addr: mr.addr() + 8 * (id % 8192),
                    rkey: mr.rkey().raw(),
                },
                flags,
                ud: None,
            };
            loop {
                match a.post_send(std::slice::from_ref(&wr)) {
                    Ok(()) => break,
                    Err(e) if e.error == bareverbs::Error::QueueFull => {
                        assert!(std::time::Instant::now() < deadline, "poster stalled");
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
        poller.join().unwrap()
    });
    assert_eq!(seen, (0..n).filter(|i| i % 2 == 1).collect::<Vec<_>>());
    for id in [0, 1, n / 2, n - 1] {
        let mut got = [0u8; 8];
        mr.buf()
            .read_bytes(8 * (id % 8192) as usize, &mut got)
            .unwrap();
        assert_eq!(u64::from_le_bytes(got), id);
    }
}

#[test]
fn random_errors_flush_what_follows_and_reset_queues_start_over_cleanly() {
    // Batches of RDMA WRITEs, one of which may carry a key without remote write: the ones
    // before it complete (the signaled ones), it completes with REM_ACCESS_ERR, every one after
    // it completes with WR_FLUSH_ERR, signaled or not, and leaves its destination untouched.
    // Then both QPs go through RESET back to RTS and traffic resumes with the right ids.
    let mut rng = Rng(0x5151_5eed_0bad_f00d);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(256).unwrap(), dev.create_cq(16).unwrap());
    let init = QpInitAttr::new(
        QpType::Rc,
        &scq,
        &rcq,
        QpCap {
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
    );
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&mut a, &mut b);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let (src, dst) = (region(&pd, 8192, access), region(&pd, 8192, access));
    let read_only = region(
        &pd,
        8192,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    let pattern: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
    src.buf().write_bytes(0, &pattern).unwrap();
    let (mut next_id, mut errors) = (1u64, 0usize);
    for _ in 0..300 {
        let n = 1 + rng.below(8) as usize;
        let bad = (rng.below(3) == 0).then(|| rng.below(n as u64) as usize);
        dst.buf().write_bytes(0, &[0xee; 8 * 64]).unwrap();
        let plans: Vec<(u64, usize, bool, bool)> = (0..n)
            .map(|_| {
                let id = next_id;
                next_id += 1;
                (id, 1 + rng.below(64) as usize, rng.coin(), rng.coin())
            })
            .collect();
        let sg: Vec<[Sge; 1]> = plans
            .iter()
            .map(|&(_, len, _, _)| {
                [Sge {
                    addr: src.addr(),
                    length: len as u32,
                    lkey: src.lkey(),
                }]
            })
            .collect();
        let wrs: Vec<SendWr<'_>> = plans
            .iter()
            .enumerate()
            .map(|(i, &(id, len, signaled, inline))| {
                let (remote_addr, rkey) = if bad == Some(i) {
                    (read_only.addr(), read_only.rkey().raw())
                } else {
                    (dst.addr() + 64 * i as u64, dst.rkey().raw())
                };
                let mut flags = SendFlags::empty();
                if signaled {
                    flags |= SendFlags::SIGNALED;
                }
                if inline {
                    flags |= SendFlags::INLINE;
                }
                SendWr {
                    wr_id: id,
                    sg_list: if inline { &[] } else { &sg[i] },
                    inline_data: if inline { &pattern[..len] } else { &[] },
                    op: SendOp::RdmaWrite { remote_addr, rkey },
                    flags,
                    ud: None,
                }
            })
            .collect();
        a.post_send(&wrs).unwrap();
        // What ibverbs promises for each request of the batch.
        let want: Vec<(u64, WcStatus)> = plans
            .iter()
            .enumerate()
            .filter_map(|(i, &(id, _, signaled, _))| match bad {
                Some(e) if i == e => Some((id, WcStatus::RemAccessErr)),
                Some(e) if i > e => Some((id, WcStatus::WrFlushErr)),
                _ => signaled.then_some((id, WcStatus::Success)),
            })
            .collect();
        let mut got = Vec::new();
        loop {
            let mut wc = vec![Wc::EMPTY; 1 + rng.below(5) as usize];
            let k = scq.poll(&mut wc);
            got.extend(wc[..k].iter().map(|w| (w.wr_id, w.status)));
            if k == 0 {
                break;
            }
        }
        assert_eq!(got, want);
        // Bytes: written before the error, untouched from it on.
        for (i, &(_, len, _, _)) in plans.iter().enumerate() {
            let mut b = vec![0u8; len];
            dst.buf().read_bytes(64 * i, &mut b).unwrap();
            if bad.is_some_and(|e| i >= e) {
                assert!(
                    b.iter().all(|&x| x == 0xee),
                    "request {i} after the error wrote"
                );
            } else {
                assert_eq!(b, &pattern[..len], "request {i}");
            }
        }
        if bad.is_some() {
            errors += 1;
            assert_eq!(a.query().unwrap().qp_state, QpState::Err);
            // Both back through RESET: queues, counters and books start over.
            for q in [&mut a, &mut b] {
                q.modify(
                    &with(QpAttr::default(), |a| a.qp_state = QpState::Reset),
                    QpAttrMask::STATE,
                )
                .unwrap();
            }
            connect(&mut a, &mut b);
            let mut wc = [Wc::EMPTY; 4];
            assert_eq!(rcq.poll(&mut wc), 0);
        }
    }
    assert!(errors > 50, "only {errors} errors");
}

#[test]
fn random_datagrams_arrive_when_they_should_with_the_grh_area_and_are_dropped_otherwise() {
    // Three UD QPs send to each other (and to themselves) at random: any length 0–1024, inline
    // or gathered, any SL, with or without a GRH; a wrong Q_Key, an unknown QPN or a receiver
    // with nothing posted drops the message silently. Every send completes; every message
    // that arrives lands after the 40-byte GRH area of the oldest receive, which reports it.
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    const QKEY: u32 = 0x1111;
    let mut init = QpInitAttr::new(
        QpType::Ud,
        &scq,
        &rcq,
        QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
    );
    init.sq_sig_all = true;
    let mut qps: Vec<_> = (0..3).map(|_| pd.create_qp(&init).unwrap()).collect();
    for q in qps.iter_mut() {
        q.to_init(1, 0, AccessFlags::empty(), QKEY).unwrap();
        q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096).unwrap();
        q.to_rts(1).unwrap();
    }
    let qpns: Vec<u32> = qps.iter().map(|q| q.qpn().raw()).collect();
    let port_guid = dev.ports()[0].port_guid;
    let mr = region(&pd, 64 << 10, AccessFlags::LOCAL_WRITE);
    let pattern: Vec<u8> = (0..2048).map(|_| rng.next() as u8).collect();
    mr.buf().write_bytes(0, &pattern).unwrap();
    // Receive buffers: 40 + 1024 bytes each, in slots from 4 KiB on.
    const RBUF: u64 = 40 + 1024;
    let mut posted: Vec<VecDeque<u64>> = vec![VecDeque::new(); 3];
    let (mut next_recv, mut arrived, mut dropped) = (0u64, 0usize, 0usize);
    for id in 0..1500u64 {
        let (s, r) = (rng.below(3) as usize, rng.below(3) as usize);
        if posted[r].len() < 4 && rng.below(5) != 0 {
            let slot = next_recv % 48;
            let sg = [Sge {
                addr: mr.addr() + 4096 + slot * RBUF,
                length: RBUF as u32,
                lkey: mr.lkey(),
            }];
            qps[r]
                .post_recv(&[RecvWr {
                    wr_id: next_recv,
                    sg_list: &sg,
                }])
                .unwrap();
            posted[r].push_back(next_recv);
            next_recv += 1;
        }
        let len = rng.below(1025) as usize;
        let from = rng.below(1024) as usize;
        let inline = len <= 64 && rng.coin();
        let qkey = if rng.below(4) == 0 { QKEY + 1 } else { QKEY };
        let known = rng.below(10) != 0;
        let sl = rng.below(16) as u8;
        let global = rng.coin();
        let ah = AhAttr {
            dlid: 1,
            sl,
            port_num: 1,
            is_global: global,
            grh: GlobalRoute {
                dgid: [
                    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0xa1, 0xb2, 0xc1,
                ],
                hop_limit: 1,
                ..GlobalRoute::default()
            },
            ..AhAttr::default()
        };
        let half = len / 2;
        let sg = [
            Sge {
                addr: mr.addr() + from as u64,
                length: half as u32,
                lkey: mr.lkey(),
            },
            Sge {
                addr: mr.addr() + (from + half) as u64,
                length: (len - half) as u32,
                lkey: mr.lkey(),
            },
        ];
        let wr = SendWr {
            wr_id: id,
            sg_list: if inline { &[] } else { &sg },
            inline_data: if inline {
                &pattern[from..from + len]
            } else {
                &[]
            },
            op: SendOp::Send,
            flags: if inline {
                SendFlags::INLINE
            } else {
                SendFlags::empty()
            },
            ud: Some(common::ud_dest(
                &pd,
                ah,
                if known { qpns[r] } else { 0xff_fff0 },
                qkey,
            )),
        };
        qps[s].post_send(&[wr]).unwrap();
        let mut wc = [Wc::EMPTY; 4];
        assert_eq!(scq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (id, WcStatus::Success));
        let delivered = qkey == QKEY && known && !posted[r].is_empty();
        let n = rcq.poll(&mut wc);
        if !delivered {
            assert_eq!(n, 0, "message {id} should have been dropped");
            dropped += 1;
            continue;
        }
        assert_eq!(n, 1, "message {id} should have arrived");
        let w = wc[0];
        let recv_id = posted[r].pop_front().unwrap();
        assert_eq!(
            (w.wr_id, w.status, w.byte_len, w.qp_num, w.src_qp, w.sl),
            (
                recv_id,
                WcStatus::Success,
                40 + len as u32,
                qpns[r],
                qpns[s],
                sl
            ),
            "message {id}"
        );
        assert_eq!(w.wc_flags.contains(WcFlags::GRH), global, "message {id}");
        let start = 4096 + (recv_id % 48) * RBUF;
        if global {
            // The GRH the HCA wrote (IBA 8.3): version 6, payload length (BTH, DETH, the
            // message padded to 4, ICRC), next header IBA transport, the hop limit, the
            // sender's port GID and the destination GID.
            let mut h = [0u8; 40];
            mr.buf().read_bytes(start as usize, &mut h).unwrap();
            let pay_len = 12 + 8 + len.next_multiple_of(4) + 4;
            assert_eq!(h[0] >> 4, 6, "message {id}");
            assert_eq!(u16::from_be_bytes([h[4], h[5]]) as usize, pay_len);
            assert_eq!((h[6], h[7]), (0x1b, 1));
            assert_eq!(&h[8..16], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
            assert_eq!(&h[16..24], &port_guid.to_be_bytes());
            assert_eq!(&h[24..40], &ah.grh.dgid);
        }
        let mut got = vec![0u8; len];
        let at = start + 40;
        mr.buf().read_bytes(at as usize, &mut got).unwrap();
        assert_eq!(got, &pattern[from..from + len], "message {id}");
        arrived += 1;
    }
    assert!(
        arrived > 500 && dropped > 300,
        "{arrived} arrived, {dropped} dropped"
    );
}

#[test]
fn random_uc_traffic_drops_what_finds_no_receive_and_delivers_the_rest() {
    // One UC pair: SENDs and RDMA WRITEs with immediate consume a receive and are dropped
    // silently without one (the sender still completes successfully); plain WRITEs need none.
    let mut rng = Rng(0x00c0_ffee_1234_5678);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let mut init = QpInitAttr::new(
        QpType::Uc,
        &scq,
        &rcq,
        QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
    );
    init.sq_sig_all = true;
    let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    connect_pair(&mut a, &mut b, access, Mtu::Mtu1024);
    let mr = region(&pd, 16 << 10, access);
    let pattern: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
    mr.buf().write_bytes(0, &pattern).unwrap();
    let mut posted: VecDeque<(u64, u64)> = VecDeque::new();
    let (mut next_recv, mut delivered, mut dropped) = (0u64, 0usize, 0usize);
    for id in 0..1500u64 {
        if posted.len() < 4 && rng.below(3) != 0 {
            let at = 4096 + (next_recv % 8) * 1024;
            b.post_recv(&[RecvWr {
                wr_id: next_recv,
                sg_list: &[Sge {
                    addr: mr.addr() + at,
                    length: 1024,
                    lkey: mr.lkey(),
                }],
            }])
            .unwrap();
            posted.push_back((next_recv, at));
            next_recv += 1;
        }
        let len = rng.below(1025) as u32;
        let from = rng.below(3000);
        let dst = 12288 + rng.below(4096 - 1024);
        let (op, consumes, wc_op) = match rng.below(3) {
            0 => (SendOp::Send, true, WcOpcode::Send),
            1 => (
                SendOp::RdmaWriteWithImm {
                    remote_addr: mr.addr() + dst,
                    rkey: mr.rkey().raw(),
                    imm: id as u32,
                },
                true,
                WcOpcode::RdmaWrite,
            ),
            _ => (
                SendOp::RdmaWrite {
                    remote_addr: mr.addr() + dst,
                    rkey: mr.rkey().raw(),
                },
                false,
                WcOpcode::RdmaWrite,
            ),
        };
        let sg = [Sge {
            addr: mr.addr() + from,
            length: len,
            lkey: mr.lkey(),
        }];
        a.post_send(&[SendWr {
            wr_id: id,
            sg_list: &sg,
            inline_data: &[],
            op,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
        let mut wc = [Wc::EMPTY; 4];
        assert_eq!(scq.poll(&mut wc), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (id, WcStatus::Success, wc_op)
        );
        let n = rcq.poll(&mut wc);
        let landed_at = match (consumes, posted.front().copied()) {
            (true, None) => {
                assert_eq!(
                    n, 0,
                    "request {id}: nothing to receive it, nothing reported"
                );
                dropped += 1;
                None
            }
            (true, Some((recv_id, at))) => {
                posted.pop_front();
                assert_eq!(n, 1, "request {id}");
                let w = wc[0];
                assert_eq!(
                    (w.wr_id, w.status, w.byte_len),
                    (recv_id, WcStatus::Success, len)
                );
                delivered += 1;
                if matches!(op, SendOp::Send) {
                    assert_eq!(w.opcode, WcOpcode::Recv);
                    Some(at)
                } else {
                    assert_eq!(
                        (w.opcode, w.imm_data),
                        (WcOpcode::RecvRdmaWithImm, id as u32)
                    );
                    Some(dst)
                }
            }
            (false, _) => {
                assert_eq!(n, 0, "request {id}: a plain WRITE consumes no receive");
                Some(dst)
            }
        };
        if let Some(at) = landed_at {
            let mut got = vec![0u8; len as usize];
            mr.buf().read_bytes(at as usize, &mut got).unwrap();
            assert_eq!(
                got,
                &pattern[from as usize..(from + u64::from(len)) as usize]
            );
        }
    }
    assert!(
        delivered > 400 && dropped > 20,
        "{delivered} delivered, {dropped} dropped"
    );
}

#[test]
fn random_atomics_agree_with_a_shadow_of_the_counters() {
    // Fetch-and-add and compare-and-swap on eight 8-byte counters, each checked against a
    // shadow copy: the value returned and the value left, both native u64s.
    let mut rng = Rng(0x7777_aaaa_5555_3333);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let attr = PairAttr {
        cap: QpCap {
            max_recv_wr: 1,
            ..cap(8, 1, 0)
        },
        recv_cqe: 16,
        sq_sig_all: true,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
        ..PairAttr::new(cap(8, 1, 0))
    };
    with_rc_pair(&dev, attr, |RcPair { a, scq, mr, .. }| {
        let mut shadow = [0u64; 8];
        for (k, v) in shadow.iter_mut().enumerate() {
            *v = rng.next();
            mr.buf().write_bytes(8 * k, &v.to_ne_bytes()).unwrap();
        }
        for id in 0..2000u64 {
            let k = rng.below(8) as usize;
            let target = mr.addr() + 8 * k as u64;
            let rkey = mr.rkey().raw();
            let old = shadow[k];
            let op = if rng.coin() {
                let add = rng.next() >> rng.below(64);
                shadow[k] = old.wrapping_add(add);
                SendOp::AtomicFetchAndAdd {
                    remote_addr: target,
                    rkey,
                    add,
                }
            } else {
                // Half the compares match.
                let compare = if rng.coin() { old } else { rng.next() };
                let swap = rng.next();
                if compare == old {
                    shadow[k] = swap;
                }
                SendOp::AtomicCmpAndSwp {
                    remote_addr: target,
                    rkey,
                    compare,
                    swap,
                }
            };
            let result = [Sge {
                addr: mr.addr() + 2048,
                length: 8,
                lkey: mr.lkey(),
            }];
            a.post_send(&[SendWr {
                wr_id: id,
                sg_list: &result,
                inline_data: &[],
                op,
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
            let mut wc = [Wc::EMPTY; 2];
            assert_eq!(scq.poll(&mut wc), 1);
            assert_eq!(
                (wc[0].wr_id, wc[0].status, wc[0].byte_len),
                (id, WcStatus::Success, 8)
            );
            assert_eq!(
                mr.buf().read_ne64(2048),
                old,
                "returned value, request {id}"
            );
            assert_eq!(
                mr.buf().read_ne64(8 * k),
                shadow[k],
                "counter {k}, request {id}"
            );
        }
    });
}
