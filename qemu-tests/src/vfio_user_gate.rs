//! The gate in front of the vfio-user server library (rust-vmm `vfio_user`): every message a
//! client sends is framed, checked and either refused with an error reply or passed on whole,
//! so that no message can make the library panic, block or lose the framing.
//!
//! The library trusts its client: it reads each command's fixed structure whatever the
//! header's `message_size` says (a short message blocks it for ever, a long one desynchronises
//! the stream), unwraps the VERSION string (a missing NUL panics), subtracts sizes without a
//! check, allocates what a REGION_READ's `count` asks, and refuses some commands before
//! reading their payload. The gate owns the client's socket; the library serves a private
//! socket the gate alone connects to. Message layouts: the vfio-user protocol specification
//! (QEMU docs/devel/vfio-user.rst) as the library declares them.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Bytes of the message header (`msg_id` u16, `command` u16, `message_size` u32, `flags` u32,
/// `error` u32).
pub const HEADER: usize = 16;
/// Largest REGION_READ/REGION_WRITE data the gate passes (QEMU's default
/// `max_data_xfer_size`, 1 MiB).
pub const MAX_DATA: u32 = 1 << 20;
/// Largest message: a REGION_WRITE of [`MAX_DATA`], or a VERSION with its capabilities.
pub const MAX_MESSAGE: u32 = HEADER as u32 + 16 + MAX_DATA;
/// Most file descriptors one message may carry (the library's limit).
const MAX_FDS: usize = 16;
/// How long a client may take to send the rest of a message it started.
const BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the library may take to answer.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Header flag: this message is a reply.
const FLAG_REPLY: u32 = 1;
/// Header flag: no reply wanted.
const FLAG_NO_REPLY: u32 = 1 << 4;
/// Header flag: the reply reports an error (`error` holds the errno).
const FLAG_ERROR: u32 = 1 << 5;

/// Commands (vfio-user `VFIO_USER_*`).
mod cmd {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    pub const DEVICE_SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DEVICE_RESET: u16 = 13;
}

/// What the served device has: region sizes by index, interrupt counts by index.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Size of each region (0: the region does not exist).
    pub regions: Vec<u64>,
    /// Vectors of each interrupt index.
    pub irqs: Vec<u32>,
}

/// A message header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Message id, echoed in the reply.
    pub id: u16,
    /// Command.
    pub command: u16,
    /// Bytes of the whole message, header included.
    pub size: u32,
    /// Flags.
    pub flags: u32,
    /// Error (replies).
    pub error: u32,
}

impl Header {
    /// The header in its 16 bytes (little-endian, as the protocol's hosts are).
    pub fn parse(b: &[u8; HEADER]) -> Self {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Header {
            id: u16_at(0),
            command: u16_at(2),
            size: u32_at(4),
            flags: u32_at(8),
            error: u32_at(12),
        }
    }

    /// The 16 bytes of the header.
    pub fn bytes(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0..2].copy_from_slice(&self.id.to_le_bytes());
        b[2..4].copy_from_slice(&self.command.to_le_bytes());
        b[4..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.error.to_le_bytes());
        b
    }

    fn no_reply(&self) -> bool {
        self.flags & FLAG_NO_REPLY != 0
    }
}

/// Why the gate closed a connection.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The client's socket failed, or it stopped in the middle of a message.
    #[error("client: {0}")]
    Client(io::Error),
    /// A header the stream cannot continue after (its size is impossible).
    #[error("message {id} (command {command}): size {size} cannot be framed")]
    Framing {
        /// Message id.
        id: u16,
        /// Command.
        command: u16,
        /// The size it claimed.
        size: u32,
    },
    /// The library did not answer in time, or its socket failed.
    #[error("server: {0}")]
    Server(io::Error),
}

/// Why a message is refused (its errno in the error reply).
fn refuse(e: libc::c_int) -> Result<(), u32> {
    Err(e as u32)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let lo = u64::from(u32_at(b, o));
    let hi = u64::from(u32_at(b, o + 4));
    lo | hi << 32
}

