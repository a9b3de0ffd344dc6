//! The command queue: one 4 KiB page of 64-byte entries, mailbox chains in both directions,
//! the token, the doorbell, and completion by ownership bit (mlx5-reference 02 §1–7; Linux
//! `cmd.c` `mlx5_cmd_enable`, `cmd_work_handler`, `poll_timeout`).
//!
//! Two slots are used: slot 0 for ordinary commands and the last slot for MANAGE_PAGES issued
//! while an ordinary command waits on firmware (Linux's "page queue"). Each slot has its own
//! pre-linked input and output chains of 1 KiB-aligned blocks.

use bareverbs_firmware_cmd::ifc::{
    cmd_layout, CmdLayout, CMD_OWNER_HW, CMD_XPORT_PCI, INLINE_BYTES, MAILBOX_DATA_BYTES,
    MAX_COMMANDS,
};
use bareverbs_firmware_cmd::init_seg::{cmd_dbell, cmdq_addr_h, cmdq_addr_l_sz};
use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus, Opcode};
use bareverbs_hal::{dma_rmb, wmb, Hal, Mmio, SharedDma};

use crate::error::{CmdError, CmdFailure, Error};

/// Mailbox blocks per direction per slot: 8 KiB of payload, enough for QUERY_HCA_CAP
/// (8 blocks) and MANAGE_PAGES with 512 addresses (9 blocks).
pub const MAX_BLOCKS: usize = 16;
/// Longest message the driver can send or receive.
pub const MAX_MESSAGE: usize = INLINE_BYTES + MAX_BLOCKS * MAILBOX_DATA_BYTES;
/// Distance between blocks (Linux's 1 KiB DMA pool alignment).
const BLOCK_STRIDE: usize = 1024;
const CHAIN_BYTES: usize = MAX_BLOCKS * BLOCK_STRIDE;
/// Offsets inside a block (struct mlx5_cmd_prot_block).
const BLOCK_NEXT: usize = 0x230;
const BLOCK_NUM: usize = 0x238;
const BLOCK_TOKEN: usize = 0x23d;
/// Offsets inside an entry (struct mlx5_cmd_layout).
const ENTRY_OUT: usize = 0x20;
const ENTRY_STATUS_OWN: usize = 0x3f;

/// Which slot a command uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Ordinary commands.
    Regular,
    /// MANAGE_PAGES while a regular command is outstanding.
    Pages,
}

/// The entry page, the slot's chains and the entry's offset.
type Parts<'a, H> = (&'a SharedDma<<H as Hal>::Dma>, &'a Chains<H>, usize);

struct Chains<H: Hal> {
    input: SharedDma<H::Dma>,
    output: SharedDma<H::Dma>,
}

/// The command queue and its mailboxes.
pub(crate) struct CmdQueue<H: Hal> {
    page: Option<SharedDma<H::Dma>>,
    chains: [Option<Chains<H>>; 2],
    log_stride: u8,
    page_slot: u32,
    token: u8,
    /// A command timed out: the device may still write our memory, nothing is freed again.
    pub(crate) wedged: bool,
}

fn link<H: Hal>(chain: &SharedDma<H::Dma>) -> Result<(), Error> {
    for k in 0..MAX_BLOCKS {
        let off = k * BLOCK_STRIDE;
        let next = if k + 1 < MAX_BLOCKS {
            chain.iova().0 + (off + BLOCK_STRIDE) as u64
        } else {
            0
        };
        chain.try_write64(off + BLOCK_NEXT, next)?;
        chain.try_write32(off + BLOCK_NUM, k as u32)?;
    }
    Ok(())
}

