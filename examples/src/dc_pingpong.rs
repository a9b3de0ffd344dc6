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
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};
use bareverbs_vfio::VfioHal;
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
        .create_srq(&SrqInitAttr {
            attr: SrqAttr {
                max_wr: o.rx_depth,
                max_sge: 1,
                srq_limit: 0,
            },
            srq_context: 0,
        })
        .map_err(|e| format!("Couldn't create SRQ: {e}"))?;
    let cap = QpCap {
        max_send_wr: 1,
        max_send_sge: 1,
        ..QpCap::default()
    };
    let dc = |dc_type, key| DvQpInitAttr {
        comp_mask: DvQpInitAttrMask::DC,
        dc_init_attr: DcInitAttr {
            dc_type,
            dct_access_key: key,
            ..DcInitAttr::default()
        },
        ..DvQpInitAttr::default()
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
    let mut dct = pd
        .create_qp_dv(
            &QpInitAttr {
                srq: Some(&srq),
                ..QpInitAttr::new(QpType::Driver, &cq, &cq, cap)
            },
            &dc(DcType::Dct, key),
        )
        .map_err(|e| format!("Couldn't create DCT: {e}"))?
        .into_dct()
        .ok_or("not a DCT")?;
    // The DCT: INIT with its rights and port, RTR with its path (Linux mlx5_ib_modify_dct).
    let path = AhAttr {
        port_num: o.ib_port,
        sl: o.sl,
        ..AhAttr::default()
    };
    dct.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: AccessFlags::LOCAL_WRITE,
            port_num: o.ib_port,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT,
    )
    .map_err(|e| format!("Failed to modify DCT to INIT: {e}"))?;
    dct.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: mtu,
            min_rnr_timer: 12,
            ah_attr: path,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::MIN_RNR_TIMER | QpAttrMask::AV | QpAttrMask::PATH_MTU,
    )
    .map_err(|e| format!("Failed to modify DCT to RTR: {e}"))?;
    // The DCI: INIT, RTR, RTS (no remote QP: each request names its target).
    dci.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: o.ib_port,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT,
    )
    .and_then(|()| {
        dci.modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                path_mtu: mtu,
                ah_attr: path,
                ..QpAttr::default()
            },
            QpAttrMask::STATE | QpAttrMask::PATH_MTU | QpAttrMask::AV,
        )
    })
    .and_then(|()| {
        dci.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 1,
                ..QpAttr::default()
            },
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        )
    })
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

fn report(r: Result<String, String>) -> ExitCode {
    match r {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{PROG}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match pingpong::parse(PROG, &args) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return if args.iter().any(|a| a == "-h" || a == "--help") {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    if let Some(bdf) = &o.pci {
        return report(
            VfioHal::open(bdf)
                .map_err(|e| e.to_string())
                .and_then(|hal| run_side(hal, &o)),
        );
    }
    // No device given: both sides in this process, on two model HCAs joined by a fabric.
    let fabric = Fabric::new();
    let server_opts = Opts {
        server: None,
        ..o.clone()
    };
    let f1 = fabric.clone();
    let server = std::thread::spawn(move || {
        let cfg = ModelConfig {
            base_lid: 1,
            node_guid: 0x10,
            ..ModelConfig::default()
        };
        run_side(SimHal::on_fabric(cfg, Drive::Background, &f1), &server_opts)
    });
    let cfg = ModelConfig {
        base_lid: 17,
        node_guid: 0x20,
        ..ModelConfig::default()
    };
    let client_opts = Opts {
        server: Some("127.0.0.1".into()),
        ..o
    };
    let client = run_side(
        SimHal::on_fabric(cfg, Drive::Background, &fabric),
        &client_opts,
    );
    let server = server
        .join()
        .unwrap_or_else(|_| Err("server thread panicked".into()));
    match (server, client) {
        (Ok(_), c) => report(c),
        (Err(e), _) => report(Err(e)),
    }
}
