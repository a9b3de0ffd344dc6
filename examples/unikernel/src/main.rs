//! The bareverbs unikernel: a `no_std`, no-alloc image that QEMU boots directly (PVH) and that
//! drives two mlx5 HCAs (the project's model, as `vfio-user-pci` devices) with no Linux under
//! it. See the README's "Bare metal" section.
#![no_std]
#![no_main]

mod boot;
mod eth;
mod exit;
/// The packet appliance's protocol logic, shared with `examples/src/eth_appliance.rs`.
#[path = "../../src/appliance/responder.rs"]
mod responder;
mod run;
mod serial;

static LOGGER: serial::Logger = serial::Logger;

/// The Rust entry, called by `boot.rs` in long mode with `start_info`, the physical address of
/// PVH's `hvm_start_info`.
#[no_mangle]
extern "C" fn kmain(start_info: u32) -> ! {
    boot::paint_stack();
    serial::COM1.init();
    // The driver's log records on the console (info and above).
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    println!("bareverbs unikernel: PVH start info at {start_info:#x}");
    match run::run(u64::from(start_info)) {
        Ok(()) => {
            println!(
                "stack: {} bytes used at most, of {} KiB",
                boot::stack_used(),
                boot::STACK_BYTES / 1024
            );
            println!("bareverbs unikernel: PASS");
            exit::exit(true)
        }
        Err(e) => {
            println!("bareverbs unikernel: FAIL: {e}");
            exit::exit(false)
        }
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("PANIC: {info}");
    exit::exit(false)
}
