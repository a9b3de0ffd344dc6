//! `umr_interleaved`: builds an interleaved indirect key with a UMR work request
//! (`mlx5dv_wr_mr_interleaved`, seed 004's `MLX5DV_QP_EX_WITH_MR_INTERLEAVED`) and RDMA-writes
//! through it. The key interleaves two regions — each round takes `-a` bytes of a "header"
//! region and `-b` bytes of a "data" region, each then skipping ahead to its next slot — so
//! one contiguous RDMA WRITE of `-r` rounds lands split into both, as a storage target puts
//! metadata and blocks apart. Every byte is checked where the layout says it goes, then read
//! back through the key.
//!
//! Usage: `umr_interleaved [--pci BDF] [-r ROUNDS] [-a HEADER_BYTES] [-b DATA_BYTES]`
//! (defaults 64 rounds of 8 + 512 bytes). Without `--pci`, on a model HCA in this process.

use std::process::ExitCode;

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;
use bareverbs_vfio::VfioHal;

struct Opts {
    pci: Option<String>,
    rounds: u32,
    header: u32,
    data: u32,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        pci: None,
        rounds: 64,
        header: 8,
        data: 512,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<u32, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match a.as_str() {
            "--pci" => o.pci = Some(args.next().ok_or("--pci needs a BDF")?),
            "-r" => o.rounds = num("-r")?,
            "-a" => o.header = num("-a")?,
            "-b" => o.data = num("-b")?,
            _ => return Err(
                "usage: umr_interleaved [--pci BDF] [-r ROUNDS] [-a HEADER_BYTES] [-b DATA_BYTES]"
                    .into(),
            ),
        }
    }
    if o.rounds == 0 || o.header == 0 || o.data == 0 || o.header > 0xffff || o.data > 0xffff {
        return Err("rounds and piece sizes must be 1 to 65535".into());
    }
    Ok(o)
}

