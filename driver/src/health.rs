//! Health: the health buffer, the health counter and the fatal sensors Linux checks
//! (mlx5-reference 07; Linux `mlx5_health_check_fatal_sensors`, `poll_health`).

use bareverbs_firmware_cmd::init_seg::{
    cmdq_addr_l_sz, health_buffer, health_counter, nic_interface, HealthBuffer, HealthSyndrome,
    HEALTH_BUFFER_OFFSET,
};
use bareverbs_firmware_cmd::View;
use bareverbs_hal::{BarOffset, Instant, Mmio};
use core::time::Duration;

/// A fatal condition, in the order Linux checks them (first hit wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FatalSensor {
    /// `fw_ver` reads all ones: the device is off the bus.
    PciCommError,
    /// `nic_interface` reads DISABLED.
    NicDisabled,
    /// `nic_interface` reads SW_RESET.
    NicSwReset,
    /// Firmware requests a reset (`rfr`) with a syndrome.
    FwSyndromeRfr,
}

/// One reading of the device's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HealthReport {
    /// The first fatal sensor that fired, if any.
    pub fatal: Option<FatalSensor>,
    /// Health syndrome (0 = healthy).
    pub syndrome: HealthSyndrome,
    /// Extended syndrome.
    pub ext_syndrome: u16,
    /// Health counter (24 bits).
    pub counter: u32,
    /// The counter has not moved for [`MAX_MISSES`] checks in a row: firmware may be hung.
    pub stalled: bool,
}

/// Checks without counter movement before the counter is called stalled (`MAX_MISSES`).
pub const MAX_MISSES: u32 = 3;

/// How often [`Device::poll_events`](crate::Device::poll_events) reads the fatal sensors
/// (Linux 6.12 health.c `MLX5_HEALTH_POLL_INTERVAL`, 2 s).
pub const HEALTH_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Remembers the counter between checks (Linux `poll_health`), whether a fatal condition was
/// already reported, and when the fatal sensors are next due.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HealthMonitor {
    last: Option<u32>,
    misses: u32,
    fatal_reported: bool,
    next_poll: Instant,
}

impl HealthMonitor {
    /// True the first time a fatal sensor is seen (Linux `poll_health` enters the error state
    /// once: `fatal_error && !health->fatal_error`).
    pub(crate) fn first_fatal(&mut self, fatal: Option<FatalSensor>) -> bool {
        let first = fatal.is_some() && !self.fatal_reported;
        self.fatal_reported |= fatal.is_some();
        first
    }

    /// The fatal sensors, if [`HEALTH_POLL_INTERVAL`] passed since they were last read by
    /// this call; `None` when not due or healthy. The counter is left to
    /// [`HealthMonitor::check`], whose caller decides the period of its misses.
    pub(crate) fn poll_due<M: Mmio>(&mut self, bar: &M, now: Instant) -> Option<FatalSensor> {
        if now < self.next_poll {
            return None;
        }
        self.next_poll = now.after(HEALTH_POLL_INTERVAL);
        fatal_sensor(bar)
    }

    pub(crate) fn check<M: Mmio>(&mut self, bar: &M) -> HealthReport {
        let buf = read_buffer(bar);
        let h = match View::<HealthBuffer>::new_checked(&buf) {
            Ok(h) => h,
            Err(_) => unreachable!("64-byte buffer holds the health buffer"),
        };
        let synd = h.get(health_buffer::synd) as u8;
        let fatal = sensors(&h, bar);
        let counter = health_counter::health_counter.get(bar.read32(health_counter::OFFSET));
        if self.last == Some(counter) {
            self.misses = self.misses.saturating_add(1);
        } else {
            self.misses = 0;
        }
        self.last = Some(counter);
        HealthReport {
            fatal,
            syndrome: HealthSyndrome::from(synd),
            ext_syndrome: h.get(health_buffer::ext_synd) as u16,
            counter,
            stalled: self.misses >= MAX_MISSES,
        }
    }
}

/// The first fatal sensor that fires.
fn fatal_sensor<M: Mmio>(bar: &M) -> Option<FatalSensor> {
    let buf = read_buffer(bar);
    let h = View::<HealthBuffer>::new_checked(&buf).ok()?;
    sensors(&h, bar)
}

/// The health buffer as the device holds it (big-endian dwords).
fn read_buffer<M: Mmio>(bar: &M) -> [u8; 64] {
    let mut buf = [0u8; 64];
    for (i, dw) in buf.chunks_mut(4).enumerate() {
        dw.copy_from_slice(
            &bar.read32(BarOffset(HEALTH_BUFFER_OFFSET + 4 * i))
                .to_be_bytes(),
        );
    }
    buf
}

/// Linux 6.12 health.c `mlx5_health_check_fatal_sensors`, in its order (first hit wins).
fn sensors<M: Mmio>(h: &View<'_, HealthBuffer>, bar: &M) -> Option<FatalSensor> {
    let nic = cmdq_addr_l_sz::nic_interface.get(bar.read32(cmdq_addr_l_sz::OFFSET));
    if h.get(health_buffer::fw_version) == u64::from(u32::MAX) {
        Some(FatalSensor::PciCommError)
    } else if nic == nic_interface::DISABLED {
        Some(FatalSensor::NicDisabled)
    } else if nic == nic_interface::SW_RESET {
        Some(FatalSensor::NicSwReset)
    } else if h.get(health_buffer::rfr) != 0 && h.get(health_buffer::synd) != 0 {
        Some(FatalSensor::FwSyndromeRfr)
    } else {
        None
    }
}

/// True when the device reads as gone (Linux `sensor_pci_not_working`).
pub(crate) fn device_gone<M: Mmio>(bar: &M) -> bool {
    bar.read32(BarOffset(HEALTH_BUFFER_OFFSET + 0x30)) == u32::MAX
}
