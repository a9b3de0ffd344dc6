//! Time: the TSC, its rate measured against the PIT (8254 channel 2, gated through port
//! 0x61, counting at 1 193 182 Hz) once at boot.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::port::{inb, outb};

const PIT_HZ: u64 = 1_193_182;
/// The calibration window: 50 ms of PIT ticks (fits the 16-bit counter).
const PIT_TICKS: u16 = 59_659;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);

fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; no memory, no side effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Measures the TSC rate: the TSC ticks across `PIT_TICKS` of PIT channel 2 in mode 0 (its
/// output rises at terminal count, read in port 0x61 bit 5). Returns the rate in Hz, or
/// `None` when the PIT never counted down (no PIT: the caller stops).
pub fn calibrate() -> Option<u64> {
    // Gate channel 2 on, speaker off.
    let gate = inb(0x61);
    outb(0x61, (gate & !0x02) | 0x01);
    // Channel 2, lobyte/hibyte, mode 0 (interrupt on terminal count), binary.
    outb(0x43, 0b1011_0000);
    let [lo, hi] = PIT_TICKS.to_le_bytes();
    outb(0x42, lo);
    outb(0x42, hi);
    let t0 = rdtsc();
    let mut done = false;
    // Bounded: 2^32 polls of an I/O port are many seconds even under emulation.
    for _ in 0..u32::MAX {
        if inb(0x61) & 0x20 != 0 {
            done = true;
            break;
        }
    }
    let t1 = rdtsc();
    outb(0x61, gate);
    if !done || t1 <= t0 {
        return None;
    }
    let hz = (u128::from(t1 - t0) * u128::from(PIT_HZ) / u128::from(PIT_TICKS)) as u64;
    TSC_HZ.store(hz, Ordering::Relaxed);
    Some(hz)
}

/// Nanoseconds since the TSC started (monotonic: the TSC of one CPU does not go back).
pub fn now_ns() -> u64 {
    let hz = TSC_HZ.load(Ordering::Relaxed).max(1);
    (u128::from(rdtsc()) * 1_000_000_000 / u128::from(hz)) as u64
}

/// Spins at least `ns` nanoseconds.
pub fn delay_ns(ns: u64) {
    let end = now_ns().saturating_add(ns);
    while now_ns() < end {
        core::hint::spin_loop();
    }
}