impl<H: Hal> CmdQueue<H> {
    /// Allocates the queue page and mailboxes and writes the queue address to the device
    /// (`mlx5_cmd_enable`). The device's geometry must already have been checked.
    pub(crate) fn new(hal: &H, log_size: u8, log_stride: u8) -> Result<Self, Error> {
        let page = hal.dma_alloc(4096, 4096)?.share();
        let mut chains = [None, None];
        for c in chains.iter_mut() {
            let input = hal.dma_alloc(CHAIN_BYTES, 4096)?.share();
            let output = hal.dma_alloc(CHAIN_BYTES, 4096)?.share();
            link::<H>(&input)?;
            link::<H>(&output)?;
            *c = Some(Chains { input, output });
        }
        let addr = page.iova().0;
        let bar = hal.bar0();
        // ORDERING: high word first, then the low word (which also carries nic_interface = 0),
        // as Linux does; the low-word write is what firmware acts on.
        bar.write32(cmdq_addr_h::OFFSET, (addr >> 32) as u32);
        bar.write32(
            cmdq_addr_l_sz::OFFSET,
            cmdq_addr_l_sz::cmdq_phy_addr_31_12.set(0, (addr >> 12) as u32),
        );
        wmb();
        Ok(CmdQueue {
            page: Some(page),
            chains,
            log_stride,
            page_slot: (1u32 << log_size) - 1,
            token: 0,
            wedged: false,
        })
    }

    fn slot_index(&self, slot: Slot) -> u32 {
        match slot {
            Slot::Regular => 0,
            Slot::Pages => self.page_slot,
        }
    }

