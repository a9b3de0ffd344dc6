//! Bring-up and teardown in the Linux / rdma-core `mlx5_vfio` order (mlx5-reference 03 §1–2,
//! DESIGN.md §3.1). Every step is tagged, every failure undoes what was done, and memory the
//! device may still use is leaked rather than freed.

use core::time::Duration;

use bareverbs_firmware_cmd::commands::*;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::init_seg::{
    self, cmd_exec_to, cmd_q_init_to, cmdif_rev_fw_sub, cmdq_addr_l_sz, fw_rev, initializing,
};
use bareverbs_firmware_cmd::{Layout, UarIndex, View, ViewMut};
use bareverbs_hal::{Deadline, Hal, Mmio};
use heapless::{Deque, Vec};

use crate::caps::{Caps, LinkLayer};
use crate::cmdq::{check_geometry, CmdQueue, Slot};
use crate::config::Config;
use crate::device::{input, Control, Device, DeviceInfo, Progress, SpecialKeys};
use crate::eq::EventQueue;
use crate::error::{AtStep, Error, Step, StepError};
use crate::health::{device_gone, HealthMonitor};
use crate::pages::PageManager;
use crate::port::{PortInfo, PortState};
use crate::trace::Trace;
use crate::uar::Uar;

/// Waits for `initializing` to clear (`wait_fw_init`).
fn wait_fw_init<H: Hal>(hal: &H, timeout: Duration, poll: Duration) -> Result<(), Error> {
    let start = hal.now();
    let deadline = Deadline::new(start, timeout);
    loop {
        let v = hal.bar0().read32(initializing::OFFSET);
        if !initializing::initializing.is_set(v) {
            return Ok(());
        }
        if device_gone(hal.bar0()) {
            return Err(Error::DeviceGone);
        }
        if deadline.expired(hal.now()) {
            let waited_ms = u64::try_from(hal.now().since(start).as_millis()).unwrap_or(u64::MAX);
            return Err(Error::FirmwareNotReady { waited_ms });
        }
        hal.delay(poll);
    }
}

/// Bytes of a QUERY_HCA_CAP output and of a SET_HCA_CAP input (header and a 4 KiB block).
const CAP_MSG: usize = QueryHcaCapOut::BYTES;
const _: () = assert!(CAP_MSG == SetHcaCapIn::BYTES);
/// One capability message.
type CapMsg = [u8; CAP_MSG];

fn cap_view(out: &[u8]) -> Result<View<'_, CmdHcaCap>, Error> {
    Ok(View::<QueryHcaCapOut>::new_checked(out)?
        .sub(query_hca_cap_out::capability)
        .sub(hca_cap_union::cmd_hca_cap))
}

/// What bring-up reads before the device exists: the firmware's revision and timeouts, the
/// command queue. Small, so that [`Device::bring_up_in`] builds the device in place.
struct Unready<H: Hal> {
    hal: H,
    cfg: Config,
    cmd: CmdQueue<H>,
    cmd_timeout: Duration,
    fw_init: Duration,
    fw_version: (u16, u16, u16),
    rev: u16,
    embedded_cpu: bool,
}

