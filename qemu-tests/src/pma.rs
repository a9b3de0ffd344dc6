//! The performance management agent behind MAD_IFC and the port counters it reports: Linux
//! ib_core asks every port's ClassPortInfo when it registers the device (sysfs.c
//! `get_counter_table`) and reads PortCounters / PortCountersExtended for the sysfs
//! counters; mlx5_ib hands those MADs to firmware (`mlx5_ib_process_mad` without
//! `vport_counters`). Layouts: Linux `include/rdma/ib_pma.h`, `ib_mad.h`; IBA 16.1.
//!
//! Facts that are the model's: data counters count payload octets only (no headers: the
//! model has no packets on a wire), acknowledgements are not counted, every packet is
//! unicast, the error counters stay zero (the fabric is lossless), and the response time
//! value (18, as the ports' subnet timeout).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{View, ViewMut};

use crate::hca::Hca;
pub use crate::port::PortCounters;
use crate::sma::Discard;

/// ClassPortInfo `resp_time_value` the agent reports.
const RESP_TIME: u8 = 18;

/// A 64-bit count as a 32-bit PortCounters field: they stop at their maximum (IBA 16.1.3.5).
fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Hca {
    /// Port `port`'s counters (1-based), or `None` when there is no such port.
    pub fn port_counters(&self, port: u8) -> Option<PortCounters> {
        Some(self.ports.get(usize::from(port).checked_sub(1)?)?.counters)
    }

    /// Runs the performance management MAD `mad` arriving on `port` through the agent: the
    /// response MAD, or [`Discard`] for a response method or another base version.
    pub(crate) fn pma(&mut self, port: u8, mad: &[u8]) -> Result<[u8; MAD_BYTES], Discard> {
        let m = View::<PmaMad>::new_checked(mad).map_err(|_| Discard)?;
        let method = m.get(ib_pma_mad::method) as u8;
        if m.get(ib_pma_mad::base_version) != 1 || method & mgmt_method::RESP != 0 {
            return Err(Discard);
        }
        let attr = m.get32(ib_pma_mad::attr_id) as u16;
        let class_version = m.get(ib_pma_mad::class_version);
        let select = m.bytes(ib_pma_mad::data)[1];
        let mut resp = [0u8; MAD_BYTES];
        resp.copy_from_slice(&mad[..MAD_BYTES]);
        let mut r = ViewMut::<PmaMad>::new_checked(&mut resp).map_err(|_| Discard)?;
        r.bytes_mut(ib_pma_mad::data).fill(0);
        // PortSelect 0 names the port the MAD arrived on; 0xff (all ports) is not offered
        // (no AllPortSelect capability).
        let target = if select == 0 { port } else { select };
        let status = if class_version != 1 {
            mad_status::BAD_VERSION
        } else {
            match (method, attr) {
                (mgmt_method::GET, pma_attr::CLASS_PORT_INFO) => {
                    let mut c =
                        ViewMut::<ClassPortInfo>::new_checked(r.bytes_mut(ib_pma_mad::data))
                            .map_err(|_| Discard)?;
                    c.set(ib_class_port_info::base_version, 1u8)
                        .set(ib_class_port_info::class_version, 1u8)
                        .set(ib_class_port_info::capability_mask, pma_cap::EXT_WIDTH)
                        .set(ib_class_port_info::resp_time_value, RESP_TIME);
                    mad_status::SUCCESS
                }
                (mgmt_method::GET | mgmt_method::SET, pma_attr::PORT_COUNTERS)
                | (mgmt_method::GET | mgmt_method::SET, pma_attr::PORT_COUNTERS_EXT) => {
                    if self.port_counters(target).is_none() {
                        mad_status::INVALID_ATTRIB_VALUE
                    } else {
                        if method == mgmt_method::SET {
                            let data = m.bytes(ib_pma_mad::data);
                            self.clear_counters(
                                target,
                                attr,
                                u16::from_be_bytes([data[2], data[3]]),
                            );
                        }
                        let c = self.port_counters(target).unwrap_or_default();
                        fill_counters(attr, target, &c, r.bytes_mut(ib_pma_mad::data))
                            .ok_or(Discard)?;
                        mad_status::SUCCESS
                    }
                }
                (mgmt_method::GET | mgmt_method::SET, _) => mad_status::UNSUPPORTED_METHOD_ATTRIB,
                _ => mad_status::UNSUPPORTED_METHOD,
            }
        };
        r.set(ib_pma_mad::method, mgmt_method::GET_RESP)
            .set(ib_pma_mad::status, status);
        Ok(resp)
    }

    /// A Set of PortCounters(Extended) clears the counters its CounterSelect names.
    fn clear_counters(&mut self, port: u8, attr: u16, select: u16) {
        let Some(p) = self.ports.get_mut(usize::from(port) - 1) else {
            return;
        };
        let c = &mut p.counters;
        // ib_pma.h IB_PMA_SEL_PORT_* (PortCounters) and IB_PMA_SELX_PORT_* (Extended).
        let (xd, rd, xp, rp) = if attr == pma_attr::PORT_COUNTERS {
            (0x1000, 0x2000, 0x4000, 0x8000)
        } else {
            (0x0001, 0x0002, 0x0004, 0x0008)
        };
        if select & xd != 0 {
            c.xmit_bytes = 0;
        }
        if select & rd != 0 {
            c.rcv_bytes = 0;
        }
        if select & xp != 0 {
            c.xmit_packets = 0;
        }
        if select & rp != 0 {
            c.rcv_packets = 0;
        }
    }
}

