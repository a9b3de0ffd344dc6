//! The completion queue of one Ethernet queue: CREATE_CQ and DESTROY_CQ around a completion
//! ring (`wq/cq_ring.rs`) that is never armed (the queues are polled); each CQE is read once
//! into a [`CqeRepr`], the consumer index told to the device once per burst.

use bareverbs_firmware_cmd::commands::{CreateCq, DestroyCq};
use bareverbs_firmware_cmd::cqe_repr::CqeRepr;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::{Hal, SharedDma};

use crate::device::{input, Device};
use crate::error::Error;
use crate::wq::cq_ring::{init_entries, CqRing, CQE_BYTES as CQE};
use crate::wq::ring_pages::alloc_ring;

/// A CQ of an Ethernet queue.
pub(crate) struct EthCq<'d, H: Hal> {
    dev: &'d Device<H>,
    pub cqn: u32,
    /// The ring (always there until the CQ is dropped).
    ring: Option<CqRing<H::Dma>>,
}

impl<'d, H: Hal> EthCq<'d, H> {
    /// A CQ of `1 << log_size` entries on the device's asynchronous EQ (never armed).
    pub fn new(dev: &'d Device<H>, log_size: u8) -> Result<Self, Error> {
        let eqn = dev.async_eqn().ok_or(Error::NotUp)?;
        let uar = dev.uar().ok_or(Error::NotUp)?;
        let (mut ring, pages) = alloc_ring(&dev.hal, (CQE << log_size).max(4096))?;
        init_entries(ring.as_mut_slice());
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
        let ring = match CqRing::new(ring, dbr, log_size) {
            Ok(r) => r,
            Err((e, mem)) => {
                // Never for the sizes allocated above; the CQ exists, so it goes first.
                release(dev, cqn, mem);
                return Err(e.into());
            }
        };
        Ok(EthCq {
            dev,
            cqn,
            ring: Some(ring),
        })
    }

    /// The next completion, if the device has written it.
    #[inline]
    pub fn next(&mut self) -> Option<CqeRepr> {
        self.ring.as_mut()?.next()
    }

    /// Tells the device the entries polled since the last call are free.
    #[inline]
    pub fn commit(&mut self) {
        if let Some(r) = self.ring.as_mut() {
            r.commit();
        }
    }
}

impl<H: Hal> Drop for EthCq<'_, H> {
    fn drop(&mut self) {
        if let Some(r) = self.ring.take() {
            release(self.dev, self.cqn, r.into_memory());
        }
    }
}

/// DESTROY_CQ `cqn`; its memory is freed once the device no longer writes it, leaked when
/// the command fails.
fn release<H: Hal>(dev: &Device<H>, cqn: u32, mem: [SharedDma<H::Dma>; 2]) {
    let r = (|| {
        let mut i = [0u8; DestroyCqIn::BYTES];
        input::<DestroyCq>(&mut i)?.set(destroy_cq_in::cqn, cqn);
        dev.exec::<DestroyCq>(&mut i, &mut [0u8; DestroyCqOut::BYTES])
    })();
    if let Err(e) = r {
        warn!("eth: DESTROY_CQ {}: {:?}; leaking its memory", cqn, e);
        mem.into_iter().for_each(SharedDma::leak);
    }
}
