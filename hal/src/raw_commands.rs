//! The promise a caller makes to send firmware commands behind a driver's back. A driver built
//! on this HAL takes a [`RawCommands`] for its raw command interface (bareverbs:
//! `Device::exec_raw`), so that interface can be a safe function in a crate without `unsafe`,
//! while only `unsafe` code can make the promise.

/// Proof that the caller accepted the contract of [`RawCommands::promise`]. It cannot be made
/// any other way.
#[derive(Debug)]
pub struct RawCommands {
    _private: (),
}

impl RawCommands {
    /// Makes the promise.
    ///
    /// # Safety
    /// A command sent behind the driver's back can break what its safe API relies on. For
    /// every command sent with this promise, the caller guarantees that it
    /// - changes, destroys or names (as a CQ, PD, key, SRQ, UAR or EQ of a new object) no
    ///   object the driver created (its QPs, CQs, SRQs, PDs, MRs, AHs, EQs, UAR, pages), and
    ///   none that a driver object is built on;
    /// - points the device only at memory that stays mapped for the device, and that Rust
    ///   does not otherwise use, for as long as the device may access it (until the object
    ///   using it is destroyed, including when that never succeeds);
    /// - does not change the device's global state (`TEARDOWN_HCA`, `DISABLE_HCA`,
    ///   `MANAGE_PAGES`, `SET_HCA_CAP`, `SET_ISSI`, ...).
    ///
    /// Objects the caller creates this way are the caller's to destroy.
    pub unsafe fn promise() -> RawCommands {
        RawCommands { _private: () }
    }
}
