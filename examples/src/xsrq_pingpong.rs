//! `xsrq_pingpong`: XRC ping-pong with the command line and exchange of rdma-core 56's
//! `ibv_xsrq_pingpong` (libibverbs/examples/xsrq_pingpong.c): per client an XRC receive QP
//! (target) and an XRC send QP (initiator), one XRC SRQ per side that every message lands in,
//! the `LID:RECV QPN:SEND QPN:PSN:SRQN:GID` message and the `END` termination handshake.
//! Without `--pci`, the server and its clients run in this process on two model HCAs (the
//! clients on the second HCA, sharing one XRC domain as rdma-core's clients on one host share
//! it through `/tmp/xrc_domain`).

#[allow(dead_code)]
mod pingpong;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};
use bareverbs_vfio::VfioHal;

const PROG: &str = "xsrq_pingpong";

/// Options, named as rdma-core's.
#[derive(Clone, Debug)]
struct Opts {
    port: u16,
    ib_port: u8,
    size: usize,
    mtu: u32,
    clients: usize,
    num_tests: u32,
    sl: u8,
    /// Sleep on completion events (a completion channel) instead of spinning.
    events: bool,
    server: Option<String>,
    pci: Option<String>,
}

fn usage() -> String {
    format!(
        "Usage:\n\
         \x20 {PROG}            start a server and wait for connection\n\
         \x20 {PROG} <host>     connect to server at <host>\n\
         \n\
         Options:\n\
         \x20 -p, --port=<port>      listen on/connect to port <port> (default 18515)\n\
         \x20 -d, --ib-dev=<dev>     accepted; the device is the model or --pci's\n\
         \x20 -i, --ib-port=<port>   use port <port> of IB device (default 1)\n\
         \x20 -s, --size=<size>      size of message to exchange (default 4096)\n\
         \x20 -m, --mtu=<size>       path MTU (default 1024)\n\
         \x20 -c, --clients=<n>      number of clients (on server only, default 1)\n\
         \x20 -n, --num_tests=<n>    number of tests per client (default 5)\n\
         \x20 -l, --sl=<sl>          service level value\n\
         \x20 -e, --events           sleep on CQ events (default poll)\n\
         \x20 -o, --odp              not supported (no on-demand paging): refused\n\
         \x20 -g, --gid-idx=<idx>    accepted; no GID is sent (LID routing)\n\
         \x20     --pci=<BDF>        drive this device through VFIO (else: server and clients\n\
         \x20                        in this process on two model HCAs)"
    )
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        port: 18515,
        ib_port: 1,
        size: 4096,
        mtu: 1024,
        clients: 1,
        num_tests: 5,
        sl: 0,
        events: false,
        server: None,
        pci: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = pingpong::cli::split_option(a);
        let mut val = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value\n{}", usage()))
        };
        // strtol(optarg, NULL, 0): decimal, 0x hex or 0 octal.
        let num = |v: String, name: &str| {
            let r = if let Some(h) = v.strip_prefix("0x") {
                u64::from_str_radix(h, 16)
            } else if v.len() > 1 && v.starts_with('0') {
                u64::from_str_radix(&v[1..], 8)
            } else {
                v.parse::<u64>()
            };
            r.map_err(|_| format!("bad {name}: {v}\n{}", usage()))
        };
        match key.as_str() {
            "-p" | "--port" => {
                let p = num(val("port")?, "port")?;
                o.port = u16::try_from(p).map_err(|_| usage())?;
            }
            "-d" | "--ib-dev" => {
                val("ib-dev")?;
            }
            "-i" | "--ib-port" => o.ib_port = num(val("ib-port")?, "ib-port")? as u8,
            "-s" | "--size" => o.size = num(val("size")?, "size")? as usize,
            "-m" | "--mtu" => o.mtu = num(val("mtu")?, "mtu")? as u32,
            "-c" | "--clients" => o.clients = num(val("clients")?, "clients")? as usize,
            "-n" | "--num_tests" => o.num_tests = num(val("num_tests")?, "num_tests")? as u32,
            "-l" | "--sl" => o.sl = num(val("sl")?, "sl")? as u8,
            "-g" | "--gid-idx" => {
                val("gid-idx")?;
            }
            "-e" | "--events" => o.events = true,
            "-o" | "--odp" => {
                return Err(format!(
                    "--odp: on-demand paging is not supported\n{}",
                    usage()
                ))
            }
            "--pci" => o.pci = Some(val("pci")?),
            "-h" | "--help" => return Err(usage()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{}", usage())),
            s if o.server.is_none() => o.server = Some(s.to_string()),
            _ => return Err(usage()),
        }
    }
    // A client talks to one server (rdma-core sets num_clients to 1 with a server name).
    if o.server.is_some() {
        o.clients = 1;
    }
    if o.size == 0 || o.num_tests == 0 || o.clients == 0 {
        return Err(format!(
            "size, clients and num_tests must be positive\n{}",
            usage()
        ));
    }
    Ok(o)
}

