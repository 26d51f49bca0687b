//! A spinlock for shared memory whose word holds the owner's pid, as nginx's
//! `ngx_shmtx`: a waiter can see who holds it, and the master can force it
//! open when it reaps a worker that died holding it. Never a `std` or
//! `parking_lot` lock: those park threads in a per-process table.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::Shared;

#[repr(C)]
#[derive(Default)]
pub struct PidLock {
    owner: AtomicU32,
}

// SAFETY: one atomic.
#[allow(unsafe_code)]
unsafe impl Shared for PidLock {}

impl PidLock {
    pub fn try_lock(&self, pid: u32) -> Option<Guard<'_>> {
        (pid != 0)
            .then(|| {
                self.owner
                    .compare_exchange(0, pid, Ordering::Acquire, Ordering::Relaxed)
                    .ok()
            })
            .flatten()
            .map(|_| Guard { lock: self, pid })
    }

    /// One try that never waits: the lock, or None while a live process
    /// holds it. A holder that no longer exists is pushed out first, as
    /// `lock` does (the caller repairs what the lock protects).
    pub fn try_take(&self, pid: u32) -> Option<Guard<'_>> {
        if let Some(g) = self.try_lock(pid) {
            return Some(g);
        }
        let holder = self.owner();
        if holder != 0 && !alive(holder) {
            self.force_unlock(holder);
            return self.try_lock(pid);
        }
        None
    }

    /// Spins, then yields, for at most `limit`. A holder that no longer
    /// exists is pushed out (its work was half done: the caller repairs what
    /// the lock protects, as the master does on reaping it).
    pub fn lock(&self, pid: u32, limit: Duration) -> Option<Guard<'_>> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_lock(pid) {
                return Some(g);
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            let holder = self.owner();
            if holder != 0 && !alive(holder) {
                self.force_unlock(holder);
                continue;
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// As `lock`, but when it had to push out a holder that no longer
    /// exists, `repair` runs first, with the lock held, so that no one sees
    /// what the dead holder left half written.
    pub fn lock_repairing(
        &self,
        pid: u32,
        limit: Duration,
        repair: impl FnOnce(),
    ) -> Option<Guard<'_>> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_lock(pid) {
                return Some(g);
            }
            let holder = self.owner();
            if holder != 0 && !alive(holder) && self.force_unlock(holder) {
                if let Some(g) = self.try_lock(pid) {
                    repair();
                    return Some(g);
                }
                continue;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if start.elapsed() >= limit {
                return None;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The pid holding the lock, 0 when free.
    pub fn owner(&self) -> u32 {
        self.owner.load(Ordering::Acquire)
    }

    /// Opens the lock if `pid` holds it; true when it did.
    pub fn force_unlock(&self, pid: u32) -> bool {
        pid != 0
            && self
                .owner
                .compare_exchange(pid, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
    }
}

/// True unless no process `pid` exists.
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Held lock; released on drop.
pub struct Guard<'a> {
    lock: &'a PidLock,
    pid: u32,
}

impl Guard<'_> {
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.lock.force_unlock(self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_owner_at_a_time() {
        let l = PidLock::default();
        let g = l.try_lock(10).expect("free");
        assert_eq!(l.owner(), 10);
        assert!(l.try_lock(11).is_none());
        assert!(!l.force_unlock(11), "only the owner's pid opens it");
        drop(g);
        assert_eq!(l.owner(), 0);
        assert!(l.try_lock(0).is_none(), "pid 0 means free");
    }

    #[test]
    fn a_dead_owner_is_pushed_out() {
        let l = PidLock::default();
        // A pid above pid_max never exists.
        let ghost = 4_194_305 + 7;
        std::mem::forget(l.try_lock(ghost));
        let g = l.lock(std::process::id(), Duration::from_secs(1));
        assert!(g.is_some());
        assert_eq!(l.owner(), std::process::id());
    }

    #[test]
    fn one_try_pushes_out_a_dead_owner_but_not_a_live_one() {
        let l = PidLock::default();
        let ghost = 4_194_305 + 9;
        std::mem::forget(l.try_lock(ghost));
        let g = l
            .try_take(std::process::id())
            .expect("the dead owner pushed out");
        assert!(
            l.try_take(4242).is_none(),
            "a live owner (this process) keeps it"
        );
        drop(g);
        assert!(l.try_take(4242).is_some());
    }

    #[test]
    fn live_owner_times_out() {
        let l = PidLock::default();
        let _g = l.try_lock(std::process::id()).expect("free");
        assert!(l.lock(1, Duration::from_millis(20)).is_none());
    }

    #[test]
    fn threads_exclude_each_other() {
        let l = Arc::new(PidLock::default());
        let counter = Arc::new(AtomicU32::new(0));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (l, c) = (l.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        // Threads share a pid; the word only needs to be
                        // non-zero and belong to a live process (pid 1).
                        let g = l.lock(1, Duration::from_secs(5)).expect("lock");
                        let v = c.load(Ordering::Relaxed);
                        std::hint::spin_loop();
                        c.store(v + 1, Ordering::Relaxed);
                        drop(g);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().expect("thread");
        }
        assert_eq!(counter.load(Ordering::Relaxed), 8000);
    }
}
