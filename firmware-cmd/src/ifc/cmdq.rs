//! Command queue entry, mailbox block and the common command headers
//! (mlx5-reference 02 §2, §3, §8; Linux `struct mlx5_cmd_layout`, `struct mlx5_cmd_prot_block`,
//! mlx5_ifc `mbox_in`/`mbox_out`).

crate::ifc! {
    /// One 64-byte command queue entry.
    pub struct CmdLayout => cmd_layout: 0x200 bits {
        /// Transport type, always [`CMD_XPORT_PCI`].
        0x000 r#type: 8,
        /// Total input length in bytes.
        0x020 inlen: 32,
        /// Device address of input mailbox block 0.
        0x040 in_ptr: 64,
        /// First 16 input bytes.
        0x080 r#in: [u8; 16],
        /// First 16 output bytes, written by firmware.
        0x100 out: [u8; 16],
        /// Device address of output mailbox block 0.
        0x180 out_ptr: 64,
        /// Total output length in bytes.
        0x1c0 outlen: 32,
        /// Command token, repeated in every mailbox block.
        0x1e0 token: 8,
        /// Entry signature (unused while checksums are disabled).
        0x1e8 sig: 8,
        /// Bit 0: ownership ([`CMD_OWNER_HW`]); bits 7:1: delivery status.
        0x1f8 status_own: 8,
    }

    /// One 576-byte mailbox block of a command's input or output chain.
    pub struct CmdProtBlock => cmd_prot_block: 0x1200 bits {
        /// 512 payload bytes.
        0x0000 data: [u8; 512],
        /// Device address of the next block, 0 in the last.
        0x1180 next: 64,
        /// Index of this block in the chain.
        0x11c0 block_num: 32,
        /// Same token as the entry.
        0x11e8 token: 8,
        /// Control signature.
        0x11f0 ctrl_sig: 8,
        /// Block signature.
        0x11f8 sig: 8,
    }

    /// Header of every command input.
    pub struct MboxIn => mbox_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
    }

    /// Header of every command output.
    pub struct MboxOut => mbox_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

/// `cmd_layout.type` for PCI (`MLX5_PCI_CMD_XPORT`).
pub const CMD_XPORT_PCI: u8 = 7;
/// Ownership bit value meaning "hardware owns the entry" (`CMD_OWNER_HW`).
pub const CMD_OWNER_HW: u8 = 1;
/// Payload bytes per mailbox block (`MLX5_CMD_DATA_BLOCK_SIZE`).
pub const MAILBOX_DATA_BYTES: usize = 512;
/// Size of a mailbox block in bytes.
pub const MAILBOX_BYTES: usize = 576;
/// Input/output bytes carried inline in the entry.
pub const INLINE_BYTES: usize = 16;
/// Command interface revision the driver speaks (`CMD_IF_REV`).
pub const CMD_IF_REV: u32 = 5;
/// Most command slots a queue may have (`MLX5_MAX_COMMANDS`).
pub const MAX_COMMANDS: u32 = 32;

/// Number of mailbox blocks a message of `len` bytes needs (`mlx5_calc_cmd_blocks`).
pub const fn mailbox_blocks(len: usize) -> usize {
    if len <= INLINE_BYTES {
        0
    } else {
        (len - INLINE_BYTES).div_ceil(MAILBOX_DATA_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, ViewMut};

    #[test]
    fn sizes_match_device_h() {
        assert_eq!(CmdLayout::BYTES, 64);
        assert_eq!(CmdProtBlock::BYTES, MAILBOX_BYTES);
        assert_eq!(mailbox_blocks(16), 0);
        assert_eq!(mailbox_blocks(17), 1);
        assert_eq!(mailbox_blocks(4112), 8);
    }

    #[test]
    fn golden_entry_and_block() {
        // struct mlx5_cmd_layout: type@0, inlen@4, in_ptr@8, in@0x10, out@0x20, out_ptr@0x30,
        // outlen@0x38, token@0x3c, sig@0x3d, status_own@0x3f (02 §2).
        let mut e = [0xa5u8; 64];
        let mut v = ViewMut::<CmdLayout>::zeroed(&mut e).unwrap();
        v.set(cmd_layout::r#type, CMD_XPORT_PCI)
            .set(cmd_layout::inlen, 0x1010u32)
            .set(cmd_layout::in_ptr, 0x1_2345_6000u64)
            .set(cmd_layout::out_ptr, 0x1_2345_7000u64)
            .set(cmd_layout::outlen, 0x10u32)
            .set(cmd_layout::token, 0x42u8)
            .set(cmd_layout::status_own, CMD_OWNER_HW);
        v.bytes_mut(cmd_layout::r#in)[..2].copy_from_slice(&[0x01, 0x04]);
        let mut want = [0u8; 64];
        want[0] = 7;
        want[4..8].copy_from_slice(&[0, 0, 0x10, 0x10]);
        want[8..16].copy_from_slice(&[0, 0, 0, 1, 0x23, 0x45, 0x60, 0]);
        want[0x10..0x12].copy_from_slice(&[0x01, 0x04]);
        want[0x30..0x38].copy_from_slice(&[0, 0, 0, 1, 0x23, 0x45, 0x70, 0]);
        want[0x38..0x3c].copy_from_slice(&[0, 0, 0, 0x10]);
        want[0x3c] = 0x42;
        want[0x3f] = 1;
        assert_eq!(e, want);

        // struct mlx5_cmd_prot_block: next@0x230, block_num@0x238, token@0x23d (02 §3).
        let mut b = [0x5au8; 576];
        let mut v = ViewMut::<CmdProtBlock>::zeroed(&mut b).unwrap();
        v.set(cmd_prot_block::next, 0xdead_b000u64)
            .set(cmd_prot_block::block_num, 3u32)
            .set(cmd_prot_block::token, 0x42u8);
        assert_eq!(
            b[0x230..0x240],
            [0, 0, 0, 0, 0xde, 0xad, 0xb0, 0, 0, 0, 0, 3, 0, 0x42, 0, 0]
        );
        assert!(b[..0x230].iter().all(|&x| x == 0));
    }
}
