//! A sequence lock for publishing in shared memory: the writer (holding a
//! [`PidLock`](super::PidLock)) makes the counter odd, writes, and makes it
//! even; a reader notes the counter, copies, and keeps the copy only if the
//! counter did not move. Readers never block and never write. The data is
//! atomics only (see [`Shared`](super::Shared)), so a torn read is a wasted
//! copy, not undefined behaviour. If a writer dies mid-write the master
//! makes the counter even again ([`SeqLock::repair`]); the data it guarded
//! must then be republished by its owner.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use super::{Guard, Shared};

#[repr(C)]
#[derive(Default)]
pub struct SeqLock {
    seq: AtomicU64,
}

// SAFETY: one atomic.
#[allow(unsafe_code)]
unsafe impl Shared for SeqLock {}

impl SeqLock {
    /// The counter before a read; None while a write is in progress.
    pub fn read_begin(&self) -> Option<u64> {
        let s = self.seq.load(Ordering::Acquire);
        (s & 1 == 0).then_some(s)
    }

    /// True when what was read since `read_begin` returned `start` is whole.
    pub fn read_valid(&self, start: u64) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == start
    }

    /// Runs `write` as one publication. The guard proves the writer lock is
    /// held; its pid is not checked here.
    pub fn write<R>(&self, _writer: &Guard<'_>, write: impl FnOnce() -> R) -> R {
        self.begin();
        let r = write();
        self.end();
        r
    }

    fn begin(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s | 1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    fn end(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store((s | 1) + 1, Ordering::Release);
    }

    /// The counter now (odd while writing).
    pub fn current(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// After a writer died: makes an odd counter even (a new value, so every
    /// reader rebuilds). True when it had to.
    pub fn repair(&self) -> bool {
        let s = self.seq.load(Ordering::Acquire);
        s & 1 == 1
            && self
                .seq
                .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PidLock, Region};
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// A seqlock and eight words that a writer always sets all alike.
    fn words(r: &Region) -> (&SeqLock, &PidLock, &[AtomicU64]) {
        (
            r.get::<SeqLock>(0).expect("seq"),
            r.get::<PidLock>(8).expect("lock"),
            r.slice::<AtomicU64>(16, 8).expect("data"),
        )
    }

    #[test]
    fn readers_never_see_a_torn_list() {
        let region = Arc::new(Region::heap(128));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (region, stop) = (region.clone(), stop.clone());
            std::thread::spawn(move || {
                let (seq, lock, data) = words(&region);
                let mut v = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    v += 1;
                    let g = lock.try_lock(1).expect("only writer");
                    seq.write(&g, || {
                        for w in data {
                            w.store(v, Ordering::Relaxed);
                        }
                    });
                }
                v
            })
        };
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let region = region.clone();
                std::thread::spawn(move || {
                    let (seq, _, data) = words(&region);
                    let (mut whole, mut torn_rejected) = (0u64, 0u64);
                    while whole < 20_000 {
                        let Some(start) = seq.read_begin() else {
                            continue;
                        };
                        let copy: Vec<u64> =
                            data.iter().map(|w| w.load(Ordering::Relaxed)).collect();
                        if seq.read_valid(start) {
                            assert!(copy.iter().all(|&x| x == copy[0]), "torn: {copy:?}");
                            whole += 1;
                        } else {
                            torn_rejected += 1;
                        }
                    }
                    torn_rejected
                })
            })
            .collect();
        for r in readers {
            r.join().expect("reader");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(writer.join().expect("writer") > 0);
    }

    #[test]
    fn repair_makes_an_odd_counter_even() {
        let l = SeqLock::default();
        assert!(!l.repair());
        l.begin();
        assert!(l.read_begin().is_none());
        assert!(l.repair());
        let s = l.read_begin().expect("even again");
        assert_eq!(s, 2);
    }

    /// A child process takes the writer lock, starts a write and is killed;
    /// the parent (as the master does on reaping it) opens the lock and
    /// repairs the counter, and a new writer can publish.
    #[test]
    #[allow(unsafe_code)]
    fn killed_writer_is_repaired_by_the_parent() {
        use nix::sys::signal::{Signal, kill};
        use nix::sys::wait::{WaitStatus, waitpid};
        use nix::unistd::{ForkResult, fork};
        let region = Region::create("seqlock-test", 4096).expect("memfd");
        let (seq, lock, data) = words(&region);
        // SAFETY: the child only touches atomics in the shared mapping and
        // then waits to be killed; it never returns into the test harness.
        match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                let me = std::process::id();
                if let Some(g) = lock.try_lock(me) {
                    seq.begin();
                    data[0].store(99, Ordering::Relaxed);
                    std::mem::forget(g);
                }
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            }
            ForkResult::Parent { child } => {
                let pid = child.as_raw() as u32;
                let t0 = std::time::Instant::now();
                while lock.owner() != pid || seq.read_begin().is_some() {
                    assert!(t0.elapsed().as_secs() < 5, "child never locked");
                    std::thread::yield_now();
                }
                kill(child, Signal::SIGKILL).expect("kill");
                assert!(matches!(
                    waitpid(child, None),
                    Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _))
                ));
                // What the master does when it reaps the writer.
                assert!(lock.force_unlock(pid));
                assert!(seq.repair());
                let start = seq.read_begin().expect("readable again");
                let g = lock.try_lock(std::process::id()).expect("free again");
                seq.write(&g, || data[0].store(1, Ordering::Relaxed));
                drop(g);
                assert!(seq.read_begin().is_some_and(|s| s > start));
                assert_eq!(data[0].load(Ordering::Relaxed), 1);
            }
        }
    }
}
