//! ENABLE/DISABLE_HCA, QUERY/SET_ISSI, INIT_HCA, TEARDOWN_HCA, QUERY_ADAPTER,
//! SET_DRIVER_VERSION (mlx5-reference 03 §1–3, §7).

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::Layout;
use bareverbs_firmware_cmd::CmdStatus;

use super::{bad_param, fail, input, output, syndrome, CmdResult};
use crate::hca::{Hca, HcaState};

/// ISSI values the model supports: 0 and 1.
const SUPPORTED_ISSI: u32 = 0b11;

/// Length of `init_hca_in` before `sw_vhca_id`/`sw_owner_id` (rdma-core 56 mlx5_ifc.h).
const INIT_HCA_IN_SHORT_BYTES: usize = 16;

impl Hca {
    pub(super) fn enable_hca(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<EnableHcaIn>(i)?;
        output::<EnableHcaOut>(o)?;
        if v.get(enable_hca_in::function_id) != 0
            || v.get(enable_hca_in::embedded_cpu_function) != 0
        {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        if self.state != HcaState::Disabled {
            return Err(fail(CmdStatus::BadSystemState, syndrome::WRONG_STATE));
        }
        self.state = HcaState::Enabled;
        Ok(())
    }

    pub(super) fn disable_hca(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<DisableHcaIn>(i)?;
        output::<DisableHcaOut>(o)?;
        if v.get(disable_hca_in::function_id) != 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        match self.state {
            HcaState::Disabled => {
                return Err(fail(CmdStatus::BadSystemState, syndrome::WRONG_STATE))
            }
            // Linux's error path after INIT_HCA disables without TEARDOWN_HCA
            // (mlx5_function_setup -> mlx5_function_disable): an implicit teardown. Pages
            // firmware still needed are not returned.
            HcaState::Initialized => self.drop_objects(),
            HcaState::Enabled => {}
        }
        self.state = HcaState::Disabled;
        self.issi = 0;
        self.regular_pages = 0;
        self.cmdq.pages_before_done = false;
        let (_, cur) = crate::caps::general_caps(&self.cfg);
        self.caps.cur = cur;
        self.caps.atomic_cur = crate::caps::atomic_caps(&self.cfg).1;
        Ok(())
    }

    fn drop_objects(&mut self) {
        let cfg = self.cfg.clone();
        if let Some(e) = self.eth.as_mut() {
            e.reset(&cfg);
        }
        self.objects.eqs.clear();
        self.objects.uars.clear();
        self.objects.pds.clear();
        self.objects.tds.clear();
        self.objects.mkeys.clear();
        self.objects.cqs.clear();
        self.objects.qps.clear();
    }

    pub(super) fn query_issi(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<QueryIssiIn>(i)?;
        let mut out = output::<QueryIssiOut>(o)?;
        self.require_enabled()?;
        out.set(query_issi_out::current_issi, self.issi)
            .set(query_issi_out::supported_issi_dw0, SUPPORTED_ISSI);
        Ok(())
    }

    pub(super) fn set_issi(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<SetIssiIn>(i)?;
        output::<SetIssiOut>(o)?;
        self.require_enabled()?;
        if self.state == HcaState::Initialized {
            // The interface step sequence is fixed once the HCA is initialized.
            return Err(fail(CmdStatus::BadResourceState, syndrome::WRONG_STATE));
        }
        let issi = v.get(set_issi_in::current_issi);
        if issi >= 32 || SUPPORTED_ISSI & (1 << issi) == 0 {
            return Err(bad_param(syndrome::OUT_OF_RANGE));
        }
        self.issi = issi as u16;
        Ok(())
    }

    pub(super) fn init_hca(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        // `init_hca_in` grew from 16 bytes (opcode, op_mod, reserved: rdma-core 56
        // mlx5_ifc.h, which mlx5_vfio sends) to 32 with `sw_vhca_id` and `sw_owner_id`
        // (Linux mlx5_ifc.h). Firmware takes both: fields past a short input are zero.
        if i.len() < INIT_HCA_IN_SHORT_BYTES {
            return Err(fail(CmdStatus::BadInputLength, syndrome::SHORT_INPUT));
        }
        let mut full = [0u8; InitHcaIn::BYTES];
        let n = i.len().min(full.len());
        full[..n].copy_from_slice(&i[..n]);
        input::<InitHcaIn>(&full)?;
        output::<InitHcaOut>(o)?;
        self.require_enabled()?;
        if self.state == HcaState::Initialized {
            return Err(fail(CmdStatus::BadSystemState, syndrome::WRONG_STATE));
        }
        let need = (self.cfg.boot_pages + self.cfg.init_pages) as usize;
        if self.pages.len() < need {
            return Err(fail(CmdStatus::NoResources, syndrome::MISSING_PAGES));
        }
        self.state = HcaState::Initialized;
        Ok(())
    }

    pub(super) fn teardown_hca(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<TeardownHcaIn>(i)?;
        let mut out = output::<TeardownHcaOut>(o)?;
        self.require_initialized()?;
        let profile = v.get(teardown_hca_in::profile) as u16;
        match profile {
            teardown_profile::GRACEFUL_CLOSE | teardown_profile::FORCE_CLOSE => {}
            teardown_profile::PREPARE_FAST_TEARDOWN => {}
            _ => return Err(bad_param(syndrome::OUT_OF_RANGE)),
        }
        // Firmware drops every object; pages stay donated until the driver takes them back.
        self.drop_objects();
        self.regular_pages = 0;
        self.state = HcaState::Enabled;
        out.set(teardown_hca_out::state, 0u8);
        Ok(())
    }

    pub(super) fn query_adapter(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        input::<QueryAdapterIn>(i)?;
        let mut out = output::<QueryAdapterOut>(o)?;
        self.require_enabled()?;
        let mut p = out.sub(query_adapter_out::query_adapter_struct);
        p.set(query_adapter_param_block::ieee_vendor_id, 0x0002c9u32)
            .set(query_adapter_param_block::vsd_vendor_id, 0x15b3u16);
        let psid = b"MT_0000000008";
        p.bytes_mut(query_adapter_param_block::vsd_contd_psid)[..psid.len()].copy_from_slice(psid);
        Ok(())
    }

    pub(super) fn set_driver_version(&mut self, i: &[u8], o: &mut [u8]) -> CmdResult {
        let v = input::<SetDriverVersionIn>(i)?;
        output::<SetDriverVersionOut>(o)?;
        self.require_initialized()?;
        let raw = v.bytes(set_driver_version_in::driver_version);
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        self.driver_version = Some(String::from_utf8_lossy(&raw[..end]).into_owned());
        Ok(())
    }
}
