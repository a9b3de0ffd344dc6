//! The command queue engine: doorbell, entry and mailbox-chain parsing with delivery-status
//! checks, execution, output scatter and ownership hand-back (mlx5-reference 02 §2–7).

use bareverbs_firmware_cmd::ifc::{
    cmd_layout, cmd_prot_block, event_type, CmdLayout, CmdProtBlock, CMD_OWNER_HW, CMD_XPORT_PCI,
    INLINE_BYTES, MAILBOX_BYTES, MAILBOX_DATA_BYTES,
};
use bareverbs_firmware_cmd::layout::{Layout, View};
use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus, Opcode};

use crate::cmdq_state::Pending;
use crate::config::FaultAction;
use crate::dma::AddressSpaceExt;
use crate::hca::Hca;
use crate::init_segment::{LOG_CMDQ_SIZE, LOG_CMDQ_STRIDE};
use crate::trace::{ModelEvent, TraceEntry};

/// Largest message the model accepts (a sane bound on a chain; real firmware has one too).
pub const MAX_MESSAGE: usize = 1 << 20;
/// Mailbox blocks must be aligned to this (Linux allocates them 1 KiB aligned).
pub const MAILBOX_ALIGN: u64 = 1024;

enum Outcome {
    /// Complete with this delivery status and output.
    Done(DeliveryStatus, Vec<u8>, u16, u16),
    /// Leave the entry owned by hardware and try again later.
    Hold(Option<usize>),
    /// Leave the entry owned by hardware forever.
    Stall,
    /// Nothing to write back (entry unreadable or not owned by hardware).
    Drop,
}

impl Hca {
    /// Doorbell write: each set bit hands a slot to firmware.
    pub(crate) fn ring(&mut self, bits: u32) {
        let due =
            self.now_ns() + u64::try_from(self.cfg.command_latency.as_nanos()).unwrap_or(u64::MAX);
        // Completion EQEs are for commands rung while an EQ takes them: Linux polls for the
        // CREATE_EQ that creates its command EQ and expects no event for it.
        let event = self
            .objects
            .eqs
            .values()
            .any(|e| e.subscribed(event_type::CMD));
        for slot in 0..(1u32 << LOG_CMDQ_SIZE) {
            if bits & (1 << slot) != 0 && !self.cmdq.pending.iter().any(|p| p.slot == slot) {
                self.cmdq.stalled &= !(1 << slot);
                self.cmdq.pending.push(Pending {
                    slot,
                    due_ns: due,
                    wait_pages: None,
                    event,
                });
            }
        }
        self.run_due();
    }

    /// Executes every pending command whose time has come.
    pub fn run_due(&mut self) {
        self.sync_faults();
        // CQEs and EQEs held back by injected faults once due, send queues that waited,
        // flushes, Ethernet frames that arrived while the HCA was busy.
        self.data_path().round();
        let now = self.now_ns();
        let mut i = 0;
        while i < self.cmdq.pending.len() {
            let p = self.cmdq.pending[i];
            let ready = p.due_ns <= now && p.wait_pages.is_none_or(|n| self.pages.len() >= n);
            if !ready {
                i += 1;
                continue;
            }
            match self.execute_slot(p.slot, p.wait_pages.is_some()) {
                Outcome::Hold(wait) => {
                    self.cmdq.pending[i].wait_pages = wait;
                    i += 1;
                }
                Outcome::Stall => {
                    self.cmdq.stalled |= 1 << p.slot;
                    self.cmdq.pending.remove(i);
                }
                Outcome::Drop => {
                    self.cmdq.pending.remove(i);
                }
                Outcome::Done(delivery, out, opcode, op_mod) => {
                    self.cmdq.pending.remove(i);
                    self.complete(p.slot, delivery, &out, opcode, op_mod, p.event);
                }
            }
        }
    }

    fn entry_iova(&self, slot: u32) -> u64 {
        self.init_seg.cmdq_addr + (u64::from(slot) << LOG_CMDQ_STRIDE)
    }

