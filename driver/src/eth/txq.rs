//! A send queue: an SQ on the port's TIS whose ring takes one Ethernet WQE per packet —
//! control segment, Ethernet segment with the headers the port's inline mode asks for, one
//! data segment for the rest of the buffer — and its CQ. [`TxQueue::tx_burst`] writes a
//! burst, rings the doorbell once, asks for a completion every [`COMPLETION_EVERY`] WQEs and at
//! the burst's end, and gives sent buffers back to their pool as completions arrive (the
//! mlx5 PMD's `mlx5_tx_burst` and its completion moderation; Linux `mlx5e_sq_xmit_wqe`).

use core::sync::atomic::{AtomicU16, Ordering};

use bareverbs_firmware_cmd::commands::{CreateSq, DestroySq, ModifySq};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::wqe_codec::{ctrl, data, eth};
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::{Hal, SharedDma};

use crate::cmdq::MAX_MESSAGE;
use crate::device::input;
use crate::error::{Error, Invalid, Limit};
use crate::eth::cq::EthCq;
use crate::eth::pool::{owner, Pkt, PktFlags, PktPool};
use crate::eth::port::EthPort;
use crate::eth::rxq::MAX_QUEUE_ENTRIES;
use crate::wq::ring_pages::alloc_ring;
use crate::wq::send_queue::{SendRing, SqDoorbell, WQEBB};
use crate::wq::send_wqe::{write_eth, write_eth_one_bb, EthSeg};

/// Most header bytes a WQE inlines (L2 + VLAN + IPv6 + TCP with options fit).
const MAX_INLINE: usize = 160;
/// A completion is asked for at least this often (and at the end of each burst).
pub const COMPLETION_EVERY: u16 = 32;
/// Shortest frame the port sends: an Ethernet header.
const MIN_FRAME: usize = 14;

/// What to create. Non-exhaustive (offloads to come): [`TxQueueAttr::new`] or
/// [`TxQueueAttr::default`], then set fields.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct TxQueueAttr {
    /// WQE basic blocks (a power of two is used, at least this many); a packet takes one
    /// unless its inline headers are long.
    pub entries: u32,
}

impl TxQueueAttr {
    /// A queue of `entries` WQE basic blocks.
    pub fn new(entries: u32) -> Self {
        TxQueueAttr { entries }
    }
}

impl Default for TxQueueAttr {
    fn default() -> Self {
        TxQueueAttr { entries: 256 }
    }
}

/// A send queue of an Ethernet port. Dropping it destroys the SQ and its CQ and returns the
/// buffers not yet completed to the pool.
pub struct TxQueue<'p, 'd, H: Hal> {
    port: &'p EthPort<'d, H>,
    pool: &'p PktPool<'p, 'd, H>,
    sqn: u32,
    ring: SharedDma<H::Dma>,
    dbr: SharedDma<H::Dma>,
    /// The send ring's book (`wq/book.rs`'s send half): per WQEBB that starts a WQE, the
    /// buffer at 0 and the WQEBB counter after the WQE at 8.
    book: SharedDma<H::Dma>,
    log_size: u8,
    /// WQEBB counter up to which the device has completed (and the buffers went back).
    tail: AtomicU16,
    since_completion: u16,
    /// The doorbell record and register this queue rings, the verbs send queue's own kind.
    doorbell: SqDoorbell,
    refused: Option<Error>,
    stopped: Option<u8>,
    sent: u64,
    /// Header bytes to read from a buffer to find its inline length (the inline mode's most).
    peek_len: usize,
    cq: EthCq<'d, H>,
}

