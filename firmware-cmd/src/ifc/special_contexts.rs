//! QUERY_SPECIAL_CONTEXTS: the reserved lkey and special mkeys (mlx5-reference 06 §5).

crate::ifc! {
    /// QUERY_SPECIAL_CONTEXTS input.
    pub struct QuerySpecialContextsIn => query_special_contexts_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
    }
    /// QUERY_SPECIAL_CONTEXTS output.
    pub struct QuerySpecialContextsOut => query_special_contexts_out: 0x100 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x40 dump_fill_mkey: 32,
        0x60 resd_lkey: 32,
        0x80 null_mkey: 32,
        0xa0 terminate_scatter_list_mkey: 32,
        0xc0 repeated_mkey: 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::View;

    #[test]
    fn golden_special_contexts_out() {
        let mut b = [0u8; 32];
        b[0x0c..0x10].copy_from_slice(&[0, 0, 1, 0]);
        b[0x14..0x18].copy_from_slice(&[0, 0, 2, 0]);
        let v = View::<QuerySpecialContextsOut>::new_checked(&b).unwrap();
        assert_eq!(v.get(query_special_contexts_out::resd_lkey), 0x100);
        assert_eq!(
            v.get(query_special_contexts_out::terminate_scatter_list_mkey),
            0x200
        );
    }
}
