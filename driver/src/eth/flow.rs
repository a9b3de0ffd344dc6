//! Flow steering: rules in the port's NIC receive table that send matching frames to one
//! receive queue or spread them over an RSS group (an RQ table behind a Toeplitz-hashing
//! TIR). Each rule is a flow group of one entry with its own mask; rules added earlier are
//! matched first; a frame no rule takes is dropped (Linux fs_cmd.c, `mlx5_ifc`
//! `fte_match_set_lyr_2_4`).

use bareverbs_firmware_cmd::commands::{
    AllocFlowCounter, CreateFlowGroup, CreateRqt, CreateTir, DeallocFlowCounter,
    DeleteFlowTableEntry, DestroyFlowGroup, DestroyRqt, QueryFlowCounter, SetFlowTableEntry,
};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::ViewMut;
use bareverbs_firmware_cmd::{Layout, View};
use bareverbs_hal::Hal;

use crate::cmdq::MAX_MESSAGE;
use crate::device::input;
use crate::error::{Error, Invalid, Limit};
use crate::eth::port::{EthPort, MAX_FLOW_RULES};
use crate::eth::rxq::{destroy_tir, RxQueue};

/// What a rule matches: every field given must be equal; an empty match takes every frame.
/// Non-exhaustive (more fields to match will come): built with [`FlowMatch::any`] and its
/// methods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowMatch {
    /// Destination MAC address.
    pub dmac: Option<[u8; 6]>,
    /// Source MAC address.
    pub smac: Option<[u8; 6]>,
    /// The ethertype after any VLAN tag.
    pub ethertype: Option<u16>,
    /// The first VLAN tag's VLAN id (and a C-tag present).
    pub vlan_id: Option<u16>,
    /// IP protocol (6 TCP, 17 UDP, 1 ICMP…).
    pub ip_protocol: Option<u8>,
    /// IPv4 source address.
    pub src_ipv4: Option<[u8; 4]>,
    /// IPv4 destination address.
    pub dst_ipv4: Option<[u8; 4]>,
    /// IP version (4 or 6).
    pub ip_version: Option<u8>,
    /// IPv6 source address.
    pub src_ipv6: Option<[u8; 16]>,
    /// IPv6 destination address.
    pub dst_ipv6: Option<[u8; 16]>,
    /// UDP destination port (implies UDP).
    pub udp_dport: Option<u16>,
    /// TCP destination port (implies TCP).
    pub tcp_dport: Option<u16>,
}

