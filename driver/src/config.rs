//! Driver configuration: timeouts (Linux defaults, mlx5-reference 01 §5.2) and queue sizes.

use core::time::Duration;

/// How long the driver waits for the device. Non-exhaustive: start from
/// [`Timeouts::default`] and set fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// For `initializing` to clear before the command interface is touched
    /// (`FW_PRE_INIT_TIMEOUT`, 120 s).
    pub fw_pre_init: Duration,
    /// For `initializing` to clear after the queue address is written (`FW_INIT`, 2 s).
    pub fw_init: Duration,
    /// Poll period while waiting for firmware (`FW_PRE_INIT_WAIT`, 2 ms).
    pub fw_poll: Duration,
    /// For one command (`CMD`, 60 s); replaced by the device's `cmd_exec_to` when it gives one.
    pub command: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            fw_pre_init: Duration::from_secs(120),
            fw_init: Duration::from_secs(2),
            fw_poll: Duration::from_millis(2),
            command: Duration::from_secs(60),
        }
    }
}

/// Bring-up options. Non-exhaustive: start from [`Config::default`] and set fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Timeouts.
    pub timeouts: Timeouts,
    /// log2 of the entries of the asynchronous event queue (clamped to the device maximum).
    pub async_eq_log_size: u8,
    /// Send SET_DRIVER_VERSION when the device supports it.
    pub set_driver_version: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeouts: Timeouts::default(),
            async_eq_log_size: 8,
            set_driver_version: true,
        }
    }
}
