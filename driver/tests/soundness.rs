//! No safe path lets the device reach memory Rust did not hand to it: DMA memory of another
//! HAL is refused by `reg_mr` (its IOVA names other memory here), scatter/gather entries with
//! bit 31 of the length set (mlx5's inline flag) never reach a ring, and a key can only come
//! from a registered region (`Lkey` has no public constructor: the reserved lkey, which
//! skips every memory-region check on mlx5 hardware, cannot be named; a doctest of
//! `bareverbs::verbs::Lkey` checks it does not compile).

use bareverbs::verbs::*;
use bareverbs::Invalid;
use bareverbs::{Config, Device, Error};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use common::{cap, sge, with_rc_pair, PairAttr, RcPair};

fn invalid(what: Invalid) -> Error {
    Error::InvalidArgument { what }
}

#[test]
fn memory_of_another_hal_is_refused_by_reg_mr() {
    // Two model arenas hand out the same IOVAs: the other's buffer at an IOVA of this device
    // is some other memory here.
    let (here, there) = (SimHal::synchronous(), SimHal::synchronous());
    let dev = Device::bring_up(&here, Config::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let foreign = there.dma_alloc(4096, 4096).unwrap().share();
    let ours = here.dma_alloc(4096, 4096).unwrap().share();
    assert_ne!(foreign.domain(), ours.domain());
    let Err((e, back)) = pd.reg_mr(foreign, AccessFlags::LOCAL_WRITE) else {
        panic!("another HAL's memory registered");
    };
    assert_eq!(e, invalid(Invalid::ForeignMemory));
    assert!(back.is_some(), "the buffer is handed back");
    let mr = pd.reg_mr(ours, AccessFlags::LOCAL_WRITE).unwrap();
    assert!(mr.lkey().raw() != 0);
}

#[test]
fn inline_flagged_lengths_never_reach_a_ring() {
    let hal = SimHal::synchronous();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let attr = PairAttr {
        send_cqe: 8,
        recv_cqe: 8,
        access: AccessFlags::LOCAL_WRITE,
        ..PairAttr::new(cap(8, 2, 0))
    };
    with_rc_pair(&dev, attr, |RcPair { a, b, mr, pd, .. }| {
        let good = sge(mr, 0, 64);
        let bad = [
            (
                Sge {
                    length: 1 << 31,
                    ..good
                },
                Invalid::SgeLength,
            ),
            (
                Sge {
                    length: u32::MAX,
                    ..good
                },
                Invalid::SgeLength,
            ),
        ];
        let sq_posted = |qpn| {
            hal.model()
                .with(|h| h.qp(qpn).map(|q| (q.sq_consumed, q.rq_consumed)))
        };
        let before = sq_posted(a.qpn().raw());
        for (s, what) in bad {
            // A bad entry in second place: the whole request is refused, nothing written.
            let list = [good, s];
            let wr = SendWr {
                wr_id: 1,
                sg_list: &list,
                inline_data: &[],
                op: SendOp::Send,
                flags: SendFlags::SIGNALED,
                ud: None,
            };
            assert_eq!(a.post_send(&[wr]).unwrap_err().error, invalid(what));
            let e = b
                .post_recv(&[RecvWr {
                    wr_id: 2,
                    sg_list: &list,
                }])
                .unwrap_err();
            assert_eq!((e.index, e.error), (0, invalid(what)));
        }
        assert_eq!(sq_posted(a.qpn().raw()), before, "the device saw nothing");

        // The same on an SRQ, after one good request (posted) in the same call.
        let srq = pd
            .create_srq(&SrqInitAttr::new(SrqAttr {
                max_wr: 8,
                max_sge: 2,
                srq_limit: 0,
            }))
            .unwrap();
        for (s, what) in bad {
            let ok = [good];
            let list = [s];
            let e = srq
                .post_recv(&[
                    RecvWr {
                        wr_id: 1,
                        sg_list: &ok,
                    },
                    RecvWr {
                        wr_id: 2,
                        sg_list: &list,
                    },
                ])
                .unwrap_err();
            assert_eq!((e.index, e.error), (1, invalid(what)));
        }
    });
}