/// One side's address as exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dest {
    lid: u16,
    recv_qpn: u32,
    send_qpn: u32,
    psn: u32,
    srqn: u32,
}

/// rdma-core's `MSG_FORMAT` `%04x:%06x:%06x:%06x:%06x:%32s` in `MSG_SIZE` (66) bytes, NUL
/// included; the GID as 32 hex digits (none here: zeros).
const MSG_SIZE: usize = 66;
/// `TERMINATION_MSG` "END" with its NUL (`TERMINATION_MSG_SIZE`).
const END: &[u8; 4] = b"END\0";

fn dest_message(d: Dest) -> [u8; MSG_SIZE] {
    let text = format!(
        "{:04x}:{:06x}:{:06x}:{:06x}:{:06x}:{}",
        d.lid,
        d.recv_qpn,
        d.send_qpn,
        d.psn,
        d.srqn,
        "0".repeat(32)
    );
    let mut m = [0u8; MSG_SIZE];
    m[..text.len()].copy_from_slice(text.as_bytes());
    m
}

fn parse_dest(m: &[u8]) -> Result<Dest, String> {
    let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
    let line = String::from_utf8_lossy(&m[..end]).into_owned();
    let f: Vec<&str> = line.split(':').collect();
    let hex = |i: usize| {
        f.get(i)
            .and_then(|x| u32::from_str_radix(x, 16).ok())
            .ok_or_else(|| format!("bad remote address {line:?}"))
    };
    Ok(Dest {
        lid: hex(0)? as u16,
        recv_qpn: hex(1)?,
        send_qpn: hex(2)?,
        psn: hex(3)?,
        srqn: hex(4)?,
    })
}

fn print_dest(who: &str, d: Dest) {
    println!(
        "{who:>8}: LID {:04x}, QPN RECV {:06x} SEND {:06x}, PSN {:06x}, SRQN {:06x}, GID ::",
        d.lid, d.recv_qpn, d.send_qpn, d.psn, d.srqn
    );
}

fn send_dest(s: &mut TcpStream, d: Dest) -> Result<(), String> {
    print_dest("local", d);
    s.write_all(&dest_message(d))
        .map_err(|e| format!("Couldn't send local address: {e}"))
}

fn recv_dest(s: &mut TcpStream) -> Result<Dest, String> {
    let mut m = [0u8; MSG_SIZE];
    s.read_exact(&mut m)
        .map_err(|e| format!("Couldn't read remote address: {e}"))?;
    let d = parse_dest(&m)?;
    print_dest("remote", d);
    Ok(d)
}

/// What the sides share when several clients run on one HCA (one XRC domain, as rdma-core's
/// clients share theirs through `/tmp/xrc_domain`).
struct Host<'a, 'd, H: Hal> {
    dev: &'a Device<H>,
    xrcd: &'a Xrcd<'d, H>,
}

