//! Packet buffers: one DMA allocation cut into equal buffers, registered once, handed out as
//! [`Pkt`] handles (an index, a length and what the NIC said about the frame). Receive
//! queues take buffers to post and hand them to the caller full; send queues give them back
//! once the device has sent them. No allocation after creation: the free list and the
//! per-buffer owner bytes live in DMA memory made at creation.

use bareverbs_hal::{Hal, SharedDma};

use crate::error::{Error, Invalid, Limit};
use crate::eth::port::EthPort;
use crate::verbs::mr::{AccessFlags, Mr};

/// Who holds a buffer (one byte per buffer).
pub(crate) mod owner {
    /// In the pool's free list.
    pub const FREE: u8 = 0;
    /// The caller's.
    pub const USER: u8 = 1;
    /// Posted to a receive queue, or queued on a send queue until the device sent it.
    pub const DEVICE: u8 = 2;
}

/// Most buffers one pool holds.
pub const MAX_POOL_BUFFERS: u32 = 1 << 20;

bitflags::bitflags! {
    /// What the NIC said about a received frame, and what a sender asks of it.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct PktFlags: u16 {
        /// Received: the IPv4 header checksum is right (or the frame is IPv6).
        const L3_CSUM_OK = 1 << 0;
        /// Received: the TCP or UDP checksum is right.
        const L4_CSUM_OK = 1 << 1;
        /// Received: the NIC took the VLAN tag off; it is [`Pkt::vlan_tci`].
        const VLAN_STRIPPED = 1 << 2;
        /// Received: [`Pkt::rss_hash`] is the RSS hash the NIC computed.
        const RSS_HASH = 1 << 3;
        /// To send: the NIC fills the IPv4 header checksum and the TCP or UDP checksum.
        const TX_CSUM = 1 << 8;
        /// To send: a VLAN tag with [`Pkt::vlan_tci`] goes in after the MAC addresses (by the
        /// NIC, or in the WQE's inline headers when the port inlines them).
        const TX_VLAN_INSERT = 1 << 9;
    }
}

/// A packet buffer held by the caller: which buffer of which pool, how many bytes of it are
/// the frame, and what the NIC said about it. Plain data: hand it back to its pool
/// ([`PktPool::free`]) or to a send queue ([`TxQueue::tx_burst`](crate::eth::TxQueue)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pkt {
    pub(crate) pool: u32,
    pub(crate) index: u32,
    pub(crate) len: u32,
    pub(crate) hash: u32,
    pub(crate) flags: PktFlags,
    pub(crate) vlan: u16,
}

impl Pkt {
    /// An empty handle (for arrays the receive burst fills).
    pub const EMPTY: Pkt = Pkt {
        pool: 0,
        index: 0,
        len: 0,
        hash: 0,
        flags: PktFlags::empty(),
        vlan: 0,
    };

    /// Bytes of the frame.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The NIC's flags.
    pub fn flags(&self) -> PktFlags {
        self.flags
    }

    /// Asks the NIC to fill the IPv4 and TCP/UDP checksums when this packet is sent.
    pub fn set_tx_csum(&mut self, on: bool) {
        self.flags.set(PktFlags::TX_CSUM, on);
    }

    /// Asks for a VLAN tag with `tci` to be inserted when this packet is sent (`None`: none).
    pub fn set_vlan_insert(&mut self, tci: Option<u16>) {
        self.flags.set(PktFlags::TX_VLAN_INSERT, tci.is_some());
        self.vlan = tci.unwrap_or(0);
    }

    /// The RSS hash (with [`PktFlags::RSS_HASH`]).
    pub fn rss_hash(&self) -> u32 {
        self.hash
    }

    /// The stripped VLAN tag (with [`PktFlags::VLAN_STRIPPED`]), or the one to insert (with
    /// [`PktFlags::TX_VLAN_INSERT`]).
    pub fn vlan_tci(&self) -> u16 {
        self.vlan
    }
}

