//! One CQE as a value, read and written by the same code (smoltcp's `Repr::parse` /
//! `Repr::emit`): the model emits its completions through [`CqeRepr::emit`], the driver's
//! completion ring reads them through [`CqeRepr::parse`]. Every field goes through the
//! `Cqe64` / `ErrCqe` layouts ([`crate::ifc::cqe`]) seen as the CQE's eight big-endian words
//! ([`crate::wqe_codec::cqe`]), so a wrong offset is wrong on both sides and a golden-byte
//! test catches it once.
//!
//! Which layout applies depends on the opcode: an error CQE (`REQ_ERR`, `RESP_ERR`) carries
//! its syndromes where a good CQE has its timestamp. A CQE of format
//! [`cqe_format::INLINE_DATA32_SEG`] carries up to 32 bytes of data in bytes 0–31 instead of
//! the fields there (hash, path bits, LID, source QPN, Ethernet offload bits); those fields
//! are neither read nor written then, and the data is the caller's to copy.

use crate::ifc::{cqe_format, make_op_own, CqeOpcode, CQE_SOLICITED};
use crate::wqe_codec::cqe as w;
use crate::wqe_codec::{load, store, Word};

/// Words of a 64-byte CQE.
pub const CQE_WORDS: usize = 8;

/// A CQE's fields (Linux `struct mlx5_cqe64` / `struct mlx5_err_cqe`, rdma-core names).
/// The owner bit is the ring's, not the entry's: [`CqeRepr::emit`] takes it, and the ring
/// checks it before parsing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqeRepr {
    /// `op_own` bits 7:4 (`CqeOpcode`'s value).
    pub opcode: u8,
    /// `op_own` bits 3:2, one of [`cqe_format`].
    pub format: u8,
    /// `op_own` bit 1: the responder saw a solicited event.
    pub solicited: bool,
    /// Index of the completed send WQE, or of the consumed receive WQE.
    pub wqe_counter: u16,
    /// Bits 23:0 the QPN; a requester's bits 31:24 the WQE opcode (error CQEs:
    /// `s_wqe_opcode_qpn`, the same place).
    pub sop_drop_qpn: u32,
    /// `srqn_uidx`: SRQ number or user index in bits 23:0.
    pub srqn: u32,
    /// Bytes received, or read by an RDMA READ or atomic.
    pub byte_cnt: u32,
    /// Immediate data, invalidated rkey, or P_Key index.
    pub imm_inval_pkey: u32,
    /// Responder: source QPN, SL, GRH indication (not with inline data).
    pub flags_rqpn: u32,
    /// Responder: source LID (not with inline data).
    pub slid: u16,
    /// Responder: DLID path bits (not with inline data).
    pub ml_path: u8,
    /// Ethernet receive: the RSS hash (not with inline data).
    pub rss_hash_result: u32,
    /// Ethernet receive: the RSS hash type (not with inline data).
    pub rss_hash_type: u8,
    /// Ethernet receive: checksum-OK bits (not with inline data).
    pub hds_ip_ext: u8,
    /// Ethernet receive: L4/L3 header types and VLAN present (not with inline data).
    pub l4_l3_hdr_type: u8,
    /// Ethernet receive: the stripped VLAN tag (not with inline data).
    pub vlan_info: u16,
    /// Ethernet receive: the packet's checksum (not with inline data).
    pub check_sum: u16,
    /// Good CQEs: the completion's timestamp (an error CQE has its syndromes there).
    pub timestamp: u64,
    /// Error CQEs only: the syndrome ([`crate::ifc::CqeSyndrome`]).
    pub syndrome: u8,
    /// Error CQEs only: the vendor syndrome.
    pub vendor_err_synd: u8,
}

/// True for the opcodes whose CQE is an error CQE.
#[inline(always)]
pub const fn is_error_opcode(opcode: u8) -> bool {
    opcode == CqeOpcode::ReqErr.raw() || opcode == CqeOpcode::RespErr.raw()
}

#[inline(always)]
fn get(words: &[u64; CQE_WORDS], f: Word) -> u64 {
    f.get(words[f.byte() / 8])
}

#[inline(always)]
fn put(words: &mut [u64; CQE_WORDS], f: Word, v: u64) {
    words[f.byte() / 8] |= f.put(v);
}

