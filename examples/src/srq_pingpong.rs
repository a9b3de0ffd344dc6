//! `srq_pingpong`: ping-pong over `-q` RC QPs that all receive from one SRQ, with the command
//! line and exchange of rdma-core 56's `ibv_srq_pingpong` (libibverbs/examples/srq_pingpong.c:
//! 256 address messages each way, zeros past `num_qp`, then `done`; one CQ; the SRQ refilled
//! when no more than `num_qp` receives are left). Without `--pci`, both sides run in this
//! process on two model HCAs.

#[allow(dead_code)]
mod pingpong;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Instant;

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use pingpong::{Dest, Opts, DEST_MSG_LEN, DONE, PAGE_SIZE, STALL};

const PROG: &str = "srq_pingpong";
/// Address messages each way, whatever `num_qp` is (srq_pingpong.c `MAX_QP`).
const MAX_QP: usize = 256;
/// `wr_id`s, as rdma-core's (`PINGPONG_RECV_WRID`, `PINGPONG_SEND_WRID`): also bits of a QP's
/// pending work.
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

fn write_dests(s: &mut TcpStream, d: &[Dest]) -> Result<(), String> {
    for i in 0..MAX_QP {
        let m = match d.get(i) {
            Some(&d) => pingpong::dest_message(d),
            None => pingpong::dest_message(Dest {
                lid: 0,
                qpn: 0,
                psn: 0,
            }),
        };
        s.write_all(&m)
            .map_err(|e| format!("Couldn't send local address: {e}"))?;
    }
    Ok(())
}

fn read_dests(s: &mut TcpStream, n: usize) -> Result<Vec<Dest>, String> {
    let mut out = Vec::with_capacity(n);
    for i in 0..MAX_QP {
        let mut m = [0u8; DEST_MSG_LEN];
        s.read_exact(&mut m)
            .map_err(|e| format!("Couldn't read remote address [{i}]: {e}"))?;
        if i < n {
            out.push(pingpong::parse_dest(&m)?);
        }
    }
    Ok(out)
}

