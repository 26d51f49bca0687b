//! `worker_connections`: one slot per client connection or stream session in
//! a worker, shared by the HTTP and stream servers, so that the limit counts
//! both as nginx counts every connection. When none is free the accept loops
//! wait for one (warned once, as nginx words it) instead of taking more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::log::Level;

pub struct Slots {
    sem: Arc<Semaphore>,
    limit: usize,
    warned: AtomicBool,
}

impl Slots {
    pub fn new(limit: usize) -> Arc<Slots> {
        Arc::new(Slots {
            sem: Arc::new(Semaphore::new(limit)),
            limit,
            warned: AtomicBool::new(false),
        })
    }

    /// A slot for the next connection, waiting for one when all are taken.
    /// None once the worker stops handing them out.
    pub async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(p) = self.sem.clone().try_acquire_owned() {
            return Some(p);
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
}
