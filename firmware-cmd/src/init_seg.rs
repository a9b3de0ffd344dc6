//! The initialization segment at BAR0 + 0: registers, health buffer, timeouts
//! (mlx5-reference 01 §3–5, 07 §1; Linux `struct mlx5_init_seg`).

crate::reg! {
    /// Firmware version, minor and major.
    pub mod fw_rev @ 0x000 {
        31:16 fw_rev_minor,
        15:0 fw_rev_major,
    }
    /// Command interface revision and firmware subminor.
    pub mod cmdif_rev_fw_sub @ 0x004 {
        31:16 cmd_interface_rev,
        15:0 fw_rev_subminor,
    }
    /// Command queue address, bits 63:32.
    pub mod cmdq_addr_h @ 0x010 {
        31:0 cmdq_phy_addr_63_32,
    }
    /// Command queue address bits 31:12, NIC interface state, queue geometry.
    pub mod cmdq_addr_l_sz @ 0x014 {
        31:12 cmdq_phy_addr_31_12,
        10:8 nic_interface,
        7:4 log_cmdq_size,
        3:0 log_cmdq_stride,
    }
    /// Command doorbell: bit i hands slot i to firmware.
    pub mod cmd_dbell @ 0x018 {
        31:0 command_doorbell_vector,
    }
    /// Firmware initialization state.
    pub mod initializing @ 0x1fc {
        31:31 initializing,
        30:30 fw_reset_supported,
        26:24 nic_interface_supported,
        23:23 embedded_cpu,
    }
    /// Firmware-advertised command execution timeout.
    pub mod cmd_exec_to @ 0xff8 {
        30:29 to_multiplier,
        19:0 to_value,
    }
    /// Firmware-advertised initialization timeout (non-zero: timeouts supported).
    pub mod cmd_q_init_to @ 0xffc {
        30:29 to_multiplier,
        19:0 to_value,
    }
    /// Free-running timer, high word.
    pub mod internal_timer_h @ 0x1000 {
        31:0 value,
    }
    /// Free-running timer, low word.
    pub mod internal_timer_l @ 0x1004 {
        31:0 value,
    }
    /// Health counter: firmware increments it while alive.
    pub mod health_counter @ 0x1010 {
        31:24 health_syndrome,
        23:0 health_counter,
    }
}

/// Bytes of the initialization segment Linux maps (`sizeof(struct mlx5_init_seg)`).
pub const INIT_SEG_BYTES: usize = 0x2010;
/// BAR0 offset of the health buffer.
pub const HEALTH_BUFFER_OFFSET: usize = 0x200;

/// `nic_interface` values (`MLX5_INITIAL_SEG_NIC_INTERFACE_*`).
pub mod nic_interface {
    /// Normal operation.
    pub const FULL_DRIVER: u32 = 0;
    /// Disabled (after fast teardown or a completed SW reset).
    pub const DISABLED: u32 = 1;
    /// No-DRAM NIC mode.
    pub const NO_DRAM_NIC: u32 = 2;
    /// Software reset requested; also what all-ones reads give.
    pub const SW_RESET: u32 = 7;
}

crate::ifc! {
    /// The 64-byte health buffer at BAR0 + 0x200.
    pub struct HealthBuffer => health_buffer: 0x200 bits {
        0x000 assert_var: [u8; 24],
        0x100 assert_existptr: 32,
        0x120 assert_callra: 32,
        0x160 time: 32,
        0x180 fw_version: 32,
        0x1a0 hw_id: 32,
        0x1c0 rfr: 1,
        0x1c1 crr: 1,
        0x1c4 valid: 1,
        0x1c5 severity: 3,
        0x1e0 irisc_index: 8,
        0x1e8 synd: 8,
        0x1f0 ext_synd: 16,
    }
}

crate::enum_with_unknown! {
    /// Health syndromes (`MLX5_INITIAL_SEG_HEALTH_SYNDROME_*`, Linux `hsynd_str`).
    pub enum HealthSyndrome(u8) {
        /// Healthy.
        None = 0x00 => "no error",
        /// Firmware internal error.
        FwInternalError = 0x01 => "firmware internal error",
        /// An internal processor stopped responding.
        DeadIrisc = 0x07 => "irisc not responding",
        /// Unrecoverable hardware error.
        HwFatalError = 0x08 => "unrecoverable hardware error",
        /// Firmware CRC error.
        FwCrcError = 0x09 => "firmware CRC error",
        /// ICM fetch PCI error.
        IcmFetchPciError = 0x0a => "ICM fetch PCI error",
        /// ICM page error.
        IcmPageError = 0x0b => "HW fatal error",
        /// Asynchronous EQ overrun.
        AsyncEqOverrun = 0x0c => "async EQ buffer overrun",
        /// EQ error.
        EqInError = 0x0d => "EQ error",
        /// Invalid EQ referenced.
        EqInvalid = 0x0e => "invalid EQ referenced",
        /// FFSER error.
        FfserError = 0x0f => "FFSER error",
        /// High temperature.
        HighTemperature = 0x10 => "high temperature",
        /// ICM fetch returned poisoned data.
        IcmPciPoisoned = 0x12 => "ICM fetch PCI data poisoned error",
        /// Trust lockdown error.
        TrustLockdown = 0x13 => "trust lockdown error",
    }
}

