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
