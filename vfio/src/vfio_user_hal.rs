//! `VfioUserHal`: the driver's `Hal` over a vfio-user socket (rust-vmm `vfio_user::Client`),
//! without QEMU or a kernel. BAR0 accesses become region reads and writes on the socket; DMA
//! memory is one memfd mapped here and handed to the server once as a DMA map, carved into
//! allocations with a free list. Made for fast host tests of the driver against the model's
//! server (`mlx5-vfio-user`), the same server QEMU talks to.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant as StdInstant};

use bareverbs_hal::mmio::check_access;
use bareverbs_hal::{BarOffset, DmaBuf, DmaError, DmaMemory, Hal, Instant, Iova, Mmio, MmioError};
use vfio_user::Client;

use crate::error::VfioError;
use crate::free_list::FreeList;

/// IOVA of the DMA memory.
pub const VFIO_USER_IOVA: u64 = 0x1_0000_0000;
/// Allocation granule (a cache line).
const GRANULE: usize = 64;
/// BAR0 region index; config-space region index.
const BAR0: u32 = 0;
const CONFIG: u32 = 7;

fn lock(c: &Mutex<Client>) -> MutexGuard<'_, Client> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}

/// BAR0 of a vfio-user device: every access is a message on the socket.
pub struct VfioUserMmio {
    client: Arc<Mutex<Client>>,
    len: usize,
}

impl Mmio for VfioUserMmio {
    fn len(&self) -> usize {
        self.len
    }

    fn try_read32(&self, off: BarOffset) -> Result<u32, MmioError> {
        check_access(off.0, 4, self.len)?;
        let mut b = [0u8; 4];
        // A lost connection reads as a device that is gone.
        if lock(&self.client)
            .region_read(BAR0, off.0 as u64, &mut b)
            .is_err()
        {
            return Ok(u32::MAX);
        }
        Ok(u32::from_be_bytes(b))
    }

    fn try_write32(&self, off: BarOffset, val: u32) -> Result<(), MmioError> {
        check_access(off.0, 4, self.len)?;
        let _ = lock(&self.client).region_write(BAR0, off.0 as u64, &val.to_be_bytes());
        Ok(())
    }

    fn try_write64(&self, off: BarOffset, val: u64) -> Result<(), MmioError> {
        check_access(off.0, 8, self.len)?;
        let _ = lock(&self.client).region_write(BAR0, off.0 as u64, &val.to_be_bytes());
        Ok(())
    }

    // One message for the run: the server splits it into its 8-byte stores, in order.
    fn try_write64_block(&self, off: BarOffset, words: &[u64]) -> Result<(), MmioError> {
        bareverbs_hal::check_block(off.0, words.len(), self.len)?;
        let mut bytes = [0u8; 512];
        let n = 8 * words.len();
        if n > bytes.len() {
            for (i, w) in words.iter().enumerate() {
                self.try_write64(BarOffset(off.0 + 8 * i), *w)?;
            }
            return Ok(());
        }
        for (c, w) in bytes.chunks_exact_mut(8).zip(words) {
            c.copy_from_slice(&w.to_be_bytes());
        }
        let _ = lock(&self.client).region_write(BAR0, off.0 as u64, &bytes[..n]);
        Ok(())
    }
}

struct Region {
    base: NonNull<u8>,
    len: usize,
    /// The server's IOVA space for this memory.
    domain: bareverbs_hal::DmaDomain,
    free: Mutex<FreeList>,
    _memfd: File,
}

// SAFETY: the region is a shared mapping owned by this struct; its bytes are reached only
// through the VfioUserDma handles carved from it, its free list only under the mutex.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: base/len come from the mmap in VfioUserHal::connect; every handle is gone
        // (each holds an Arc to the region).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// One DMA allocation of a [`VfioUserHal`]: zeroed, aligned at its CPU address and IOVA.
pub struct VfioUserDma {
    region: Arc<Region>,
    off: usize,
    len: usize,
    reserved: usize,
}

