//! Bring-up and teardown of the driver against the model: both drives, every failure path,
//! long mailbox chains, page requests and events. Each test asserts what a user sees: the
//! step and error, the firmware state left behind, and whether any memory is still allocated.

use std::time::{Duration, Instant};

use bareverbs::{AsyncEvent, CmdFailure, Config, Device, Error, FatalSensor, PortState, Step};
use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus, Opcode};
use bareverbs_model::{CommandFault, Drive, FaultAction, Faults, HcaState, ModelConfig, SimHal};

const SYNDROME: u32 = 0xdead_0001;

fn quick() -> Config {
    let mut cfg = Config::default();
    cfg.timeouts.command = Duration::from_millis(50);
    cfg
}

fn hal_with(faults: Faults) -> SimHal {
    SimHal::new(
        ModelConfig {
            faults,
            ..ModelConfig::default()
        },
        Drive::Synchronous,
    )
}

/// The device is back where it started: firmware disabled, no pages, no DMA memory.
fn assert_clean(hal: &SimHal) {
    let m = hal.model();
    assert_eq!(
        m.state(),
        HcaState::Disabled,
        "firmware state\n{}",
        m.trace_text()
    );
    assert_eq!(m.pages_held(), 0, "pages held by firmware");
    assert_eq!(m.memory().allocations(), 0, "DMA allocations left");
    assert!(
        m.dma_faults().is_empty(),
        "DMA faults: {:?}",
        m.dma_faults()
    );
}

#[test]
fn bring_up_and_teardown_in_both_drives_twice() {
    for drive in [Drive::Synchronous, Drive::Background] {
        let hal = SimHal::new(ModelConfig::default(), drive);
        for round in 0..2 {
            let dev = Device::bring_up(&hal, Config::default()).unwrap();
            let m = hal.model();
            assert_eq!(m.state(), HcaState::Initialized);
            let i = dev.info();
            assert_eq!(i.fw_version, (16, 35, 2000));
            assert_eq!(i.issi, 1);
            assert_eq!(i.caps.num_ports, 1, "a ConnectX-5 function has one port");
            assert_eq!(i.caps.max_qp, 1 << 18, "log_max_qp set to min(18, max)");
            assert_eq!(i.vendor_id, 0x02c9);
            assert_eq!(i.board_id(), "MT_0000000008");
            assert_eq!(i.node_guid, ModelConfig::default().node_guid);
            assert_eq!(i.special.resd_lkey, 0x200);
            assert_eq!(dev.pages_given(), 144);
            assert_eq!(m.pages_held(), 144);
            assert_eq!(m.host_endianness(), Some(0));
            assert!(dev.uar().unwrap().index().raw() >= 8);
            assert_eq!(m.eq_count(), 1);
            let ports = dev.ports();
            assert_eq!(ports.len(), 1);
            assert_eq!(ports[0].state, PortState::Active);
            assert_eq!(ports[0].lid, 1);
            dev.teardown()
                .unwrap_or_else(|e| panic!("{drive:?} round {round}: {e}"));
            assert_clean(&hal);
        }
    }
}

#[test]
fn bring_up_in_and_teardown_in_use_the_callers_storage() {
    let hal = SimHal::new(ModelConfig::default(), Drive::Synchronous);
    let mut slot = None;
    let dev = Device::bring_up_in(&mut slot, &hal, Config::default()).unwrap();
    assert_eq!(hal.model().state(), HcaState::Initialized);
    dev.alloc_pd().unwrap().dealloc().unwrap();
    // Into a slot that holds a device: that one is torn down first.
    Device::bring_up_in(&mut slot, &hal, Config::default()).unwrap();
    assert_eq!(hal.model().state(), HcaState::Initialized);
    let teardowns = hal
        .model()
        .trace()
        .iter()
        .filter(|t| t.opcode == Opcode::TEARDOWN_HCA)
        .count();
    assert_eq!(teardowns, 1);
    Device::teardown_in(&mut slot).unwrap();
    assert!(slot.is_none());
    assert_clean(&hal);
    // An empty slot: nothing to do.
    Device::teardown_in(&mut slot).unwrap();

    // A bring-up that fails leaves the slot empty and the device as it found it.
    let hal = hal_with(Faults {
        commands: vec![CommandFault {
            opcode: Opcode::INIT_HCA.0,
            op_mod: None,
            skip: 0,
            times: Some(1),
            action: FaultAction::Status(CmdStatus::BadParameter, SYNDROME),
        }],
        ..Faults::default()
    });
    let mut slot = None;
    let e = Device::bring_up_in(&mut slot, &hal, quick()).err().unwrap();
    assert_eq!(e.step, Step::InitHca);
    assert!(slot.is_none());
    assert_clean(&hal);
}

