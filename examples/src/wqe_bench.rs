//! `wqe_bench`: the code whose instructions `qemu-tests/bench/wqe-cost.sh` counts under
//! callgrind — our driver's `post_send`, batch API and `poll`, and the floor: the stores a WQE
//! needs (and the loads a CQE needs) with every operand a constant, over rings of the same
//! size. Not a timing benchmark.
//!
//! Usage: `wqe_bench driver-post|driver-batch|driver-dci|driver-poll|driver-poll-empty|min-post|min-poll inline64|write4k BATCH ITERS`
//!
//! The measured work sits in the `#[inline(never)]` functions `bench_*`; the script collects
//! instructions only inside them (and, for the driver, not inside the model's doorbell handler,
//! which stands in for the hardware).

use std::hint::black_box;

use bareverbs::testing::{cap, with_rc_pair, PairAttr, RcPair};
use bareverbs::verbs::Lkey;
use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

const RING_BBS: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inline64,
    Write4k,
}

#[inline(never)]
fn bench_driver_post<H: Hal>(qp: &mut Qp<'_, '_, H>, wrs: &[SendWr<'_>]) {
    if qp.post_send(black_box(wrs)).is_err() {
        std::process::exit(3);
    }
}

/// The same requests through the batch API (`ibv_wr_*`): one method per operation, so
/// nothing is decided per request that the caller already knows. The requests come from the
/// same plain array as [`bench_min_post_mem`]'s.
#[inline(never)]
fn bench_driver_batch<H: Hal>(qp: &mut Qp<'_, '_, H>, kind: Kind, reqs: &[MinReq<'_>], lkey: Lkey) {
    let ok = qp.send_batch(move |b| post_reqs(b, kind, black_box(reqs), lkey));
    if ok != Ok(true) {
        std::process::exit(3);
    }
}

/// Writes `reqs` into batch `b` with the batch API's per-operation methods; false at the first
/// refusal.
#[inline(always)]
fn post_reqs<const XRC: bool, const DC: bool>(
    b: &mut SendBatch<'_, XRC, DC>,
    kind: Kind,
    reqs: &[MinReq<'_>],
    lkey: Lkey,
) -> bool {
    for r in reqs {
        let flags = if r.signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let res = match kind {
            Kind::Write4k => b.rdma_write(
                r.wr_id,
                flags,
                r.raddr,
                r.rkey,
                &[Sge {
                    addr: r.addr,
                    length: r.len,
                    lkey,
                }],
            ),
            Kind::Inline64 => b.send_inline(r.wr_id, flags, r.inline),
        };
        if res.is_err() {
            return false;
        }
    }
    true
}

/// The requests of [`bench_driver_batch`] from a DC initiator, each addressed to a DC target
/// (`mlx5dv_wr_set_dc_addr` once per batch, then the same calls).
#[inline(never)]
fn bench_driver_dci<H: Hal>(
    qp: &mut Qp<'_, '_, H>,
    to: &DcDest,
    kind: Kind,
    reqs: &[MinReq<'_>],
    lkey: Lkey,
) {
    let ok = qp.send_batch_dc(move |b| {
        b.set_dc_addr(black_box(to));
        post_reqs(b, kind, black_box(reqs), lkey)
    });
    if ok != Ok(true) {
        std::process::exit(3);
    }
}

#[inline(never)]
fn bench_driver_poll<H: Hal>(cq: &mut Cq<'_, H>, wc: &mut [Wc]) -> usize {
    cq.poll(black_box(wc))
}

/// A poll of an empty CQ, what a busy-polling loop does most of the time.
#[inline(never)]
fn bench_driver_poll_empty<H: Hal>(cq: &mut Cq<'_, H>, wc: &mut [Wc]) -> usize {
    cq.poll(black_box(wc))
}

/// The stores a WQE needs and nothing else: control segment, the operation's segments, data
/// or inline payload; then one doorbell-record store and one 64-bit doorbell per batch.
#[inline(never)]
fn bench_min_post(
    ring: &mut [u8],
    dbr: &mut [u8; 8],
    bf: &mut u64,
    cur: &mut u16,
    kind: Kind,
    batch: usize,
    payload: &[u8; 64],
) {
    let qpn: u32 = 0x100;
    let mut last = 0u64;
    for _ in 0..batch {
        let at = (usize::from(*cur) % RING_BBS) * 64;
        let (opcode, ds, bbs) = match kind {
            Kind::Inline64 => (0x0au32, 6u32, 2u16),
            Kind::Write4k => (0x08, 3, 1),
        };
        let w0 = (u64::from((u32::from(*cur) << 8) | opcode) << 32) | u64::from((qpn << 8) | ds);
        let w = &mut ring[at..at + 64 * usize::from(bbs)];
        w[0..8].copy_from_slice(&w0.to_be_bytes());
        w[8..16].copy_from_slice(&(8u64 << 32).to_be_bytes());
        match kind {
            Kind::Inline64 => {
                w[16..20].copy_from_slice(&(0x8000_0000u32 | 64).to_be_bytes());
                w[20..84].copy_from_slice(payload);
            }
            Kind::Write4k => {
                w[16..24].copy_from_slice(&0x1_0000_0000u64.to_be_bytes());
                w[24..28].copy_from_slice(&0x1234u32.to_be_bytes());
                w[32..36].copy_from_slice(&4096u32.to_be_bytes());
                w[36..40].copy_from_slice(&0x5678u32.to_be_bytes());
                w[40..48].copy_from_slice(&0x2_0000_0000u64.to_be_bytes());
            }
        }
        *cur = cur.wrapping_add(bbs);
        last = w0;
    }
    dbr[4..8].copy_from_slice(&u32::from(*cur).to_be_bytes());
    *bf = black_box(last);
}

/// One request as the same-work C poster holds it (`qemu-tests/bench/same_work.c`, `struct
/// req`): every operand a run-time value; the lkey is the region's, passed beside.
#[derive(Clone, Copy)]
struct MinReq<'a> {
    wr_id: u64,
    raddr: u64,
    rkey: u32,
    addr: u64,
    len: u32,
    signaled: bool,
    inline: &'a [u8],
}

/// The loads a CQE needs: owner and opcode, then QPN, WQE counter and byte count; one
/// doorbell-record store per batch.
#[inline(never)]
fn bench_min_poll(
    ring: &[u8],
    dbr: &mut [u8; 8],
    ci: &mut u32,
    batch: usize,
    out: &mut [(u32, u16, u32)],
) -> usize {
    let log = 12;
    let mut n = 0;
    while n < batch {
        let at = ((*ci as usize) & ((1 << log) - 1)) * 64;
        let op_own = ring[at + 63];
        if op_own >> 4 == 0xf || u32::from(op_own & 1) != (*ci >> log) & 1 {
            break;
        }
        let qpn = u32::from_be_bytes([
            ring[at + 0x38],
            ring[at + 0x39],
            ring[at + 0x3a],
            ring[at + 0x3b],
        ]) & 0xff_ffff;
        let wqe = u16::from_be_bytes([ring[at + 0x3c], ring[at + 0x3d]]);
        let bytes = u32::from_be_bytes([
            ring[at + 0x2c],
            ring[at + 0x2d],
            ring[at + 0x2e],
            ring[at + 0x2f],
        ]);
        out[n] = (qpn, wqe, bytes);
        *ci += 1;
        n += 1;
    }
    dbr[0..4].copy_from_slice(&(*ci & 0xff_ffff).to_be_bytes());
    n
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 {
        eprintln!("usage: wqe_bench driver-post|driver-batch|driver-poll|driver-poll-empty|min-post|min-poll inline64|write4k BATCH ITERS");
        std::process::exit(2);
    }
    let kind = if a[2] == "inline64" {
        Kind::Inline64
    } else {
        Kind::Write4k
    };
    let batch: usize = a[3].parse().unwrap_or(1);
    let iters: usize = a[4].parse().unwrap_or(100);
    match a[1].as_str() {
        "min-post" => {
            let mut ring = vec![0u8; RING_BBS * 64 + 128];
            let (mut dbr, mut bf, mut cur) = ([0u8; 8], 0u64, 0u16);
            let payload = [0x5a; 64];
            for _ in 0..iters {
                bench_min_post(
                    &mut ring, &mut dbr, &mut bf, &mut cur, kind, batch, &payload,
                );
            }
            black_box((&ring, dbr, bf));
        }
        "min-poll" => {
            let mut ring = vec![0xf0u8; 4096 * 64];
            let (mut dbr, mut ci) = ([0u8; 8], 0u32);
            let mut out = vec![(0, 0, 0); batch];
            for _ in 0..iters {
                for k in 0..batch as u32 {
                    let at = (((ci + k) as usize) & 4095) * 64;
                    ring[at + 63] = (((ci + k) >> 12) & 1) as u8;
                }
                if bench_min_poll(&ring, &mut dbr, &mut ci, batch, &mut out) != batch {
                    std::process::exit(3);
                }
            }
        }
        "driver-dci" => dci(kind, batch, iters),
        mode => driver(mode, kind, batch, iters),
    }
}

/// A DCI sending to a DCT on the same model HCA (LID 1), `iters` batches of `batch`.
fn dci(kind: Kind, batch: usize, iters: usize) {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap_or_else(|e| panic!("{e}"));
    let pd = dev.alloc_pd().unwrap_or_else(|e| panic!("{e}"));
    let (mut scq, mut rcq) = (dev.create_cq(4095).unwrap(), dev.create_cq(4095).unwrap());
    let srq = pd
        .create_srq(&SrqInitAttr::new(SrqAttr {
            max_wr: 4096,
            max_sge: 1,
            srq_limit: 0,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
    let cap = QpCap {
        max_send_wr: 32,
        max_send_sge: 1,
        max_inline_data: 64,
        ..QpCap::default()
    };
    let dc = |dc_type| {
        let mut a = DvQpInitAttr::default();
        a.comp_mask = DvQpInitAttrMask::DC;
        a.dc_init_attr.dc_type = dc_type;
        a.dc_init_attr.dct_access_key = 7;
        a
    };
    let mut qp = pd
        .create_qp_dv(
            &QpInitAttr::new(QpType::Driver, &scq, &scq, cap),
            &dc(DcType::Dci),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .into_qp()
        .unwrap();
    let mut on_srq = QpInitAttr::new(QpType::Driver, &rcq, &rcq, cap);
    on_srq.srq = Some(&srq);
    let mut dct = pd
        .create_qp_dv(&on_srq, &dc(DcType::Dct))
        .unwrap_or_else(|e| panic!("{e}"))
        .into_dct()
        .unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let path = AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    dct.to_init(1, 0, access)
        .and_then(|()| dct.to_rtr(path, Mtu::Mtu4096, 0))
        .and_then(|()| qp.to_init(1, 0, AccessFlags::empty(), 0))
        .and_then(|()| qp.to_rtr(0, 0, path, Mtu::Mtu4096))
        .and_then(|()| qp.to_rts(0))
        .unwrap_or_else(|e| panic!("{e}"));
    let mr = pd
        .reg_mr(hal.dma_alloc(8192, 4096).unwrap().share(), access)
        .map_err(|(e, _)| e)
        .unwrap();
    let to = pd
        .create_ah(path)
        .and_then(|ah| ah.dc_dest(dct.dctn().map_or(0, |d| d.raw()), 7))
        .unwrap_or_else(|e| panic!("{e}"));
    let payload = [0x5au8; 64];
    let reqs: Vec<MinReq<'_>> = (0..batch)
        .map(|k| MinReq {
            wr_id: 1,
            raddr: mr.addr() + 4096,
            rkey: mr.rkey().raw(),
            addr: mr.addr(),
            len: 4096,
            signaled: k + 1 == batch,
            inline: &payload,
        })
        .collect();
    let rx = [Sge {
        addr: mr.addr() + 4096,
        length: 4096,
        lkey: mr.lkey(),
    }];
    let recvs = vec![
        RecvWr {
            wr_id: 2,
            sg_list: &rx
        };
        batch
    ];
    let mut wc = vec![Wc::EMPTY; batch];
    for _ in 0..iters {
        if kind == Kind::Inline64 {
            srq.post_recv(&recvs).unwrap_or_else(|e| panic!("{e}"));
        }
        bench_driver_dci(&mut qp, &to, kind, &reqs, mr.lkey());
        while scq.poll(&mut wc) > 0 {}
        while rcq.poll(&mut wc) > 0 {}
    }
}

fn driver(mode: &str, kind: Kind, batch: usize, iters: usize) {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap_or_else(|e| panic!("{e}"));
    // Two RC QPs connected on the model's port, a send queue of 32 and room for 4096
    // receives, 64 bytes inline; one 8 KiB region, sent from its first half into its second.
    let attr = PairAttr {
        cap: QpCap {
            max_send_wr: 32,
            max_recv_wr: 4096,
            ..cap(1, 1, 64)
        },
        send_cqe: 4095,
        recv_cqe: 4095,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        mtu: Mtu::Mtu4096,
        region_len: 8192,
        ..PairAttr::new(cap(1, 1, 64))
    };
    with_rc_pair(
        &dev,
        attr,
        |RcPair {
             a: qa,
             b: qb,
             scq,
             rcq,
             mr,
             ..
         }| {
            let rx = [Sge {
                addr: mr.addr() + 4096,
                length: 4096,
                lkey: mr.lkey(),
            }];
            let tx = [Sge {
                addr: mr.addr(),
                length: 4096,
                lkey: mr.lkey(),
            }];
            let payload = [0x5au8; 64];
            let one = match kind {
                Kind::Inline64 => SendWr {
                    wr_id: 1,
                    sg_list: &[],
                    inline_data: &payload,
                    op: SendOp::Send,
                    flags: SendFlags::INLINE,
                    ud: None,
                },
                Kind::Write4k => SendWr {
                    wr_id: 1,
                    sg_list: &tx,
                    inline_data: &[],
                    op: SendOp::RdmaWrite {
                        remote_addr: mr.addr() + 4096,
                        rkey: mr.rkey().raw(),
                    },
                    flags: SendFlags::empty(),
                    ud: None,
                },
            };
            let poll = mode == "driver-poll";
            let mut wrs = vec![one; batch];
            for w in wrs.iter_mut() {
                if poll {
                    w.flags |= SendFlags::SIGNALED;
                }
            }
            if let Some(last) = wrs.last_mut() {
                last.flags |= SendFlags::SIGNALED;
            }
            let reqs: Vec<MinReq<'_>> = wrs
                .iter()
                .map(|w| MinReq {
                    wr_id: w.wr_id,
                    raddr: mr.addr() + 4096,
                    rkey: mr.rkey().raw(),
                    addr: mr.addr(),
                    len: 4096,
                    signaled: w.flags.contains(SendFlags::SIGNALED),
                    inline: &payload,
                })
                .collect();
            let mut wc = vec![Wc::EMPTY; batch];
            let recvs = vec![
                RecvWr {
                    wr_id: 2,
                    sg_list: &rx
                };
                batch
            ];
            if mode == "driver-poll-empty" {
                for _ in 0..iters {
                    if bench_driver_poll_empty(scq, &mut wc) != 0 {
                        std::process::exit(3);
                    }
                }
                return;
            }
            for _ in 0..iters {
                if kind == Kind::Inline64 {
                    qb.post_recv(&recvs).unwrap_or_else(|e| panic!("{e}"));
                }
                if poll {
                    qa.post_send(&wrs).unwrap_or_else(|e| panic!("{e}"));
                    let mut got = 0;
                    while got < batch {
                        got += bench_driver_poll(scq, &mut wc[..batch - got]);
                    }
                } else if mode == "driver-batch" {
                    bench_driver_batch(qa, kind, &reqs, mr.lkey());
                    while scq.poll(&mut wc) > 0 {}
                } else {
                    bench_driver_post(qa, &wrs);
                    while scq.poll(&mut wc) > 0 {}
                }
                while rcq.poll(&mut wc) > 0 {}
            }
        },
    );
}
