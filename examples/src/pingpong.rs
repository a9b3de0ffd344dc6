//! The ping-pong shared by `rc_pingpong`, `uc_pingpong` and `ud_pingpong`: the command line,
//! the QP information exchange over TCP (`LID:QPN:PSN:GID` as rdma-core's `ibv_*_pingpong`
//! send it) and the ping-pong loop itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::{Deadline, Hal};
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};
use bareverbs_vfio::VfioHal;

#[path = "cli.rs"]
pub mod cli;

/// Q_Key the UD ping-pong uses (rdma-core's 0x11111111).
const QKEY: u32 = 0x1111_1111;
/// How long to wait for a completion before giving up.
pub const STALL: Duration = Duration::from_secs(20);

/// Options, named as rdma-core's.
#[derive(Clone, Debug)]
pub struct Opts {
    /// TCP port for the QP exchange (`-p`).
    pub port: u16,
    /// HCA port (`-i`).
    pub ib_port: u8,
    /// Message size (`-s`).
    pub size: usize,
    /// Path MTU (`-m`).
    pub mtu: u32,
    /// Receive queue depth (`-r`).
    pub rx_depth: u32,
    /// Iterations (`-n`).
    pub iters: u32,
    /// Service level (`-l`).
    pub sl: u8,
    /// QPs sharing the SRQ (`-q`, `srq_pingpong` only).
    pub num_qp: u32,
    /// Check message contents (`-c`).
    pub check: bool,
    /// Sleep on completion events instead of spinning on the CQs (`-e`): a completion
    /// channel, `req_notify`, `get_cq_event`, `ack_cq_events`.
    pub events: bool,
    /// Server to connect to (client mode).
    pub server: Option<String>,
    /// PCI device to drive through VFIO.
    pub pci: Option<String>,
    /// Capture the model's fabric to this pcap file (in-process runs).
    pub pcap: Option<String>,
}

fn usage(prog: &str) -> String {
    format!(
        "usage: {prog} [options] [servername]\n\
         \x20 -p, --port=<port>      TCP port for the exchange (default 18515)\n\
         \x20 -i, --ib-port=<port>   HCA port (default 1)\n\
         \x20 -s, --size=<size>      message size (default 4096; ud_pingpong: the MTU)\n\
         \x20 -m, --mtu=<size>       path MTU (default 1024)\n\
         \x20 -r, --rx-depth=<dep>   receives to post (default 500)\n\
         \x20 -n, --iters=<iters>    iterations (default 1000)\n\
         \x20 -l, --sl=<sl>          service level (default 0)\n\
         \x20 -c, --chk              validate received buffers\n\
         \x20     --pci=<BDF>        drive this device through VFIO (else: both sides in this\n\
         \x20                        process on two model HCAs)"
    )
}

/// Parses rdma-core style options (`-s 64`, `-s64`, `--size=64`, `--size 64`).
pub fn parse(prog: &str, args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        port: 18515,
        ib_port: 1,
        size: 4096,
        mtu: 1024,
        rx_depth: 500,
        iters: 1000,
        sl: 0,
        num_qp: 16,
        check: false,
        events: false,
        server: None,
        pci: None,
        pcap: None,
    };
    let mut size_given = false;
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let (key, inline) = cli::split_option(a);
        let mut val = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value\n{}", usage(prog)))
        };
        let num = |v: String, name: &str| v.parse::<u64>().map_err(|_| format!("bad {name}: {v}"));
        match key.as_str() {
            "-p" | "--port" => o.port = num(val("port")?, "port")? as u16,
            "-i" | "--ib-port" => o.ib_port = num(val("ib-port")?, "ib-port")? as u8,
            "-s" | "--size" => {
                o.size = num(val("size")?, "size")? as usize;
                size_given = true;
            }
            "-m" | "--mtu" => o.mtu = num(val("mtu")?, "mtu")? as u32,
            "-r" | "--rx-depth" => o.rx_depth = num(val("rx-depth")?, "rx-depth")? as u32,
            "-n" | "--iters" => o.iters = num(val("iters")?, "iters")? as u32,
            "-l" | "--sl" => o.sl = num(val("sl")?, "sl")? as u8,
            "-q" | "--num-qp" if prog == "srq_pingpong" => {
                o.num_qp = num(val("num-qp")?, "num-qp")? as u32
            }
            "-c" | "--chk" => o.check = true,
            "-e" | "--events" => o.events = true,
            "--pci" => o.pci = Some(val("pci")?),
            "--pcap" => o.pcap = Some(val("pcap")?),
            "-h" | "--help" => return Err(usage(prog)),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{}", usage(prog))),
            s => o.server = Some(s.to_string()),
        }
    }
    if !size_given && prog == "ud_pingpong" {
        // A UD message must fit in one packet.
        o.size = o.mtu as usize;
    }
    if o.size == 0 || o.iters == 0 || o.rx_depth == 0 {
        return Err(format!(
            "size, iters and rx-depth must be positive\n{}",
            usage(prog)
        ));
    }
    Ok(o)
}