/// A pool of equal packet buffers in DMA memory, registered with the port's PD.
pub struct PktPool<'p, 'd, H: Hal> {
    mr: Mr<'p, 'd, H>,
    buf_size: u32,
    count: u32,
    /// Free list (a stack of buffer indexes, u32 each) and owner bytes after it.
    books: SharedDma<H::Dma>,
    top: spin::Mutex<u32>,
}

impl<'p, 'd, H: Hal> PktPool<'p, 'd, H> {
    /// `count` buffers of `buf_size` bytes (rounded up to 64), all free.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] ([`Limit::PacketBuffers`]) for 0 or more than
    /// [`MAX_POOL_BUFFERS`] buffers or buffers over 64 KiB; a DMA or command error.
    pub fn new(port: &'p EthPort<'d, H>, count: u32, buf_size: usize) -> Result<Self, Error> {
        if count == 0 || count > MAX_POOL_BUFFERS || buf_size == 0 || buf_size > 65536 {
            return Err(Error::ExceedsLimit {
                limit: Limit::PacketBuffers,
                requested: u64::from(count),
                max: u64::from(MAX_POOL_BUFFERS),
            });
        }
        let buf_size = buf_size.next_multiple_of(64);
        let bytes = buf_size * count as usize;
        let hal = &port.dev.hal;
        // Hugepage-aligned when the HAL can, so the region takes few translation entries.
        let mem = match hal.dma_alloc(bytes, 2 << 20) {
            Ok(m) => m,
            Err(_) => hal.dma_alloc(bytes, 4096)?,
        };
        let mr = port
            .pd
            .reg_mr(mem.share(), AccessFlags::LOCAL_WRITE)
            .map_err(|(e, _)| e)?;
        let books = hal.dma_alloc(5 * count as usize, 64)?.share();
        for k in 0..count {
            books.write32(4 * k as usize, k);
        }
        Ok(PktPool {
            mr,
            buf_size: buf_size as u32,
            count,
            books,
            top: spin::Mutex::new(count),
        })
    }

