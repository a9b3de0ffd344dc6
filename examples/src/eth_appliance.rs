//! A packet appliance on bareverbs' Ethernet burst API: it answers ARP for its IPv4 address,
//! ICMP echo requests and UDP datagrams to its echo port, from one receive and one send
//! queue, polling. The protocol logic is `appliance/responder.rs` (no I/O, no allocation).
//!
//! ```text
//! eth_appliance [--ip A.B.C.D] [--udp-port N] [--seconds S] [--answers N] [--pcap FILE]
//!               [--tap NAME | --pci BDF | --selftest N]
//! ```
//! - default, `--selftest N`: in this process, on two model HCAs joined by a wire: the
//!   appliance on one, and on the other a peer that sends an ARP request, N pings and N UDP
//!   datagrams (and a few frames that must get no answer) and checks every reply byte by byte.
//! - `--tap NAME`: one model HCA whose wire is joined to the TAP interface NAME (created;
//!   root needed): Linux's own `ping` and UDP clients talk to the appliance. It serves for
//!   `--seconds` (default 30) or until it has sent `--answers` replies.
//! - `--pci BDF`: drives a device bound to `vfio-pci`, serving the same way.

#[path = "cli.rs"]
#[allow(dead_code)]
mod cli;
#[path = "appliance/responder.rs"]
mod responder;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bareverbs::eth::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};
use bareverbs_vfio::VfioHal;
use responder::{checksum, respond, Identity, Kind};

/// What the appliance did.
#[derive(Clone, Copy, Debug, Default)]
struct Served {
    arp: u64,
    ping: u64,
    udp: u64,
    ignored: u64,
    unsent: u64,
}

impl Served {
    fn answers(&self) -> u64 {
        self.arp + self.ping + self.udp
    }
}

struct Opts {
    ip: [u8; 4],
    udp_port: u16,
    seconds: u64,
    answers: Option<u64>,
    pcap: Option<String>,
    mode: Mode,
}

enum Mode {
    SelfTest(u32),
    Tap(String),
    Pci(String),
}

const USAGE: &str = "usage: eth_appliance [--ip A.B.C.D] [--udp-port N] [--seconds S] \
                     [--answers N] [--pcap FILE] [--tap NAME | --pci BDF | --selftest N]";

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        ip: [10, 0, 0, 2],
        udp_port: 7,
        seconds: 30,
        answers: None,
        pcap: None,
        mode: Mode::SelfTest(10),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = cli::split_option(a);
        let mut val = |what: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or(format!("{key} needs {what}"))
        };
        let num = |s: String| {
            s.parse::<u64>()
                .map_err(|_| format!("{key}: not a number: {s}"))
        };
        match key.as_str() {
            "--ip" => {
                let s = val("an address")?;
                let p: Vec<u8> = s.split('.').filter_map(|x| x.parse().ok()).collect();
                o.ip = p
                    .try_into()
                    .map_err(|_| format!("--ip: not an IPv4 address: {s}"))?;
            }
            "--udp-port" => {
                o.udp_port =
                    u16::try_from(num(val("a port")?)?).map_err(|_| "--udp-port: too large")?
            }
            "--seconds" => o.seconds = num(val("a duration")?)?,
            "--answers" => o.answers = Some(num(val("a count")?)?),
            "--pcap" => o.pcap = Some(val("a file")?),
            "--tap" => o.mode = Mode::Tap(val("an interface name")?),
            "--pci" => o.mode = Mode::Pci(val("a PCI address")?),
            "--selftest" => o.mode = Mode::SelfTest(num(val("a count")?)? as u32),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    Ok(o)
}