#[test]
fn driver_trace_matches_the_model_and_linux_order() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let driver: Vec<Opcode> = dev.trace().iter().map(|r| r.opcode).collect();
    let model: Vec<Opcode> = hal.model().trace().iter().map(|t| t.opcode).collect();
    assert_eq!(driver, model);
    // mlx5-reference 03 §1: the order Linux and mlx5_vfio use.
    let want = [
        Opcode::ENABLE_HCA,
        Opcode::QUERY_ISSI,
        Opcode::SET_ISSI,
        Opcode::QUERY_PAGES,
        Opcode::MANAGE_PAGES,
        Opcode::ACCESS_REG,
        Opcode::QUERY_HCA_CAP,
        Opcode::QUERY_HCA_CAP,
        Opcode::SET_HCA_CAP,
        // Linux handle_hca_cap_atomic: the atomic group (current, maximum), then host-endian
        // requests.
        Opcode::QUERY_HCA_CAP,
        Opcode::QUERY_HCA_CAP,
        Opcode::SET_HCA_CAP,
        Opcode::QUERY_PAGES,
        Opcode::MANAGE_PAGES,
        Opcode::INIT_HCA,
    ];
    assert_eq!(&driver[..want.len()], &want);
    let op_mods: Vec<u16> = dev
        .trace()
        .iter()
        .skip(6)
        .take(6)
        .map(|r| r.op_mod)
        .collect();
    // (group << 1) | mode: general max, general current, set general; atomic (group 3)
    // current, maximum, set.
    assert_eq!(op_mods, [0, 1, 0, 7, 6, 6]);
    assert!(dev.info().caps.ib_atomics, "host-endian atomics enabled");
    assert!(dev.trace().iter().all(|r| r.to_string().ends_with("OK")));
}

#[test]
fn firmware_never_ready_times_out_without_touching_memory() {
    let hal = hal_with(Faults {
        never_ready: true,
        ..Faults::default()
    });
    let e = Device::bring_up(&hal, Config::default()).err().unwrap();
    assert_eq!(e.step, Step::WaitFirmware);
    assert!(matches!(e.error, Error::FirmwareNotReady { waited_ms } if waited_ms >= 120_000));
    assert_eq!(hal.model().memory().allocations(), 0);
    assert!(hal.model().trace().is_empty());
}

#[test]
fn wrong_command_interface_revision() {
    let hal = hal_with(Faults {
        cmdif_rev: Some(4),
        ..Faults::default()
    });
    let e = Device::bring_up(&hal, Config::default()).err().unwrap();
    assert_eq!(
        (e.step, e.error),
        (
            Step::CommandInterface,
            Error::UnsupportedCmdInterface { revision: 4 }
        )
    );
    assert_eq!(hal.model().memory().allocations(), 0);
}