/// A builder method per field: `FlowMatch::any().dmac(mac).udp_dport(7)`.
macro_rules! flow_match_setters {
    ($($(#[$m:meta])* $field:ident: $t:ty;)*) => {
        impl FlowMatch {
            /// A match that takes every frame.
            pub const fn any() -> Self {
                FlowMatch {
                    dmac: None,
                    smac: None,
                    ethertype: None,
                    vlan_id: None,
                    ip_protocol: None,
                    src_ipv4: None,
                    dst_ipv4: None,
                    ip_version: None,
                    src_ipv6: None,
                    dst_ipv6: None,
                    udp_dport: None,
                    tcp_dport: None,
                }
            }
            $(
                $(#[$m])*
                pub const fn $field(mut self, v: $t) -> Self {
                    self.$field = Some(v);
                    self
                }
            )*
        }
    };
}

flow_match_setters! {
    /// Also matching the destination MAC address.
    dmac: [u8; 6];
    /// Also matching the source MAC address.
    smac: [u8; 6];
    /// Also matching the ethertype.
    ethertype: u16;
    /// Also matching the VLAN id.
    vlan_id: u16;
    /// Also matching the IP protocol.
    ip_protocol: u8;
    /// Also matching the IPv4 source address.
    src_ipv4: [u8; 4];
    /// Also matching the IPv4 destination address.
    dst_ipv4: [u8; 4];
    /// Also matching the IP version.
    ip_version: u8;
    /// Also matching the IPv6 source address.
    src_ipv6: [u8; 16];
    /// Also matching the IPv6 destination address.
    dst_ipv6: [u8; 16];
    /// Also matching the UDP destination port.
    udp_dport: u16;
    /// Also matching the TCP destination port.
    tcp_dport: u16;
}

impl FlowMatch {
    /// Writes the mask (`mask` true) or the value of this match into `outer`.
    fn fill(&self, mut o: ViewMut<'_, FteMatchSetLyr24>, mask: bool) {
        use fte_match_set_lyr_2_4 as l;
        let mac = |m: [u8; 6]| {
            (
                u32::from_be_bytes([m[0], m[1], m[2], m[3]]),
                u16::from_be_bytes([m[4], m[5]]),
            )
        };
        if let Some(m) = self.dmac {
            let (hi, lo) = if mask { (u32::MAX, u16::MAX) } else { mac(m) };
            o.set(l::dmac_47_16, hi).set(l::dmac_15_0, lo);
        }
        if let Some(m) = self.smac {
            let (hi, lo) = if mask { (u32::MAX, u16::MAX) } else { mac(m) };
            o.set(l::smac_47_16, hi).set(l::smac_15_0, lo);
        }
        if let Some(t) = self.ethertype {
            o.set(l::ethertype, if mask { 0xffff } else { t });
        }
        if let Some(v) = self.vlan_id {
            o.set(l::cvlan_tag, 1u8)
                .set(l::first_vid, if mask { 0xfff } else { v & 0xfff });
        }
        let proto = match (self.udp_dport, self.tcp_dport) {
            (Some(_), _) => Some(17),
            (_, Some(_)) => Some(6),
            _ => self.ip_protocol,
        };
        if let Some(p) = proto {
            o.set(l::ip_protocol, if mask { 0xff } else { p });
        }
        if let Some(a) = self.src_ipv4 {
            let v = if mask { [0xff; 4] } else { a };
            o.bytes_mut(l::src_ipv4_src_ipv6)[12..].copy_from_slice(&v);
        }
        if let Some(a) = self.dst_ipv4 {
            let v = if mask { [0xff; 4] } else { a };
            o.bytes_mut(l::dst_ipv4_dst_ipv6)[12..].copy_from_slice(&v);
        }
        if let Some(v) = self.ip_version {
            o.set(l::ip_version, if mask { 0xf } else { v & 0xf });
        }
        if let Some(a) = self.src_ipv6 {
            let v = if mask { [0xff; 16] } else { a };
            o.bytes_mut(l::src_ipv4_src_ipv6).copy_from_slice(&v);
        }
        if let Some(a) = self.dst_ipv6 {
            let v = if mask { [0xff; 16] } else { a };
            o.bytes_mut(l::dst_ipv4_dst_ipv6).copy_from_slice(&v);
        }
        if let Some(p) = self.udp_dport {
            o.set(l::udp_dport, if mask { 0xffff } else { p });
        }
        if let Some(p) = self.tcp_dport {
            o.set(l::tcp_dport, if mask { 0xffff } else { p });
        }
    }
}

/// Which header fields an RSS group hashes (frames of another IP version, or without the
/// ports, go to its first queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RssFields {
    /// IPv4 source and destination addresses.
    Ipv4,
    /// IPv4 addresses and UDP ports.
    Ipv4Udp,
    /// IPv4 addresses and TCP ports.
    Ipv4Tcp,
    /// IPv6 source and destination addresses.
    Ipv6,
    /// IPv6 addresses and UDP ports.
    Ipv6Udp,
    /// IPv6 addresses and TCP ports.
    Ipv6Tcp,
}

/// A set of receive queues a rule spreads frames over by the Toeplitz hash of the fields it
/// names: an RQ table and a TIR. Frames without those fields go to its first queue.
pub struct RssGroup<'p, 'd, H: Hal> {
    port: &'p EthPort<'d, H>,
    rqtn: u32,
    tirn: u32,
}

/// Microsoft's verification key, the usual default RSS key.
pub const DEFAULT_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

impl<'p, 'd, H: Hal> RssGroup<'p, 'd, H> {
    /// A group over `queues` (their order is the indirection table's: a hash `h` goes to
    /// `queues[h % queues.len()]`), hashing `fields` with `key`.
    ///
    /// # Errors
    /// [`Invalid::RssQueues`] for no queues or more than the device's RQ table holds;
    /// [`Invalid::ForeignQueue`] for a queue of another port; a command error.
    pub fn new(
        port: &'p EthPort<'d, H>,
        queues: &[&RxQueue<'_, 'd, H>],
        fields: RssFields,
        key: &[u8; 40],
    ) -> Result<Self, Error> {
        let max = 1usize << port.caps().log_max_rqt.min(16);
        if queues.is_empty() || queues.len() > max || queues.len() > (MAX_MESSAGE - 0x110) / 4 {
            return Err(Error::InvalidArgument {
                what: Invalid::RssQueues,
            });
        }
        if queues.iter().any(|q| !q.belongs_to(port)) {
            return Err(Error::InvalidArgument {
                what: Invalid::ForeignQueue,
            });
        }
        let ilen = CreateRqtIn::BYTES + 4 * queues.len();
        // The message is built in DMA memory used as plain memory, not on the stack.
        let mut scratch = port.dev.hal.dma_alloc(ilen, 64)?;
        let i = scratch.as_mut_slice();
        {
            let mut v = input::<CreateRqt>(&mut i[..ilen])?;
            v.sub(create_rqt_in::rqt_context)
                .set(rqtc::rqt_max_size, queues.len() as u16)
                .set(rqtc::rqt_actual_size, queues.len() as u16);
            for (k, q) in queues.iter().enumerate() {
                v.set_array(create_rqt_in::rq_num, k, u64::from(q.rqn))?;
            }
        }
        let mut o = [0u8; CreateRqtOut::BYTES];
        port.dev.exec::<CreateRqt>(&mut i[..ilen], &mut o)?;
        let rqtn = View::<CreateRqtOut>::new_checked(&o)?.get32(create_rqt_out::rqtn);
        let mut g = RssGroup {
            port,
            rqtn,
            tirn: 0,
        };
        use RssFields as F;
        let ipv6 = matches!(fields, F::Ipv6 | F::Ipv6Udp | F::Ipv6Tcp);
        let l4_udp = matches!(fields, F::Ipv4Udp | F::Ipv6Udp);
        let ports = !matches!(fields, F::Ipv4 | F::Ipv6);
        let mut sel = rx_hash_fields::SRC_IP | rx_hash_fields::DST_IP;
        if ports {
            sel |= rx_hash_fields::L4_SPORT | rx_hash_fields::L4_DPORT;
        }
        let mut i = [0u8; CreateTirIn::BYTES];
        {
            let mut v = input::<CreateTir>(&mut i)?;
            let mut c = v.sub(create_tir_in::ctx);
            c.set(tirc::disp_type, tir_disp_type::INDIRECT)
                .set(tirc::indirect_table, rqtn)
                .set(tirc::rx_hash_fn, rx_hash_fn::TOEPLITZ)
                .set(tirc::transport_domain, port.td.tdn());
            c.bytes_mut(tirc::rx_hash_toeplitz_key).copy_from_slice(key);
            c.sub(tirc::rx_hash_field_selector_outer)
                .set(rx_hash_field_select::l3_prot_type, u8::from(ipv6))
                .set(rx_hash_field_select::l4_prot_type, u8::from(l4_udp))
                .set(rx_hash_field_select::selected_fields, sel);
        }
        let mut o = [0u8; CreateTirOut::BYTES];
        port.dev.exec::<CreateTir>(&mut i, &mut o)?;
        g.tirn = View::<CreateTirOut>::new_checked(&o)?.get32(create_tir_out::tirn);
        Ok(g)
    }
}

impl<H: Hal> Drop for RssGroup<'_, '_, H> {
    fn drop(&mut self) {
        if self.tirn != 0 {
            destroy_tir(self.port, self.tirn);
        }
        let r = (|| {
            let mut i = [0u8; DestroyRqtIn::BYTES];
            input::<DestroyRqt>(&mut i)?.set(destroy_rqt_in::rqtn, self.rqtn);
            self.port
                .dev
                .exec::<DestroyRqt>(&mut i, &mut [0u8; DestroyRqtOut::BYTES])
        })();
        if let Err(e) = r {
            warn!("eth: DESTROY_RQT {}: {:?}", self.rqtn, e);
        }
    }
}

/// Where a rule sends what it matches.
pub enum FlowDest<'a, 'p, 'd, H: Hal> {
    /// One receive queue.
    Queue(&'a RxQueue<'p, 'd, H>),
    /// An RSS group.
    Rss(&'a RssGroup<'p, 'd, H>),
    /// Nowhere: the frame is dropped (a rule that stops later rules from taking it).
    Drop,
}

/// A steering rule; removed from the table on drop (drop rules before their queues).
pub struct FlowRule<'p, 'd, H: Hal> {
    port: &'p EthPort<'d, H>,
    index: u32,
    group: u32,
    /// The flow counter of a counted rule.
    counter: Option<u32>,
}

/// Byte offset of the destination list in SET_FLOW_TABLE_ENTRY.
const DEST_LIST_AT: usize = (set_fte_in::flow_context.bit + FlowContext::BITS) / 8;

impl<'d, H: Hal> EthPort<'d, H> {
    /// Adds a rule sending frames that match `m` to `dest`. Rules added earlier are matched
    /// first.
    ///
    /// # Errors
    /// [`Error::ExceedsLimit`] ([`Limit::FlowRules`]) with [`MAX_FLOW_RULES`] rules in
    /// place; [`Invalid::ForeignQueue`] for a destination of another port; a command error.
    pub fn add_rule<'p>(
        &'p self,
        m: &FlowMatch,
        dest: FlowDest<'_, '_, 'd, H>,
    ) -> Result<FlowRule<'p, 'd, H>, Error> {
        self.add_rule_with(m, dest, false)
    }

    /// [`EthPort::add_rule`] with a flow counter: [`FlowRule::counts`] reads the frames and
    /// bytes the rule matched.
    ///
    /// # Errors
    /// As [`EthPort::add_rule`].
    pub fn add_counted_rule<'p>(
        &'p self,
        m: &FlowMatch,
        dest: FlowDest<'_, '_, 'd, H>,
    ) -> Result<FlowRule<'p, 'd, H>, Error> {
        self.add_rule_with(m, dest, true)
    }

    fn add_rule_with<'p>(
        &'p self,
        m: &FlowMatch,
        dest: FlowDest<'_, '_, 'd, H>,
        counted: bool,
    ) -> Result<FlowRule<'p, 'd, H>, Error> {
        let tirn = match &dest {
            FlowDest::Queue(q) if q.belongs_to(self) => Some(q.tirn),
            FlowDest::Rss(g) if core::ptr::eq(g.port, self) => Some(g.tirn),
            FlowDest::Drop => None,
            _ => {
                return Err(Error::InvalidArgument {
                    what: Invalid::ForeignQueue,
                })
            }
        };
        let index = {
            let mut used = self.rules.lock();
            let Some(k) = (0..MAX_FLOW_RULES).find(|k| used[k / 64] & (1 << (k % 64)) == 0) else {
                return Err(Error::ExceedsLimit {
                    limit: Limit::FlowRules,
                    requested: MAX_FLOW_RULES as u64 + 1,
                    max: MAX_FLOW_RULES as u64,
                });
            };
            used[k / 64] |= 1 << (k % 64);
            k as u32
        };
        let release = |port: &Self| port.rules.lock()[index as usize / 64] &= !(1 << (index % 64));
        let group = match self.create_group(index, m) {
            Ok(g) => g,
            Err(e) => {
                release(self);
                return Err(e);
            }
        };
        let mut rule = FlowRule {
            port: self,
            index,
            group,
            counter: None,
        };
        if counted {
            rule.counter = Some(self.alloc_counter()?);
        }
        self.set_entry(index, group, m, tirn, rule.counter)?;
        Ok(rule)
    }

    fn create_group(&self, index: u32, m: &FlowMatch) -> Result<u32, Error> {
        let mut i = [0u8; CreateFlowGroupIn::BYTES];
        {
            let mut v = input::<CreateFlowGroup>(&mut i)?;
            v.set(create_flow_group_in::table_type, flow_table_type::NIC_RX)
                .set(create_flow_group_in::table_id, self.table_id)
                .set(create_flow_group_in::start_flow_index, index)
                .set(create_flow_group_in::end_flow_index, index)
                .set(
                    create_flow_group_in::match_criteria_enable,
                    match_criteria_enable::OUTER_HEADERS,
                );
            m.fill(
                v.sub(create_flow_group_in::match_criteria)
                    .sub(fte_match_param::outer_headers),
                true,
            );
        }
        let mut o = [0u8; CreateFlowGroupOut::BYTES];
        self.dev.exec::<CreateFlowGroup>(&mut i, &mut o)?;
        Ok(View::<CreateFlowGroupOut>::new_checked(&o)?.get32(create_flow_group_out::group_id))
    }

    fn alloc_counter(&self) -> Result<u32, Error> {
        let mut i = [0u8; AllocFlowCounterIn::BYTES];
        input::<AllocFlowCounter>(&mut i)?;
        let mut o = [0u8; AllocFlowCounterOut::BYTES];
        self.dev.exec::<AllocFlowCounter>(&mut i, &mut o)?;
        Ok(View::<AllocFlowCounterOut>::new_checked(&o)?
            .get32(alloc_flow_counter_out::flow_counter_id))
    }

    fn set_entry(
        &self,
        index: u32,
        group: u32,
        m: &FlowMatch,
        tirn: Option<u32>,
        counter: Option<u32>,
    ) -> Result<(), Error> {
        let mut i = [0u8; DEST_LIST_AT + 16];
        let dests = usize::from(tirn.is_some());
        let counters = usize::from(counter.is_some());
        let ilen = DEST_LIST_AT + 8 * (dests + counters);
        {
            let mut v = input::<SetFlowTableEntry>(&mut i[..ilen])?;
            v.set(set_fte_in::table_type, flow_table_type::NIC_RX)
                .set(set_fte_in::table_id, self.table_id)
                .set(set_fte_in::flow_index, index);
            let mut c = v.sub(set_fte_in::flow_context);
            c.set(flow_context::group_id, group);
            let count = if counter.is_some() {
                flow_action::COUNT
            } else {
                0
            };
            match tirn {
                Some(_) => {
                    c.set(flow_context::action, flow_action::FWD_DEST | count)
                        .set(flow_context::destination_list_size, 1u8);
                }
                None => {
                    c.set(flow_context::action, flow_action::DROP | count);
                }
            }
            c.set(flow_context::flow_counter_list_size, counters as u8);
            m.fill(
                c.sub(flow_context::match_value)
                    .sub(fte_match_param::outer_headers),
                false,
            );
        }
        if let Some(c) = counter {
            // The counter list follows the destinations (`flow_counter_list`).
            let at = DEST_LIST_AT + 8 * dests;
            i[at..at + 4].copy_from_slice(&c.to_be_bytes());
        }
        if let Some(t) = tirn {
            let mut d = ViewMut::<DestFormat>::new_checked(&mut i[DEST_LIST_AT..DEST_LIST_AT + 8])?;
            d.set(
                dest_format_struct::destination_type,
                flow_destination_type::TIR,
            )
            .set(dest_format_struct::destination_id, t);
        }
        self.dev
            .exec::<SetFlowTableEntry>(&mut i[..ilen], &mut [0u8; SetFteOut::BYTES])
    }
}