impl<'p, 'd, H: Hal> TxQueue<'p, 'd, H> {
    /// A send queue of `port` for buffers of `pool`.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] ([`Limit::PacketBuffers`]) for 0 or more than
    /// [`MAX_QUEUE_ENTRIES`] entries; a DMA or command error.
    pub fn new(
        port: &'p EthPort<'d, H>,
        pool: &'p PktPool<'p, 'd, H>,
        attr: TxQueueAttr,
    ) -> Result<Self, Error> {
        let dev = port.dev;
        let (entries, log_size) = crate::eth::rxq::queue_size(attr.entries, MAX_QUEUE_ENTRIES)?;
        let uar = dev.uar().ok_or(Error::NotUp)?;
        let cq = EthCq::new(dev, log_size)?;
        let (ring, pages) = alloc_ring(&dev.hal, entries as usize * WQEBB)?;
        let ring = ring.share();
        let dbr = dev.hal.dma_alloc(64, 64)?.share();
        let book = dev.hal.dma_alloc(16 * entries as usize, 64)?.share();
        let ilen = CreateSqIn::BYTES + 8 * pages.count;
        if ilen > MAX_MESSAGE {
            return Err(Error::ExceedsLimit {
                limit: Limit::PacketBuffers,
                requested: u64::from(entries),
                max: u64::from(MAX_QUEUE_ENTRIES),
            });
        }
        // The message is built in DMA memory used as plain memory, not on the stack.
        let mut scratch = dev.hal.dma_alloc(ilen, 64)?;
        let i = scratch.as_mut_slice();
        let min_inline = match port.inline_mode() {
            crate::eth::InlineMode::None => 0u8,
            crate::eth::InlineMode::L2 => 1,
            crate::eth::InlineMode::Ip => 2,
            crate::eth::InlineMode::TcpUdp => 3,
        };
        {
            let mut v = input::<CreateSq>(&mut i[..ilen])?;
            let mut c = v.sub(create_sq_in::ctx);
            c.set(sqc::flush_in_error_en, 1u8)
                .set(sqc::min_wqe_inline_mode, min_inline)
                .set(sqc::state, wq_state::RST)
                .set(sqc::cqn, cq.cqn)
                .set(sqc::tis_lst_sz, 1u8)
                .set(sqc::tis_num_0, port.tisn);
            c.sub(sqc::wq)
                .set(wq::wq_type, wq_type::CYCLIC)
                .set(wq::pd, port.pd.pdn().raw())
                .set(wq::uar_page, uar.index().raw())
                .set(wq::dbr_addr, dbr.iova().0)
                .set(wq::log_wq_stride, WQEBB.trailing_zeros() as u8)
                .set(wq::log_wq_pg_sz, pages.log_page)
                .set(wq::log_wq_sz, log_size);
            for k in 0..pages.count {
                v.set_array(
                    create_sq_in::pas,
                    k,
                    ring.iova().0 + (k * pages.page) as u64,
                )?;
            }
        }
        let mut o = [0u8; CreateSqOut::BYTES];
        dev.exec::<CreateSq>(&mut i[..ilen], &mut o)?;
        let sqn = View::<CreateSqOut>::new_checked(&o)?.get32(create_sq_out::sqn);
        let caps = dev.info().caps;
        let q = TxQueue {
            port,
            pool,
            sqn,
            ring,
            dbr,
            book,
            log_size,
            tail: AtomicU16::new(0),
            since_completion: 0,
            doorbell: SqDoorbell::new(
                uar.bf_register(),
                if caps.bf {
                    1usize << caps.log_bf_reg_size
                } else {
                    0
                },
            ),
            refused: None,
            stopped: None,
            sent: 0,
            peek_len: match port.inline_mode() {
                crate::eth::InlineMode::None => 0,
                crate::eth::InlineMode::L2 => 18,
                _ => MAX_INLINE,
            },
            cq,
        };
        q.modify(wq_state::RST, wq_state::RDY)?;
        Ok(q)
    }

    fn modify(&self, from: u8, to: u8) -> Result<(), Error> {
        let mut i = [0u8; ModifySqIn::BYTES];
        {
            let mut v = input::<ModifySq>(&mut i)?;
            v.set(modify_sq_in::sq_state, from)
                .set(modify_sq_in::sqn, self.sqn);
            v.sub(modify_sq_in::ctx).set(sqc::state, to);
        }
        self.port
            .dev
            .exec::<ModifySq>(&mut i, &mut [0u8; ModifySqOut::BYTES])
    }

    /// The SQ number.
    pub fn sqn(&self) -> u32 {
        self.sqn
    }

    /// Packets the device completed sending.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Why the last burst stopped at a packet it could not send (a foreign handle, a frame
    /// shorter than an Ethernet header or longer than the port's MTU), taken once.
    pub fn take_refused(&mut self) -> Option<Error> {
        self.refused.take()
    }

    /// The syndrome of an error completion, while the queue is stopped.
    pub fn stopped(&self) -> Option<u8> {
        self.stopped
    }

