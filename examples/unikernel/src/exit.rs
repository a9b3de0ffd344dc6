//! Leaving QEMU with a status through `isa-debug-exit` (`-device
//! isa-debug-exit,iobase=0xf4,iosize=0x04`): QEMU exits 1 for success, 3 for a failure.

use bareverbs_hal::bare_metal::debug_exit;

/// Ends the run after the rig's `GUEST-DONE` line.
pub fn exit(ok: bool) -> ! {
    crate::println!("GUEST-DONE mode=unikernel rc={}", u8::from(!ok));
    // SAFETY: q35 with the rig's `-device isa-debug-exit,iobase=0xf4` has it there; without
    // the device port 0xf4 is unused.
    unsafe { debug_exit(0xf4, u32::from(!ok)) }
}
