//! The MSI-X table in BAR0 and the interrupts the device raises through it (PCI MSI-X; the
//! offsets are what ConnectX parts are commonly reported to use, RIG.md).

/// MSI-X table offset in BAR0 (what ConnectX parts are commonly reported to use; RIG.md).
pub const MSIX_TABLE_OFFSET: usize = 0x2000;
/// MSI-X PBA offset in BAR0.
pub const MSIX_PBA_OFFSET: usize = 0x3000;

/// Callback that raises an MSI-X vector.
pub type IrqSink = Box<dyn FnMut(u16) + Send>;

/// The MSI-X table as the driver wrote it, and where raised vectors go.
pub(crate) struct Msix {
    table: Vec<u8>,
    sink: Option<IrqSink>,
}

impl Msix {
    /// A zeroed table and no sink.
    pub(crate) fn new() -> Self {
        Msix {
            table: vec![0u8; 0x2000],
            sink: None,
        }
    }

    /// Whether BAR0 offset `off` falls in the table.
    pub(crate) fn covers(&self, off: usize) -> bool {
        (MSIX_TABLE_OFFSET..MSIX_TABLE_OFFSET + self.table.len()).contains(&off)
    }

    /// The dword at BAR0 offset `off` (in the table).
    pub(crate) fn read32(&self, off: usize) -> u32 {
        let i = off - MSIX_TABLE_OFFSET;
        u32::from_le_bytes([
            self.table[i],
            self.table[i + 1],
            self.table[i + 2],
            self.table[i + 3],
        ])
    }

    /// Writes the dword at BAR0 offset `off` (in the table).
    pub(crate) fn write32(&mut self, off: usize, val: u32) {
        let i = off - MSIX_TABLE_OFFSET;
        self.table[i..i + 4].copy_from_slice(&val.to_be_bytes());
    }

    /// Sets where raised vectors go.
    pub(crate) fn set_sink(&mut self, sink: Option<IrqSink>) {
        self.sink = sink;
    }

    /// Takes the sink away (a reset keeps it for the new device).
    pub(crate) fn take_sink(&mut self) -> Option<IrqSink> {
        self.sink.take()
    }

    /// Raises MSI-X vector `vector`.
    pub(crate) fn raise(&mut self, vector: u16) {
        if let Some(irq) = self.sink.as_mut() {
            irq(vector);
        }
    }
}
