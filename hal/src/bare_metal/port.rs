//! x86 I/O ports, and QEMU's `isa-debug-exit` device.

/// Writes `v` to I/O port `port`.
///
/// # Safety
/// The caller owns the device at `port` (nothing else drives it) and the write cannot make
/// that device touch memory the program uses.
pub(crate) unsafe fn outb(port: u16, v: u8) {
    // SAFETY: an `out` touches no memory of this program; the device is the caller's.
    unsafe {
        core::arch::asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack, preserves_flags))
    }
}

/// Reads I/O port `port`.
///
/// # Safety
/// As [`outb`].
pub(crate) unsafe fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: as `outb`.
    unsafe {
        core::arch::asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack, preserves_flags))
    }
    v
}

/// Ends the run through QEMU's `isa-debug-exit` at `port` (`-device
/// isa-debug-exit,iobase=0xf4,iosize=0x04`): QEMU exits with status `(code << 1) | 1`. Without
/// the device the write does nothing and the CPU halts.
///
/// # Safety
/// `port` is the debug-exit device's (or unused).
pub unsafe fn debug_exit(port: u16, code: u32) -> ! {
    // SAFETY: the caller names the device; an `out` touches no memory.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") port, in("eax") code, options(nomem, nostack, preserves_flags))
    }
    loop {
        // SAFETY: `cli; hlt` stops this CPU; nothing runs after it.
        unsafe { core::arch::asm!("cli", "hlt", options(nomem, nostack)) }
    }
}