impl<H: Hal> Unready<H> {
    /// Step 1 and the command interface: firmware ready, its revision, the command queue.
    fn start(hal: H, cfg: Config) -> Result<Self, StepError> {
        let t = cfg.timeouts;
        let bar = hal.bar0();
        // Step 1: firmware ready, command interface revision (mlx5_function_enable).
        let fw = bar.read32(fw_rev::OFFSET);
        let cmdif = bar.read32(cmdif_rev_fw_sub::OFFSET);
        if fw == u32::MAX && cmdif == u32::MAX {
            return Err(Error::DeviceGone).at(Step::WaitFirmware);
        }
        wait_fw_init(&hal, t.fw_pre_init, t.fw_poll).at(Step::WaitFirmware)?;
        let cmdif = bar.read32(cmdif_rev_fw_sub::OFFSET);
        let rev = cmdif_rev_fw_sub::cmd_interface_rev.get(cmdif) as u16;
        if u32::from(rev) != CMD_IF_REV {
            return Err(Error::UnsupportedCmdInterface { revision: rev })
                .at(Step::CommandInterface);
        }
        let geo = bar.read32(cmdq_addr_l_sz::OFFSET);
        let log_size = cmdq_addr_l_sz::log_cmdq_size.get(geo) as u8;
        let log_stride = cmdq_addr_l_sz::log_cmdq_stride.get(geo) as u8;
        check_geometry(log_size, log_stride).at(Step::CommandInterface)?;
        let cmd = CmdQueue::new(&hal, log_size, log_stride).at(Step::CommandInterface)?;

        // Firmware-advertised timeouts replace the defaults (mlx5_tout_query_iseg).
        let mut cmd_timeout = t.command;
        let mut fw_init = t.fw_init;
        let init_to = bar.read32(cmd_q_init_to::OFFSET);
        if init_to != 0 {
            fw_init = Duration::from_millis(init_seg::timeout_reg_to_ms(init_to));
            let exec_to = init_seg::timeout_reg_to_ms(bar.read32(cmd_exec_to::OFFSET));
            if exec_to != 0 {
                cmd_timeout = Duration::from_millis(exec_to);
            }
        }
        let embedded_cpu = initializing::embedded_cpu.is_set(bar.read32(initializing::OFFSET));
        let fw_version = (
            fw_rev::fw_rev_major.get(fw) as u16,
            fw_rev::fw_rev_minor.get(fw) as u16,
            cmdif_rev_fw_sub::fw_rev_subminor.get(cmdif) as u16,
        );
        info!(
            "mlx5: firmware {}.{}.{}, cmdif {}",
            fw_version.0, fw_version.1, fw_version.2, rev
        );
        Ok(Unready {
            hal,
            cfg,
            cmd,
            cmd_timeout,
            fw_init,
            fw_version,
            rev,
            embedded_cpu,
        })
    }
}

impl<H: Hal> Device<H> {
    /// Brings the HCA behind `hal` up to a ready state: firmware initialized, pages given, a UAR
    /// and an event queue for asynchronous and page-request events, device facts and port
    /// state read.
    ///
    /// # Errors
    /// [`StepError`] naming the step that failed; everything done before it is undone.
    pub fn bring_up(hal: H, cfg: Config) -> Result<Self, StepError> {
        let parts = Unready::start(hal, cfg)?;
        let fw_init = parts.fw_init;
        let mut dev = Self::assemble(parts);
        match dev.run_bring_up(fw_init) {
            Ok(()) => Ok(dev),
            Err(e) => {
                warn!("bring-up failed: {}", e);
                dev.shutdown_quietly();
                Err(e)
            }
        }
    }

    /// [`Device::bring_up`] into `slot`, the device's storage: a `static`, a field, a
    /// caller's frame. The device (tens of KiB: its tables are inline, `no_std` and no
    /// allocator) is built in place and brought up there, so that no frame of the bring-up
    /// holds a copy of it: what a unikernel or a kernel thread with a small stack needs.
    /// A device already in `slot` is dropped first (its teardown). On failure `slot` is
    /// `None`; [`Device::teardown_in`] is the matching teardown.
    ///
    /// # Errors
    /// As [`Device::bring_up`].
    pub fn bring_up_in(
        slot: &mut Option<Self>,
        hal: H,
        cfg: Config,
    ) -> Result<&mut Self, StepError> {
        *slot = None;
        let parts = Unready::start(hal, cfg)?;
        let fw_init = parts.fw_init;
        let r = slot.insert(Self::assemble(parts)).run_bring_up(fw_init);
        if let Err(e) = r {
            warn!("bring-up failed: {}", e);
            if let Some(dev) = slot.as_mut() {
                dev.shutdown_quietly();
            }
            *slot = None;
            return Err(e);
        }
        // `slot` was filled above; the error is never returned.
        slot.as_mut()
            .ok_or(Error::DeviceGone)
            .at(Step::WaitFirmware)
    }

    /// Tears down the device in `slot` ([`Device::teardown`] in place) and empties the slot;
    /// nothing to do for an empty one.
    ///
    /// # Errors
    /// As [`Device::teardown`].
    pub fn teardown_in(slot: &mut Option<Self>) -> Result<(), StepError> {
        let r = match slot.as_mut() {
            Some(dev) => dev.shutdown(),
            None => Ok(()),
        };
        *slot = None;
        r
    }

