//! `mlx5-vfio-user`: serves modelled ConnectX-5 HCAs to QEMU's `vfio-user-pci`.
//!
//! Usage: `mlx5-vfio-user --socket PATH [--socket PATH ...] [--trace-dir DIR] [--eth]
//! [--pages-before OPCODE:N]`
//!
//! Each socket is one HCA (node GUIDs differ per HCA). With `--trace-dir`, HCA n writes its
//! firmware command trace to `DIR/hca<n>.trace` as commands complete. `--pages-before`
//! makes firmware ask for N more pages (a page-request EQE) the first time OPCODE (hex) runs
//! after each reset, holding that command until they arrive. The process exits when
//! every client has disconnected.

use std::path::PathBuf;
use std::process::ExitCode;

use bareverbs_model::vfio_user::serve;
use bareverbs_model::ModelConfig;

struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record<'_>) {
        eprintln!("mlx5-vfio-user {} {}", r.level(), r.args());
    }
    fn flush(&self) {}
}

fn main() -> ExitCode {
    let _ = log::set_logger(&StderrLog);
    log::set_max_level(match std::env::var("MLX5_VFIO_USER_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("warn") => log::LevelFilter::Warn,
        _ => log::LevelFilter::Info,
    });
    let mut sockets = Vec::new();
    let mut trace_dir: Option<PathBuf> = None;
    let mut eth = false;
    let mut pages_before = None;
    let mut pcap: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => match args.next() {
                Some(p) => sockets.push(PathBuf::from(p)),
                None => return usage("--socket needs a path"),
            },
            "--trace-dir" => match args.next() {
                Some(p) => trace_dir = Some(PathBuf::from(p)),
                None => return usage("--trace-dir needs a directory"),
            },
            "--eth" => eth = true,
            "--pcap" => match args.next() {
                Some(p) => pcap = Some(PathBuf::from(p)),
                None => return usage("--pcap needs a file"),
            },
            "--pages-before" => match args.next().as_deref().and_then(parse_pages_before) {
                Some(p) => pages_before = Some(p),
                None => return usage("--pages-before needs OPCODE:N, e.g. 0x200:8"),
            },
            "-h" | "--help" => return usage(""),
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    if sockets.is_empty() {
        return usage("give at least one --socket");
    }
    // Every HCA of this server is on one fabric: they reach each other by LID.
    let fabric = bareverbs_model::Fabric::new();
    if let Some(p) = &pcap {
        if let Err(e) = fabric.capture_to(p) {
            return usage(&format!("--pcap {}: {e}", p.display()));
        }
        log::info!("capturing the fabric to {}", p.display());
    }
    let threads: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(n, path)| {
            let mut cfg = ModelConfig::default();
            cfg.node_guid += (n as u64) << 8;
            cfg.base_lid += 16 * n as u16;
            cfg.port_type_eth = eth;
            cfg.faults.pages_before = pages_before;
            let trace = trace_dir.as_ref().map(|d| d.join(format!("hca{n}.trace")));
            let fabric = fabric.clone();
            std::thread::spawn(move || serve(&path, cfg, trace.as_deref(), Some(&fabric)))
        })
        .collect();
    let mut ok = true;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("mlx5-vfio-user: {e}");
                ok = false;
            }
            Err(_) => ok = false,
        }
    }
    match fabric.stop_capture() {
        Ok(0) => {}
        Ok(n) => log::info!("capture: {n} packets"),
        Err(e) => {
            eprintln!("mlx5-vfio-user: capture: {e}");
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn usage(msg: &str) -> ExitCode {
    if !msg.is_empty() {
        eprintln!("mlx5-vfio-user: {msg}");
    }
    eprintln!(
        "usage: mlx5-vfio-user --socket PATH [--socket PATH ...] [--trace-dir DIR] [--eth] \
         [--pages-before OPCODE:N] [--pcap FILE]"
    );
    if msg.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

/// `0x200:8` -> (0x200, 8): opcode in hex, page count (negative: firmware returns pages).
fn parse_pages_before(s: &str) -> Option<(u16, i32)> {
    let (op, n) = s.split_once(':')?;
    let op = u16::from_str_radix(op.trim_start_matches("0x"), 16).ok()?;
    Some((op, n.parse().ok()?))
}
