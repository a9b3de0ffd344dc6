//! An EQ's ring at work: an EQE written with the owner bit of its pass, overrun, the
//! consumer-index and arm doorbells, and the interrupt an armed EQ raises (mlx5-reference 04
//! §2–4). The EQ itself is `eq.rs`.

use crate::data_path::DataPath;
use crate::trace::ModelEvent;

impl DataPath<'_> {
    /// Delivers an event to the first EQ subscribed to its type; dropped if none is.
    pub(crate) fn post_event(&mut self, ty: u8, sub_type: u8, data: [u8; 28]) -> bool {
        let Some(eqn) = self
            .objects
            .eqs
            .values()
            .find(|e| e.subscribed(ty))
            .map(|e| e.eqn)
        else {
            return false;
        };
        self.post_eqe(eqn, ty, sub_type, data)
    }

    /// Writes an EQE into EQ `eqn`: data first, the owner byte last, then an interrupt if armed.
    pub(crate) fn post_eqe(&mut self, eqn: u8, ty: u8, sub_type: u8, data: [u8; 28]) -> bool {
        if !self.objects.eqs.contains_key(&eqn) {
            return false;
        }
        if self.cfg.faults.lose_eqes > 0 {
            self.cfg.faults.lose_eqes -= 1;
            log::warn!("model: an EQE ({ty:#x}) for EQ {eqn} lost (injected)");
            return true;
        }
        if self
            .late
            .hold_eqe(&mut self.cfg.faults, self.clock, eqn, ty, sub_type, data)
        {
            return true;
        }
        self.write_eqe(eqn, ty, sub_type, data)
    }

    /// [`DataPath::post_eqe`] once no fault holds the EQE back: the overrun check, the write, the
    /// interrupt.
    pub(crate) fn write_eqe(&mut self, eqn: u8, ty: u8, sub_type: u8, data: [u8; 28]) -> bool {
        let Some(eq) = self.objects.eqs.get(&eqn) else {
            return false;
        };
        let forced = std::mem::take(&mut self.cfg.faults.overrun_eq);
        if eq.unconsumed() >= eq.nent() || forced {
            log::warn!("model: EQ {eqn} overrun, event {ty:#x} dropped");
            if let Some(eq) = self.objects.eqs.get_mut(&eqn) {
                eq.overrun = true;
            }
            return false;
        }
        let mut eqe = [0u8; 64];
        eqe[1] = ty;
        eqe[3] = sub_type;
        eqe[0x20..0x3c].copy_from_slice(&data);
        let owner = ((eq.producer >> eq.log_size) & 1) as u8;
        let at = eq.eqe_iova(eq.producer);
        let (armed, intr) = (eq.armed, eq.intr);
        let wrote = self
            .dma
            .write(at, &eqe[..63])
            .and_then(|()| self.dma.write(at + 63, &[owner]));
        if let Err(f) = wrote {
            self.record_fault(f);
            return false;
        }
        if let Some(eq) = self.objects.eqs.get_mut(&eqn) {
            eq.producer = eq.producer.wrapping_add(1);
            eq.armed = false;
        }
        self.logs.events.push(ModelEvent::Eqe {
            eqn,
            event_type: ty,
        });
        if armed {
            self.raise_irq(intr);
        }
        true
    }

    /// EQ doorbell through UAR `uar`: `(eqn << 24) | ci`, arming when `arm`.
    pub(crate) fn eq_doorbell(&mut self, uar: u32, val: u32, arm: bool) {
        let eqn = (val >> 24) as u8;
        let Some(eq) = self.objects.eqs.get_mut(&eqn) else {
            return;
        };
        if eq.uar != uar {
            log::warn!(
                "model: EQ {eqn} doorbell through UAR {uar}, expected {}",
                eq.uar
            );
            return;
        }
        eq.consumer = val & 0x00ff_ffff;
        if arm {
            eq.armed = true;
            if eq.unconsumed() > 0 {
                eq.armed = false;
                let intr = eq.intr;
                self.raise_irq(intr);
            }
        }
    }
}
