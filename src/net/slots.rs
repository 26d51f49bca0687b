//! `worker_connections`: one slot per client connection or stream session in
//! a worker, shared by the HTTP and stream servers, so that the limit counts
//! both as nginx counts every connection. When none is free, idle keep-alive
//! connections are closed to make room, as nginx reuses them (up to 32 at a
//! time, the oldest first); failing that the accept loops wait for one
//! (warned once, as nginx words it) instead of taking more.
//!
//! The slots also say when a worker holds more than its share of its
//! generation's connections (`ahead`): its accept loops then leave the next
//! connection to the other workers for a moment (`net::accept`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::log::Level;

pub struct Slots {
    sem: Arc<Semaphore>,
    limit: usize,
    warned: AtomicBool,
    reusing_warned: AtomicBool,
    /// Who can close idle connections to free slots (the HTTP parker).
    idle: Mutex<Vec<Weak<dyn Reclaim>>>,
    /// The generation's workers, and what counts their connections.
    spread: OnceLock<(usize, Arc<dyn Total>)>,
}

/// The connections every worker of a generation holds (the shared
/// `stub_status` counters).
pub trait Total: Send + Sync {
    fn total(&self) -> u64;
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
        Arc::new(Slots {
            sem: Arc::new(Semaphore::new(limit)),
            limit,
            warned: AtomicBool::new(false),
            reusing_warned: AtomicBool::new(false),
            idle: Mutex::new(Vec::new()),
            spread: OnceLock::new(),
        })
    }

    /// Has `ahead` compare this worker's connections with `total`'s, over
    /// `workers` workers (once; with one worker, never).
    pub fn spread_over(&self, workers: usize, total: Arc<dyn Total>) {
        if workers > 1 {
            let _ = self.spread.set((workers, total));
        }
    }

    /// Slots taken: this worker's connections and sessions.
    pub fn in_use(&self) -> usize {
        self.limit.saturating_sub(self.sem.available_permits())
    }

    /// Whether this worker holds more than its share of the generation's
    /// connections and one more (`mine > total / workers + 1`).
    pub fn ahead(&self) -> bool {
        self.spread
            .get()
            .is_some_and(|(workers, total)| ahead(self.in_use(), total.total(), *workers))
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

    /// A slot if one is free now (a UDP datagram cannot wait for one).
    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.sem.clone().try_acquire_owned().ok()
    }

    /// A slot for the next connection, waiting for one when all are taken.
    /// None once the worker stops handing them out.
    pub async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(p) = self.sem.clone().try_acquire_owned() {
            return Some(p);
        }
        if self.reuse() > 0 {
            if !self.reusing_warned.swap(true, Ordering::Relaxed) {
                crate::log!(
                    Level::Warn,
                    "{} worker_connections are not enough, reusing connections",
                    self.limit
                );
            }
            if let Ok(p) = self.sem.clone().try_acquire_owned() {
                return Some(p);
            }
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            crate::log!(
                Level::Warn,
                "{} worker_connections are not enough, waiting for a free one",
                self.limit
            );
        }
        self.sem.clone().acquire_owned().await.ok()
    }
}

fn ahead(mine: usize, total: u64, workers: usize) -> bool {
    (mine as u64).saturating_mul(workers as u64) > total.saturating_add(workers as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(std::sync::atomic::AtomicU64);

    impl Total for Fixed {
        fn total(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn ahead_past_its_share_and_one() {
        // Two workers: 3 of 3 is ahead, 2 of 2 and 3 of 4 are not.
        assert!(!ahead(0, 0, 2));
        assert!(!ahead(2, 2, 2));
        assert!(ahead(3, 3, 2));
        assert!(!ahead(3, 4, 2));
        assert!(ahead(4, 5, 2));
        // Four workers: 3 of 4 is ahead (a share of 1), 3 of 8 is not.
        assert!(ahead(3, 4, 4));
        assert!(!ahead(3, 8, 4));
        // Counters read while another worker's connection ended: never a
        // panic, whatever the numbers.
        assert!(ahead(usize::MAX, 0, 2));
        assert!(!ahead(0, u64::MAX, usize::MAX));
    }

    #[tokio::test]
    async fn ahead_counts_the_slots_taken_against_the_total() {
        let s = Slots::new(10);
        let total = Arc::new(Fixed(std::sync::atomic::AtomicU64::new(0)));
        let held: Vec<_> = (0..3).filter_map(|_| s.try_acquire()).collect();
        assert_eq!(s.in_use(), 3);
        // Not spread yet: never ahead.
        total.0.store(3, Ordering::Relaxed);
        assert!(!s.ahead());
        // One worker: nothing to spread over.
        s.spread_over(1, total.clone());
        assert!(!s.ahead());
        let s = Slots::new(10);
        let held2: Vec<_> = (0..3).filter_map(|_| s.try_acquire()).collect();
        s.spread_over(2, total.clone());
        assert!(s.ahead());
        // Another worker took two: 3 of 5 is a share and one.
        total.0.store(5, Ordering::Relaxed);
        assert!(!s.ahead());
        drop((held, held2));
        assert_eq!(s.in_use(), 0);
    }

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

    /// Holds one slot as an idle connection would, until reclaimed.
    struct Holder(Mutex<Option<OwnedSemaphorePermit>>);

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
