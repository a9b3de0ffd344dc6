//! The completion queue of one Ethernet queue: a CQE ring polled by owner bit, never armed
//! (the queues are polled), each CQE read into a [`Completion`] of the fields the Ethernet
//! path uses, the consumer index told to the device once per burst.

use bareverbs_firmware_cmd::commands::{CreateCq, DestroyCq};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::{dma_rmb, dma_wmb, Hal, SharedDma};

use crate::device::{input, Device};
use crate::error::Error;
use crate::wq::ring_pages::alloc_ring;

/// Bytes of a CQE.
const CQE: usize = 64;
/// `op_own` of an entry the device has not written: opcode INVALID, owner 0.
const OP_OWN_INIT: u8 = 0xf0;

/// What a CQE says, as the Ethernet queues read it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Completion {
    pub opcode: u8,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    pub hash: u32,
    pub hash_type: u8,
    pub hds_ip_ext: u8,
    pub l4_l3_hdr_type: u8,
    pub vlan_info: u16,
    /// Error CQEs: the syndrome.
    pub syndrome: u8,
}

/// A CQ of an Ethernet queue.
pub(crate) struct EthCq<'d, H: Hal> {
    dev: &'d Device<H>,
    pub cqn: u32,
    /// The CQE ring and doorbell record (taken, and leaked, when DESTROY_CQ fails: the device
    /// may still write them).
    ring: Option<SharedDma<H::Dma>>,
    dbr: Option<SharedDma<H::Dma>>,
    log_size: u8,
    ci: u32,
    polled: bool,
}

impl<'d, H: Hal> EthCq<'d, H> {
    /// A CQ of `1 << log_size` entries on the device's asynchronous EQ (never armed).
    pub fn new(dev: &'d Device<H>, log_size: u8) -> Result<Self, Error> {
        let eqn = dev.async_eqn().ok_or(Error::NotUp)?;
        let uar = dev.uar().ok_or(Error::NotUp)?;
        let (mut ring, pages) = alloc_ring(&dev.hal, (CQE << log_size).max(4096))?;
        for e in ring.as_mut_slice().chunks_mut(CQE) {
            e[CQE - 1] = OP_OWN_INIT;
        }
        let ring = ring.share();
        let dbr = dev.hal.dma_alloc(64, 64)?.share();
        let mut i = [0u8; CreateCqIn::BYTES + 8 * 8];
        let ilen = CreateCqIn::BYTES + 8 * pages.count;
        if pages.count > 8 {
            return Err(Error::ExceedsLimit {
                limit: crate::error::Limit::PacketBuffers,
                requested: 1 << log_size,
                max: (8 * pages.page / CQE) as u64,
            });
        }
        {
            let mut v = input::<CreateCq>(&mut i[..ilen])?;
            v.sub(create_cq_in::cq_context)
                .set(cqc::cqe_sz, cqc_cqe_sz::BYTES_64)
                .set(cqc::log_cq_size, log_size)
                .set(cqc::uar_page, uar.index().raw())
                .set(cqc::c_eqn_or_apu_element, eqn.raw())
                .set(cqc::log_page_size, pages.log_page)
                .set(cqc::dbr_addr, dbr.iova().0);
            for k in 0..pages.count {
                v.set_array(
                    create_cq_in::pas,
                    k,
                    ring.iova().0 + (k * pages.page) as u64,
                )?;
            }
        }
        let mut o = [0u8; CreateCqOut::BYTES];
        let [ring, dbr] =
            dev.exec_handing_over::<CreateCq, 2>(&mut i[..ilen], &mut o, [ring, dbr])?;
        let cqn = View::<CreateCqOut>::new_checked(&o)?.get32(create_cq_out::cqn);
        Ok(EthCq {
            dev,
            cqn,
            ring: Some(ring),
            dbr: Some(dbr),
            log_size,
            ci: 0,
            polled: false,
        })
    }

    /// The next completion, if the device has written it.
    #[inline]
    pub fn next(&mut self) -> Option<Completion> {
        let ring = self
            .ring
            .as_ref()?
            .slots::<CQE>(0, 1 << self.log_size)
            .ok()?;
        let e = ring.slot(self.ci as usize);
        let op_own = e.read8(CQE - 1);
        if get_cqe_opcode(op_own) == u8::from(CqeOpcode::Invalid)
            || !cqe_is_sw_owned(op_own, self.ci, self.log_size)
        {
            return None;
        }
        // ORDERING: the owner bit before the CQE's body.
        dma_rmb();
        let c = Completion {
            opcode: get_cqe_opcode(op_own),
            wqe_counter: e.read16(cqe64::wqe_counter.bit / 8),
            byte_cnt: e.read32(cqe64::byte_cnt.bit / 8),
            hash: e.read32(cqe64::rss_hash_result.bit / 8),
            hash_type: e.read8(cqe64::rss_hash_type.bit / 8),
            hds_ip_ext: e.read8(cqe64::hds_ip_ext.bit / 8),
            l4_l3_hdr_type: e.read8(cqe64::l4_l3_hdr_type.bit / 8),
            vlan_info: e.read16(cqe64::vlan_info.bit / 8),
            syndrome: e.read8(err_cqe::syndrome.bit / 8),
        };
        self.ci = self.ci.wrapping_add(1);
        self.polled = true;
        Some(c)
    }

    /// Tells the device the entries polled since the last call are free.
    #[inline]
    pub fn commit(&mut self) {
        if self.polled {
            // ORDERING: the CQEs are read before the device may reuse them.
            dma_wmb();
            if let Some(d) = &self.dbr {
                d.write32(cq_dbr::SET_CI, cq_set_ci_word(self.ci));
            }
            self.polled = false;
        }
    }
}

impl<H: Hal> Drop for EthCq<'_, H> {
    fn drop(&mut self) {
        let r = (|| {
            let mut i = [0u8; DestroyCqIn::BYTES];
            input::<DestroyCq>(&mut i)?.set(destroy_cq_in::cqn, self.cqn);
            self.dev
                .exec::<DestroyCq>(&mut i, &mut [0u8; DestroyCqOut::BYTES])
        })();
        if let Err(e) = r {
            warn!("eth: DESTROY_CQ {}: {:?}; leaking its memory", self.cqn, e);
            self.ring.take().into_iter().for_each(SharedDma::leak);
            self.dbr.take().into_iter().for_each(SharedDma::leak);
        }
    }
}
