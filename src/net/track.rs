//! The worker's open connections, counted for a graceful stop: each client
//! connection (a tunnel it became included) and stream session holds a
//! `Guard` for as long as it lives (wherever it lives: a task, a parked record), and the drain waits
//! until none is left. Shared by the HTTP server and the stream proxy.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

#[derive(Default)]
pub struct Tracker {
    active: AtomicUsize,
    drained: Notify,
}

/// One open connection, counted until dropped.
pub struct Guard(Arc<Tracker>);

impl Tracker {
    pub fn new() -> Arc<Tracker> {
        Arc::new(Tracker::default())
    }

    /// Counts a connection in.
    pub fn enter(self: &Arc<Self>) -> Guard {
        self.active.fetch_add(1, Ordering::AcqRel);
        Guard(self.clone())
    }

    /// Connections open now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Ends when none is open (checked again at each wake-up).
    pub async fn drained(&self) {
        loop {
            let notified = self.drained.notified();
            if self.active() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drained_when_the_last_guard_goes() {
        let t = Tracker::new();
        let a = t.enter();
        let b = t.enter();
        assert_eq!(t.active(), 2);
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { t.drained().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(b);
        waiter.await.unwrap();
        assert_eq!(t.active(), 0);
        // Nothing open: at once.
        t.drained().await;
    }
}
