//! Guest memory as the device sees it under vfio-user: the DMA maps QEMU sends, each backed by
//! a memfd. Every memfd is mmapped once, deduplicated by inode (QEMU sends one map per IOVA
//! range — with a vIOMMU, one per page — all from the same file); a map is then a window into
//! that mapping. DMA is refused while bus mastering is off, as on a real PCI function.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::dma::{AddressSpace, DmaFault, DmaKind};

/// Why a DMA map could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The map came without a file descriptor (guest RAM not `memory-backend-memfd,share=on`).
    #[error("DMA map at {iova:#x} has no file descriptor: start QEMU with memory-backend-memfd,share=on")]
    NoFd {
        /// IOVA of the map.
        iova: u64,
    },
    /// fstat or mmap failed.
    #[error("cannot map guest memory: {0}")]
    Io(#[from] std::io::Error),
    /// The file can still shrink (no `F_SEAL_SHRINK`): a client truncating it under the
    /// server's mapping would kill the server with SIGBUS. QEMU seals its memfd backends.
    #[error("DMA map at {iova:#x}: its file is not sealed against shrinking (F_SEAL_SHRINK)")]
    Unsealed {
        /// IOVA of the map.
        iova: u64,
    },
    /// The map reaches past the end of its file.
    #[error("DMA map {iova:#x}+{size:#x} at file offset {offset:#x} is past the end of the file")]
    OutOfFile {
        /// IOVA of the map.
        iova: u64,
        /// Size of the map.
        size: u64,
        /// Offset in the file.
        offset: u64,
    },
}

struct FileMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a FileMap is a shared mmap of guest RAM owned by GuestMemory; it is only read or
// written through volatile accesses under the GuestMemory lock.
unsafe impl Send for FileMap {}
// SAFETY: as above.
unsafe impl Sync for FileMap {}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap in map_file and are unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[derive(Clone, Copy)]
struct Window {
    size: u64,
    /// Index into `files` and offset in that file.
    file: (u64, u64),
    offset: u64,
    writable: bool,
}

#[derive(Default)]
struct Inner {
    files: HashMap<(u64, u64), FileMap>,
    windows: BTreeMap<u64, Window>,
}

/// The guest's DMA-visible memory.
#[derive(Clone, Default)]
pub struct GuestMemory {
    inner: Arc<RwLock<Inner>>,
    bus_master: Arc<AtomicBool>,
}

impl GuestMemory {
    /// No maps; bus mastering off.
    pub fn new() -> Self {
        Self::default()
    }

    /// The switch that follows the PCI command register's bus-master bit.
    pub fn bus_master(&self) -> Arc<AtomicBool> {
        self.bus_master.clone()
    }

    /// Adds a map: `size` bytes at `iova`, backed by `fd` at `offset`.
    ///
    /// # Errors
    /// [`MapError`] when the map has no fd or cannot be mapped.
    pub fn map(
        &self,
        iova: u64,
        size: u64,
        offset: u64,
        fd: Option<File>,
        writable: bool,
    ) -> Result<(), MapError> {
        let fd = fd.ok_or(MapError::NoFd { iova })?;
        // SAFETY: fstat on a valid fd into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: F_GET_SEALS on a valid fd; it only returns a value.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(MapError::Unsealed { iova });
        }
        let key = (st.st_dev, st.st_ino);
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if let std::collections::hash_map::Entry::Vacant(slot) = inner.files.entry(key) {
            let len = st.st_size as usize;
            // SAFETY: mapping a whole memfd shared; the result is checked below.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error().into());
            }
            let ptr = NonNull::new(p.cast())
                .ok_or_else(|| std::io::Error::other("mmap returned null"))?;
            slot.insert(FileMap { ptr, len });
            log::info!(
                "guest memory: mapped file dev {} inode {} ({len:#x} bytes)",
                key.0,
                key.1
            );
        }
        let flen = inner.files[&key].len as u64;
        if offset.checked_add(size).is_none_or(|end| end > flen) {
            return Err(MapError::OutOfFile { iova, size, offset });
        }
        inner.windows.insert(
            iova,
            Window {
                size,
                file: key,
                offset,
                writable,
            },
        );
        Ok(())
    }

    /// Removes every map inside `iova..iova + size`; maps that match nothing are accepted.
    pub fn unmap(&self, iova: u64, size: u64) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let end = iova.saturating_add(size);
        let gone: Vec<u64> = inner
            .windows
            .range(iova..end)
            .filter(|(a, w)| a.saturating_add(w.size) <= end)
            .map(|(a, _)| *a)
            .collect();
        for a in gone {
            inner.windows.remove(&a);
        }
    }

    /// Drops every map (device reset or disconnect); file mappings stay for reuse.
    pub fn clear(&self) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .windows
            .clear();
    }

    /// Number of maps and of distinct files mapped.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        (inner.windows.len(), inner.files.len())
    }

    fn access(
        &self,
        iova: u64,
        len: usize,
        kind: DmaKind,
        mut f: impl FnMut(*mut u8, usize, usize),
    ) -> Result<(), DmaFault> {
        let fault = DmaFault { iova, len, kind };
        if !self.bus_master.load(Ordering::Acquire) {
            return Err(fault);
        }
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        // An access may span adjacent maps (one per page under a vIOMMU): check all first.
        let mut done = 0usize;
        // (pointer, offset in the access, length) per window; an access spans one almost
        // always, so the list allocates nothing then.
        let mut pieces = crate::small_list::SmallList::<(usize, usize, usize), 4>::new();
        while done < len {
            // Checked: the address comes from the guest (a WQE, a command), any value.
            let at = iova.checked_add(done as u64).ok_or(fault)?;
            let (&base, w) = inner.windows.range(..=at).next_back().ok_or(fault)?;
            // Offsets into the window, not its end: a window may end at the last address.
            let into = at - base;
            if into >= w.size || (kind == DmaKind::Write && !w.writable) {
                return Err(fault);
            }
            let n = ((w.size - into) as usize).min(len - done);
            let fm = inner.files.get(&w.file).ok_or(fault)?;
            // In bounds of the file: map() checked offset + size <= file length.
            let p = fm.ptr.as_ptr().wrapping_add((w.offset + into) as usize);
            pieces.push((p as usize, done, n));
            done += n;
        }
        for &(p, off, n) in pieces.as_slice() {
            f(p as *mut u8, off, n);
        }
        Ok(())
    }
}

