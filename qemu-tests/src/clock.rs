//! The model's clock: virtual time for the synchronous drive (tests run instantly and the same
//! way every time) or the host's monotonic clock for the background drive.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A clock in nanoseconds since the model was created.
#[derive(Debug)]
pub enum SimClock {
    /// Time moves only when someone waits: `advance` adds to it.
    Virtual(AtomicU64),
    /// Real monotonic time.
    Real(Instant),
}

impl SimClock {
    /// A virtual clock at zero.
    pub fn virtual_clock() -> Self {
        SimClock::Virtual(AtomicU64::new(0))
    }

    /// A real clock starting now.
    pub fn real() -> Self {
        SimClock::Real(Instant::now())
    }

    /// Nanoseconds since the start.
    pub fn now_ns(&self) -> u64 {
        match self {
            SimClock::Virtual(t) => t.load(Ordering::Acquire),
            SimClock::Real(start) => u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Lets `d` pass: adds it to a virtual clock, sleeps (or spins, for short waits) on a real
    /// one.
    pub fn advance(&self, d: Duration) {
        match self {
            SimClock::Virtual(t) => {
                let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                let _ = t.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(v.saturating_add(ns))
                });
            }
            SimClock::Real(_) if d >= Duration::from_micros(50) => std::thread::sleep(d),
            SimClock::Real(_) => {
                let end = Instant::now() + d;
                while Instant::now() < end {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// True for virtual time.
    pub fn is_virtual(&self) -> bool {
        matches!(self, SimClock::Virtual(_))
    }
}
