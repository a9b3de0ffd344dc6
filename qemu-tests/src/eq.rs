//! Event queues in the model: writing EQEs with the owner bit, consumer-index doorbells,
//! arming and interrupts, and the events firmware raises on its own (mlx5-reference 04 §2–4).

use bareverbs_firmware_cmd::ifc::{eqe_qp_srq, event_type, EqeQpSrq, EQE_OWNER_INIT_VAL};
use bareverbs_firmware_cmd::layout::ViewMut;

use crate::hca::Hca;
use crate::trace::ModelEvent;

/// Size of an EQE.
pub const EQE_BYTES: u64 = 64;

/// One event queue.
#[derive(Clone, Debug)]
pub struct Eq {
    /// EQ number.
    pub eqn: u8,
    /// log2 of the number of entries.
    pub log_size: u8,
    /// UAR whose doorbells drive this EQ.
    pub uar: u32,
    /// MSI-X vector.
    pub intr: u16,
    /// Buffer page addresses.
    pub pas: Vec<u64>,
    /// Buffer page size in bytes.
    pub page_size: u64,
    /// Where the EQE buffer starts in its first page, in bytes (`eqc.page_offset`, see
    /// [`crate::page_list`]).
    pub page_offset: u64,
    /// Subscribed event types (bit n of word k = type 64k + n).
    pub mask: [u64; 4],
    /// EQEs written so far.
    pub producer: u32,
    /// Consumer index last written by the driver (24 bits).
    pub consumer: u32,
    /// An interrupt fires on the next EQE.
    pub armed: bool,
    /// An EQE was dropped because the queue was full.
    pub overrun: bool,
}

impl Eq {
    fn nent(&self) -> u32 {
        1 << self.log_size
    }

    pub(crate) fn subscribed(&self, ty: u8) -> bool {
        self.mask[usize::from(ty / 64)] & (1 << (ty % 64)) != 0
    }

    fn eqe_iova(&self, index: u32) -> u64 {
        let off = u64::from(index & (self.nent() - 1)) * EQE_BYTES;
        crate::page_list::buffer_iova(&self.pas, self.page_size, self.page_offset, off)
    }

    fn unconsumed(&self) -> u32 {
        (self.producer.wrapping_sub(self.consumer)) & 0x00ff_ffff
    }
}

impl Hca {
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
        if self.hold_eqe(eqn, ty, sub_type, data) {
            return true;
        }
        self.write_eqe(eqn, ty, sub_type, data)
    }

    /// [`Hca::post_eqe`] once no fault holds the EQE back: the overrun check, the write, the
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
        self.events.push(ModelEvent::Eqe {
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

    /// Firmware asks for `n` more pages (or gives `-n` back) with a page-request EQE.
    pub fn request_pages(&mut self, n: i32) {
        if n > 0 {
            self.regular_pages += n as usize;
        } else {
            self.regular_pages = self.regular_pages.saturating_sub(n.unsigned_abs() as usize);
        }
        let mut data = [0u8; 28];
        data[4..8].copy_from_slice(&n.to_be_bytes());
        self.post_event(event_type::PAGE_REQUEST, 0, data);
    }

    /// Pages firmware needs at this moment.
    pub(crate) fn pages_required(&self) -> usize {
        use crate::hca::HcaState;
        let mut need = self.regular_pages;
        if self.state == HcaState::Initialized {
            need += (self.cfg.boot_pages + self.cfg.init_pages) as usize;
        }
        need
    }

    /// Port `port` (1-based) goes up or down, with a port-change EQE.
    pub fn set_port(&mut self, port: u8, up: bool) {
        let Some(p) = self.ports.get_mut(usize::from(port).wrapping_sub(1)) else {
            return;
        };
        p.up = up;
        self.post_port_change(port, up);
    }

    /// A port-change EQE for `port`: ACTIVE or DOWN.
    pub(crate) fn post_port_change(&mut self, port: u8, up: bool) {
        let mut data = [0u8; 28];
        data[8] = port << 4;
        let sub = if up {
            bareverbs_firmware_cmd::ifc::port_change_subtype::ACTIVE
        } else {
            bareverbs_firmware_cmd::ifc::port_change_subtype::DOWN
        };
        self.post_event(event_type::PORT_CHANGE, sub, data);
    }
}

/// The data of a QP/SRQ asynchronous event EQE (`eqe_qp_srq`): resource type and number.
pub(crate) fn qp_srq_event_data(ty: u8, n: u32) -> [u8; 28] {
    let mut d = [0u8; 28];
    if let Ok(mut v) = ViewMut::<EqeQpSrq>::new_checked(&mut d[..]) {
        v.set(eqe_qp_srq::r#type, ty).set(eqe_qp_srq::qp_srq_n, n);
    }
    d
}

/// Owner value software writes into a fresh EQ buffer.
pub const OWNER_INIT: u8 = EQE_OWNER_INIT_VAL;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_srq_event_data_carries_type_and_number() {
        // Linux device.h `struct mlx5_eqe_qp_srq`: __be32 reserved1[5], u8 type, reserved2[3],
        // __be32 qp_srq_n (srq_cmd.c `srq_event_notifier` masks it with 0xffffff).
        let d = qp_srq_event_data(1, 0x12_3456);
        let mut want = [0u8; 28];
        want[20] = 1;
        want[25..28].copy_from_slice(&[0x12, 0x34, 0x56]);
        assert_eq!(d, want);
    }
}
