//! Scatter to CQE, the driver's half: mlx5 puts a received SEND of up to 32 bytes, or an RDMA
//! READ or atomic result of up to 32 bytes, inside its 64-byte CQE (`cqe_format` 1 in
//! `op_own`, rdma-core's `MLX5_INLINE_SCATTER_32`) and leaves the copy into the work
//! request's buffers to software (rdma-core 56 cq.c `mlx5_copy_to_recv_wqe`,
//! `mlx5_copy_to_recv_srq`, `mlx5_copy_to_send_wqe`).
//!
//! The scatter list is read back from the WQE the CQE names, before the poll hands the WQE
//! back to the poster; the bytes go to the list's device addresses through
//! [`Hal::dma_write`], which is why [`Pd::create_qp_dv`](crate::verbs::Pd::create_qp_dv)
//! asks for scatter to CQE only on a HAL with [`Hal::dma_by_iova`], and why it needs SGE
//! addresses that are device addresses of HAL memory (every [`Mr`](crate::verbs::Mr) from
//! `reg_mr` maps its buffer at its own IOVA). A list too short for the data completes with
//! [`WcStatus::LocLenErr`], as rdma-core's copy does; an address the HAL does not map with
//! [`WcStatus::LocProtErr`].

use bareverbs_firmware_cmd::ifc::{
    cqe64, cqe_srqn, cqe_wqe_opcode, get_cqe_opcode, wqe_opcode, CqeOpcode, INVALID_LKEY,
};
use bareverbs_hal::{Hal, Iova, Slot};

use crate::device::Device;
use crate::slot_table::Keyed;
use crate::verbs::wc::{Wc, WcStatus};
use crate::wq::book::WqRing;

/// The `op_own` bits of the CQE format (bits 3:2); non-zero means data in the CQE.
pub(crate) const FORMAT_MASK: u8 = 0x0c;

/// Most scatter entries read back from one WQE.
const MAX_SGES: usize = 32;