    fn execute_slot(&mut self, slot: u32, resumed: bool) -> Outcome {
        let entry = match self.dma.read_vec(self.entry_iova(slot), CmdLayout::BYTES) {
            Ok(e) => e,
            Err(f) => {
                self.record_fault(f);
                return Outcome::Drop;
            }
        };
        let e = View::<CmdLayout>::new_checked(&entry)
            .unwrap_or_else(|_| unreachable!("entry buffer has the layout's size"));
        if e.get(cmd_layout::status_own) as u8 & CMD_OWNER_HW == 0 {
            return Outcome::Drop;
        }
        let inline = e.bytes(cmd_layout::r#in);
        let opcode = u16::from_be_bytes([inline[0], inline[1]]);
        let op_mod = u16::from_be_bytes([inline[6], inline[7]]);
        let fail = |d: DeliveryStatus| Outcome::Done(d, Vec::new(), opcode, op_mod);
        if e.get(cmd_layout::r#type) as u8 != CMD_XPORT_PCI {
            return fail(DeliveryStatus::BadDescriptor);
        }
        let token = e.get(cmd_layout::token) as u8;
        let inlen = e.get(cmd_layout::inlen) as usize;
        let outlen = e.get(cmd_layout::outlen) as usize;
        if !(8..=MAX_MESSAGE).contains(&inlen) {
            return fail(DeliveryStatus::InputLength);
        }
        if !(8..=MAX_MESSAGE).contains(&outlen) {
            return fail(DeliveryStatus::OutputLength);
        }
        let input = match self.gather(&e, inlen, token) {
            Ok(i) => i,
            Err(d) => return fail(d),
        };
        if let Err(d) = self
            .walk_chain(e.get(cmd_layout::out_ptr), outlen, token, true)
            .map(|_| ())
        {
            return fail(d);
        }

        let mut garble = None;
        if !resumed {
            if let Some(action) = self.injected(opcode, op_mod) {
                match action {
                    FaultAction::Stall => return Outcome::Stall,
                    FaultAction::Delivery(d) => return fail(d),
                    FaultAction::Status(s, syndrome) => {
                        return Outcome::Done(
                            DeliveryStatus::Ok,
                            error_output(outlen, s, syndrome),
                            opcode,
                            op_mod,
                        )
                    }
                    FaultAction::Garble(seed) => garble = Some(seed),
                }
            }
            if let Some((op, n)) = self.cfg.faults.pages_before {
                if op == opcode && !self.cmdq.pages_before_done {
                    self.cmdq.pages_before_done = true;
                    self.request_pages(n);
                    if n > 0 {
                        return Outcome::Hold(Some(self.pages.len() + n as usize));
                    }
                }
            }
        }

        let mut out = vec![0u8; outlen];
        match self.exec(opcode, op_mod, &input, &mut out) {
            Err(f) => out = error_output(outlen, f.status, f.syndrome),
            Ok(()) => {
                if let (Some(seed), Some(rest)) = (garble, out.get_mut(8..)) {
                    log::warn!("model: output of {opcode:#x} garbled (injected)");
                    crate::rng::Rng(seed).fill(rest);
                }
            }
        }
        Outcome::Done(DeliveryStatus::Ok, out, opcode, op_mod)
    }

    fn injected(&mut self, opcode: u16, op_mod: u16) -> Option<FaultAction> {
        for (i, f) in self.cfg.faults.commands.iter().enumerate() {
            if f.opcode != opcode || f.op_mod.is_some_and(|m| m != op_mod) {
                continue;
            }
            if self.cmdq.fault_hits.len() <= i {
                self.cmdq.fault_hits.resize(i + 1, 0);
            }
            self.cmdq.fault_hits[i] += 1;
            let hit = self.cmdq.fault_hits[i];
            if hit > f.skip && f.times.is_none_or(|t| hit <= f.skip + t) {
                return Some(f.action);
            }
        }
        None
    }

    /// Walks a mailbox chain long enough for `len` message bytes, checking alignment, block
    /// numbers and tokens. Returns the block addresses.
    fn walk_chain(
        &mut self,
        mut ptr: u64,
        len: usize,
        token: u8,
        out: bool,
    ) -> Result<Vec<u64>, DeliveryStatus> {
        let blocks = bareverbs_firmware_cmd::ifc::mailbox_blocks(len);
        let mut addrs = Vec::with_capacity(blocks);
        for n in 0..blocks {
            if ptr == 0 {
                return Err(if out {
                    DeliveryStatus::OutputLength
                } else {
                    DeliveryStatus::InputLength
                });
            }
            if ptr % MAILBOX_ALIGN != 0 {
                return Err(if out {
                    DeliveryStatus::OutputPointerAlignment
                } else {
                    DeliveryStatus::InputPointerAlignment
                });
            }
            let block = match self.dma.read_vec(ptr, MAILBOX_BYTES) {
                Ok(b) => b,
                Err(f) => {
                    self.record_fault(f);
                    return Err(DeliveryStatus::FirmwareError);
                }
            };
            let b = View::<CmdProtBlock>::new_checked(&block)
                .unwrap_or_else(|_| unreachable!("block buffer has the layout's size"));
            if b.get(cmd_prot_block::block_num) != n as u64 {
                return Err(DeliveryStatus::BadBlockNumber);
            }
            if b.get(cmd_prot_block::token) as u8 != token {
                return Err(DeliveryStatus::TokenError);
            }
            addrs.push(ptr);
            ptr = b.get(cmd_prot_block::next);
        }
        Ok(addrs)
    }

    fn gather(
        &mut self,
        e: &View<'_, CmdLayout>,
        inlen: usize,
        token: u8,
    ) -> Result<Vec<u8>, DeliveryStatus> {
        let mut input = vec![0u8; inlen];
        let head = inlen.min(INLINE_BYTES);
        input[..head].copy_from_slice(&e.bytes(cmd_layout::r#in)[..head]);
        let blocks = self.walk_chain(e.get(cmd_layout::in_ptr), inlen, token, false)?;
        for (n, addr) in blocks.into_iter().enumerate() {
            let start = INLINE_BYTES + n * MAILBOX_DATA_BYTES;
            let end = (start + MAILBOX_DATA_BYTES).min(inlen);
            if let Err(f) = self.dma.read(addr, &mut input[start..end]) {
                self.record_fault(f);
                return Err(DeliveryStatus::FirmwareError);
            }
        }
        Ok(input)
    }

    fn complete(
        &mut self,
        slot: u32,
        delivery: DeliveryStatus,
        out: &[u8],
        opcode: u16,
        op_mod: u16,
        event: bool,
    ) {
        let entry = self.entry_iova(slot);
        let mut status = CmdStatus::Ok;
        let mut syndrome = 0;
        if delivery == DeliveryStatus::Ok {
            let head = out.len().min(INLINE_BYTES);
            let mut inline = [0u8; INLINE_BYTES];
            inline[..head].copy_from_slice(&out[..head]);
            status = CmdStatus::from(inline[0]);
            syndrome = u32::from_be_bytes([inline[4], inline[5], inline[6], inline[7]]);
            let token = self
                .dma
                .read_vec(entry + 0x3c, 1)
                .map(|t| t[0])
                .unwrap_or(0);
            let out_ptr = self.dma.read_be64(entry + 0x30).unwrap_or(0);
            if let Ok(blocks) = self.walk_chain(out_ptr, out.len(), token, true) {
                for (n, addr) in blocks.into_iter().enumerate() {
                    let start = INLINE_BYTES + n * MAILBOX_DATA_BYTES;
                    let end = (start + MAILBOX_DATA_BYTES).min(out.len());
                    if let Err(f) = self.dma.write(addr, &out[start..end]) {
                        self.record_fault(f);
                    }
                }
            }
            if let Err(f) = self.dma.write(entry + 0x20, &inline) {
                self.record_fault(f);
            }
        }
        // Ownership back to software, with the delivery status, strictly after the output.
        let own = u8::from(delivery) << 1;
        if let Err(f) = self.dma.write(entry + 0x3f, &[own]) {
            self.record_fault(f);
        }
        let t = TraceEntry {
            slot,
            opcode: Opcode(opcode),
            op_mod,
            delivery,
            status,
            syndrome,
        };
        log::debug!("model: {t}");
        self.logs.trace.push(t);
        self.logs.events.push(ModelEvent::Command(t));
        if event {
            let mut data = [0u8; 28];
            data[..4].copy_from_slice(&(1u32 << slot).to_be_bytes());
            self.post_event(event_type::CMD, 0, data);
        }
    }
}

fn error_output(outlen: usize, status: CmdStatus, syndrome: u32) -> Vec<u8> {
    let mut out = vec![0u8; outlen.max(8)];
    out[0] = status.into();
    out[4..8].copy_from_slice(&syndrome.to_be_bytes());
    out.truncate(outlen);
    out
}
