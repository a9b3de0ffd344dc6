//! Monotonic time for timeouts: an `Instant` in nanoseconds from the backend's clock and a
//! `Deadline` that says when to give up.

use core::time::Duration;

/// A point on the backend's monotonic clock, in nanoseconds since an arbitrary origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Instant(pub u64);

impl Instant {
    /// Time elapsed from `earlier` to `self` (zero if `earlier` is later).
    pub fn since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating.
    pub fn after(self, d: Duration) -> Instant {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ns))
    }
}

/// A moment after which a wait gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    /// A deadline `timeout` after `now`.
    pub fn new(now: Instant, timeout: Duration) -> Self {
        Deadline {
            at: now.after(timeout),
        }
    }

    /// True once `now` is at or past the deadline.
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_expires_at_its_instant() {
        let d = Deadline::new(Instant(1_000), Duration::from_nanos(500));
        assert!(!d.expired(Instant(1_499)));
        assert!(d.expired(Instant(1_500)));
        assert_eq!(Instant(10).since(Instant(20)), Duration::ZERO);
        assert_eq!(
            Instant(u64::MAX - 1).after(Duration::from_secs(1)),
            Instant(u64::MAX)
        );
    }
}
