//! Helpers the data-path tests share: registered regions, connected RC pairs,
//! scatter/gather entries, signaled send requests, and polling exactly one completion.

// Each test crate uses its own subset.
#![allow(dead_code)]

use bareverbs::verbs::*;
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

/// `len` bytes of fresh DMA memory registered with `access`.
pub fn region<'p, 'd, 'h>(
    hal: &SimHal,
    pd: &'p Pd<'d, &'h SimHal>,
    len: usize,
    access: AccessFlags,
) -> Mr<'p, 'd, &'h SimHal> {
    pd.reg_mr(hal.dma_alloc(len, 4096).unwrap().share(), access)
        .map_err(|(e, _)| e)
        .unwrap()
}

/// Two RC (or UC) QPs brought to RTS towards each other through port 1 (LID 1), PSNs 0,
/// with `access` for remote operations.
pub fn connect_pair<'p, 'd, H: Hal>(
    a: &mut Qp<'p, 'd, H>,
    b: &mut Qp<'p, 'd, H>,
    access: AccessFlags,
    mtu: Mtu,
) {
    let (an, bn) = (a.qpn().raw(), b.qpn().raw());
    for (q, peer) in [(a, bn), (b, an)] {
        q.to_init(1, 0, access, 0).unwrap();
        let path = AhAttr {
            dlid: 1,
            port_num: 1,
            ..AhAttr::default()
        };
        q.to_rtr(peer, 0, path, mtu).unwrap();
        q.to_rts(0).unwrap();
    }
}

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
