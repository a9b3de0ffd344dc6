//! A seeded xorshift64* stream for randomized tests and fuzzers: reproducible from its seed,
//! no dependency, the same sequence on every machine.

/// The generator; its state is the seed at first (it must not be 0).
#[derive(Clone, Copy, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    // Not an iterator: the stream never ends and a generator reads better as `rng.next()`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 for `n` 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Heads or tails.
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 0
    }

    /// Random bytes into `b`.
    pub fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}

/// A seeded run's knob: the number in environment variable `name` (a seed, a count), or
/// `default` when it is unset or not a number. The test command runs the defaults; long runs
/// by hand set the variables.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
