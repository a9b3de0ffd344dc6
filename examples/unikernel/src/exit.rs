//! Leaving QEMU with a status: the `isa-debug-exit` device (`-device
//! isa-debug-exit,iobase=0xf4,iosize=0x04`). Writing `v` makes QEMU exit with status
//! `(v << 1) | 1`: 1 for success (`v` = 0), 3 for a failure (`v` = 1).

use crate::port::outl;

const DEBUG_EXIT: u16 = 0xf4;

/// Ends the run: `ok` gives QEMU status 1, a failure status 3. Prints the rig's `GUEST-DONE`
/// line first. Without the device (another machine), halts.
pub fn exit(ok: bool) -> ! {
    crate::println!("GUEST-DONE mode=unikernel rc={}", u8::from(!ok));
    outl(DEBUG_EXIT, u32::from(!ok));
    loop {
        // SAFETY: `cli; hlt` stops this CPU; nothing runs after it.
        unsafe { core::arch::asm!("cli", "hlt", options(nomem, nostack)) }
    }
}