pub fn mtu(bytes: u32) -> Result<Mtu, String> {
    Ok(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return Err(format!("invalid MTU {bytes}")),
    })
}

/// One side's address, as exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
}

/// The address message as rdma-core's `pp_*_exch_dest` write it: `LID:QPN:PSN:GID` in hex
/// (`%04x:%06x:%06x:%s`, the GID as 32 hex digits) and its terminating NUL, a fixed 52 bytes
/// (`sizeof "0000:000000:000000:00000000000000000000000000000000"`). No GID is used: 32 zeros.
pub const DEST_MSG_LEN: usize = 52;
/// What the client sends once it has the server's address (`sizeof "done"`: with its NUL).
pub const DONE: &[u8; 5] = b"done\0";

pub fn dest_message(d: Dest) -> [u8; DEST_MSG_LEN] {
    let text = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        d.lid,
        d.qpn,
        d.psn,
        "0".repeat(32)
    );
    let mut msg = [0u8; DEST_MSG_LEN];
    msg[..text.len()].copy_from_slice(text.as_bytes());
    msg
}

pub fn parse_dest(msg: &[u8]) -> Result<Dest, String> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let line = String::from_utf8_lossy(&msg[..end]).into_owned();
    let f: Vec<&str> = line.split(':').collect();
    let hex = |i: usize| {
        f.get(i)
            .and_then(|x| u32::from_str_radix(x, 16).ok())
            .ok_or_else(|| format!("bad peer address {line:?}"))
    };
    Ok(Dest {
        lid: hex(0)? as u16,
        qpn: hex(1)?,
        psn: hex(2)?,
    })
}

fn send_dest(s: &mut TcpStream, d: Dest) -> Result<(), String> {
    s.write_all(&dest_message(d))
        .map_err(|e| format!("couldn't send local address: {e}"))
}

fn recv_dest(s: &mut TcpStream) -> Result<Dest, String> {
    let mut msg = [0u8; DEST_MSG_LEN];
    s.read_exact(&mut msg)
        .map_err(|e| format!("couldn't read remote address: {e}"))?;
    parse_dest(&msg)
}

/// The one TCP connection the two sides talk over: the client connects (retrying for 10 s
/// while the server starts); the server waits for it as rdma-core's does. Reads time out
/// after [`STALL`], so a peer that dies never leaves this side waiting.
pub fn connect(o: &Opts) -> Result<TcpStream, String> {
    cli::link(o.server.as_deref(), o.port, STALL)
}