/// Checks message `h` with body `body` (the bytes after the header) and `fds` descriptors
/// against the device `lim`; the errno to refuse it with otherwise.
pub fn check(h: &Header, body: &[u8], fds: usize, lim: &Limits) -> Result<(), u32> {
    let len = body.len();
    let exact = |n: usize| {
        if len == n {
            Ok(())
        } else {
            refuse(libc::EINVAL)
        }
    };
    if h.flags & (FLAG_REPLY | FLAG_ERROR) != 0 {
        return refuse(libc::EINVAL);
    }
    // "No reply" only where the library honours it and cannot fail: posted region writes and
    // resets. It refuses the flag on the others before reading their bodies (losing the
    // framing), and answers a failed command even when told not to.
    if h.no_reply() && !matches!(h.command, cmd::REGION_WRITE | cmd::DEVICE_RESET) {
        return refuse(libc::EINVAL);
    }
    let fd_ok = match h.command {
        cmd::DMA_MAP => fds <= 1,
        cmd::DEVICE_SET_IRQS => true,
        _ => fds == 0,
    };
    if !fd_ok {
        return refuse(libc::EINVAL);
    }
    match h.command {
        cmd::VERSION => {
            // major, minor, then a NUL-terminated JSON string with no other NUL.
            let json = body.get(4..).unwrap_or(&[]);
            match json.iter().position(|&b| b == 0) {
                Some(p) if p + 1 == json.len() && std::str::from_utf8(&json[..p]).is_ok() => Ok(()),
                _ => refuse(libc::EINVAL),
            }
        }
        // argsz, flags, offset, address, size.
        cmd::DMA_MAP => {
            exact(32)?;
            let (addr, size) = (u64_at(body, 16), u64_at(body, 24));
            if addr.checked_add(size).is_none() || u64_at(body, 8).checked_add(size).is_none() {
                return refuse(libc::EINVAL);
            }
            Ok(())
        }
        // argsz, flags, address, size; no dirty-page bitmap.
        cmd::DMA_UNMAP => exact(24),
        cmd::DEVICE_GET_INFO => exact(16),
        // vfio_region_info: argsz, flags, index, cap_offset, size, offset.
        cmd::DEVICE_GET_REGION_INFO => {
            exact(32)?;
            if u32_at(body, 8) as usize >= lim.regions.len() {
                return refuse(libc::EINVAL);
            }
            Ok(())
        }
        // vfio_irq_info: argsz, flags, index, count.
        cmd::DEVICE_GET_IRQ_INFO => {
            exact(16)?;
            if u32_at(body, 8) as usize >= lim.irqs.len() {
                return refuse(libc::EINVAL);
            }
            Ok(())
        }
        // vfio_irq_set: argsz, flags, index, start, count (and its fds).
        cmd::DEVICE_SET_IRQS => {
            exact(20)?;
            let (index, start, count) = (u32_at(body, 8), u32_at(body, 12), u32_at(body, 16));
            let Some(&have) = lim.irqs.get(index as usize) else {
                return refuse(libc::EINVAL);
            };
            if start.checked_add(count).is_none_or(|end| end > have) || fds > count as usize {
                return refuse(libc::EINVAL);
            }
            Ok(())
        }
        // offset, region, count (and the data, for a write).
        cmd::REGION_READ | cmd::REGION_WRITE => {
            let (offset, region, count) = (u64_at(body, 0), u32_at(body, 8), u32_at(body, 12));
            let data = if h.command == cmd::REGION_WRITE {
                count as usize
            } else {
                0
            };
            exact(16 + data)?;
            // Bytes past a region's end read as ones and writes there are dropped (the
            // backend's rule, as a PCI read of nothing); the range itself must exist.
            if region as usize >= lim.regions.len() || count == 0 || count > MAX_DATA {
                return refuse(libc::EINVAL);
            }
            if offset.checked_add(u64::from(count)).is_none() {
                return refuse(libc::EINVAL);
            }
            Ok(())
        }
        cmd::DEVICE_RESET => exact(0),
        _ => refuse(libc::ENOTSUP),
    }
}

/// Receives up to `buf.len()` bytes and the descriptors that come with them.
fn recv_with_fds(s: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut cmsg = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cmsg) as _;
    // SAFETY: `msg` points at `iov` (into `buf`) and `cmsg`, both live and writable for their
    // stated lengths; MSG_CMSG_CLOEXEC marks received descriptors close-on-exec.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `cmsg`, with the libc
    // macros, which stay inside `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    // Every descriptor received is owned here (and closed if refused).
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other(
            "more descriptors than a message may carry",
        ));
    }
    Ok((n as usize, fds))
}

