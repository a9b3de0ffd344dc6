//! The device's view of host memory: an address space with IOMMU-like bounds, where an access
//! to an unmapped IOVA is a reported fault, never a crash (DESIGN.md §4).

use std::fmt;

/// A DMA access the address space refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DMA {kind} of {len} bytes at IOVA {iova:#x} is not mapped")]
pub struct DmaFault {
    /// First byte of the access.
    pub iova: u64,
    /// Length of the access.
    pub len: usize,
    /// Read or write.
    pub kind: DmaKind,
}

/// Direction of a DMA access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaKind {
    /// Device reads host memory.
    Read,
    /// Device writes host memory.
    Write,
}

impl fmt::Display for DmaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DmaKind::Read => "read",
            DmaKind::Write => "write",
        })
    }
}

/// Memory as the device sees it through its IOMMU.
///
/// An access must lie inside one mapping; otherwise it fails with [`DmaFault`] and touches
/// nothing. Only the model's device side uses it: a write here lands in memory the driver
/// may be holding, which is sound only for the memory it handed to the device (queues,
/// registered regions, reached through volatile accessors), so it is not public.
pub(crate) trait AddressSpace: Send + Sync {
    /// Copies `dst.len()` bytes at `iova` into `dst`.
    ///
    /// # Errors
    /// [`DmaFault`] when any byte is unmapped.
    fn read(&self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault>;

    /// Copies `src` to `iova`.
    ///
    /// # Errors
    /// [`DmaFault`] when any byte is unmapped.
    fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaFault>;

    /// Appends `len` bytes at `iova` to `out`; on a fault `out` is left as it was.
    ///
    /// # Errors
    /// [`DmaFault`] when any byte is unmapped.
    fn read_append(&self, iova: u64, len: usize, out: &mut Vec<u8>) -> Result<(), DmaFault> {
        let at = out.len();
        out.resize(at + len, 0);
        let r = self.read(iova, &mut out[at..]);
        if r.is_err() {
            out.truncate(at);
        }
        r
    }
}

/// Typed helpers over an [`AddressSpace`] for big-endian device structures.
pub(crate) trait AddressSpaceExt: AddressSpace {
    /// Reads a big-endian u32.
    ///
    /// # Errors
    /// [`DmaFault`] when unmapped.
    fn read_be32(&self, iova: u64) -> Result<u32, DmaFault> {
        let mut b = [0u8; 4];
        self.read(iova, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Reads a big-endian u64.
    ///
    /// # Errors
    /// [`DmaFault`] when unmapped.
    fn read_be64(&self, iova: u64) -> Result<u64, DmaFault> {
        let mut b = [0u8; 8];
        self.read(iova, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Reads `len` bytes into a new vector.
    ///
    /// # Errors
    /// [`DmaFault`] when unmapped.
    fn read_vec(&self, iova: u64, len: usize) -> Result<Vec<u8>, DmaFault> {
        let mut v = vec![0u8; len];
        self.read(iova, &mut v)?;
        Ok(v)
    }
}

impl<T: AddressSpace + ?Sized> AddressSpaceExt for T {}
