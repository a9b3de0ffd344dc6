//! The capabilities the model reports: a believable ConnectX-5 on InfiniBand, and the rules of
//! SET_HCA_CAP (which general fields the driver may change, mlx5-reference 03 §6).

use bareverbs_firmware_cmd::ifc::{
    atomic, atomic_caps as a, cmd_hca_cap as c, flow_table_nic_cap as ftn,
    flow_table_prop_layout as ftp, per_protocol_networking_offload_caps as e, AtomicCaps,
    CmdHcaCap, EthCaps, FlowTableNicCap,
};
use bareverbs_firmware_cmd::layout::{Field, Layout, ViewMut};

use crate::config::ModelConfig;

/// Bytes of the capability area.
pub const CAP_BYTES: usize = 4096;

/// Fields of the general capabilities that SET_HCA_CAP may change (Linux `handle_hca_cap`),
/// each up to the maximum the device reports.
pub const WRITABLE: &[Field<CmdHcaCap>] = &[
    c::pkey_table_size,
    c::log_max_qp,
    c::cmdif_checksum,
    c::drain_sigerr,
    c::uar_4k,
    c::log_uar_page_sz,
    c::cache_line_128byte,
    c::dct,
    c::num_vhca_ports,
    c::release_all_pages,
    c::mkey_by_name,
    c::roce,
    c::log_max_current_uc_list,
    c::abs_native_port_num,
    c::disable_link_up,
    c::sw_owner_id,
];

