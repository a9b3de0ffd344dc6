//! Time for `VfioHal`: `CLOCK_MONOTONIC`, and waits that sleep when long and spin when short.

use std::time::Duration;

use bareverbs_hal::Instant;

use crate::sys;

/// Waits shorter than this spin: a sleep costs at least the 50 µs default timer slack, and
/// the driver's short waits (command polling, ring doorbells) want microseconds.
pub(crate) const SPIN_BELOW: Duration = Duration::from_micros(100);

/// The current `CLOCK_MONOTONIC` time, which never goes backwards.
pub(crate) fn now() -> Instant {
    Instant(sys::monotonic_ns())
}

/// Waits at least `d`: an absolute `clock_nanosleep` on the same clock when `d` is long, a
/// spin on the clock when it is short.
pub(crate) fn delay(d: Duration) {
    let end = sys::monotonic_ns().saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    if d >= SPIN_BELOW {
        sys::sleep_until_ns(end);
    }
    while sys::monotonic_ns() < end {
        core::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake;

    #[test]
    fn short_waits_spin_long_waits_sleep_and_both_last_long_enough() {
        fake::reset();
        let t0 = now();
        delay(Duration::from_micros(20));
        let t1 = now();
        assert!(t1.since(t0) >= Duration::from_micros(20));
        assert!(!fake::calls().iter().any(|c| c.starts_with("sleep")));
        delay(Duration::from_millis(5));
        let t2 = now();
        assert!(t2.since(t1) >= Duration::from_millis(5));
        let sleeps: Vec<String> = fake::calls()
            .into_iter()
            .filter(|c| c.starts_with("sleep"))
            .collect();
        assert_eq!(sleeps, ["sleep 5000000"]);
        assert!(t2 > t1 && t1 > t0);
    }
}
