//! The serial console: COM1 (a 16550 at I/O port 0x3f8), 115200 8N1, polled. The driver's
//! `log` records come here too ([`Logger`]).

use core::fmt::{self, Write};

use crate::port::{inb, outb};

const COM1: u16 = 0x3f8;

/// Programs COM1: 115200 baud, 8 data bits, no parity, one stop bit, FIFOs on, no interrupts.
pub fn init() {
    outb(COM1 + 1, 0x00); // no interrupts
    outb(COM1 + 3, 0x80); // DLAB: the divisor follows
    outb(COM1, 0x01); // divisor 1: 115200 baud
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03); // 8N1
    outb(COM1 + 2, 0xc7); // FIFOs on and cleared
    outb(COM1 + 4, 0x03); // DTR, RTS
}

fn put(b: u8) {
    // Transmit holding register empty (LSR bit 5); bounded, so a missing UART cannot hang us.
    for _ in 0..100_000 {
        if inb(COM1 + 5) & 0x20 != 0 {
            break;
        }
    }
    outb(COM1, b);
}

/// The console as a `fmt::Write`; `\n` goes out as `\r\n`.
pub struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                put(b'\r');
            }
            put(b);
        }
        Ok(())
    }
}

/// `print!` to the console.
#[macro_export]
macro_rules! print {
    ($($t:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::serial::Console, format_args!($($t)*));
    }};
}

/// `println!` to the console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($t:tt)*) => {{ $crate::print!($($t)*); $crate::print!("\n"); }};
}

/// The driver's log shim (`bareverbs` with feature `log`) on the console: one line per record,
/// `LEVEL target: message`.
pub struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            crate::println!("{} {}: {}", r.level(), r.target(), r.args());
        }
    }

    fn flush(&self) {}
}
