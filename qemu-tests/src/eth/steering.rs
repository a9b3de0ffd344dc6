//! NIC receive flow steering: flow tables made of flow groups (a match mask each) and flow
//! table entries (a match value, an action and destinations), walked from the root table
//! (SET_FLOW_TABLE_ROOT). A frame is matched as an `fte_match_param` built from its headers:
//! an entry matches when the frame's bytes and the entry's value agree under its group's mask.
//! Among matching entries the lowest flow index wins; a miss goes to the table's miss table
//! or, by default, drops the frame.

use std::collections::BTreeMap;

use bareverbs_firmware_cmd::ifc::{fte_match_param, fte_match_set_lyr_2_4 as l, FteMatchParam};
use bareverbs_firmware_cmd::layout::{Layout, ViewMut};

use super::packet::{ethertype, ip_proto, Headers};

/// Bytes of an `fte_match_param`.
pub const MATCH_BYTES: usize = FteMatchParam::BYTES;

/// A flow group: a range of flow indexes sharing one match mask.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub start: u32,
    pub end: u32,
    pub criteria: Vec<u8>,
}

/// Where a matching entry sends the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    Tir(u32),
    Table(u32),
}

/// A flow table entry.
#[derive(Clone, Debug)]
pub(crate) struct Fte {
    pub group: u32,
    pub value: Vec<u8>,
    pub action: u16,
    pub flow_tag: u32,
    pub dests: Vec<Dest>,
    pub counters: Vec<u32>,
}

/// A flow table.
#[derive(Clone, Debug)]
pub(crate) struct Table {
    pub level: u8,
    pub log_size: u8,
    /// `Some(table)`: a miss goes on there; `None`: a miss drops.
    pub miss: Option<u32>,
    pub groups: BTreeMap<u32, Group>,
    pub ftes: BTreeMap<u32, Fte>,
}

/// Packets and bytes of a flow counter.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlowCounter {
    pub packets: u64,
    pub octets: u64,
}

/// The NIC receive steering state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Steering {
    pub tables: BTreeMap<u32, Table>,
    pub root: Option<u32>,
    pub counters: BTreeMap<u32, FlowCounter>,
}

/// What steering decided for a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// TIRs to deliver to, each with the flow tag of the entry that chose it.
    pub tirs: Vec<(u32, u32)>,
}

/// The `fte_match_param` of a frame: its outer headers filled, the rest zero.
pub fn match_param(h: &Headers) -> Vec<u8> {
    let mut buf = vec![0u8; MATCH_BYTES];
    {
        let mut p = ViewMut::<FteMatchParam>::new_checked(&mut buf)
            .unwrap_or_else(|_| unreachable!("the buffer holds a match param"));
        let mut o = p.sub(fte_match_param::outer_headers);
        let mac = |m: [u8; 6]| {
            (
                u32::from_be_bytes([m[0], m[1], m[2], m[3]]),
                u16::from_be_bytes([m[4], m[5]]),
            )
        };
        let (s_hi, s_lo) = mac(h.smac);
        let (d_hi, d_lo) = mac(h.dmac);
        o.set(l::smac_47_16, s_hi)
            .set(l::smac_15_0, s_lo)
            .set(l::dmac_47_16, d_hi)
            .set(l::dmac_15_0, d_lo)
            .set(l::ethertype, h.ethertype);
        if let Some((tpid, tci)) = h.vlan {
            o.set(l::first_prio, tci >> 13)
                .set(l::first_cfi, (tci >> 12) & 1)
                .set(l::first_vid, tci & 0xfff);
            if tpid == ethertype::VLAN {
                o.set(l::cvlan_tag, 1u8);
            } else {
                o.set(l::svlan_tag, 1u8);
            }
        }
        if let Some(ip) = &h.ip {
            o.set(l::ip_protocol, ip.proto)
                .set(l::ip_dscp, ip.dscp)
                .set(l::ip_ecn, ip.ecn)
                .set(l::frag, u8::from(ip.frag))
                .set(l::ip_version, ip.version)
                .set(l::ttl_hoplimit, ip.ttl);
            if ip.version == 4 {
                o.set(l::ipv4_ihl, ip.ihl);
            }
            o.bytes_mut(l::src_ipv4_src_ipv6).copy_from_slice(&ip.src);
            o.bytes_mut(l::dst_ipv4_dst_ipv6).copy_from_slice(&ip.dst);
        }
        if let Some(l4) = h.l4 {
            if l4.proto == ip_proto::TCP {
                o.set(l::tcp_sport, l4.sport)
                    .set(l::tcp_dport, l4.dport)
                    .set(l::tcp_flags, l4.tcp_flags);
            } else {
                o.set(l::udp_sport, l4.sport).set(l::udp_dport, l4.dport);
            }
        }
    }
    buf
}

/// Whether `packet` agrees with `value` wherever `mask` has a bit.
pub fn matches(packet: &[u8], value: &[u8], mask: &[u8]) -> bool {
    packet
        .iter()
        .zip(value)
        .zip(mask)
        .all(|((p, v), m)| (p ^ v) & m == 0)
}

/// Tables a frame may pass through before steering gives up (a loop of forwards).
const MAX_HOPS: usize = 32;