/// The data CQE `cqe` carries, copied to the buffers of the WQE it completes. Run before the
/// poll completes the WQE (after that the poster may reuse it). `Err` with the status the
/// completion must report instead of success.
pub(crate) fn scatter<H: Hal>(
    dev: &Device<H>,
    ring: Option<WqRing>,
    cqe: Slot<'_, 64>,
    op_own: u8,
) -> Result<(), WcStatus> {
    let sop = cqe.read32(cqe64::sop_drop_qpn.bit / 8);
    let counter = cqe.read16(cqe64::wqe_counter.bit / 8);
    let len = cqe.read32(cqe64::byte_cnt.bit / 8) as usize;
    let mut data = [0u8; 32];
    if len > data.len() {
        return Err(WcStatus::LocLenErr);
    }
    for (k, w) in data.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&cqe.read64(8 * k).to_be_bytes());
    }
    let data = &data[..len];
    let mut sges = heapless::Vec::<(u64, u32), MAX_SGES>::new();
    match CqeOpcode::from(get_cqe_opcode(op_own)) {
        CqeOpcode::Req => {
            let ring = ring.ok_or(WcStatus::LocQpOpErr)?;
            send_sges(dev, &ring, counter, cqe_wqe_opcode(sop), &mut sges)?;
        }
        CqeOpcode::RespSend | CqeOpcode::RespSendImm | CqeOpcode::RespSendInv => {
            let srqn = cqe_srqn(cqe.read32(cqe64::srqn.bit / 8));
            if srqn != 0 {
                let slot = dev.srq_books.find(srqn).map(|s| s.read());
                let srq = slot
                    .as_ref()
                    .and_then(|g| g.as_ref())
                    .filter(|b| b.key() == srqn)
                    .ok_or(WcStatus::LocQpOpErr)?;
                srq.wqe_sges(counter, &mut sges);
            } else {
                let ring = ring.ok_or(WcStatus::LocQpOpErr)?;
                let at =
                    ring.iova + (u64::from(counter & ((1u16 << ring.log_rq) - 1)) << ring.rq_shift);
                read_sges(dev, at, 1usize << ring.rq_shift, &mut sges)?;
            }
        }
        _ => return Err(WcStatus::LocQpOpErr),
    }
    let mut rest = data;
    for &(addr, n) in &sges {
        if rest.is_empty() {
            break;
        }
        let take = rest.len().min(n as usize);
        dev.hal
            .dma_write(Iova(addr), &rest[..take])
            .map_err(|_| WcStatus::LocProtErr)?;
        rest = &rest[take..];
    }
    if rest.is_empty() {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// The scatter list of the send WQE at WQEBB `counter`: after the control segment (and a
/// DCI's address vector) and the remote-address (and atomic) segment.
fn send_sges<H: Hal>(
    dev: &Device<H>,
    ring: &WqRing,
    counter: u16,
    opcode: u8,
    sges: &mut heapless::Vec<(u64, u32), MAX_SGES>,
) -> Result<(), WcStatus> {
    let mask = (1u16 << ring.log_sq) - 1;
    let bb = |i: u16| ring.iova + ring.sq_base + (u64::from(i & mask) << 6);
    let mut first = [0u8; 64];
    dev.hal
        .dma_read(Iova(bb(counter)), &mut first)
        .map_err(|_| WcStatus::LocProtErr)?;
    let ds = usize::from(first[7] & 0x3f);
    let skip = 16
        + if ring.dci { 48 } else { 0 }
        + match opcode {
            wqe_opcode::RDMA_READ => 16,
            wqe_opcode::ATOMIC_CS | wqe_opcode::ATOMIC_FA => 32,
            _ => return Err(WcStatus::LocQpOpErr),
        };
    // The WQE's 16-byte units, block by block (it may wrap at the ring's end).
    let mut unit = skip / 16;
    while unit < ds && !sges.is_full() {
        let mut seg = [0u8; 16];
        let block = counter.wrapping_add((unit / 4) as u16);
        dev.hal
            .dma_read(Iova(bb(block) + (unit % 4) as u64 * 16), &mut seg)
            .map_err(|_| WcStatus::LocProtErr)?;
        if !push_sge(&seg, sges) {
            break;
        }
        unit += 1;
    }
    Ok(())
}

/// The scatter list of the receive WQE of `bytes` bytes at device address `at`.
fn read_sges<H: Hal>(
    dev: &Device<H>,
    at: u64,
    bytes: usize,
    sges: &mut heapless::Vec<(u64, u32), MAX_SGES>,
) -> Result<(), WcStatus> {
    for k in 0..bytes / 16 {
        let mut seg = [0u8; 16];
        dev.hal
            .dma_read(Iova(at + 16 * k as u64), &mut seg)
            .map_err(|_| WcStatus::LocProtErr)?;
        if !push_sge(&seg, sges) {
            break;
        }
    }
    Ok(())
}

/// Adds the data segment `seg` (byte count, lkey, address, big-endian) to `sges`; false at
/// the list's end (the invalid lkey) or when `sges` is full.
pub(crate) fn push_sge(seg: &[u8; 16], sges: &mut heapless::Vec<(u64, u32), MAX_SGES>) -> bool {
    let be32 = |o: usize| u32::from_be_bytes([seg[o], seg[o + 1], seg[o + 2], seg[o + 3]]);
    let (len, lkey) = (be32(0), be32(4));
    if lkey == INVALID_LKEY {
        return false;
    }
    let addr = (u64::from(be32(8)) << 32) | u64::from(be32(12));
    sges.push((addr, len)).is_ok()
}

/// Zeroes what the data overwrote in a completion `wc` decoded from a CQE carrying data: the
/// source QP, SL, SLID and path bits sit in the CQE's first 32 bytes (rdma-core reads them
/// anyway; for RC and UC they carry nothing a user needs).
pub(crate) fn clear_overwritten(wc: &mut Wc) {
    wc.src_qp = 0;
    wc.sl = 0;
    wc.slid = 0;
    wc.dlid_path_bits = 0;
}
