//! `mcast`: a UD sender and receivers in one multicast group across two HCAs: the receivers
//! attach (`ibv_attach_mcast`), the sender sends `-n` datagrams to the group's LID and GID,
//! every receiver checks each payload, then detaches. Without `--pci`, the two HCAs are model
//! HCAs in this process (each model on its own thread) joined by a fabric; with `--pci A
//! --pci B`, two devices driven through VFIO (in the guest rig: two model HCAs on one fabric).
//! Usage: `mcast [-n iters] [-s size] [-r receivers per HCA] [--pci BDF --pci BDF]`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};
use bareverbs_vfio::VfioHal;

const QKEY: u32 = 0x1111_1111;
const MLID: u16 = 0xc001;
const MGID: [u8; 16] = [0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// The IB multicast QPN a datagram to a group names.
const MCAST_QPN: u32 = 0xff_ffff;

struct Opts {
    iters: u32,
    size: usize,
    receivers: usize,
    /// Two devices to drive through VFIO (else: two model HCAs in this process).
    pci: Vec<String>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        iters: 100,
        size: 256,
        receivers: 2,
        pci: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match a.as_str() {
            "-n" => o.iters = num("-n")? as u32,
            "-s" => o.size = num("-s")? as usize,
            "-r" => o.receivers = num("-r")? as usize,
            "--pci" => o.pci.push(it.next().ok_or("--pci needs a BDF")?.clone()),
            _ => {
                return Err(format!(
                    "usage: mcast [-n iters] [-s size] [-r receivers] [--pci BDF --pci BDF]; \
                     got {a}"
                ))
            }
        }
    }
    if o.iters == 0 || o.size == 0 || o.size > 1024 || o.receivers == 0 || o.receivers > 8 {
        return Err("need -n > 0, 0 < -s <= 1024 (one MTU), 0 < -r <= 8".into());
    }
    if !matches!(o.pci.len(), 0 | 2) {
        return Err("--pci names both devices, or neither".into());
    }
    Ok(o)
}

/// Two model HCAs in this process on one fabric.
fn in_process(o: &Opts) -> Result<String, String> {
    let fabric = Fabric::new();
    let cfg = |lid, guid| ModelConfig {
        base_lid: lid,
        node_guid: guid,
        ..ModelConfig::default()
    };
    run(
        [
            SimHal::on_fabric(cfg(1, 0x10), Drive::Background, &fabric),
            SimHal::on_fabric(cfg(17, 0x20), Drive::Background, &fabric),
        ],
        o,
    )
}