/// Maximum (supported) and current general capabilities, as QUERY_HCA_CAP returns them.
///
/// Bits that make Linux query another capability group (`mlx5_query_hca_caps`: `event_cap`,
/// `roce`, `pg`, `qos`, `hca_cap_2`, `debug`, `eth_net_offloads`, …) stay clear until the model
/// implements that group; `atomic` is set, its group is [`atomic_caps`].
pub fn general_caps(cfg: &ModelConfig) -> (Vec<u8>, Vec<u8>) {
    let mut max = vec![0u8; CAP_BYTES];
    {
        let mut v = ViewMut::<CmdHcaCap>::new_checked(&mut max[..CmdHcaCap::BYTES])
            .unwrap_or_else(|_| unreachable!("the capability area holds cmd_hca_cap"));
        let values: &[(Field<CmdHcaCap>, u64)] = &[
            (c::log_max_srq_sz, 15),
            (c::log_max_qp_sz, 15),
            (c::log_max_qp, 18),
            (c::log_max_srq, 16),
            (c::log_max_cq_sz, 22),
            (c::log_max_cq, 16),
            (c::log_max_eq_sz, 22),
            (c::log_max_mkey, 20),
            (c::terminate_scatter_list_mkey, 1),
            (c::dump_fill_mkey, 1),
            (c::fast_teardown, 1),
            (c::log_max_eq, 4),
            (c::max_indirection, 2),
            (c::log_max_mrw_sz, 64),
            (c::force_teardown, 1),
            (c::null_mkey, 1),
            (c::umr_extended_translation_offset, 1),
            (c::log_max_klm_list_size, 16),
            (c::atomic, 1),
            (c::log_max_ra_req_qp, 4),
            (c::log_max_ra_res_qp, 4),
            (c::release_all_pages, 1),
            (c::end_pad, 1),
            (c::gid_table_size, 0),
            (c::pkey_table_size, 0),
            (c::port_type, u64::from(cfg.port_type_eth)),
            (c::num_ports, u64::from(cfg.num_ports)),
            (c::log_max_msg, 30),
            (c::cqe_version, 1),
            (c::drain_sigerr, 1),
            (c::cmdif_checksum, 3),
            (c::cq_oi, 1),
            (c::cq_resize, 1),
            (c::cq_moderation, 1),
            (c::ud, 1),
            (c::uc, 1),
            (c::rc, 1),
            (c::uar_4k, 1),
            (c::uar_sz, 13),
            // Objects and user memory may be created with uid 0 (read-only; firmware since
            // ConnectX-5 16.32 reports it). rdma-core `mlx5_vfio_setup_function` refuses a
            // device without it (EOPNOTSUPP) after SET_HCA_CAP.
            (c::umem_uid_0, 1),
            (c::log_pg_sz, 12),
            (c::bf, 1),
            (c::driver_version, 1),
            (c::log_bf_reg_size, 9),
            (c::max_wqe_sz_sq, 1024),
            (c::max_wqe_sz_rq, 512),
            (c::max_qp_mcg, 240),
            (c::log_max_mcg, 21),
            (c::log_max_transport_domain, 16),
            (c::log_max_pd, 17),
            (c::log_max_xrcd, 16),
            // Linux 6.12 mlx5_ib main.c mlx5_ib_dev_res_init: no XRC, no mlx5_ib (EOPNOTSUPP).
            (c::xrc, 1),
            (c::log_max_wq_sz, 17),
            (c::log_max_current_mc_list, 10),
            (c::log_max_current_uc_list, 10),
            (c::log_uar_page_sz, 0),
            (c::device_frequency_mhz, 156),
            (c::device_frequency_khz, 156_250),
            (c::num_of_uars_per_page, 1),
            (c::num_vhca_ports, u64::from(cfg.num_ports)),
            // DC (Linux `handle_hca_cap` turns `dct` on when supported), with DCI streams as
            // ConnectX-7 reports them.
            (c::dct, u64::from(cfg.dc)),
            (c::log_max_dct_connections, 10),
            (c::log_max_dci_stream_channels, if cfg.dc { 4 } else { 0 }),
            (c::log_max_dci_errored_streams, if cfg.dc { 2 } else { 0 }),
            (c::max_wqe_sz_sq_dc, 1024),
            (c::log_max_ra_req_dc, 4),
            (c::log_max_ra_res_dc, 4),
            // Scatter to CQE, for RC and for DC requesters.
            (c::sctr_data_cqe, 1),
            (c::dc_req_sctr_data_cqe, 1),
            (c::qp_packet_based, u64::from(cfg.qp_packet_based)),
        ];
        for &(f, val) in values {
            v.set(f, val);
        }
        if cfg.port_type_eth {
            // The Ethernet NIC (eth.rs): offloads and NIC receive flow tables, and the queue,
            // transport and steering objects Linux mlx5e creates.
            let eth: &[(Field<CmdHcaCap>, u64)] = &[
                (c::eth_net_offloads, 1),
                (c::nic_flow_table, 1),
                (c::log_max_rq, 10),
                (c::log_max_sq, 10),
                (c::log_max_tir, 10),
                (c::log_max_tis, 8),
                (c::log_max_tis_per_sq, 0),
                (c::log_max_rqt, 8),
                (c::log_max_rqt_size, 8),
                (c::log_max_l2_table, 10),
            ];
            for &(f, val) in eth {
                v.set(f, val);
            }
        }
    }
    let mut cur = max.clone();
    {
        let mut v = ViewMut::<CmdHcaCap>::new_checked(&mut cur[..CmdHcaCap::BYTES])
            .unwrap_or_else(|_| unreachable!("the capability area holds cmd_hca_cap"));
        // Firmware defaults before the driver's SET_HCA_CAP: checksums in their initial state,
        // no 4K UARs, a conservative QP count.
        v.set(c::cmdif_checksum, 1u8)
            .set(c::uar_4k, 0u8)
            .set(c::log_max_qp, 17u8)
            .set(c::dct, 0u8);
        v.set(c::drain_sigerr, 0u8).set(c::num_vhca_ports, 1u8);
    }
    (max, cur)
}

