//! The vfio-user server against a hostile client over a raw socket: every request gets an
//! answer or the connection is closed, nothing panics or hangs the server, and the framing
//! survives every refused message (a good request right after it is answered correctly).
//! Then a seeded fuzzer: random and mutated messages, a fixed seed here (a few thousand
//! messages); `BAREVERBS_FUZZ_MESSAGES=N` (and `BAREVERBS_FUZZ_SEED`) for long runs by hand.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bareverbs_model::rng::Rng;
use bareverbs_model::vfio_user::serve;
use bareverbs_model::vfio_user_gate::{send_with_fds, Header, HEADER, MAX_MESSAGE};
use bareverbs_model::ModelConfig;

const VERSION: u16 = 1;
const DMA_MAP: u16 = 2;
const SET_IRQS: u16 = 8;
const REGION_READ: u16 = 9;
const REGION_WRITE: u16 = 10;
const CONFIG: u32 = 7;
const NO_REPLY: u32 = 1 << 4;
const ERROR: u32 = 1 << 5;

struct Server {
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
    sock: PathBuf,
}

impl Server {
    fn start(tag: &str) -> (Self, UnixStream) {
        let sock = std::env::temp_dir().join(format!(
            "bareverbs-hostile-{tag}-{}.sock",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&sock);
        let s = sock.clone();
        let thread = std::thread::spawn(move || {
            serve(&s, ModelConfig::default(), None, None).map_err(|e| e.to_string())
        });
        let start = Instant::now();
        let c = loop {
            if let Ok(c) = UnixStream::connect(&sock) {
                break c;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "never listened");
            std::thread::sleep(Duration::from_millis(5));
        };
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        (
            Server {
                thread: Some(thread),
                sock,
            },
            c,
        )
    }

    /// Waits for the server to end; what `serve` returned (a panic fails the test).
    fn end(mut self) -> Result<(), String> {
        let t = self.thread.take().unwrap();
        t.join().expect("the server panicked")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.sock);
    }
}

fn msg(id: u16, command: u16, flags: u32, body: &[u8]) -> Vec<u8> {
    let h = Header {
        id,
        command,
        size: (HEADER + body.len()) as u32,
        flags,
        error: 0,
    };
    let mut m = h.bytes().to_vec();
    m.extend_from_slice(body);
    m
}

fn region_access(offset: u64, region: u32, count: u32) -> Vec<u8> {
    let mut b = offset.to_le_bytes().to_vec();
    b.extend_from_slice(&region.to_le_bytes());
    b.extend_from_slice(&count.to_le_bytes());
    b
}

/// One reply: its header and body.
fn reply(c: &mut UnixStream) -> (Header, Vec<u8>) {
    let mut hb = [0u8; HEADER];
    c.read_exact(&mut hb).expect("a reply");
    let h = Header::parse(&hb);
    let mut body = vec![0u8; h.size as usize - HEADER];
    c.read_exact(&mut body).unwrap();
    (h, body)
}

/// The vendor id through a config-space read: the server is alive and the framing intact.
fn probe(c: &mut UnixStream, id: u16) {
    c.write_all(&msg(id, REGION_READ, 0, &region_access(0, CONFIG, 2)))
        .unwrap();
    let (h, body) = reply(c);
    assert_eq!((h.id, h.flags & ERROR), (id, 0), "{h:?}");
    assert_eq!(&body[16..], &0x15b3u16.to_le_bytes());
}

fn refused(c: &mut UnixStream, id: u16) {
    let (h, _) = reply(c);
    assert_eq!(h.id, id);
    assert_ne!(h.flags & ERROR, 0, "an error reply: {h:?}");
}

fn version(id: u16) -> Vec<u8> {
    let mut body = vec![0, 0, 1, 0];
    body.extend_from_slice(b"{\"capabilities\":{}}\0");
    msg(id, VERSION, 0, &body)
}