fn run<H: Hal>(hal: H, o: &Opts) -> Result<String, String> {
    let dev = Device::bring_up(hal, Config::default()).map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 60,
    };
    let init = QpInitAttr::new(QpType::Rc, &cq, &cq, cap);
    // The QP that lays the key out needs the send operation; the other side is plain.
    let mut umr_ops = DvQpInitAttr::default();
    umr_ops.comp_mask = DvQpInitAttrMask::SEND_OPS_FLAGS;
    umr_ops.send_ops_flags = DvSendOpsFlags::MR_INTERLEAVED;
    let mut umr_qp = pd
        .create_qp_dv(&init, &umr_ops)
        .map_err(|e| e.to_string())?
        .into_qp()
        .ok_or("not a QP")?;
    let mut peer = pd.create_qp(&init).map_err(|e| e.to_string())?;
    let port = dev.query_port(1).map_err(|e| e.to_string())?;
    let (un, pn) = (umr_qp.qpn().raw(), peer.qpn().raw());
    for (q, remote) in [(&mut umr_qp, pn), (&mut peer, un)] {
        let path = AhAttr {
            dlid: port.lid,
            port_num: 1,
            ..AhAttr::default()
        };
        q.to_init(1, 0, all, 0)
            .and_then(|()| q.to_rtr(remote, 0, path, Mtu::Mtu1024))
            .and_then(|()| q.to_rts(0))
            .map_err(|e| format!("connecting: {e}"))?;
    }
    let (h, d, r) = (o.header as usize, o.data as usize, o.rounds as usize);
    // Each region keeps a gap after every slot: the header slots are 2h apart, the data
    // slots d + 64.
    let (h_stride, d_stride) = (2 * h, d + 64);
    let region = |len: usize| {
        let buf = dev
            .hal()
            .dma_alloc(len, 4096)
            .map_err(|e| e.to_string())?
            .share();
        pd.reg_mr(buf, all).map_err(|(e, _)| e.to_string())
    };
    let headers = region(h_stride * r)?;
    let blocks = region(d_stride * r)?;
    let total = (h + d) * r;
    let src = region(2 * total)?;
    let key = pd
        .create_mkey(&MkeyInitAttr::new(MkeyInitFlags::INDIRECT, 2))
        .map_err(|e| e.to_string())?;
    let entries = [
        MrInterleaved {
            addr: headers.addr(),
            bytes_count: o.header,
            bytes_skip: o.header,
            lkey: headers.lkey(),
        },
        MrInterleaved {
            addr: blocks.addr(),
            bytes_count: o.data,
            bytes_skip: 64,
            lkey: blocks.lkey(),
        },
    ];
    umr_qp
        .send_batch(|b| b.mr_interleaved(1, SendFlags::SIGNALED, &key, all, o.rounds, &entries))
        .and_then(|r| r)
        .map_err(|e| format!("mr_interleaved: {e}"))?;
    let wait = |cq: &mut Cq<'_, H>, what: &str| -> Result<Wc, String> {
        let mut wc = [Wc::EMPTY; 1];
        for _ in 0..1_000_000 {
            if cq.poll(&mut wc) == 1 {
                return if wc[0].status == WcStatus::Success {
                    Ok(wc[0])
                } else {
                    Err(format!("{what}: {}", wc[0].status))
                };
            }
            dev.hal().relax();
        }
        Err(format!("{what}: no completion"))
    };
    wait(&mut cq, "the UMR")?;
    let pattern: Vec<u8> = (0..total).map(|i| (i * 13 + i / 251) as u8).collect();
    src.buf()
        .write_bytes(0, &pattern)
        .map_err(|e| e.to_string())?;
    let write = SendWr {
        wr_id: 2,
        sg_list: &[Sge {
            addr: src.addr(),
            length: total as u32,
            lkey: src.lkey(),
        }],
        inline_data: &[],
        op: SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: key.rkey(),
        },
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    peer.post_send(&[write]).map_err(|e| e.to_string())?;
    wait(&mut cq, "the RDMA WRITE through the key")?;
    let mut got = vec![0u8; h.max(d)];
    for round in 0..r {
        let at = round * (h + d);
        headers
            .buf()
            .read_bytes(round * h_stride, &mut got[..h])
            .map_err(|e| e.to_string())?;
        if got[..h] != pattern[at..at + h] {
            return Err(format!("round {round}: header bytes differ"));
        }
        blocks
            .buf()
            .read_bytes(round * d_stride, &mut got[..d])
            .map_err(|e| e.to_string())?;
        if got[..d] != pattern[at + h..at + h + d] {
            return Err(format!("round {round}: data bytes differ"));
        }
    }
    // And back: an RDMA READ through the key gathers the same bytes in order.
    let read = SendWr {
        wr_id: 3,
        sg_list: &[Sge {
            addr: src.addr() + total as u64,
            length: total as u32,
            lkey: src.lkey(),
        }],
        op: SendOp::RdmaRead {
            remote_addr: 0,
            rkey: key.rkey(),
        },
        ..write
    };
    peer.post_send(&[read]).map_err(|e| e.to_string())?;
    wait(&mut cq, "the RDMA READ through the key")?;
    let mut back = vec![0u8; total];
    src.buf()
        .read_bytes(total, &mut back)
        .map_err(|e| e.to_string())?;
    if back != pattern {
        return Err("the READ through the key brought other bytes".into());
    }
    Ok(format!(
        "{total} bytes written through an interleaved key: {r} rounds of {h} header bytes \
         (stride {h_stride}) and {d} data bytes (stride {d_stride}), every byte where the \
         layout puts it, and read back in order"
    ))
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let r = match &o.pci {
        Some(bdf) => VfioHal::open(bdf)
            .map_err(|e| e.to_string())
            .and_then(|hal| run(hal, &o)),
        None => run(SimHal::synchronous(), &o),
    };
    match r {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("umr_interleaved: {e}");
            ExitCode::FAILURE
        }
    }
}
