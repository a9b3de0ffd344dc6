//! The Ethernet port's registers (ACCESS_REG): PMTU, PAOS, PTYS and the PPCNT counter groups
//! Linux mlx5e reads (IEEE 802.3, RFC 2863, RFC 2819, per priority, physical layer).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{Layout, View, ViewMut};
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, syndrome, CmdResult};
use crate::hca::Hca;

/// A register payload at least `n` bytes long, or BAD_INP_LEN / BAD_OUTP_LEN.
fn need(b: &[u8], n: usize, input: bool) -> CmdResult {
    if b.len() >= n {
        Ok(())
    } else if input {
        Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT))
    } else {
        Err(fail(CmdStatus::BadOutputLength, syndrome::SHORT_OUTPUT))
    }
}

impl Hca {
    /// One of the Ethernet port's registers.
    pub(super) fn eth_port_register(
        &mut self,
        id: u16,
        op_mod: u16,
        req: &[u8],
        reply: &mut [u8],
    ) -> CmdResult {
        match (id, op_mod) {
            (register_id::PMTU, _) => self.eth_pmtu(op_mod, req, reply),
            (register_id::PAOS, _) => self.eth_paos(op_mod, req, reply),
            (register_id::PTYS, access_reg_op_mod::READ) => self.eth_ptys(req, reply),
            (register_id::PPCNT, access_reg_op_mod::READ) => self.eth_ppcnt(req, reply),
            _ => Err(bad_param(syndrome::BAD_OP_MOD)),
        }
    }
}

/// The largest frame the model's Ethernet port takes (PMTU `max_mtu`).
pub const ETH_MAX_MTU: u16 = 9978;

impl Hca {
    /// PMTU: a write sets the port MTU (up to [`ETH_MAX_MTU`]), which is also what is in
    /// force; the NIC vport context keeps its own (`nic_vport_context.mtu`), as Linux sets both.
    fn eth_pmtu(&mut self, op_mod: u16, req: &[u8], reply: &mut [u8]) -> CmdResult {
        need(req, PmtuReg::BYTES, true)?;
        need(reply, PmtuReg::BYTES, false)?;
        let r = View::<PmtuReg>::new_checked(&req[..PmtuReg::BYTES])
            .unwrap_or_else(|_| unreachable!("length checked"));
        if r.get(pmtu_reg::local_port) > 1 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let e = self.eth_mut()?;
        match op_mod {
            access_reg_op_mod::WRITE => {
                let mtu = r.get(pmtu_reg::admin_mtu) as u16;
                if !(64..=ETH_MAX_MTU).contains(&mtu) {
                    return Err(bad_param(syndrome::OUT_OF_RANGE));
                }
                e.port_mtu = mtu;
                Ok(())
            }
            access_reg_op_mod::READ => {
                ViewMut::<PmtuReg>::new_checked(&mut reply[..PmtuReg::BYTES])
                    .unwrap_or_else(|_| unreachable!("length checked"))
                    .set(pmtu_reg::local_port, 1u8)
                    .set(pmtu_reg::max_mtu, ETH_MAX_MTU)
                    .set(pmtu_reg::admin_mtu, e.port_mtu)
                    .set(pmtu_reg::oper_mtu, e.port_mtu);
                Ok(())
            }
            _ => Err(bad_param(syndrome::BAD_OP_MOD)),
        }
    }

    /// PAOS: a write with `ase` sets the administrative status; the operational status is up
    /// when both it and the link are. A change is announced with a port-change event.
    fn eth_paos(&mut self, op_mod: u16, req: &[u8], reply: &mut [u8]) -> CmdResult {
        need(req, PaosReg::BYTES, true)?;
        need(reply, PaosReg::BYTES, false)?;
        let r = View::<PaosReg>::new_checked(&req[..PaosReg::BYTES])
            .unwrap_or_else(|_| unreachable!("length checked"));
        if r.get(paos_reg::local_port) > 1 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        match op_mod {
            access_reg_op_mod::WRITE => {
                if r.get(paos_reg::ase) == 0 {
                    return Ok(());
                }
                let up = match r.get(paos_reg::admin_status) as u8 {
                    port_status::UP => true,
                    port_status::DOWN => false,
                    _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
                };
                let before = self.eth_oper_up();
                self.eth_mut()?.admin_up = up;
                if self.eth_oper_up() != before {
                    self.post_port_change(1, up);
                }
                Ok(())
            }
            access_reg_op_mod::READ => {
                let admin = self.eth_mut()?.admin_up;
                let oper = self.eth_oper_up();
                let st = |b: bool| {
                    if b {
                        port_status::UP
                    } else {
                        port_status::DOWN
                    }
                };
                ViewMut::<PaosReg>::new_checked(&mut reply[..PaosReg::BYTES])
                    .unwrap_or_else(|_| unreachable!("length checked"))
                    .set(paos_reg::local_port, 1u8)
                    .set(paos_reg::admin_status, st(admin))
                    .set(paos_reg::oper_status, st(oper));
                Ok(())
            }
            _ => Err(bad_param(syndrome::BAD_OP_MOD)),
        }
    }