    /// Bytes of each buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size as usize
    }

    /// Buffers in the pool.
    pub fn capacity(&self) -> u32 {
        self.count
    }

    /// Buffers free now.
    pub fn available(&self) -> u32 {
        *self.top.lock()
    }

    fn id(&self) -> u32 {
        self.mr.lkey().raw()
    }

    pub(crate) fn lkey(&self) -> u32 {
        self.mr.lkey().raw()
    }

    /// The device address of buffer `index`.
    pub(crate) fn iova(&self, index: u32) -> u64 {
        self.mr.addr() + u64::from(index) * u64::from(self.buf_size)
    }

    fn owner_at(&self, index: u32) -> usize {
        4 * self.count as usize + index as usize
    }

    pub(crate) fn owner(&self, index: u32) -> u8 {
        self.books.read8(self.owner_at(index))
    }

    pub(crate) fn set_owner(&self, index: u32, who: u8) {
        self.books.write8(self.owner_at(index), who);
    }

    /// Takes a free buffer for `who`.
    pub(crate) fn take(&self, who: u8) -> Option<u32> {
        let mut top = self.top.lock();
        if *top == 0 {
            return None;
        }
        *top -= 1;
        let index = self.books.read32(4 * *top as usize);
        drop(top);
        self.set_owner(index, who);
        Some(index)
    }

    /// Takes up to `out.len()` free buffers for `who` under one lock; returns how many.
    pub(crate) fn take_bulk(&self, who: u8, out: &mut [u32]) -> usize {
        let mut top = self.top.lock();
        let n = out.len().min(*top as usize);
        for slot in out[..n].iter_mut() {
            *top -= 1;
            *slot = self.books.read32(4 * *top as usize);
        }
        drop(top);
        for &index in &out[..n] {
            self.set_owner(index, who);
        }
        n
    }

    /// Returns buffers to the free list under one lock.
    pub(crate) fn put_bulk(&self, indexes: &[u32]) {
        for &index in indexes {
            self.set_owner(index, owner::FREE);
        }
        let mut top = self.top.lock();
        for &index in indexes {
            self.books.write32(4 * *top as usize, index);
            *top += 1;
        }
    }

    /// Returns buffer `index` to the free list.
    pub(crate) fn put(&self, index: u32) {
        self.set_owner(index, owner::FREE);
        let mut top = self.top.lock();
        self.books.write32(4 * *top as usize, index);
        *top += 1;
    }

    /// A handle of this pool for buffer `index`, `len` bytes.
    pub(crate) fn handle(&self, index: u32, len: u32) -> Pkt {
        Pkt {
            pool: self.id(),
            index,
            len,
            ..Pkt::EMPTY
        }
    }

    /// Checks that `pkt` is a buffer of this pool the caller holds.
    pub(crate) fn check(&self, pkt: &Pkt) -> Result<(), Error> {
        if pkt.pool != self.id() || pkt.index >= self.count || self.owner(pkt.index) != owner::USER
        {
            return Err(Error::InvalidArgument {
                what: Invalid::ForeignPacket,
            });
        }
        Ok(())
    }

    /// An empty buffer for the caller to fill, or `None` when every buffer is in use.
    pub fn alloc(&self) -> Option<Pkt> {
        self.take(owner::USER).map(|i| self.handle(i, 0))
    }

    /// Gives a buffer back.
    ///
    /// # Errors
    /// [`Invalid::ForeignPacket`] for a handle of another pool or not held by the caller
    /// (freed twice, or still queued for sending).
    pub fn free(&self, pkt: Pkt) -> Result<(), Error> {
        self.check(&pkt)?;
        self.put(pkt.index);
        Ok(())
    }

    /// Copies `data` into the packet at byte `off`; the packet's length becomes at least
    /// `off + data.len()`.
    ///
    /// # Errors
    /// [`Invalid::ForeignPacket`]; [`Invalid::PacketLength`] past the buffer.
    pub fn write(&self, pkt: &mut Pkt, off: usize, data: &[u8]) -> Result<(), Error> {
        self.check(pkt)?;
        let end = off
            .checked_add(data.len())
            .filter(|&e| e <= self.buf_size as usize);
        let Some(end) = end else {
            return Err(Error::InvalidArgument {
                what: Invalid::PacketLength,
            });
        };
        let base = pkt.index as usize * self.buf_size as usize;
        self.mr.buf().write_bytes(base + off, data)?;
        pkt.len = pkt.len.max(end as u32);
        Ok(())
    }

    /// Sets the packet's length.
    ///
    /// # Errors
    /// [`Invalid::ForeignPacket`]; [`Invalid::PacketLength`] past the buffer.
    pub fn set_len(&self, pkt: &mut Pkt, len: usize) -> Result<(), Error> {
        self.check(pkt)?;
        if len > self.buf_size as usize {
            return Err(Error::InvalidArgument {
                what: Invalid::PacketLength,
            });
        }
        pkt.len = len as u32;
        Ok(())
    }

    /// Copies bytes from `off` of the packet into `dst`; returns how many (up to the frame's
    /// end).
    ///
    /// # Errors
    /// [`Invalid::ForeignPacket`].
    pub fn read(&self, pkt: &Pkt, off: usize, dst: &mut [u8]) -> Result<usize, Error> {
        self.check(pkt)?;
        let n = dst.len().min(pkt.len().saturating_sub(off));
        let base = pkt.index as usize * self.buf_size as usize;
        self.mr.buf().read_bytes(base + off, &mut dst[..n])?;
        Ok(n)
    }

    /// Reads up to `dst.len()` bytes of buffer `index` from its start (for the send path's
    /// header look-up; no owner check).
    pub(crate) fn peek(&self, index: u32, dst: &mut [u8]) {
        let base = index as usize * self.buf_size as usize;
        let _ = self.mr.buf().read_bytes(base, dst);
    }
}