/// Writes PortCounters or PortCountersExtended for `port` into the attribute data.
fn fill_counters(attr: u16, port: u8, c: &PortCounters, data: &mut [u8]) -> Option<()> {
    if attr == pma_attr::PORT_COUNTERS {
        ViewMut::<PmaPortCounters>::new_checked(&mut *data)
            .ok()?
            .set(ib_pma_portcounters::port_select, port)
            .set(ib_pma_portcounters::port_xmit_data, sat32(c.xmit_bytes / 4))
            .set(ib_pma_portcounters::port_rcv_data, sat32(c.rcv_bytes / 4))
            .set(
                ib_pma_portcounters::port_xmit_packets,
                sat32(c.xmit_packets),
            )
            .set(ib_pma_portcounters::port_rcv_packets, sat32(c.rcv_packets));
    } else {
        ViewMut::<PmaPortCountersExt>::new_checked(&mut *data)
            .ok()?
            .set(ib_pma_portcounters_ext::port_select, port)
            .set(ib_pma_portcounters_ext::port_xmit_data, c.xmit_bytes / 4)
            .set(ib_pma_portcounters_ext::port_rcv_data, c.rcv_bytes / 4)
            .set(ib_pma_portcounters_ext::port_xmit_packets, c.xmit_packets)
            .set(ib_pma_portcounters_ext::port_rcv_packets, c.rcv_packets)
            .set(
                ib_pma_portcounters_ext::port_unicast_xmit_packets,
                c.xmit_packets,
            )
            .set(
                ib_pma_portcounters_ext::port_unicast_rcv_packets,
                c.rcv_packets,
            );
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bareverbs_firmware_cmd::layout::Layout;

    use super::*;
    use crate::clock::SimClock;
    use crate::config::ModelConfig;
    use crate::hca::HcaState;
    use crate::memory::HostMemory;
    use crate::port::Traffic;

    fn hca() -> Hca {
        let mut h = Hca::new(
            ModelConfig::default(),
            Arc::new(SimClock::virtual_clock()),
            Arc::new(HostMemory::new()),
        );
        h.state = HcaState::Initialized;
        h
    }

    /// A PerfMgmt MAD as Linux ib_core sysfs.c `get_perf_mad` builds it: class 0x04, version
    /// 1, PortSelect in `data[41]` of the `ib_mad` (byte 1 of the PMA data).
    fn perf(method: u8, attr: u16, port_select: u8, select: u16) -> [u8; MAD_BYTES] {
        let mut m = [0u8; MAD_BYTES];
        let mut v = ViewMut::<PmaMad>::new_checked(&mut m).unwrap();
        v.set(ib_pma_mad::base_version, 1u8)
            .set(ib_pma_mad::mgmt_class, mgmt_class::PERF_MGMT)
            .set(ib_pma_mad::class_version, 1u8)
            .set(ib_pma_mad::method, method)
            .set(ib_pma_mad::tid, 0x77u64)
            .set(ib_pma_mad::attr_id, attr);
        let d = v.bytes_mut(ib_pma_mad::data);
        d[1] = port_select;
        d[2..4].copy_from_slice(&select.to_be_bytes());
        m
    }

    /// MAD_IFC as mlx5_ib sends it (op_mod 3, the port): (MAD status, attribute data).
    fn mad_ifc(h: &mut Hca, mad: &[u8]) -> (u16, Vec<u8>) {
        let mut i = vec![0u8; MadIfcIn::BYTES];
        {
            let mut v = ViewMut::<MadIfcIn>::new_checked(&mut i).unwrap();
            v.set(mad_ifc_in::opcode, 0x50du16)
                .set(mad_ifc_in::op_mod, 3u16)
                .set(mad_ifc_in::port, 1u8);
            v.bytes_mut(mad_ifc_in::mad).copy_from_slice(mad);
        }
        let mut o = vec![0u8; MadIfcOut::BYTES];
        h.exec(0x50d, 3, &i, &mut o).expect("MAD_IFC succeeds");
        let r = View::<MadIfcOut>::new_checked(&o)
            .unwrap()
            .bytes(mad_ifc_out::response_mad_packet)
            .to_vec();
        let v = View::<PmaMad>::new_checked(&r).unwrap();
        assert_eq!(v.get(ib_pma_mad::method), u64::from(mgmt_method::GET_RESP));
        assert_eq!(v.get(ib_pma_mad::tid), 0x77);
        (
            v.get32(ib_pma_mad::status) as u16,
            v.bytes(ib_pma_mad::data).to_vec(),
        )
    }

    #[test]
    fn class_port_info_offers_the_extended_counters() {
        // ib_core sysfs.c get_counter_table: IB_PMA_CLASS_CAP_EXT_WIDTH selects the 64-bit
        // counter table; the reply is read from ib_mad.data + 40 (our data[0..]).
        let mut h = hca();
        let (st, d) = mad_ifc(&mut h, &perf(1, pma_attr::CLASS_PORT_INFO, 0, 0));
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!((d[0], d[1]), (1, 1));
        assert_eq!(u16::from_be_bytes([d[2], d[3]]), pma_cap::EXT_WIDTH);
    }

    #[test]
    fn counters_report_the_ports_traffic_and_a_set_clears_them() {
        let mut h = hca();
        let lid = h.ports[0].lid;
        h.data_path().count_traffic(lid, Traffic::Xmit, 4096, 4);
        h.data_path().count_traffic(lid, Traffic::Rcv, 64, 1);
        h.data_path().count_traffic(lid + 100, Traffic::Rcv, 64, 1); // not this device's LID
                                                                     // ib_pma_portcounters_ext: xmit data (octets / 4) at 8, rcv data 16, packets 24, 32.
        let (st, d) = mad_ifc(&mut h, &perf(1, pma_attr::PORT_COUNTERS_EXT, 1, 0));
        assert_eq!(st, mad_status::SUCCESS);
        let be64 = |at: usize| u64::from_be_bytes(d[at..at + 8].try_into().unwrap());
        assert_eq!(
            (d[1], be64(8), be64(16), be64(24), be64(32)),
            (1, 1024, 16, 4, 1)
        );
        // ib_pma_portcounters: 32-bit, xmit data at 24, rcv packets at 36.
        let (_, d) = mad_ifc(&mut h, &perf(1, pma_attr::PORT_COUNTERS, 0, 0));
        let be32 = |at: usize| u32::from_be_bytes(d[at..at + 4].try_into().unwrap());
        assert_eq!((be32(24), be32(36)), (1024, 1));
        // Set with IB_PMA_SEL_PORT_XMIT_DATA clears only that counter.
        let (st, d) = mad_ifc(&mut h, &perf(2, pma_attr::PORT_COUNTERS, 1, 0x1000));
        assert_eq!(st, mad_status::SUCCESS);
        assert_eq!(
            (be32(24), u32::from_be_bytes(d[28..32].try_into().unwrap())),
            (1024, 16)
        );
        let c = h.port_counters(1).unwrap();
        assert_eq!((c.xmit_bytes, c.rcv_bytes, c.xmit_packets), (0, 64, 4));
    }

    #[test]
    fn bad_ports_attributes_and_methods_get_iba_statuses() {
        let mut h = hca();
        let (st, _) = mad_ifc(&mut h, &perf(1, pma_attr::PORT_COUNTERS, 2, 0));
        assert_eq!(st, mad_status::INVALID_ATTRIB_VALUE, "no port 2");
        let (st, _) = mad_ifc(&mut h, &perf(1, 0x0010, 1, 0));
        assert_eq!(
            st,
            mad_status::UNSUPPORTED_METHOD_ATTRIB,
            "PortSamplesControl"
        );
        let (st, _) = mad_ifc(&mut h, &perf(0x06, pma_attr::PORT_COUNTERS, 1, 0));
        assert_eq!(st, mad_status::UNSUPPORTED_METHOD);
        let mut old = perf(1, pma_attr::CLASS_PORT_INFO, 0, 0);
        old[2] = 2;
        assert_eq!(mad_ifc(&mut h, &old).0, mad_status::BAD_VERSION);
    }
}
