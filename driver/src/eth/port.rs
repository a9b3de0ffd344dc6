//! The Ethernet port: what the device offers (Ethernet offload caps), the NIC vport's MAC
//! address, MTU and minimum send inline, the transport objects every queue shares (PD,
//! transport domain, TIS) and the NIC receive flow table that steers frames to queues.
//! Linux mlx5e builds the same objects (en_common.c `mlx5e_create_mdev_resources`).

use bareverbs_firmware_cmd::commands::{
    AccessReg, CreateFlowTable, CreateTis, DestroyFlowTable, DestroyTis, ModifyNicVportContext,
    QueryHcaCap, QueryNicVportContext, QueryVportState, SetFlowTableRoot,
};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::Hal;

use crate::device::{input, Device};
use crate::error::{Error, Invalid};
use crate::verbs::pd::{Pd, TransportDomain};

/// log2 of the rules the port's steering table holds.
pub const LOG_FLOW_RULES: u8 = 10;
/// Rules the port's steering table holds ([`EthPort::add_rule`]).
pub const MAX_FLOW_RULES: usize = 1 << LOG_FLOW_RULES;

/// How much of each frame a send WQE inlines (`MLX5_INLINE_MODE_*`): what the device needs
/// to parse a frame it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum InlineMode {
    /// Nothing.
    None,
    /// The L2 header (VLAN tag included).
    L2,
    /// Up to the end of the IP header.
    Ip,
    /// Up to the end of the TCP or UDP header.
    TcpUdp,
}

impl InlineMode {
    fn from_raw(v: u64) -> InlineMode {
        match v {
            0 => InlineMode::None,
            1 => InlineMode::L2,
            2 => InlineMode::Ip,
            _ => InlineMode::TcpUdp,
        }
    }
}

/// What the device's Ethernet offloads are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EthCaps {
    /// IPv4, TCP and UDP checksums computed on send and checked on receive.
    pub csum: bool,
    /// VLAN stripping on receive.
    pub vlan_strip: bool,
    /// VLAN insertion by the send WQE.
    pub vlan_insert: bool,
    /// log2 of the largest LSO send (0: none).
    pub log_max_lso: u8,
    /// log2 of the largest RSS indirection table.
    pub log_max_rqt: u8,
    /// Loopback of the port's own frames can be blocked per receive object.
    pub self_lb_block: bool,
}

/// The Ethernet port of a device: open it with [`Device::open_eth`]; queues, packet pools,
/// RSS groups and flow rules borrow it. Dropping it removes its steering table, its TIS, its
/// transport domain and its PD.
pub struct EthPort<'d, H: Hal> {
    pub(crate) dev: &'d Device<H>,
    pub(crate) pd: Pd<'d, H>,
    pub(crate) td: TransportDomain<'d, H>,
    pub(crate) tisn: u32,
    pub(crate) table_id: u32,
    caps: EthCaps,
    mac: [u8; 6],
    /// The NIC vport's MTU; queues read it on every send, so it may change under them.
    mtu: core::sync::atomic::AtomicU16,
    inline: InlineMode,
    /// Flow indexes in use: one bit per rule of the steering table.
    pub(crate) rules: spin::Mutex<[u64; MAX_FLOW_RULES / 64]>,
}

/// Bytes of a QUERY_HCA_CAP output (header and the 4 KiB capability area).
const CAP_OUT: usize = QueryHcaCapOut::BYTES;

