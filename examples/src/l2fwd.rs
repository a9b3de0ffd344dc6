//! `l2fwd`: DPDK's l2fwd on bareverbs' burst API. Three model HCAs share a wire: a generator
//! sends UDP frames to the forwarder's MAC, the forwarder receives them on one queue, rewrites
//! their Ethernet addresses (destination: the sink, source: itself) in place and sends them
//! from another queue, and the sink counts and checks them.
//!
//! ```text
//! l2fwd [--burst B] [--bursts N] [--size BYTES] [--seconds S]
//! ```
//! It reports packets forwarded, and packets per second through the model (wall clock: the
//! model does the NIC's work in software, so this measures the model as much as the driver).
//! `qemu-tests/bench/l2fwd-cost.sh` counts, under callgrind, the instructions the forwarder
//! spends per packet in [`forward_burst`] (the model's doorbell handler, standing in for the
//! hardware, excluded).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bareverbs::eth::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};

/// Receives up to `pkts.len()` frames on `rxq`, rewrites their Ethernet addresses to
/// `dst`/`src` in their buffers and sends them on `txq`; frames the send queue has no room
/// for go back to the pool. Returns the frames forwarded.
#[inline(never)]
pub fn forward_burst<H: Hal>(
    pool: &PktPool<'_, '_, H>,
    rxq: &mut RxQueue<'_, '_, H>,
    txq: &mut TxQueue<'_, '_, H>,
    pkts: &mut [Pkt],
    macs: &[u8; 12],
) -> usize {
    let n = rxq.rx_burst(pkts);
    for p in &mut pkts[..n] {
        if pool.write(p, 0, macs).is_err() {
            return 0;
        }
    }
    let sent = txq.tx_burst(&pkts[..n]);
    for p in &pkts[sent..n] {
        let _ = pool.free(*p);
    }
    sent
}

struct Opts {
    burst: usize,
    bursts: u64,
    size: usize,
    seconds: Option<u64>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        burst: 32,
        bursts: 1000,
        size: 64,
        seconds: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{a} needs a number"))
        };
        match a.as_str() {
            "--burst" => o.burst = val()? as usize,
            "--bursts" => o.bursts = val()?,
            "--size" => o.size = val()? as usize,
            "--seconds" => o.seconds = Some(val()?),
            _ => {
                return Err(
                    "usage: l2fwd [--burst B] [--bursts N] [--size BYTES] [--seconds S]".into(),
                )
            }
        }
    }
    if o.burst == 0 || o.burst > 256 || !(60..=1514).contains(&o.size) {
        return Err("--burst 1..=256, --size 60..=1514".into());
    }
    Ok(o)
}

fn hca(n: u64, fabric: &std::sync::Arc<Fabric>) -> SimHal {
    let cfg = ModelConfig {
        port_type_eth: true,
        node_guid: ModelConfig::default().node_guid + (n << 8),
        base_lid: 1 + 16 * n as u16,
        ..ModelConfig::default()
    };
    SimHal::on_fabric(cfg, Drive::Synchronous, fabric)
}

fn run(o: &Opts) -> Result<String, String> {
    let e = |e: bareverbs::Error| e.to_string();
    let fabric = Fabric::new();
    let (hg, hf, hs) = (hca(0, &fabric), hca(1, &fabric), hca(2, &fabric));
    let (dg, df, ds) = (
        Device::bring_up(&hg, Config::default()).map_err(|e| e.to_string())?,
        Device::bring_up(&hf, Config::default()).map_err(|e| e.to_string())?,
        Device::bring_up(&hs, Config::default()).map_err(|e| e.to_string())?,
    );
    let (pg, pf, ps) = (
        dg.open_eth().map_err(e)?,
        df.open_eth().map_err(e)?,
        ds.open_eth().map_err(e)?,
    );
    let ring = (2 * o.burst as u32).max(64);
    let (pool_g, pool_f, pool_s) = (
        PktPool::new(&pg, 4 * ring, 2048).map_err(e)?,
        PktPool::new(&pf, 4 * ring, 2048).map_err(e)?,
        PktPool::new(&ps, 4 * ring, 2048).map_err(e)?,
    );
    let attr_rx = RxQueueAttr::new(ring);
    let attr_tx = TxQueueAttr::new(ring);
    let mut gen_tx = TxQueue::new(&pg, &pool_g, attr_tx).map_err(e)?;
    let mut fwd_rx = RxQueue::new(&pf, &pool_f, attr_rx).map_err(e)?;
    let mut fwd_tx = TxQueue::new(&pf, &pool_f, attr_tx).map_err(e)?;
    let mut sink_rx = RxQueue::new(&ps, &pool_s, attr_rx).map_err(e)?;
    let _rf = pf
        .add_rule(&FlowMatch::any().dmac(pf.mac()), FlowDest::Queue(&fwd_rx))
        .map_err(e)?;
    let _rs = ps
        .add_rule(&FlowMatch::any().dmac(ps.mac()), FlowDest::Queue(&sink_rx))
        .map_err(e)?;
    let mut frame = vec![0u8; o.size];
    frame[..6].copy_from_slice(&pf.mac());
    frame[6..12].copy_from_slice(&pg.mac());
    frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&ps.mac());
    macs[6..].copy_from_slice(&pf.mac());
    let (mut gen, mut fwd, mut sunk) = (
        vec![Pkt::EMPTY; o.burst],
        vec![Pkt::EMPTY; o.burst],
        vec![Pkt::EMPTY; o.burst],
    );
    let (mut forwarded, mut received, mut seq) = (0u64, 0u64, 0u32);
    let start = Instant::now();
    let deadline = o.seconds.map(|s| start + Duration::from_secs(s));
    let mut bursts = 0u64;
    let mut head = [0u8; 18];
    while deadline.map_or(bursts < o.bursts, |d| Instant::now() < d) {
        bursts += 1;
        // The generator: a burst of frames numbered in their payload.
        let mut k = 0;
        while k < o.burst {
            let Some(mut p) = pool_g.alloc() else { break };
            frame[14..18].copy_from_slice(&seq.to_be_bytes());
            pool_g.write(&mut p, 0, &frame).map_err(e)?;
            gen[k] = p;
            k += 1;
            seq = seq.wrapping_add(1);
        }
        let sent = gen_tx.tx_burst(&gen[..k]);
        for p in &gen[sent..k] {
            pool_g.free(*p).map_err(e)?;
        }
        forwarded += forward_burst(&pool_f, &mut fwd_rx, &mut fwd_tx, &mut fwd, &macs) as u64;
        // The sink: every frame from the forwarder, to the sink, in order.
        loop {
            let n = sink_rx.rx_burst(&mut sunk);
            for p in &sunk[..n] {
                pool_s.read(p, 0, &mut head).map_err(e)?;
                let want = (received as u32).to_be_bytes();
                if head[..6] != ps.mac() || head[6..12] != pf.mac() || head[14..18] != want {
                    return Err(format!("frame {received} arrived wrong: {head:02x?}"));
                }
                received += 1;
                pool_s.free(*p).map_err(e)?;
            }
            if n == 0 {
                break;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if received != forwarded {
        return Err(format!("forwarded {forwarded}, the sink got {received}"));
    }
    Ok(format!(
        "l2fwd: {forwarded} frames of {} bytes forwarded in bursts of {} and checked at the sink; {:.0} packets/s through the model (generator, forwarder and sink on one core)",
        o.size,
        o.burst,
        forwarded as f64 / secs
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
    match run(&o) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("l2fwd: {e}");
            ExitCode::FAILURE
        }
    }
}
