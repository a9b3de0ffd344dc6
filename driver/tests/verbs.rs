//! Protection domains, memory regions and completion queues against the model: what a user
//! sees (keys, sizes, decoded completions, events) and what firmware holds afterwards.

use bareverbs::verbs::{AccessFlags, WcFlags, WcOpcode, WcStatus};
use bareverbs::{AsyncEvent, Config, Device, Error};
use bareverbs_firmware_cmd::ifc::{make_op_own, CqeOpcode};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

fn up(hal: &SimHal) -> Device<&SimHal> {
    Device::bring_up(hal, Config::default()).unwrap()
}

#[test]
fn pds_and_memory_regions() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = up(&hal);
    let pd = dev.alloc_pd().unwrap();
    let td = dev.alloc_transport_domain().unwrap();
    assert_eq!(m.with(|h| h.object_counts()), (1, 0, 0));

    // Remote write without local write is refused before any command, buffer returned.
    let buf = hal.dma_alloc(3 * 4096 + 100, 4096).unwrap().share();
    let before = m.trace().len();
    let (e, buf) = pd.reg_mr(buf, AccessFlags::REMOTE_WRITE).err().unwrap();
    assert!(matches!(e, Error::InvalidArgument { .. }));
    assert_eq!(m.trace().len(), before);

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let mr = pd.reg_mr(buf.unwrap(), access).map_err(|(e, _)| e).unwrap();
    assert_eq!(mr.lkey().raw(), mr.rkey().raw());
    assert_eq!(mr.len(), 3 * 4096 + 100);
    let index = mr.lkey().raw() >> 8;
    let key = m
        .with(|h| h.mkey(index).cloned())
        .expect("model holds the key");
    assert_eq!(key.key, mr.lkey().raw());
    assert_eq!(key.pd, pd.pdn().raw());
    assert_eq!((key.start, key.len), (mr.addr(), mr.len() as u64));
    assert!(key.rights.remote_write && key.rights.remote_read && !key.rights.atomic);
    // The MTT covers the four pages of the buffer, in order.
    assert_eq!(
        key.translate(mr.addr() + 4096 * 3 + 99, 1).unwrap(),
        vec![(mr.addr() + 4096 * 3 + 99, 1)]
    );
    assert!(key.translate(mr.addr() + 4096 * 3 + 100, 1).is_err());

    // A second registration of other memory gets another key.
    let mr2 = pd
        .reg_mr(
            hal.dma_alloc(4096, 4096).unwrap().share(),
            AccessFlags::empty(),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    assert_ne!(mr2.lkey(), mr.lkey());
    assert_eq!(m.with(|h| h.object_counts()), (1, 2, 0));

    let buf = mr.dereg().map_err(|(e, _)| e).unwrap();
    assert_eq!(buf.len(), 3 * 4096 + 100);
    drop(mr2);
    assert_eq!(m.with(|h| h.object_counts()), (1, 0, 0));
    drop(td);
    pd.dealloc().unwrap();
    assert_eq!(m.with(|h| h.object_counts()), (0, 0, 0));
    drop(buf);
    dev.teardown().unwrap();
    assert_eq!(m.pages_held(), 0);
}

fn cqe(
    opcode: CqeOpcode,
    qpn: u32,
    wqe_op: u8,
    byte_cnt: u32,
    imm: u32,
    flags_rqpn: u32,
) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[0x18..0x1c].copy_from_slice(&flags_rqpn.to_be_bytes());
    c[0x24..0x28].copy_from_slice(&imm.to_be_bytes());
    c[0x2c..0x30].copy_from_slice(&byte_cnt.to_be_bytes());
    c[0x38..0x3c].copy_from_slice(&((u32::from(wqe_op) << 24) | qpn).to_be_bytes());
    c[0x3f] = make_op_own(opcode.into(), 0);
    c
}