    /// The device with nothing done yet, from what [`Unready::start`] read.
    #[inline(always)]
    fn assemble(p: Unready<H>) -> Self {
        Device {
            hal: p.hal,
            cfg: p.cfg,
            info: DeviceInfo {
                fw_version: p.fw_version,
                cmdif_rev: p.rev,
                embedded_cpu: p.embedded_cpu,
                ..DeviceInfo::default()
            },
            ctl: spin::Mutex::new(Control {
                cmd: p.cmd,
                cmd_timeout: p.cmd_timeout,
                pages: PageManager::new(),
                uar: None,
                eq: None,
                ports: Vec::new(),
                events: Deque::new(),
                events_dropped: 0,
                trace: Trace::default(),
                health: HealthMonitor::default(),
                progress: Progress::default(),
                key_byte: 0,
                cq_users: crate::table::Table::new(),
                cq_events: crate::table::Table::new(),
                srq_users: crate::table::Table::new(),
                cq_purges: crate::table::Table::new(),
                cq_orphans: crate::table::Table::new(),
                fatal: false,
            }),
            purge_epoch: core::sync::atomic::AtomicU32::new(0),
            fatal: core::sync::atomic::AtomicBool::new(false),
            books: crate::wq::book::Books::new(),
            srq_books: crate::wq::srq_ring::SrqBooks::new(),
        }
    }

    fn run_bring_up(&mut self, fw_init: Duration) -> Result<(), StepError> {
        self.books.make_slots();
        self.srq_books.make_slots();
        wait_fw_init(&self.hal, fw_init, self.cfg.timeouts.fw_poll).at(Step::WaitFirmwareInit)?;
        self.enable_hca().at(Step::EnableHca)?;
        self.ctl.get_mut().progress.enabled = true;
        self.set_issi().at(Step::Issi)?;
        self.startup_pages(query_pages_op_mod::BOOT)
            .at(Step::BootPages)?;
        self.set_host_endianness().at(Step::HostEndianness)?;
        self.set_caps().at(Step::SetCaps)?;
        self.startup_pages(query_pages_op_mod::INIT)
            .at(Step::InitPages)?;
        let mut inp = [0u8; InitHcaIn::BYTES];
        let mut out = [0u8; InitHcaOut::BYTES];
        input::<InitHca>(&mut inp).at(Step::InitHca)?;
        self.exec::<InitHca>(&mut inp, &mut out).at(Step::InitHca)?;
        self.ctl.get_mut().progress.initialized = true;
        self.query_caps().at(Step::QueryCaps)?;
        if self.cfg.set_driver_version && self.info.caps.driver_version {
            self.set_driver_version().at(Step::DriverVersion)?;
        }
        self.alloc_uar().at(Step::AllocUar)?;
        self.create_async_eq().at(Step::CreateEq)?;
        self.query_special_contexts().at(Step::SpecialContexts)?;
        for port in 1..=self.info.caps.num_ports.min(crate::device::MAX_PORTS as u8) {
            let p = self.query_port(port).at(Step::PortState)?;
            if port == 1 {
                self.info.node_guid = p.node_guid;
                self.info.sys_image_guid = p.sys_image_guid;
            }
        }
        self.poll_events();
        Ok(())
    }

    fn enable_hca(&mut self) -> Result<(), Error> {
        let mut inp = [0u8; EnableHcaIn::BYTES];
        input::<EnableHca>(&mut inp)?
            .set(enable_hca_in::embedded_cpu_function, self.info.embedded_cpu);
        let mut out = [0u8; EnableHcaOut::BYTES];
        self.exec::<EnableHca>(&mut inp, &mut out)
    }

