//! ACCESS_REG for the registers the bring-up uses (mlx5-reference 03 §5).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::Layout;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::hca::Hca;

impl Hca {
    pub(super) fn access_reg(&mut self, op_mod: u16, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<AccessRegisterIn>(i)?;
        let mut out = output::<AccessRegisterOut>(o)?;
        self.require_enabled()?;
        let id = v.get(access_register_in::register_id) as u16;
        match id {
            register_id::HOST_ENDIANNESS => {
                let need = AccessRegisterIn::BYTES + HostEndiannessReg::BYTES;
                match op_mod {
                    access_reg_op_mod::WRITE => {
                        if i.len() < need {
                            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
                        }
                        self.host_endianness = Some(i[AccessRegisterIn::BYTES]);
                        Ok(())
                    }
                    access_reg_op_mod::READ => {
                        let data = out.as_bytes_mut();
                        if data.len() < need {
                            return Err(fail(CmdStatus::BadOutputLength, syndrome::SHORT_OUTPUT));
                        }
                        data[AccessRegisterOut::BYTES] = self.host_endianness.unwrap_or(0);
                        Ok(())
                    }
                    _ => Err(bad_param(syndrome::BAD_OP_MOD)),
                }
            }
            register_id::PMTU | register_id::PAOS | register_id::PTYS | register_id::PPCNT
                if self.eth.is_some() =>
            {
                self.require_initialized()?;
                let req = &i[AccessRegisterIn::BYTES..];
                let reply = &mut out.as_bytes_mut()[AccessRegisterOut::BYTES..];
                self.eth_port_register(id, op_mod, req, reply)
            }
            _ => {
                log::info!("model: ACCESS_REG register {id:#06x} (op_mod {op_mod}) not modelled");
                Err(bad_param(syndrome::BAD_REGISTER))
            }
        }
    }
}
