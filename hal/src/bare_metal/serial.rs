//! A 16550 UART, polled: 115200 baud, 8N1, FIFOs on, no interrupts.

use core::fmt;

use super::port::{inb, outb};

/// A serial port at an I/O base (COM1 is 0x3f8).
#[derive(Clone, Copy, Debug)]
pub struct Serial {
    base: u16,
}

impl Serial {
    /// The UART at `base`.
    ///
    /// # Safety
    /// A 16550 is at `base` and nothing else drives it.
    pub const unsafe fn new(base: u16) -> Self {
        Serial { base }
    }

    /// Programs the port: 115200 baud, 8 data bits, no parity, one stop bit.
    pub fn init(&self) {
        let b = self.base;
        // SAFETY: the port is ours (`new`); these are its registers.
        unsafe {
            outb(b + 1, 0x00); // no interrupts
            outb(b + 3, 0x80); // DLAB: the divisor follows
            outb(b, 0x01); // divisor 1: 115200 baud
            outb(b + 1, 0x00);
            outb(b + 3, 0x03); // 8N1
            outb(b + 2, 0xc7); // FIFOs on and cleared
            outb(b + 4, 0x03); // DTR, RTS
        }
    }

    /// Sends one byte, waiting (bounded) for room in the transmitter.
    pub fn put(&self, byte: u8) {
        // SAFETY: as `init`.
        unsafe {
            for _ in 0..100_000 {
                if inb(self.base + 5) & 0x20 != 0 {
                    break;
                }
            }
            outb(self.base, byte);
        }
    }
}

impl fmt::Write for Serial {
    /// Writes `s`, `\n` as `\r\n`.
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.put(b'\r');
            }
            self.put(b);
        }
        Ok(())
    }
}
