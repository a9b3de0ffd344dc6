//! The perftest tools (`ib_write_bw`, `ib_send_bw`, `ib_read_bw`, `ib_write_lat`,
//! `ib_send_lat`) on bareverbs: perftest's common options and its result table. Without
//! `--pci` both sides run in this process on two model HCAs joined by a fabric (the server on a
//! thread); with `--pci BDF` one side drives a device bound to `vfio-pci`, the other side being
//! another instance of the same tool (server without a host name, client with one).
//!
//! What it measures is what perftest measures, with these choices:
//! - bandwidth: every QP keeps up to `-t` requests outstanding, every `--cq-mod`-th signaled;
//!   "average" is bytes over the time from the first post to the last completion, "peak" the
//!   best rate over one moderation window (between two consecutive completions of a QP);
//! - latency: `t_*` are half round trips (send/recv ping-pong, or RDMA WRITEs each side polls
//!   for in its memory), as perftest reports them;
//! - `-D` (a duration instead of `-n`) for the WRITE and READ bandwidth tests only (the
//!   receiver of SENDs must know how many to expect).

// Each tool is its own binary and runs one of the tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};
use bareverbs_vfio::VfioHal;

#[path = "cli.rs"]
mod cli;

/// How long a side waits for a completion, a memory update or its peer before giving up.
const STALL: Duration = Duration::from_secs(20);
/// Receives a SEND bandwidth server keeps posted per QP.
const RX_DEPTH: u32 = 512;
/// Largest message of `-a`: 2^23 bytes, as perftest.
const MAX_ALL: usize = 1 << 23;

/// Which test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_send_lat`.
    SendLat,
}

impl Test {
    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::SendBw => "Send BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::SendLat => "Send Latency Test",
        }
    }

    fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::SendBw | Test::ReadBw)
    }
}

/// perftest's options (the common subset).
#[derive(Clone, Debug)]
pub struct Opts {
    /// `-s`: message size.
    pub size: usize,
    /// `-a`: every size from 2 to 2^23.
    pub all: bool,
    /// `-n`: iterations per QP.
    pub iters: u32,
    /// `-D`: seconds to run instead of `-n` (bandwidth: WRITE and READ).
    pub duration: Option<u32>,
    /// `-q`: QPs.
    pub qps: u32,
    /// `-t`: outstanding requests per QP.
    pub tx_depth: u32,
    /// `--cq-mod` (perftest `-Q`): signal every this many requests.
    pub cq_mod: u32,
    /// `-m`: path MTU.
    pub mtu: u32,
    /// `-p`: TCP port of the exchange.
    pub port: u16,
    /// `-i`: HCA port.
    pub ib_port: u8,
    /// `--report_gbits`.
    pub gbits: bool,
    /// `-d`: the device's name in the report.
    pub dev_name: String,
    /// The server to connect to (client); none: be the server.
    pub server: Option<String>,
    /// `--pci`: drive this device through VFIO.
    pub pci: Option<String>,
}

fn usage(prog: &str) -> String {
    format!(
        "usage: {prog} [options] [servername]\n\
         \x20 -s, --size=<size>        message size (default 65536; latency: 2)\n\
         \x20 -a, --all                every size from 2 to 2^23\n\
         \x20 -n, --iters=<iters>      iterations per QP (default 5000; latency: 1000)\n\
         \x20 -D, --duration=<secs>    run this long instead of -n (write and read bandwidth)\n\
         \x20 -q, --qp=<num>           QPs (default 1; bandwidth tests)\n\
         \x20 -t, --tx-depth=<dep>     outstanding requests per QP (default 128)\n\
         \x20 -Q, --cq-mod=<n>         signal every n-th request (default 100)\n\
         \x20 -m, --mtu=<size>         path MTU (default 1024)\n\
         \x20 -p, --port=<port>        TCP port of the exchange (default 18515)\n\
         \x20 -i, --ib-port=<port>     HCA port (default 1)\n\
         \x20 -d, --ib-dev=<name>      device name in the report (default mlx5_0)\n\
         \x20 -F                       accepted, as perftest's CPU-frequency warning switch\n\
         \x20     --report_gbits       bandwidth in Gb/s\n\
         \x20     --pci=<BDF>          drive this device through VFIO (else: both sides in\n\
         \x20                          this process on two model HCAs)"
    )
}