impl CqeRepr {
    /// The fields of the CQE whose words are `words` (as [`Slot::read64`] reads them from a
    /// ring, or [`CqeRepr::words_of`] from bytes).
    ///
    /// [`Slot::read64`]: bareverbs_hal::Slot
    #[inline(always)]
    pub fn parse(words: &[u64; CQE_WORDS]) -> CqeRepr {
        let op_own = get(words, w::OP_OWN) as u8;
        let opcode = op_own >> 4;
        let format = (op_own >> 2) & 0x3;
        let mut r = CqeRepr {
            opcode,
            format,
            solicited: op_own & CQE_SOLICITED != 0,
            wqe_counter: get(words, w::WQE_COUNTER) as u16,
            sop_drop_qpn: get(words, w::SOP_DROP_QPN) as u32,
            srqn: get(words, w::SRQN) as u32,
            ..CqeRepr::default()
        };
        if is_error_opcode(opcode) {
            r.syndrome = get(words, w::SYNDROME) as u8;
            r.vendor_err_synd = get(words, w::VENDOR_ERR_SYND) as u8;
            return r;
        }
        r.byte_cnt = get(words, w::BYTE_CNT) as u32;
        r.imm_inval_pkey = get(words, w::IMM_INVAL_PKEY) as u32;
        r.timestamp = get(words, w::TIMESTAMP);
        if format != cqe_format::INLINE_DATA32_SEG {
            r.flags_rqpn = get(words, w::FLAGS_RQPN) as u32;
            r.slid = get(words, w::SLID) as u16;
            r.ml_path = get(words, w::ML_PATH) as u8;
            r.rss_hash_result = get(words, w::RSS_HASH_RESULT) as u32;
            r.rss_hash_type = get(words, w::RSS_HASH_TYPE) as u8;
            r.hds_ip_ext = get(words, w::HDS_IP_EXT) as u8;
            r.l4_l3_hdr_type = get(words, w::L4_L3_HDR_TYPE) as u8;
            r.vlan_info = get(words, w::VLAN_INFO) as u16;
            r.check_sum = get(words, w::CHECK_SUM) as u16;
        }
        r
    }

    /// The CQE's words with `owner` as its owner bit: every field of its kind in its place,
    /// everything else zero (bytes 0–31 too with inline data: the caller copies the data in).
    pub fn emit_words(&self, owner: u8) -> [u64; CQE_WORDS] {
        let mut words = [0u64; CQE_WORDS];
        let solicited = if self.solicited { CQE_SOLICITED } else { 0 };
        let op_own = make_op_own(self.opcode, owner) | ((self.format & 0x3) << 2) | solicited;
        put(&mut words, w::OP_OWN, u64::from(op_own));
        put(&mut words, w::WQE_COUNTER, u64::from(self.wqe_counter));
        put(&mut words, w::SOP_DROP_QPN, u64::from(self.sop_drop_qpn));
        put(&mut words, w::SRQN, u64::from(self.srqn));
        if is_error_opcode(self.opcode) {
            put(&mut words, w::SYNDROME, u64::from(self.syndrome));
            put(
                &mut words,
                w::VENDOR_ERR_SYND,
                u64::from(self.vendor_err_synd),
            );
            return words;
        }
        put(&mut words, w::BYTE_CNT, u64::from(self.byte_cnt));
        put(
            &mut words,
            w::IMM_INVAL_PKEY,
            u64::from(self.imm_inval_pkey),
        );
        put(&mut words, w::TIMESTAMP, self.timestamp);
        if self.format != cqe_format::INLINE_DATA32_SEG {
            put(&mut words, w::FLAGS_RQPN, u64::from(self.flags_rqpn));
            put(&mut words, w::SLID, u64::from(self.slid));
            put(&mut words, w::ML_PATH, u64::from(self.ml_path));
            put(
                &mut words,
                w::RSS_HASH_RESULT,
                u64::from(self.rss_hash_result),
            );
            put(&mut words, w::RSS_HASH_TYPE, u64::from(self.rss_hash_type));
            put(&mut words, w::HDS_IP_EXT, u64::from(self.hds_ip_ext));
            put(
                &mut words,
                w::L4_L3_HDR_TYPE,
                u64::from(self.l4_l3_hdr_type),
            );
            put(&mut words, w::VLAN_INFO, u64::from(self.vlan_info));
            put(&mut words, w::CHECK_SUM, u64::from(self.check_sum));
        }
        words
    }

    /// [`CqeRepr::emit_words`] as the 64 bytes a device writes. With inline data, `data` (up
    /// to 32 bytes; more are cut) goes into bytes 0–31; otherwise it is ignored.
    pub fn emit(&self, owner: u8, data: &[u8]) -> [u8; 64] {
        let mut c = [0u8; 64];
        for (k, word) in self.emit_words(owner).iter().enumerate() {
            store(&mut c, 8 * k, *word);
        }
        if self.format == cqe_format::INLINE_DATA32_SEG {
            let n = data.len().min(32);
            c[..n].copy_from_slice(&data[..n]);
        }
        c
    }

