//! Multicast groups: ATTACH_TO_MCG / DETACH_FROM_MCG (mlx5-reference 06 §6).

crate::ifc! {
    /// ATTACH_TO_MCG input: attach QP `qpn` to the multicast group `multicast_gid`.
    pub struct AttachToMcgIn => attach_to_mcg_in: 0x100 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 qpn: 24,
        0x80 multicast_gid: [u8; 16],
    }
    /// ATTACH_TO_MCG output.
    pub struct AttachToMcgOut => attach_to_mcg_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// DETACH_FROM_MCG input (same layout as ATTACH_TO_MCG).
    pub struct DetachFromMcgIn => detach_from_mcg_in: 0x100 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 qpn: 24,
        0x80 multicast_gid: [u8; 16],
    }
    /// DETACH_FROM_MCG output.
    pub struct DetachFromMcgOut => detach_from_mcg_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, ViewMut};

    const GID: [u8; 16] = [
        0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
    ];

    #[test]
    fn golden_attach_and_detach() {
        // 06 §6: ATTACH_TO_MCG = 0x806, qpn at byte 0x09 [23:0], multicast_gid at 0x10..0x1f,
        // 32 bytes; DETACH_FROM_MCG = 0x807, same layout.
        let mut b = [0x24u8; 32];
        let mut v = ViewMut::<AttachToMcgIn>::zeroed(&mut b).unwrap();
        v.set(attach_to_mcg_in::opcode, 0x806u16)
            .set(attach_to_mcg_in::qpn, 0x00_1234u32);
        v.bytes_mut(attach_to_mcg_in::multicast_gid)
            .copy_from_slice(&GID);
        let mut want = [0u8; 32];
        want[0..2].copy_from_slice(&[0x08, 0x06]);
        want[0x09..0x0c].copy_from_slice(&[0x00, 0x12, 0x34]);
        want[0x10..0x20].copy_from_slice(&GID);
        assert_eq!(b, want);

        let mut d = [0x24u8; 32];
        let mut v = ViewMut::<DetachFromMcgIn>::zeroed(&mut d).unwrap();
        v.set(detach_from_mcg_in::opcode, 0x807u16)
            .set(detach_from_mcg_in::qpn, 0x00_1234u32);
        v.bytes_mut(detach_from_mcg_in::multicast_gid)
            .copy_from_slice(&GID);
        want[1] = 0x07;
        assert_eq!(d, want);

        assert_eq!(AttachToMcgIn::BYTES, 32);
        assert_eq!(DetachFromMcgIn::BYTES, 32);
        assert_eq!(AttachToMcgOut::BYTES, 16);
        assert_eq!(DetachFromMcgOut::BYTES, 16);
    }
}
