//! A receive queue: an RQ whose cyclic ring holds one data segment per WQE, each pointing at
//! a pool buffer; its CQ; and a TIR that delivers to it alone, the destination flow rules
//! name. [`RxQueue::rx_burst`] hands filled buffers to the caller and posts fresh ones in
//! their place, telling the device once per burst (rdma-core's `mlx5_wq` cyclic RQ, the mlx5
//! PMD's `mlx5_rx_burst`).

use bareverbs_firmware_cmd::commands::{CreateRq, CreateTir, DestroyRq, DestroyTir, ModifyRq};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::{Hal, SharedDma};

use crate::cmdq::MAX_MESSAGE;
use crate::device::input;
use crate::error::{Error, Limit};
use crate::eth::cq::EthCq;
use crate::eth::pool::{owner, Pkt, PktFlags, PktPool};
use crate::eth::port::EthPort;
use crate::wq::recv_queue::{publish_recv, write_recv_wqe, RECV_UNIT};
use crate::wq::ring_pages::alloc_ring;

/// Bytes of a receive WQE: one data segment.
const RX_WQE: usize = RECV_UNIT;
/// Buffers taken from the pool at once by a receive burst.
const RX_CHUNK: usize = 32;
/// Most entries of an Ethernet queue.
pub const MAX_QUEUE_ENTRIES: u32 = 1 << 15;
/// `cqe.hds_ip_ext` flags.
const CQE_L3_OK: u8 = 1 << 1;
const CQE_L4_OK: u8 = 1 << 2;

/// What to create. Non-exhaustive (offloads to come): [`RxQueueAttr::new`] or
/// [`RxQueueAttr::default`], then set fields.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RxQueueAttr {
    /// Receive WQEs (a power of two is used, at least this many).
    pub entries: u32,
    /// Let the NIC take the first VLAN tag off (its TCI is then [`Pkt::vlan_tci`]).
    pub vlan_strip: bool,
}

impl RxQueueAttr {
    /// A queue of `entries` receive WQEs, VLAN tags left in the frames.
    pub fn new(entries: u32) -> Self {
        RxQueueAttr {
            entries,
            vlan_strip: false,
        }
    }
}

impl Default for RxQueueAttr {
    fn default() -> Self {
        RxQueueAttr {
            entries: 256,
            vlan_strip: false,
        }
    }
}

/// A receive queue of an Ethernet port. Dropping it destroys its TIR, RQ and CQ and returns
/// its posted buffers to the pool; drop the flow rules naming it first.
pub struct RxQueue<'p, 'd, H: Hal> {
    port: &'p EthPort<'d, H>,
    pool: &'p PktPool<'p, 'd, H>,
    pub(crate) rqn: u32,
    pub(crate) tirn: u32,
    ring: SharedDma<H::Dma>,
    dbr: SharedDma<H::Dma>,
    /// The pool buffer of each ring slot (8 bytes each).
    slots: SharedDma<H::Dma>,
    log_size: u8,
    /// WQEs posted and WQEs completed (ring counters, modulo 2^16).
    pi: u16,
    ci: u16,
    errors: u64,
    last_syndrome: Option<u8>,
    cq: EthCq<'d, H>,
}