#[test]
fn refused_messages_get_error_replies_and_the_framing_survives() {
    let (server, mut c) = Server::start("refused");
    // A VERSION whose string has no NUL (the library unwrapped it and panicked).
    let mut body = vec![0, 0, 1, 0];
    body.extend_from_slice(b"{\"capabilities\":{}}");
    c.write_all(&msg(1, VERSION, 0, &body)).unwrap();
    refused(&mut c, 1);
    // A NUL inside it, or no string at all.
    c.write_all(&msg(2, VERSION, 0, b"\0\0\x01\0{\0}\0"))
        .unwrap();
    refused(&mut c, 2);
    c.write_all(&msg(3, VERSION, 0, &[])).unwrap();
    refused(&mut c, 3);
    probe(&mut c, 4);
    // A region read of index 99, and of config space at u64::MAX - 1 (it panicked in pci.rs).
    c.write_all(&msg(5, REGION_READ, 0, &region_access(0, 99, 4)))
        .unwrap();
    refused(&mut c, 5);
    c.write_all(&msg(
        6,
        REGION_READ,
        0,
        &region_access(u64::MAX - 1, CONFIG, 2),
    ))
    .unwrap();
    refused(&mut c, 6);
    // A read of 4 GiB (the library allocated what `count` said).
    c.write_all(&msg(7, REGION_READ, 0, &region_access(0, 0, u32::MAX)))
        .unwrap();
    refused(&mut c, 7);
    // A write whose size disagrees with its count.
    let mut w = region_access(0, CONFIG, 8);
    w.extend_from_slice(&[0; 4]);
    c.write_all(&msg(8, REGION_WRITE, 0, &w)).unwrap();
    refused(&mut c, 8);
    // An unknown command with a body, and "no reply" where the library would answer anyway.
    c.write_all(&msg(9, 99, 0, &[1, 2, 3, 4])).unwrap();
    refused(&mut c, 9);
    c.write_all(&msg(
        10,
        REGION_READ,
        NO_REPLY,
        &region_access(0, CONFIG, 2),
    ))
    .unwrap();
    // SET_IRQS past the vectors the index has (start + count overflowed in the backend).
    let mut irq = Vec::new();
    for v in [20u32, 0x24, 2, u32::MAX, 2] {
        irq.extend_from_slice(&v.to_le_bytes());
    }
    c.write_all(&msg(11, SET_IRQS, 0, &irq)).unwrap();
    refused(&mut c, 11);
    probe(&mut c, 12);
    // A DMA map of a memfd that can still shrink (shrinking it killed the server with
    // SIGBUS): refused by the server.
    // SAFETY: memfd_create with a static C string; checked.
    let fd = unsafe { libc::memfd_create(c"hostile".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor we own.
    let ram = unsafe { File::from_raw_fd(fd) };
    ram.set_len(1 << 20).unwrap();
    let mut map = Vec::new();
    for v in [32u32, 3] {
        map.extend_from_slice(&v.to_le_bytes());
    }
    for v in [0u64, 0x1000_0000, 1 << 20] {
        map.extend_from_slice(&v.to_le_bytes());
    }
    let fds = [OwnedFd::from(ram.try_clone().unwrap())];
    send_with_fds(&c, &msg(13, DMA_MAP, 0, &map), &fds).unwrap();
    refused(&mut c, 13);
    probe(&mut c, 14);
    drop(c);
    assert_eq!(server.end(), Ok(()), "a client that hangs up cleanly");
}

#[test]
fn messages_that_cannot_be_framed_close_the_connection_with_a_reason() {
    // A size smaller than the header.
    // (Only the header is sent: the rest would sit unread when the gate closes, and the
    // kernel then resets the connection instead of delivering the error reply.)
    let (server, mut c) = Server::start("short");
    let mut m = msg(1, REGION_READ, 0, &region_access(0, CONFIG, 2));
    m[4..8].copy_from_slice(&8u32.to_le_bytes());
    c.write_all(&m[..HEADER]).unwrap();
    refused(&mut c, 1);
    assert_eq!(c.read(&mut [0u8; 1]).unwrap(), 0, "closed");
    assert!(server.end().unwrap_err().contains("cannot be framed"));
    // A size of 4 GiB.
    let (server, mut c) = Server::start("huge");
    let mut m = msg(1, REGION_WRITE, 0, &region_access(0, CONFIG, 2));
    m[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    c.write_all(&m[..HEADER]).unwrap();
    refused(&mut c, 1);
    assert!(server.end().unwrap_err().contains("cannot be framed"));
    // A client that stops in the middle of a message: closed after the gate's wait, not a
    // server blocked for ever.
    let (server, mut c) = Server::start("stall");
    let m = msg(1, REGION_READ, 0, &region_access(0, CONFIG, 2));
    c.write_all(&m[..20]).unwrap();
    let start = Instant::now();
    assert_eq!(c.read(&mut [0u8; 1]).unwrap_or(0), 0, "closed, no reply");
    assert!(start.elapsed() < Duration::from_secs(15));
    assert!(server.end().is_err());
}

/// A message of a random kind: valid ones, then mutated (sizes, fields, bytes, commands).
fn fuzz_message(r: &mut Rng, id: u16) -> Vec<u8> {
    let mut m = match r.below(8) {
        0 => version(id),
        1 => msg(
            id,
            REGION_READ,
            0,
            &region_access(r.below(0x1100), CONFIG, 4),
        ),
        2 => msg(
            id,
            REGION_READ,
            0,
            &region_access(r.below(64 << 20), r.below(10) as u32, 1 << r.below(4)),
        ),
        3 => {
            let mut b = region_access(r.below(0x40) * 4, CONFIG, 4);
            b.extend_from_slice(&(r.next() as u32).to_le_bytes());
            msg(id, REGION_WRITE, 0, &b)
        }
        4 => {
            let mut b = Vec::new();
            for _ in 0..5 {
                b.extend_from_slice(&(r.below(80) as u32).to_le_bytes());
            }
            msg(id, SET_IRQS, 0, &b)
        }
        5 => msg(id, r.below(20) as u16, 0, &vec![0u8; r.below(64) as usize]),
        6 => msg(id, 4, 0, &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        _ => msg(id, 13, 0, &[]),
    };
    // Mutations: a few random bytes (the size field aside: a message that says it is longer
    // than what was sent only waits out the gate's timeout), a flag word, and now and then a
    // size the stream cannot be framed with (the gate closes the connection at once).
    for _ in 0..r.below(4) {
        let at = r.below(m.len() as u64) as usize;
        if !(4..8).contains(&at) {
            m[at] = r.next() as u8;
        }
    }
    if r.below(8) == 0 {
        m[8..12].copy_from_slice(&(r.next() as u32 & 0x3f).to_le_bytes());
    }
    if r.below(32) == 0 {
        let size = if r.below(2) == 0 {
            r.below(HEADER as u64) as u32
        } else {
            u32::MAX - r.below(1 << 20) as u32
        };
        m[4..8].copy_from_slice(&size.to_le_bytes());
    }
    m
}

/// Sends fuzzed messages over fresh connections; checks every message is answered, refused,
/// or closes the connection, and the server never panics. Returns (messages, connections).
fn fuzz(seed: u64, messages: u64) -> (u64, u64) {
    let mut r = Rng(seed | 1);
    let (mut sent, mut conns) = (0, 0);
    while sent < messages {
        let (server, mut c) = Server::start(&format!("fuzz{conns}"));
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        conns += 1;
        let mut closed = false;
        let mut last: Vec<Vec<u8>> = Vec::new();
        for id in 0..200u16 {
            if sent >= messages {
                break;
            }
            let m = fuzz_message(&mut r, id);
            sent += 1;
            let h = Header::parse(m[..HEADER].try_into().unwrap());
            last.push(m[..m.len().min(HEADER + 24)].to_vec());
            if last.len() > 4 {
                last.remove(0);
            }
            if c.write_all(&m).is_err() {
                closed = true;
                break;
            }
            // "No reply": none comes, whether the message passed or was refused; unless it
            // cannot be framed (an error reply, then the connection closes).
            let framed = h.size as usize >= HEADER && h.size <= MAX_MESSAGE;
            if framed && h.flags & NO_REPLY != 0 {
                continue;
            }
            let mut hb = [0u8; HEADER];
            if c.read_exact(&mut hb).is_err() {
                // Closed by the gate (a size it could not frame): a new connection.
                closed = true;
                break;
            }
            let rh = Header::parse(&hb);
            assert_eq!(
                rh.id, h.id,
                "the answer to this message: {rh:?}; last messages sent: {last:?}"
            );
            assert!(rh.size as usize >= HEADER && rh.size < (2 << 20), "{rh:?}");
            let mut body = vec![0u8; rh.size as usize - HEADER];
            if c.read_exact(&mut body).is_err() {
                closed = true;
                break;
            }
        }
        if !closed {
            drop(c);
        }
        // Ok (client hung up) or the gate's reason; a panic fails here.
        let _ = server.end();
    }
    (sent, conns)
}

#[test]
fn fuzzed_messages_never_panic_or_hang_the_server() {
    let seed = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_SEED", 0x5eed_b4a3_e7e2_b5e5);
    let messages = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_MESSAGES", 3000);
    let (sent, conns) = fuzz(seed, messages);
    eprintln!("fuzz: seed {seed:#x}: {sent} messages over {conns} connections, no panic");
    assert_eq!(sent, messages);
}