/// Runs one side: the server (with `o.clients` clients) or a client.
fn run_side<H: Hal>(host: Host<'_, '_, H>, o: &Opts) -> Result<(), String> {
    let Host { dev, xrcd } = host;
    let mtu = pingpong::mtu(o.mtu)?;
    let e = |what: &str| {
        let what = what.to_string();
        move |err: bareverbs::Error| format!("{what}: {err}")
    };
    let n = o.clients;
    let pd = dev.alloc_pd().map_err(e("Couldn't allocate PD"))?;
    let mr = pd
        .reg_mr(
            dev.hal()
                .dma_alloc(o.size, 4096)
                .map_err(|err| err.to_string())?
                .share(),
            AccessFlags::LOCAL_WRITE,
        )
        .map_err(|(err, _)| format!("Couldn't register MR: {err}"))?;
    // -e: both CQs on one completion channel, armed before use (pp_init_ctx).
    let channel = if o.events {
        Some(
            dev.create_comp_channel()
                .map_err(e("Couldn't create completion channel"))?,
        )
    } else {
        None
    };
    let mut cq_attr = CqInitAttr::new(n as u32);
    cq_attr.channel = channel.as_ref();
    let mut recv_cq = dev
        .create_cq_with(&cq_attr)
        .map_err(e("Couldn't create recv CQ"))?;
    let mut send_cq = dev
        .create_cq_with(&cq_attr)
        .map_err(e("Couldn't create send CQ"))?;
    let mut events = channel
        .as_ref()
        .map(|channel| pingpong::Events::new(dev, channel));
    if events.is_some() {
        recv_cq
            .req_notify(false)
            .map_err(e("Couldn't request CQ notification"))?;
        send_cq
            .req_notify(false)
            .map_err(e("Couldn't request CQ notification"))?;
    }
    let srq = xrcd
        .create_xrc_srq(
            &pd,
            &recv_cq,
            SrqAttr {
                max_wr: n as u32,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .map_err(e("Couldn't create SRQ"))?;
    // create_qps: per client a receive (target) QP and a send (initiator) QP, both to INIT.
    let mut recv_qp = Vec::new();
    let mut send_qp = Vec::new();
    for i in 0..n {
        let mut r = xrcd
            .create_tgt_qp()
            .map_err(e(&format!("Couldn't create recv QP[{i}]")))?;
        r.to_init(
            o.ib_port,
            0,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            0,
        )
        .map_err(e(&format!("Failed to modify recv QP[{i}] to INIT")))?;
        let cap = QpCap {
            max_send_wr: (n as u32) * o.num_tests,
            max_send_sge: 1,
            ..QpCap::default()
        };
        let mut s = pd
            .create_qp(&QpInitAttr::new(QpType::XrcIni, &send_cq, &send_cq, cap))
            .map_err(e(&format!("Couldn't create send QP[{i}]")))?;
        s.to_init(o.ib_port, 0, AccessFlags::empty(), 0)
            .map_err(e(&format!("Failed to modify send QP[{i}] to INIT")))?;
        recv_qp.push(r);
        send_qp.push(s);
    }
    let rx = Sge {
        addr: mr.addr(),
        length: o.size as u32,
        lkey: mr.lkey(),
    };
    let recv = RecvWr {
        wr_id: 0,
        sg_list: std::slice::from_ref(&rx),
    };
    for _ in 0..n {
        srq.post_recv(std::slice::from_ref(&recv))
            .map_err(|err| format!("Failed to post receive to SRQ: {err}"))?;
    }
    let lid = dev
        .query_port(o.ib_port)
        .map_err(e("Failed to get port info"))?
        .lid;
    let mut rem: Vec<Dest> = Vec::new();
    let mut socks: Vec<TcpStream> = Vec::new();
    let qpns: Vec<(u32, u32)> = (0..n)
        .map(|i| (recv_qp[i].qpn().raw(), send_qp[i].qpn().raw()))
        .collect();
    let local = |i: usize, rq: u32, sq: u32| {
        let psn = (sq.wrapping_mul(2_654_435_761) ^ (i as u32)) & 0xff_ffff;
        Dest {
            lid,
            recv_qpn: rq,
            send_qpn: sq,
            psn,
            srqn: srq.srq_num(),
        }
    };
    // connect_qps, as rdma-core's: the receive QP to RTR and RTS, the send QP to RTR and RTS.
    let mut connect_qps = |i: usize, me: Dest, r: Dest| -> Result<(), String> {
        let av = AhAttr {
            dlid: r.lid,
            sl: o.sl,
            port_num: o.ib_port,
            ..AhAttr::default()
        };
        let mut rtr = QpAttr::default();
        rtr.qp_state = QpState::Rtr;
        rtr.dest_qp_num = r.send_qpn;
        rtr.path_mtu = mtu;
        rtr.rq_psn = r.psn;
        rtr.min_rnr_timer = 12;
        rtr.ah_attr = av;
        let m = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN;
        recv_qp[i]
            .modify(
                &rtr,
                m | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER,
            )
            .map_err(e(&format!("Failed to modify recv QP[{i}] to RTR")))?;
        let mut rts = QpAttr::default();
        rts.qp_state = QpState::Rts;
        rts.timeout = 14;
        rts.sq_psn = me.psn;
        recv_qp[i]
            .modify(
                &rts,
                QpAttrMask::STATE | QpAttrMask::TIMEOUT | QpAttrMask::SQ_PSN,
            )
            .map_err(e(&format!("Failed to modify recv QP[{i}] to RTS")))?;
        rtr.dest_qp_num = r.recv_qpn;
        send_qp[i]
            .modify(&rtr, m)
            .map_err(e(&format!("Failed to modify send QP[{i}] to RTR")))?;
        rts.retry_cnt = 7;
        rts.rnr_retry = 7;
        send_qp[i]
            .modify(
                &rts,
                QpAttrMask::STATE
                    | QpAttrMask::TIMEOUT
                    | QpAttrMask::SQ_PSN
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::MAX_QP_RD_ATOMIC,
            )
            .map_err(e(&format!("Failed to modify send QP[{i}] to RTS")))
    };
    if let Some(host) = &o.server {
        // pp_client_connect: send, receive, connect (retrying while the server starts).
        let mut s = pingpong::cli::connect_retrying(host, o.port)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .map_err(|err| err.to_string())?;
        let me = local(0, qpns[0].0, qpns[0].1);
        send_dest(&mut s, me)?;
        let r = recv_dest(&mut s)?;
        connect_qps(0, me, r)?;
        rem.push(r);
        socks.push(s);
    } else {
        // pp_server_connect: per client accept, receive, send, connect.
        let l = TcpListener::bind(("0.0.0.0", o.port))
            .map_err(|err| format!("Couldn't listen to port {}: {err}", o.port))?;
        for (i, &(rq, sq)) in qpns.iter().enumerate() {
            let (mut s, _) = l
                .accept()
                .map_err(|err| format!("accept() failed for client {i}: {err}"))?;
            s.set_read_timeout(Some(Duration::from_secs(20)))
                .map_err(|err| err.to_string())?;
            let r = recv_dest(&mut s)?;
            let me = local(i, rq, sq);
            send_dest(&mut s, me)?;
            connect_qps(i, me, r)?;
            rem.push(r);
            socks.push(s);
        }
    }
    let tx = Sge {
        addr: mr.addr(),
        length: o.size as u32,
        lkey: mr.lkey(),
    };
    let mut pp_cnt = vec![0u32; n];
    // pp_post_send: round robin over the send QPs, naming client `index`'s SRQ; only the
    // last send to a client is signaled.
    let mut post_send = |index: usize, pp_cnt: &mut Vec<u32>| -> Result<(), String> {
        let qpi = (index + pp_cnt[index] as usize) % n;
        pp_cnt[index] += 1;
        let flags = if pp_cnt[index] >= o.num_tests {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let wr = SendWr {
            wr_id: index as u64,
            sg_list: std::slice::from_ref(&tx),
            inline_data: &[],
            op: SendOp::Send,
            flags,
            ud: None,
        };
        send_qp[qpi]
            .post_send_xrc(rem[index].srqn, &[wr])
            .map_err(|err| format!("Couldn't post send: {err}"))
    };
    if o.server.is_none() {
        for i in 0..n {
            post_send(i, &mut pp_cnt)?;
        }
    }
    let total = n * o.num_tests as usize;
    let mut cnt = 0;
    while cnt < total {
        let wc = pingpong::wait(&mut recv_cq, events.as_mut())
            .map_err(|err| format!("Work completion error: {err}"))?;
        srq.post_recv(std::slice::from_ref(&recv))
            .map_err(|err| format!("Failed to post receive to SRQ: {err}"))?;
        // find_qp: a client's messages may come through another client's receive QP of the
        // shared domain; it has one server, index 0.
        let qpi = if n == 1 {
            0
        } else {
            qpns.iter()
                .position(|&(rq, _)| rq == wc.qp_num)
                .ok_or_else(|| format!("Unable to find qp {:x}", wc.qp_num))?
        };
        if pp_cnt[qpi] < o.num_tests {
            post_send(qpi, &mut pp_cnt)?;
        }
        cnt += 1;
    }
    for _ in 0..n {
        pingpong::wait(&mut send_cq, events.as_mut())?;
    }
    if let Some(ev) = events.as_mut() {
        ev.ack_all(&mut [&mut recv_cq, &mut send_cq])?;
    }
    // The termination handshake: the client sends END and waits for the server's; the server
    // reads every client's END, then answers each.
    let end = |s: &mut TcpStream| -> Result<(), String> {
        let mut m = [0u8; 4];
        s.read_exact(&mut m)
            .map_err(|err| format!("Couldn't read remote termination ack: {err}"))?;
        if &m != END {
            return Err("Invalid termination ack was accepted".into());
        }
        Ok(())
    };
    let ack = |s: &mut TcpStream| {
        s.write_all(END)
            .map_err(|err| format!("Couldn't send termination ack: {err}"))
    };
    if o.server.is_some() {
        ack(&mut socks[0])?;
        end(&mut socks[0])?;
    } else {
        for s in &mut socks {
            end(s)?;
        }
        for s in &mut socks {
            ack(s)?;
        }
    }
    // pp_close_ctx's order: the QPs, then the SRQ (the domain is the caller's).
    drop(send_qp);
    drop(recv_qp);
    srq.destroy().map_err(e("Couldn't destroy SRQ"))?;
    Ok(())
}

fn run_device<H: Hal>(hal: H, o: &Opts) -> Result<(), String> {
    let dev =
        Device::bring_up(hal, Config::default()).map_err(|e| format!("bring-up failed at {e}"))?;
    let xrcd = dev
        .alloc_xrcd()
        .map_err(|e| format!("Couldn't Open the XRC Domain: {e}"))?;
    run_side(
        Host {
            dev: &dev,
            xrcd: &xrcd,
        },
        o,
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return if args.iter().any(|a| a == "-h" || a == "--help") {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    };
    let result = if let Some(bdf) = &o.pci {
        VfioHal::open(bdf)
            .map_err(|e| e.to_string())
            .and_then(|hal| run_device(hal, &o))
    } else {
        in_process(&o)
    };
    match result {
        Ok(()) => {
            println!("success");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{PROG}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The server on one model HCA, its `-c` clients on another, joined by a fabric.
fn in_process(o: &Opts) -> Result<(), String> {
    let fabric = Fabric::new();
    let server_opts = Opts {
        server: None,
        ..o.clone()
    };
    let f1 = fabric.clone();
    let server = std::thread::spawn(move || {
        let hal = SimHal::on_fabric(
            ModelConfig {
                base_lid: 1,
                node_guid: 0x10,
                ..ModelConfig::default()
            },
            Drive::Background,
            &f1,
        );
        run_device(&hal, &server_opts)
    });
    let hal = SimHal::on_fabric(
        ModelConfig {
            base_lid: 17,
            node_guid: 0x20,
            ..ModelConfig::default()
        },
        Drive::Background,
        &fabric,
    );
    let clients = (|| {
        let dev = Device::bring_up(&hal, Config::default())
            .map_err(|e| format!("bring-up failed at {e}"))?;
        let xrcd = dev
            .alloc_xrcd()
            .map_err(|e| format!("Couldn't Open the XRC Domain: {e}"))?;
        let client_opts = Opts {
            server: Some("127.0.0.1".into()),
            clients: 1,
            ..o.clone()
        };
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..o.clients)
                .map(|_| {
                    s.spawn(|| {
                        run_side(
                            Host {
                                dev: &dev,
                                xrcd: &xrcd,
                            },
                            &client_opts,
                        )
                    })
                })
                .collect();
            runs.into_iter()
                .map(|r| r.join().unwrap_or_else(|_| Err("client panicked".into())))
                .collect::<Result<Vec<()>, String>>()
        })
        .map(|_| ())
    })();
    let server = server
        .join()
        .unwrap_or_else(|_| Err("server thread panicked".into()));
    match (server, clients) {
        (Ok(()), Ok(())) => Ok(()),
        (s, c) => Err([s.err(), c.err()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_message_is_rdma_cores_66_bytes() {
        // xsrq_pingpong.c MSG_FORMAT "%04x:%06x:%06x:%06x:%06x:%32s", MSG_SIZE 66.
        let d = Dest {
            lid: 0x11,
            recv_qpn: 0x123,
            send_qpn: 0x456,
            psn: 0xabcdef,
            srqn: 0x77,
        };
        let m = dest_message(d);
        assert_eq!(m.len(), 66);
        assert_eq!(&m[..33], b"0011:000123:000456:abcdef:000077:");
        assert_eq!(&m[33..65], "0".repeat(32).as_bytes());
        assert_eq!(m[65], 0);
        assert_eq!(parse_dest(&m), Ok(d));
    }

    #[test]
    fn options_parse_as_rdma_cores() {
        let a = |v: &[&str]| parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let o = a(&["-s", "64", "-n10", "--clients=3", "-p", "0x4e20"]).unwrap();
        assert_eq!((o.size, o.num_tests, o.clients, o.port), (64, 10, 3, 20000));
        // A client has one server.
        assert_eq!(a(&["-c", "3", "host"]).unwrap().clients, 1);
        assert!(a(&["-e"]).unwrap().events);
        assert!(a(&["-o"]).is_err());
        assert!(a(&["-q"]).is_err());
    }
}
