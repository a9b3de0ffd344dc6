//! The hand-written command poster the model tests share (no bareverbs driver): slot 0,
//! 1 KiB-aligned mailboxes, and the few commands every test starts with.

// Each test crate uses its own subset.
#![allow(dead_code)]

use std::time::Duration;

use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::layout::{Layout, View, ViewMut};
use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus};
use bareverbs_hal::{BarOffset, Hal, Mmio, SharedDma};
use bareverbs_model::{Drive, ModelConfig, SimDma, SimHal};

/// A minimal hand-written command poster using slot 0 and 1 KiB-aligned mailboxes.
pub struct Raw {
    pub hal: SimHal,
    pub cmdq: SharedDma<SimDma>,
    pub boxes: SharedDma<SimDma>,
    pub token: u8,
}

pub const IN_BOXES: usize = 0;
pub const OUT_BOXES: usize = 16 * 1024;

impl Raw {
    pub fn new(drive: Drive) -> Self {
        Self::with(ModelConfig::default(), drive)
    }

    pub fn with(cfg: ModelConfig, drive: Drive) -> Self {
        let hal = SimHal::new(cfg, drive);
        let cmdq = hal.dma_alloc(4096, 4096).unwrap().share();
        let boxes = hal.dma_alloc(32 * 1024, 4096).unwrap().share();
        let bar = hal.bar0();
        let mut n = 0;
        while bar.read32(BarOffset(0x1fc)) >> 31 != 0 {
            hal.delay(Duration::from_millis(1));
            n += 1;
            assert!(n < 1000, "model never became ready");
        }
        bar.write32(BarOffset(0x10), (cmdq.iova().0 >> 32) as u32);
        bar.write32(BarOffset(0x14), cmdq.iova().0 as u32);
        Raw {
            hal,
            cmdq,
            boxes,
            token: 0x5a,
        }
    }

    pub fn chain(&self, base: usize, len: usize) {
        let blocks = mailbox_blocks(len);
        for k in 0..blocks {
            let off = base + k * 1024;
            let next = if k + 1 < blocks {
                self.boxes.iova().0 + (off + 1024) as u64
            } else {
                0
            };
            self.boxes.write64(off + 0x230, next);
            self.boxes.write32(off + 0x238, k as u32);
            self.boxes.write8(off + 0x23d, self.token);
        }
    }

    /// Posts `input` expecting `outlen` output bytes; returns (delivery status, output).
    pub fn post(
        &self,
        input: &[u8],
        outlen: usize,
        tweak: impl FnOnce(&Raw),
    ) -> (DeliveryStatus, Vec<u8>) {
        self.cmdq.fill(0, 64, 0).unwrap();
        self.boxes.fill(0, 32 * 1024, 0).unwrap();
        self.cmdq.write8(0, CMD_XPORT_PCI);
        self.cmdq.write32(4, input.len() as u32);
        self.cmdq.write32(0x38, outlen as u32);
        self.cmdq.write8(0x3c, self.token);
        self.cmdq
            .write_bytes(0x10, &input[..input.len().min(16)])
            .unwrap();
        if input.len() > 16 {
            self.chain(IN_BOXES, input.len());
            self.cmdq.write64(8, self.boxes.iova().0 + IN_BOXES as u64);
            for (k, chunk) in input[16..].chunks(512).enumerate() {
                self.boxes.write_bytes(IN_BOXES + k * 1024, chunk).unwrap();
            }
        }
        if outlen > 16 {
            self.chain(OUT_BOXES, outlen);
            self.cmdq
                .write64(0x30, self.boxes.iova().0 + OUT_BOXES as u64);
        }
        tweak(self);
        self.cmdq.write8(0x3f, CMD_OWNER_HW);
        self.hal.bar0().write32(BarOffset(0x18), 1);
        let mut spins = 0u64;
        while self.cmdq.read8(0x3f) & 1 != 0 {
            self.hal.relax();
            spins += 1;
            if spins > 5_000_000 {
                return (DeliveryStatus::Unknown(0xff), Vec::new());
            }
        }
        let delivery = DeliveryStatus::from(self.cmdq.read8(0x3f) >> 1);
        let mut out = vec![0u8; outlen];
        let head = outlen.min(16);
        self.cmdq.read_bytes(0x20, &mut out[..head]).unwrap();
        for (k, chunk) in out[head..].chunks_mut(512).enumerate() {
            self.boxes.read_bytes(OUT_BOXES + k * 1024, chunk).unwrap();
        }
        (delivery, out)
    }

    pub fn cmd(&self, input: &[u8], outlen: usize) -> Vec<u8> {
        let (d, out) = self.post(input, outlen, |_| {});
        assert_eq!(d, DeliveryStatus::Ok);
        out
    }

    pub fn status(out: &[u8]) -> (CmdStatus, u32) {
        (
            CmdStatus::from(out[0]),
            u32::from_be_bytes([out[4], out[5], out[6], out[7]]),
        )
    }
}

pub fn header(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(16)];
    ViewMut::<MboxIn>::new_checked(&mut b)
        .unwrap()
        .set(mbox_in::opcode, opcode)
        .set(mbox_in::op_mod, op_mod);
    b.truncate(len);
    b
}

pub fn give_pages(raw: &Raw, n: usize) -> Vec<SharedDma<SimDma>> {
    let pages: Vec<_> = (0..n)
        .map(|_| raw.hal.dma_alloc(4096, 4096).unwrap().share())
        .collect();
    let mut b = header(0x108, manage_pages_op_mod::GIVE, 16 + 8 * n);
    let mut v = ViewMut::<ManagePagesIn>::new_checked(&mut b).unwrap();
    v.set(manage_pages_in::input_num_entries, n as u32);
    for (k, p) in pages.iter().enumerate() {
        v.set_array(manage_pages_in::pas, k, p.iova().0).unwrap();
    }
    let out = raw.cmd(&b, 16);
    assert_eq!(Raw::status(&out).0, CmdStatus::Ok);
    pages
}

pub fn bring_up(raw: &Raw) -> Vec<SharedDma<SimDma>> {
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x104, 0, 16), 12)).0,
        CmdStatus::Ok
    );
    let mut pages = give_pages(raw, 16);
    pages.extend(give_pages(raw, 128));
    assert_eq!(
        Raw::status(&raw.cmd(&header(0x102, 0, 32), 16)).0,
        CmdStatus::Ok
    );
    pages
}

pub fn alloc_uar(raw: &Raw) -> u32 {
    let out = raw.cmd(&header(0x802, 0, 16), 16);
    assert_eq!(Raw::status(&out).0, CmdStatus::Ok);
    View::<AllocUarOut>::new_checked(&out)
        .unwrap()
        .get32(alloc_uar_out::uar)
}

pub fn create_eq(raw: &Raw, buf: &SharedDma<SimDma>, log_size: u8, uar: u32, mask: u64) -> u8 {
    let mut b = header(0x301, 0, CreateEqIn::BYTES + 8);
    let mut v = ViewMut::<CreateEqIn>::new_checked(&mut b).unwrap();
    v.sub(create_eq_in::eq_context_entry)
        .set(eqc::log_eq_size, log_size)
        .set(eqc::uar_page, uar)
        .set(eqc::intr, 3u8);
    set_event_bitmask(&mut v, 0, mask);
    v.set_array(create_eq_in::pas, 0, buf.iova().0).unwrap();
    let out = raw.cmd(&b, 16);
    assert_eq!(Raw::status(&out), (CmdStatus::Ok, 0));
    View::<CreateEqOut>::new_checked(&out)
        .unwrap()
        .get(create_eq_out::eq_number) as u8
}
