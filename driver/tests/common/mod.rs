//! Helpers the data-path tests share: scatter/gather entries, signaled send requests, and
//! polling exactly one completion.

// Each test crate uses its own subset.
#![allow(dead_code)]

use bareverbs::verbs::*;
use bareverbs_hal::Hal;

/// `len` bytes at `off` in `mr`.
pub fn sge<H: Hal>(mr: &Mr<'_, '_, H>, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    }
}

/// A signaled send request of `op` over `sg`.
pub fn send_wr<'a>(wr_id: u64, sg: &'a [Sge], op: SendOp) -> SendWr<'a> {
    SendWr {
        wr_id,
        sg_list: sg,
        inline_data: &[],
        op,
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}

/// The one completion `cq` must hold now.
pub fn poll_one<H: Hal>(cq: &mut Cq<'_, H>) -> Wc {
    let mut wc = [Wc::EMPTY; 1];
    assert_eq!(cq.poll(&mut wc), 1, "expected a completion");
    wc[0]
}
