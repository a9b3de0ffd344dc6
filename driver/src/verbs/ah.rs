//! Address handles (`ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`) and the port's GID table (`ibv_query_gid`, QUERY_HCA_VPORT_GID).
//! On mlx5 the address vector is written into each UD WQE, so an AH needs no firmware object:
//! creating one checks the attributes against the device and keeps them.

use bareverbs_firmware_cmd::commands::QueryHcaVportGid;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::Hal;

use crate::device::{input, Device};
use crate::error::{Error, Invalid};
use crate::verbs::pd::Pd;
use crate::verbs::post::{DcDest, UdDest};
use crate::verbs::qp::{AhAttr, GlobalRoute};
use crate::verbs::wc::{Wc, WcFlags};

/// `next_hdr` of a GRH over InfiniBand: the IBA transport (libibverbs `IB_NEXT_HDR`).
const IB_NEXT_HDR: u8 = 0x1b;

impl<H: Hal> Device<H> {
    /// Entry `index` of port `port`'s GID table (`ibv_query_gid`; QUERY_HCA_VPORT_GID). An
    /// empty entry reads as zeros.
    ///
    /// # Errors
    /// [`Error::NoSuchPort`]; [`Error::ExceedsLimit`] for an index past the table
    /// (`Caps::gid_table_len`); a command error.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<[u8; 16], Error> {
        let caps = self.info().caps;
        if port == 0 || port > caps.num_ports {
            return Err(Error::NoSuchPort { port });
        }
        if index >= caps.gid_table_len {
            return Err(Error::ExceedsLimit {
                limit: crate::error::Limit::GidIndex,
                requested: index.into(),
                max: u64::from(caps.gid_table_len).saturating_sub(1),
            });
        }
        let mut i = [0u8; QueryHcaVportGidIn::BYTES];
        {
            let mut v = input::<QueryHcaVportGid>(&mut i)?;
            // Linux vport.c names the port only on a two-port function.
            if caps.num_ports == 2 {
                v.set(query_hca_vport_gid_in::port_num, port);
            }
            v.set(query_hca_vport_gid_in::gid_index, index);
        }
        let mut o = [0u8; QueryHcaVportGidOut::BYTES];
        self.exec::<QueryHcaVportGid>(&mut i, &mut o)?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(
            View::<QueryHcaVportGidOut>::new_checked(&o)?.bytes(query_hca_vport_gid_out::gid),
        );
        Ok(gid)
    }

    /// The address vector that answers a received datagram (`ibv_init_ah_from_wc`, as
    /// libibverbs 56 computes it for InfiniBand): DLID the completion's SLID, its SL, source
    /// path bits its DLID path bits, `port_num`; with [`WcFlags::GRH`], the GRH (the first 40
    /// bytes of the receive buffer) reversed: destination GID its source GID, source GID index
    /// the index of its destination GID in the port's table, its flow label, hop limit and
    /// traffic class.
    ///
    /// # Errors
    /// [`Error::NoSuchPort`]; [`Invalid::GrhMissing`] for a completion with a GRH and no
    /// `grh`; [`Invalid::GrhUnsupported`] for a GRH that is not IPv6 with the IBA next header
    /// (RoCE's IPv4/UDP forms) or whose destination is a multicast GID (libibverbs: no point
    /// searching the table for it); [`Invalid::GidNotFound`] when the destination GID is not
    /// in the port's table; a command error.
    pub fn init_ah_from_wc(
        &self,
        port_num: u8,
        wc: &Wc,
        grh: Option<&[u8; 40]>,
    ) -> Result<AhAttr, Error> {
        let caps = self.info().caps;
        if port_num == 0 || port_num > caps.num_ports {
            return Err(Error::NoSuchPort { port: port_num });
        }
        let mut attr = AhAttr {
            dlid: wc.slid,
            sl: wc.sl,
            src_path_bits: wc.dlid_path_bits,
            port_num,
            ..AhAttr::default()
        };
        if !wc.wc_flags.contains(WcFlags::GRH) {
            return Ok(attr);
        }
        let invalid = |what| Error::InvalidArgument { what };
        let g = grh.ok_or(invalid(Invalid::GrhMissing))?;
        let word0 = u32::from_be_bytes([g[0], g[1], g[2], g[3]]);
        let (next_hdr, hop_limit) = (g[6], g[7]);
        let (sgid, dgid) = (&g[8..24], &g[24..40]);
        if word0 >> 28 != 6 || next_hdr != IB_NEXT_HDR || dgid[0] == 0xff {
            return Err(invalid(Invalid::GrhUnsupported));
        }
        let mut index = None;
        for k in 0..caps.gid_table_len {
            if self.query_gid(port_num, k)? == *dgid {
                index = Some(k);
                break;
            }
        }
        let sgid_index = index.ok_or(invalid(Invalid::GidNotFound))?;
        let mut route = GlobalRoute {
            flow_label: word0 & 0xf_ffff,
            sgid_index: sgid_index as u8,
            hop_limit,
            traffic_class: (word0 >> 20) as u8,
            ..GlobalRoute::default()
        };
        route.dgid.copy_from_slice(sgid);
        attr.grh = route;
        attr.is_global = true;
        Ok(attr)
    }
}

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
        if crate::verbs::qp_attr_check::mlx5_stat_rate(attr.static_rate, 0).is_none() {
            return Err(Error::InvalidArgument {
                what: Invalid::StaticRate,
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

    /// [`Device::init_ah_from_wc`] then [`Pd::create_ah`] (`ibv_create_ah_from_wc`).
    ///
    /// # Errors
    /// As those two.
    pub fn create_ah_from_wc(
        &self,
        wc: &Wc,
        grh: Option<&[u8; 40]>,
        port_num: u8,
    ) -> Result<Ah<'_, 'd, H>, Error> {
        let attr = self.dev.init_ah_from_wc(port_num, wc, grh)?;
        self.create_ah(attr)
    }
}

impl<H: Hal> Ah<'_, '_, H> {
    /// The attributes (`ibv_query_ah`-style).
    pub fn attr(&self) -> AhAttr {
        self.attr
    }

    /// A UD destination through this AH (`wr.ud`).
    ///
    /// # Errors
    /// [`Invalid::DestQpn`] for a QP number wider than 24 bits.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> Result<UdDest, Error> {
        if remote_qpn > 0xff_ffff {
            return Err(Error::InvalidArgument {
                what: Invalid::DestQpn,
            });
        }
        Ok(UdDest {
            ah: self.attr,
            remote_qpn,
            remote_qkey,
        })
    }

    /// A DC target through this AH (`mlx5dv_wr_set_dc_addr`'s `ah`, `remote_dctn`,
    /// `remote_dc_key`).
    ///
    /// # Errors
    /// [`Invalid::DestQpn`] for a DCT number wider than 24 bits.
    pub fn dc_dest(&self, remote_dctn: u32, remote_dc_key: u64) -> Result<DcDest, Error> {
        if remote_dctn > 0xff_ffff {
            return Err(Error::InvalidArgument {
                what: Invalid::DestQpn,
            });
        }
        Ok(DcDest {
            ah: self.attr,
            dctn: remote_dctn,
            dc_key: remote_dc_key,
        })
    }
}