impl<'p, 'd, H: Hal> RxQueue<'p, 'd, H> {
    /// A receive queue of `port` taking its buffers from `pool`, every WQE posted.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] ([`Limit::PacketBuffers`]) for 0 or more than
    /// [`MAX_QUEUE_ENTRIES`] entries or more entries than the pool has free; a DMA or command
    /// error.
    pub fn new(
        port: &'p EthPort<'d, H>,
        pool: &'p PktPool<'p, 'd, H>,
        attr: RxQueueAttr,
    ) -> Result<Self, Error> {
        let dev = port.dev;
        let (entries, log_size) =
            queue_size(attr.entries, MAX_QUEUE_ENTRIES.min(pool.available()))?;
        let cq = EthCq::new(dev, log_size)?;
        let (ring, pages) = alloc_ring(&dev.hal, entries as usize * RX_WQE)?;
        let ring = ring.share();
        let dbr = dev.hal.dma_alloc(64, 64)?.share();
        let slots = dev.hal.dma_alloc(8 * entries as usize, 64)?.share();
        let mut q = RxQueue {
            port,
            pool,
            rqn: 0,
            tirn: 0,
            ring,
            dbr,
            slots,
            log_size,
            pi: 0,
            ci: 0,
            errors: 0,
            last_syndrome: None,
            cq,
        };
        for _ in 0..entries {
            let index = pool.take(owner::DEVICE).ok_or(Error::ExceedsLimit {
                limit: Limit::PacketBuffers,
                requested: u64::from(entries),
                max: u64::from(pool.available()),
            })?;
            q.post(index);
        }
        publish_recv(&q.dbr, q.pi);
        let ilen = CreateRqIn::BYTES + 8 * pages.count;
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
        {
            let mut v = input::<CreateRq>(&mut i[..ilen])?;
            let mut c = v.sub(create_rq_in::ctx);
            c.set(rqc::vsd, u8::from(!attr.vlan_strip))
                .set(rqc::cqn, q.cq.cqn)
                .set(rqc::state, wq_state::RST);
            c.sub(rqc::wq)
                .set(wq::wq_type, wq_type::CYCLIC)
                .set(wq::pd, port.pd.pdn().raw())
                .set(wq::dbr_addr, q.dbr.iova().0)
                .set(wq::log_wq_stride, RX_WQE.trailing_zeros() as u8)
                .set(wq::log_wq_pg_sz, pages.log_page)
                .set(wq::log_wq_sz, log_size);
            for k in 0..pages.count {
                v.set_array(
                    create_rq_in::pas,
                    k,
                    q.ring.iova().0 + (k * pages.page) as u64,
                )?;
            }
        }
        let mut o = [0u8; CreateRqOut::BYTES];
        dev.exec::<CreateRq>(&mut i[..ilen], &mut o)?;
        q.rqn = View::<CreateRqOut>::new_checked(&o)?.get32(create_rq_out::rqn);
        q.modify(wq_state::RST, wq_state::RDY)?;
        q.tirn = create_direct_tir(port, q.rqn)?;
        Ok(q)
    }

    /// Writes WQE `pi` with pool buffer `index` and counts it posted.
    #[inline]
    fn post(&mut self, index: u32) {
        let n = 1usize << self.log_size;
        let (Ok(ring), Ok(slots)) = (self.ring.slots::<RX_WQE>(0, n), self.slots.slots::<8>(0, n))
        else {
            return;
        };
        let at = usize::from(self.pi);
        let seg = (
            self.pool.iova(index),
            self.pool.buf_size() as u32,
            self.pool.lkey(),
        );
        write_recv_wqe(&ring, at, 1, core::iter::once(seg));
        slots.slot(at).write64(0, u64::from(index));
        self.pi = self.pi.wrapping_add(1);
    }

    /// The pool buffer posted in ring slot `at`.
    #[inline]
    fn slot_buffer(&self, at: usize) -> u32 {
        self.slots
            .slots::<8>(0, 1 << self.log_size)
            .map_or(0, |s| s.slot(at).read64(0) as u32)
    }

    fn set_slot_buffer(&self, at: usize, index: u32) {
        if let Ok(s) = self.slots.slots::<8>(0, 1 << self.log_size) {
            s.slot(at).write64(0, u64::from(index));
        }
    }

    fn modify(&self, from: u8, to: u8) -> Result<(), Error> {
        let mut i = [0u8; ModifyRqIn::BYTES];
        {
            let mut v = input::<ModifyRq>(&mut i)?;
            v.set(modify_rq_in::rq_state, from)
                .set(modify_rq_in::rqn, self.rqn);
            v.sub(modify_rq_in::ctx).set(rqc::state, to);
        }
        self.port
            .dev
            .exec::<ModifyRq>(&mut i, &mut [0u8; ModifyRqOut::BYTES])
    }

    /// Whether this queue is `port`'s.
    pub(crate) fn belongs_to(&self, port: &EthPort<'_, H>) -> bool {
        core::ptr::eq(
            self.port as *const EthPort<'_, H> as *const u8,
            port as *const EthPort<'_, H> as *const u8,
        )
    }

    /// The RQ number.
    pub fn rqn(&self) -> u32 {
        self.rqn
    }

