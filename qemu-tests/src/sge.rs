//! Gather and scatter entries: the (lkey, address, length) triples a send WQE gathers its
//! message from and a receive WQE scatters one into (`wqe_data_seg`).

/// One gather/scatter entry of a WQE.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sge {
    pub lkey: u32,
    pub addr: u64,
    pub len: u32,
}

/// A WQE's gather or scatter list; up to four entries without allocating.
pub(crate) type SgeList = crate::small_list::SmallList<Sge, 4>;
