//! Protection domains, transport domains and XRC domains: ALLOC/DEALLOC_PD,
//! ALLOC/DEALLOC_TRANSPORT_DOMAIN (mlx5-reference 06 §1, §3) and ALLOC/DEALLOC_XRCD (Linux 6.12
//! mlx5_ifc.h `alloc_xrcd_in/out`, `dealloc_xrcd_in/out`).

crate::ifc! {
    /// ALLOC_PD input.
    pub struct AllocPdIn => alloc_pd_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
    }
    /// ALLOC_PD output: the new 24-bit protection domain number.
    pub struct AllocPdOut => alloc_pd_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 pd: 24,
    }
    /// DEALLOC_PD input.
    pub struct DeallocPdIn => dealloc_pd_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 pd: 24,
    }
    /// DEALLOC_PD output.
    pub struct DeallocPdOut => dealloc_pd_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// ALLOC_TRANSPORT_DOMAIN input.
    pub struct AllocTransportDomainIn => alloc_transport_domain_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
    }
    /// ALLOC_TRANSPORT_DOMAIN output: the new 24-bit transport domain (referenced by TIRs/TISes).
    pub struct AllocTransportDomainOut => alloc_transport_domain_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 transport_domain: 24,
    }
    /// DEALLOC_TRANSPORT_DOMAIN input.
    pub struct DeallocTransportDomainIn => dealloc_transport_domain_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 transport_domain: 24,
    }
    /// DEALLOC_TRANSPORT_DOMAIN output.
    pub struct DeallocTransportDomainOut => dealloc_transport_domain_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
    /// ALLOC_XRCD input.
    pub struct AllocXrcdIn => alloc_xrcd_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
    }
    /// ALLOC_XRCD output: the new 24-bit XRC domain (referenced by XRC SRQs and XRC QPs).
    pub struct AllocXrcdOut => alloc_xrcd_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x48 xrcd: 24,
    }
    /// DEALLOC_XRCD input.
    pub struct DeallocXrcdIn => dealloc_xrcd_in: 0x80 bits {
        0x00 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
        0x48 xrcd: 24,
    }
    /// DEALLOC_XRCD output.
    pub struct DeallocXrcdOut => dealloc_xrcd_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View, ViewMut};

    #[test]
    fn golden_alloc_and_dealloc_pd() {
        // 06 §1: ALLOC_PD in is the bare 16-byte header (opcode 0x800 at byte 0).
        let mut b = [0xc7u8; 16];
        ViewMut::<AllocPdIn>::zeroed(&mut b)
            .unwrap()
            .set(alloc_pd_in::opcode, 0x800u16);
        assert_eq!(b, [8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);

        // 06 §1: alloc_pd_out.pd = byte 0x09, DW 2 [23:0]; byte 8 is reserved.
        let out = [
            0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x01, 0x02, 0x03, 0xff, 0, 0, 0,
        ];
        let v = View::<AllocPdOut>::new_checked(&out).unwrap();
        assert_eq!(v.get(alloc_pd_out::pd), 0x01_0203);
        assert_eq!(v.get(alloc_pd_out::status), 0);

        // 06 §1: dealloc_pd_in.pd at byte 0x09 (opcode 0x801).
        let mut b = [0xc7u8; 16];
        ViewMut::<DeallocPdIn>::zeroed(&mut b)
            .unwrap()
            .set(dealloc_pd_in::opcode, 0x801u16)
            .set(dealloc_pd_in::pd, 0x12_3456u32);
        assert_eq!(b, [8, 1, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0]);
    }

    #[test]
    fn golden_transport_domain() {
        // 06 §3: DEALLOC_TRANSPORT_DOMAIN = 0x817, transport_domain at byte 0x09 [23:0];
        // alloc_transport_domain_out.transport_domain at the same place; all 16 bytes.
        let mut b = [0x3cu8; 16];
        ViewMut::<DeallocTransportDomainIn>::zeroed(&mut b)
            .unwrap()
            .set(dealloc_transport_domain_in::opcode, 0x817u16)
            .set(dealloc_transport_domain_in::uid, 0u16)
            .set(dealloc_transport_domain_in::transport_domain, 0xab_cdefu32);
        assert_eq!(
            b,
            [8, 0x17, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0xef, 0, 0, 0, 0]
        );

        let out = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x2a, 0, 0, 0, 0];
        let v = View::<AllocTransportDomainOut>::new_checked(&out).unwrap();
        assert_eq!(v.get(alloc_transport_domain_out::transport_domain), 0x2a);

        // mlx5_ifc `alloc_xrcd_out.xrcd` and `dealloc_xrcd_in.xrcd`: byte 0x09 [23:0].
        let out = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b, 0x0c, 0, 0, 0, 0];
        let v = View::<AllocXrcdOut>::new_checked(&out).unwrap();
        assert_eq!(v.get(alloc_xrcd_out::xrcd), 0x0a_0b0c);
        let mut b = [0x3cu8; 16];
        ViewMut::<DeallocXrcdIn>::zeroed(&mut b)
            .unwrap()
            .set(dealloc_xrcd_in::opcode, 0x80fu16)
            .set(dealloc_xrcd_in::xrcd, 0x12_3456u32);
        assert_eq!(
            b,
            [8, 0x0f, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0]
        );

        for bytes in [
            AllocXrcdIn::BYTES,
            AllocXrcdOut::BYTES,
            DeallocXrcdIn::BYTES,
            DeallocXrcdOut::BYTES,
            AllocPdIn::BYTES,
            AllocPdOut::BYTES,
            DeallocPdIn::BYTES,
            DeallocPdOut::BYTES,
            AllocTransportDomainIn::BYTES,
            AllocTransportDomainOut::BYTES,
            DeallocTransportDomainIn::BYTES,
            DeallocTransportDomainOut::BYTES,
        ] {
            assert_eq!(bytes, 16);
        }
    }
}