/// Parses perftest's options (`-s 64`, `-s64`, `--size=64`, `--size 64`).
pub fn parse(prog: &str, test: Test, args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        size: if test.is_bw() { 65536 } else { 2 },
        all: false,
        iters: if test.is_bw() { 5000 } else { 1000 },
        duration: None,
        qps: 1,
        tx_depth: 128,
        cq_mod: 100,
        mtu: 1024,
        port: 18515,
        ib_port: 1,
        gbits: false,
        dev_name: "mlx5_0".into(),
        server: None,
        pci: None,
    };
    let mut it = args.iter();
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
            "-s" | "--size" => o.size = num(val("size")?, "size")? as usize,
            "-a" | "--all" => o.all = true,
            "-n" | "--iters" => o.iters = num(val("iters")?, "iters")? as u32,
            "-D" | "--duration" => o.duration = Some(num(val("duration")?, "duration")? as u32),
            "-q" | "--qp" => o.qps = num(val("qp")?, "qp")? as u32,
            "-t" | "--tx-depth" => o.tx_depth = num(val("tx-depth")?, "tx-depth")? as u32,
            "-Q" | "--cq-mod" => o.cq_mod = num(val("cq-mod")?, "cq-mod")? as u32,
            "-m" | "--mtu" => o.mtu = num(val("mtu")?, "mtu")? as u32,
            "-p" | "--port" => o.port = num(val("port")?, "port")? as u16,
            "-i" | "--ib-port" => o.ib_port = num(val("ib-port")?, "ib-port")? as u8,
            "-d" | "--ib-dev" => o.dev_name = val("ib-dev")?,
            "-F" => {}
            "--report_gbits" => o.gbits = true,
            "--pci" => o.pci = Some(val("pci")?),
            "-h" | "--help" => return Err(usage(prog)),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{}", usage(prog))),
            s => o.server = Some(s.to_string()),
        }
    }
    let bad = |why: &str| Err(format!("{why}\n{}", usage(prog)));
    if o.size == 0 || o.size > MAX_ALL {
        return bad("size must be 1 to 8388608");
    }
    if o.iters == 0 || o.tx_depth == 0 || o.cq_mod == 0 || o.qps == 0 || o.qps > 64 {
        return bad("iters, tx-depth and cq-mod must be positive, qp 1 to 64");
    }
    if o.duration == Some(0) {
        return bad("duration must be positive");
    }
    if o.duration.is_some() && !matches!(test, Test::WriteBw | Test::ReadBw) {
        return bad("-D: write and read bandwidth only");
    }
    if !test.is_bw() && o.qps != 1 {
        return bad("latency tests use one QP");
    }
    mtu(o.mtu)?;
    Ok(o)
}

fn mtu(bytes: u32) -> Result<Mtu, String> {
    Ok(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return Err(format!("invalid MTU {bytes}")),
    })
}

/// The sizes a run covers.
fn sizes(o: &Opts) -> Vec<usize> {
    if o.all {
        (1..=23).map(|k| 1usize << k).collect()
    } else {
        vec![o.size]
    }
}

/// One QP's address as exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    rkey: u32,
    addr: u64,
}

fn dest_line(d: &Dest) -> String {
    format!(
        "{:04x}:{:06x}:{:06x}:{:08x}:{:016x}\n",
        d.lid, d.qpn, d.psn, d.rkey, d.addr
    )
}

fn parse_dest(line: &str) -> Result<Dest, String> {
    let f: Vec<&str> = line.trim().split(':').collect();
    let hex = |i: usize| {
        f.get(i)
            .and_then(|x| u64::from_str_radix(x, 16).ok())
            .ok_or_else(|| format!("bad peer address {line:?}"))
    };
    Ok(Dest {
        lid: hex(0)? as u16,
        qpn: hex(1)? as u32,
        psn: hex(2)? as u32,
        rkey: hex(3)? as u32,
        addr: hex(4)?,
    })
}

/// The TCP link between the two sides: addresses, then one-line barriers.
struct Link {
    s: TcpStream,
}

