//! What the command queue engine (`cmdq.rs`) keeps between doorbells: the commands pending in
//! their slots, the slots an injected fault stalled, how often each injected command fault has
//! struck, and whether the page request injected ahead of a command was made
//! (mlx5-reference 02 §2–7).

/// A command waiting in a slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pub slot: u32,
    pub due_ns: u64,
    /// A command-completion EQ existed when the doorbell rang: report completion with an EQE.
    pub event: bool,
    /// Held until firmware has this many pages.
    pub wait_pages: Option<usize>,
}

/// The command queue engine's state.
#[derive(Default)]
pub(crate) struct CmdqState {
    /// Commands rung and not yet completed.
    pub(crate) pending: Vec<Pending>,
    /// Slots an injected fault keeps owned by hardware for ever (one bit per slot).
    pub(crate) stalled: u32,
    /// How many times each injected command fault (`Faults::commands`) has matched.
    pub(crate) fault_hits: Vec<u32>,
    /// The page request `Faults::pages_before` injects was made (once per device life).
    pub(crate) pages_before_done: bool,
}
