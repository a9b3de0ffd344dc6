//! A Linux TAP interface joined to the model's Ethernet wire: what the kernel sends on the
//! interface reaches every Ethernet HCA of the fabric, and what the HCAs send reaches the
//! kernel. This is how real Linux traffic (`ping`, a UDP client in a network namespace) talks
//! to a program driving a model HCA. Needs CAP_NET_ADMIN (root).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

/// `TUNSETIFF` (`_IOW('T', 202, int)`).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `IFF_TAP | IFF_NO_PI`: Ethernet frames with no packet-information header.
const IFF_TAP_NO_PI: libc::c_short = 0x0002 | 0x1000;

/// Opens (creating if needed) the TAP interface `name`.
fn open_tap(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    // struct ifreq: the name, then the flags (a short) in the union.
    let mut req = [0u8; 40];
    req[..name.len()].copy_from_slice(name.as_bytes());
    req[16..18].copy_from_slice(&IFF_TAP_NO_PI.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq (40 bytes on Linux), which `req` is.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), TUNSETIFF as _, req.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// The TAP side of the wire: frames from the HCAs go out through `file`.
pub(crate) struct TapPort {
    file: Mutex<File>,
    /// The identity the fabric gives the TAP as a sender (so its frames do not come back).
    pub id: crate::eth::Inbox,
}

impl TapPort {
    /// Opens (creating if needed) the TAP interface `name`: the port, and a thread that hands
    /// each frame the kernel sends on the interface to `deliver` (with the port's identity)
    /// until the interface goes away or `deliver` returns false.
    ///
    /// # Errors
    /// Opening `/dev/net/tun` or creating the interface (root is needed).
    pub fn open(
        name: &str,
        mut deliver: impl FnMut(&crate::eth::Inbox, &[u8]) -> bool + Send + 'static,
    ) -> io::Result<Arc<TapPort>> {
        let file = open_tap(name)?;
        let mut reader = file.try_clone()?;
        let port = Arc::new(TapPort {
            file: Mutex::new(file),
            id: Arc::new(Mutex::new(Default::default())),
        });
        let id = port.id.clone();
        std::thread::Builder::new()
            .name(format!("tap-{name}"))
            .spawn(move || {
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match reader.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if !deliver(&id, &buf[..n]) {
                        return;
                    }
                }
            })?;
        Ok(port)
    }

    /// Gives `frame` to the kernel (a frame the interface cannot take is dropped).
    pub fn write(&self, frame: &[u8]) {
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = f.write_all(frame) {
            log::debug!("model: a frame to the TAP interface dropped: {e}");
        }
    }
}