impl Link {
    fn open(o: &Opts) -> Result<Self, String> {
        Ok(Link {
            s: cli::link(o.server.as_deref(), o.port, STALL)?,
        })
    }

    fn send(&mut self, line: &str) -> Result<(), String> {
        self.s
            .write_all(line.as_bytes())
            .map_err(|e| format!("exchange: {e}"))
    }

    fn recv(&mut self) -> Result<String, String> {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        loop {
            let n = self.s.read(&mut b).map_err(|e| format!("exchange: {e}"))?;
            if n == 0 {
                return Err("exchange: the peer closed the connection".into());
            }
            if b[0] == b'\n' {
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            line.push(b[0]);
        }
    }

    /// Both sides reach this point (each sends a line and reads the other's).
    fn barrier(&mut self, what: &str) -> Result<(), String> {
        self.send(&format!("{what}\n"))?;
        let got = self.recv()?;
        if got != what {
            return Err(format!("exchange: peer at {got:?}, expected {what:?}"));
        }
        Ok(())
    }
}

/// The result of one size.
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    /// Bandwidth: bytes, iterations (all QPs), peak and average in bytes/s, messages/s.
    Bw {
        /// Message size.
        bytes: usize,
        /// Messages.
        iters: u64,
        /// Best rate over one moderation window, bytes/s.
        peak: f64,
        /// Bytes over the whole run, bytes/s.
        avg: f64,
        /// Messages per second.
        rate: f64,
    },
    /// Latency: half round trips, microseconds.
    Lat {
        /// Message size.
        bytes: usize,
        /// Iterations.
        iters: u64,
        /// Sorted half round trips, microseconds.
        samples: Vec<f64>,
    },
}

/// `p` (0..=1) of sorted `v`: the sample below which that share lies (nearest rank).
fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[k - 1]
}

const RULE: &str =
    "---------------------------------------------------------------------------------------";

fn header(test: Test, o: &Opts) -> String {
    let mut h = format!("{RULE}\n                    {}\n", test.title());
    h += &format!(
        " Dual-port       : OFF\t\tDevice         : {}\n",
        o.dev_name
    );
    h += &format!(" Number of qps   : {}\t\tTransport type : IB\n", o.qps);
    h += " Connection type : RC\t\tUsing SRQ      : OFF\n";
    if test.is_bw() {
        h += &format!(" TX depth        : {}\n", o.tx_depth);
        h += &format!(" CQ Moderation   : {}\n", o.cq_mod.min(o.tx_depth));
    }
    h += &format!(" Mtu             : {}[B]\n", o.mtu);
    h += " Link type       : IB\n Max inline data : 0[B]\n Data ex. method : Ethernet\n";
    h += RULE;
    h
}

fn table_head(test: Test, o: &Opts) -> String {
    if test.is_bw() {
        let unit = if o.gbits { "Gb/sec" } else { "MiB/sec" };
        format!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]")
    } else {
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
         t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
            .into()
    }
}

/// A row as perftest prints it.
pub fn format_row(r: &Row, gbits: bool) -> String {
    match r {
        Row::Bw {
            bytes,
            iters,
            peak,
            avg,
            rate,
        } => {
            let (p, a) = if gbits {
                (peak * 8.0 / 1e9, avg * 8.0 / 1e9)
            } else {
                (peak / 1048576.0, avg / 1048576.0)
            };
            format!(
                " {bytes:<10} {iters:<10}       {p:<10.2}         {a:<10.2}\t\t   {:.6}",
                rate / 1e6
            )
        }
        Row::Lat {
            bytes,
            iters,
            samples,
        } => {
            let n = samples.len().max(1) as f64;
            let avg = samples.iter().sum::<f64>() / n;
            let var = samples.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n;
            format!(
                " {bytes:<7} {iters:<10}     {:<7.2}        {:<7.2}      {:<7.2}         \
                 {avg:<7.2}         {:<7.2}           {:<7.2}                 {:<7.2}",
                samples.first().copied().unwrap_or(0.0),
                samples.last().copied().unwrap_or(0.0),
                percentile(samples, 0.5),
                var.sqrt(),
                percentile(samples, 0.99),
                percentile(samples, 0.999),
            )
        }
    }
}