    /// Frames whose completion reported an error (the queue then stops; [`RxQueue::recover`]).
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// The syndrome of the last error completion, while the queue is stopped.
    pub fn stopped(&self) -> Option<u8> {
        self.last_syndrome
    }

    /// Receives up to `pkts.len()` frames into `pkts`; returns how many. Each is a pool
    /// buffer the caller now holds; a fresh buffer takes its place in the ring. When the pool
    /// is empty the burst ends early and the frames wait in the CQ (the device drops what
    /// finds no WQE). A frame with an error completion stops the queue. The CQ and the RQ's
    /// doorbell record are told once per burst.
    pub fn rx_burst(&mut self, pkts: &mut [Pkt]) -> usize {
        if self.last_syndrome.is_some() {
            return 0;
        }
        let mut n = 0;
        // Replacements are taken from the pool in bulk, one lock per chunk.
        while n < pkts.len() {
            let mut fresh = [0u32; RX_CHUNK];
            let want = (pkts.len() - n).min(RX_CHUNK);
            let have = self.pool.take_bulk(owner::DEVICE, &mut fresh[..want]);
            let got = self.rx_chunk(&mut pkts[n..n + have], &fresh[..have]);
            if got < have {
                self.pool.put_bulk(&fresh[got..have]);
            }
            n += got;
            if got < want {
                break;
            }
        }
        if n > 0 || self.last_syndrome.is_some() {
            self.cq.commit();
            publish_recv(&self.dbr, self.pi);
        }
        n
    }

