//! Health: the health buffer, the health counter and the fatal sensors Linux checks
//! (mlx5-reference 07; Linux `mlx5_health_check_fatal_sensors`, `poll_health`).

use bareverbs_firmware_cmd::init_seg::{
    cmdq_addr_l_sz, health_buffer, health_counter, nic_interface, HealthBuffer, HealthSyndrome,
    HEALTH_BUFFER_OFFSET,
};
use bareverbs_firmware_cmd::View;
use bareverbs_hal::{BarOffset, Mmio};

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

/// Remembers the counter between checks (Linux `poll_health`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HealthMonitor {
    last: Option<u32>,
    misses: u32,
}

impl HealthMonitor {
    pub(crate) fn check<M: Mmio>(&mut self, bar: &M) -> HealthReport {
        let mut buf = [0u8; 64];
        for (i, dw) in buf.chunks_mut(4).enumerate() {
            dw.copy_from_slice(
                &bar.read32(BarOffset(HEALTH_BUFFER_OFFSET + 4 * i))
                    .to_be_bytes(),
            );
        }
        let h = match View::<HealthBuffer>::new_checked(&buf) {
            Ok(h) => h,
            Err(_) => unreachable!("64-byte buffer holds the health buffer"),
        };
        let nic = cmdq_addr_l_sz::nic_interface.get(bar.read32(cmdq_addr_l_sz::OFFSET));
        let synd = h.get(health_buffer::synd) as u8;
        let fatal = if h.get(health_buffer::fw_version) == u64::from(u32::MAX) {
            Some(FatalSensor::PciCommError)
        } else if nic == nic_interface::DISABLED {
            Some(FatalSensor::NicDisabled)
        } else if nic == nic_interface::SW_RESET {
            Some(FatalSensor::NicSwReset)
        } else if h.get(health_buffer::rfr) != 0 && synd != 0 {
            Some(FatalSensor::FwSyndromeRfr)
        } else {
            None
        };
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

/// True when the device reads as gone (Linux `sensor_pci_not_working`).
pub(crate) fn device_gone<M: Mmio>(bar: &M) -> bool {
    bar.read32(BarOffset(HEALTH_BUFFER_OFFSET + 0x30)) == u32::MAX
}
