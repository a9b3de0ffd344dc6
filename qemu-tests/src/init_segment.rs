//! BAR0's initialization segment as the model keeps it: the firmware and command-interface
//! revisions, the command queue's address and NIC interface mode, the initializing flag, the
//! health buffer and counter, and the free-running timer (mlx5-reference 01 §3, 06 §2, 07 §1).
//! The command doorbell in it belongs to the command queue (`cmdq.rs`).

use bareverbs_firmware_cmd::ifc::CMD_IF_REV;
use bareverbs_firmware_cmd::init_seg::{self, HEALTH_BUFFER_OFFSET};

use crate::clock::SimClock;
use crate::config::{Faults, ModelConfig};

/// log2 of the number of command slots the model offers.
pub const LOG_CMDQ_SIZE: u32 = 5;
/// log2 of the command entry stride.
pub const LOG_CMDQ_STRIDE: u32 = 6;
/// How often the health counter advances.
const HEALTH_TICK_NS: u64 = 10_000_000;

// The initialization segment's registers, at the offsets `init_seg` names.
const FW_REV: usize = init_seg::fw_rev::OFFSET.0;
const CMDIF_REV: usize = init_seg::cmdif_rev_fw_sub::OFFSET.0;
const CMDQ_ADDR_H: usize = init_seg::cmdq_addr_h::OFFSET.0;
const CMDQ_ADDR_L_SZ: usize = init_seg::cmdq_addr_l_sz::OFFSET.0;
/// The command doorbell's offset.
pub(crate) const CMD_DBELL: usize = init_seg::cmd_dbell::OFFSET.0;
const INITIALIZING: usize = init_seg::initializing::OFFSET.0;
const TIMER_H: usize = init_seg::internal_timer_h::OFFSET.0;
const TIMER_L: usize = init_seg::internal_timer_l::OFFSET.0;
const HEALTH_COUNTER: usize = init_seg::health_counter::OFFSET.0;

/// The initialization segment's state.
pub(crate) struct InitSegment {
    /// When the device was last reset (it reports initializing until `ready_after` later).
    reset_ns: u64,
    /// The command queue's address, as the driver wrote it.
    pub(crate) cmdq_addr: u64,
    pub(crate) nic_interface: u32,
    /// The health counter's value while an injected fault stalls it.
    health_frozen_at: Option<u32>,
    pub(crate) health_synd: u8,
    pub(crate) health_rfr: bool,
}

impl InitSegment {
    /// The segment of a device reset at `reset_ns`.
    pub(crate) fn new(reset_ns: u64) -> Self {
        InitSegment {
            reset_ns,
            cmdq_addr: 0,
            nic_interface: 0,
            health_frozen_at: None,
            health_synd: 0,
            health_rfr: false,
        }
    }

    fn ready(&self, cfg: &ModelConfig, clock: &SimClock) -> bool {
        !cfg.faults.never_ready
            && clock.now_ns().saturating_sub(self.reset_ns)
                >= u64::try_from(cfg.ready_after.as_nanos()).unwrap_or(u64::MAX)
    }

    fn health_counter(&self, clock: &SimClock) -> u32 {
        if let Some(v) = self.health_frozen_at {
            return v;
        }
        ((clock.now_ns() / HEALTH_TICK_NS) as u32) & 0x00ff_ffff
    }

    fn timer(clock: &SimClock) -> u64 {
        // Ticks at device_frequency_khz (156.25 MHz).
        (u128::from(clock.now_ns()) * 156_250 / 1_000_000) as u64
    }

    /// Applies runtime fault switches that affect registers.
    pub(crate) fn sync_faults(&mut self, faults: &Faults, clock: &SimClock) {
        if faults.health_stalled && self.health_frozen_at.is_none() {
            self.health_frozen_at = Some(self.health_counter(clock));
        } else if !faults.health_stalled {
            self.health_frozen_at = None;
        }
    }

    /// Firmware asked for a reset with a syndrome (`rfr` and `synd`, what Linux's health
    /// poll takes as fatal): the device has stopped, so it executes no more work and writes no
    /// more completions until it is reset.
    pub(crate) fn halted(&self) -> bool {
        self.health_rfr && self.health_synd != 0
    }

