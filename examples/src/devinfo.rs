//! `devinfo`: brings an mlx5 HCA up with bareverbs and prints what `ibv_devinfo -v` would print
//! that the driver knows. Without arguments it runs against the in-process model (no root, no
//! hardware).
//!
//! Usage: `devinfo [-v] [--trace] [--background] [--pci BDF]`
//! - `-v`: device limits, like `ibv_devinfo -v`;
//! - `--trace`: the firmware commands of bring-up and teardown, with their status;
//! - `--background`: run the model on its own thread (the driver really polls);
//! - `--pci BDF`: drive a real device (or the model under QEMU) bound to `vfio-pci`
//!   (`bareverbs-vfio-bind bind BDF`), through Linux VFIO.

use std::process::ExitCode;

use bareverbs::{Config, Device, DeviceInfo, LinkLayer};
use bareverbs_hal::Hal;
use bareverbs_model::{Drive, ModelConfig, SimHal};
use bareverbs_vfio::VfioHal;

fn guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

fn print_device<H: Hal>(dev: &Device<H>, vendor_part_id: u16, verbose: bool) {
    let i: &DeviceInfo = dev.info();
    let c = &i.caps;
    let (maj, min, sub) = i.fw_version;
    let transport = match c.link_layer() {
        LinkLayer::InfiniBand | LinkLayer::Ethernet => "InfiniBand (0)",
        LinkLayer::Unknown(_) => "unknown",
    };
    println!("hca_id:\tmlx5_0");
    println!("\ttransport:\t\t\t{transport}");
    println!("\tfw_ver:\t\t\t\t{maj}.{min}.{sub}");
    println!("\tnode_guid:\t\t\t{}", guid(i.node_guid));
    println!("\tsys_image_guid:\t\t\t{}", guid(i.sys_image_guid));
    println!("\tvendor_id:\t\t\t{:#06x}", i.vendor_id);
    println!("\tvendor_part_id:\t\t\t{vendor_part_id}");
    println!("\tboard_id:\t\t\t{}", i.board_id());
    println!("\tphys_port_cnt:\t\t\t{}", c.num_ports);
    if verbose {
        let mr = if c.log_max_mr_size >= 64 {
            u64::MAX
        } else {
            1u64 << c.log_max_mr_size
        };
        println!("	max_mr_size:			{mr:#x}");
        println!("\tmax_qp:\t\t\t\t{}", c.max_qp);
        println!("\tmax_qp_wr:\t\t\t{}", c.max_qp_wr);
        println!("\tmax_cq:\t\t\t\t{}", c.max_cq);
        println!("\tmax_cqe:\t\t\t{}", c.max_cqe);
        println!("\tmax_mr:\t\t\t\t{}", c.max_mr);
        println!("\tmax_pd:\t\t\t\t{}", c.max_pd);
        println!("\tmax_qp_rd_atom:\t\t\t{}", c.max_qp_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t\t{}", c.max_qp_init_rd_atom);
        println!("\tmax_srq:\t\t\t{}", c.max_srq);
        println!("\tmax_srq_wr:\t\t\t{}", c.max_srq_wr);
        println!("\tmax_mcast_grp:\t\t\t{}", c.max_mcast_grp);
        println!("\tmax_mcast_qp_attach:\t\t{}", c.max_mcast_qp_attach);
        println!("\tmax_pkeys:\t\t\t{}", c.pkey_table_len);
        println!("\tmax_msg_sz:\t\t\t{:#x}", c.max_msg_size);
        println!(
            "\tatomic_cap:\t\t\t{}",
            // mlx5_ib `get_atomic_caps`: HCA atomics only with host-endian requests.
            if c.ib_atomics {
                "ATOMIC_HCA (1)"
            } else {
                "ATOMIC_NONE (0)"
            }
        );
        println!("\thca_core_clock:\t\t\t{}kHZ", c.device_frequency_khz);
        println!("\tcmdif_rev:\t\t\t{}", i.cmdif_rev);
        println!("\tissi:\t\t\t\t{}", i.issi);
        println!("\treserved_lkey:\t\t\t{:#x}", i.special.resd_lkey);
        println!("\tfw_pages:\t\t\t{}", dev.pages_given());
    }
    for p in dev.ports() {
        println!("\t\tport:\t{}", p.port);
        println!("\t\t\tstate:\t\t\t{}", p.state);
        println!(
            "\t\t\tphys_state:\t\t{}",
            if p.phys_state == 5 {
                "LINK_UP (5)".to_string()
            } else {
                p.phys_state.to_string()
            }
        );
        println!("\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
        println!("\t\t\tport_lid:\t\t{}", p.lid);
        println!("\t\t\tport_lmc:\t\t{:#04x}", p.lmc);
        println!(
            "\t\t\tlink_layer:\t\t{}",
            match p.link_layer {
                LinkLayer::InfiniBand => "InfiniBand",
                LinkLayer::Ethernet => "Ethernet",
                LinkLayer::Unknown(_) => "unknown",
            }
        );
        if verbose {
            println!("\t\t\tport_cap_flags:\t\t{:#010x}", p.cap_mask);
            println!("\t\t\tport_guid:\t\t{}", guid(p.port_guid));
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut verbose = false;
    let mut trace = false;
    let mut drive = Drive::Synchronous;
    let mut pci = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-v" | "--verbose" => verbose = true,
            "--trace" => trace = true,
            "--background" => drive = Drive::Background,
            "--pci" => match it.next() {
                Some(b) => pci = Some(b.clone()),
                None => {
                    eprintln!("devinfo: --pci needs a PCI address such as 0000:01:00.0");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("usage: devinfo [-v] [--trace] [--background] [--pci BDF]");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("devinfo: unknown argument {other:?} (try --help)");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(bdf) = pci {
        let hal = match VfioHal::open(&bdf) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("devinfo: {e}");
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    eprintln!("  caused by: {s}");
                    src = s.source();
                }
                return ExitCode::FAILURE;
            }
        };
        let part = hal.pci_id().1;
        return run(hal, part, verbose, trace);
    }
    let model_cfg = ModelConfig::default();
    let part = model_cfg.device_id;
    let hal = SimHal::new(model_cfg, drive);
    let model = hal.model();
    let code = run(&hal, part, verbose, trace);
    if trace {
        println!("\npages still held by firmware: {}", model.pages_held());
    }
    code
}

/// Brings the device up, prints it, tears it down.
fn run<H: Hal>(hal: H, part: u16, verbose: bool, trace: bool) -> ExitCode {
    let dev = match Device::bring_up(hal, Config::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("devinfo: bring-up failed at {e}");
            return ExitCode::FAILURE;
        }
    };
    print_device(&dev, part, verbose);
    if trace {
        println!("\nbring-up commands (driver's trace):");
        for r in dev.trace().iter() {
            println!("  {r}");
        }
    }
    match dev.teardown() {
        Ok(()) => {
            if trace {
                println!("\nteardown: OK");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("devinfo: teardown failed at {e}");
            ExitCode::FAILURE
        }
    }
}
