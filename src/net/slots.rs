//! `worker_connections`: one slot per client connection or stream session in
//! a worker, shared by the HTTP and stream servers, so that the limit counts
//! both as nginx counts every connection. When none is free, idle keep-alive
//! connections are closed to make room, as nginx reuses them (up to 32 at a
//! time, the oldest first); failing that the accept loops wait for one
//! (warned once, as nginx words it) instead of taking more.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::balance::Worker;
use crate::log::Level;

/// A connection's `worker_connections` slot, given back when dropped (and
/// counted in the worker's `accept_balance` share while held).
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    balance: Option<Arc<Worker>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(b) = &self.balance {
            b.leave();
        }
    }
}

pub struct Slots {
    sem: Arc<Semaphore>,
    /// This worker's count in the `accept_balance` region, if any.
    balance: Option<Arc<Worker>>,
    limit: usize,
    warned: AtomicBool,
    reusing_warned: AtomicBool,
    /// Who can close idle connections to free slots (the HTTP parker).
    idle: Mutex<Vec<Weak<dyn Reclaim>>>,
}

/// Holds idle connections it can close when slots run out.
pub trait Reclaim: Send + Sync {
    /// Closes up to `n` idle connections, the oldest first; how many.
    fn reclaim(&self, n: usize) -> usize;
}

/// How many idle connections one shortage closes (nginx's 32).
const REUSE: usize = 32;

impl Slots {
    pub fn new(limit: usize) -> Arc<Slots> {
        Slots::counted(limit, None)
    }

    /// The same, counting the slots taken in this worker's `accept_balance`
    /// share.
    pub fn counted(limit: usize, balance: Option<Arc<Worker>>) -> Arc<Slots> {
        Arc::new(Slots {
            sem: Arc::new(Semaphore::new(limit)),
            balance,
            limit,
            warned: AtomicBool::new(false),
            reusing_warned: AtomicBool::new(false),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Registers a holder of idle connections.
    pub fn reclaim_from(&self, r: Weak<dyn Reclaim>) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(r);
    }

    /// Closes idle connections to free slots; how many.
    fn reuse(&self) -> usize {
        let holders: Vec<Arc<dyn Reclaim>> = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut closed = 0;
        for h in holders {
            if closed >= REUSE {
                break;
            }
            closed += h.reclaim(REUSE - closed);
        }
        closed
    }

    /// This worker's side of `accept_balance`, if it takes part.
    pub fn balance(&self) -> Option<&Worker> {
        self.balance.as_deref()
    }

    fn slot(&self, permit: OwnedSemaphorePermit) -> Slot {
        if let Some(b) = &self.balance {
            b.enter();
        }
        Slot {
            _permit: permit,
            balance: self.balance.clone(),
        }
    }

    /// A slot if one is free now (a UDP datagram cannot wait for one).
    pub fn try_acquire(&self) -> Option<Slot> {
        let p = self.sem.clone().try_acquire_owned().ok()?;
        Some(self.slot(p))
    }

    /// A slot for the next connection, waiting for one when all are taken.
    /// None once the worker stops handing them out.
    pub async fn acquire(&self) -> Option<Slot> {
        if let Some(s) = self.try_acquire() {
            return Some(s);
        }
        if self.reuse() > 0 {
            if !self.reusing_warned.swap(true, Ordering::Relaxed) {
                crate::log!(
                    Level::Warn,
                    "{} worker_connections are not enough, reusing connections",
                    self.limit
                );
            }
            if let Some(s) = self.try_acquire() {
                return Some(s);
            }
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            crate::log!(
                Level::Warn,
                "{} worker_connections are not enough, waiting for a free one",
                self.limit
            );
        }
        let p = self.sem.clone().acquire_owned().await.ok()?;
        Some(self.slot(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slot_comes_back_when_its_holder_goes() {
        let s = Slots::new(1);
        let first = s.acquire().await;
        assert!(first.is_some());
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.acquire().await.is_some() }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(first);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test]
    async fn slots_held_are_counted_in_the_balance_until_dropped() {
        let b = Arc::new(crate::net::balance::Balance::heap(2).unwrap());
        let s = Slots::counted(2, b.worker(1));
        let w = s.balance().unwrap();
        let first = s.try_acquire();
        let second = s.acquire().await;
        assert!(first.is_some() && second.is_some());
        assert_eq!(w.held(), 2);
        assert!(s.try_acquire().is_none());
        assert_eq!(w.held(), 2, "a slot not given is not counted");
        drop(first);
        assert_eq!(w.held(), 1);
        drop(second);
        assert_eq!(w.held(), 0);
        assert!(Slots::new(1).balance().is_none());
    }

    /// Holds one slot as an idle connection would, until reclaimed.
    struct Holder(Mutex<Option<Slot>>);

    impl Reclaim for Holder {
        fn reclaim(&self, _n: usize) -> usize {
            usize::from(self.0.lock().unwrap().take().is_some())
        }
    }

    #[tokio::test]
    async fn an_idle_holder_gives_its_slot_up_when_none_is_free() {
        let s = Slots::new(1);
        let idle = Arc::new(Holder(Mutex::new(s.acquire().await)));
        let weak: Weak<dyn Reclaim> = Arc::downgrade(&(idle.clone() as Arc<dyn Reclaim>));
        s.reclaim_from(weak);
        assert!(
            s.acquire().await.is_some(),
            "the idle one was closed for it"
        );
        assert!(idle.0.lock().unwrap().is_none());
    }
}
