//! The driver's decoders under random bytes (a seeded loop on stable): event queue entries
//! (`AsyncEvent::from_eqe`) and completion queue entries written by the model into a CQ that a
//! QP completes into, then polled. Nothing may panic; every CQE polled is one work completion.
//! `BAREVERBS_FUZZ_ENTRIES=N` (and `BAREVERBS_FUZZ_SEED`) for long runs by hand.

use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device};
use bareverbs_model::rng::Rng;
use bareverbs_model::SimHal;

fn params() -> (u64, u64) {
    let seed = std::env::var("BAREVERBS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xdec0_de00_5eed_0001);
    let n = std::env::var("BAREVERBS_FUZZ_ENTRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    (seed, n)
}

#[test]
fn random_eqes_decode_without_panicking() {
    let (seed, n) = params();
    let mut r = Rng(seed | 1);
    let mut eqe = [0u8; 64];
    let mut unknown = 0u64;
    for _ in 0..n {
        r.fill(&mut eqe);
        if matches!(AsyncEvent::from_eqe(&eqe), AsyncEvent::Other { .. }) {
            unknown += 1;
        }
    }
    assert!(unknown < n, "some random types are known ones");
}

#[test]
fn random_cqes_poll_without_panicking() {
    let (seed, n) = params();
    let mut r = Rng(seed ^ 0x5a5a | 1);
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap))
        .unwrap();
    let (cqn, qpn) = (cq.cqn().raw(), qp.qpn().raw());
    let mut wc = [Wc::EMPTY; 8];
    let (mut polled, mut posted) = (0u64, 0u64);
    for i in 0..n {
        let mut c = [0u8; 64];
        r.fill(&mut c);
        // Half of them name the QP (its book is consulted with a random WQE counter).
        if i % 2 == 0 {
            let word = qpn | u32::from(c[0x38]) << 24;
            c[0x38..0x3c].copy_from_slice(&word.to_be_bytes());
        }
        if hal.model().with(|h| h.post_cqe(cqn, c, false)) {
            posted += 1;
        }
        polled += cq.poll(&mut wc) as u64;
    }
    polled += cq.poll(&mut wc) as u64;
    assert!(posted > 0 && polled <= posted, "{polled} of {posted}");
}
