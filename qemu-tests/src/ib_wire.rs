//! The packets a message would be on an InfiniBand wire, for captures (`pcap.rs`). The model
//! works in messages (`Request` → `Response`); this writes them out as IBA packets: LRH, the
//! GRH when the request carries one, BTH, the extended transport headers, the payload split
//! at the path MTU, pad, ICRC and VCRC (IBA 1.4 vol. 1, ch. 9 for the headers, §7.8 for the
//! CRCs).
//!
//! What the model does not keep is filled in plainly: virtual lane 0, P_Key 0xffff, MSN 0 in
//! the AETH, the path MTU recovered from the packet count. DC requests (a Mellanox transport
//! the IBA does not define) are written with RC opcodes and no DC header.

use crate::cqe_write::synd;
use crate::qp::ServiceType;
use crate::request::{Kind, Request, Response};

/// IBA 9.2 opcode low bits, within a transport's block.
mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESP_FIRST: u8 = 0x0d;
    pub const READ_RESP_MIDDLE: u8 = 0x0e;
    pub const READ_RESP_LAST: u8 = 0x0f;
    pub const READ_RESP_ONLY: u8 = 0x10;
    pub const ACK: u8 = 0x11;
    pub const ATOMIC_ACK: u8 = 0x12;
    pub const CMP_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
}

/// The transport's opcode block (IBA table 38): RC 000, UC 001, UD 011, XRC 101.
fn block(st: ServiceType) -> u8 {
    match st {
        ServiceType::Uc => 0x20,
        ServiceType::Ud | ServiceType::Qp0 | ServiceType::Qp1 => 0x60,
        ServiceType::Xrc => 0xa0,
        ServiceType::Rc | ServiceType::RegUmr | ServiceType::Dci | ServiceType::Dct => 0x00,
    }
}

/// The path MTU in bytes: the smallest IB MTU that carries `len` bytes in `pkts` packets.
fn mtu_of(len: usize, pkts: u32) -> usize {
    let pkts = pkts.max(1) as usize;
    [256, 512, 1024, 2048, 4096]
        .into_iter()
        .find(|m| len.div_ceil(*m).max(1) <= pkts)
        .unwrap_or(4096)
}

/// One packet's headers and payload, before the CRCs.
struct Pkt<'a> {
    sl: u8,
    dlid: u16,
    slid: u16,
    grh: Option<&'a [u8; 40]>,
    opcode: u8,
    solicited: bool,
    dqpn: u32,
    ack_req: bool,
    psn: u32,
    ext: Vec<u8>,
    payload: &'a [u8],
}

impl Pkt<'_> {
    fn bytes(&self) -> Vec<u8> {
        let pad = (4 - self.payload.len() % 4) % 4;
        let grh_len = if self.grh.is_some() { 40 } else { 0 };
        let len = 8 + grh_len + 12 + self.ext.len() + self.payload.len() + pad + 4;
        let mut p = Vec::with_capacity(len + 2);
        // LRH: VL 0, LVer 0; SL, LNH (2: IBA local, BTH next; 3: IBA global, GRH next);
        // DLID; PktLen in words from the LRH through the ICRC; SLID.
        p.push(0);
        p.push((self.sl << 4) | if self.grh.is_some() { 3 } else { 2 });
        p.extend_from_slice(&self.dlid.to_be_bytes());
        p.extend_from_slice(&(((len / 4) as u16) & 0x7ff).to_be_bytes());
        p.extend_from_slice(&self.slid.to_be_bytes());
        if let Some(g) = self.grh {
            p.extend_from_slice(g);
        }
        // BTH: opcode; SE, MigReq 0, PadCnt, TVer 0; P_Key; resv8a; DestQP; AckReq; PSN.
        p.push(self.opcode);
        p.push((u8::from(self.solicited) << 7) | ((pad as u8) << 4));
        p.extend_from_slice(&0xffffu16.to_be_bytes());
        p.push(0);
        p.extend_from_slice(&(self.dqpn & 0xff_ffff).to_be_bytes()[1..]);
        p.extend_from_slice(
            &((u32::from(self.ack_req) << 31) | (self.psn & 0xff_ffff)).to_be_bytes(),
        );
        p.extend_from_slice(&self.ext);
        p.extend_from_slice(self.payload);
        p.extend(core::iter::repeat_n(0, pad));
        let icrc = icrc(&p, grh_len);
        p.extend_from_slice(&icrc.to_le_bytes());
        let vcrc = vcrc(&p);
        p.extend_from_slice(&vcrc.to_le_bytes());
        p
    }
}