/// Decodes a firmware timeout register (`cmd_exec_to`, `cmd_q_init_to`) to milliseconds:
/// multiplier 0 ms, 1 s, 2 min, 3 h (Linux `tout_convert_iseg_to_ms`).
pub const fn timeout_reg_to_ms(reg: u32) -> u64 {
    let value = cmd_exec_to::to_value.get(reg) as u64;
    match cmd_exec_to::to_multiplier.get(reg) {
        0 => value,
        1 => value * 1_000,
        2 => value * 60_000,
        _ => value * 3_600_000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View};

    #[test]
    fn registers_sit_where_the_reference_says() {
        assert_eq!(cmdq_addr_l_sz::OFFSET.0, 0x14);
        assert_eq!(initializing::OFFSET.0, 0x1fc);
        assert_eq!(health_counter::OFFSET.0, 0x1010);
        // RIG.md: 0x14 low byte 0x56 = log size 5, log stride 6.
        assert_eq!(cmdq_addr_l_sz::log_cmdq_size.get(0x56), 5);
        assert_eq!(cmdq_addr_l_sz::log_cmdq_stride.get(0x56), 6);
        assert_eq!(cmdq_addr_l_sz::nic_interface.get(0xffff_ffff), 7);
        // Linux mlx5_set_nic_state keeps bits 31:12 and writes state << 8.
        assert_eq!(
            cmdq_addr_l_sz::nic_interface.set(0x1234_5056, 1),
            0x1234_5156
        );
        assert!(initializing::initializing.is_set(0x8000_0000));
        assert!(initializing::embedded_cpu.is_set(0x0080_0000));
        // RIG.md: fw_rev 0x00230010 prints as 16.35; cmdif 0x000507d0 is rev 5, sub 2000.
        assert_eq!(fw_rev::fw_rev_major.get(0x0023_0010), 16);
        assert_eq!(fw_rev::fw_rev_minor.get(0x0023_0010), 35);
        assert_eq!(cmdif_rev_fw_sub::cmd_interface_rev.get(0x0005_07d0), 5);
        assert_eq!(cmdif_rev_fw_sub::fw_rev_subminor.get(0x0005_07d0), 2000);
    }

    #[test]
    fn timeouts_decode_like_linux() {
        assert_eq!(timeout_reg_to_ms(0x0000_07d0), 2000);
        assert_eq!(timeout_reg_to_ms((1 << 29) | 60), 60_000);
        assert_eq!(timeout_reg_to_ms((2 << 29) | 2), 120_000);
        assert_eq!(timeout_reg_to_ms((3 << 29) | 1), 3_600_000);
    }

    #[test]
    fn golden_health_buffer() {
        // 07 §1: fw_ver at 0x30, rfr bit 7 of 0x38, synd at 0x3d, ext_synd at 0x3e.
        let mut b = [0u8; 64];
        b[0x30..0x34].copy_from_slice(&[0xff; 4]);
        b[0x38] = 0x80 | 0x08 | 0x3;
        b[0x3d] = 0x08;
        b[0x3e..0x40].copy_from_slice(&[0x12, 0x34]);
        let v = View::<HealthBuffer>::new_checked(&b).unwrap();
        assert_eq!(v.get(health_buffer::fw_version), 0xffff_ffff);
        assert_eq!(v.get(health_buffer::rfr), 1);
        assert_eq!(v.get(health_buffer::crr), 0);
        assert_eq!(v.get(health_buffer::valid), 1);
        assert_eq!(v.get(health_buffer::severity), 3);
        assert_eq!(
            HealthSyndrome::from(v.get(health_buffer::synd) as u8),
            HealthSyndrome::HwFatalError
        );
        assert_eq!(v.get(health_buffer::ext_synd), 0x1234);
        assert_eq!(HealthBuffer::BYTES, 64);
    }
}