    /// Receives up to `fresh.len()` frames, posting `fresh` buffers in their place; returns
    /// how many (and so how many of `fresh` were used).
    #[inline]
    fn rx_chunk(&mut self, pkts: &mut [Pkt], fresh: &[u32]) -> usize {
        // The ring views are made once per chunk: every index below is masked into them.
        let size = 1usize << self.log_size;
        let (Ok(ring), Ok(slots)) = (
            self.ring.slots::<RX_WQE>(0, size),
            self.slots.slots::<8>(0, size),
        ) else {
            return 0;
        };
        let (len, lkey) = (self.pool.buf_size() as u32, self.pool.lkey());
        let mut n = 0;
        while n < fresh.len() {
            let Some(c) = self.cq.next() else {
                break;
            };
            let index = slots.slot(usize::from(c.wqe_counter)).read64(0) as u32;
            self.ci = self.ci.wrapping_add(1);
            if c.opcode != u8::from(CqeOpcode::RespSend) {
                self.errors += 1;
                self.last_syndrome = Some(c.syndrome);
                self.pool.put(index);
                break;
            }
            self.pool.set_owner(index, owner::USER);
            let mut flags = PktFlags::empty();
            if c.hds_ip_ext & CQE_L3_OK != 0 {
                flags |= PktFlags::L3_CSUM_OK;
            }
            if c.hds_ip_ext & CQE_L4_OK != 0 {
                flags |= PktFlags::L4_CSUM_OK;
            }
            if c.l4_l3_hdr_type & 1 != 0 {
                flags |= PktFlags::VLAN_STRIPPED;
            }
            if c.rss_hash_type != 0 {
                flags |= PktFlags::RSS_HASH;
            }
            let mut p = self.pool.handle(index, c.byte_cnt);
            p.flags = flags;
            p.hash = c.rss_hash_result;
            p.vlan = c.vlan_info;
            pkts[n] = p;
            // The fresh buffer goes into WQE `pi` (one data segment fills it).
            let at = usize::from(self.pi);
            write_recv_wqe(
                &ring,
                at,
                1,
                core::iter::once((self.pool.iova(fresh[n]), len, lkey)),
            );
            slots.slot(at).write64(0, u64::from(fresh[n]));
            self.pi = self.pi.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// Restarts a stopped queue: RQ ERR → RST → RDY, the buffers still posted moved to the
    /// ring's start (a reset RQ starts at WQE 0).
    ///
    /// # Errors
    /// A command error (the queue stays stopped).
    pub fn recover(&mut self) -> Result<(), Error> {
        if self.last_syndrome.is_none() {
            return Ok(());
        }
        self.modify(wq_state::ERR, wq_state::RST)?;
        let size = 1usize << self.log_size;
        let outstanding = usize::from(self.pi.wrapping_sub(self.ci)).min(size);
        // Rotate the slot table so the oldest posted buffer is at slot 0.
        let m = usize::from(self.ci) & (size - 1);
        self.reverse(0, m);
        self.reverse(m, size);
        self.reverse(0, size);
        self.pi = 0;
        self.ci = 0;
        for k in 0..outstanding {
            let index = self.slot_buffer(k);
            self.post(index);
        }
        publish_recv(&self.dbr, self.pi);
        self.modify(wq_state::RST, wq_state::RDY)?;
        self.last_syndrome = None;
        Ok(())
    }

    fn reverse(&self, mut a: usize, mut b: usize) {
        while a + 1 < b {
            b -= 1;
            let (x, y) = (self.slot_buffer(a), self.slot_buffer(b));
            self.set_slot_buffer(a, y);
            self.set_slot_buffer(b, x);
            a += 1;
        }
    }
}

/// An Ethernet queue's ring: `requested` entries rounded up to a power of two, at most `max`;
/// the entries and their log2.
pub(crate) fn queue_size(requested: u32, max: u32) -> Result<(u32, u8), Error> {
    let entries = requested.max(1).next_power_of_two();
    if requested == 0 || entries > max {
        return Err(Error::ExceedsLimit {
            limit: Limit::PacketBuffers,
            requested: u64::from(requested),
            max: u64::from(max),
        });
    }
    Ok((entries, entries.trailing_zeros() as u8))
}

/// A TIR delivering everything it gets to RQ `rqn`.
fn create_direct_tir<H: Hal>(port: &EthPort<'_, H>, rqn: u32) -> Result<u32, Error> {
    let mut i = [0u8; CreateTirIn::BYTES];
    input::<CreateTir>(&mut i)?
        .sub(create_tir_in::ctx)
        .set(tirc::disp_type, tir_disp_type::DIRECT)
        .set(tirc::inline_rqn, rqn)
        .set(tirc::transport_domain, port.td.tdn());
    let mut o = [0u8; CreateTirOut::BYTES];
    port.dev.exec::<CreateTir>(&mut i, &mut o)?;
    Ok(View::<CreateTirOut>::new_checked(&o)?.get32(create_tir_out::tirn))
}

/// Destroys TIR `tirn`, with a warning on failure.
pub(crate) fn destroy_tir<H: Hal>(port: &EthPort<'_, H>, tirn: u32) {
    let r = (|| {
        let mut i = [0u8; DestroyTirIn::BYTES];
        input::<DestroyTir>(&mut i)?.set(destroy_tir_in::tirn, tirn);
        port.dev
            .exec::<DestroyTir>(&mut i, &mut [0u8; DestroyTirOut::BYTES])
    })();
    if let Err(e) = r {
        warn!("eth: DESTROY_TIR {}: {:?}", tirn, e);
    }
}

impl<H: Hal> Drop for RxQueue<'_, '_, H> {
    fn drop(&mut self) {
        if self.tirn != 0 {
            destroy_tir(self.port, self.tirn);
        }
        if self.rqn == 0 {
            // Creation failed before the RQ existed: the posted buffers are the pool's again.
            self.return_posted();
            return;
        }
        let r = (|| {
            let mut i = [0u8; DestroyRqIn::BYTES];
            input::<DestroyRq>(&mut i)?.set(destroy_rq_in::rqn, self.rqn);
            self.port
                .dev
                .exec::<DestroyRq>(&mut i, &mut [0u8; DestroyRqOut::BYTES])
        })();
        match r {
            Ok(()) => self.return_posted(),
            Err(e) => {
                // The device may still write the buffers: they stay out of the pool.
                warn!(
                    "eth: DESTROY_RQ {}: {:?}; its buffers are not reused",
                    self.rqn, e
                );
            }
        }
    }
}

impl<H: Hal> RxQueue<'_, '_, H> {
    fn return_posted(&mut self) {
        let size = 1u16 << self.log_size;
        let outstanding = self.pi.wrapping_sub(self.ci).min(size);
        for k in 0..outstanding {
            let index = self.slot_buffer(usize::from(self.ci.wrapping_add(k)));
            if self.pool.owner(index) == owner::DEVICE {
                self.pool.put(index);
            }
        }
        self.pi = self.ci;
    }
}