    fn parts(&self, slot: Slot) -> Result<Parts<'_, H>, Error> {
        let page = self.page.as_ref().ok_or(Error::NotUp)?;
        let chains = self.chains[usize::from(slot == Slot::Pages)]
            .as_ref()
            .ok_or(Error::NotUp)?;
        let entry = (self.slot_index(slot) as usize) << self.log_stride;
        Ok((page, chains, entry))
    }

    fn next_token(&mut self) -> u8 {
        // Linux alloc_token: never 0.
        self.token = self.token.wrapping_add(1);
        if self.token == 0 {
            self.token = 1;
        }
        self.token
    }

    /// Writes `input` into the slot's entry and chain and rings the doorbell (`cmd_work_handler`).
    pub(crate) fn post(
        &mut self,
        hal: &H,
        slot: Slot,
        input: &[u8],
        outlen: usize,
    ) -> Result<(), Error> {
        if self.wedged {
            return Err(Error::CommandInterfaceWedged);
        }
        let opcode = Opcode(u16::from_be_bytes([input[0], input[1]]));
        let longest = input.len().max(outlen);
        if longest > MAX_MESSAGE {
            return Err(Error::MessageTooLong {
                opcode,
                len: longest,
            });
        }
        let token = self.next_token();
        let (page, chains, entry) = self.parts(slot)?;

        let in_blocks = bareverbs_firmware_cmd::ifc::mailbox_blocks(input.len());
        for (k, chunk) in input
            .get(INLINE_BYTES..)
            .unwrap_or(&[])
            .chunks(MAILBOX_DATA_BYTES)
            .enumerate()
        {
            let off = k * BLOCK_STRIDE;
            chains.input.write_bytes(off, chunk)?;
            chains
                .input
                .fill(off + chunk.len(), MAILBOX_DATA_BYTES - chunk.len(), 0)?;
            chains.input.try_write8(off + BLOCK_TOKEN, token)?;
        }
        let out_blocks = bareverbs_firmware_cmd::ifc::mailbox_blocks(outlen);
        for k in 0..out_blocks {
            let off = k * BLOCK_STRIDE;
            chains.output.fill(off, MAILBOX_DATA_BYTES, 0)?;
            chains.output.try_write8(off + BLOCK_TOKEN, token)?;
        }

        let mut e = [0u8; 64];
        {
            let mut v = bareverbs_firmware_cmd::ViewMut::<CmdLayout>::zeroed(&mut e)?;
            v.set(cmd_layout::r#type, CMD_XPORT_PCI)
                .set(cmd_layout::inlen, input.len() as u32)
                .set(cmd_layout::outlen, outlen as u32)
                .set(cmd_layout::token, token);
            if in_blocks > 0 {
                v.set(cmd_layout::in_ptr, chains.input.iova().0);
            }
            if out_blocks > 0 {
                v.set(cmd_layout::out_ptr, chains.output.iova().0);
            }
            let head = input.len().min(INLINE_BYTES);
            v.bytes_mut(cmd_layout::r#in)[..head].copy_from_slice(&input[..head]);
        }
        page.write_bytes(entry, &e[..ENTRY_STATUS_OWN])?;
        page.try_write8(entry + ENTRY_STATUS_OWN, CMD_OWNER_HW)?;
        // ORDERING: the entry and every mailbox block must be visible before the doorbell
        // (Linux: wmb() before iowrite32be(1 << idx, &dev->iseg->cmd_dbell)).
        wmb();
        hal.bar0()
            .write32(cmd_dbell::OFFSET, 1 << self.slot_index(slot));
        Ok(())
    }

    /// True once firmware has handed the slot back.
    pub(crate) fn done(&self, slot: Slot) -> bool {
        match self.parts(slot) {
            Ok((page, _, entry)) => page.read8(entry + ENTRY_STATUS_OWN) & CMD_OWNER_HW == 0,
            Err(_) => true,
        }
    }

    /// Collects the output of a completed command into `out` and checks both statuses.
    pub(crate) fn finish(
        &self,
        slot: Slot,
        opcode: Opcode,
        op_mod: u16,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let (page, chains, entry) = self.parts(slot)?;
        // ORDERING: the ownership bit was read as software-owned; read the rest of the entry
        // and the mailboxes only after it (Linux: rmb in poll_timeout / dma_rmb).
        dma_rmb();
        let delivery = DeliveryStatus::from(page.read8(entry + ENTRY_STATUS_OWN) >> 1);
        let fail = |failure| {
            Error::Command(CmdError {
                opcode,
                op_mod,
                failure,
            })
        };
        if delivery != DeliveryStatus::Ok {
            return Err(fail(CmdFailure::Delivery(delivery)));
        }
        let head = out.len().min(INLINE_BYTES);
        page.read_bytes(entry + ENTRY_OUT, &mut out[..head])?;
        if let Some(rest) = out.get_mut(INLINE_BYTES..) {
            for (k, chunk) in rest.chunks_mut(MAILBOX_DATA_BYTES).enumerate() {
                chains.output.read_bytes(k * BLOCK_STRIDE, chunk)?;
            }
        }
        let mut hdr = [0u8; 8];
        page.read_bytes(entry + ENTRY_OUT, &mut hdr)?;
        let status = CmdStatus::from(hdr[0]);
        if status != CmdStatus::Ok {
            let syndrome = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
            return Err(fail(CmdFailure::Status { status, syndrome }));
        }
        Ok(())
    }

    /// Gives up the DMA memory without freeing it (after a timeout, the device may still write
    /// it).
    pub(crate) fn leak(&mut self) {
        if let Some(p) = self.page.take() {
            p.leak();
        }
        for c in self.chains.iter_mut() {
            if let Some(c) = c.take() {
                c.input.leak();
                c.output.leak();
            }
        }
    }
}

/// Checks the geometry the device reports (`mlx5_cmd_enable`): at most 32 slots, the queue in
/// one 4 KiB page, entries of at least 64 bytes, and two slots for the driver.
pub(crate) fn check_geometry(log_size: u8, log_stride: u8) -> Result<(), Error> {
    let ok = (1u32 << log_size) <= MAX_COMMANDS
        && log_size >= 1
        && log_stride >= 6
        && u32::from(log_size) + u32::from(log_stride) <= 12;
    if ok {
        Ok(())
    } else {
        Err(Error::BadCmdQueueGeometry {
            log_size,
            log_stride,
        })
    }
}
