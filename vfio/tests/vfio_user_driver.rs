//! The driver against the model's vfio-user server over its socket, with no QEMU: the same
//! server and wire protocol the guest tests use, exercised in milliseconds.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bareverbs::{Config, Device, PortState};
use bareverbs_model::vfio_user::serve;
use bareverbs_model::ModelConfig;
use bareverbs_vfio::{VfioError, VfioUserHal};

fn server(tag: &str) -> (std::thread::JoinHandle<()>, PathBuf, PathBuf) {
    let dir = std::env::temp_dir();
    let sock = dir.join(format!("bareverbs-vu-{tag}-{}.sock", std::process::id()));
    let trace = dir.join(format!("bareverbs-vu-{tag}-{}.trace", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let (s, t) = (sock.clone(), trace.clone());
    let h = std::thread::spawn(move || serve(&s, ModelConfig::default(), Some(&t), None).unwrap());
    let start = Instant::now();
    while !sock.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "server never listened"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (h, sock, trace)
}

#[test]
fn bring_up_and_teardown_over_the_socket() {
    let (h, sock, trace) = server("up");
    let hal = VfioUserHal::connect(&sock, 8 << 20).unwrap();
    let mut id = [0u8; 4];
    hal.read_config(0, &mut id).unwrap();
    assert_eq!(id, [0xb3, 0x15, 0x17, 0x10]);
    for round in 0..2 {
        let dev = Device::bring_up(&hal, Config::default())
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(dev.info().fw_version, (16, 35, 2000));
        assert_eq!(dev.ports()[0].state, PortState::Active);
        assert_eq!(dev.query_port(1).unwrap().lid, 1);
        // One port per PCI function, as a ConnectX-5.
        assert_eq!(dev.ports().len(), 1);
        dev.poll_events();
        dev.teardown().unwrap();
    }
    drop(hal);
    h.join().unwrap();
    let t = std::fs::read_to_string(&trace).unwrap();
    let _ = std::fs::remove_file(&trace);
    assert!(
        t.lines()
            .filter(|l| l.starts_with("CMD"))
            .all(|l| l.ends_with(" OK")),
        "{t}"
    );
    assert_eq!(t.matches("INIT_HCA").count(), 2);
    assert!(
        t.contains("END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0"),
        "{t}"
    );
}

#[test]
fn a_missing_server_is_a_clear_error() {
    let e = VfioUserHal::connect(std::path::Path::new("/nonexistent/mlx5.sock"), 1 << 20)
        .err()
        .unwrap();
    assert!(matches!(
        e,
        VfioError::VfioUser {
            what: "connect",
            ..
        }
    ));
    assert!(e.to_string().contains("is the server running"), "{e}");
}

#[test]
fn too_little_dma_memory_fails_bring_up_cleanly() {
    let (h, sock, trace) = server("small");
    // Room for the command queue and mailboxes but not for a 2 MiB page chunk.
    let hal = VfioUserHal::connect(&sock, 1 << 20).unwrap();
    let e = Device::bring_up(&hal, Config::default()).err().unwrap();
    assert_eq!(e.step, bareverbs::Step::BootPages);
    drop(hal);
    h.join().unwrap();
    let t = std::fs::read_to_string(&trace).unwrap();
    let _ = std::fs::remove_file(&trace);
    assert!(t.contains("END state=Disabled pages_held=0"), "{t}");
}

/// Work requests over the socket: an RC QP sends to another QP of the same model HCA. A lone
/// two-WQEBB WQE goes through the BlueFlame register whole, one message per WQEBB that the
/// server splits back into its 8-byte stores (the first rings the doorbell); a batch of two
/// rings the doorbell word alone. The data arrives, and the model counts the BlueFlame words.
#[test]
fn sends_over_the_socket_take_blueflame_when_alone() {
    use bareverbs::verbs::*;
    use bareverbs_hal::Hal;
    let (h, sock, trace) = server("bf");
    let hal = VfioUserHal::connect(&sock, 8 << 20).unwrap();
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    {
        let pd = dev.alloc_pd().unwrap();
        let (mut scq, mut rcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let init = QpInitAttr::new(QpType::Rc, &scq, &rcq, cap);
        let (mut a, mut b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
        let access = AccessFlags::LOCAL_WRITE;
        let (an, bn) = (a.qpn().raw(), b.qpn().raw());
        for (q, peer) in [(&mut a, bn), (&mut b, an)] {
            q.to_init(1, 0, access, 0).unwrap();
            let path = AhAttr {
                dlid: 1,
                port_num: 1,
                ..AhAttr::default()
            };
            q.to_rtr(peer, 0, path, Mtu::Mtu1024).unwrap();
            q.to_rts(0).unwrap();
        }
        let mr = pd
            .reg_mr(hal.dma_alloc(4096, 4096).unwrap().share(), access)
            .map_err(|(e, _)| e)
            .unwrap();
        let rx = |i: u64| Sge {
            addr: mr.addr() + 64 * i,
            length: 64,
            lkey: mr.lkey(),
        };
        let (r0, r1, r2) = ([rx(0)], [rx(1)], [rx(2)]);
        b.post_recv(&[
            RecvWr {
                wr_id: 0,
                sg_list: &r0,
            },
            RecvWr {
                wr_id: 1,
                sg_list: &r1,
            },
            RecvWr {
                wr_id: 2,
                sg_list: &r2,
            },
        ])
        .unwrap();
        let msg = [0x42u8; 60];
        a.send_batch(|q| q.send_inline(7, SendFlags::SIGNALED, &msg))
            .unwrap()
            .unwrap();
        a.send_batch(|q| {
            q.send_inline(8, SendFlags::empty(), &msg).unwrap();
            q.send_inline(9, SendFlags::SIGNALED, &msg).unwrap();
        })
        .unwrap();
        let mut wc = [Wc::EMPTY; 4];
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < 2 && start.elapsed() < Duration::from_secs(10) {
            let n = scq.poll(&mut wc);
            got.extend(wc[..n].iter().map(|w| (w.wr_id, w.status)));
        }
        assert_eq!(got, [(7, WcStatus::Success), (9, WcStatus::Success)]);
        let mut n = 0;
        while n < 3 && start.elapsed() < Duration::from_secs(10) {
            n += rcq.poll(&mut wc[n..]);
        }
        assert_eq!(n, 3);
        let mut data = [0u8; 60];
        for i in 0..3 {
            mr.buf().read_bytes(64 * i, &mut data).unwrap();
            assert_eq!(data, msg);
        }
        drop((a, b, mr, scq, rcq));
    }
    dev.teardown().unwrap();
    drop(hal);
    h.join().unwrap();
    let t = std::fs::read_to_string(&trace).unwrap();
    let _ = std::fs::remove_file(&trace);
    // 60 bytes inline: 16 + 4 + 60 bytes, two WQEBBs; 15 words after the doorbell word.
    assert!(t.contains(" blueflame_words=15"), "{t}");
}