    /// The dword at `off` of the health buffer (`init_seg::HealthBuffer`).
    fn health_dword(&self, cfg: &ModelConfig, off: usize) -> u32 {
        use bareverbs_firmware_cmd::init_seg::{health_buffer as hb, HealthBuffer};
        use bareverbs_firmware_cmd::layout::{Layout, ViewMut};
        let mut b = [0u8; HealthBuffer::BYTES];
        if let Ok(mut v) = ViewMut::<HealthBuffer>::new_checked(&mut b) {
            v.set(hb::fw_version, Self::fw_rev_dword(cfg))
                .set(hb::rfr, self.health_rfr)
                .set(hb::synd, self.health_synd);
        }
        b.get(off..off + 4)
            .map_or(0, |d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
    }

    fn fw_rev_dword(cfg: &ModelConfig) -> u32 {
        use init_seg::fw_rev;
        let (maj, min, _) = cfg.fw_version;
        fw_rev::fw_rev_major.set(fw_rev::fw_rev_minor.set(0, min.into()), maj.into())
    }

    /// The register at BAR0 offset `off`, in host order; 0 for an offset that is none of the
    /// segment's (the command doorbell is the command queue's).
    pub(crate) fn read32(&self, off: usize, cfg: &ModelConfig, clock: &SimClock) -> u32 {
        use init_seg::{
            cmdif_rev_fw_sub as rev, cmdq_addr_h, cmdq_addr_l_sz as l, health_counter as hc,
            initializing as ini, internal_timer_h, internal_timer_l,
        };
        let (_, _, sub) = cfg.fw_version;
        match off {
            FW_REV => Self::fw_rev_dword(cfg),
            CMDIF_REV => {
                let r = cfg.faults.cmdif_rev.unwrap_or(CMD_IF_REV as u16);
                rev::fw_rev_subminor.set(rev::cmd_interface_rev.set(0, r.into()), sub.into())
            }
            CMDQ_ADDR_H => cmdq_addr_h::cmdq_phy_addr_63_32.set(0, (self.cmdq_addr >> 32) as u32),
            CMDQ_ADDR_L_SZ => {
                let v = l::cmdq_phy_addr_31_12.set(0, (self.cmdq_addr as u32) >> 12);
                let v = l::nic_interface.set(v, self.nic_interface);
                l::log_cmdq_stride.set(l::log_cmdq_size.set(v, LOG_CMDQ_SIZE), LOG_CMDQ_STRIDE)
            }
            INITIALIZING => ini::fw_reset_supported.set(
                ini::initializing.set(0, u32::from(!self.ready(cfg, clock))),
                1,
            ),
            o if (HEALTH_BUFFER_OFFSET..HEALTH_BUFFER_OFFSET + 64).contains(&o) => {
                self.health_dword(cfg, o - HEALTH_BUFFER_OFFSET)
            }
            TIMER_H => internal_timer_h::value.set(0, (Self::timer(clock) >> 32) as u32),
            TIMER_L => internal_timer_l::value.set(0, Self::timer(clock) as u32),
            HEALTH_COUNTER => hc::health_counter.set(
                hc::health_syndrome.set(0, self.health_synd.into()),
                self.health_counter(clock),
            ),
            _ => 0,
        }
    }

    /// A write of `val` (host order) to BAR0 offset `off`; offsets that are none of the
    /// segment's writable registers are ignored.
    pub(crate) fn write32(&mut self, off: usize, val: u32) {
        match off {
            CMDQ_ADDR_H => self.cmdq_addr = (u64::from(val) << 32) | (self.cmdq_addr & 0xffff_ffff),
            CMDQ_ADDR_L_SZ => {
                let low = init_seg::cmdq_addr_l_sz::cmdq_phy_addr_31_12.get(val) << 12;
                self.cmdq_addr = (self.cmdq_addr & !0xffff_ffff) | u64::from(low);
                self.nic_interface = init_seg::cmdq_addr_l_sz::nic_interface.get(val);
            }
            _ => {}
        }
    }
}