/// Ethernet offload capabilities (group 1; max and current alike): checksums, VLAN strip,
/// LSO up to 64 KiB, RSS, loopback blocking per TIR, VLAN insertion by the WQE; the inline
/// header a send WQE needs is the NIC vport context's `min_wqe_inline_mode`. No LRO, no
/// multi-packet send WQEs, no software parser.
pub fn eth_caps() -> Vec<u8> {
    let mut cur = vec![0u8; CAP_BYTES];
    ViewMut::<EthCaps>::new_checked(&mut cur[..EthCaps::BYTES])
        .unwrap_or_else(|_| unreachable!("the capability area holds the Ethernet caps"))
        .set(e::csum_cap, 1u8)
        .set(e::vlan_cap, 1u8)
        .set(e::wqe_vlan_insert, 1u8)
        .set(e::self_lb_en_modifiable, 1u8)
        .set(e::max_lso_cap, 16u8)
        .set(
            e::wqe_inline_mode,
            bareverbs_firmware_cmd::ifc::wqe_inline_mode::VPORT_CONTEXT,
        )
        .set(e::rss_ind_tbl_cap, 8u8);
    cur
}

/// NIC flow table capabilities (group 7; max and current alike): receive tables only, four
/// levels below the root, the match fields `eth/` steers on.
pub fn flow_table_caps() -> Vec<u8> {
    let mut cur = vec![0u8; CAP_BYTES];
    {
        let mut v = ViewMut::<FlowTableNicCap>::new_checked(&mut cur[..FlowTableNicCap::BYTES])
            .unwrap_or_else(|_| unreachable!("the capability area holds the flow table caps"));
        let mut rx = v.sub(ftn::flow_table_properties_nic_receive);
        rx.set(ftp::ft_support, 1u8)
            .set(ftp::flow_counter, 1u8)
            .set(ftp::modify_root, 1u8)
            .set(ftp::identified_miss_table_mode, 1u8)
            .set(ftp::flow_table_modify, 1u8)
            .set(ftp::log_max_ft_size, 20u8)
            .set(ftp::max_ft_level, 64u8)
            .set(ftp::log_max_ft_num, 8u8)
            .set(ftp::log_max_flow_counter, 16u8)
            .set(ftp::log_max_destination, 8u8)
            .set(ftp::log_max_flow, 16u8);
        use bareverbs_firmware_cmd::ifc::flow_table_fields_supported as f;
        for part in [ftp::ft_field_support, ftp::ft_field_bitmask_support] {
            let mut m = rx.sub(part);
            for field in [
                f::outer_dmac,
                f::outer_smac,
                f::outer_ether_type,
                f::outer_ip_version,
                f::outer_first_prio,
                f::outer_first_cfi,
                f::outer_first_vid,
                f::outer_sip,
                f::outer_dip,
                f::outer_frag,
                f::outer_ip_protocol,
                f::outer_udp_sport,
                f::outer_udp_dport,
                f::outer_tcp_sport,
                f::outer_tcp_dport,
            ] {
                m.set(field, 1u8);
            }
        }
    }
    cur
}

/// Maximum and current atomic capabilities (group 3): 8-byte compare-and-swap and
/// fetch-and-add on QPs, big-endian until the driver asks for host endianness, which it may.
pub fn atomic_caps(cfg: &ModelConfig) -> (Vec<u8>, Vec<u8>) {
    let mut cur = vec![0u8; CAP_BYTES];
    {
        let mut v = ViewMut::<AtomicCaps>::new_checked(&mut cur[..AtomicCaps::BYTES])
            .unwrap_or_else(|_| unreachable!("the capability area holds atomic_caps"));
        v.set(
            a::supported_atomic_req_8b_endianness_mode_1,
            cfg.atomic_host_endianness,
        )
        .set(
            a::atomic_operations,
            atomic::OPS_CMP_SWAP | atomic::OPS_FETCH_ADD,
        )
        .set(a::atomic_size_qp, atomic::SIZE_QP_8_BYTES)
        .set(a::atomic_size_dc, atomic::SIZE_QP_8_BYTES)
        .set(a::atomic_req_8b_endianness_mode, atomic::REQ_MODE_BE);
    }
    let mut max = cur.clone();
    if cfg.atomic_host_endianness {
        ViewMut::<AtomicCaps>::new_checked(&mut max[..AtomicCaps::BYTES])
            .unwrap_or_else(|_| unreachable!("the capability area holds atomic_caps"))
            .set(
                a::atomic_req_8b_endianness_mode,
                atomic::REQ_MODE_HOST_ENDIANNESS,
            );
    }
    (max, cur)
}

