//! Range checks of `modify_qp` attributes and address vectors, before any command: every
//! value the device would truncate or misread is refused by name (IBA field widths as Linux
//! `ib_modify_qp_is_ok` and mlx5_ib `mlx5_set_path` / `__mlx5_ib_modify_qp` use them).

use crate::caps::Caps;
use crate::error::{Error, Invalid};
use crate::verbs::qp::{AhAttr, QpAttr};
use crate::verbs::qp_state::QpAttrMask;

/// PSNs and QP numbers are 24 bits (IBA BTH).
const MAX_24: u32 = 0xff_ffff;
/// `IB_RATE_2_5_GBPS` and `IB_RATE_600_GBPS` (include/rdma/ib_verbs.h `enum ib_rate`): the
/// static rates Linux 6.12's `ib_rate_to_mlx5` maps; 0 is `IB_RATE_PORT_CURRENT`.
const RATE_MIN: u8 = 2;
const RATE_MAX: u8 = 22;
/// `MLX5_STAT_RATE_OFFSET`: an IB rate's place in the device's `stat_rate` encoding.
const STAT_RATE_OFFSET: u8 = 5;

fn invalid(what: Invalid) -> Error {
    Error::InvalidArgument { what }
}

/// The device's `stat_rate` for IB static rate `rate` (0: the port's current rate), as Linux
/// 6.12 mlx5_ib `ib_rate_to_mlx5`: the fastest rate at or below it that `stat_rate_support`
/// lists, or 0; `None` for a value that is no IB rate.
pub(crate) fn mlx5_stat_rate(rate: u8, stat_rate_support: u16) -> Option<u8> {
    if rate == 0 {
        return Some(0);
    }
    if !(RATE_MIN..=RATE_MAX).contains(&rate) {
        return None;
    }
    let supported = |r: u8| {
        1u32.checked_shl(u32::from(r + STAT_RATE_OFFSET))
            .is_some_and(|bit| bit & u32::from(stat_rate_support) != 0)
    };
    let mut r = rate;
    while r != 0 && !supported(r) {
        r -= 1;
    }
    Some(if r == 0 { 0 } else { r + STAT_RATE_OFFSET })
}

/// An address vector the device can use: SL 4 bits, a port it has, a static rate that is an
/// IB rate, a source GID index inside its table, and (for a connected QP or an AH without a
/// GRH) a destination LID that is not 0.
///
/// # Errors
/// The attribute by name.
pub(crate) fn check_av(ah: &AhAttr, caps: &Caps, needs_dlid: bool) -> Result<(), Error> {
    if ah.sl > 15 {
        return Err(invalid(Invalid::Sl));
    }
    if ah.port_num == 0 || ah.port_num > caps.num_ports {
        return Err(invalid(Invalid::Port));
    }
    if mlx5_stat_rate(ah.static_rate, 0).is_none() {
        return Err(invalid(Invalid::StaticRate));
    }
    if ah.is_global && u32::from(ah.grh.sgid_index) >= caps.gid_table_len {
        return Err(invalid(Invalid::SgidIndex));
    }
    if needs_dlid && ah.dlid == 0 && !ah.is_global {
        return Err(invalid(Invalid::Dlid));
    }
    Ok(())
}

/// The attributes `mask` names, checked against their widths and the device's limits.
///
/// # Errors
/// The first attribute out of range, by name.
pub(crate) fn check_attr(
    a: &QpAttr,
    mask: QpAttrMask,
    caps: &Caps,
    connected: bool,
) -> Result<(), Error> {
    let has = |m| mask.contains(m);
    if (has(QpAttrMask::RQ_PSN) && a.rq_psn > MAX_24)
        || (has(QpAttrMask::SQ_PSN) && a.sq_psn > MAX_24)
    {
        return Err(invalid(Invalid::Psn));
    }
    if has(QpAttrMask::DEST_QPN) && a.dest_qp_num > MAX_24 {
        return Err(invalid(Invalid::DestQpn));
    }
    // Retry counts are 3 bits (7: rnr_retry "infinite"), timers 5 bits (IBA).
    if has(QpAttrMask::RETRY_CNT) && a.retry_cnt > 7 {
        return Err(invalid(Invalid::RetryCount));
    }
    if has(QpAttrMask::RNR_RETRY) && a.rnr_retry > 7 {
        return Err(invalid(Invalid::RnrRetry));
    }
    if has(QpAttrMask::TIMEOUT) && a.timeout > 31 {
        return Err(invalid(Invalid::Timeout));
    }
    if has(QpAttrMask::MIN_RNR_TIMER) && a.min_rnr_timer > 31 {
        return Err(invalid(Invalid::MinRnrTimer));
    }
    if has(QpAttrMask::PKEY_INDEX) && u32::from(a.pkey_index) >= caps.pkey_table_len {
        return Err(invalid(Invalid::PkeyIndex));
    }
    if has(QpAttrMask::PORT) && (a.port_num == 0 || a.port_num > caps.num_ports) {
        return Err(invalid(Invalid::Port));
    }
    if has(QpAttrMask::MAX_QP_RD_ATOMIC) && u32::from(a.max_rd_atomic) > caps.max_qp_init_rd_atom {
        return Err(invalid(Invalid::MaxRdAtomic));
    }
    if has(QpAttrMask::MAX_DEST_RD_ATOMIC) && u32::from(a.max_dest_rd_atomic) > caps.max_qp_rd_atom
    {
        return Err(invalid(Invalid::MaxDestRdAtomic));
    }
    if has(QpAttrMask::AV) {
        check_av(&a.ah_attr, caps, connected)?;
    }
    if has(QpAttrMask::ALT_PATH) {
        check_av(&a.alt_ah_attr, caps, connected)?;
        if u32::from(a.alt_pkey_index) >= caps.pkey_table_len {
            return Err(invalid(Invalid::PkeyIndex));
        }
        if a.alt_port_num == 0 || a.alt_port_num > caps.num_ports {
            return Err(invalid(Invalid::Port));
        }
        if a.alt_timeout > 31 {
            return Err(invalid(Invalid::Timeout));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_rates_map_as_linux_maps_them() {
        // Port current stays 0; no support bits: every rate falls back to 0.
        assert_eq!(mlx5_stat_rate(0, 0), Some(0));
        assert_eq!(mlx5_stat_rate(16, 0), Some(0));
        // IB_RATE_40_GBPS (7) supported (bit 7 + 5 of the 16-bit cap): 7 + 5.
        assert_eq!(mlx5_stat_rate(7, 1 << 12), Some(12));
        // IB_RATE_60_GBPS (8) and IB_RATE_100_GBPS (16) are not: they fall to 40 Gb/s.
        assert_eq!(mlx5_stat_rate(8, 1 << 12), Some(12));
        assert_eq!(mlx5_stat_rate(16, 1 << 12), Some(12));
        // 1 (below 2.5 Gb/s) and 23 (past 600 Gb/s in Linux 6.12) are no rates.
        assert_eq!(mlx5_stat_rate(1, 0xffff), None);
        assert_eq!(mlx5_stat_rate(23, 0xffff), None);
    }
}
