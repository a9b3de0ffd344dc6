//! `dc_pingpong`: rdma-core's `ibv_rc_pingpong` exchange over DC (seed 004,
//! `mlx5dv_create_qp`): each side has one DC initiator that sends and one DC target on an SRQ
//! that receives. The sides swap their LID, DCT number and DC access key over TCP (one line
//! each, `LLLL:NNNNNN:KKKKKKKKKKKKKKKK`, then `done`), then ping-pong `-n` messages of `-s`
//! bytes, each DCI request addressed to the other side's DCT. rdma-core ships no DC ping-pong
//! to talk to, so both sides are this program. Without `--pci`, both run in this process on two
//! model HCAs.
//!
//! Options as `ibv_rc_pingpong`'s (`-p -i -s -m -r -n -l -c`, `--pci B`, a server name for
//! the client side); `-c` checks the data at every page start, as rdma-core does.

#[allow(dead_code)]
mod pingpong;

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use pingpong::{Opts, DONE, PAGE_SIZE, STALL};

const PROG: &str = "dc_pingpong";
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// Bytes of an address line, with its NUL.
const LINE: usize = 29;

/// What one side tells the other: where its DCT is and the key it takes.
#[derive(Clone, Copy, Debug)]
struct DcAddr {
    lid: u16,
    dctn: u32,
    key: u64,
}

fn line(a: DcAddr) -> [u8; LINE] {
    let mut m = [0u8; LINE];
    let text = format!("{:04x}:{:06x}:{:016x}", a.lid, a.dctn, a.key);
    m[..text.len()].copy_from_slice(text.as_bytes());
    m
}

fn parse_line(m: &[u8]) -> Result<DcAddr, String> {
    let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
    let text = String::from_utf8_lossy(&m[..end]).into_owned();
    let f: Vec<&str> = text.split(':').collect();
    let bad = || format!("bad remote address {text:?}");
    if f.len() != 3 {
        return Err(bad());
    }
    Ok(DcAddr {
        lid: u16::from_str_radix(f[0], 16).map_err(|_| bad())?,
        dctn: u32::from_str_radix(f[1], 16).map_err(|_| bad())?,
        key: u64::from_str_radix(f[2], 16).map_err(|_| bad())?,
    })
}

fn run_side<H: Hal>(hal: H, o: &Opts) -> Result<String, String> {
    let mtu = pingpong::mtu(o.mtu)?;
    let dev =
        Device::bring_up(hal, Config::default()).map_err(|e| format!("bring-up failed at {e}"))?;
    if !dev.info().caps.dc {
        return Err("the device has no DC transport".into());
    }
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
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
        .create_cq(o.rx_depth + 1)
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
    let dc = |dc_type, key| {
        let mut a = DvQpInitAttr::default();
        a.comp_mask = DvQpInitAttrMask::DC;
        a.dc_init_attr.dc_type = dc_type;
        a.dc_init_attr.dct_access_key = key;
        a
    };
    let mut dci = pd
        .create_qp_dv(
            &QpInitAttr::new(QpType::Driver, &cq, &cq, cap),
            &dc(DcType::Dci, 0),
        )
        .map_err(|e| format!("Couldn't create DCI: {e}"))?
        .into_qp()
        .ok_or("not a DCI")?;
    // Any 64-bit value will do; a time-derived one differs per run.
    let key = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut on_srq = QpInitAttr::new(QpType::Driver, &cq, &cq, cap);
    on_srq.srq = Some(&srq);
    let mut dct = pd
        .create_qp_dv(&on_srq, &dc(DcType::Dct, key))
        .map_err(|e| format!("Couldn't create DCT: {e}"))?
        .into_dct()
        .ok_or("not a DCT")?;
    // The DCT: INIT with its rights and port, RTR with its path (Linux mlx5_ib_modify_dct);
    // the DCI: INIT, RTR (no remote QP: each request names its target), RTS.
    let path = AhAttr {
        port_num: o.ib_port,
        sl: o.sl,
        ..AhAttr::default()
    };
    dct.to_init(o.ib_port, 0, AccessFlags::LOCAL_WRITE)
        .and_then(|()| dct.to_rtr(path, mtu, 12))
        .map_err(|e| format!("Failed to bring the DCT to RTR: {e}"))?;
    dci.to_init(o.ib_port, 0, AccessFlags::empty(), 0)
        .and_then(|()| dci.to_rtr(0, 0, path, mtu))
        .and_then(|()| dci.to_rts(0))
        .map_err(|e| format!("Failed to bring the DCI to RTS: {e}"))?;
    let buf = [Sge {
        addr: mr.addr(),
        length: o.size as u32,
        lkey: mr.lkey(),
    }];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: &buf,
    };
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
    let local = DcAddr {
        lid: port.lid,
        dctn: dct.dctn().map(|d| d.raw()).ok_or("DCT has no number")?,
        key,
    };
    println!(
        "  local address:  LID 0x{:04x}, DCTN 0x{:06x}, DC key 0x{:016x}, DCI 0x{:06x}",
        local.lid,
        local.dctn,
        local.key,
        dci.qpn().raw()
    );
    let client = o.server.is_some();
    let mut link = pingpong::connect(o)?;
    let mut remote_line = [0u8; LINE];
    if client {
        link.write_all(&line(local))
            .and_then(|()| link.read_exact(&mut remote_line))
            .and_then(|()| link.write_all(DONE))
            .map_err(|e| format!("client exchange: {e}"))?;
    } else {
        let mut done = [0u8; DONE.len()];
        link.read_exact(&mut remote_line)
            .and_then(|()| link.write_all(&line(local)))
            .and_then(|()| link.read_exact(&mut done))
            .map_err(|e| format!("server exchange: {e}"))?;
    }
    drop(link);
    let remote = parse_line(&remote_line)?;
    println!(
        "  remote address: LID 0x{:04x}, DCTN 0x{:06x}, DC key 0x{:016x}",
        remote.lid, remote.dctn, remote.key
    );
    let ah = pd
        .create_ah(AhAttr {
            dlid: remote.lid,
            ..path
        })
        .map_err(|e| format!("Failed to create AH: {e}"))?;
    let to = ah
        .dc_dest(remote.dctn, remote.key)
        .map_err(|e| e.to_string())?;
    let send = |dci: &mut Qp<'_, '_, H>| -> Result<(), String> {
        dci.send_batch_dc(|b| {
            b.set_dc_addr(&to);
            b.send(SEND_WRID, SendFlags::SIGNALED, &buf)
        })
        .and_then(|r| r)
        .map_err(|e| format!("Couldn't post send: {e}"))
    };
    let mut pending = RECV_WRID;
    if client {
        if o.check {
            for (i, at) in (0..o.size).step_by(PAGE_SIZE).enumerate() {
                mr.buf()
                    .write_bytes(at, &[i as u8])
                    .map_err(|e| e.to_string())?;
            }
        }
        send(&mut dci)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wc = [Wc::EMPTY; 2];
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
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recvs(o.rx_depth - routs);
                        if routs < o.rx_depth {
                            return Err(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending &= !w.wr_id;
            if scnt < o.iters && pending == 0 {
                send(&mut dci)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if o.check {
        let mut b = [0u8; 1];
        for (i, at) in (0..o.size).step_by(PAGE_SIZE).enumerate() {
            mr.buf().read_bytes(at, &mut b).map_err(|e| e.to_string())?;
            if b[0] != i as u8 {
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