    /// PTYS (read): Ethernet only, one speed, 100GBASE-CR4: capable, advertised, and in use
    /// while the port is up.
    fn eth_ptys(&mut self, req: &[u8], reply: &mut [u8]) -> CmdResult {
        need(req, PtysReg::BYTES, true)?;
        need(reply, PtysReg::BYTES, false)?;
        let r = View::<PtysReg>::new_checked(&req[..PtysReg::BYTES])
            .unwrap_or_else(|_| unreachable!("length checked"));
        let mask = r.get(ptys_reg::proto_mask) as u8;
        if r.get(ptys_reg::local_port) > 1 || mask & ptys_proto::EN == 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let oper = self.eth_oper_up();
        ViewMut::<PtysReg>::new_checked(&mut reply[..PtysReg::BYTES])
            .unwrap_or_else(|_| unreachable!("length checked"))
            .set(ptys_reg::local_port, 1u8)
            .set(ptys_reg::proto_mask, ptys_proto::EN)
            .set(ptys_reg::eth_proto_capability, ETH_PROTO_100GBASE_CR4)
            .set(ptys_reg::eth_proto_admin, ETH_PROTO_100GBASE_CR4)
            .set(
                ptys_reg::eth_proto_oper,
                if oper { ETH_PROTO_100GBASE_CR4 } else { 0 },
            );
        Ok(())
    }

    /// PPCNT (read): the counter groups from what the port counted. The model's wire has no
    /// FCS, symbol, FEC or pause events, so those counters are zero; every frame is on
    /// priority 0 unless its VLAN tag says otherwise.
    fn eth_ppcnt(&mut self, req: &[u8], reply: &mut [u8]) -> CmdResult {
        need(req, PPCNT_BYTES, true)?;
        need(reply, PPCNT_BYTES, false)?;
        let port = req[1];
        let grp = req[3] & 0x3f;
        let clear = req[4] & 0x80 != 0;
        let prio = usize::from(req[7] & 0x1f);
        if port > 1 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        let now_ms = self.now_ns() / 1_000_000;
        let e = self.eth_mut()?;
        let c = &e.counters;
        let (ucast, mcast, bcast) = (0, 1, 2);
        let sum = |t: &[crate::eth::Traffic; 3], f: fn(&crate::eth::Traffic) -> u64| {
            t.iter().map(f).sum::<u64>()
        };
        let pk = |t: &crate::eth::Traffic| t.packets;
        let oc = |t: &crate::eth::Traffic| t.octets;
        // (counter index in the group, value); each counter is a big-endian u64 at 8 × index.
        let values: Vec<(usize, u64)> = match grp {
            PPCNT_IEEE_802_3 => vec![
                (0, sum(&c.tx, pk)),
                (1, sum(&c.rx, pk)),
                (4, sum(&c.tx, oc)),
                (5, sum(&c.rx, oc)),
                (6, c.tx[mcast].packets),
                (7, c.tx[bcast].packets),
                (8, c.rx[mcast].packets),
                (9, c.rx[bcast].packets),
            ],
            PPCNT_RFC_2863 => vec![
                (0, sum(&c.rx, oc)),
                (1, c.rx[ucast].packets),
                (2, c.rx_out_of_buffer + c.rx_steering_drops),
                (3, c.rx_bad),
                (5, sum(&c.tx, oc)),
                (6, c.tx[ucast].packets),
                (9, c.rx[mcast].packets),
                (10, c.rx[bcast].packets),
                (11, c.tx[mcast].packets),
                (12, c.tx[bcast].packets),
            ],
            PPCNT_RFC_2819 => {
                let mut v = vec![
                    (0, c.rx_out_of_buffer),
                    (1, sum(&c.rx, oc)),
                    (2, sum(&c.rx, pk)),
                    (3, c.rx[bcast].packets),
                    (4, c.rx[mcast].packets),
                ];
                v.extend(c.rx_sizes.iter().enumerate().map(|(k, n)| (11 + k, *n)));
                v
            }
            PPCNT_PER_PRIORITY if prio < 8 => {
                let p = &c.prio[prio];
                vec![
                    (0, p.1.octets),
                    (4, p.1.packets),
                    (5, p.0.octets),
                    (9, p.0.packets),
                ]
            }
            PPCNT_PER_PRIORITY => return Err(bad_param(syndrome::OUT_OF_RANGE)),
            PPCNT_PHYSICAL_LAYER => vec![(0, now_ms.saturating_sub(e.counters_cleared_ms))],
            _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
        };
        reply[..PPCNT_BYTES].fill(0);
        reply[..8].copy_from_slice(&req[..8]);
        for (k, v) in values {
            let at = 8 + 8 * k;
            reply[at..at + 8].copy_from_slice(&v.to_be_bytes());
        }
        if clear {
            e.counters = Default::default();
            e.counters_cleared_ms = now_ms;
        }
        Ok(())
    }
}

/// Bytes of the PPCNT register.
const PPCNT_BYTES: usize = 0x100;
/// PPCNT groups (`MLX5_*_COUNTERS_GROUP`, device.h).
const PPCNT_IEEE_802_3: u8 = 0x0;
const PPCNT_RFC_2863: u8 = 0x1;
const PPCNT_RFC_2819: u8 = 0x2;
const PPCNT_PER_PRIORITY: u8 = 0x10;
const PPCNT_PHYSICAL_LAYER: u8 = 0x12;