impl<H: Hal> Device<H> {
    /// Opens the Ethernet port: reads the Ethernet offload caps and the NIC vport context
    /// (MAC address, MTU, minimum inline), and creates the PD, transport domain, TIS and the
    /// NIC receive flow table (set as the root: until a rule is added, every frame is
    /// dropped) that its queues share.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] ([`Invalid::NotEthernet`]) when the port is not Ethernet or
    /// the device lacks Ethernet offloads or NIC flow tables; a DMA or command error.
    pub fn open_eth(&self) -> Result<EthPort<'_, H>, Error> {
        let not_eth = Error::InvalidArgument {
            what: Invalid::NotEthernet,
        };
        if self.info().caps.port_type != port_type::ETH {
            return Err(not_eth);
        }
        // The capability messages are 4 KiB each: built in DMA memory, not on the stack.
        let mut scratch = self.hal.dma_alloc(2 * CAP_OUT, 64)?;
        let (i, o) = scratch.as_mut_slice().split_at_mut(CAP_OUT);
        self.query_caps_into(hca_cap_op_mod::GENERAL, i, o)?;
        let cap = |b: &[u8], f: bareverbs_firmware_cmd::layout::Field<CmdHcaCap>| {
            bareverbs_firmware_cmd::layout::get_bits(&b[16..], f.bit, f.width)
        };
        if cap(o, cmd_hca_cap::eth_net_offloads) == 0 || cap(o, cmd_hca_cap::nic_flow_table) == 0 {
            return Err(not_eth);
        }
        self.query_caps_into(hca_cap_op_mod::ETHERNET_OFFLOADS, i, o)?;
        let e = View::<EthCaps_>::new_checked(&o[16..16 + EthCaps_::BYTES])?;
        let caps = EthCaps {
            csum: e.get(per_protocol_networking_offload_caps::csum_cap) != 0,
            vlan_strip: e.get(per_protocol_networking_offload_caps::vlan_cap) != 0,
            vlan_insert: e.get(per_protocol_networking_offload_caps::wqe_vlan_insert) != 0,
            log_max_lso: e.get(per_protocol_networking_offload_caps::max_lso_cap) as u8,
            log_max_rqt: e.get(per_protocol_networking_offload_caps::rss_ind_tbl_cap) as u8,
            self_lb_block: e.get(per_protocol_networking_offload_caps::self_lb_en_modifiable) != 0,
        };
        let inline_cap = e.get(per_protocol_networking_offload_caps::wqe_inline_mode) as u8;
        // The NIC vport context: MAC address, MTU, minimum inline.
        let mut qi = [0u8; QueryNicVportContextIn::BYTES];
        input::<QueryNicVportContext>(&mut qi)?;
        let qo = &mut o[..QueryNicVportContextOut::BYTES];
        qo.fill(0);
        self.exec::<QueryNicVportContext>(&mut qi, qo)?;
        let v = View::<QueryNicVportContextOut>::new_checked(qo)?;
        let c = v.sub(query_nic_vport_context_out::nic_vport_context);
        let a = c.sub(nic_vport_context::permanent_address);
        let mac_word = (a.get(mac_address_layout::mac_addr_47_32) << 32)
            | a.get(mac_address_layout::mac_addr_31_0);
        let b = mac_word.to_be_bytes();
        let mac = [b[2], b[3], b[4], b[5], b[6], b[7]];
        let mtu = c.get(nic_vport_context::mtu) as u16;
        let inline = match inline_cap {
            wqe_inline_mode::L2 => InlineMode::L2,
            wqe_inline_mode::VPORT_CONTEXT => {
                InlineMode::from_raw(c.get(nic_vport_context::min_wqe_inline_mode))
            }
            _ => InlineMode::None,
        };
        drop(scratch);
        let pd = self.alloc_pd()?;
        let td = self.alloc_transport_domain()?;
        let tisn = self.create_tis(td.tdn())?;
        let table_id = match self.create_root_table() {
            Ok(t) => t,
            Err(e) => {
                let _ = self.destroy_tis(tisn);
                return Err(e);
            }
        };
        Ok(EthPort {
            dev: self,
            pd,
            td,
            tisn,
            table_id,
            caps,
            mac,
            mtu: core::sync::atomic::AtomicU16::new(mtu),
            inline,
            rules: spin::Mutex::new([0; MAX_FLOW_RULES / 64]),
        })
    }

    /// QUERY_HCA_CAP of `group` (current) into `o`, with `i` as the input's room.
    fn query_caps_into(&self, group: u16, i: &mut [u8], o: &mut [u8]) -> Result<(), Error> {
        let i = &mut i[..QueryHcaCapIn::BYTES];
        i.fill(0);
        input::<QueryHcaCap>(i)?.set(
            query_hca_cap_in::op_mod,
            hca_cap_op_mod::query(group, hca_cap_op_mod::CUR),
        );
        o.fill(0);
        self.exec::<QueryHcaCap>(i, o)
    }

    fn create_tis(&self, tdn: u32) -> Result<u32, Error> {
        let mut i = [0u8; CreateTisIn::BYTES];
        input::<CreateTis>(&mut i)?
            .sub(create_tis_in::ctx)
            .set(tisc::transport_domain, tdn);
        let mut o = [0u8; CreateTisOut::BYTES];
        self.exec::<CreateTis>(&mut i, &mut o)?;
        Ok(View::<CreateTisOut>::new_checked(&o)?.get32(create_tis_out::tisn))
    }

    fn destroy_tis(&self, tisn: u32) -> Result<(), Error> {
        let mut i = [0u8; DestroyTisIn::BYTES];
        input::<DestroyTis>(&mut i)?.set(destroy_tis_in::tisn, tisn);
        self.exec::<DestroyTis>(&mut i, &mut [0u8; DestroyTisOut::BYTES])
    }

    /// A NIC receive table of [`MAX_FLOW_RULES`] entries at level 0, missing to a drop, made
    /// the root.
    fn create_root_table(&self) -> Result<u32, Error> {
        let mut i = [0u8; CreateFlowTableIn::BYTES];
        input::<CreateFlowTable>(&mut i)?
            .set(create_flow_table_in::table_type, flow_table_type::NIC_RX)
            .sub(create_flow_table_in::flow_table_context)
            .set(flow_table_context::log_size, LOG_FLOW_RULES);
        let mut o = [0u8; CreateFlowTableOut::BYTES];
        self.exec::<CreateFlowTable>(&mut i, &mut o)?;
        let id =
            View::<CreateFlowTableOut>::new_checked(&o)?.get32(create_flow_table_out::table_id);
        if let Err(e) = self.set_root_table(id) {
            let _ = self.destroy_table(id);
            return Err(e);
        }
        Ok(id)
    }

    /// Makes `id` the NIC receive root (0: none).
    fn set_root_table(&self, id: u32) -> Result<(), Error> {
        let mut i = [0u8; SetFlowTableRootIn::BYTES];
        input::<SetFlowTableRoot>(&mut i)?
            .set(set_flow_table_root_in::table_type, flow_table_type::NIC_RX)
            .set(set_flow_table_root_in::table_id, id);
        self.exec::<SetFlowTableRoot>(&mut i, &mut [0u8; SetFlowTableRootOut::BYTES])
    }

    fn destroy_table(&self, id: u32) -> Result<(), Error> {
        let mut i = [0u8; DestroyFlowTableIn::BYTES];
        input::<DestroyFlowTable>(&mut i)?
            .set(destroy_flow_table_in::table_type, flow_table_type::NIC_RX)
            .set(destroy_flow_table_in::table_id, id);
        self.exec::<DestroyFlowTable>(&mut i, &mut [0u8; DestroyFlowTableOut::BYTES])
    }
}