/// Sends `bytes` with `fds` in one message (the descriptors ride with the first byte).
///
/// # Errors
/// When the socket fails.
pub fn send_with_fds(s: &UnixStream, bytes: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    if fds.is_empty() {
        return (&*s).write_all(bytes);
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut cmsg = [0u64; 64];
    let space = std::mem::size_of_val(raw.as_slice());
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE of at most MAX_FDS descriptors fits `cmsg` (512 bytes).
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(space as u32) } as _;
    // SAFETY: the control buffer holds one header and `space` bytes of data (checked by the
    // caller's MAX_FDS); `raw` is live; the kernel only reads `bytes`.
    let n = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(space as u32) as _;
        std::ptr::copy_nonoverlapping(raw.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), raw.len());
        libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    (&*s).write_all(&bytes[n as usize..])
}

/// The error reply to `h`.
fn error_reply(h: &Header, errno: u32) -> [u8; HEADER] {
    Header {
        id: h.id,
        command: h.command,
        size: HEADER as u32,
        flags: FLAG_REPLY | FLAG_ERROR,
        error: errno,
    }
    .bytes()
}

/// Relays one client connection to the library's server at `inner` until the client hangs
/// up (`Ok`) or the connection has to be closed (the reason). Every message is answered: by
/// the library when it passes, with an error reply when it is refused; a message that cannot
/// be framed, or a client that stops mid-message, closes the connection.
///
/// # Errors
/// Why the connection was closed.
pub fn relay(client: &UnixStream, inner: &UnixStream, lim: &Limits) -> Result<(), GateError> {
    inner
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(GateError::Server)?;
    loop {
        client.set_read_timeout(None).map_err(GateError::Client)?;
        let mut hb = [0u8; HEADER];
        let (n, fds) = recv_with_fds(client, &mut hb).map_err(GateError::Client)?;
        if n == 0 {
            return Ok(());
        }
        client
            .set_read_timeout(Some(BODY_TIMEOUT))
            .map_err(GateError::Client)?;
        (&*client)
            .read_exact(&mut hb[n..])
            .map_err(GateError::Client)?;
        let h = Header::parse(&hb);
        if (h.size as usize) < HEADER || h.size > MAX_MESSAGE || fds.len() > MAX_FDS {
            let _ = (&*client).write_all(&error_reply(&h, libc::EINVAL as u32));
            return Err(GateError::Framing {
                id: h.id,
                command: h.command,
                size: h.size,
            });
        }
        let mut msg = vec![0u8; h.size as usize];
        msg[..HEADER].copy_from_slice(&hb);
        (&*client)
            .read_exact(&mut msg[HEADER..])
            .map_err(GateError::Client)?;
        if let Err(errno) = check(&h, &msg[HEADER..], fds.len(), lim) {
            log::warn!(
                "vfio-user: refused message {} (command {}, {} bytes, {} fds): errno {errno}",
                h.id,
                h.command,
                h.size,
                fds.len()
            );
            if !h.no_reply() {
                (&*client)
                    .write_all(&error_reply(&h, errno))
                    .map_err(GateError::Client)?;
            }
            continue;
        }
        send_with_fds(inner, &msg, &fds).map_err(GateError::Server)?;
        drop(fds);
        if h.no_reply() {
            continue;
        }
        let mut rb = [0u8; HEADER];
        (&*inner).read_exact(&mut rb).map_err(GateError::Server)?;
        let r = Header::parse(&rb);
        if (r.size as usize) < HEADER || r.size > MAX_MESSAGE {
            return Err(GateError::Server(io::Error::other(format!(
                "reply of {} bytes",
                r.size
            ))));
        }
        let mut reply = vec![0u8; r.size as usize];
        reply[..HEADER].copy_from_slice(&rb);
        (&*inner)
            .read_exact(&mut reply[HEADER..])
            .map_err(GateError::Server)?;
        (&*client).write_all(&reply).map_err(GateError::Client)?;
    }
}