/// One side's QPs, their CQ and buffers.
struct Side<'p, 'd, H: Hal> {
    cq: Cq<'d, H>,
    qps: Vec<Qp<'p, 'd, H>>,
    mrs: Vec<Mr<'p, 'd, H>>,
    /// Bytes of each QP's buffer: a send half and a receive half of the largest size.
    half: usize,
}

/// Runs one side over `hal`; returns the client's report (the server's is its header).
pub fn run_side<H: Hal>(hal: H, test: Test, o: &Opts) -> Result<String, String> {
    let dev =
        Device::bring_up(hal, Config::default()).map_err(|e| format!("bring-up failed at {e}"))?;
    let caps = dev.info().caps;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let half = sizes(o).into_iter().max().unwrap_or(o.size);
    let depth = o.tx_depth.max(RX_DEPTH);
    let cq = dev
        .create_cq((depth * 2 * o.qps).min(caps.max_cqe))
        .map_err(|e| format!("couldn't create CQ: {e}"))?;
    let cap = QpCap {
        max_send_wr: o.tx_depth,
        max_recv_wr: RX_DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut side = Side {
        cq,
        qps: Vec::new(),
        mrs: Vec::new(),
        half,
    };
    for _ in 0..o.qps {
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &side.cq, &side.cq, cap))
            .map_err(|e| format!("couldn't create QP: {e}"))?;
        side.qps.push(qp);
        let buf = dev
            .hal()
            .dma_alloc(2 * half, 4096)
            .map_err(|e| e.to_string())?
            .share();
        let mr = pd
            .reg_mr(buf, access)
            .map_err(|(e, _)| format!("couldn't register MR: {e}"))?;
        side.mrs.push(mr);
    }
    let lid = dev.query_port(o.ib_port).map_err(|e| e.to_string())?.lid;
    let mut link = Link::open(o)?;
    let client = o.server.is_some();
    let locals: Vec<Dest> = side
        .qps
        .iter()
        .zip(&side.mrs)
        .map(|(q, m)| Dest {
            lid,
            qpn: q.qpn().raw(),
            psn: q.qpn().raw().wrapping_mul(2_654_435_761) & 0xff_ffff,
            rkey: m.rkey().raw(),
            addr: m.addr(),
        })
        .collect();
    for d in &locals {
        link.send(&dest_line(d))?;
    }
    let mut remotes = Vec::new();
    for _ in 0..o.qps {
        remotes.push(parse_dest(&link.recv()?)?);
    }
    let rd_atomic = caps.max_qp_rd_atom.clamp(1, 16) as u8;
    let init_atomic = caps.max_qp_init_rd_atom.clamp(1, 16) as u8;
    for ((qp, l), r) in side.qps.iter_mut().zip(&locals).zip(&remotes) {
        connect(qp, o, access, *l, *r, rd_atomic, init_atomic)?;
    }
    let mut out = header(test, o);
    for (l, r) in locals.iter().zip(&remotes) {
        out += &format!(
            "\n local address: LID {:#06x} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#018x}",
            l.lid, l.qpn, l.psn, l.rkey, l.addr
        );
        out += &format!(
            "\n remote address: LID {:#06x} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#018x}",
            r.lid, r.qpn, r.psn, r.rkey, r.addr
        );
    }
    out += &format!("\n{RULE}\n{}", table_head(test, o));
    for size in sizes(o) {
        // Receives (and zeroed receive halves) are in place on both sides first.
        if matches!(test, Test::SendBw | Test::SendLat) {
            let n = if test == Test::SendBw {
                RX_DEPTH.min(o.iters)
            } else {
                1
            };
            for (q, m) in side.qps.iter_mut().zip(&side.mrs) {
                post_recvs(q, m, half, size, n)?;
            }
        }
        if test == Test::WriteLat {
            for m in &side.mrs {
                m.buf().fill(half, half, 0).map_err(|e| e.to_string())?;
            }
        }
        link.barrier(&format!("size {size}"))?;
        let row = match (test, client) {
            (Test::WriteBw | Test::ReadBw | Test::SendBw, true) => {
                Some(bw_client(&mut side, test, o, size, &remotes)?)
            }
            (Test::SendBw, false) => {
                bw_receiver(&mut side, o, size)?;
                None
            }
            (Test::WriteBw | Test::ReadBw, false) => None,
            (Test::SendLat, _) => Some(send_lat(&mut side, o, size, client)?),
            (Test::WriteLat, _) => Some(write_lat(&mut side, o, size, client, &remotes[0])?),
        };
        // The server of WRITE and READ does nothing: it waits for the client to be done.
        link.barrier(&format!("done {size}"))?;
        if let (Some(r), true) = (row, client) {
            out += &format!("\n{}", format_row(&r, o.gbits));
        }
    }
    out += &format!("\n{RULE}");
    drop(link);
    side.close()?;
    pd.dealloc().map_err(|e| e.to_string())?;
    dev.teardown()
        .map_err(|e| format!("teardown failed at {e}"))?;
    Ok(out)
}

