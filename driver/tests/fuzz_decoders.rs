//! The driver's decoders under random bytes (a seeded loop on stable): event queue entries
//! (`bareverbs::testing::decode_eqe`, the decoder `Device::poll_events` uses) and completion queue entries written by the model into a CQ that a
//! QP completes into, then polled. Nothing may panic; every CQE polled is one work completion.
//! `BAREVERBS_FUZZ_ENTRIES=N` (and `BAREVERBS_FUZZ_SEED`) for long runs by hand.

use bareverbs::testing::decode_eqe;
use bareverbs::verbs::*;
use bareverbs::{AsyncEvent, Config, Device};
use bareverbs_model::rng::Rng;
use bareverbs_model::SimHal;

fn params() -> (u64, u64) {
    let seed = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_SEED", 0xdec0_de00_5eed_0001);
    let n = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_ENTRIES", 20_000);
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
        if matches!(decode_eqe(&eqe), AsyncEvent::Other { .. }) {
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

/// Bring-up, a few verbs and teardown; the first error ends it.
fn scenario(hal: &SimHal) -> Result<(), bareverbs::Error> {
    use bareverbs_hal::Hal;
    use std::time::Duration;
    let mut cfg = Config::default();
    cfg.timeouts.command = Duration::from_millis(50);
    let dev = Device::bring_up(hal, cfg).map_err(|e| e.error)?;
    dev.query_port(1)?;
    dev.query_gid(1, 0)?;
    let pd = dev.alloc_pd()?;
    let mut cq = dev.create_cq(16)?;
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq, cap))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = pd
        .reg_mr(hal.dma_alloc(4096, 4096)?.share(), access)
        .map_err(|(e, _)| e)?;
    let qpn = qp.qpn().raw();
    let path = AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    qp.to_init(1, 0, access, 0)?;
    qp.to_rtr(qpn, 0, path, Mtu::Mtu1024)?;
    qp.to_rts(0)?;
    qp.query_qp(QpAttrMask::all())?;
    let sg = [Sge {
        addr: mr.addr(),
        length: 8,
        lkey: mr.lkey(),
    }];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sg,
        inline_data: &[],
        op: SendOp::RdmaWrite {
            remote_addr: mr.addr() + 64,
            rkey: mr.rkey().raw(),
        },
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    qp.post_send(&[wr]).map_err(|e| e.error)?;
    cq.poll(&mut [Wc::EMPTY; 4]);
    pd.create_ah(path)?;
    drop(qp);
    drop(mr);
    drop(cq);
    drop(pd);
    dev.teardown().map_err(|e| e.error)
}

#[test]
fn random_command_outputs_are_refused_or_used_without_panicking() {
    use bareverbs_model::config::{CommandFault, FaultAction, Faults, ModelConfig};
    use bareverbs_model::sim_hal::Drive;
    let (seed, _) = params();
    let rounds: u64 = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_OUTPUTS", 100);
    let mut r = Rng(seed ^ 0x0707 | 1);
    // The commands the scenario sends, each with how many of its kind came before it.
    let healthy = SimHal::synchronous();
    scenario(&healthy).unwrap();
    let mut seen = std::collections::HashMap::new();
    let cmds: Vec<(u16, u16, u32)> = healthy
        .model()
        .trace()
        .iter()
        .map(|t| {
            let n = seen.entry((t.opcode.0, t.op_mod)).or_insert(0u32);
            *n += 1;
            (t.opcode.0, t.op_mod, *n - 1)
        })
        .collect();
    let (mut refused, mut survived) = (0u64, 0u64);
    for _ in 0..rounds {
        let (opcode, op_mod, skip) = cmds[r.below(cmds.len() as u64) as usize];
        let faults = Faults {
            commands: vec![CommandFault {
                opcode,
                op_mod: Some(op_mod),
                skip,
                times: Some(1),
                action: FaultAction::Garble(r.next()),
            }],
            ..Faults::default()
        };
        let hal = SimHal::new(
            ModelConfig {
                faults,
                ..ModelConfig::default()
            },
            Drive::Synchronous,
        );
        match scenario(&hal) {
            Ok(()) => survived += 1,
            Err(_) => refused += 1,
        }
    }
    println!(
        "{rounds} garbled outputs over {} commands: {refused} refused, {survived} ran through",
        cmds.len()
    );
    assert!(refused > 0, "some garbage must be refused");
}
