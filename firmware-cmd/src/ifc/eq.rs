//! Event queues: CREATE/DESTROY/QUERY_EQ and the EQ context (mlx5-reference 04 §1).

crate::ifc! {
    /// EQ context.
    pub struct Eqc => eqc: 0x200 bits {
        0x000 status: 4,
        0x00d ec: 1,
        0x00e oi: 1,
        0x014 st: 4,
        0x054 page_offset: 6,
        0x063 log_eq_size: 5,
        0x068 uar_page: 24,
        0x0b4 intr: 12,
        0x0c3 log_page_size: 5,
        0x148 consumer_counter: 24,
        0x168 producer_counter: 24,
    }
    /// CREATE_EQ input: context, four 64-bit event masks at 0x58, then buffer page addresses.
    pub struct CreateEqIn => create_eq_in: 0x880 bits {
        0x000 opcode: 16,
        0x010 uid: 16,
        0x030 op_mod: 16,
        0x080 eq_context_entry: Eqc,
        0x2c0 event_bitmask: [u8; 32],
        0x880 pas: [u64],
    }
    /// CREATE_EQ output.
    pub struct CreateEqOut => create_eq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x58 eq_number: 8,
    }
    /// DESTROY_EQ input.
    pub struct DestroyEqIn => destroy_eq_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x58 eq_number: 8,
    }
    /// DESTROY_EQ output.
    pub struct DestroyEqOut => destroy_eq_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// QUERY_EQ input.
    pub struct QueryEqIn => query_eq_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x58 eq_number: 8,
    }
    /// QUERY_EQ output.
    pub struct QueryEqOut => query_eq_out: 0x880 bits {
        0x000 status: 8,
        0x020 syndrome: 32,
        0x080 eq_context_entry: Eqc,
        0x2c0 event_bitmask: 64,
        0x880 pas: [u64],
    }
}

/// Spare EQEs Linux adds to every EQ (`MLX5_NUM_SPARE_EQE`).
pub const NUM_SPARE_EQE: u32 = 128;
/// Owner byte value written into every EQE before CREATE_EQ (`MLX5_EQE_OWNER_INIT_VAL`).
pub const EQE_OWNER_INIT_VAL: u8 = 1;
/// `eqc.st` values.
pub mod eqc_st {
    /// Armed: the next EQE fires an interrupt.
    pub const ARMED: u8 = 0x9;
    /// Fired: an interrupt was sent; no more until re-armed.
    pub const FIRED: u8 = 0xa;
}

/// Word `k` (events 64k … 64k+63) of `create_eq_in.event_bitmask`, big-endian.
pub fn set_event_bitmask(v: &mut crate::layout::ViewMut<'_, CreateEqIn>, k: usize, mask: u64) {
    let words = v.bytes_mut(create_eq_in::event_bitmask);
    if let Some(w) = words.get_mut(k * 8..k * 8 + 8) {
        w.copy_from_slice(&mask.to_be_bytes());
    }
}

/// Word `k` of `create_eq_in.event_bitmask`.
pub fn event_bitmask(v: &crate::layout::View<'_, CreateEqIn>, k: usize) -> u64 {
    let words = v.bytes(create_eq_in::event_bitmask);
    match words.get(k * 8..k * 8 + 8) {
        Some(w) => u64::from_be_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, ViewMut};

    #[test]
    fn golden_create_eq() {
        // 04 §1: eqc at 0x10 (log_eq_size at eqc byte 0xc [28:24], uar_page [23:0], intr at
        // eqc dword 5 [11:0], log_page_size at eqc byte 0x18 [28:24]); event_bitmask[0] at 0x58;
        // pas[0] at 0x110.
        let mut b = [0x99u8; 0x118];
        let mut v = ViewMut::<CreateEqIn>::zeroed(&mut b).unwrap();
        v.set(create_eq_in::opcode, 0x301u16);
        v.sub(create_eq_in::eq_context_entry)
            .set(eqc::log_eq_size, 8u8)
            .set(eqc::uar_page, 0x123u32)
            .set(eqc::intr, 0x5u32)
            .set(eqc::log_page_size, 1u8);
        set_event_bitmask(&mut v, 0, 0xc00);
        v.set_array(create_eq_in::pas, 0, 0x2_0000_0000).unwrap();
        assert_eq!(CreateEqIn::BYTES, 0x110);
        let mut want = [0u8; 0x118];
        want[0..2].copy_from_slice(&[3, 1]);
        want[0x1c..0x20].copy_from_slice(&[0x08, 0x00, 0x01, 0x23]);
        want[0x24..0x28].copy_from_slice(&[0, 0, 0, 5]);
        want[0x28] = 1;
        want[0x58..0x60].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x0c, 0]);
        want[0x110..0x118].copy_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
        assert_eq!(b, want);
    }
}
