//! The capabilities the model reports: a believable ConnectX-5 on InfiniBand, and the rules of
//! SET_HCA_CAP (which general fields the driver may change, mlx5-reference 03 §6).

use bareverbs_firmware_cmd::ifc::{cmd_hca_cap as c, CmdHcaCap};
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
/// `atomic`, `roce`, `pg`, `qos`, `hca_cap_2`, `debug`, `eth_net_offloads`, …) stay clear until
/// the model implements that group.
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
            (c::log_max_klm_list_size, 16),
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
            (c::log_max_wq_sz, 17),
            (c::log_max_current_mc_list, 10),
            (c::log_max_current_uc_list, 10),
            (c::log_uar_page_sz, 0),
            (c::device_frequency_mhz, 156),
            (c::device_frequency_khz, 156_250),
            (c::num_of_uars_per_page, 1),
            (c::num_vhca_ports, u64::from(cfg.num_ports)),
        ];
        for &(f, val) in values {
            v.set(f, val);
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
            .set(c::log_max_qp, 17u8);
        v.set(c::drain_sigerr, 0u8).set(c::num_vhca_ports, 1u8);
    }
    (max, cur)
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

#[cfg(test)]
mod tests {
    use super::*;
    use bareverbs_firmware_cmd::layout::get_bits;

    /// Linux `mlx5_query_hca_caps` queries another capability group for each of these bits;
    /// the model answers only GENERAL, so they must be clear (found when Linux 6.12 asked for
    /// DEV_EVENT because `event_cap` was set).
    #[test]
    fn no_bit_asks_linux_for_a_group_the_model_lacks() {
        let (max, cur) = general_caps(&ModelConfig::default());
        for f in [
            c::event_cap,
            c::atomic,
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
}