    /// The eight big-endian words of a CQE's bytes.
    pub fn words_of(bytes: &[u8; 64]) -> [u64; CQE_WORDS] {
        core::array::from_fn(|k| load(bytes, 8 * k).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifc::{cqe64, err_cqe, Cqe64, CqeSyndrome, ErrCqe};
    use crate::View;

    fn responder() -> CqeRepr {
        CqeRepr {
            opcode: CqeOpcode::RespSendImm.raw(),
            format: cqe_format::NO_INLINE_DATA,
            solicited: true,
            wqe_counter: 0xbeef,
            sop_drop_qpn: 0x00ab_cdef,
            srqn: 0x0012_3456,
            byte_cnt: 0x1234_5678,
            imm_inval_pkey: 0xdead_beef,
            flags_rqpn: 0x2a00_0042,
            slid: 0x0bad,
            ml_path: 0x7f,
            rss_hash_result: 0xfeed_f00d,
            rss_hash_type: 0xc3,
            hds_ip_ext: 0x06,
            l4_l3_hdr_type: 0x29,
            vlan_info: 0x0064,
            check_sum: 0xc0de,
            timestamp: 0x0102_0304_0506_0708,
            syndrome: 0,
            vendor_err_synd: 0,
        }
    }

    #[test]
    fn a_good_cqe_lands_where_the_layout_puts_each_field_and_parses_back() {
        let r = responder();
        let c = r.emit(1, &[]);
        let v = View::<Cqe64>::new_checked(&c[..]).unwrap();
        assert_eq!(v.get32(cqe64::wqe_counter), 0xbeef);
        assert_eq!(v.get32(cqe64::sop_drop_qpn), 0x00ab_cdef);
        assert_eq!(v.get32(cqe64::srqn), 0x0012_3456);
        assert_eq!(v.get32(cqe64::byte_cnt), 0x1234_5678);
        assert_eq!(v.get32(cqe64::imm_inval_pkey), 0xdead_beef);
        assert_eq!(v.get32(cqe64::flags_rqpn), 0x2a00_0042);
        assert_eq!(v.get32(cqe64::slid), 0x0bad);
        assert_eq!(v.get32(cqe64::ml_path), 0x7f);
        assert_eq!(v.get32(cqe64::rss_hash_result), 0xfeed_f00d);
        assert_eq!(v.get32(cqe64::rss_hash_type), 0xc3);
        assert_eq!(v.get32(cqe64::hds_ip_ext), 0x06);
        assert_eq!(v.get32(cqe64::l4_l3_hdr_type), 0x29);
        assert_eq!(v.get32(cqe64::vlan_info), 0x0064);
        assert_eq!(v.get32(cqe64::check_sum), 0xc0de);
        assert_eq!(v.get(cqe64::timestamp), 0x0102_0304_0506_0708);
        // Opcode 3 (RESP_SEND_IMM), format 0, solicited, owner 1.
        assert_eq!(v.get32(cqe64::op_own), 0x33);
        // Golden bytes of the last word: QPN word, counter, signature 0, op_own.
        assert_eq!(c[56..64], [0x00, 0xab, 0xcd, 0xef, 0xbe, 0xef, 0x00, 0x33]);
        // Undeclared bytes (the LRO union) stay zero.
        assert!(c[4..12].iter().all(|&b| b == 0));
        assert_eq!(CqeRepr::parse(&CqeRepr::words_of(&c)), r);
    }

    /// Big-endian `v` of `n` bytes at `at` of `c`.
    fn put_be(c: &mut [u8; 64], at: usize, n: usize, v: u64) {
        c[at..at + n].copy_from_slice(&v.to_be_bytes()[8 - n..]);
    }

    /// The byte image of each kind of CQE, written from the C structs' offsets rather than
    /// from our layouts: rdma-core `mlx5dv.h` `struct mlx5_cqe64` (ml_path 17, slid 22,
    /// flags_rqpn 24, hds_ip_ext 28, l4_hdr_type_etc 29, vlan_info 30, srqn_uidx 32,
    /// imm_inval_pkey 36, byte_cnt 44, timestamp 48, sop_drop_qpn 56, wqe_counter 60, op_own
    /// 63), Linux `device.h` for what mlx5dv.h leaves reserved (rss_hash_result 12,
    /// rss_hash_type 16, check_sum 20), and `struct mlx5_err_cqe` (srqn 32, vendor_err_synd 54,
    /// syndrome 55, s_wqe_opcode_qpn 56, wqe_counter 60, op_own 63).
    #[test]
    fn each_field_sits_at_the_c_structs_offset() {
        let r = responder();
        let mut want = [0u8; 64];
        for (at, n, v) in [
            (12, 4, u64::from(r.rss_hash_result)),
            (16, 1, u64::from(r.rss_hash_type)),
            (17, 1, u64::from(r.ml_path)),
            (20, 2, u64::from(r.check_sum)),
            (22, 2, u64::from(r.slid)),
            (24, 4, u64::from(r.flags_rqpn)),
            (28, 1, u64::from(r.hds_ip_ext)),
            (29, 1, u64::from(r.l4_l3_hdr_type)),
            (30, 2, u64::from(r.vlan_info)),
            (32, 4, u64::from(r.srqn)),
            (36, 4, u64::from(r.imm_inval_pkey)),
            (44, 4, u64::from(r.byte_cnt)),
            (48, 8, r.timestamp),
            (56, 4, u64::from(r.sop_drop_qpn)),
            (60, 2, u64::from(r.wqe_counter)),
            // RESP_SEND_IMM (3) in bits 7:4, format 0, solicited (bit 1), owner 1.
            (63, 1, 0x33),
        ] {
            put_be(&mut want, at, n, v);
        }
        assert_eq!(r.emit(1, &[]), want);
        assert_eq!(CqeRepr::parse(&CqeRepr::words_of(&want)), r);

        let e = CqeRepr {
            opcode: CqeOpcode::RespErr.raw(),
            wqe_counter: 0x1234,
            sop_drop_qpn: 0x00ab_cdef,
            srqn: 0x0056_789a,
            syndrome: CqeSyndrome::RemoteAccessErr.raw(),
            vendor_err_synd: 0x42,
            ..CqeRepr::default()
        };
        let mut want = [0u8; 64];
        for (at, n, v) in [
            (32, 4, u64::from(e.srqn)),
            (54, 1, 0x42),
            (55, 1, u64::from(e.syndrome)),
            (56, 4, u64::from(e.sop_drop_qpn)),
            (60, 2, 0x1234),
            // RESP_ERR (0xe) in bits 7:4, owner 0.
            (63, 1, 0xe0),
        ] {
            put_be(&mut want, at, n, v);
        }
        assert_eq!(e.emit(0, &[]), want);
        assert_eq!(CqeRepr::parse(&CqeRepr::words_of(&want)), e);
    }

    #[test]
    fn an_error_cqe_carries_its_syndromes_where_a_good_one_has_its_timestamp() {
        let r = CqeRepr {
            opcode: CqeOpcode::ReqErr.raw(),
            wqe_counter: 7,
            sop_drop_qpn: 0x0a00_0123,
            srqn: 5,
            syndrome: CqeSyndrome::WrFlushErr.raw(),
            vendor_err_synd: 0x99,
            ..CqeRepr::default()
        };
        let c = r.emit(0, &[]);
        let v = View::<ErrCqe>::new_checked(&c[..]).unwrap();
        assert_eq!(v.get32(err_cqe::syndrome), u32::from(r.syndrome));
        assert_eq!(v.get32(err_cqe::vendor_err_synd), 0x99);
        assert_eq!(v.get32(err_cqe::s_wqe_opcode_qpn), 0x0a00_0123);
        assert_eq!(v.get32(err_cqe::wqe_counter), 7);
        assert_eq!(v.get32(err_cqe::srqn), 5);
        assert_eq!(c[63], 0xd0);
        assert_eq!(CqeRepr::parse(&CqeRepr::words_of(&c)), r);
    }

    #[test]
    fn inline_data_takes_bytes_0_to_31_and_the_fields_there_are_left_out() {
        let r = CqeRepr {
            format: cqe_format::INLINE_DATA32_SEG,
            slid: 0xffff,
            flags_rqpn: 0xffff_ffff,
            ..responder()
        };
        let data: [u8; 40] = core::array::from_fn(|i| i as u8 + 1);
        let c = r.emit(0, &data);
        assert_eq!(c[..32], data[..32]);
        let back = CqeRepr::parse(&CqeRepr::words_of(&c));
        assert_eq!(back.format, cqe_format::INLINE_DATA32_SEG);
        assert_eq!(
            (back.slid, back.flags_rqpn, back.rss_hash_result),
            (0, 0, 0)
        );
        assert_eq!(back.byte_cnt, r.byte_cnt);
        assert_eq!(back.wqe_counter, r.wqe_counter);
    }
}