    /// QUERY_ISSI, then SET_ISSI(1) when supported (`mlx5_core_set_issi`).
    fn set_issi(&mut self) -> Result<(), Error> {
        let mut inp = [0u8; QueryIssiIn::BYTES];
        input::<QueryIssi>(&mut inp)?;
        let mut out = [0u8; QueryIssiOut::BYTES];
        match self.exec::<QueryIssi>(&mut inp, &mut out) {
            Ok(()) => {}
            // Firmware without QUERY_ISSI speaks ISSI 0 (Linux does the same).
            Err(Error::Command(_)) => {
                self.info.issi = 0;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let supported =
            View::<QueryIssiOut>::new_checked(&out)?.get32(query_issi_out::supported_issi_dw0);
        if supported & (1 << 1) != 0 {
            let mut inp = [0u8; SetIssiIn::BYTES];
            input::<SetIssi>(&mut inp)?.set(set_issi_in::current_issi, 1u16);
            let mut out = [0u8; SetIssiOut::BYTES];
            self.exec::<SetIssi>(&mut inp, &mut out)?;
            self.info.issi = 1;
            Ok(())
        } else if supported & 1 != 0 || supported == 0 {
            self.info.issi = 0;
            Ok(())
        } else {
            Err(Error::UnsupportedIssi { supported })
        }
    }

    /// QUERY_PAGES then MANAGE_PAGES(GIVE) (`mlx5_satisfy_startup_pages`).
    fn startup_pages(&mut self, op_mod: u16) -> Result<(), Error> {
        let mut inp = [0u8; QueryPagesIn::BYTES];
        input::<QueryPages>(&mut inp)?.set(query_pages_in::op_mod, op_mod);
        let mut out = [0u8; QueryPagesOut::BYTES];
        self.exec::<QueryPages>(&mut inp, &mut out)?;
        let n = View::<QueryPagesOut>::new_checked(&out)?.get32(query_pages_out::num_pages) as i32;
        debug!("firmware asks for {} pages (op_mod {})", n, op_mod);
        if n > 0 {
            self.ctl
                .get_mut()
                .give_pages(&self.hal, n as usize, Slot::Regular)?;
        }
        Ok(())
    }

    /// ACCESS_REG write of HOST_ENDIANNESS (`set_hca_ctrl`).
    fn set_host_endianness(&mut self) -> Result<(), Error> {
        const LEN: usize = AccessRegisterIn::BYTES + HostEndiannessReg::BYTES;
        let mut inp = [0u8; LEN];
        input::<AccessReg>(&mut inp)?
            .set(access_register_in::op_mod, access_reg_op_mod::WRITE)
            .set(
                access_register_in::register_id,
                register_id::HOST_ENDIANNESS,
            );
        inp[AccessRegisterIn::BYTES] = if cfg!(target_endian = "big") {
            HOST_ENDIANNESS_BIG
        } else {
            HOST_ENDIANNESS_LITTLE
        };
        let mut out = [0u8; AccessRegisterOut::BYTES + HostEndiannessReg::BYTES];
        self.exec::<AccessReg>(&mut inp, &mut out)
    }

    fn query_cap(&mut self, mode: u16, out: &mut [u8; QueryHcaCapOut::BYTES]) -> Result<(), Error> {
        self.query_cap_group(hca_cap_op_mod::GENERAL, mode, out)
    }

    fn query_cap_group(
        &mut self,
        group: u16,
        mode: u16,
        out: &mut [u8; QueryHcaCapOut::BYTES],
    ) -> Result<(), Error> {
        let mut inp = [0u8; QueryHcaCapIn::BYTES];
        input::<QueryHcaCap>(&mut inp)?
            .set(query_hca_cap_in::op_mod, hca_cap_op_mod::query(group, mode));
        self.exec::<QueryHcaCap>(&mut inp, out)
    }

    /// The current atomic capabilities (group 3), from a QUERY_HCA_CAP output buffer.
    fn atomic_view(out: &[u8; QueryHcaCapOut::BYTES]) -> Result<View<'_, AtomicCaps>, Error> {
        let at = query_hca_cap_out::capability.bit / 8;
        Ok(View::<AtomicCaps>::new_checked(
            &out[at..at + AtomicCaps::BYTES],
        )?)
    }

    /// Linux `handle_hca_cap_atomic`: when the device has atomics and can answer them in host
    /// byte order, SET_HCA_CAP (atomic) asks it to — the mode IB atomics need (mlx5_ib reports
    /// none otherwise). The block is zero but for the mode, as Linux sends it.
    ///
    /// `cur` and `set` are scratch: the atomic block queried, the SET_HCA_CAP input built.
    fn set_atomic_caps_in(&mut self, cur: &mut CapMsg, set: &mut CapMsg) -> Result<(), Error> {
        self.query_cap_group(hca_cap_op_mod::ATOMIC, hca_cap_op_mod::CUR, cur)?;
        // Queried as Linux does (`mlx5_core_get_caps_mode` HCA_CAP_OPMOD_GET_MAX); unused.
        self.query_cap_group(hca_cap_op_mod::ATOMIC, hca_cap_op_mod::MAX, set)?;
        if Self::atomic_view(cur)?.get(atomic_caps::supported_atomic_req_8b_endianness_mode_1) == 0
        {
            return Ok(());
        }
        set.fill(0);
        input::<SetHcaCap>(set)?.set(
            set_hca_cap_in::op_mod,
            hca_cap_op_mod::set(hca_cap_op_mod::ATOMIC),
        );
        let at = set_hca_cap_in::capability.bit / 8;
        ViewMut::<AtomicCaps>::new_checked(&mut set[at..at + AtomicCaps::BYTES])?.set(
            atomic_caps::atomic_req_8b_endianness_mode,
            atomic::REQ_MODE_HOST_ENDIANNESS,
        );
        let mut out = [0u8; SetHcaCapOut::BYTES];
        self.exec::<SetHcaCap>(set, &mut out)
    }

    /// Two capability-message buffers off the stack for `f`: a DMA allocation used as plain
    /// CPU memory (never shown to the device), freed on return. The messages are 4 KiB each,
    /// and `no_std` stacks (a unikernel's, a kernel thread's) are small.
    fn with_cap_buffers<R>(
        &mut self,
        f: impl FnOnce(&mut Self, &mut CapMsg, &mut CapMsg) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut buf = self.hal.dma_alloc(2 * CAP_MSG, 64)?;
        let short = bareverbs_hal::DmaError::OutOfBounds {
            offset: 0,
            len: 2 * CAP_MSG,
            region: buf.len(),
        };
        let (a, b) = buf
            .as_mut_slice()
            .split_first_chunk_mut::<CAP_MSG>()
            .ok_or(short)?;
        let b = b.first_chunk_mut::<CAP_MSG>().ok_or(short)?;
        f(self, a, b)
    }

    /// QUERY_HCA_CAP (max, cur) and SET_HCA_CAP of the general capabilities, changing what
    /// Linux's `handle_hca_cap` changes.
    fn set_caps(&mut self) -> Result<(), Error> {
        self.with_cap_buffers(|dev, max, set| dev.set_caps_in(max, set))
    }

    fn set_caps_in(&mut self, max: &mut CapMsg, set: &mut CapMsg) -> Result<(), Error> {
        self.query_cap(hca_cap_op_mod::MAX, max)?;
        self.query_cap(hca_cap_op_mod::CUR, set)?;
        let atomic = cap_view(set)?.get(cmd_hca_cap::atomic) != 0;
        let max_v = cap_view(max)?;
        let (max_qp, max_drain, max_dct, max_release, max_ports) = (
            max_v.get(cmd_hca_cap::log_max_qp),
            max_v.get(cmd_hca_cap::drain_sigerr),
            max_v.get(cmd_hca_cap::dct),
            max_v.get(cmd_hca_cap::release_all_pages),
            max_v.get(cmd_hca_cap::num_vhca_ports),
        );
        // The current capabilities sit at the same offset in both messages.
        set[..16].fill(0);
        let mut v = input_keep::<SetHcaCap>(set)?;
        v.set(
            set_hca_cap_in::op_mod,
            hca_cap_op_mod::set(hca_cap_op_mod::GENERAL),
        );
        v.sub(set_hca_cap_in::capability)
            .sub(hca_cap_union::cmd_hca_cap)
            .set(cmd_hca_cap::pkey_table_size, 0u8)
            .set(cmd_hca_cap::log_max_qp, max_qp.min(18))
            .set(cmd_hca_cap::cmdif_checksum, 0u8)
            .set(cmd_hca_cap::drain_sigerr, max_drain)
            .set(cmd_hca_cap::dct, max_dct)
            .set(cmd_hca_cap::uar_4k, 0u8)
            .set(cmd_hca_cap::log_uar_page_sz, 0u8)
            .set(cmd_hca_cap::release_all_pages, max_release)
            .set(cmd_hca_cap::num_vhca_ports, max_ports);
        let mut out = [0u8; SetHcaCapOut::BYTES];
        self.exec::<SetHcaCap>(set, &mut out)?;
        if atomic {
            self.set_atomic_caps_in(max, set)?;
        }
        Ok(())
    }

    fn query_caps(&mut self) -> Result<(), Error> {
        let caps = self.with_cap_buffers(|dev, out, _| {
            dev.query_cap(hca_cap_op_mod::CUR, out)?;
            let mut caps = Caps::from_cap(&cap_view(out)?);
            if caps.atomic {
                dev.query_cap_group(hca_cap_op_mod::ATOMIC, hca_cap_op_mod::CUR, out)?;
                caps = caps.with_atomic_caps(&Self::atomic_view(out)?);
            }
            Ok(caps)
        })?;
        self.info.caps = caps;
        let mut inp = [0u8; QueryAdapterIn::BYTES];
        input::<QueryAdapter>(&mut inp)?;
        let mut out = [0u8; QueryAdapterOut::BYTES];
        self.exec::<QueryAdapter>(&mut inp, &mut out)?;
        let p = View::<QueryAdapterOut>::new_checked(&out)?
            .sub(query_adapter_out::query_adapter_struct);
        self.info.vendor_id = p.get32(query_adapter_param_block::ieee_vendor_id);
        self.info
            .psid
            .copy_from_slice(p.bytes(query_adapter_param_block::vsd_contd_psid));
        Ok(())
    }

    fn set_driver_version(&mut self) -> Result<(), Error> {
        let mut inp = [0u8; SetDriverVersionIn::BYTES];
        let mut v = input::<SetDriverVersion>(&mut inp)?;
        let text = concat!("bareverbs,", env!("CARGO_PKG_VERSION")).as_bytes();
        v.bytes_mut(set_driver_version_in::driver_version)[..text.len()].copy_from_slice(text);
        let mut out = [0u8; SetDriverVersionOut::BYTES];
        self.exec::<SetDriverVersion>(&mut inp, &mut out)
    }

    fn alloc_uar(&mut self) -> Result<(), Error> {
        let mut inp = [0u8; AllocUarIn::BYTES];
        input::<AllocUar>(&mut inp)?;
        let mut out = [0u8; AllocUarOut::BYTES];
        self.exec::<AllocUar>(&mut inp, &mut out)?;
        let idx = UarIndex(View::<AllocUarOut>::new_checked(&out)?.get32(alloc_uar_out::uar));
        match Uar::new(idx, self.hal.bar0().len()) {
            Ok(u) => {
                self.ctl.get_mut().uar = Some(u);
                Ok(())
            }
            Err(e) => {
                self.dealloc_uar(idx).ok();
                Err(e)
            }
        }
    }

    fn dealloc_uar(&mut self, idx: UarIndex) -> Result<(), Error> {
        let mut inp = [0u8; DeallocUarIn::BYTES];
        input::<DeallocUar>(&mut inp)?.set(dealloc_uar_in::uar, idx.raw());
        let mut out = [0u8; DeallocUarOut::BYTES];
        self.exec::<DeallocUar>(&mut inp, &mut out)
    }

    /// One EQ for asynchronous events and page requests, described to firmware as 4 KiB
    /// pages (`log_page_size` 0, one `pas` entry per page, as Linux does). It is polled, never
    /// armed.
    fn create_async_eq(&mut self) -> Result<(), Error> {
        let uar = self.ctl.get_mut().uar.ok_or(Error::NotUp)?;
        let log_size = self
            .cfg
            .async_eq_log_size
            .clamp(EventQueue::<H>::log_size_for(0), crate::eq::MAX_LOG_SIZE)
            .min(self.info.caps.log_max_eq_size);
        // With DC, the DCT events too (Linux eq.c `gather_async_events_mask` adds
        // DCT_DRAINED; the key-violation event is for `Dct::arm_key_violation`).
        let dct = if self.info.caps.dc {
            (1 << event_type::DCT_DRAINED) | (1 << event_type::DCT_KEY_VIOLATION)
        } else {
            0
        };
        let eq = self.create_eq(
            uar,
            log_size,
            ASYNC_EVENT_MASK | (1 << event_type::PAGE_REQUEST) | dct,
        )?;
        self.ctl.get_mut().eq = Some(eq);
        Ok(())
    }

    fn query_special_contexts(&mut self) -> Result<(), Error> {
        let mut inp = [0u8; QuerySpecialContextsIn::BYTES];
        input::<QuerySpecialContexts>(&mut inp)?;
        let mut out = [0u8; QuerySpecialContextsOut::BYTES];
        self.exec::<QuerySpecialContexts>(&mut inp, &mut out)?;
        let v = View::<QuerySpecialContextsOut>::new_checked(&out)?;
        self.info.special = SpecialKeys {
            resd_lkey: v.get32(query_special_contexts_out::resd_lkey),
            null_mkey: v.get32(query_special_contexts_out::null_mkey),
            terminate_scatter_list_mkey: v
                .get32(query_special_contexts_out::terminate_scatter_list_mkey),
            dump_fill_mkey: v.get32(query_special_contexts_out::dump_fill_mkey),
        };
        Ok(())
    }

    /// Reads the state of port `port` (1-based) from the device.
    ///
    /// # Errors
    /// [`Error::NoSuchPort`] outside 1..=num_ports; a command error otherwise.
    pub fn query_port(&self, port: u8) -> Result<PortInfo, Error> {
        if !self.ctl.lock().progress.initialized {
            return Err(Error::NotUp);
        }
        let caps = self.info.caps;
        if port == 0 || port > caps.num_ports || usize::from(port) > crate::device::MAX_PORTS {
            return Err(Error::NoSuchPort { port });
        }
        let info = match caps.link_layer() {
            LinkLayer::InfiniBand => {
                let mut inp = [0u8; QueryHcaVportContextIn::BYTES];
                input::<QueryHcaVportContext>(&mut inp)?
                    .set(query_hca_vport_context_in::port_num, port);
                let mut out = [0u8; QueryHcaVportContextOut::BYTES];
                self.exec::<QueryHcaVportContext>(&mut inp, &mut out)?;
                let c = View::<QueryHcaVportContextOut>::new_checked(&out)?
                    .sub(query_hca_vport_context_out::hca_vport_context);
                PortInfo {
                    port,
                    state: PortState::from(c.get(hca_vport_context::port_state) as u8),
                    phys_state: c.get(hca_vport_context::port_physical_state) as u8,
                    link_layer: LinkLayer::InfiniBand,
                    lid: c.get(hca_vport_context::lid) as u16,
                    sm_lid: c.get(hca_vport_context::sm_lid) as u16,
                    lmc: c.get(hca_vport_context::lmc) as u8,
                    sm_sl: c.get(hca_vport_context::sm_sl) as u8,
                    port_guid: c.get(hca_vport_context::port_guid),
                    node_guid: c.get(hca_vport_context::node_guid),
                    sys_image_guid: c.get(hca_vport_context::system_image_guid),
                    cap_mask: c.get32(hca_vport_context::cap_mask1),
                }
            }
            ll => {
                let mut inp = [0u8; QueryVportStateIn::BYTES];
                input::<QueryVportState>(&mut inp)?;
                let mut out = [0u8; QueryVportStateOut::BYTES];
                self.exec::<QueryVportState>(&mut inp, &mut out)?;
                let up = View::<QueryVportStateOut>::new_checked(&out)?
                    .get(query_vport_state_out::state)
                    == u64::from(vport_state::UP);
                // An Ethernet function's GUIDs are in its NIC vport context (Linux
                // `mlx5_query_nic_vport_node_guid`).
                let mut inp = [0u8; QueryNicVportContextIn::BYTES];
                input::<QueryNicVportContext>(&mut inp)?;
                let mut out = [0u8; QueryNicVportContextOut::BYTES];
                self.exec::<QueryNicVportContext>(&mut inp, &mut out)?;
                let c = View::<QueryNicVportContextOut>::new_checked(&out)?
                    .sub(query_nic_vport_context_out::nic_vport_context);
                let guids = (
                    c.get(nic_vport_context::port_guid),
                    c.get(nic_vport_context::node_guid),
                    c.get(nic_vport_context::system_image_guid),
                );
                PortInfo {
                    port,
                    state: if up {
                        PortState::Active
                    } else {
                        PortState::Down
                    },
                    phys_state: if up { 5 } else { 3 },
                    link_layer: ll,
                    lid: 0,
                    sm_lid: 0,
                    lmc: 0,
                    sm_sl: 0,
                    port_guid: guids.0,
                    node_guid: guids.1,
                    sys_image_guid: guids.2,
                    cap_mask: 0,
                }
            }
        };
        let i = usize::from(port - 1);
        let mut ctl = self.ctl.lock();
        if i < ctl.ports.len() {
            ctl.ports[i] = info;
        } else {
            let _ = ctl.ports.push(info);
        }
        Ok(info)
    }

    /// Tears the device down: destroys the EQ, frees the UAR, TEARDOWN_HCA, takes back every
    /// page, DISABLE_HCA. Memory firmware did not return is leaked, never freed.
    ///
    /// # Errors
    /// The first step that failed; the remaining steps still run where that is safe.
    pub fn teardown(mut self) -> Result<(), StepError> {
        self.shutdown()
    }

    fn shutdown_quietly(&mut self) {
        if let Err(e) = self.shutdown() {
            warn!("teardown: {}", e);
        }
    }

    fn shutdown(&mut self) -> Result<(), StepError> {
        if self.ctl.get_mut().cmd.wedged {
            // No command can be trusted: the device may write anything it was given, so it
            // all stays allocated (leaked), and the caller hears how much firmware kept. A
            // function reset through the HAL (`Hal::function_reset`) makes the device forget
            // it; a new bring-up can follow.
            let count = self.ctl.get_mut().pages.given();
            self.abandon();
            return Err(StepError {
                step: Step::ReclaimPages,
                error: if count > 0 {
                    Error::PagesNotReturned { count }
                } else {
                    Error::CommandInterfaceWedged
                },
            });
        }
        let mut first: Option<StepError> = None;
        let mut note = |r: Result<(), StepError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        if let Some(eq) = self.ctl.get_mut().eq.take() {
            let r = self.destroy_eq(eq);
            note(r.at(Step::DestroyEq));
        }
        if let Some(uar) = self.ctl.get_mut().uar.take() {
            note(self.dealloc_uar(uar.index()).at(Step::DeallocUar));
        }
        if self.ctl.get_mut().progress.initialized {
            let mut inp = [0u8; TeardownHcaIn::BYTES];
            let mut out = [0u8; TeardownHcaOut::BYTES];
            let r = input::<TeardownHca>(&mut inp)
                .map(|mut v| {
                    v.set(teardown_hca_in::profile, teardown_profile::GRACEFUL_CLOSE);
                })
                .and_then(|()| self.exec::<TeardownHca>(&mut inp, &mut out));
            if let Err(e) = r {
                // Linux stops here too: firmware still owns its pages.
                self.abandon();
                return Err(first.unwrap_or(StepError {
                    step: Step::TeardownHca,
                    error: e,
                }));
            }
            self.ctl.get_mut().progress.initialized = false;
        }
        if self.ctl.get_mut().progress.enabled {
            note(self.reclaim_all().at(Step::ReclaimPages));
            let mut inp = [0u8; DisableHcaIn::BYTES];
            let mut out = [0u8; DisableHcaOut::BYTES];
            let r = input::<DisableHca>(&mut inp)
                .map(|mut v| {
                    v.set(
                        disable_hca_in::embedded_cpu_function,
                        self.info.embedded_cpu,
                    );
                })
                .and_then(|()| self.exec::<DisableHca>(&mut inp, &mut out));
            note(r.at(Step::DisableHca));
            self.ctl.get_mut().progress.enabled = false;
        }
        if self.ctl.get_mut().cmd.wedged {
            self.abandon();
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// MANAGE_PAGES(TAKE) until firmware holds nothing (`mlx5_reclaim_startup_pages`).
    fn reclaim_all(&mut self) -> Result<(), Error> {
        while self.ctl.get_mut().pages.given() > 0 {
            let want = self.ctl.get_mut().pages.given();
            match self
                .ctl
                .get_mut()
                .take_pages(&self.hal, want, Slot::Regular)
            {
                Ok(0) => {
                    let count = self.ctl.get_mut().pages.given();
                    self.ctl.get_mut().pages.leak_all();
                    return Err(Error::PagesNotReturned { count });
                }
                Ok(_) => {}
                Err(e) => {
                    self.ctl.get_mut().pages.leak_all();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Gives up every DMA region the device might still touch, without freeing it.
    fn abandon(&mut self) {
        self.ctl.get_mut().pages.leak_all();
        while let Some(o) = self.ctl.get_mut().cq_orphans.pop() {
            o.leak();
        }
        if let Some(eq) = self.ctl.get_mut().eq.take() {
            eq.buf.leak();
        }
        self.ctl.get_mut().cmd.leak();
        self.ctl.get_mut().progress = Progress::default();
    }
}

/// A zeroed-header view that keeps the rest of the buffer (for SET_HCA_CAP built on the
/// queried capability block).
fn input_keep<C: bareverbs_firmware_cmd::Command>(
    buf: &mut [u8],
) -> Result<bareverbs_firmware_cmd::ViewMut<'_, C::In>, Error> {
    Ok(bareverbs_firmware_cmd::ViewMut::new_checked(buf)?)
}

impl<H: Hal> Drop for Device<H> {
    fn drop(&mut self) {
        if self.ctl.get_mut().progress.enabled
            || self.ctl.get_mut().progress.initialized
            || self.ctl.get_mut().cmd.wedged
        {
            self.shutdown_quietly();
        }
    }
}