/// Swaps addresses in rdma-core's order, so either side can face `ibv_*_pingpong`: the client
/// sends its address, reads the server's and answers `done`; the server reads the client's,
/// brings its QP up (`connect_qp`) before answering with its own, then waits for `done`. The
/// server's QP is thus ready to receive before the client has its address, and the client
/// brings its QP up once the exchange is over: no further synchronisation is needed.
fn exchange(
    o: &Opts,
    s: &mut TcpStream,
    local: Dest,
    connect_qp: impl FnOnce(Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    if o.server.is_some() {
        send_dest(s, local)?;
        let remote = recv_dest(s)?;
        s.write_all(DONE)
            .map_err(|e| format!("couldn't write 'done': {e}"))?;
        connect_qp(remote)?;
        Ok(remote)
    } else {
        let remote = recv_dest(s)?;
        connect_qp(remote)?;
        send_dest(s, local)?;
        let mut done = [0u8; DONE.len()];
        s.read_exact(&mut done)
            .map_err(|e| format!("couldn't read 'done': {e}"))?;
        if done != *DONE {
            return Err(format!("peer sent {done:?} instead of 'done'"));
        }
        Ok(remote)
    }
}

/// The message the client sends in iteration `i` with `--chk`: the first byte of every
/// page is 0, as rdma-core's client writes it (`buf[k] = k / page_size % sizeof(char)`) and
/// its server checks; every other byte carries the iteration, so the echo can be checked
/// byte for byte.
pub fn check_pattern(i: u32, size: usize) -> Vec<u8> {
    (0..size)
        .map(|k| {
            if k % PAGE_SIZE == 0 {
                0
            } else {
                ((i as usize + k) % 251) as u8
            }
        })
        .collect()
}

/// rdma-core's page for `--chk` (the CPU page, `sysconf(_SC_PAGESIZE)`).
pub const PAGE_SIZE: usize = 4096;

/// Completion events of a `-e` run, as rdma-core's ping-pongs count them: each event read
/// re-arms its CQ (before it is polled) and is acknowledged at the end.
pub struct Events<'a, H: Hal> {
    dev: &'a Device<H>,
    channel: &'a CompChannel<'a, H>,
    /// Events read per CQ number, acknowledged at the end.
    read: std::collections::HashMap<u32, u32>,
    /// CQs whose event arrived while another CQ was waited for: re-armed when next waited.
    rearm: std::collections::HashSet<u32>,
}

impl<'a, H: Hal> Events<'a, H> {
    /// Events of `channel`'s CQs on `dev`, none read yet.
    pub fn new(dev: &'a Device<H>, channel: &'a CompChannel<'a, H>) -> Self {
        Events {
            dev,
            channel,
            read: Default::default(),
            rearm: Default::default(),
        }
    }