impl<H: Hal> Side<'_, '_, H> {
    /// Destroys the QPs, deregisters the buffers, destroys the CQ.
    fn close(self) -> Result<(), String> {
        let Side { cq, qps, mrs, .. } = self;
        for q in qps {
            q.destroy()
                .map_err(|(e, _)| format!("couldn't destroy QP: {e}"))?;
        }
        for m in mrs {
            m.dereg()
                .map_err(|(e, _)| format!("couldn't deregister MR: {e}"))?;
        }
        cq.destroy()
            .map_err(|(e, _)| format!("couldn't destroy CQ: {e}"))
    }
}

fn connect<H: Hal>(
    qp: &mut Qp<'_, '_, H>,
    o: &Opts,
    access: AccessFlags,
    l: Dest,
    r: Dest,
    rd_atomic: u8,
    init_atomic: u8,
) -> Result<(), String> {
    qp.to_init(o.ib_port, 0, access, 0)
        .map_err(|e| e.to_string())?;
    let mut rtr = QpAttr::default();
    rtr.qp_state = QpState::Rtr;
    rtr.path_mtu = mtu(o.mtu)?;
    rtr.dest_qp_num = r.qpn;
    rtr.rq_psn = r.psn;
    rtr.ah_attr = AhAttr {
        dlid: r.lid,
        port_num: o.ib_port,
        ..AhAttr::default()
    };
    rtr.max_dest_rd_atomic = rd_atomic;
    rtr.min_rnr_timer = 12;
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    qp.modify(&rtr, mask)
        .map_err(|e| format!("couldn't connect to the remote QP: {e}"))?;
    let mut rts = QpAttr::default();
    rts.qp_state = QpState::Rts;
    rts.sq_psn = l.psn;
    rts.timeout = 14;
    rts.retry_cnt = 7;
    rts.rnr_retry = 7;
    rts.max_rd_atomic = init_atomic;
    let mask = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    qp.modify(&rts, mask).map_err(|e| e.to_string())
}

fn post_recvs<H: Hal>(
    qp: &mut Qp<'_, '_, H>,
    mr: &Mr<'_, '_, H>,
    half: usize,
    size: usize,
    n: u32,
) -> Result<(), String> {
    let sge = Sge {
        addr: mr.addr() + half as u64,
        length: size as u32,
        lkey: mr.lkey(),
    };
    let wr = RecvWr {
        wr_id: 0,
        sg_list: std::slice::from_ref(&sge),
    };
    for _ in 0..n {
        qp.post_recv(std::slice::from_ref(&wr))
            .map_err(|e| format!("couldn't post receives: {e}"))?;
    }
    Ok(())
}

/// Waits for completions into `wc`: their count, or an error for a failed completion or
/// none within [`STALL`].
fn poll_some<H: Hal>(cq: &mut Cq<'_, H>, wc: &mut [Wc]) -> Result<usize, String> {
    let start = Instant::now();
    loop {
        let n = cq.poll(wc);
        if n > 0 {
            if let Some(bad) = wc[..n].iter().find(|w| w.status != WcStatus::Success) {
                return Err(format!(
                    "completion with error: status {} (vendor error {:#x}) on QP {:#x}",
                    bad.status, bad.vendor_err, bad.qp_num
                ));
            }
            return Ok(n);
        }
        if start.elapsed() > STALL {
            return Err("no completion: is the other side running?".into());
        }
        std::hint::spin_loop();
    }
}