/// The Ethernet offload caps' layout under the name the ifc gives it.
type EthCaps_ = bareverbs_firmware_cmd::ifc::EthCaps;

impl<'d, H: Hal> EthPort<'d, H> {
    /// The device.
    pub fn device(&self) -> &'d Device<H> {
        self.dev
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The largest frame the port receives, L2 header and FCS included (the NIC vport
    /// context's MTU; an IP MTU of 1500 is 1522 here).
    pub fn hw_mtu(&self) -> u16 {
        self.mtu.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// What each send WQE inlines.
    pub fn inline_mode(&self) -> InlineMode {
        self.inline
    }

    /// The device's Ethernet offloads.
    pub fn caps(&self) -> EthCaps {
        self.caps
    }

    /// Whether the link is up (QUERY_VPORT_STATE).
    ///
    /// # Errors
    /// A command error.
    pub fn link_up(&self) -> Result<bool, Error> {
        let mut i = [0u8; QueryVportStateIn::BYTES];
        input::<QueryVportState>(&mut i)?;
        let mut o = [0u8; QueryVportStateOut::BYTES];
        self.dev.exec::<QueryVportState>(&mut i, &mut o)?;
        Ok(
            View::<QueryVportStateOut>::new_checked(&o)?.get(query_vport_state_out::state)
                == u64::from(vport_state::UP),
        )
    }

    /// Takes the port administratively up or down (the PAOS register, as Linux mlx5e does on
    /// open and close); a port that is down sends and receives nothing, and its link reads
    /// down.
    ///
    /// # Errors
    /// A command error.
    pub fn set_admin_up(&self, up: bool) -> Result<(), Error> {
        const LEN: usize = AccessRegisterIn::BYTES + PaosReg::BYTES;
        let mut i = [0u8; LEN];
        input::<AccessReg>(&mut i)?
            .set(access_register_in::op_mod, access_reg_op_mod::WRITE)
            .set(access_register_in::register_id, register_id::PAOS);
        bareverbs_firmware_cmd::layout::ViewMut::<PaosReg>::new_checked(
            &mut i[AccessRegisterIn::BYTES..],
        )?
        .set(paos_reg::local_port, 1u8)
        .set(
            paos_reg::admin_status,
            if up {
                port_status::UP
            } else {
                port_status::DOWN
            },
        )
        .set(paos_reg::ase, 1u8);
        let mut o = [0u8; AccessRegisterOut::BYTES + PaosReg::BYTES];
        self.dev.exec::<AccessReg>(&mut i, &mut o)
    }

    /// Sets the largest frame the port receives, L2 header and FCS included
    /// (MODIFY_NIC_VPORT_CONTEXT `mtu`), queues open or not; sends past it are refused from
    /// then on.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] ([`Invalid::PacketLength`]) below 64 bytes; a command error.
    pub fn set_hw_mtu(&self, mtu: u16) -> Result<(), Error> {
        if mtu < 64 {
            return Err(Error::InvalidArgument {
                what: Invalid::PacketLength,
            });
        }
        let mut i = [0u8; ModifyNicVportContextIn::BYTES];
        {
            let mut v = input::<ModifyNicVportContext>(&mut i)?;
            v.sub(modify_nic_vport_context_in::field_select)
                .set(modify_nic_vport_field_select::mtu, 1u8);
            v.sub(modify_nic_vport_context_in::nic_vport_context)
                .set(nic_vport_context::mtu, mtu);
        }
        self.dev
            .exec::<ModifyNicVportContext>(&mut i, &mut [0u8; ModifyNicVportContextOut::BYTES])?;
        self.mtu.store(mtu, core::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Bytes a send WQE inlines for `frame` (its headers, as far as the inline mode needs;
    /// never more than the frame).
    pub(crate) fn inline_len(&self, frame_head: &[u8], len: usize) -> usize {
        let l2 = match frame_head.get(12..14) {
            Some([0x81, 0x00]) | Some([0x88, 0xa8]) => 18,
            _ => 14,
        };
        let need = match self.inline {
            InlineMode::None => 0,
            InlineMode::L2 => l2,
            InlineMode::Ip | InlineMode::TcpUdp => {
                let ip = frame_head.get(l2..).unwrap_or(&[]);
                let ip_len = match ip.first().map(|b| b >> 4) {
                    Some(4) => usize::from(ip[0] & 0xf) * 4,
                    Some(6) => 40,
                    _ => 0,
                };
                let l4 = if self.inline == InlineMode::TcpUdp && ip_len > 0 {
                    let proto = if ip[0] >> 4 == 4 {
                        ip.get(9)
                    } else {
                        ip.get(6)
                    };
                    match proto {
                        Some(6) => ip.get(ip_len + 12).map_or(20, |b| usize::from(b >> 4) * 4),
                        Some(17) => 8,
                        _ => 0,
                    }
                } else {
                    0
                };
                l2 + ip_len + l4
            }
        };
        need.min(len)
    }
}

impl<H: Hal> Drop for EthPort<'_, H> {
    fn drop(&mut self) {
        let _ = self.dev.set_root_table(0);
        if let Err(e) = self.dev.destroy_table(self.table_id) {
            warn!(
                "eth: steering table {} not destroyed: {:?}",
                self.table_id, e
            );
        }
        if let Err(e) = self.dev.destroy_tis(self.tisn) {
            warn!("eth: TIS {} not destroyed: {:?}", self.tisn, e);
        }
    }
}
