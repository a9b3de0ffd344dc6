//! A request between QPs and the responder's answer: what a send WQE becomes once the requester
//! built it (`requester.rs`), what the responder executes (`responder.rs`) and what a capture
//! writes out as packets (`ib_wire.rs`); and the PSNs a request spends.

use crate::qp::{ServiceType, PSN_MASK};

/// What a request asks of the responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    Write,
    Read,
    Atomic { fetch_add: bool },
}

/// A request on the wire, reduced to what the responder needs.
#[derive(Clone)]
pub(crate) struct Request {
    pub(crate) kind: Kind,
    pub(crate) st: ServiceType,
    /// PSN of the request's first packet (RC and UC).
    pub(crate) psn: u32,
    pub(crate) src_qpn: u32,
    pub(crate) slid: u16,
    /// The destination LID the request was sent to (its low LMC bits are the path bits).
    pub(crate) dlid: u16,
    pub(crate) sl: u8,
    pub(crate) dst_qpn: u32,
    pub(crate) payload: Vec<u8>,
    pub(crate) imm: Option<u32>,
    pub(crate) solicited: bool,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u64,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) qkey: u32,
    /// The 40-byte GRH the packet carries (UD with a global route), as the receiver's HCA
    /// writes it into the start of the receive buffer.
    pub(crate) grh: Option<[u8; 40]>,
    /// Packets the message takes on the wire (and a READ's response), for the port counters.
    pub(crate) pkts: u32,
    /// XRC: the XRC SRQ at the target the request is for (the XRCETH's XRCSRQ).
    pub(crate) xrc_srqn: Option<u32>,
    /// DC: the access key the DCT must hold.
    pub(crate) dc_key: u64,
}

/// The responder's answer.
pub(crate) enum Response {
    /// Done; data for READ and atomics.
    Ack(Vec<u8>),
    /// Refused with a requester syndrome.
    Nak(u8),
    /// No receive posted (RC), with the responder's RNR timer encoding.
    Rnr(u8),
    /// Silently dropped (UC, UD) or unanswered.
    Dropped,
    /// No such QP behind that LID, or not one that answers: no response at all (RC: the
    /// requester retransmits until `retry_count` runs out).
    NoQp,
    /// NAK "PSN sequence error": the request's PSN is ahead of the one expected (RC: the
    /// requester retransmits, each retry counting against `retry_count`).
    NakSeq,
}

impl Request {
    /// Bytes the message carries (SEND, WRITE) or asks for (READ); 8 for atomics.
    pub(crate) fn msg_len(&self) -> u64 {
        match self.kind {
            Kind::Send | Kind::Write => self.payload.len() as u64,
            Kind::Read => self.len,
            Kind::Atomic { .. } => 8,
        }
    }
}

/// Largest RDMA length the IB spec allows (ibv_poll_cq(3): a longer RDMA request is a remote
/// invalid request).
pub(crate) const MAX_RDMA_LEN: u64 = 1 << 31;

/// Packets a request of `kind` and `len` bytes spends in the PSN space at path MTU `mtu` (IB
/// enum): SEND, WRITE and READ (its response packets) one per MTU, at least one; atomics one.
pub(crate) fn packets(kind: Kind, len: u64, mtu: u8) -> u32 {
    // The MTU is a power of two (128 << mtu bytes): shifts, not a division.
    let log = 7 + u32::from(mtu.clamp(1, 5));
    let n = (len >> log) + u64::from(len & ((1 << log) - 1) != 0);
    match kind {
        Kind::Atomic { .. } => 1,
        _ => u32::try_from(n.max(1)).unwrap_or(u32::MAX),
    }
}

/// `psn + n` in the 24-bit PSN space.
pub(crate) fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_spend_one_psn_per_mtu_and_psns_wrap() {
        let send = Kind::Send;
        // MTU 3 = 1024 bytes.
        assert_eq!(packets(send, 0, 3), 1);
        assert_eq!(packets(send, 1024, 3), 1);
        assert_eq!(packets(send, 1025, 3), 2);
        assert_eq!(packets(Kind::Read, 8192, 5), 2);
        assert_eq!(packets(Kind::Write, 300, 1), 2);
        assert_eq!(packets(Kind::Atomic { fetch_add: true }, 8, 1), 1);
        // MTU codes outside 1–5 are clamped (256 and 4096 bytes); counts saturate.
        assert_eq!(packets(send, 257, 0), 2);
        assert_eq!(packets(send, 4097, 9), 2);
        assert_eq!(packets(send, u64::MAX, 5), u32::MAX);
        assert_eq!(packets(send, (u64::from(u32::MAX) << 12) + 1, 5), u32::MAX);
        assert_eq!(
            packets(send, u64::from(u32::MAX - 1) << 12, 5),
            u32::MAX - 1
        );
        assert_eq!(psn_add(0xff_ffff, 1), 0);
        assert_eq!(psn_add(0xff_fffe, 5), 3);
    }
}