#[test]
fn cq_sizes_polling_wraparound_and_errors() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = up(&hal);
    assert!(matches!(
        dev.create_cq(0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        dev.create_cq(u32::MAX),
        Err(Error::ExceedsLimit { .. })
    ));
    let mut cq = dev.create_cq(100).unwrap();
    assert_eq!(cq.capacity(), 128);
    let cqn = cq.cqn().raw();
    assert_eq!(m.with(|h| h.cq(cqn).unwrap().log_size), 7);
    let mut wc = [bareverbs::verbs::Wc::EMPTY; 16];
    assert_eq!(cq.poll(&mut wc), 0);

    // A requester RDMA READ, a responder SEND with immediate and GRH, an error completion.
    m.with(|h| {
        assert!(h.post_cqe(cqn, cqe(CqeOpcode::Req, 0x42, 0x10, 64, 0, 0), false));
        assert!(h.post_cqe(
            cqn,
            cqe(
                CqeOpcode::RespSendImm,
                0x43,
                0,
                100,
                0xfeed,
                (2 << 28) | (5 << 24) | 0x99
            ),
            false
        ));
        let mut e = [0u8; 64];
        e[0x36] = 0x81;
        e[0x37] = 0x13; // remote access error
        e[0x38..0x3c].copy_from_slice(&((0x08u32 << 24) | 0x42).to_be_bytes());
        e[0x3f] = make_op_own(CqeOpcode::ReqErr.into(), 0);
        assert!(h.post_cqe(cqn, e, false));
    });
    assert_eq!(cq.poll(&mut wc[..2]), 2);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].qp_num, wc[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 0x42, 64)
    );
    let r = wc[1];
    assert_eq!(
        (r.opcode, r.byte_len, r.imm_data, r.src_qp, r.sl),
        (WcOpcode::Recv, 100, 0xfeed, 0x99, 5)
    );
    assert_eq!(r.wc_flags, WcFlags::WITH_IMM | WcFlags::GRH);
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].status, wc[0].vendor_err, wc[0].opcode),
        (WcStatus::RemAccessErr, 0x81, WcOpcode::RdmaWrite)
    );

    // Around the ring twice: the owner bit flips on each pass and the consumer index in the
    // doorbell record lets firmware reuse entries.
    let mut seen = 0;
    for round in 0..3 {
        m.with(|h| {
            for k in 0..100 {
                assert!(
                    h.post_cqe(cqn, cqe(CqeOpcode::Req, k, 0x0a, 0, 0, 0), false),
                    "round {round} cqe {k}"
                );
            }
        });
        loop {
            let n = cq.poll(&mut wc);
            if n == 0 {
                break;
            }
            for w in &wc[..n] {
                assert_eq!(w.qp_num, (seen % 100) as u32);
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 300);
    // Without polling, the 129th CQE overruns.
    let ok = m.with(|h| {
        (0..129)
            .filter(|k| h.post_cqe(cqn, cqe(CqeOpcode::Req, *k, 0x0a, 0, 0, 0), false))
            .count()
    });
    assert_eq!(ok, 128);
    assert!(m.with(|h| h.cq(cqn).unwrap().overrun));
    cq.destroy().map_err(|(e, _)| e).unwrap();
    assert_eq!(m.with(|h| h.object_counts()), (0, 0, 0));
}

#[test]
fn cq_events_after_arming() {
    let hal = SimHal::synchronous();
    let m = hal.model();
    let dev = up(&hal);
    let mut cq = dev.create_cq(8).unwrap();
    let cqn = cq.cqn().raw();
    let post = |solicited: bool| {
        m.with(|h| h.post_cqe(cqn, cqe(CqeOpcode::Req, 1, 0x0a, 0, 0, 0), solicited))
    };
    // Not armed: no event.
    post(false);
    dev.poll_events();
    assert_eq!(dev.next_event(), None);
    let mut wc = [bareverbs::verbs::Wc::EMPTY; 4];
    assert_eq!(cq.poll(&mut wc), 1);
    // Armed: exactly one event for the next completion.
    cq.req_notify(false).unwrap();
    post(false);
    post(false);
    dev.poll_events();
    assert_eq!(dev.next_event(), Some(AsyncEvent::Completion { cqn }));
    assert_eq!(dev.next_event(), None);
    cq.ack_events(1).unwrap();
    assert_eq!(cq.poll(&mut wc), 2);
    // Solicited only: an unsolicited completion does not fire, a solicited one does.
    cq.req_notify(true).unwrap();
    post(false);
    dev.poll_events();
    assert_eq!(dev.next_event(), None);
    post(true);
    dev.poll_events();
    assert_eq!(dev.next_event(), Some(AsyncEvent::Completion { cqn }));
    // Arming with completions already waiting fires at once.
    cq.ack_events(1).unwrap();
    cq.req_notify(false).unwrap();
    dev.poll_events();
    assert_eq!(dev.next_event(), Some(AsyncEvent::Completion { cqn }));
    drop(cq);
    assert_eq!(m.with(|h| h.object_counts()), (0, 0, 0));
}
