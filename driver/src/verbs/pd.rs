//! Protection domains and transport domains (ALLOC/DEALLOC_PD, ALLOC/DEALLOC_TRANSPORT_DOMAIN;
//! mlx5-reference 06 §1, §3). Objects that belong to a PD borrow it, so a PD cannot go away
//! while they exist.

use bareverbs_firmware_cmd::commands::{
    AllocPd, AllocTransportDomain, DeallocPd, DeallocTransportDomain,
};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, Pdn, View};
use bareverbs_hal::Hal;

use crate::device::{input, Device};
use crate::error::Error;

/// A protection domain. Deallocated on drop.
pub struct Pd<'d, H: Hal> {
    pub(crate) dev: &'d Device<H>,
    pdn: Pdn,
}

impl<H: Hal> Device<H> {
    /// Allocates a protection domain (`ibv_alloc_pd`).
    ///
    /// # Errors
    /// A command error when firmware has no PD left.
    pub fn alloc_pd(&self) -> Result<Pd<'_, H>, Error> {
        let mut i = [0u8; AllocPdIn::BYTES];
        input::<AllocPd>(&mut i)?;
        let mut o = [0u8; AllocPdOut::BYTES];
        self.exec::<AllocPd>(&mut i, &mut o)?;
        let pdn = Pdn(View::<AllocPdOut>::new_checked(&o)?.get32(alloc_pd_out::pd));
        Ok(Pd { dev: self, pdn })
    }

    /// Allocates a transport domain (for raw packet and Ethernet objects).
    ///
    /// # Errors
    /// A command error when firmware has none left.
    pub fn alloc_transport_domain(&self) -> Result<TransportDomain<'_, H>, Error> {
        let mut i = [0u8; AllocTransportDomainIn::BYTES];
        input::<AllocTransportDomain>(&mut i)?;
        let mut o = [0u8; AllocTransportDomainOut::BYTES];
        self.exec::<AllocTransportDomain>(&mut i, &mut o)?;
        let tdn = View::<AllocTransportDomainOut>::new_checked(&o)?
            .get32(alloc_transport_domain_out::transport_domain);
        Ok(TransportDomain { dev: self, tdn })
    }
}

impl<H: Hal> Pd<'_, H> {
    /// The PD number.
    pub fn pdn(&self) -> Pdn {
        self.pdn
    }

    fn dealloc_inner(&self) -> Result<(), Error> {
        let mut i = [0u8; DeallocPdIn::BYTES];
        input::<DeallocPd>(&mut i)?.set(dealloc_pd_in::pd, self.pdn.raw());
        let mut o = [0u8; DeallocPdOut::BYTES];
        self.dev.exec::<DeallocPd>(&mut i, &mut o)
    }

    /// Deallocates the PD (`ibv_dealloc_pd`), reporting errors that drop would ignore.
    ///
    /// # Errors
    /// A command error.
    pub fn dealloc(self) -> Result<(), Error> {
        let r = self.dealloc_inner();
        core::mem::forget(self);
        r
    }
}

impl<H: Hal> Drop for Pd<'_, H> {
    fn drop(&mut self) {
        if let Err(e) = self.dealloc_inner() {
            warn!("DEALLOC_PD {}: {}", self.pdn, e);
        }
    }
}

/// A transport domain. Deallocated on drop.
pub struct TransportDomain<'d, H: Hal> {
    dev: &'d Device<H>,
    tdn: u32,
}

impl<H: Hal> TransportDomain<'_, H> {
    /// The transport domain number.
    pub fn tdn(&self) -> u32 {
        self.tdn
    }
}

impl<H: Hal> Drop for TransportDomain<'_, H> {
    fn drop(&mut self) {
        let mut i = [0u8; DeallocTransportDomainIn::BYTES];
        let mut o = [0u8; DeallocTransportDomainOut::BYTES];
        let r = input::<DeallocTransportDomain>(&mut i)
            .map(|mut v| {
                v.set(dealloc_transport_domain_in::transport_domain, self.tdn);
            })
            .and_then(|()| self.dev.exec::<DeallocTransportDomain>(&mut i, &mut o));
        if let Err(e) = r {
            warn!("DEALLOC_TRANSPORT_DOMAIN {}: {}", self.tdn, e);
        }
    }
}
