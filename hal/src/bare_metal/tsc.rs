//! The TSC as a clock, its rate measured against the PIT (8254 channel 2, gated through port
//! 0x61, counting at 1 193 182 Hz).

use super::port::{inb, outb};

const PIT_HZ: u64 = 1_193_182;
/// The calibration window: 50 ms of PIT ticks (fits the 16-bit counter).
const PIT_TICKS: u16 = 59_659;

fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter: no memory, no side effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The TSC and its measured rate.
#[derive(Clone, Copy, Debug)]
pub struct Tsc {
    hz: u64,
}

impl Tsc {
    /// Measures the TSC rate: TSC ticks across 50 ms of PIT channel 2 in mode 0 (its output
    /// rises at terminal count: port 0x61 bit 5). `None` when the PIT never counted down.
    ///
    /// # Safety
    /// The caller owns the PIT's channel 2 and port 0x61 (the speaker gate).
    pub unsafe fn calibrate() -> Option<Self> {
        // SAFETY: the caller's.
        unsafe {
            let gate = inb(0x61);
            // Gate channel 2 on, speaker off; channel 2, lobyte/hibyte, mode 0, binary.
            outb(0x61, (gate & !0x02) | 0x01);
            outb(0x43, 0b1011_0000);
            let [lo, hi] = PIT_TICKS.to_le_bytes();
            outb(0x42, lo);
            outb(0x42, hi);
            let t0 = rdtsc();
            // Bounded: 2^32 polls of a port are many seconds even under emulation.
            let done = (0..u32::MAX).any(|_| inb(0x61) & 0x20 != 0);
            let t1 = rdtsc();
            outb(0x61, gate);
            if !done || t1 <= t0 {
                return None;
            }
            let hz = u128::from(t1 - t0) * u128::from(PIT_HZ) / u128::from(PIT_TICKS);
            Some(Tsc {
                hz: u64::try_from(hz).unwrap_or(u64::MAX),
            })
        }
    }

    /// Ticks per second.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Nanoseconds since the TSC started.
    pub fn now_ns(&self) -> u64 {
        let ns = u128::from(rdtsc()) * 1_000_000_000 / u128::from(self.hz.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Spins at least `ns` nanoseconds.
    pub fn delay_ns(&self, ns: u64) {
        let end = self.now_ns().saturating_add(ns);
        while self.now_ns() < end {
            core::hint::spin_loop();
        }
    }
}
