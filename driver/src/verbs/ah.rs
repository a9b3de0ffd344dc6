//! Address handles (`ibv_create_ah`, `ibv_destroy_ah`). On mlx5 the address vector is written
//! into each UD WQE, so an AH needs no firmware object: creating one checks the attributes
//! against the device and keeps them.

use bareverbs_hal::Hal;

use crate::error::{Error, Invalid};
use crate::verbs::pd::Pd;
use crate::verbs::post::UdDest;
use crate::verbs::qp::AhAttr;

/// An address handle of a PD.
pub struct Ah<'p, 'd, H: Hal> {
    _pd: &'p Pd<'d, H>,
    attr: AhAttr,
}

impl<'d, H: Hal> Pd<'d, H> {
    /// Creates an address handle (`ibv_create_ah`).
    ///
    /// # Errors
    /// [`Error::NoSuchPort`] for a port the device lacks; [`Error::InvalidArgument`] for a
    /// service level over 15, a LID of 0 without a GRH, or a GID index past the table.
    pub fn create_ah(&self, attr: AhAttr) -> Result<Ah<'_, 'd, H>, Error> {
        let caps = self.dev.info().caps;
        if attr.port_num == 0 || attr.port_num > caps.num_ports {
            return Err(Error::NoSuchPort {
                port: attr.port_num,
            });
        }
        let bad_gid = attr.is_global && u32::from(attr.grh.sgid_index) >= caps.gid_table_len;
        if attr.sl > 15 || (attr.dlid == 0 && !attr.is_global) || bad_gid {
            return Err(Error::InvalidArgument {
                what: Invalid::AddressVector,
            });
        }
        Ok(Ah { _pd: self, attr })
    }
}

impl<H: Hal> Ah<'_, '_, H> {
    /// The attributes (`ibv_query_ah`-style).
    pub fn attr(&self) -> AhAttr {
        self.attr
    }

    /// A UD destination through this AH.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            ah: self.attr,
            remote_qpn,
            remote_qkey,
        }
    }
}
