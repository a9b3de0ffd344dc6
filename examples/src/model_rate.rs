//! `model_rate`: how fast the model executes RDMA WRITEs in the synchronous drive (the
//! doorbell runs the model on the posting thread, as every in-process test does). One RC QP
//! on one model HCA writes to a second QP of the same HCA (loopback through LID 1), in
//! batches of 32 with the last signaled; each batch is posted, executed and polled.
//!
//! Usage: `model_rate [--vfio-user] SIZE ITERS` — prints WQEs per second and payload bytes per
//! second. With `--vfio-user` the same loop runs against the model's vfio-user server (the one
//! QEMU's `vfio-user-pci` talks to) on its own thread, over its socket, through the driver's
//! vfio-user client HAL: every doorbell is a socket message, every WQE and payload is read from
//! the client's shared memory, and each batch's completion is polled for until it comes.
//! `qemu-tests/bench/model-rate.sh` runs both and counts the model's instructions per WQE
//! under callgrind (the doorbell handler and what it calls).

use std::time::{Duration, Instant};

use bareverbs::testing::{cap, with_rc_pair, PairAttr};
use bareverbs::verbs::*;
use bareverbs::{Config, Device};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

const BATCH: usize = 32;

/// Bytes of the vfio-user client's shared memory (rings, books and the two buffers).
const VFIO_USER_MEMORY: usize = 64 << 20;

fn main() {
    let mut a: Vec<String> = std::env::args().skip(1).collect();
    let vfio_user = a.first().is_some_and(|s| s == "--vfio-user");
    if vfio_user {
        a.remove(0);
    }
    let (Some(size), Some(iters), None) = (
        a.first().and_then(|s| s.parse::<u32>().ok()),
        a.get(1).and_then(|s| s.parse::<usize>().ok()),
        a.get(2),
    ) else {
        eprintln!("usage: model_rate [--vfio-user] SIZE ITERS");
        std::process::exit(2);
    };
    if size == 0 || size > 1 << 20 {
        eprintln!("model_rate: SIZE must be 1..=1048576");
        std::process::exit(2);
    }
    if !vfio_user {
        rate(SimHal::synchronous(), "in process", size, iters);
        return;
    }
    let sock = std::env::temp_dir().join(format!("model-rate-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let s = sock.clone();
    let server = std::thread::spawn(move || {
        bareverbs_model::vfio_user::serve(&s, bareverbs_model::ModelConfig::default(), None, None)
    });
    let start = Instant::now();
    while !sock.exists() {
        if start.elapsed() > Duration::from_secs(10) {
            eprintln!("model_rate: the vfio-user server never listened");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let hal = bareverbs_vfio::VfioUserHal::connect(&sock, VFIO_USER_MEMORY)
        .unwrap_or_else(|e| panic!("{e}"));
    rate(&hal, "over vfio-user", size, iters);
    drop(hal);
    let _ = std::fs::remove_file(&sock);
    match server.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("model_rate: the vfio-user server failed: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("model_rate: the vfio-user server panicked");
            std::process::exit(1);
        }
    }
}

/// Brings a device up on `hal`, runs the loop and prints the rate (`how`: where the model is).
fn rate<H: Hal>(hal: H, how: &str, size: u32, iters: usize) {
    let dev = Device::bring_up(hal, Config::default()).unwrap_or_else(|e| panic!("{e}"));
    let len = size as usize;
    // Two RC QPs connected on the device's port: `a` writes the first half of the region
    // into its second half, a batch of BATCH at a time.
    let attr = PairAttr {
        cap: QpCap {
            max_send_wr: BATCH as u32,
            ..cap(1, 1, 0)
        },
        send_cqe: 255,
        recv_cqe: 255,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        mtu: Mtu::Mtu4096,
        region_len: 2 * len,
        ..PairAttr::new(cap(1, 1, 0))
    };
    with_rc_pair(&dev, attr, |p| {
        p.mr.buf().fill(0, len, 0x5a).unwrap();
        let (raddr, rkey) = p.remote(len as u64);
        let sge = [p.sge(0, size)];
        let mut wc = [Wc::EMPTY; BATCH];
        let run = |qa: &mut Qp<'_, '_, _>, scq: &mut Cq<'_, _>, wc: &mut [Wc], n: usize| {
            for _ in 0..n {
                let ok = qa.send_batch(|b| {
                    for i in 0..BATCH {
                        let flags = if i == BATCH - 1 {
                            SendFlags::SIGNALED
                        } else {
                            SendFlags::empty()
                        };
                        if b.rdma_write(i as u64, flags, raddr, rkey, &sge).is_err() {
                            return false;
                        }
                    }
                    true
                });
                if ok != Ok(true) {
                    eprintln!("model_rate: posting failed: {ok:?}");
                    std::process::exit(1);
                }
                // In process the completion is there when the doorbell returns; over vfio-user
                // the server's thread writes it meanwhile.
                let waited = Instant::now();
                let got = loop {
                    let got = scq.poll(wc);
                    if got != 0 || waited.elapsed() > Duration::from_secs(10) {
                        break got;
                    }
                    std::hint::spin_loop();
                };
                if got != 1 || wc[0].status != WcStatus::Success {
                    eprintln!("model_rate: expected one successful completion, got {got}");
                    std::process::exit(1);
                }
            }
        };
        // Warm up (allocator, caches), then time.
        run(&mut p.a, &mut p.scq, &mut wc, (iters / 10).max(1));
        let t = Instant::now();
        run(&mut p.a, &mut p.scq, &mut wc, iters);
        let secs = t.elapsed().as_secs_f64();
        let wqes = (iters * BATCH) as f64;
        let mut got = vec![0u8; len];
        p.mr.buf().read_bytes(len, &mut got).unwrap();
        if got.iter().any(|&b| b != 0x5a) {
            eprintln!("model_rate: the target does not hold the payload");
            std::process::exit(1);
        }
        println!(
        "model_rate: {size} B RDMA WRITE {how}, {} WQEs in {secs:.3} s: {:.2} M WQE/s, {:.2} GB/s of payload",
        iters * BATCH,
        wqes / secs / 1e6,
        wqes * f64::from(size) / secs / 1e9
    );
    });
}
