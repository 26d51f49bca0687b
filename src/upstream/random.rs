//! The one source of random numbers in a worker: the `random` balancer's seed,
//! the `keepalive_time ... jitter=` share and DNS query ids all draw from it.
//! Not for secrets. Tests fix the sequence with `seed`; temp file names are
//! not random (they count, as nginx's do) and do not come from here.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Per thread (a worker runs one): a counter hashed under keys std drew from
/// the system, so that one who sees some numbers cannot tell the next (a DNS
/// id must not be guessable off the path). The pid goes into every number:
/// after `fork`, a child's copy of its parent's keys and counter must not
/// repeat the parent's or a sibling's numbers.
struct Source {
    keys: RandomState,
    counter: Cell<u64>,
    /// Set by `seed`: a fixed, known sequence instead of the keyed one.
    fixed: Cell<bool>,
}

thread_local! {
    static SOURCE: Source = Source {
        keys: RandomState::new(),
        counter: Cell::new(0),
        fixed: Cell::new(false),
    };
}

/// The next number of this thread's sequence.
pub fn next_u64() -> u64 {
    SOURCE.with(|s| {
        let n = s.counter.get().wrapping_add(1);
        s.counter.set(n);
        if s.fixed.get() {
            return splitmix64(n);
        }
        let mut h = s.keys.build_hasher();
        h.write_u32(std::process::id());
        h.write_u64(n);
        h.finish()
    })
}

/// Tests: from now on this thread draws the same sequence for the same `n`.
#[cfg(test)]
pub fn seed(n: u64) {
    SOURCE.with(|s| {
        s.fixed.set(true);
        s.counter.set(n);
    });
}

/// splitmix64's output function: consecutive inputs, well spread outputs.
fn splitmix64(n: u64) -> u64 {
    let mut z = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_sequences_repeat() {
        seed(7);
        let a: Vec<u64> = (0..4).map(|_| next_u64()).collect();
        seed(7);
        let b: Vec<u64> = (0..4).map(|_| next_u64()).collect();
        assert_eq!(a, b);
        seed(8);
        assert_ne!(next_u64(), a[0]);
    }

    #[test]
    fn unseeded_numbers_differ_and_spread() {
        // Each test runs on its own thread: this one is not seeded.
        let v: Vec<u64> = (0..1000).map(|_| next_u64()).collect();
        let mut d = v.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), v.len());
        // Every bit is set in some numbers and clear in others.
        let or = v.iter().fold(0, |a, x| a | x);
        let and = v.iter().fold(u64::MAX, |a, x| a & x);
        assert_eq!((or, and), (u64::MAX, 0));
    }
}