/// Applies a SET_HCA_CAP atomic block to the current one: only the endianness mode is taken,
/// big-endian or (when supported) host endianness; the other fields are read-only and what the
/// block holds there is ignored — Linux `handle_hca_cap_atomic` sends them zeroed.
pub fn set_atomic(req: &[u8], cur: &mut [u8]) -> Result<(), &'static str> {
    use bareverbs_firmware_cmd::layout::{get_bits, set_bits};
    let f = a::atomic_req_8b_endianness_mode;
    let s = a::supported_atomic_req_8b_endianness_mode_1;
    let mode = get_bits(req, f.bit, f.width);
    let host = u64::from(atomic::REQ_MODE_HOST_ENDIANNESS);
    if mode > host || (mode == host && get_bits(cur, s.bit, s.width) == 0) {
        return Err(f.name);
    }
    set_bits(cur, f.bit, f.width, mode);
    Ok(())
}

/// Checks a SET_HCA_CAP general block against the current and maximum ones: only writable
/// fields may differ, each within its maximum. Returns the offending field name on failure.
pub fn check_set_general(req: &[u8], cur: &[u8], max: &[u8]) -> Result<(), &'static str> {
    let mut scratch = req[..CAP_BYTES].to_vec();
    let view =
        |b: &[u8], f: Field<CmdHcaCap>| bareverbs_firmware_cmd::layout::get_bits(b, f.bit, f.width);
    for &f in WRITABLE {
        let want = view(req, f);
        let limit = view(max, f);
        let ok = if f.width == 1 {
            want <= limit
        } else {
            want <= limit.max(view(cur, f))
        };
        // log_uar_page_sz is a page shift the driver picks; any small value is accepted.
        let ok = ok || (f.name == "log_uar_page_sz" && want <= 4) || f.name == "pkey_table_size";
        if !ok {
            return Err(f.name);
        }
        bareverbs_firmware_cmd::layout::set_bits(&mut scratch, f.bit, f.width, view(cur, f));
    }
    if scratch != cur[..CAP_BYTES] {
        return Err("read-only capability field");
    }
    Ok(())
}

/// The capabilities firmware reports (QUERY_HCA_CAP) and the driver may change (SET_HCA_CAP):
/// general and atomic, each as its maximum and its current value.
pub(crate) struct Caps {
    /// General capabilities, maximum.
    pub(crate) max: Vec<u8>,
    /// General capabilities, current.
    pub(crate) cur: Vec<u8>,
    /// Atomic capabilities, maximum.
    pub(crate) atomic_max: Vec<u8>,
    /// Atomic capabilities, current.
    pub(crate) atomic_cur: Vec<u8>,
}

impl Caps {
    /// What a device of configuration `cfg` reports after a reset.
    pub(crate) fn new(cfg: &ModelConfig) -> Self {
        let (max, cur) = general_caps(cfg);
        let (atomic_max, atomic_cur) = atomic_caps(cfg);
        Caps {
            max,
            cur,
            atomic_max,
            atomic_cur,
        }
    }
}