/// IBA 7.8.1: CRC-32 (the Ethernet polynomial) over the packet from the LRH through the pad,
/// the variant fields taken as ones: the LRH's VL, the GRH's traffic class, flow label and hop
/// limit, the BTH's resv8a.
fn icrc(p: &[u8], grh_len: usize) -> u32 {
    let mut m = p.to_vec();
    m[0] |= 0xf0;
    if grh_len == 40 {
        m[8] |= 0x0f;
        m[9] = 0xff;
        m[10] = 0xff;
        m[11] = 0xff;
        m[15] = 0xff;
    }
    m[8 + grh_len + 4] = 0xff;
    crc32(&m)
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// IBA 7.8.2: CRC-16 (x^16 + x^12 + x^3 + x + 1) over the LRH through the ICRC.
fn vcrc(p: &[u8]) -> u16 {
    let mut crc = u16::MAX;
    for &b in p {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xd008
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn reth(va: u64, rkey: u32, len: u64) -> Vec<u8> {
    let mut e = Vec::with_capacity(16);
    e.extend_from_slice(&va.to_be_bytes());
    e.extend_from_slice(&rkey.to_be_bytes());
    e.extend_from_slice(&(len as u32).to_be_bytes());
    e
}

/// AETH: syndrome (ACK 000 with credits 11111: none advertised; RNR NAK 001 with its timer;
/// NAK 011 with its code), MSN 0.
fn aeth(syndrome: u8) -> Vec<u8> {
    vec![syndrome, 0, 0, 0]
}

/// The NAK code of a responder refusal reported to the requester as `synd` (IBA 9.7.5.2.4:
/// 1 invalid request, 2 remote access error, 3 remote operational error).
fn nak_code(s: u8) -> u8 {
    0x60 | match s {
        synd::REMOTE_INVAL_REQ => 1,
        synd::REMOTE_ACCESS => 2,
        _ => 3,
    }
}

/// The packets of `req` and of the answer `resp` (none for a dropped or unanswered request),
/// in wire order.
pub(crate) fn packets(req: &Request, resp: &Response) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let blk = block(req.st);
    let ud = matches!(
        req.st,
        ServiceType::Ud | ServiceType::Qp0 | ServiceType::Qp1
    );
    let mut ext_first = Vec::new();
    if let Some(srqn) = req.xrc_srqn {
        // XRCETH: the XRC SRQ at the target.
        ext_first.extend_from_slice(&(srqn & 0xff_ffff).to_be_bytes());
    }
    if ud {
        // DETH: Q_Key, source QP.
        ext_first.extend_from_slice(&req.qkey.to_be_bytes());
        ext_first.extend_from_slice(&(req.src_qpn & 0xff_ffff).to_be_bytes());
    }
    let base = Pkt {
        sl: req.sl,
        dlid: req.dlid,
        slid: req.slid,
        grh: req.grh.as_ref(),
        opcode: 0,
        solicited: false,
        dqpn: req.dst_qpn,
        ack_req: req.st.reliable(),
        psn: req.psn,
        ext: Vec::new(),
        payload: &[],
    };
    let imm = req.imm.map(u32::to_be_bytes);
    let psn = |k: usize| (req.psn + k as u32) & 0xff_ffff;
    let mut last_psn = req.psn;
    match req.kind {
        Kind::Send | Kind::Write => {
            let mtu = mtu_of(req.payload.len(), req.pkts);
            let chunks: Vec<&[u8]> = if req.payload.is_empty() {
                vec![&[][..]]
            } else {
                req.payload.chunks(mtu).collect()
            };
            let n = chunks.len();
            let write = matches!(req.kind, Kind::Write);
            for (k, chunk) in chunks.into_iter().enumerate() {
                let (first, last) = (k == 0, k + 1 == n);
                let code = match (write, first, last, imm.is_some()) {
                    (false, true, true, false) => op::SEND_ONLY,
                    (false, true, true, true) => op::SEND_ONLY_IMM,
                    (false, true, false, _) => op::SEND_FIRST,
                    (false, false, false, _) => op::SEND_MIDDLE,
                    (false, false, true, false) => op::SEND_LAST,
                    (false, false, true, true) => op::SEND_LAST_IMM,
                    (true, true, true, false) => op::WRITE_ONLY,
                    (true, true, true, true) => op::WRITE_ONLY_IMM,
                    (true, true, false, _) => op::WRITE_FIRST,
                    (true, false, false, _) => op::WRITE_MIDDLE,
                    (true, false, true, false) => op::WRITE_LAST,
                    (true, false, true, true) => op::WRITE_LAST_IMM,
                };
                let mut ext = ext_first.clone();
                if write && first {
                    ext.extend(reth(req.raddr, req.rkey, req.payload.len() as u64));
                }
                if last {
                    if let Some(i) = imm {
                        ext.extend_from_slice(&i);
                    }
                }
                last_psn = psn(k);
                out.push(
                    Pkt {
                        opcode: blk | code,
                        solicited: last && req.solicited,
                        psn: last_psn,
                        ext,
                        payload: chunk,
                        ..base
                    }
                    .bytes(),
                );
            }
        }
        Kind::Read => {
            let mut ext = ext_first.clone();
            ext.extend(reth(req.raddr, req.rkey, req.len));
            out.push(
                Pkt {
                    opcode: blk | op::READ_REQUEST,
                    ext,
                    ..base
                }
                .bytes(),
            );
        }
        Kind::Atomic { fetch_add } => {
            let mut ext = ext_first.clone();
            ext.extend_from_slice(&req.raddr.to_be_bytes());
            ext.extend_from_slice(&req.rkey.to_be_bytes());
            ext.extend_from_slice(&req.swap_add.to_be_bytes());
            ext.extend_from_slice(&req.compare.to_be_bytes());
            let code = if fetch_add {
                op::FETCH_ADD
            } else {
                op::CMP_SWAP
            };
            out.push(
                Pkt {
                    opcode: blk | code,
                    ext,
                    ..base
                }
                .bytes(),
            );
        }
    }
    // The answer goes back to the requester's QP, from the responder's LID.
    let back = Pkt {
        dlid: req.slid,
        slid: req.dlid,
        grh: None,
        dqpn: req.src_qpn,
        ack_req: false,
        ..base
    };
    let single = |code: u8, ext: Vec<u8>, psn: u32| {
        Pkt {
            opcode: blk | code,
            psn,
            ext,
            ..back
        }
        .bytes()
    };
    match resp {
        Response::Dropped | Response::NoQp => {}
        Response::Rnr(timer) => out.push(single(op::ACK, aeth(0x20 | (timer & 0x1f)), req.psn)),
        Response::NakSeq => out.push(single(op::ACK, aeth(0x60), req.psn)),
        Response::Nak(s) => out.push(single(op::ACK, aeth(nak_code(*s)), req.psn)),
        Response::Ack(data) => match req.kind {
            _ if !req.st.reliable() => {}
            Kind::Send | Kind::Write => out.push(single(op::ACK, aeth(0x1f), last_psn)),
            Kind::Atomic { .. } => {
                let mut ext = aeth(0x1f);
                let mut orig = [0u8; 8];
                let n = data.len().min(8);
                orig[..n].copy_from_slice(&data[..n]);
                ext.extend_from_slice(&orig);
                out.push(single(op::ATOMIC_ACK, ext, req.psn));
            }
            Kind::Read => {
                let mtu = mtu_of(data.len(), req.pkts);
                let chunks: Vec<&[u8]> = if data.is_empty() {
                    vec![&[][..]]
                } else {
                    data.chunks(mtu).collect()
                };
                let n = chunks.len();
                for (k, chunk) in chunks.into_iter().enumerate() {
                    let (first, last) = (k == 0, k + 1 == n);
                    let code = match (first, last) {
                        (true, true) => op::READ_RESP_ONLY,
                        (true, false) => op::READ_RESP_FIRST,
                        (false, false) => op::READ_RESP_MIDDLE,
                        (false, true) => op::READ_RESP_LAST,
                    };
                    let ext = if first || last {
                        aeth(0x1f)
                    } else {
                        Vec::new()
                    };
                    out.push(
                        Pkt {
                            opcode: blk | code,
                            psn: psn(k),
                            ext,
                            payload: chunk,
                            ..back
                        }
                        .bytes(),
                    );
                }
            }
        },
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(kind: Kind, st: ServiceType, payload: Vec<u8>, pkts: u32) -> Request {
        Request {
            kind,
            st,
            psn: 0xff_fffe,
            src_qpn: 0x123,
            slid: 17,
            dlid: 1,
            sl: 3,
            dst_qpn: 0x456,
            len: payload.len() as u64,
            payload,
            imm: None,
            solicited: false,
            raddr: 0x1000,
            rkey: 0xabcd,
            swap_add: 5,
            compare: 6,
            qkey: 0x1111_1111,
            grh: None,
            pkts,
            xrc_srqn: None,
            dc_key: 0,
        }
    }

    /// (opcode, PSN, pad count, BTH destination QP) of a packet, after checking its LRH
    /// packet length against its real length.
    fn fields(p: &[u8]) -> (u8, u32, u8, u32) {
        let words = u16::from_be_bytes([p[4], p[5]]) & 0x7ff;
        assert_eq!(
            usize::from(words) * 4 + 2,
            p.len(),
            "LRH PktLen: LRH..ICRC in words"
        );
        let b = if p[1] & 3 == 3 { 48 } else { 8 };
        let psn = u32::from_be_bytes([0, p[b + 9], p[b + 10], p[b + 11]]);
        let dqp = u32::from_be_bytes([0, p[b + 5], p[b + 6], p[b + 7]]);
        (p[b], psn, (p[b + 1] >> 4) & 3, dqp)
    }

    #[test]
    fn an_rc_write_is_split_at_the_mtu_with_consecutive_psns_then_acknowledged() {
        let r = req(Kind::Write, ServiceType::Rc, vec![7; 2500], 3);
        let p = packets(&r, &Response::Ack(Vec::new()));
        assert_eq!(p.len(), 4);
        // WRITE First (RETH: address, key, whole length), Middle, Last; PSNs wrap at 2^24.
        assert_eq!(fields(&p[0]), (op::WRITE_FIRST, 0xff_fffe, 0, 0x456));
        assert_eq!(&p[0][20..36], &reth(0x1000, 0xabcd, 2500)[..]);
        assert_eq!(fields(&p[1]), (op::WRITE_MIDDLE, 0xff_ffff, 0, 0x456));
        // 2500 - 2048 = 452 bytes: no pad.
        assert_eq!(fields(&p[2]), (op::WRITE_LAST, 0, 0, 0x456));
        assert_eq!(p[2].len(), 8 + 12 + 452 + 4 + 2);
        // LRH: SL 3, LNH 2 (BTH next), DLID 1, SLID 17.
        assert_eq!(
            (p[0][1], &p[0][2..4], &p[0][6..8]),
            (0x32, &[0, 1][..], &[0, 17][..])
        );
        // The ACK: back to the requester's QP and LID, PSN of the last packet, AETH ACK.
        assert_eq!(fields(&p[3]), (op::ACK, 0, 0, 0x123));
        assert_eq!((&p[3][2..4], &p[3][6..8]), (&[0, 17][..], &[0, 1][..]));
        assert_eq!(p[3][20], 0x1f);
    }

    #[test]
    fn headers_of_each_transport_and_answer() {
        // UC SEND with immediate of 5 bytes: one packet, ImmDt, pad 3, no answer for UC.
        let mut r = req(Kind::Send, ServiceType::Uc, vec![1; 5], 1);
        r.imm = Some(0xdead_beef);
        let p = packets(&r, &Response::Ack(Vec::new()));
        assert_eq!(p.len(), 1);
        assert_eq!(
            fields(&p[0]),
            (0x20 | op::SEND_ONLY_IMM, 0xff_fffe, 3, 0x456)
        );
        assert_eq!(&p[0][20..24], &0xdead_beefu32.to_be_bytes());
        // UD with a GRH: LNH 3, DETH (Q_Key, source QP).
        let mut r = req(Kind::Send, ServiceType::Ud, vec![2; 8], 1);
        r.grh = Some([0x60; 40]);
        let p = packets(&r, &Response::Dropped);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0][1] & 3, 3);
        assert_eq!(fields(&p[0]).0, 0x60 | op::SEND_ONLY);
        assert_eq!(&p[0][60..68], &[0x11, 0x11, 0x11, 0x11, 0, 0, 0x01, 0x23]);
        // XRC: the XRCETH follows the BTH.
        let mut r = req(Kind::Send, ServiceType::Xrc, vec![3; 4], 1);
        r.xrc_srqn = Some(0x77);
        let p = packets(&r, &Response::Ack(Vec::new()));
        assert_eq!(fields(&p[0]).0, 0xa0 | op::SEND_ONLY);
        assert_eq!(&p[0][20..24], &[0, 0, 0, 0x77]);
        // A READ of 3000 bytes: the request's RETH names the length; the responses carry
        // AETH on the first and last.
        let r = req(Kind::Read, ServiceType::Rc, Vec::new(), 3);
        let mut r = r;
        r.len = 3000;
        let p = packets(&r, &Response::Ack(vec![9; 3000]));
        assert_eq!(p.len(), 4);
        assert_eq!(fields(&p[0]).0, op::READ_REQUEST);
        assert_eq!(&p[0][20..36], &reth(0x1000, 0xabcd, 3000)[..]);
        let codes: Vec<u8> = p[1..].iter().map(|q| fields(q).0).collect();
        assert_eq!(
            codes,
            [
                op::READ_RESP_FIRST,
                op::READ_RESP_MIDDLE,
                op::READ_RESP_LAST
            ]
        );
        assert_eq!(p[1].len(), 8 + 12 + 4 + 1024 + 4 + 2);
        assert_eq!(p[2].len(), 8 + 12 + 1024 + 4 + 2);
        // An atomic: AtomicETH out, ATOMIC ACK with the original value back.
        let r = req(
            Kind::Atomic { fetch_add: true },
            ServiceType::Rc,
            Vec::new(),
            1,
        );
        let p = packets(&r, &Response::Ack(42u64.to_be_bytes().to_vec()));
        assert_eq!(fields(&p[0]).0, op::FETCH_ADD);
        assert_eq!(p[0].len(), 8 + 12 + 28 + 4 + 2);
        assert_eq!(fields(&p[1]).0, op::ATOMIC_ACK);
        assert_eq!(&p[1][24..32], &42u64.to_be_bytes());
        // Refusals: NAK remote access (011 00010), RNR NAK with its timer, PSN sequence NAK;
        // nothing comes back for an unanswered request.
        let r = req(Kind::Write, ServiceType::Rc, vec![0; 4], 1);
        let aeth_of = |resp| packets(&r, &resp)[1][20];
        assert_eq!(aeth_of(Response::Nak(synd::REMOTE_ACCESS)), 0x62);
        assert_eq!(aeth_of(Response::Nak(synd::REMOTE_INVAL_REQ)), 0x61);
        assert_eq!(aeth_of(Response::Rnr(14)), 0x2e);
        assert_eq!(aeth_of(Response::NakSeq), 0x60);
        assert_eq!(packets(&r, &Response::NoQp).len(), 1);
    }

    #[test]
    fn crcs_use_the_polynomials_the_iba_names() {
        // The CRC-32 check value (ISO-HDLC, the Ethernet CRC the ICRC uses).
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        // The ICRC takes the variant fields as ones: a packet differing only in VL, or in
        // resv8a, has the same ICRC; one differing in the DLID does not.
        let r = req(Kind::Send, ServiceType::Rc, vec![5; 16], 1);
        let p = packets(&r, &Response::Dropped).remove(0);
        let body = &p[..p.len() - 6];
        let mut vl = body.to_vec();
        vl[0] |= 0x70;
        vl[8 + 4] = 0x55;
        assert_eq!(icrc(&vl, 0), icrc(body, 0));
        let mut dlid = body.to_vec();
        dlid[3] ^= 1;
        assert_ne!(icrc(&dlid, 0), icrc(body, 0));
        assert_eq!(&p[p.len() - 6..p.len() - 2], &icrc(body, 0).to_le_bytes());
        assert_eq!(&p[p.len() - 2..], &vcrc(&p[..p.len() - 2]).to_le_bytes());
    }
}