// SAFETY: the handle owns its range exclusively; the free list is behind a mutex.
unsafe impl Send for VfioUserDma {}
// SAFETY: &VfioUserDma reveals only the pointer, length and IOVA.
unsafe impl Sync for VfioUserDma {}

// SAFETY: off..off + len was taken from the region's free list, so only this handle reaches
// it; it was zeroed when handed out; the region stays mapped while the handle lives (it holds
// the Arc); the server has the whole memfd mapped at VFIO_USER_IOVA, so the device reaches the
// same bytes at iova..iova + len; the fields never change.
unsafe impl DmaMemory for VfioUserDma {
    fn as_ptr(&self) -> NonNull<u8> {
        // SAFETY: off < region length (taken from the free list).
        unsafe { self.region.base.add(self.off) }
    }
    fn len(&self) -> usize {
        self.len
    }
    fn iova(&self) -> Iova {
        Iova(VFIO_USER_IOVA + self.off as u64)
    }
    fn domain(&self) -> bareverbs_hal::DmaDomain {
        self.region.domain
    }
}

impl Drop for VfioUserDma {
    fn drop(&mut self) {
        self.region
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .give(self.off, self.reserved);
    }
}

/// A device served over vfio-user, as a [`Hal`].
pub struct VfioUserHal {
    client: Arc<Mutex<Client>>,
    mmio: VfioUserMmio,
    region: Arc<Region>,
    start: StdInstant,
}

impl VfioUserHal {
    /// Connects to the server at `path`, gives it `dma_bytes` of DMA memory (a memfd) and
    /// enables memory decoding and bus mastering.
    ///
    /// # Errors
    /// [`VfioError::VfioUser`] when the server cannot be reached or refuses a step;
    /// [`VfioError::VfioUserMemory`] when the memory cannot be created.
    pub fn connect(path: &Path, dma_bytes: usize) -> Result<Self, VfioError> {
        let err = |what, source| VfioError::VfioUser {
            path: PathBuf::from(path),
            what,
            source,
        };
        let mut client = Client::new(path).map_err(|e| err("connect", e))?;
        let bar_len = client.region(BAR0).map_or(0, |r| r.size as usize);
        let mem_err = |source| VfioError::VfioUserMemory {
            bytes: dma_bytes,
            source,
        };
        // SAFETY: memfd_create with a static C string; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                c"bareverbs-dma".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(mem_err(std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let memfd = unsafe { File::from_raw_fd(fd) };
        memfd.set_len(dma_bytes as u64).map_err(mem_err)?;
        // Sealed against shrinking and growing (as QEMU seals its memfd backends): neither
        // side can truncate the file under the other's mapping (which would SIGBUS it).
        // SAFETY: F_ADD_SEALS on a valid fd with an integer argument.
        let sealed = unsafe {
            libc::fcntl(
                memfd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            )
        };
        if sealed != 0 {
            return Err(mem_err(std::io::Error::last_os_error()));
        }
        // SAFETY: mapping the whole memfd shared; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                dma_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(mem_err(std::io::Error::last_os_error()));
        }
        let base = NonNull::new(p.cast())
            .ok_or_else(|| mem_err(std::io::Error::other("mmap returned null")))?;
        let region = Arc::new(Region {
            domain: bareverbs_hal::DmaDomain::fresh(),
            base,
            len: dma_bytes,
            free: Mutex::new(FreeList::new(dma_bytes)),
            _memfd: memfd,
        });
        client
            .dma_map(
                0,
                VFIO_USER_IOVA,
                dma_bytes as u64,
                region._memfd.as_raw_fd(),
            )
            .map_err(|e| err("DMA map", e))?;
        let mut cmd = [0u8; 2];
        client
            .region_read(CONFIG, 4, &mut cmd)
            .map_err(|e| err("config read", e))?;
        let cmd = u16::from_le_bytes(cmd) | 0x6;
        client
            .region_write(CONFIG, 4, &cmd.to_le_bytes())
            .map_err(|e| err("config write", e))?;
        let client = Arc::new(Mutex::new(client));
        Ok(VfioUserHal {
            mmio: VfioUserMmio {
                client: client.clone(),
                len: bar_len,
            },
            client,
            region,
            start: StdInstant::now(),
        })
    }

    /// The CPU address of `len` bytes at device address `iova`, if they lie in the region.
    fn region_at(&self, iova: u64, len: usize) -> Result<NonNull<u8>, DmaError> {
        let off = iova
            .checked_sub(VFIO_USER_IOVA)
            .and_then(|o| usize::try_from(o).ok())
            .filter(|o| o.checked_add(len).is_some_and(|end| end <= self.region.len))
            .ok_or(DmaError::NotMapped { iova, len })?;
        // SAFETY: off + len <= the region's length.
        Ok(unsafe { self.region.base.add(off) })
    }

    /// Reads PCI configuration space.
    ///
    /// # Errors
    /// When the server does not answer.
    pub fn read_config(&self, offset: u64, buf: &mut [u8]) -> Result<(), vfio_user::Error> {
        lock(&self.client).region_read(CONFIG, offset, buf)
    }
}