impl Steering {
    /// Walks the tables from the root for a frame with match param `packet` and `len` bytes,
    /// counting in the flow counters of the entries it matches.
    pub fn lookup(&mut self, packet: &[u8], len: usize) -> Verdict {
        let mut verdict = Verdict { tirs: Vec::new() };
        let mut todo: Vec<u32> = self.root.into_iter().collect();
        let mut hops = 0;
        while let Some(t) = todo.pop() {
            hops += 1;
            if hops > MAX_HOPS {
                log::warn!("model: steering gave up after {MAX_HOPS} tables (a forwarding loop?)");
                break;
            }
            let Some(table) = self.tables.get(&t) else {
                continue;
            };
            let hit = table.ftes.values().find(|f| {
                table
                    .groups
                    .get(&f.group)
                    .is_some_and(|g| matches(packet, &f.value, &g.criteria))
            });
            let Some(fte) = hit else {
                todo.extend(table.miss);
                continue;
            };
            use bareverbs_firmware_cmd::ifc::flow_action as a;
            if fte.action & a::COUNT != 0 {
                for c in &fte.counters {
                    if let Some(c) = self.counters.get_mut(c) {
                        c.packets += 1;
                        c.octets += len as u64;
                    }
                }
            }
            if fte.action & a::DROP != 0 || fte.action & a::FWD_DEST == 0 {
                continue;
            }
            for d in &fte.dests {
                match *d {
                    Dest::Tir(n) => verdict.tirs.push((n, fte.flow_tag)),
                    Dest::Table(n) => todo.push(n),
                }
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_firmware_cmd::ifc::flow_action;
    use bareverbs_firmware_cmd::layout::ViewMut;

    fn mask_dmac() -> Vec<u8> {
        let mut m = vec![0u8; MATCH_BYTES];
        let mut v = ViewMut::<FteMatchParam>::new_checked(&mut m).unwrap();
        v.sub(fte_match_param::outer_headers)
            .set(l::dmac_47_16, 0xffff_ffffu32)
            .set(l::dmac_15_0, 0xffffu16);
        m
    }

    fn table(miss: Option<u32>) -> Table {
        Table {
            level: 0,
            log_size: 4,
            miss,
            groups: BTreeMap::new(),
            ftes: BTreeMap::new(),
        }
    }

    /// A table forwarding frames for 02:00:00:00:00:02 to TIR 7 and counting them, missing
    /// into a catch-all table that forwards to TIR 9.
    fn steering() -> Steering {
        let frame = crate::eth::packet::tests::udp4(b"x", None);
        let value = match_param(&Headers::parse(&frame).unwrap());
        let mut s = Steering::default();
        let mut t1 = table(Some(2));
        t1.groups.insert(
            1,
            Group {
                start: 0,
                end: 0,
                criteria: mask_dmac(),
            },
        );
        t1.ftes.insert(
            0,
            Fte {
                group: 1,
                value,
                action: flow_action::FWD_DEST | flow_action::COUNT,
                flow_tag: 0x11,
                dests: vec![Dest::Tir(7)],
                counters: vec![5],
            },
        );
        let mut t2 = table(None);
        t2.groups.insert(
            3,
            Group {
                start: 0,
                end: 0,
                criteria: vec![0; MATCH_BYTES],
            },
        );
        t2.ftes.insert(
            0,
            Fte {
                group: 3,
                value: vec![0; MATCH_BYTES],
                action: flow_action::FWD_DEST,
                flow_tag: 0,
                dests: vec![Dest::Tir(9)],
                counters: vec![],
            },
        );
        s.tables.insert(1, t1);
        s.tables.insert(2, t2);
        s.counters.insert(5, FlowCounter::default());
        s.root = Some(1);
        s
    }

    #[test]
    fn a_matching_entry_forwards_and_counts_a_miss_goes_to_the_miss_table() {
        let mut s = steering();
        let frame = crate::eth::packet::tests::udp4(b"x", None);
        let p = match_param(&Headers::parse(&frame).unwrap());
        assert_eq!(s.lookup(&p, frame.len()).tirs, vec![(7, 0x11)]);
        assert_eq!(s.counters[&5].packets, 1);
        assert_eq!(s.counters[&5].octets, frame.len() as u64);
        let mut other = frame.clone();
        other[5] = 3;
        let p = match_param(&Headers::parse(&other).unwrap());
        assert_eq!(s.lookup(&p, other.len()).tirs, vec![(9, 0)]);
        assert_eq!(s.counters[&5].packets, 1, "a miss is not counted");
    }

    #[test]
    fn no_root_or_a_default_miss_drops_and_a_drop_rule_drops() {
        let frame = crate::eth::packet::tests::udp4(b"x", None);
        let p = match_param(&Headers::parse(&frame).unwrap());
        let mut s = steering();
        s.root = None;
        assert!(s.lookup(&p, 1).tirs.is_empty());
        let mut s = steering();
        s.tables
            .get_mut(&1)
            .unwrap()
            .ftes
            .get_mut(&0)
            .unwrap()
            .action = flow_action::DROP;
        assert!(s.lookup(&p, 1).tirs.is_empty());
        let mut s = steering();
        s.tables.get_mut(&2).unwrap().ftes.clear();
        let mut other = frame.clone();
        other[5] = 3;
        let p = match_param(&Headers::parse(&other).unwrap());
        assert!(s.lookup(&p, 1).tirs.is_empty());
    }

    #[test]
    fn a_forwarding_loop_ends() {
        let frame = crate::eth::packet::tests::udp4(b"x", None);
        let p = match_param(&Headers::parse(&frame).unwrap());
        let mut s = steering();
        let t2 = s.tables.get_mut(&2).unwrap();
        t2.ftes.get_mut(&0).unwrap().dests = vec![Dest::Table(2)];
        let mut other = frame.clone();
        other[5] = 3;
        let p2 = match_param(&Headers::parse(&other).unwrap());
        assert!(s.lookup(&p2, 1).tirs.is_empty());
        assert_eq!(s.lookup(&p, 1).tirs, vec![(7, 0x11)]);
    }
}
