//! The vfio-user server driven from the host with rust-vmm's `vfio_user::Client` (no QEMU):
//! config space, BAR0 registers, a command executed through guest memory given as a memfd,
//! odd access sizes, unmapped DMA, reset and disconnect.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bareverbs_model::vfio_user::serve;
use bareverbs_model::ModelConfig;
use vfio_user::Client;

const IOVA: u64 = 0x1000_0000;

fn memfd(len: usize) -> File {
    // SAFETY: memfd_create with a static C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"guest-ram".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh descriptor we own.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(&vec![0u8; len]).unwrap();
    // Sealed as QEMU seals its memfd backends (the server refuses a file that can shrink).
    // SAFETY: F_ADD_SEALS on a valid fd with an integer argument.
    let r = unsafe {
        libc::fcntl(
            f.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
        )
    };
    assert_eq!(r, 0);
    f
}

fn connect(tag: &str) -> (Client, std::thread::JoinHandle<()>, PathBuf, PathBuf) {
    let dir = std::env::temp_dir();
    let sock = dir.join(format!("bareverbs-{tag}-{}.sock", std::process::id()));
    let trace = dir.join(format!("bareverbs-{tag}-{}.trace", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let (s, t) = (sock.clone(), trace.clone());
    let server =
        std::thread::spawn(move || serve(&s, ModelConfig::default(), Some(&t), None).unwrap());
    let start = Instant::now();
    loop {
        if let Ok(c) = Client::new(&sock) {
            return (c, server, sock, trace);
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "server never listened"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rd32(c: &mut Client, region: u32, off: u64) -> [u8; 4] {
    let mut b = [0u8; 4];
    c.region_read(region, off, &mut b).unwrap();
    b
}

fn wait_owner_sw(ram: &File, at: u64) -> bool {
    let start = Instant::now();
    let mut b = [0u8];
    while start.elapsed() < Duration::from_secs(10) {
        ram.read_exact_at(&mut b, at).unwrap();
        if b[0] & 1 == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn a_command_through_guest_memory_and_odd_accesses() {
    let (mut c, server, sock, trace) = connect("cmd");
    assert_eq!(
        rd32(&mut c, 7, 0),
        [0xb3, 0x15, 0x17, 0x10],
        "15b3:1017, little-endian config"
    );
    assert_eq!(
        rd32(&mut c, 0, 0),
        [0x00, 0x23, 0x00, 0x10],
        "fw_rev, big-endian register"
    );

    let ram = memfd(1 << 20);
    c.dma_map(0, IOVA, 1 << 20, ram.as_raw_fd()).unwrap();
    c.region_write(7, 4, &[0x06, 0x00]).unwrap(); // memory + bus master
    let start = Instant::now();
    while rd32(&mut c, 0, 0x1fc)[0] & 0x80 != 0 {
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    c.region_write(0, 0x10, &[0, 0, 0, 0]).unwrap();
    c.region_write(0, 0x14, &(IOVA as u32).to_be_bytes())
        .unwrap();
    // ENABLE_HCA in slot 0: type 7, inlen 16, outlen 12, opcode 0x104, owned by hardware.
    let mut e = [0u8; 64];
    e[0] = 7;
    e[4..8].copy_from_slice(&16u32.to_be_bytes());
    e[0x10..0x12].copy_from_slice(&[0x01, 0x04]);
    e[0x38..0x3c].copy_from_slice(&12u32.to_be_bytes());
    e[0x3f] = 1;
    ram.write_all_at(&e, 0).unwrap();
    c.region_write(0, 0x18, &1u32.to_be_bytes()).unwrap();
    assert!(wait_owner_sw(&ram, 0x3f), "command never completed");
    let mut out = [0u8; 8];
    ram.read_exact_at(&mut out, 0x20).unwrap();
    assert_eq!(out, [0; 8], "status OK, syndrome 0");

    // Odd sizes and offsets, and accesses past BAR0: answered, never fatal.
    let mut b1 = [0u8; 1];
    c.region_read(0, 0x1fd, &mut b1).unwrap();
    let mut b3 = [0u8; 3];
    c.region_read(0, 0x1, &mut b3).unwrap();
    assert_eq!(b3, [0x23, 0x00, 0x10]);
    c.region_write(0, 0x2001, &[1, 2, 3]).unwrap();
    c.region_read(0, (32 << 20) - 2, &mut [0u8; 4]).unwrap();
    c.region_write(0, 32 << 20, &[0; 8]).unwrap();

    // A command queue at an unmapped IOVA: a recorded fault, the server carries on.
    c.region_write(0, 0x14, &0x9000_0000u32.to_be_bytes())
        .unwrap();
    c.region_write(0, 0x18, &1u32.to_be_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(rd32(&mut c, 0, 4), [0x00, 0x05, 0x07, 0xd0]);

    // Reset forgets the queue address and firmware state.
    c.reset().unwrap();
    assert_eq!(rd32(&mut c, 0, 0x14), [0, 0, 0, 0x56]);
    // So does a Function Level Reset through PCIe Device Control bit 15 (PCIe Base Spec
    // 7.5.3.4; Linux vfio-pci issues it when a user opens and releases the device), which
    // also clears bus mastering.
    c.region_write(7, 4, &[0x06, 0x00]).unwrap();
    c.region_write(0, 0x14, &(IOVA as u32).to_be_bytes())
        .unwrap();
    assert_ne!(rd32(&mut c, 0, 0x14), [0, 0, 0, 0x56]);
    c.region_write(7, 0x60 + 8, &0x8000u16.to_le_bytes())
        .unwrap();
    assert_eq!(rd32(&mut c, 0, 0x14), [0, 0, 0, 0x56]);
    assert_eq!(
        rd32(&mut c, 7, 4)[0] & 0x04,
        0,
        "bus mastering off after FLR"
    );
    assert_eq!(
        rd32(&mut c, 7, 0x60 + 8)[1] & 0x80,
        0,
        "Initiate FLR reads 0"
    );
    c.shutdown().unwrap();
    drop(c);
    server.join().unwrap();
    let t = std::fs::read_to_string(&trace).unwrap();
    assert!(t.contains("ENABLE_HCA") && t.contains("OK"), "{t}");
    assert!(t.contains("DMA-FAULT"), "{t}");
    let _ = std::fs::remove_file(trace);
    assert!(!sock.exists(), "socket removed on exit");
}