impl Drop for VfioUserHal {
    fn drop(&mut self) {
        let _ = lock(&self.client).shutdown();
    }
}

// SAFETY: bar0 reaches the server's BAR0 for the life of self; dma_alloc returns ranges of the
// memfd the server has mapped at VFIO_USER_IOVA, zeroed, aligned to `align` at both addresses
// (the mapping is page aligned and the IOVA base 4 GiB aligned, and offsets are multiples of
// `align`); now() is std's monotonic clock.
unsafe impl Hal for VfioUserHal {
    type Mmio = VfioUserMmio;
    type Dma = VfioUserDma;

    fn bar0(&self) -> &VfioUserMmio {
        &self.mmio
    }

    /// DMA memory is the one memfd region, at `VFIO_USER_IOVA` on the device's side.
    fn dma_by_iova(&self) -> bool {
        true
    }

    fn dma_read(&self, iova: Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        let p = self.region_at(iova.0, dst.len())?;
        // SAFETY: inside the mapped region (`region_at`), DMA memory accessed atomically.
        unsafe { crate::dma_copy::read(p, dst) };
        Ok(())
    }

    fn dma_write(&self, iova: Iova, src: &[u8]) -> Result<(), DmaError> {
        let p = self.region_at(iova.0, src.len())?;
        // SAFETY: as in `dma_read`.
        unsafe { crate::dma_copy::write(p, src) };
        Ok(())
    }

    fn dma_alloc(&self, len: usize, align: usize) -> Result<DmaBuf<VfioUserDma>, DmaError> {
        if !align.is_power_of_two() || align > 4096 {
            return Err(DmaError::BadAlignment { align });
        }
        let reserved = len
            .max(1)
            .checked_next_multiple_of(GRANULE)
            .ok_or(DmaError::NoMemory { len })?;
        let off = self
            .region
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(reserved, align.max(GRANULE))
            .ok_or(DmaError::NoMemory { len })?;
        // SAFETY: off..off + reserved lies in the region (free list) and no handle reaches it.
        unsafe { self.region.base.as_ptr().add(off).write_bytes(0, len) };
        Ok(DmaBuf::new(VfioUserDma {
            region: self.region.clone(),
            off,
            len,
            reserved,
        }))
    }

    fn dma_domain(&self) -> bareverbs_hal::DmaDomain {
        self.region.domain
    }

    fn now(&self) -> Instant {
        Instant(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn delay(&self, d: Duration) {
        std::thread::sleep(d);
    }

    /// The vfio-user DEVICE_RESET message.
    fn function_reset(&self) -> Result<(), bareverbs_hal::ResetError> {
        lock(&self.client)
            .reset()
            .map_err(|_| bareverbs_hal::ResetError::Failed(0))
    }
}