/// Serves on `hal`'s Ethernet port until `stop` is set, `deadline` passes or `answers`
/// replies were sent.
fn serve<H: Hal>(
    hal: H,
    o: &Opts,
    stop: &AtomicBool,
    ready: Option<&(dyn Fn([u8; 6]) + Sync)>,
) -> Result<Served, String> {
    let dev = Device::bring_up(&hal, Config::default()).map_err(|e| e.to_string())?;
    let e = |e: bareverbs::Error| e.to_string();
    let port = dev.open_eth().map_err(e)?;
    let me = Identity {
        mac: port.mac(),
        ip: o.ip,
        udp_echo_port: o.udp_port,
    };
    let pool = PktPool::new(&port, 1024, 2048).map_err(e)?;
    let mut rxq = RxQueue::new(&port, &pool, RxQueueAttr::new(256)).map_err(e)?;
    let mut txq = TxQueue::new(&port, &pool, TxQueueAttr::new(256)).map_err(e)?;
    // Frames to the appliance's MAC, and ARP broadcasts.
    let _mine = port
        .add_rule(&FlowMatch::any().dmac(me.mac), FlowDest::Queue(&rxq))
        .map_err(e)?;
    let _arp = port
        .add_rule(
            &FlowMatch::any().dmac([0xff; 6]).ethertype(0x0806),
            FlowDest::Queue(&rxq),
        )
        .map_err(e)?;
    println!(
        "eth_appliance: MAC {} IP {}.{}.{}.{} UDP echo port {}",
        mac_text(&me.mac),
        o.ip[0],
        o.ip[1],
        o.ip[2],
        o.ip[3],
        o.udp_port
    );
    if let Some(f) = ready {
        f(me.mac);
    }
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let mut served = Served::default();
    let mut rx = [Pkt::EMPTY; 32];
    let mut tx = [Pkt::EMPTY; 32];
    let (mut frame, mut reply) = ([0u8; 2048], [0u8; 2048]);
    while !stop.load(Ordering::Relaxed)
        && Instant::now() < deadline
        && o.answers.is_none_or(|n| served.answers() < n)
    {
        let n = rxq.rx_burst(&mut rx);
        if n == 0 {
            std::thread::yield_now();
            continue;
        }
        let mut m = 0;
        for p in &rx[..n] {
            let len = pool.read(p, 0, &mut frame).map_err(e)?;
            let (kind, rlen) = respond(&me, &frame[..len], &mut reply);
            let mut p = *p;
            match kind {
                Kind::Arp => served.arp += 1,
                Kind::Ping => served.ping += 1,
                Kind::UdpEcho => served.udp += 1,
                Kind::Ignored => {
                    served.ignored += 1;
                    pool.free(p).map_err(e)?;
                    continue;
                }
            }
            // The reply goes out in the buffer the request came in.
            pool.set_len(&mut p, 0).map_err(e)?;
            pool.write(&mut p, 0, &reply[..rlen]).map_err(e)?;
            tx[m] = p;
            m += 1;
        }
        let sent = txq.tx_burst(&tx[..m]);
        for p in &tx[sent..m] {
            served.unsent += 1;
            pool.free(*p).map_err(e)?;
        }
    }
    Ok(served)
}