fn run_side<H: Hal>(hal: H, o: &Opts) -> Result<String, String> {
    let n = o.num_qp as usize;
    if o.num_qp > o.rx_depth {
        return Err(format!(
            "rx_depth {} is too small for {} QPs -- must have at least one receive per QP.",
            o.rx_depth, o.num_qp
        ));
    }
    if n == 0 || n >= MAX_QP {
        return Err(format!("num_qp {n} must be between 1 and {}", MAX_QP - 1));
    }
    let mtu = pingpong::mtu(o.mtu)?;
    let dev =
        Device::bring_up(hal, Config::default()).map_err(|e| format!("bring-up failed at {e}"))?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    // The buffer is registered before the QPs exist, as srq_pingpong.c `pp_init_ctx` does, so
    // the QPs are destroyed before it is deregistered: a side may post up to `num_qp - 1`
    // sends more than the other side counts, and one that arrives while this side tears down
    // must find no QP (the sender is already done with it), not a QP whose buffer is gone.
    let mr = pd
        .reg_mr(
            dev.hal()
                .dma_alloc(o.size, 4096)
                .map_err(|e| e.to_string())?
                .share(),
            AccessFlags::LOCAL_WRITE,
        )
        .map_err(|(e, _)| format!("Couldn't register MR: {e}"))?;
    let mut cq = dev
        .create_cq(o.rx_depth + o.num_qp)
        .map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let srq = pd
        .create_srq(&SrqInitAttr::new(SrqAttr {
            max_wr: o.rx_depth,
            max_sge: 1,
            srq_limit: 0,
        }))
        .map_err(|e| format!("Couldn't create SRQ: {e}"))?;
    let cap = QpCap {
        max_send_wr: 1,
        max_send_sge: 1,
        ..QpCap::default()
    };
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq, cap);
    init.srq = Some(&srq);
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        qps.push(
            pd.create_qp(&init)
                .map_err(|e| format!("Couldn't create QP: {e}"))?,
        );
    }
    for q in qps.iter_mut() {
        q.to_init(o.ib_port, 0, AccessFlags::empty(), 0)
            .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    }
    let buf = [Sge {
        addr: mr.addr(),
        length: o.size as u32,
        lkey: mr.lkey(),
    }];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: &buf,
    };
    // Posts up to `k` receives to the SRQ; how many went (pp_post_recv).
    let post_recvs = |k: u32| -> u32 {
        let mut done = 0;
        while done < k && srq.post_recv(std::slice::from_ref(&recv)).is_ok() {
            done += 1;
        }
        done
    };
    let mut routs = post_recvs(o.rx_depth);
    if routs < o.rx_depth {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    let port = dev.query_port(o.ib_port).map_err(|e| e.to_string())?;
    let local: Vec<Dest> = qps
        .iter()
        .map(|q| Dest {
            lid: port.lid,
            qpn: q.qpn().raw(),
            psn: q.qpn().raw().wrapping_mul(2_654_435_761) & 0xff_ffff,
        })
        .collect();
    for d in &local {
        println!(
            "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID ::",
            d.lid, d.qpn, d.psn
        );
    }
    let client = o.server.is_some();
    let mut link = pingpong::connect(o)?;
    let connect_all = |qps: &mut Vec<Qp<'_, '_, H>>, remote: &[Dest]| -> Result<(), String> {
        for ((q, r), l) in qps.iter_mut().zip(remote).zip(&local) {
            let path = AhAttr {
                dlid: r.lid,
                sl: o.sl,
                port_num: o.ib_port,
                ..AhAttr::default()
            };
            q.to_rtr(r.qpn, r.psn, path, mtu)
                .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
            q.to_rts(l.psn)
                .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
        }
        Ok(())
    };
    let remote = if client {
        write_dests(&mut link, &local)?;
        let remote = read_dests(&mut link, n)?;
        link.write_all(DONE)
            .map_err(|e| format!("client write: {e}"))?;
        connect_all(&mut qps, &remote)?;
        remote
    } else {
        let remote = read_dests(&mut link, n)?;
        connect_all(&mut qps, &remote)?;
        write_dests(&mut link, &local)?;
        let mut done = [0u8; DONE.len()];
        link.read_exact(&mut done)
            .map_err(|e| format!("server read: {e}"))?;
        remote
    };
    drop(link);
    for d in &remote {
        println!(
            "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID ::",
            d.lid, d.qpn, d.psn
        );
    }
    let send = SendWr {
        wr_id: SEND_WRID,
        sg_list: &buf,
        inline_data: &[],
        op: SendOp::Send,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    let mut pending = vec![RECV_WRID; n];
    if client {
        if o.check {
            // srq_pingpong.c: buf[i] = i / page_size % sizeof(char) at each page start.
            for at in (0..o.size).step_by(PAGE_SIZE) {
                mr.buf().write_bytes(at, &[0]).map_err(|e| e.to_string())?;
            }
        }
        for (q, p) in qps.iter_mut().zip(pending.iter_mut()) {
            q.post_send(&[send])
                .map_err(|e| format!("Couldn't post send: {e}"))?;
            *p = SEND_WRID | RECV_WRID;
        }
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wc = vec![Wc::EMPTY; (o.rx_depth + o.num_qp) as usize];
    let mut last = Instant::now();
    while rcnt < o.iters || scnt < o.iters {
        let ne = cq.poll(&mut wc);
        if ne == 0 {
            if last.elapsed() > STALL {
                return Err("no completion: is the other side running?".into());
            }
            std::hint::spin_loop();
            continue;
        }
        last = Instant::now();
        for w in &wc[..ne] {
            if w.status != WcStatus::Success {
                return Err(format!("Failed status {} for wr_id {}", w.status, w.wr_id));
            }
            let Some(qi) = qps.iter().position(|q| q.qpn().raw() == w.qp_num) else {
                return Err(format!("Couldn't find QPN {:06x}", w.qp_num));
            };
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= o.num_qp {
                        routs += post_recvs(o.rx_depth - routs);
                        if routs < o.rx_depth {
                            return Err(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending[qi] &= !w.wr_id;
            if scnt < o.iters && pending[qi] == 0 {
                qps[qi]
                    .post_send(&[send])
                    .map_err(|e| format!("Couldn't post send: {e}"))?;
                pending[qi] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if o.check {
        let mut b = [0u8; 1];
        for at in (0..o.size).step_by(PAGE_SIZE) {
            mr.buf().read_bytes(at, &mut b).map_err(|e| e.to_string())?;
            if b[0] != 0 {
                return Err("invalid data in page".into());
            }
        }
    }
    let bytes = o.size as f64 * f64::from(o.iters) * 2.0;
    Ok(format!(
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec\n{} iters in {:.2} seconds = {:.2} usec/iter",
        bytes as u64,
        secs,
        bytes * 8.0 / secs / 1e6,
        o.iters,
        secs,
        secs * 1e6 / f64::from(o.iters)
    ))
}

fn main() -> ExitCode {
    pingpong::main_with(PROG, run_side, |hal, o| run_side(hal, o))
}