#[test]
fn a_command_that_never_completes_is_a_timeout_and_nothing_is_reused() {
    for drive in [Drive::Synchronous, Drive::Background] {
        let faults = Faults::default().stall(Opcode::INIT_HCA.0);
        let hal = SimHal::new(
            ModelConfig {
                faults,
                ..ModelConfig::default()
            },
            drive,
        );
        let mut cfg = Config::default();
        cfg.timeouts.command = Duration::from_millis(300);
        let start = Instant::now();
        let e = Device::bring_up(&hal, cfg).err().unwrap();
        assert!(start.elapsed() < Duration::from_secs(20));
        assert_eq!(e.step, Step::InitHca);
        assert_eq!(
            e.error,
            Error::CommandTimeout {
                opcode: Opcode::INIT_HCA
            }
        );
        // No command after the one that hung, and the memory the device may still write
        // (queue, mailboxes, pages) is leaked rather than freed.
        let trace = hal.model().trace();
        assert_eq!(trace.last().unwrap().opcode, Opcode::MANAGE_PAGES);
        assert!(hal.model().memory().allocations() > 0);
        assert_eq!(hal.model().pages_held(), 144);
    }
}

#[test]
fn a_failed_command_at_each_step_names_the_step_and_undoes_everything() {
    let cases: &[(u16, Option<u16>, u32, Step)] = &[
        (0x104, None, 0, Step::EnableHca),
        (0x10b, None, 0, Step::Issi),
        (0x107, Some(1), 0, Step::BootPages),
        (0x108, None, 0, Step::BootPages),
        (0x805, None, 0, Step::HostEndianness),
        (0x100, Some(0), 0, Step::SetCaps),
        (0x100, Some(1), 0, Step::SetCaps),
        (0x109, None, 0, Step::SetCaps),
        (0x107, Some(2), 0, Step::InitPages),
        (0x108, None, 1, Step::InitPages),
        (0x102, None, 0, Step::InitHca),
        (0x100, Some(1), 1, Step::QueryCaps),
        (0x101, None, 0, Step::QueryCaps),
        (0x10d, None, 0, Step::DriverVersion),
        (0x802, None, 0, Step::AllocUar),
        (0x301, None, 0, Step::CreateEq),
        (0x203, None, 0, Step::SpecialContexts),
        (0x762, None, 0, Step::PortState),
    ];
    for &(opcode, op_mod, skip, step) in cases {
        let faults = Faults {
            commands: vec![CommandFault {
                opcode,
                op_mod,
                skip,
                times: Some(1),
                action: FaultAction::Status(CmdStatus::BadParameter, SYNDROME),
            }],
            ..Faults::default()
        };
        let hal = hal_with(faults);
        let e = Device::bring_up(&hal, quick())
            .err()
            .unwrap_or_else(|| panic!("{opcode:#x} did not fail"));
        assert_eq!(e.step, step, "{opcode:#x}");
        let Error::Command(c) = e.error else {
            panic!("{opcode:#x}: {e}")
        };
        assert_eq!(c.opcode, Opcode(opcode));
        assert_eq!(
            c.failure,
            CmdFailure::Status {
                status: CmdStatus::BadParameter,
                syndrome: SYNDROME
            }
        );
        if step == Step::EnableHca {
            assert_eq!(hal.model().memory().allocations(), 0);
            continue;
        }
        assert_clean(&hal);
    }
}

#[test]
fn delivery_errors_are_reported_as_such() {
    let faults = Faults {
        commands: vec![CommandFault {
            opcode: Opcode::QUERY_HCA_CAP.0,
            op_mod: None,
            skip: 0,
            times: Some(1),
            action: FaultAction::Delivery(DeliveryStatus::TokenError),
        }],
        ..Faults::default()
    };
    let hal = hal_with(faults);
    let e = Device::bring_up(&hal, quick()).err().unwrap();
    assert_eq!(e.step, Step::SetCaps);
    assert!(
        matches!(e.error, Error::Command(c) if c.failure == CmdFailure::Delivery(DeliveryStatus::TokenError))
    );
    assert_clean(&hal);
}

#[test]
fn query_issi_refused_means_issi_0_like_linux() {
    let hal = hal_with(Faults::default().fail(Opcode::QUERY_ISSI.0, CmdStatus::BadOperation, 1));
    let dev = Device::bring_up(&hal, quick()).unwrap();
    assert_eq!(dev.info().issi, 0);
    assert!(!hal
        .model()
        .trace()
        .iter()
        .any(|t| t.opcode == Opcode::SET_ISSI));
    dev.teardown().unwrap();
    assert_clean(&hal);
}