fn mac_text(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The peer of the self-test: ARP, pings and UDP datagrams to the appliance, every reply
/// checked; frames that must get no answer get none.
fn peer<H: Hal>(hal: H, o: &Opts, count: u32, appliance_mac: [u8; 6]) -> Result<String, String> {
    let dev = Device::bring_up(&hal, Config::default()).map_err(|e| e.to_string())?;
    let e = |e: bareverbs::Error| e.to_string();
    let port = dev.open_eth().map_err(e)?;
    let pool = PktPool::new(&port, 256, 2048).map_err(e)?;
    let mut rxq = RxQueue::new(&port, &pool, RxQueueAttr::new(64)).map_err(e)?;
    let mut txq = TxQueue::new(&port, &pool, TxQueueAttr::new(64)).map_err(e)?;
    let _r = port
        .add_rule(&FlowMatch::any().dmac(port.mac()), FlowDest::Queue(&rxq))
        .map_err(e)?;
    let my_ip = [o.ip[0], o.ip[1], o.ip[2], o.ip[3].wrapping_add(100)];
    let mut exchange = |frame: &[u8], expect_reply: bool| -> Result<Option<Vec<u8>>, String> {
        let mut p = pool.alloc().ok_or("peer: no buffer")?;
        pool.write(&mut p, 0, frame).map_err(e)?;
        if txq.tx_burst(&[p]) != 1 {
            return Err(format!("peer: send refused: {:?}", txq.take_refused()));
        }
        let until = Instant::now() + Duration::from_millis(if expect_reply { 5000 } else { 200 });
        let mut got = [Pkt::EMPTY; 1];
        while Instant::now() < until {
            if rxq.rx_burst(&mut got) == 1 {
                let mut b = vec![0u8; got[0].len()];
                pool.read(&got[0], 0, &mut b).map_err(e)?;
                pool.free(got[0]).map_err(e)?;
                return Ok(Some(b));
            }
            std::thread::yield_now();
        }
        Ok(None)
    };
    let me = port.mac();
    // ARP: who has the appliance's address?
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&me);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&me);
    arp.extend_from_slice(&my_ip);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&o.ip);
    let r = exchange(&arp, true)?.ok_or("no ARP reply")?;
    if r[..6] != me
        || r[6..12] != appliance_mac
        || r[20..22] != [0, 2]
        || r[22..28] != appliance_mac
        || r[28..32] != o.ip
        || r[32..38] != me
        || r[38..42] != my_ip
    {
        return Err(format!("bad ARP reply {r:02x?}"));
    }
    let ipv4 = |proto: u8, payload: &[u8]| -> Vec<u8> {
        let mut f = appliance_mac.to_vec();
        f.extend_from_slice(&me);
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + payload.len()) as u16;
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            7,
            0x40,
            0,
            64,
            proto,
            0,
            0,
        ];
        ip.extend_from_slice(&my_ip);
        ip.extend_from_slice(&o.ip);
        let c = checksum(&ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(payload);
        f
    };
    for seq in 0..count {
        let mut icmp = vec![8, 0, 0, 0, 0x12, 0x34, (seq >> 8) as u8, seq as u8];
        icmp.extend((0..56u32).map(|k| (k + seq) as u8));
        let c = checksum(&icmp, 0);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let r = exchange(&ipv4(1, &icmp), true)?.ok_or(format!("no reply to ping {seq}"))?;
        let body = &r[34..34 + icmp.len()];
        if r[..6] != me
            || r[26..30] != o.ip
            || r[30..34] != my_ip
            || body[0] != 0
            || body[4..] != icmp[4..]
            || checksum(body, 0) != 0
            || checksum(&r[14..34], 0) != 0
        {
            return Err(format!("bad reply to ping {seq}"));
        }
    }
    for k in 0..count {
        // Sizes from 16 bytes up, within the 1472 bytes a 1500-byte MTU takes.
        let data: Vec<u8> = (0..(16 + 97 * k % 1457))
            .map(|i| (i * 7 + k) as u8)
            .collect();
        let mut udp = 40000u16.to_be_bytes().to_vec();
        udp.extend_from_slice(&o.udp_port.to_be_bytes());
        udp.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(&data);
        let r = exchange(&ipv4(17, &udp), true)?.ok_or(format!("no UDP echo {k}"))?;
        let u = &r[34..];
        if u[..2] != o.udp_port.to_be_bytes()
            || u[2..4] != 40000u16.to_be_bytes()
            || u[8..8 + data.len()] != data[..]
        {
            return Err(format!("bad UDP echo {k}"));
        }
    }
    // No answers: a UDP port nobody echoes on, a ping with a broken checksum, a frame for
    // another MAC.
    let mut other = 40000u16.to_be_bytes().to_vec();
    other.extend_from_slice(&(o.udp_port ^ 1).to_be_bytes());
    other.extend_from_slice(&[0, 9, 0, 0, 0x55]);
    if exchange(&ipv4(17, &other), false)?.is_some() {
        return Err("answered a UDP port it does not serve".into());
    }
    let mut bad = vec![8, 0, 0xde, 0xad, 0, 1, 0, 1];
    bad.extend_from_slice(&[1, 2, 3, 4]);
    if exchange(&ipv4(1, &bad), false)?.is_some() {
        return Err("answered a ping with a wrong checksum".into());
    }
    Ok(format!(
        "self-test: ARP, {count} pings and {count} UDP echoes answered and checked; 2 frames rightly ignored"
    ))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let stop = AtomicBool::new(false);
    let result = match &o.mode {
        Mode::Pci(bdf) => VfioHal::open(bdf)
            .map_err(|e| e.to_string())
            .and_then(|hal| serve(hal, &o, &stop, None))
            .map(|s| format!("{s:?}")),
        Mode::Tap(name) => {
            let fabric = Fabric::new();
            let cfg = ModelConfig {
                port_type_eth: true,
                ..ModelConfig::default()
            };
            let hal = SimHal::on_fabric(cfg, Drive::Background, &fabric);
            let pcap = o
                .pcap
                .as_ref()
                .map(|p| fabric.capture_to(std::path::Path::new(p)));
            match (pcap.transpose(), fabric.attach_tap(name)) {
                (Err(err), _) => Err(format!("--pcap: {err}")),
                (_, Err(err)) => Err(format!("--tap {name}: {err}")),
                _ => serve(hal, &o, &stop, None).map(|s| format!("{s:?}")),
            }
            .and_then(|r| fabric.stop_capture().map(|_| r).map_err(|e| e.to_string()))
        }
        Mode::SelfTest(count) => {
            let fabric = Fabric::new();
            let hca = |n: u64| {
                let cfg = ModelConfig {
                    port_type_eth: true,
                    node_guid: ModelConfig::default().node_guid + (n << 8),
                    base_lid: 1 + 16 * n as u16,
                    ..ModelConfig::default()
                };
                SimHal::on_fabric(cfg, Drive::Background, &fabric)
            };
            if let Some(p) = &o.pcap {
                if let Err(err) = fabric.capture_to(std::path::Path::new(p)) {
                    eprintln!("eth_appliance: --pcap: {err}");
                    return ExitCode::FAILURE;
                }
            }
            let (ha, hb) = (hca(0), hca(1));
            let stop = Arc::new(stop);
            let (tx, rx) = std::sync::mpsc::channel();
            let o2 = Opts {
                mode: Mode::SelfTest(*count),
                pcap: None,
                ..o.clone_basic()
            };
            let st = stop.clone();
            let server = std::thread::spawn(move || {
                let ready = move |mac| {
                    let _ = tx.send(mac);
                };
                serve(ha, &o2, &st, Some(&ready))
            });
            let r = match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(mac) => peer(hb, &o, *count, mac),
                Err(_) => Err("the appliance did not start".into()),
            };
            stop.store(true, Ordering::Relaxed);
            let served = server
                .join()
                .unwrap_or_else(|_| Err("appliance thread panicked".into()));
            let _ = fabric.stop_capture();
            match (r, served) {
                (Ok(msg), Ok(s)) => Ok(format!("{msg}; appliance {s:?}")),
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
    };
    match result {
        Ok(msg) => {
            println!("eth_appliance: {msg}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("eth_appliance: {msg}");
            ExitCode::FAILURE
        }
    }
}

impl Opts {
    fn clone_basic(&self) -> Opts {
        Opts {
            ip: self.ip,
            udp_port: self.udp_port,
            seconds: self.seconds,
            answers: self.answers,
            pcap: self.pcap.clone(),
            mode: Mode::SelfTest(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::responder::*;

    const ME: Identity = Identity {
        mac: [2, 0, 0, 0, 0, 2],
        ip: [10, 0, 0, 2],
        udp_echo_port: 7,
    };

    fn ip_frame(proto: u8, body: &[u8], dst_ip: [u8; 4]) -> Vec<u8> {
        let mut f = ME.mac.to_vec();
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 8, 0]);
        let total = (20 + body.len()) as u16;
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0,
            0,
            64,
            proto,
            0,
            0,
            10,
            0,
            0,
            1,
        ];
        ip.extend_from_slice(&dst_ip);
        let c = checksum(&ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn pings_and_udp_get_answers_with_right_checksums_and_the_rest_none() {
        let mut out = [0u8; 2048];
        let mut icmp = vec![8, 0, 0, 0, 1, 2, 3, 4, 9, 9];
        let c = checksum(&icmp, 0);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let (k, n) = respond(&ME, &ip_frame(1, &icmp, ME.ip), &mut out);
        assert_eq!((k, n), (Kind::Ping, 14 + 30));
        assert_eq!(&out[..6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(checksum(&out[14..34], 0), 0);
        assert_eq!(checksum(&out[34..n], 0), 0);
        assert_eq!(out[34], 0);
        // To another address, or with a broken checksum: nothing.
        assert_eq!(
            respond(&ME, &ip_frame(1, &icmp, [10, 0, 0, 9]), &mut out).0,
            Kind::Ignored
        );
        icmp[9] ^= 1;
        assert_eq!(
            respond(&ME, &ip_frame(1, &icmp, ME.ip), &mut out).0,
            Kind::Ignored
        );
        // UDP to the echo port (no checksum) and to another port.
        let udp = [0x9c, 0x40, 0, 7, 0, 11, 0, 0, b'a', b'b', b'c'];
        let (k, n) = respond(&ME, &ip_frame(17, &udp, ME.ip), &mut out);
        assert_eq!(k, Kind::UdpEcho);
        assert_eq!(&out[34..38], &[0, 7, 0x9c, 0x40]);
        assert_eq!(&out[42..n], b"abc");
        let mut pseudo = 17u32 + 11;
        for w in out[26..34].chunks(2) {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        assert_eq!(checksum(&out[34..n], pseudo), 0);
        let other = [0x9c, 0x40, 0, 8, 0, 11, 0, 0, b'a', b'b', b'c'];
        assert_eq!(
            respond(&ME, &ip_frame(17, &other, ME.ip), &mut out).0,
            Kind::Ignored
        );
        // Truncated frames.
        let f = ip_frame(17, &udp, ME.ip);
        for cut in [0, 13, 14, 20, 33, 40] {
            assert_eq!(
                respond(&ME, &f[..cut], &mut out).0,
                Kind::Ignored,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn arp_requests_for_the_address_get_replies() {
        let mut req = vec![0xff; 6];
        req.extend_from_slice(&[2, 0, 0, 0, 0, 1, 8, 6, 0, 1, 8, 0, 6, 4, 0, 1]);
        req.extend_from_slice(&[2, 0, 0, 0, 0, 1, 10, 0, 0, 1]);
        req.extend_from_slice(&[0; 6]);
        req.extend_from_slice(&ME.ip);
        let mut out = [0u8; 64];
        let (k, n) = respond(&ME, &req, &mut out);
        assert_eq!((k, n), (Kind::Arp, 42));
        assert_eq!(&out[20..22], &[0, 2]);
        assert_eq!(&out[22..28], &ME.mac);
        assert_eq!(&out[28..32], &ME.ip);
        assert_eq!(&out[32..42], &[2, 0, 0, 0, 0, 1, 10, 0, 0, 1]);
        req[41] = 9;
        assert_eq!(respond(&ME, &req, &mut out).0, Kind::Ignored);
    }
}
