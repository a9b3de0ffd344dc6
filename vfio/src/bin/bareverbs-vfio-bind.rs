//! bareverbs-vfio-bind: binds a PCI function to vfio-pci and back, like driverctl, and shows
//! what sysfs says about it.
//!
//! ```text
//! bareverbs-vfio-bind bind   0000:01:00.0   # driver_override=vfio-pci, unbind, reprobe
//! bareverbs-vfio-bind unbind 0000:01:00.0   # clear driver_override, unbind, reprobe
//! bareverbs-vfio-bind status 0000:01:00.0   # driver, IOMMU group, vendor:device
//! ```
//! Exit status: 0 done, 1 the operation failed (the message says what to do), 2 bad usage.

use std::error::Error;
use std::process::ExitCode;

use bareverbs_vfio::bind::{self, BindOutcome};
use bareverbs_vfio::{Bdf, VfioError};

const USAGE: &str = "usage: bareverbs-vfio-bind bind|unbind|status <BDF>
  bind    bind the PCI function to vfio-pci (driver_override, unbind, drivers_probe)
  unbind  give it back to its default driver
  status  show its driver, driver_override, IOMMU group and vendor:device
BDF is the PCI address as `lspci -D` prints it, e.g. 0000:01:00.0. bind and unbind need root.";

/// Warnings and errors from the library, on stderr.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!(
                "{}: {}",
                record.level().as_str().to_lowercase(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

fn run(cmd: &str, bdf: Bdf) -> Result<(), VfioError> {
    match cmd {
        "bind" => {
            match bind::bind(bdf)? {
                BindOutcome::AlreadyBound => println!("{bdf}: already bound to vfio-pci"),
                BindOutcome::Bound { previous } => println!(
                    "{bdf}: bound to vfio-pci (was {})",
                    previous.as_deref().unwrap_or("unbound")
                ),
            }
            if let Some(g) = bind::status(bdf)?.iommu_group {
                println!("{bdf}: open it through /dev/vfio/{g}");
            }
        }
        "unbind" => match bind::unbind(bdf)? {
            Some(d) => println!("{bdf}: now bound to {d}"),
            None => println!("{bdf}: now bound to no driver"),
        },
        _ => println!("{}", bind::status(bdf)?),
    }
    Ok(())
}

fn main() -> ExitCode {
    let _ = log::set_logger(&StderrLog).map(|()| log::set_max_level(log::LevelFilter::Warn));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, bdf) = match args.as_slice() {
        [h] if h == "-h" || h == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        [cmd, bdf] if ["bind", "unbind", "status"].contains(&cmd.as_str()) => (cmd, bdf),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = bdf.parse::<Bdf>().and_then(|bdf| run(cmd, bdf));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = e.source();
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::from(1)
        }
    }
}