    /// Takes the device's completions: every WQE up to the one completed goes back to its
    /// pool. Returns the packets freed.
    pub fn reclaim(&mut self) -> usize {
        // The book, viewed once (indices masked into the ring).
        let Ok(book) = self.book.slots::<16>(0, 1 << self.log_size) else {
            return 0;
        };
        let mut freed = 0;
        let mut done = [0u32; 64];
        let mut k = 0;
        let mut ci = self.tail.load(Ordering::Relaxed);
        while let Some(c) = self.cq.next() {
            if c.opcode != u8::from(CqeOpcode::Req) {
                self.stopped = Some(c.syndrome);
            }
            // The completion is for the WQE at `wqe_counter`: everything up to the counter
            // after it is done (completions arrive in order).
            let end = book.slot(usize::from(c.wqe_counter)).read_ne16(8);
            while ci != end && self.doorbell.cur() != ci {
                let e = book.slot(usize::from(ci));
                done[k] = e.read_ne64(0) as u32;
                k += 1;
                if k == done.len() {
                    self.pool.put_bulk(&done);
                    k = 0;
                }
                ci = next_wqe(ci, e.read_ne16(8));
                freed += 1;
            }
        }
        self.tail.store(ci, Ordering::Release);
        self.pool.put_bulk(&done[..k]);
        self.cq.commit();
        self.sent += freed as u64;
        freed
    }

    /// Queues up to `pkts.len()` packets for sending; returns how many. The queue owns the
    /// ones it took (the caller must not use those handles again) and gives their buffers
    /// back to the pool once sent. The burst stops early when the ring is full (the rest are
    /// still the caller's) or at a packet that cannot be sent ([`TxQueue::take_refused`]).
    /// One doorbell per burst.
    pub fn tx_burst(&mut self, pkts: &[Pkt]) -> usize {
        self.reclaim();
        if self.stopped.is_some() {
            return 0;
        }
        let size = 1usize << self.log_size;
        let (Ok(sq), Ok(book)) = (
            self.ring.slots_mut::<WQEBB>(0, size),
            self.book.slots::<16>(0, size),
        ) else {
            return 0;
        };
        let mut ring = SendRing::new(sq, book, &self.tail, self.doorbell.cur(), size as u16);
        let max_frame = usize::from(self.port.hw_mtu()).saturating_sub(4);
        let mut n = 0;
        let mut wqe = [0u8; 3 * WQEBB];
        // Bytes past `peek` (and the inserted tag) are stale from earlier packets: only
        // `..inline` is used.
        let mut head = [0u8; MAX_INLINE];
        while n < pkts.len() {
            let p = &pkts[n];
            if let Err(e) = self.pool.check(p) {
                self.refused = Some(e);
                break;
            }
            let len = p.len();
            let tag = p.flags.contains(PktFlags::TX_VLAN_INSERT);
            let wire = len + if tag { 4 } else { 0 };
            if !(MIN_FRAME..=max_frame.max(MIN_FRAME)).contains(&wire) || len > self.pool.buf_size()
            {
                self.refused = Some(Error::InvalidArgument {
                    what: Invalid::PacketLength,
                });
                break;
            }
            let peek = len.min(self.peek_len.max(if tag { 14 } else { 0 }));
            self.pool.peek(p.index, &mut head[..peek]);
            // `from`: where the data segment starts in the buffer; `inline`: the bytes the WQE
            // carries (with a tag inserted in software, four more than taken from the buffer).
            let mut from = self.port.inline_len(&head[..peek], len).min(MAX_INLINE - 4);
            let mut inline = from;
            let mut hw_tag = None;
            if tag {
                if from == 0 && self.port.caps().vlan_insert {
                    // No inline header needed: the NIC inserts the tag (the `insert` union).
                    hw_tag = Some(p.vlan);
                } else {
                    // The tag goes into the inline copy, after the MAC addresses.
                    from = from.max(14).min(len);
                    head.copy_within(12..from, 16);
                    head[12..16].copy_from_slice(&[0x81, 0x00, (p.vlan >> 8) as u8, p.vlan as u8]);
                    inline = from + 4;
                }
            }
            let rest = len - from;
            let inline_units = if inline > 2 {
                (inline - 2).div_ceil(16)
            } else {
                0
            };
            let ds = 2 + inline_units + usize::from(rest > 0);
            let bbs = (ds * 16).div_ceil(WQEBB);
            if ring.reserve(bbs as u16).is_err() {
                break;
            }
            self.since_completion += 1;
            let last = n + 1 == pkts.len() || usize::from(ring.room()) < bbs + 1;
            let ce = if last || self.since_completion >= COMPLETION_EVERY {
                self.since_completion = 0;
                fm_ce_se::CQ_UPDATE
            } else {
                0
            };
            let ctrl = ctrl::word0(ring.cur(), wqe_opcode::SEND, ds as u8)
                | ctrl::QPN.put(u64::from(self.sqn));
            let cs = if p.flags.contains(PktFlags::TX_CSUM) && self.port.caps().csum {
                eth_cs_flags::L3_CSUM | eth_cs_flags::L4_CSUM
            } else {
                0
            };
            let data = if rest > 0 {
                (
                    data::word0(rest as u32, self.pool.lkey()),
                    self.pool.iova(p.index) + from as u64,
                )
            } else {
                (0, 0)
            };
            // Ethernet segment bytes 12..16: the inline size and first two inline bytes, or the
            // insert type and the TCI.
            let hdr_word = match hw_tag {
                Some(tci) => {
                    eth::INLINE_HDR_SZ.put(u64::from(ETH_WQE_INSERT_VLAN))
                        | eth::INLINE_HDR_START.put(u64::from(tci))
                }
                None => {
                    eth::INLINE_HDR_SZ.put(inline as u64)
                        | eth::INLINE_HDR_START
                            .put(u64::from(u16::from_be_bytes([head[0], head[1]])))
                }
            };
            let seg = EthSeg {
                cs_flags: cs,
                hdr_word,
            };
            if inline <= 18 {
                // One WQEBB: control, Ethernet segment with the first two header bytes, the
                // other sixteen, the data segment — eight word stores.
                write_eth_one_bb(ring.slot(0), ctrl, ce, seg, &head, inline, data);
            } else {
                write_eth(
                    ring.slots(),
                    usize::from(ring.cur()),
                    bbs,
                    &mut wqe,
                    ctrl,
                    ce,
                    seg,
                    &head[..inline],
                    (rest > 0).then_some(data),
                );
            }
            self.pool.set_owner(p.index, owner::DEVICE);
            ring.commit(u64::from(p.index), bbs as u16, ctrl);
            n += 1;
        }
        // The doorbell's producer moves only when something was written.
        let (ring, cur, last_ctrl) = ring.into_parts();
        if n > 0 {
            if self.since_completion != 0 {
                // The burst ended on the ring being full mid-way: its last WQE asks for a
                // completion too, or the ring would never drain (its control segment's
                // `fm_ce_se`).
                ring.slot(ctrl::WQE_INDEX.get(last_ctrl) as usize)
                    .write8(wqe_ctrl_seg::fm_ce_se.bit / 8, fm_ce_se::CQ_UPDATE);
                self.since_completion = 0;
            }
            // The doorbell record, then the doorbell's first 8 bytes (no BlueFlame copy:
            // the PMD's `mlx5_tx_dbrec`).
            self.doorbell.publish(
                self.port.dev.hal.bar0(),
                &self.dbr,
                &ring,
                cur,
                last_ctrl,
                false,
            );
        }
        n
    }

