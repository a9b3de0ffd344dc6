//! MSI-X through VFIO: each vector signals an eventfd (`VFIO_DEVICE_SET_IRQS` on
//! `VFIO_PCI_MSIX_IRQ_INDEX` with `DATA_EVENTFD | ACTION_TRIGGER`; include/uapi/linux/vfio.h).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_MSIX_IRQ_INDEX,
};

use crate::error::VfioError;
use crate::sys;

/// The eventfd one MSI-X vector signals. Non-blocking: poll it, or read it with
/// [`IrqEventFd::try_read`].
#[derive(Debug)]
pub struct IrqEventFd {
    file: File,
}

impl IrqEventFd {
    /// Interrupts since the last read (and resets the count), or `None` when there were none.
    ///
    /// # Errors
    /// When the `read` fails.
    pub fn try_read(&self) -> io::Result<Option<u64>> {
        sys::eventfd_read(&self.file)
    }
}

impl AsFd for IrqEventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for IrqEventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// MSI-X vectors the device offers with eventfd signalling (0 when none).
pub(crate) fn vectors(device: &File) -> Result<u32, VfioError> {
    let info = sys::device_get_irq_info(device, VFIO_PCI_MSIX_IRQ_INDEX)
        .map_err(VfioError::step("VFIO_DEVICE_GET_IRQ_INFO"))?;
    Ok(if info.flags & VFIO_IRQ_INFO_EVENTFD != 0 {
        info.count
    } else {
        0
    })
}

/// Routes vectors `0..n` to new eventfds.
pub(crate) fn enable(device: &File, n: u32) -> Result<Vec<IrqEventFd>, VfioError> {
    let available = vectors(device)?;
    if n == 0 || n > available {
        return Err(VfioError::MsixUnavailable {
            requested: n,
            available,
        });
    }
    let fds = (0..n)
        .map(|_| sys::eventfd().map(|file| IrqEventFd { file }))
        .collect::<io::Result<Vec<_>>>()
        .map_err(VfioError::step("eventfd"))?;
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    sys::device_set_irqs(
        device,
        VFIO_PCI_MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        0,
        n,
        &raw,
    )
    .map_err(VfioError::step("VFIO_DEVICE_SET_IRQS"))?;
    Ok(fds)
}

/// Turns MSI-X off (`DATA_NONE | ACTION_TRIGGER` with count 0).
pub(crate) fn disable(device: &File) -> Result<(), VfioError> {
    sys::device_set_irqs(
        device,
        VFIO_PCI_MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
        0,
        0,
        &[],
    )
    .map_err(VfioError::step("VFIO_DEVICE_SET_IRQS"))
}