impl AddressSpace for GuestMemory {
    // Volatile, because the guest writes concurrently: bytes up to an 8-byte boundary, then
    // whole words, then the tail bytes (an eighth of the accesses of a byte loop).
    fn read(&self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        self.access(iova, dst.len(), DmaKind::Read, |p, off, n| {
            let dst = &mut dst[off..off + n];
            let head = p.align_offset(8).min(n);
            let tail_at = head + (n - head) / 8 * 8;
            for (i, d) in dst[..head].iter_mut().enumerate() {
                // SAFETY: p..p+n lies in a live shared mapping (checked by access, kept alive by
                // the read lock).
                *d = unsafe { p.add(i).read_volatile() };
            }
            for (w, d) in dst[head..tail_at].chunks_exact_mut(8).enumerate() {
                // SAFETY: as above; p + head is 8-aligned and the word lies before tail_at.
                let v = unsafe { p.add(head).cast::<u64>().add(w).read_volatile() };
                d.copy_from_slice(&v.to_ne_bytes());
            }
            for (i, d) in dst[tail_at..].iter_mut().enumerate() {
                // SAFETY: as above.
                *d = unsafe { p.add(tail_at + i).read_volatile() };
            }
        })
    }

    fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        self.access(iova, src.len(), DmaKind::Write, |p, off, n| {
            let src = &src[off..off + n];
            let head = p.align_offset(8).min(n);
            let tail_at = head + (n - head) / 8 * 8;
            for (i, s) in src[..head].iter().enumerate() {
                // SAFETY: as in read.
                unsafe { p.add(i).write_volatile(*s) };
            }
            for (w, c) in src[head..tail_at].chunks_exact(8).enumerate() {
                let v = u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
                // SAFETY: as in read.
                unsafe { p.add(head).cast::<u64>().add(w).write_volatile(v) };
            }
            for (i, s) in src[tail_at..].iter().enumerate() {
                // SAFETY: as in read.
                unsafe { p.add(tail_at + i).write_volatile(*s) };
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn memfd(len: usize) -> File {
        let f = unsealed_memfd(len);
        // Sealed against shrinking, as QEMU seals its memfd backends.
        // SAFETY: F_ADD_SEALS on a valid fd with an integer argument.
        let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        assert_eq!(r, 0);
        f
    }

    fn unsealed_memfd(len: usize) -> File {
        // SAFETY: memfd_create with a static C string; the fd is checked.
        let fd = unsafe { libc::memfd_create(c"guest".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh owned descriptor.
        let mut f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.write_all(&vec![0u8; len]).unwrap();
        f
    }

    // Shrinking a mapped file made the server's next access die of SIGBUS: a file that can
    // shrink is refused at the map (QEMU seals its memfd backends against it).
    #[test]
    fn a_file_that_can_shrink_is_refused() {
        let g = GuestMemory::new();
        let f = unsealed_memfd(0x4000);
        assert!(matches!(
            g.map(0x10_0000, 0x1000, 0, Some(f.try_clone().unwrap()), true),
            Err(MapError::Unsealed { iova: 0x10_0000 })
        ));
        assert_eq!(g.counts(), (0, 0));
        f.set_len(0).unwrap();
        let sealed = memfd(0x4000);
        g.map(
            0x10_0000,
            0x1000,
            0,
            Some(sealed.try_clone().unwrap()),
            true,
        )
        .unwrap();
        assert!(sealed.set_len(0).is_err(), "the seal holds");
    }

    #[test]
    fn a_window_at_the_top_of_the_address_space_neither_overflows_nor_wraps() {
        let f = memfd(0x10000);
        let g = GuestMemory::new();
        g.bus_master().store(true, Ordering::Release);
        let top = u64::MAX - 0xfff;
        g.map(top, 0x1000, 0, Some(f.try_clone().unwrap()), true)
            .unwrap();
        g.write(u64::MAX - 1, &[7, 8]).unwrap();
        let mut b = [0u8; 2];
        g.read(u64::MAX - 1, &mut b).unwrap();
        assert_eq!(b, [7, 8]);
        // Past the last byte: a fault, not an overflow or a wrap to address 0.
        assert!(g.write(u64::MAX - 1, &[1, 2, 3, 4]).is_err());
        assert!(g.read(u64::MAX, &mut b).is_err());
    }

    #[test]
    fn word_copies_keep_every_byte_at_any_alignment_and_across_windows() {
        let f = memfd(0x10000);
        let g = GuestMemory::new();
        g.bus_master().store(true, Ordering::Release);
        // Two windows, contiguous in IOVA space, at unrelated file offsets.
        g.map(
            0x10_0000,
            0x1000,
            0x3000,
            Some(f.try_clone().unwrap()),
            true,
        )
        .unwrap();
        g.map(
            0x10_1000,
            0x1000,
            0x8000,
            Some(f.try_clone().unwrap()),
            true,
        )
        .unwrap();
        for start in [0x10_0000u64, 0x10_0003, 0x10_0ff1, 0x10_0ff8, 0x10_0ffd] {
            for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 64, 100] {
                let src: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31) ^ 0x5a)
                    .collect();
                g.write(start, &src).unwrap();
                let mut back = vec![0u8; len];
                g.read(start, &mut back).unwrap();
                assert_eq!(back, src, "at {start:#x}, {len} bytes");
                let mut out = vec![9u8];
                g.read_append(start, len, &mut out).unwrap();
                assert_eq!(&out[1..], &src[..], "appended at {start:#x}, {len} bytes");
            }
        }
        // The bytes before and after an access are untouched.
        g.write(0x10_0100, &[0xee; 24]).unwrap();
        g.write(0x10_0104, &[1; 13]).unwrap();
        let mut b = [0u8; 24];
        g.read(0x10_0100, &mut b).unwrap();
        assert_eq!(&b[..4], &[0xee; 4]);
        assert_eq!(&b[4..17], &[1; 13]);
        assert_eq!(&b[17..], &[0xee; 7]);
    }

    #[test]
    fn maps_share_one_mmap_per_file_and_faults_outside() {
        let f = memfd(0x10000);
        let g = GuestMemory::new();
        g.bus_master().store(true, Ordering::Release);
        // Two pages of IOVA space mapped separately, contiguous, from one file.
        g.map(
            0x10_0000,
            0x1000,
            0x3000,
            Some(f.try_clone().unwrap()),
            true,
        )
        .unwrap();
        g.map(
            0x10_1000,
            0x1000,
            0x8000,
            Some(f.try_clone().unwrap()),
            true,
        )
        .unwrap();
        g.map(0x20_0000, 0x1000, 0x0, Some(f.try_clone().unwrap()), false)
            .unwrap();
        assert_eq!(g.counts(), (3, 1));
        // A write spanning both windows lands at the two file offsets.
        g.write(0x10_0ffe, &[1, 2, 3, 4]).unwrap();
        let mut b = [0u8; 4];
        g.read(0x10_0ffe, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        let mut file = [0u8; 2];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut file, 0x8000).unwrap();
        assert_eq!(file, [3, 4]);
        // Unmapped, read-only, past the file, no fd: refused.
        assert!(g.read(0x30_0000, &mut b).is_err());
        assert!(g.write(0x20_0000, &[0]).is_err());
        assert!(matches!(
            g.map(
                0x40_0000,
                0x2000,
                0xf000,
                Some(f.try_clone().unwrap()),
                true
            ),
            Err(MapError::OutOfFile { .. })
        ));
        assert!(matches!(
            g.map(0x40_0000, 0x1000, 0, None, true),
            Err(MapError::NoFd { .. })
        ));
        // Bus mastering off: every DMA faults.
        g.bus_master().store(false, Ordering::Release);
        assert!(g.read(0x10_0000, &mut b).is_err());
        g.bus_master().store(true, Ordering::Release);
        // Unmapping a range removes the maps inside it; unknown ranges are fine.
        g.unmap(0x10_0000, 0x2000);
        g.unmap(0x50_0000, 0x1000);
        assert!(g.read(0x10_0000, &mut b).is_err());
        assert_eq!(g.counts(), (1, 1));
    }
}