    /// Restarts a stopped queue: the packets not sent go back to the pool, the SQ goes
    /// ERR → RST → RDY.
    ///
    /// # Errors
    /// A command error (the queue stays stopped).
    pub fn recover(&mut self) -> Result<(), Error> {
        if self.stopped.is_none() {
            return Ok(());
        }
        self.modify(wq_state::ERR, wq_state::RST)?;
        self.return_queued();
        self.modify(wq_state::RST, wq_state::RDY)?;
        self.stopped = None;
        Ok(())
    }

    fn return_queued(&mut self) {
        let mut ci = self.tail.load(Ordering::Relaxed);
        if let Ok(book) = self.book.slots::<16>(0, 1 << self.log_size) {
            while ci != self.doorbell.cur() {
                let e = book.slot(usize::from(ci));
                let index = e.read_ne64(0) as u32;
                if self.pool.owner(index) == owner::DEVICE {
                    self.pool.put(index);
                }
                ci = next_wqe(ci, e.read_ne16(8));
            }
        }
        self.tail.store(0, Ordering::Relaxed);
        self.since_completion = 0;
        self.doorbell.reset();
    }
}

/// The WQEBB counter after the WQE at `ci`, as its book entry says (`next`), at least one
/// WQEBB on: a walk over the book always moves.
fn next_wqe(ci: u16, next: u16) -> u16 {
    if next == ci {
        ci.wrapping_add(1)
    } else {
        next
    }
}

impl<H: Hal> Drop for TxQueue<'_, '_, H> {
    fn drop(&mut self) {
        self.reclaim();
        let r = (|| {
            let mut i = [0u8; DestroySqIn::BYTES];
            input::<DestroySq>(&mut i)?.set(destroy_sq_in::sqn, self.sqn);
            self.port
                .dev
                .exec::<DestroySq>(&mut i, &mut [0u8; DestroySqOut::BYTES])
        })();
        match r {
            Ok(()) => self.return_queued(),
            Err(e) => warn!(
                "eth: DESTROY_SQ {}: {:?}; its buffers are not reused",
                self.sqn, e
            ),
        }
    }
}
