//! Firmware page management: QUERY_PAGES and MANAGE_PAGES (mlx5-reference 03 §4).

crate::ifc! {
    /// QUERY_PAGES input; `op_mod` is one of [`query_pages_op_mod`].
    pub struct QueryPagesIn => query_pages_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 embedded_cpu_function: 1,
        0x50 function_id: 16,
    }
    /// QUERY_PAGES output; `num_pages` is signed.
    pub struct QueryPagesOut => query_pages_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x40 embedded_cpu_function: 1,
        0x50 function_id: 16,
        0x60 num_pages: 32,
    }
    /// MANAGE_PAGES input; `op_mod` is one of [`manage_pages_op_mod`]; GIVE carries `pas[]`.
    pub struct ManagePagesIn => manage_pages_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x40 embedded_cpu_function: 1,
        0x50 function_id: 16,
        0x60 input_num_entries: 32,
        0x80 pas: [u64],
    }
    /// MANAGE_PAGES output; TAKE returns the reclaimed addresses in `pas[]`.
    pub struct ManagePagesOut => manage_pages_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x40 output_num_entries: 32,
        0x80 pas: [u64],
    }
}

/// QUERY_PAGES `op_mod` (`MLX5_QUERY_PAGES_IN_OP_MOD_*`).
pub mod query_pages_op_mod {
    /// Pages needed before INIT_HCA can start.
    pub const BOOT: u16 = 1;
    /// Pages needed by INIT_HCA.
    pub const INIT: u16 = 2;
    /// Pages needed after INIT_HCA.
    pub const REGULAR: u16 = 3;
}

/// MANAGE_PAGES `op_mod`.
pub mod manage_pages_op_mod {
    /// The driver cannot give the pages asked for.
    pub const CANT_GIVE: u16 = 0;
    /// The driver gives the pages in `pas[]`.
    pub const GIVE: u16 = 1;
    /// Firmware returns up to `input_num_entries` pages.
    pub const TAKE: u16 = 2;
}

/// Size of a firmware page (`MLX5_ADAPTER_PAGE_SIZE`).
pub const ADAPTER_PAGE_SIZE: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{View, ViewMut};

    #[test]
    fn golden_manage_pages_give() {
        // opcode 0x108, op_mod 1 (GIVE), input_num_entries at 0xc, pas[] from 0x10 (03 §4).
        let mut b = [0x33u8; 32];
        let mut v = ViewMut::<ManagePagesIn>::zeroed(&mut b).unwrap();
        v.set(manage_pages_in::opcode, 0x108u16)
            .set(manage_pages_in::op_mod, manage_pages_op_mod::GIVE)
            .set(manage_pages_in::input_num_entries, 2u32);
        v.set_array(manage_pages_in::pas, 0, 0x1_0000_0000).unwrap();
        v.set_array(manage_pages_in::pas, 1, 0x1_0000_1000).unwrap();
        assert!(v.set_array(manage_pages_in::pas, 2, 0).is_err());
        assert_eq!(
            b,
            [
                1, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, //
                0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x10, 0
            ]
        );
    }

    #[test]
    fn golden_query_pages_out_negative() {
        let b = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xfe];
        let v = View::<QueryPagesOut>::new_checked(&b).unwrap();
        assert_eq!(v.get(query_pages_out::function_id), 5);
        assert_eq!(v.get32(query_pages_out::num_pages) as i32, -2);
    }
}
