//! x86 I/O ports: the serial console, the PIT and `isa-debug-exit` live there.

/// Writes `v` to I/O port `port`.
pub fn outb(port: u16, v: u8) {
    // SAFETY: an I/O port write touches no memory; the ports this image writes (COM1, the PIT,
    // port 0x61, isa-debug-exit) are the legacy devices QEMU's q35 machine has there.
    unsafe {
        core::arch::asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack, preserves_flags))
    }
}

/// Reads I/O port `port`.
pub fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: as `outb`: a port read touches no memory.
    unsafe {
        core::arch::asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack, preserves_flags))
    }
    v
}

/// Writes the 32-bit `v` to I/O port `port`.
pub fn outl(port: u16, v: u32) {
    // SAFETY: as `outb`.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") port, in("eax") v, options(nomem, nostack, preserves_flags))
    }
}