#[test]
fn page_requests_the_driver_cannot_satisfy() {
    // More pages than the page table tracks.
    let hal = SimHal::new(
        ModelConfig {
            boot_pages: 200_000,
            ..ModelConfig::default()
        },
        Drive::Synchronous,
    );
    let e = Device::bring_up(&hal, quick()).err().unwrap();
    assert_eq!(e.step, Step::BootPages);
    assert!(matches!(e.error, Error::PageTableFull { .. }), "{e}");
    assert_clean(&hal);

    // Memory runs out between boot and init pages (boot pages fill most of the first 2 MiB
    // chunk, init pages need a second one): boot pages are taken back.
    let hal = SimHal::new(
        ModelConfig {
            boot_pages: 500,
            ..ModelConfig::default()
        },
        Drive::Synchronous,
    );
    hal.model()
        .memory()
        .set_limit(Some((2 << 20) + (200 << 10)));
    let e = Device::bring_up(&hal, quick()).err().unwrap();
    assert_eq!(e.step, Step::InitPages);
    assert!(
        matches!(
            e.error,
            Error::Dma(bareverbs_hal::DmaError::NoMemory { .. })
        ),
        "{e}"
    );
    assert_clean(&hal);
}

#[test]
fn mailbox_chains_longer_than_one_block_both_ways() {
    // 700 init pages: GIVEs of 256 + 256 + 188 addresses (5 + 5 + 3 input blocks) and TAKEs
    // of 256 + 256 + 204 (5 + 5 + 4 output blocks); QUERY_HCA_CAP output is 8 blocks.
    let hal = SimHal::new(
        ModelConfig {
            init_pages: 700,
            ..ModelConfig::default()
        },
        Drive::Synchronous,
    );
    let dev = Device::bring_up(&hal, quick()).unwrap();
    assert_eq!(hal.model().pages_held(), 716);
    assert_eq!(
        dev.info().caps.log_bf_reg_size,
        9,
        "field from the last output block"
    );
    let before = hal.model().trace().len();
    dev.teardown().unwrap();
    let takes = hal.model().trace()[before..]
        .iter()
        .filter(|t| t.opcode == Opcode::MANAGE_PAGES)
        .count();
    assert_eq!(takes, 3);
    assert_clean(&hal);
}

#[test]
fn firmware_asking_for_pages_in_the_middle_of_a_command() {
    for drive in [Drive::Synchronous, Drive::Background] {
        let faults = Faults {
            pages_before: Some((Opcode::QUERY_SPECIAL_CONTEXTS.0, 40)),
            ..Faults::default()
        };
        let hal = SimHal::new(
            ModelConfig {
                faults,
                ..ModelConfig::default()
            },
            drive,
        );
        let dev = Device::bring_up(&hal, Config::default()).unwrap();
        assert_eq!(dev.pages_given(), 184);
        assert_eq!(hal.model().pages_held(), 184);
        // The GIVE went on the page slot while QUERY_SPECIAL_CONTEXTS waited on slot 0.
        let trace = hal.model().trace();
        let give = trace
            .iter()
            .rev()
            .find(|t| t.opcode == Opcode::MANAGE_PAGES)
            .unwrap();
        assert_eq!(give.slot, 31);
        dev.teardown().unwrap();
        assert_clean(&hal);
    }
}

#[test]
fn runtime_page_requests_and_port_events() {
    // Two ports on one function (as on Connect-IB): events name the port that changed.
    let cfg = ModelConfig {
        num_ports: 2,
        ..ModelConfig::default()
    };
    let hal = SimHal::new(cfg, Drive::Synchronous);
    let m = hal.model();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    m.request_pages(10);
    assert_eq!(dev.poll_events(), 1);
    assert_eq!(dev.pages_given(), 154);
    m.request_pages(-6);
    dev.poll_events();
    assert_eq!(dev.pages_given(), 148);
    assert_eq!(m.pages_held(), 148);
    m.set_port(2, false);
    dev.poll_events();
    assert_eq!(dev.next_event(), Some(AsyncEvent::PortErr { port: 2 }));
    assert_eq!(dev.next_event(), None);
    assert_eq!(dev.query_port(2).unwrap().state, PortState::Down);
    assert_eq!(dev.query_port(3), Err(Error::NoSuchPort { port: 3 }));

    // No memory for a request: the driver tells firmware it cannot give.
    m.memory().set_limit(Some(m.memory().allocated_bytes()));
    m.request_pages(600);
    dev.poll_events();
    assert_eq!(dev.pages_given(), 148);
    let last = m.trace().last().copied().unwrap();
    assert_eq!((last.opcode, last.op_mod), (Opcode::MANAGE_PAGES, 0));
    m.memory().set_limit(None);
    dev.teardown().unwrap();
    assert_clean(&hal);
}

