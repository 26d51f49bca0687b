//! An election by lease in shared memory: who holds it (pid), how many times
//! it changed hands (epoch) and when the holder last said it is alive
//! (heartbeat, monotonic ms). Whoever finds it free, held by a dead pid, or
//! silent for too long takes it with a compare-and-swap.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

use super::Shared;

#[repr(C)]
#[derive(Default)]
pub struct Lease {
    pid: AtomicU32,
    _pad: AtomicU32,
    epoch: AtomicU64,
    heartbeat: AtomicU64,
}

// SAFETY: repr(C), atomics only.
#[allow(unsafe_code)]
unsafe impl Shared for Lease {}

const _: () = assert!(std::mem::size_of::<Lease>() == 24);

impl Lease {
    /// The holder's pid, 0 when free.
    pub fn holder(&self) -> u32 {
        self.pid.load(Acquire)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Acquire)
    }

    /// Renews the lease for `pid`, or takes it when it is free, its holder
    /// is gone, or its heartbeat is older than `stale` ms. True when `pid`
    /// holds it afterwards.
    pub fn hold(&self, pid: u32, now: u64, stale: u64) -> bool {
        let cur = self.pid.load(Acquire);
        if cur == pid && pid != 0 {
            self.heartbeat.store(now, Release);
            return true;
        }
        let silent = now.saturating_sub(self.heartbeat.load(Acquire)) > stale;
        if (cur == 0 || silent || !super::lock::alive(cur))
            && self.pid.compare_exchange(cur, pid, AcqRel, Acquire).is_ok()
        {
            self.heartbeat.store(now, Release);
            self.epoch.fetch_add(1, AcqRel);
            return true;
        }
        false
    }

    /// Frees the lease if `pid` holds it (the master, reaping `pid`).
    pub fn release(&self, pid: u32) -> bool {
        pid != 0 && self.pid.compare_exchange(pid, 0, AcqRel, Acquire).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_renewed_stolen_when_silent_or_dead() {
        let l = Lease::default();
        let me = std::process::id();
        assert!(l.hold(me, 1000, 1500));
        assert_eq!((l.holder(), l.epoch()), (me, 1));
        // pid 1 is alive: it cannot take a fresh lease...
        assert!(!l.hold(1, 2000, 1500));
        assert!(l.hold(me, 2000, 1500), "renewed");
        // ...but takes a silent one.
        assert!(l.hold(1, 4000, 1500));
        assert_eq!((l.holder(), l.epoch()), (1, 2));
        // A holder that no longer exists loses it at once.
        let ghost = 4_194_305 + 11;
        assert!(l.release(1));
        assert!(l.hold(ghost, 5000, 1500));
        assert!(l.hold(me, 5001, 1500));
        assert_eq!(l.epoch(), 4);
        assert!(!l.release(ghost));
        assert!(l.release(me));
        assert_eq!(l.holder(), 0);
    }
}