impl<H: Hal> FlowRule<'_, '_, H> {
    /// Frames and bytes a counted rule matched (QUERY_FLOW_COUNTER); `None` for a rule
    /// without a counter.
    ///
    /// # Errors
    /// A command error.
    pub fn counts(&self) -> Result<Option<(u64, u64)>, Error> {
        let Some(c) = self.counter else {
            return Ok(None);
        };
        let mut i = [0u8; QueryFlowCounterIn::BYTES];
        input::<QueryFlowCounter>(&mut i)?.set(query_flow_counter_in::flow_counter_id, c);
        let mut o = [0u8; QueryFlowCounterOut::BYTES + TrafficCounter::BYTES];
        self.port.dev.exec::<QueryFlowCounter>(&mut i, &mut o)?;
        let t = View::<TrafficCounter>::new_checked(&o[QueryFlowCounterOut::BYTES..])?;
        Ok(Some((
            t.get(traffic_counter::packets),
            t.get(traffic_counter::octets),
        )))
    }
}

impl<H: Hal> Drop for FlowRule<'_, '_, H> {
    fn drop(&mut self) {
        let dev = self.port.dev;
        let r = (|| {
            let mut i = [0u8; DeleteFteIn::BYTES];
            input::<DeleteFlowTableEntry>(&mut i)?
                .set(delete_fte_in::table_type, flow_table_type::NIC_RX)
                .set(delete_fte_in::table_id, self.port.table_id)
                .set(delete_fte_in::flow_index, self.index);
            // A rule whose entry was never set has none to delete.
            let _ = dev.exec::<DeleteFlowTableEntry>(&mut i, &mut [0u8; DeleteFteOut::BYTES]);
            let mut i = [0u8; DestroyFlowGroupIn::BYTES];
            input::<DestroyFlowGroup>(&mut i)?
                .set(destroy_flow_group_in::table_type, flow_table_type::NIC_RX)
                .set(destroy_flow_group_in::table_id, self.port.table_id)
                .set(destroy_flow_group_in::group_id, self.group);
            dev.exec::<DestroyFlowGroup>(&mut i, &mut [0u8; DestroyFlowGroupOut::BYTES])
        })();
        match r {
            Ok(()) => {
                self.port.rules.lock()[self.index as usize / 64] &= !(1 << (self.index % 64));
            }
            Err(e) => warn!("eth: flow rule {} not removed: {:?}", self.index, e),
        }
        if let Some(c) = self.counter {
            let r = (|| {
                let mut i = [0u8; DeallocFlowCounterIn::BYTES];
                input::<DeallocFlowCounter>(&mut i)?
                    .set(dealloc_flow_counter_in::flow_counter_id, c);
                dev.exec::<DeallocFlowCounter>(&mut i, &mut [0u8; DeallocFlowCounterOut::BYTES])
            })();
            if let Err(e) = r {
                warn!("eth: flow counter {} not freed: {:?}", c, e);
            }
        }
    }
}
