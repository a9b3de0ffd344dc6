//! A CQ's ring at work: a CQE written at the producer index with the owner bit of its pass,
//! overrun found from the doorbell record's consumer index, the arm doorbell, and the
//! completion event an armed CQ raises (mlx5-reference 04 §5–8). The CQ itself is `cq.rs`.

use bareverbs_firmware_cmd::ifc::event_type;

use crate::cq::Arm;
use crate::data_path::DataPath;
use crate::dma::AddressSpaceExt;

impl DataPath<'_> {
    /// Writes `cqe` (64 bytes, `op_own` opcode in bits 7:4 of byte 63 already set) into CQ
    /// `cqn` with the owner bit of its pass, then raises a completion event if the CQ is armed
    /// for it. Returns false when the CQ is missing or full or the device is halted.
    pub fn post_cqe(&mut self, cqn: u32, cqe: [u8; 64], solicited: bool) -> bool {
        if !self.objects.cqs.contains_key(&cqn) || self.halted() {
            return false;
        }
        if self.cfg.faults.lose_cqes > 0 {
            self.cfg.faults.lose_cqes -= 1;
            log::warn!("model: a CQE for CQ {cqn:#x} lost (injected)");
            return true;
        }
        if self
            .late
            .hold_cqe(&mut self.cfg.faults, self.clock, cqn, cqe, solicited)
        {
            return true;
        }
        self.write_cqe(cqn, cqe, solicited)
    }

    /// [`DataPath::post_cqe`] once no fault holds the CQE back: the overrun check, the write, the
    /// event.
    pub(crate) fn write_cqe(&mut self, cqn: u32, cqe: [u8; 64], solicited: bool) -> bool {
        // What the write needs of the CQ, copied (the CQ is borrowed again to write).
        let Some((dbr, overrun, producer, nent, oi, arm, eqn)) = self
            .objects
            .cqs
            .get(&cqn)
            .map(|c| (c.dbr, c.overrun, c.producer, c.nent(), c.oi, c.arm, c.eqn))
        else {
            return false;
        };
        let ci = match self.dma.read_be32(dbr) {
            Ok(v) => v & 0x00ff_ffff,
            Err(f) => {
                self.record_fault(f);
                return false;
            }
        };
        // The QP the completion belongs to (`mlx5_cqe64.sop_drop_qpn`, low 24 bits).
        let qpn = u32::from_be_bytes([0, cqe[0x39], cqe[0x3a], cqe[0x3b]]);
        // A CQ in error takes no more completions; a queue that tries to complete into it has
        // a catastrophic error (IBA 11.6.3.1: CQ Error, then Local Work Queue Catastrophic
        // Error for each SQ or RQ of that CQ that next uses it).
        if overrun {
            self.qp_fatal(qpn);
            return false;
        }
        let used = (producer.wrapping_sub(ci)) & 0x00ff_ffff;
        let forced = std::mem::take(&mut self.cfg.faults.overrun_cq);
        if forced {
            log::warn!("model: CQ {cqn:#x} overrun (injected)");
        }
        if (used >= nent && !oi) || forced {
            if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
                cq.overrun = true;
            }
            log::warn!("model: CQ {cqn:#x} overrun");
            let mut data = [0u8; 28];
            data[..4].copy_from_slice(&cqn.to_be_bytes());
            data[0x0b] = 1; // CQ overrun
            self.post_event(event_type::CQ_ERROR, 0, data);
            self.qp_fatal(qpn);
            return false;
        }
        if self.write_cqe_at(cqn, cqe).is_err() {
            return false;
        }
        if arm == Arm::Any || (arm == Arm::Solicited && solicited) {
            self.cq_event(cqn, eqn);
        }
        true
    }

    /// Writes `cqe` at CQ `cqn`'s producer index with the owner bit of its pass (body first,
    /// `op_own` last) and advances the index. No overrun check, no event.
    pub(crate) fn write_cqe_at(&mut self, cqn: u32, mut cqe: [u8; 64]) -> Result<(), ()> {
        let Some(cq) = self.objects.cqs.get(&cqn) else {
            return Err(());
        };
        let owner = ((cq.producer >> cq.log_size) & 1) as u8;
        // op_own: opcode, CQE format (data in the CQE), solicited event; then the owner bit.
        cqe[63] = (cqe[63] & 0xfe) | owner;
        let at = cq.cqe_iova(cq.producer);
        let wrote = self
            .dma
            .write(at, &cqe[..63])
            .and_then(|()| self.dma.write(at + 63, &cqe[63..]));
        if let Err(f) = wrote {
            self.record_fault(f);
            return Err(());
        }
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.producer = cq.producer.wrapping_add(1);
        }
        Ok(())
    }

    fn cq_event(&mut self, cqn: u32, eqn: u8) {
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.arm = Arm::No;
        }
        let mut data = [0u8; 28];
        data[0x18..0x1c].copy_from_slice(&(cqn & 0x00ff_ffff).to_be_bytes());
        self.post_eqe(eqn, event_type::COMP, 0, data);
    }

    /// CQ arm doorbell through UAR `uar`: high dword `sn << 28 | cmd | ci`, low dword CQN.
    pub(crate) fn cq_doorbell(&mut self, uar: u32, val: u64) {
        let hi = (val >> 32) as u32;
        let cqn = val as u32 & 0x00ff_ffff;
        let Some(cq) = self.objects.cqs.get_mut(&cqn) else {
            return;
        };
        if cq.uar != uar {
            log::warn!(
                "model: CQ {cqn:#x} armed through UAR {uar}, expected {}",
                cq.uar
            );
            return;
        }
        let ci = hi & 0x00ff_ffff;
        cq.arm = if hi & (1 << 24) != 0 {
            Arm::Solicited
        } else {
            Arm::Any
        };
        // CQEs already past the consumer index fire at once (an unsolicited arm).
        let pending = (cq.producer.wrapping_sub(ci)) & 0x00ff_ffff;
        if pending > 0 && cq.arm == Arm::Any {
            let eqn = cq.eqn;
            self.cq_event(cqn, eqn);
        }
    }
}
