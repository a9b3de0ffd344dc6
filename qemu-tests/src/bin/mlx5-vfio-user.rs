//! `mlx5-vfio-user`: serves modelled ConnectX-5 HCAs to QEMU's `vfio-user-pci`.
//!
//! Usage: `mlx5-vfio-user --socket PATH [--socket PATH ...] [--trace-dir DIR] [--eth]`
//!
//! Each socket is one HCA (node GUIDs differ per HCA). With `--trace-dir`, HCA n writes its
//! firmware command trace to `DIR/hca<n>.trace` as commands complete. The process exits when
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
            "-h" | "--help" => return usage(""),
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    if sockets.is_empty() {
        return usage("give at least one --socket");
    }
    // Every HCA of this server is on one fabric: they reach each other by LID.
    let fabric = bareverbs_model::Fabric::new();
    let threads: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(n, path)| {
            let mut cfg = ModelConfig::default();
            cfg.node_guid += (n as u64) << 8;
            cfg.base_lid += 16 * n as u16;
            cfg.port_type_eth = eth;
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
    eprintln!("usage: mlx5-vfio-user --socket PATH [--socket PATH ...] [--trace-dir DIR] [--eth]");
    if msg.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