/// The bandwidth requester: WRITE, READ or SEND of `size` bytes from every QP.
fn bw_client<H: Hal>(
    side: &mut Side<'_, '_, H>,
    test: Test,
    o: &Opts,
    size: usize,
    remotes: &[Dest],
) -> Result<Row, String> {
    let nq = side.qps.len();
    let modr = o.cq_mod.min(o.tx_depth).max(1) as u64;
    let limit = o.duration.map(|s| Duration::from_secs(u64::from(s)));
    let per_qp = u64::from(o.iters);
    let mut posted = vec![0u64; nq];
    let mut done = vec![0u64; nq];
    let mut last = vec![None::<Instant>; nq];
    let mut peak = 0f64;
    let start = Instant::now();
    let op = test;
    let mut wc = [Wc::EMPTY; 16];
    let mut stop = false;
    loop {
        let time_up = limit.is_some_and(|l| start.elapsed() >= l);
        stop |= time_up;
        for q in 0..nq {
            let target = if limit.is_some() { u64::MAX } else { per_qp };
            while !stop
                && posted[q] < target
                && posted[q] - done[q] + modr <= u64::from(o.tx_depth).max(modr)
            {
                let chunk = modr.min(target - posted[q]) as usize;
                let sge = Sge {
                    addr: side.mrs[q].addr(),
                    length: size as u32,
                    lkey: side.mrs[q].lkey(),
                };
                let (raddr, rkey) = (remotes[q].addr + side.half as u64, remotes[q].rkey);
                let wrs: Vec<SendWr> = (0..chunk)
                    .map(|k| SendWr {
                        wr_id: if k + 1 == chunk { chunk as u64 } else { 0 },
                        sg_list: std::slice::from_ref(&sge),
                        inline_data: &[],
                        op: match op {
                            Test::WriteBw => SendOp::RdmaWrite {
                                remote_addr: raddr,
                                rkey,
                            },
                            Test::ReadBw => SendOp::RdmaRead {
                                remote_addr: raddr,
                                rkey,
                            },
                            _ => SendOp::Send,
                        },
                        flags: if k + 1 == chunk {
                            SendFlags::SIGNALED
                        } else {
                            SendFlags::empty()
                        },
                        ud: None,
                    })
                    .collect();
                side.qps[q]
                    .post_send(&wrs)
                    .map_err(|e| format!("couldn't post: {e}"))?;
                posted[q] += chunk as u64;
            }
        }
        if (0..nq).all(|q| done[q] == posted[q]) && (stop || (0..nq).all(|q| posted[q] >= per_qp)) {
            break;
        }
        let n = poll_some(&mut side.cq, &mut wc)?;
        let now = Instant::now();
        for w in &wc[..n] {
            let Some(q) = side.qps.iter().position(|x| x.qpn().raw() == w.qp_num) else {
                return Err(format!("completion of unknown QP {:#x}", w.qp_num));
            };
            done[q] += w.wr_id;
            if let Some(t) = last[q] {
                let dt = now.duration_since(t).as_secs_f64();
                if dt > 0.0 {
                    peak = peak.max(w.wr_id as f64 * size as f64 * nq as f64 / dt);
                }
            }
            last[q] = Some(now);
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let iters: u64 = done.iter().sum();
    let avg = iters as f64 * size as f64 / secs;
    Ok(Row::Bw {
        bytes: size,
        iters,
        peak: peak.max(avg),
        avg,
        rate: iters as f64 / secs,
    })
}

/// The SEND bandwidth receiver: `-n` messages per QP, each receive re-posted as it completes.
fn bw_receiver<H: Hal>(side: &mut Side<'_, '_, H>, o: &Opts, size: usize) -> Result<(), String> {
    let want = u64::from(o.iters) * side.qps.len() as u64;
    let mut posted = vec![u64::from(RX_DEPTH.min(o.iters)); side.qps.len()];
    let mut got = 0u64;
    let mut wc = [Wc::EMPTY; 16];
    while got < want {
        let n = poll_some(&mut side.cq, &mut wc)?;
        for w in &wc[..n] {
            if w.byte_len as usize != size {
                return Err(format!("received {} bytes, expected {size}", w.byte_len));
            }
            got += 1;
            let Some(q) = side.qps.iter().position(|x| x.qpn().raw() == w.qp_num) else {
                return Err(format!("completion of unknown QP {:#x}", w.qp_num));
            };
            if posted[q] < u64::from(o.iters) {
                post_recvs(&mut side.qps[q], &side.mrs[q], side.half, size, 1)?;
                posted[q] += 1;
            }
        }
    }
    Ok(())
}

/// SEND/RECV ping-pong: the client sends, the server answers; half the round trip each time.
fn send_lat<H: Hal>(
    side: &mut Side<'_, '_, H>,
    o: &Opts,
    size: usize,
    client: bool,
) -> Result<Row, String> {
    let sge = Sge {
        addr: side.mrs[0].addr(),
        length: size as u32,
        lkey: side.mrs[0].lkey(),
    };
    let wr = SendWr {
        wr_id: 1,
        sg_list: std::slice::from_ref(&sge),
        inline_data: &[],
        op: SendOp::Send,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    let mut samples = Vec::with_capacity(o.iters as usize);
    let mut wc = [Wc::EMPTY; 2];
    // Waits for one receive completion; send completions met meanwhile are counted.
    let recv_one = |side: &mut Side<'_, '_, H>, sends: &mut u32, wc: &mut [Wc]| loop {
        let n = poll_some(&mut side.cq, wc)?;
        let mut got = false;
        for w in &wc[..n] {
            if w.opcode == WcOpcode::Recv {
                got = true;
            } else {
                *sends += 1;
            }
        }
        if got {
            return Ok::<(), String>(());
        }
    };
    let mut sends = 0u32;
    for i in 0..o.iters {
        let t0 = Instant::now();
        if client {
            side.qps[0]
                .post_send(std::slice::from_ref(&wr))
                .map_err(|e| format!("couldn't post: {e}"))?;
            recv_one(side, &mut sends, &mut wc)?;
        } else {
            recv_one(side, &mut sends, &mut wc)?;
            side.qps[0]
                .post_send(std::slice::from_ref(&wr))
                .map_err(|e| format!("couldn't post: {e}"))?;
        }
        if i + 1 < o.iters {
            post_recvs(&mut side.qps[0], &side.mrs[0], side.half, size, 1)?;
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    // Every send completed before the sizes move on.
    while sends < o.iters {
        sends += poll_some(&mut side.cq, &mut wc)? as u32;
    }
    samples.sort_by(f64::total_cmp);
    Ok(Row::Lat {
        bytes: size,
        iters: u64::from(o.iters),
        samples,
    })
}

/// RDMA WRITE ping-pong: each side writes the iteration's mark into the last byte of the
/// peer's receive half and polls its own for the peer's.
fn write_lat<H: Hal>(
    side: &mut Side<'_, '_, H>,
    o: &Opts,
    size: usize,
    client: bool,
    remote: &Dest,
) -> Result<Row, String> {
    let half = side.half;
    let mark = |i: u32| (i % 255) as u8 + 1;
    let mut samples = Vec::with_capacity(o.iters as usize);
    let mut wc = [Wc::EMPTY; 4];
    let write = |side: &mut Side<'_, '_, H>, i: u32| -> Result<(), String> {
        let buf = side.mrs[0].buf();
        buf.write_bytes(size - 1, &[mark(i)])
            .map_err(|e| e.to_string())?;
        let sge = Sge {
            addr: side.mrs[0].addr(),
            length: size as u32,
            lkey: side.mrs[0].lkey(),
        };
        side.qps[0]
            .post_send(&[SendWr {
                wr_id: 1,
                sg_list: std::slice::from_ref(&sge),
                inline_data: &[],
                op: SendOp::RdmaWrite {
                    remote_addr: remote.addr + half as u64,
                    rkey: remote.rkey,
                },
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .map_err(|e| format!("couldn't post: {e}"))
    };
    let arrive = |side: &mut Side<'_, '_, H>, i: u32| -> Result<(), String> {
        let start = Instant::now();
        let mut b = [0u8; 1];
        loop {
            side.mrs[0]
                .buf()
                .read_bytes(half + size - 1, &mut b)
                .map_err(|e| e.to_string())?;
            if b[0] == mark(i) {
                return Ok(());
            }
            if start.elapsed() > STALL {
                return Err("the peer's write never arrived".into());
            }
            std::hint::spin_loop();
        }
    };
    for i in 0..o.iters {
        let t0 = Instant::now();
        if client {
            write(side, i)?;
            arrive(side, i)?;
        } else {
            arrive(side, i)?;
            write(side, i)?;
        }
        // Its completion, so the send queue never fills.
        poll_some(&mut side.cq, &mut wc[..1])?;
        samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    samples.sort_by(f64::total_cmp);
    Ok(Row::Lat {
        bytes: size,
        iters: u64::from(o.iters),
        samples,
    })
}

/// The tool's `main`: both sides in this process on two model HCAs, or one side over VFIO.
pub fn main_for(test: Test, prog: &str) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(prog, test, &args) {
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
    let result = match &o.pci {
        Some(bdf) => VfioHal::open(bdf)
            .map_err(|e| e.to_string())
            .and_then(|hal| run_side(hal, test, &o)),
        None => {
            let fabric = Fabric::new();
            let hca = |lid, guid, fabric: &std::sync::Arc<Fabric>| {
                let cfg = ModelConfig {
                    base_lid: lid,
                    node_guid: guid,
                    ..ModelConfig::default()
                };
                SimHal::on_fabric(cfg, Drive::Background, fabric)
            };
            let server_opts = Opts {
                server: None,
                ..o.clone()
            };
            let client_opts = Opts {
                server: Some("127.0.0.1".into()),
                ..o.clone()
            };
            let f1 = fabric.clone();
            let server =
                std::thread::spawn(move || run_side(hca(1, 0x10, &f1), test, &server_opts));
            let client = run_side(hca(17, 0x20, &fabric), test, &client_opts);
            let server = server
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            server.and(client)
        }
    };
    match result {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_as_perftest_and_their_refusals() {
        let o = parse(
            "ib_write_bw",
            Test::WriteBw,
            &args("-s 4096 -n20 --qp=2 -D 3 host"),
        )
        .unwrap();
        assert_eq!((o.size, o.iters, o.qps, o.duration), (4096, 20, 2, Some(3)));
        assert_eq!(o.server.as_deref(), Some("host"));
        let l = parse("ib_send_lat", Test::SendLat, &[]).unwrap();
        assert_eq!((l.size, l.iters), (2, 1000));
        for bad in ["-s 0", "-n 0", "-q 0", "-m 300", "-D 0", "-x", "-s"] {
            assert!(
                parse("ib_write_bw", Test::WriteBw, &args(bad)).is_err(),
                "{bad}"
            );
        }
        assert!(parse("ib_send_bw", Test::SendBw, &args("-D 2")).is_err());
        assert!(parse("ib_send_lat", Test::SendLat, &args("-q 2")).is_err());
        assert_eq!(
            sizes(&parse("x", Test::WriteBw, &args("-a")).unwrap()).len(),
            23
        );
    }

    #[test]
    fn addresses_round_trip_and_statistics() {
        let d = Dest {
            lid: 0x11,
            qpn: 0x123,
            psn: 0xabcdef,
            rkey: 0xdead_beef,
            addr: 0x7f00_1234_5000,
        };
        assert_eq!(parse_dest(&dest_line(&d)).unwrap(), d);
        assert!(parse_dest("1:2").is_err());
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 500.0);
        assert_eq!(percentile(&v, 0.99), 990.0);
        assert_eq!(percentile(&v, 0.999), 999.0);
        let r = format_row(
            &Row::Bw {
                bytes: 65536,
                iters: 10,
                peak: 2.0 * 1048576.0,
                avg: 1048576.0,
                rate: 16.0,
            },
            false,
        );
        assert!(
            r.contains("65536") && r.contains("2.00") && r.contains("1.00"),
            "{r}"
        );
    }
}
