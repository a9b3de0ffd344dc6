//! The work-queue floor: the rings and the per-queue tables the device keeps, below the
//! objects (`verbs/`, `eth/`) and above the control floor (`cmdq`, `eq`, `pages`, `uar`) and
//! `firmware-cmd`. Nothing here knows a verbs type: it takes addresses, keys, lengths and
//! counters, as rdma-core's `mlx5_wq` and `wqe.h` sit under `qp.c`/`cq.c` and Linux's
//! `core/wq.c` under `en/` (DESIGN.md 3.0).
//!
//! | file | what it owns |
//! |---|---|
//! | `ring_pages.rs` | how a ring buffer is laid out in pages for firmware |
//! | `recv_queue.rs` | a receive ring: its WQEs of data segments, producer, doorbell record |
//! | `send_queue.rs` | a send ring: its WQEBBs, producer, doorbell record and BlueFlame register |
//! | `send_wqe.rs` | where a send WQE's segments are written (control, XRC, address vector, remote address, atomic, data, inline, Ethernet) |
//! | `book.rs` | each QP's book (the `wr_id` of every outstanding request) and its table |
//! | `srq_ring.rs` | a shared receive ring (linked-list WQEs), its book and its table |
//! | `cq_ring.rs` | a completion ring: owner rule, read barrier, one parse of each CQE, consumer index |
//! | `cq_tables.rs` | what the device keeps per CQ: purges, orphans, event counts |

pub(crate) mod book;
pub(crate) mod cq_ring;
pub(crate) mod cq_tables;
pub(crate) mod recv_queue;
pub(crate) mod ring_pages;
pub(crate) mod send_queue;
pub(crate) mod send_wqe;
pub(crate) mod srq_ring;