    /// Acknowledges every event read on `cqs` (`ibv_ack_cq_events`), before they are destroyed.
    pub fn ack_all(&mut self, cqs: &mut [&mut Cq<'_, H>]) -> Result<(), String> {
        for cq in cqs {
            if let Some(n) = self.read.remove(&cq.cqn().raw()) {
                cq.ack_events(n).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

pub fn wait<H: Hal>(cq: &mut Cq<'_, H>, mut ev: Option<&mut Events<'_, H>>) -> Result<Wc, String> {
    let start = Instant::now();
    let mut wc = [Wc::EMPTY; 1];
    if let Some(ev) = ev.as_deref_mut() {
        if ev.rearm.remove(&cq.cqn().raw()) {
            cq.req_notify(false).map_err(|e| e.to_string())?;
        }
    }
    loop {
        if cq.poll(&mut wc) == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(format!(
                    "failed status {} for wr_id {}",
                    wc[0].status, wc[0].wr_id
                ));
            }
            return Ok(wc[0]);
        }
        if start.elapsed() > STALL {
            return Err("no completion: is the other side running?".into());
        }
        match ev.as_deref_mut() {
            Some(ev) => {
                let hal = ev.dev.hal();
                let deadline = Deadline::new(hal.now(), Duration::from_millis(100));
                if let Some(e) = ev.channel.get_cq_event_until(deadline) {
                    *ev.read.entry(e.cqn).or_default() += 1;
                    if e.cqn == cq.cqn().raw() {
                        cq.req_notify(false).map_err(|e| e.to_string())?;
                    } else {
                        ev.rearm.insert(e.cqn);
                    }
                }
            }
            None => std::hint::spin_loop(),
        }
    }
}

/// Runs one side of the ping-pong over `hal`; returns the report line.
pub fn run_side<H: Hal>(hal: H, qp_type: QpType, o: &Opts) -> Result<String, String> {
    let mtu = mtu(o.mtu)?;
    if qp_type == QpType::Ud && o.size > o.mtu as usize {
        return Err(format!(
            "message size {} is larger than the MTU {}",
            o.size, o.mtu
        ));
    }
    let dev =
        Device::bring_up(hal, Config::default()).map_err(|e| format!("bring-up failed at {e}"))?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let grh = if qp_type == QpType::Ud { 40 } else { 0 };
    let channel = if o.events {
        Some(dev.create_comp_channel().map_err(|e| e.to_string())?)
    } else {
        None
    };
    let mut cq_attr = CqInitAttr::new(o.rx_depth + 1);
    cq_attr.channel = channel.as_ref();
    let mut scq = dev.create_cq_with(&cq_attr).map_err(|e| e.to_string())?;
    let mut rcq = dev.create_cq_with(&cq_attr).map_err(|e| e.to_string())?;
    let mut events = channel.as_ref().map(|channel| Events::new(&dev, channel));
    if events.is_some() {
        scq.req_notify(false).map_err(|e| e.to_string())?;
        rcq.req_notify(false).map_err(|e| e.to_string())?;
    }
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: o.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qp_init = QpInitAttr::new(qp_type, &scq, &rcq, cap);
    qp_init.sq_sig_all = true;
    let mut qp = pd
        .create_qp(&qp_init)
        .map_err(|e| format!("couldn't create QP: {e}"))?;
    let len = o.size + grh;
    let mr = pd
        .reg_mr(
            dev.hal()
                .dma_alloc(len * 2, 4096)
                .map_err(|e| e.to_string())?
                .share(),
            AccessFlags::LOCAL_WRITE,
        )
        .map_err(|(e, _)| format!("couldn't register MR: {e}"))?;
    let port = dev.query_port(o.ib_port).map_err(|e| e.to_string())?;
    let psn = (qp.qpn().raw().wrapping_mul(2_654_435_761)) & 0xff_ffff;
    let local = Dest {
        lid: port.lid,
        qpn: qp.qpn().raw(),
        psn,
    };
    qp.to_init(o.ib_port, 0, AccessFlags::empty(), QKEY)
        .map_err(|e| e.to_string())?;
    // Receives into the second half of the buffer (the GRH area first for UD).
    let rx = Sge {
        addr: mr.addr() + len as u64,
        length: len as u32,
        lkey: mr.lkey(),
    };
    let recvs = vec![
        RecvWr {
            wr_id: 2,
            sg_list: std::slice::from_ref(&rx)
        };
        o.rx_depth as usize
    ];
    qp.post_recv(&recvs)
        .map_err(|e| format!("couldn't post receives: {e}"))?;
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID ::",
        local.lid, local.qpn, local.psn
    );
    let mut link = connect(o)?;
    let ah_to = |remote: Dest| AhAttr {
        dlid: remote.lid,
        sl: o.sl,
        port_num: o.ib_port,
        ..AhAttr::default()
    };
    let remote = exchange(o, &mut link, local, |remote| {
        qp.to_rtr(remote.qpn, remote.psn, ah_to(remote), mtu)
            .map_err(|e| format!("couldn't connect to remote QP: {e}"))?;
        qp.to_rts(psn).map_err(|e| e.to_string())
    })?;
    drop(link);
    println!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID ::",
        remote.lid, remote.qpn, remote.psn
    );
    let ah = ah_to(remote);
    let tx = Sge {
        addr: mr.addr(),
        length: o.size as u32,
        lkey: mr.lkey(),
    };
    // ibv_create_ah for a UD destination, as rdma-core's ud_pingpong.
    let ud_ah = if qp_type == QpType::Ud {
        Some(
            pd.create_ah(ah)
                .map_err(|e| format!("couldn't create AH: {e}"))?,
        )
    } else {
        None
    };
    let ud = match &ud_ah {
        Some(a) => Some(a.dest(remote.qpn, QKEY).map_err(|e| e.to_string())?),
        None => None,
    };
    let send = SendWr {
        wr_id: 1,
        sg_list: std::slice::from_ref(&tx),
        inline_data: &[],
        op: SendOp::Send,
        flags: SendFlags::SIGNALED,
        ud,
    };
    let client = o.server.is_some();
    let start = Instant::now();
    for i in 0..o.iters {
        if o.check && client {
            mr.buf()
                .write_bytes(0, &check_pattern(i, o.size))
                .map_err(|e| e.to_string())?;
        }
        if client {
            qp.post_send(&[send]).map_err(|e| e.to_string())?;
            wait(&mut scq, events.as_mut())?;
        }
        let r = wait(&mut rcq, events.as_mut())?;
        if r.byte_len as usize != o.size + grh {
            return Err(format!(
                "received {} bytes, expected {}",
                r.byte_len,
                o.size + grh
            ));
        }
        if o.check {
            let mut got = vec![0u8; o.size];
            mr.buf()
                .read_bytes(len + grh, &mut got)
                .map_err(|e| e.to_string())?;
            // The client checks its echo byte for byte; the server, whose peer may be
            // rdma-core's, checks what rdma-core's client promises (the first byte of each
            // page is 0) and echoes the message unchanged, as rdma-core's server does.
            let bad = if client {
                got != check_pattern(i, o.size)
            } else {
                got.iter().step_by(PAGE_SIZE).any(|&b| b != 0)
            };
            if bad {
                return Err(format!("iteration {i}: received data does not match"));
            }
            if !client {
                mr.buf().write_bytes(0, &got).map_err(|e| e.to_string())?;
            }
        }
        qp.post_recv(std::slice::from_ref(&recvs[0]))
            .map_err(|e| e.to_string())?;
        if !client {
            qp.post_send(&[send]).map_err(|e| e.to_string())?;
            wait(&mut scq, events.as_mut())?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if let Some(ev) = events.as_mut() {
        ev.ack_all(&mut [&mut scq, &mut rcq])?;
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

/// The whole program for one transport.
pub fn main_for(qp_type: QpType, prog: &str) -> ExitCode {
    main_with(
        prog,
        move |hal, o| run_side(hal, qp_type, o),
        move |hal, o| run_side(hal, qp_type, o),
    )
}

/// A ping-pong program's `main`: options parsed as rdma-core's; with `--pci`, `vfio` runs
/// this side over VFIO; without, `model` runs both sides in this process on two model HCAs
/// joined by a fabric (the server on a thread). Prints the client's report or each side's
/// error.
pub fn main_with(
    prog: &str,
    vfio: impl FnOnce(VfioHal, &Opts) -> Result<String, String>,
    model: impl Fn(&SimHal, &Opts) -> Result<String, String> + Copy + Send + 'static,
) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(prog, &args) {
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
    let (server, client) = match &o.pci {
        Some(bdf) => (
            Ok(String::new()),
            VfioHal::open(bdf)
                .map_err(|e| e.to_string())
                .and_then(|hal| vfio(hal, &o)),
        ),
        None => {
            // Both sides in this process, on two model HCAs joined by a fabric.
            let fabric = Fabric::new();
            if let Some(p) = &o.pcap {
                if let Err(e) = fabric.capture_to(std::path::Path::new(p)) {
                    eprintln!("{prog}: --pcap {p}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            let server_opts = Opts {
                server: None,
                ..o.clone()
            };
            let client_opts = Opts {
                server: Some("127.0.0.1".into()),
                ..o.clone()
            };
            let hca = |lid, guid, fabric: &std::sync::Arc<Fabric>| {
                let cfg = ModelConfig {
                    base_lid: lid,
                    node_guid: guid,
                    ..ModelConfig::default()
                };
                SimHal::on_fabric(cfg, Drive::Background, fabric)
            };
            let f1 = fabric.clone();
            let server = std::thread::spawn(move || model(&hca(1, 0x10, &f1), &server_opts));
            let client = model(&hca(17, 0x20, &fabric), &client_opts);
            let server = server
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            if let Some(p) = &o.pcap {
                match fabric.stop_capture() {
                    Ok(n) => eprintln!("{prog}: {n} packets captured to {p}"),
                    Err(e) => {
                        eprintln!("{prog}: --pcap {p}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            (server, client)
        }
    };
    match (server, client) {
        (Ok(_), Ok(report)) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        (s, c) => {
            for e in [s.err(), c.err()].into_iter().flatten() {
                eprintln!("{prog}: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (c, l.accept().unwrap().0)
    }

    const ME: Dest = Dest {
        lid: 1,
        qpn: 0x123,
        psn: 0xabcdef,
    };
    const PEER: Dest = Dest {
        lid: 2,
        qpn: 0x4567,
        psn: 0x10,
    };

    #[test]
    fn address_message_is_rdma_cores_fixed_52_bytes() {
        // rdma-core libibverbs/examples/rc_pingpong.c pp_client_exch_dest: sprintf of
        // "%04x:%06x:%06x:%s" into msg[sizeof "0000:000000:000000:" + 32 hex digits], all of
        // msg written (its NUL included).
        let m = dest_message(ME);
        assert_eq!(m.len(), 52);
        assert_eq!(&m[..19], b"0001:000123:abcdef:");
        assert!(m[19..51].iter().all(|&b| b == b'0'));
        assert_eq!(m[51], 0);
        assert_eq!(parse_dest(&m), Ok(ME));
        assert!(parse_dest(b"zz:1:2:0\0").is_err());
    }

    #[test]
    fn client_side_speaks_to_an_rdma_core_server() {
        // pp_server_exch_dest: read sizeof msg, connect, write sizeof msg, read "done".
        let (mut ours, mut theirs) = pair();
        let peer = std::thread::spawn(move || {
            let mut m = [0u8; 52];
            theirs.read_exact(&mut m).unwrap();
            theirs.write_all(&dest_message(PEER)).unwrap();
            let mut done = [0u8; 5];
            theirs.read_exact(&mut done).unwrap();
            (parse_dest(&m).unwrap(), done)
        });
        let o = parse("rc_pingpong", &["host".to_string()]).unwrap();
        let mut connected = None;
        let got = exchange(&o, &mut ours, ME, |d| {
            connected = Some(d);
            Ok(())
        })
        .unwrap();
        assert_eq!((got, connected), (PEER, Some(PEER)));
        assert_eq!(peer.join().unwrap(), (ME, *b"done\0"));
    }

    #[test]
    fn server_side_is_ready_before_it_answers_an_rdma_core_client() {
        // pp_client_exch_dest: write msg, read msg, write "done" (sizeof: 5 bytes).
        let (mut theirs, mut ours) = pair();
        let (tx, rx) = std::sync::mpsc::channel();
        let peer = std::thread::spawn(move || {
            theirs.write_all(&dest_message(PEER)).unwrap();
            let mut m = [0u8; 52];
            theirs.read_exact(&mut m).unwrap();
            // The server connected its QP before it sent its address.
            assert_eq!(rx.try_recv(), Ok(PEER));
            theirs.write_all(b"done\0").unwrap();
            parse_dest(&m).unwrap()
        });
        let o = parse("rc_pingpong", &[]).unwrap();
        let got = exchange(&o, &mut ours, ME, |d| {
            tx.send(d).unwrap();
            Ok(())
        })
        .unwrap();
        assert_eq!(got, PEER);
        assert_eq!(peer.join().unwrap(), ME);
    }

    #[test]
    fn check_pattern_keeps_rdma_cores_page_marks() {
        // rc_pingpong.c --chk: buf[k] = k / page_size % sizeof(char) (0) at each page start,
        // checked by the server at the end.
        let p = check_pattern(7, 3 * PAGE_SIZE + 10);
        assert!(p.iter().step_by(PAGE_SIZE).all(|&b| b == 0));
        assert_ne!(p, check_pattern(8, 3 * PAGE_SIZE + 10));
        assert_eq!(p[1], 8);
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn rdma_core_option_forms_parse() {
        let o = parse(
            "rc_pingpong",
            &args("-s64 --iters=5 -m 2048 -c --pci 0000:01:00.0 host"),
        )
        .unwrap();
        assert_eq!((o.size, o.iters, o.mtu, o.check), (64, 5, 2048, true));
        assert_eq!(o.pci.as_deref(), Some("0000:01:00.0"));
        assert_eq!(o.server.as_deref(), Some("host"));
        assert_eq!(parse("rc_pingpong", &[]).unwrap().size, 4096);
    }

    #[test]
    fn ud_defaults_to_one_mtu_per_message_unless_told() {
        assert_eq!(parse("ud_pingpong", &args("-m 2048")).unwrap().size, 2048);
        assert_eq!(parse("ud_pingpong", &args("-s 100")).unwrap().size, 100);
    }

    #[test]
    fn bad_options_are_errors_not_panics() {
        for bad in ["-s", "-s x", "-n 0", "--bogus", "--size="] {
            assert!(parse("rc_pingpong", &args(bad)).is_err(), "{bad}");
        }
    }
}