/// Sender and receivers on `hals[0]`, receivers on `hals[1]`.
fn run<H: Hal>(hals: [H; 2], o: &Opts) -> Result<String, String> {
    let e = |e: bareverbs::Error| e.to_string();
    let devs = [
        Device::bring_up(&hals[0], Config::default()).map_err(|e| e.to_string())?,
        Device::bring_up(&hals[1], Config::default()).map_err(|e| e.to_string())?,
    ];
    let pds = [
        devs[0].alloc_pd().map_err(e)?,
        devs[1].alloc_pd().map_err(e)?,
    ];
    let depth = o.iters.min(64);
    let mut cqs = [
        devs[0].create_cq(depth * 8 + 8).map_err(e)?,
        devs[1].create_cq(depth * 8 + 8).map_err(e)?,
    ];
    let cap = QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let slot = 40 + o.size;
    let mut sender = pds[0]
        .create_qp(&QpInitAttr::new(QpType::Ud, &cqs[0], &cqs[0], cap))
        .map_err(e)?;
    // Receivers on both HCAs: (HCA index, QP, its receive region).
    let mut rx = Vec::new();
    for h in 0..2 {
        for _ in 0..o.receivers {
            let qp = pds[h]
                .create_qp(&QpInitAttr::new(QpType::Ud, &cqs[h], &cqs[h], cap))
                .map_err(e)?;
            let buf = hals[h]
                .dma_alloc(slot * depth as usize, 4096)
                .map_err(|e| e.to_string())?;
            let mr = pds[h]
                .reg_mr(buf.share(), AccessFlags::LOCAL_WRITE)
                .map_err(|(e, _)| e.to_string())?;
            rx.push((h, qp, mr));
        }
    }
    for q in std::iter::once(&mut sender).chain(rx.iter_mut().map(|r| &mut r.1)) {
        q.to_init(1, 0, AccessFlags::empty(), QKEY).map_err(e)?;
        q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu1024).map_err(e)?;
        q.to_rts(0).map_err(e)?;
    }
    let post = |qp: &mut Qp<'_, '_, &H>, mr: &Mr<'_, '_, &H>, i: u32| {
        let k = (i % depth) as usize;
        let sg = [Sge {
            addr: mr.addr() + (k * slot) as u64,
            length: slot as u32,
            lkey: mr.lkey(),
        }];
        qp.post_recv(&[RecvWr {
            wr_id: u64::from(i),
            sg_list: &sg,
        }])
        .map_err(|e| format!("receive {i}: {e}"))
    };
    for (_, qp, mr) in rx.iter_mut() {
        qp.attach_mcast(&MGID, MLID).map_err(e)?;
        for i in 0..depth {
            post(qp, mr, i)?;
        }
    }
    let ah = pds[0]
        .create_ah(AhAttr {
            dlid: MLID,
            port_num: 1,
            is_global: true,
            grh: GlobalRoute {
                dgid: MGID,
                hop_limit: 1,
                ..GlobalRoute::default()
            },
            ..AhAttr::default()
        })
        .map_err(e)?;
    let tx = pds[0]
        .reg_mr(
            hals[0]
                .dma_alloc(o.size, 4096)
                .map_err(|e| e.to_string())?
                .share(),
            AccessFlags::LOCAL_WRITE,
        )
        .map_err(|(e, _)| e.to_string())?;
    let pattern = |i: u32| -> Vec<u8> { (0..o.size).map(|k| (k as u32 ^ i) as u8).collect() };
    let start = Instant::now();
    let mut wc = vec![Wc::EMPTY; 64];
    for i in 0..o.iters {
        tx.buf()
            .write_bytes(0, &pattern(i))
            .map_err(|e| e.to_string())?;
        let sg = [Sge {
            addr: tx.addr(),
            length: o.size as u32,
            lkey: tx.lkey(),
        }];
        sender
            .post_send(&[SendWr {
                wr_id: u64::from(i),
                sg_list: &sg,
                inline_data: &[],
                op: SendOp::Send,
                flags: SendFlags::SIGNALED,
                ud: Some(ah.dest(MCAST_QPN, QKEY).unwrap()),
            }])
            .map_err(|e| e.to_string())?;
        // Wait for the send and one copy per receiver.
        let mut sent = false;
        let mut copies = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sent || copies < rx.len() {
            if Instant::now() > deadline {
                return Err(format!("datagram {i}: {copies} of {} copies", rx.len()));
            }
            for (h, cq) in cqs.iter_mut().enumerate() {
                let n = cq.poll(&mut wc);
                for w in &wc[..n] {
                    if w.status != WcStatus::Success {
                        return Err(format!("datagram {i}: {}", w.status));
                    }
                    // QP numbers are per HCA: the sender's may also be a receiver's on the
                    // other HCA.
                    if h == 0 && w.opcode == WcOpcode::Send {
                        sent = true;
                        continue;
                    }
                    let Some((_, qp, mr)) = rx
                        .iter_mut()
                        .find(|r| r.0 == h && r.1.qpn().raw() == w.qp_num)
                    else {
                        return Err(format!("completion for unknown QP {}", w.qp_num));
                    };
                    let k = (w.wr_id % u64::from(depth)) as usize;
                    let mut got = vec![0u8; o.size];
                    mr.buf()
                        .read_bytes(k * slot + 40, &mut got)
                        .map_err(|e| e.to_string())?;
                    if w.wr_id != u64::from(i) || got != pattern(i) {
                        return Err(format!("QP {}: datagram {i} corrupted", w.qp_num));
                    }
                    copies += 1;
                    post(qp, mr, i + depth)?;
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    for (_, qp, _) in rx.iter_mut() {
        qp.detach_mcast(&MGID, MLID).map_err(e)?;
    }
    Ok(format!(
        "{} datagrams of {} bytes to {} receivers on 2 HCAs, every copy checked, in {:.2} s",
        o.iters,
        o.size,
        rx.len(),
        secs
    ))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = |o: Opts| match o.pci.as_slice() {
        [a, b] => {
            let open = |bdf: &String| VfioHal::open(bdf).map_err(|e| format!("{bdf}: {e}"));
            run([open(a)?, open(b)?], &o)
        }
        _ => in_process(&o),
    };
    match parse(&args).and_then(run) {
        Ok(r) => {
            println!("{r}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("mcast: {msg}");
            ExitCode::FAILURE
        }
    }
}