/// The current general capability `f` in `caps_cur` (`cmd_hca_cap` as firmware reports it).
pub(crate) fn cap(caps_cur: &[u8], f: Field<CmdHcaCap>) -> u64 {
    bareverbs_firmware_cmd::layout::get_bits(&caps_cur[..CAP_BYTES], f.bit, f.width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_firmware_cmd::layout::get_bits;

    /// Linux `mlx5_query_hca_caps` queries another capability group for each of these bits;
    /// the model answers only GENERAL and ATOMIC, so they must be clear (found when Linux 6.12
    /// asked for DEV_EVENT because `event_cap` was set).
    #[test]
    fn no_bit_asks_linux_for_a_group_the_model_lacks() {
        let (max, cur) = general_caps(&ModelConfig::default());
        for f in [
            c::event_cap,
            c::roce,
            c::pg,
            c::qos,
            c::hca_cap_2,
            c::eth_net_offloads,
            c::ipoib_enhanced_offloads,
            c::nic_flow_table,
            c::port_selection_cap,
            c::vport_group_manager,
        ] {
            assert_eq!(get_bits(&cur, f.bit, f.width), 0, "{}", f.name);
            assert_eq!(get_bits(&max, f.bit, f.width), 0, "{}", f.name);
        }
    }

    /// Linux 6.12 mlx5_ib registers memory with UMR only when UMR may change page sizes
    /// (`umr_modify_entity_size_disabled` clear, umr.h `mlx5r_umr_can_load_pas`) and, for MRs
    /// of MLX5_MAX_UMR_PAGES pages or more, with `umr_extended_translation_offset`, which the
    /// model's UMR honours (`xlt_offset_47_16`). Atomic-right changes stay allowed
    /// (`umr_modify_atomic_disabled` clear); relaxed-ordering UMR is not offered.
    #[test]
    fn umr_caps_let_linux_register_with_umr() {
        let (max, cur) = general_caps(&ModelConfig::default());
        for caps in [&max, &cur] {
            let bit = |f: Field<CmdHcaCap>| get_bits(caps, f.bit, f.width);
            assert_eq!(bit(c::umr_extended_translation_offset), 1);
            assert_eq!(bit(c::umr_modify_entity_size_disabled), 0);
            assert_eq!(bit(c::umr_modify_atomic_disabled), 0);
            assert_eq!(bit(c::atomic), 1);
        }
    }

    /// rdma-core 56 `mlx5_vfio_setup_function` requires `umem_uid_0` in the current caps;
    /// it is a read-only device fact (Linux `handle_hca_cap` never writes it, and it is not in
    /// [`WRITABLE`]): reported in max and cur, and a SET_HCA_CAP clearing it is refused.
    #[test]
    fn umem_uid_0_is_reported_and_read_only() {
        use bareverbs_firmware_cmd::layout::set_bits;
        let f = c::umem_uid_0;
        let (max, cur) = general_caps(&ModelConfig::default());
        assert_eq!(get_bits(&max, f.bit, f.width), 1);
        assert_eq!(get_bits(&cur, f.bit, f.width), 1);
        assert!(!WRITABLE.iter().any(|w| w.name == f.name));
        let mut req = cur.clone();
        assert!(check_set_general(&req, &cur, &max).is_ok());
        set_bits(&mut req, f.bit, f.width, 0);
        assert!(check_set_general(&req, &cur, &max).is_err());
    }

    /// Linux `handle_hca_cap_atomic` sends a zeroed block with only the mode set: accepted,
    /// and only the mode changes.
    #[test]
    fn atomic_set_takes_the_mode_alone() {
        use bareverbs_firmware_cmd::layout::set_bits;
        let f = a::atomic_req_8b_endianness_mode;
        let (_, cur) = atomic_caps(&ModelConfig::default());
        let mut now = cur.clone();
        let mut req = vec![0u8; CAP_BYTES];
        set_bits(&mut req, f.bit, f.width, 1);
        set_atomic(&req, &mut now).unwrap();
        assert_eq!(get_bits(&now, f.bit, f.width), 1);
        set_bits(&mut now, f.bit, f.width, 0);
        assert_eq!(now, cur, "nothing but the mode changed");
        // Modes past host endianness are refused, and host endianness where unsupported.
        set_bits(&mut req, f.bit, f.width, 2);
        assert!(set_atomic(&req, &mut now).is_err());
        let cfg = ModelConfig {
            atomic_host_endianness: false,
            ..ModelConfig::default()
        };
        let (_, mut be_only) = atomic_caps(&cfg);
        set_bits(&mut req, f.bit, f.width, 1);
        assert!(set_atomic(&req, &mut be_only).is_err());
        set_bits(&mut req, f.bit, f.width, 0);
        assert!(set_atomic(&req, &mut be_only).is_ok());
    }
}
