//! ACCESS_REG and the registers the bring-up touches (mlx5-reference 03 §5).

crate::ifc! {
    /// ACCESS_REG input; the register payload follows the header.
    pub struct AccessRegisterIn => access_register_in: 0x80 bits {
        0x00 opcode: 16,
        0x30 op_mod: 16,
        0x50 register_id: 16,
        0x60 argument: 32,
        0x80 register_data: [u32],
    }
    /// ACCESS_REG output; the register payload follows the header.
    pub struct AccessRegisterOut => access_register_out: 0x80 bits {
        0x00 status: 8,
        0x20 syndrome: 32,
        0x80 register_data: [u32],
    }
    /// PMTU: the port's largest frame (L2 header included) — the device's maximum, the
    /// driver's choice and what is in force.
    pub struct PmtuReg => pmtu_reg: 0x80 bits {
        0x08 local_port: 8,
        0x20 max_mtu: 16,
        0x40 admin_mtu: 16,
        0x60 oper_mtu: 16,
    }
    /// PAOS: the port's administrative and operational status (1 up, 2 down).
    pub struct PaosReg => paos_reg: 0x80 bits {
        0x00 swid: 8,
        0x08 local_port: 8,
        0x14 admin_status: 4,
        0x1c oper_status: 4,
        /// Admin state update enable: the write changes `admin_status`.
        0x20 ase: 1,
        0x21 ee: 1,
        0x3e e: 2,
    }
    /// PTYS: the port's protocols and speeds (`proto_mask` selects Ethernet or IB).
    pub struct PtysReg => ptys_reg: 0x200 bits {
        0x01 an_disable_admin: 1,
        0x02 an_disable_cap: 1,
        0x08 local_port: 8,
        0x1d proto_mask: 3,
        0x20 an_status: 4,
        0x30 data_rate_oper: 16,
        0x40 ext_eth_proto_capability: 32,
        0x60 eth_proto_capability: 32,
        0xa0 ext_eth_proto_admin: 32,
        0xc0 eth_proto_admin: 32,
        0x100 ext_eth_proto_oper: 32,
        0x120 eth_proto_oper: 32,
        0x17c connector_type: 4,
        0x180 eth_proto_lp_advertise: 32,
    }
    /// HOST_ENDIANNESS register payload (`struct mlx5_reg_host_endianness`).
    pub struct HostEndiannessReg => host_endianness_reg: 0x80 bits {
        0x00 he: 8,
    }
}

/// ACCESS_REG `op_mod`.
pub mod access_reg_op_mod {
    /// Write the register.
    pub const WRITE: u16 = 0;
    /// Read the register.
    pub const READ: u16 = 1;
}

/// Register ids (`MLX5_REG_*`, Linux `driver.h`).
pub mod register_id {
    /// Host endianness.
    pub const HOST_ENDIANNESS: u16 = 0x7004;
    /// Default timeouts.
    pub const DTOR: u16 = 0xc00e;
    /// Port MTU.
    pub const PMTU: u16 = 0x5003;
    /// Port type and speed.
    pub const PTYS: u16 = 0x5004;
    /// Port administrative and operational status.
    pub const PAOS: u16 = 0x5006;
    /// Port counters.
    pub const PPCNT: u16 = 0x5008;
}

/// PAOS status values (`MLX5_PORT_UP`, `MLX5_PORT_DOWN`).
pub mod port_status {
    /// Up.
    pub const UP: u8 = 1;
    /// Down.
    pub const DOWN: u8 = 2;
}

/// PTYS `proto_mask` bits (`MLX5_PTYS_*`).
pub mod ptys_proto {
    /// InfiniBand.
    pub const IB: u8 = 1 << 0;
    /// Ethernet.
    pub const EN: u8 = 1 << 2;
}

/// PTYS legacy Ethernet protocol bit of 100GBASE-CR4 (`MLX5E_100GBASE_CR4`, port.h).
pub const ETH_PROTO_100GBASE_CR4: u32 = 1 << 20;

/// `host_endianness_reg.he` for a little-endian host (`MLX5_SET_HOST_ENDIANNESS` is 0x80 for
/// big-endian).
pub const HOST_ENDIANNESS_LITTLE: u8 = 0x00;
/// `host_endianness_reg.he` for a big-endian host.
pub const HOST_ENDIANNESS_BIG: u8 = 0x80;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, ViewMut};

    #[test]
    fn golden_host_endianness_write() {
        // ACCESS_REG 0x805, op_mod 0 = write, register_id 0x7004 at byte 0xa, 16-byte payload
        // with `he` in byte 0: 0x80 on big-endian hosts (03 §5).
        let mut b = [0x77u8; 32];
        let (hdr, data) = b.split_at_mut(AccessRegisterIn::BYTES);
        ViewMut::<AccessRegisterIn>::zeroed(hdr)
            .unwrap()
            .set(access_register_in::opcode, 0x805u16)
            .set(access_register_in::op_mod, access_reg_op_mod::WRITE)
            .set(
                access_register_in::register_id,
                register_id::HOST_ENDIANNESS,
            );
        ViewMut::<HostEndiannessReg>::zeroed(data)
            .unwrap()
            .set(host_endianness_reg::he, HOST_ENDIANNESS_BIG);
        assert_eq!(
            b[..16],
            [8, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0x70, 0x04, 0, 0, 0, 0]
        );
        assert_eq!(b[16], 0x80);
        assert!(b[17..].iter().all(|&x| x == 0));
    }
}