#[test]
fn health_and_surprise_removal() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, quick()).unwrap();
    let a = dev.check_health();
    bareverbs_hal::Hal::delay(&&hal, Duration::from_millis(50));
    let b = dev.check_health();
    assert!(a.fatal.is_none() && b.counter > a.counter && !b.stalled);
    m.set_faults(|f| f.health_stalled = true);
    // The last moving reading was `b`; the third unchanged one after it is a stall (Linux
    // MAX_MISSES = 3).
    let stalled: Vec<bool> = (0..4).map(|_| dev.check_health().stalled).collect();
    assert_eq!(stalled, [false, false, true, true]);
    m.set_health(0x08, true);
    assert_eq!(dev.check_health().fatal, Some(FatalSensor::FwSyndromeRfr));
    m.set_health(0, false);
    m.set_faults(|f| f.removed = true);
    assert_eq!(dev.check_health().fatal, Some(FatalSensor::PciCommError));
    assert_eq!(dev.query_port(1), Err(Error::DeviceGone));
    assert_eq!(dev.query_port(1), Err(Error::CommandInterfaceWedged));
    drop(dev); // must not hang or free memory the device might still use
    assert!(m.memory().allocations() > 0);

    let hal = hal_with(Faults {
        removed: true,
        ..Faults::default()
    });
    let e = Device::bring_up(&hal, quick()).err().unwrap();
    assert_eq!((e.step, e.error), (Step::WaitFirmware, Error::DeviceGone));
}

#[test]
fn dropping_a_device_tears_it_down() {
    let hal = SimHal::synchronous();
    {
        let _dev = Device::bring_up(&hal, Config::default()).unwrap();
    }
    assert_clean(&hal);
}

#[test]
fn a_wedged_device_reports_what_it_kept_and_recovers_after_a_function_reset() {
    // A command that never completes wedges the command interface: teardown cannot return
    // the pages firmware holds and says how many (they stay leaked, never freed), the HAL's
    // function reset makes the device forget them, and a new bring-up on the same HAL works
    // (the old device's objects cannot outlive it: they borrow it).
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = Device::bring_up(&hal, quick()).unwrap();
    let held = dev.pages_given();
    assert!(held > 0);
    m.set_faults(|f| *f = Faults::default().stall(0x200));
    let pd = dev.alloc_pd().unwrap();
    let dma = bareverbs_hal::Hal::dma_alloc(&&hal, 4096, 4096)
        .unwrap()
        .share();
    assert!(pd
        .reg_mr(dma, bareverbs::verbs::AccessFlags::LOCAL_WRITE)
        .is_err());
    assert_eq!(dev.alloc_pd().err(), Some(Error::CommandInterfaceWedged));
    drop(pd);
    let e = dev.teardown().unwrap_err();
    assert_eq!(
        (e.step, e.error),
        (Step::ReclaimPages, Error::PagesNotReturned { count: held })
    );
    assert_eq!(m.pages_held(), held, "firmware still holds them");
    m.set_faults(|f| *f = Faults::default());
    bareverbs_hal::Hal::function_reset(&&hal).unwrap();
    assert_eq!(m.pages_held(), 0, "the reset made the device forget them");
    let dev = Device::bring_up(&hal, quick()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    drop(pd);
    dev.teardown().unwrap();
    assert_eq!(m.pages_held(), 0);
}
