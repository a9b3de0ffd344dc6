//! What the device counts of its own work, for tests and benchmarks to check that a feature
//! was really used: UMRs, scatter to CQE, BlueFlame copies, small fences, queues placed at a
//! page offset.

/// Work counters since the device's last reset.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WorkCounters {
    /// UMR work requests executed, and refused with an error completion.
    pub(crate) umrs: (u64, u64),
    /// CQEs written with their data inside (scatter to CQE).
    pub(crate) scattered_to_cqe: u64,
    /// 8-byte words of WQEs written into BlueFlame registers after their doorbell word.
    pub(crate) blueflame_words: u64,
    /// Send WQEs executed with the initiator small fence (`fm_ce_se` fence mode 1).
    pub(crate) small_fenced: u64,
    /// QPs, CQs and SRQs created with a non-zero `page_offset`.
    pub(crate) offset_queues: u64,
}
