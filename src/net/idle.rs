//! A coarse clock for connections waiting between requests: one timer for
//! the whole worker instead of one for each wait. Arming a timer that is
//! due before the runtime's next wake-up makes tokio wake its own driver (a
//! write to its eventfd, then an extra round of `epoll_wait`), which each
//! keep-alive wait did, about every other request. A waiting connection
//! instead watches this clock's tick and checks its own deadlines at each:
//! they are `TICK`-coarse, which idle timeouts of seconds do not notice.
//! A change of the worker's phase (a stop) wakes every wait too
//! ([`IdleClock::wake_all`], from one task for the worker), so a wait does
//! not also register with the phase's channel: one registration per wait,
//! not two.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How often the clock ticks while a connection waits on it.
pub const TICK: Duration = Duration::from_millis(25);

#[derive(Default)]
pub struct IdleClock {
    /// Woken at each tick.
    tick: Notify,
    /// Waits in progress: the clock ticks only while there are some.
    waiting: AtomicUsize,
    /// The first wait starts a stopped clock.
    start: Notify,
    /// Ticks so far.
    ticks: std::sync::atomic::AtomicU64,
    /// The phase can no longer change (its sender is gone).
    ended: std::sync::atomic::AtomicBool,
}

impl IdleClock {
    pub fn new() -> IdleClock {
        IdleClock::default()
    }

    /// Ticks every `TICK` while some connection waits, else sleeps.
    pub async fn run(&self) {
        loop {
            if self.waiting.load(Ordering::Acquire) == 0 {
                self.start.notified().await;
                continue;
            }
            tokio::time::sleep(TICK).await;
            self.ticks.fetch_add(1, Ordering::Relaxed);
            self.tick.notify_waiters();
        }
    }

    /// Wakes every wait now, as a tick does (the worker's phase changed;
    /// `ended`: it can change no more).
    pub fn wake_all(&self, ended: bool) {
        if ended {
            self.ended.store(true, Ordering::Release);
        }
        self.tick.notify_waiters();
    }

    /// Whether the phase's sender is gone (see `wake_all`).
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// A wait on the clock: it ticks while this is held.
    pub fn wait(&self) -> Waiting<'_> {
        if self.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            self.start.notify_one();
        }
        Waiting { clock: self }
    }
}

pub struct Waiting<'a> {
    clock: &'a IdleClock,
}

impl Waiting<'_> {
    /// The next tick or `wake_all`: made before the caller checks what a
    /// wake-up would change, it misses none that comes after.
    pub fn tick(&self) -> tokio::sync::futures::Notified<'_> {
        self.clock.tick.notified()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.clock.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn ticks_while_waited_on_and_stops_after() {
        let clock = Arc::new(IdleClock::new());
        let run = tokio::spawn({
            let c = clock.clone();
            async move { c.run().await }
        });
        let start = tokio::time::Instant::now();
        {
            let w = clock.wait();
            w.tick().await;
            w.tick().await;
        }
        let took = start.elapsed();
        assert!(took >= TICK && took <= 2 * TICK + TICK / 2, "{took:?}");
        assert_eq!(clock.waiting.load(Ordering::Acquire), 0);
        // No one waits: the clock stops (at most the tick under way ends).
        let ticked = clock.ticks.load(Ordering::Relaxed);
        tokio::time::sleep(TICK * 20).await;
        assert!(clock.ticks.load(Ordering::Relaxed) <= ticked + 1);
        // And starts again for a new wait.
        let w = clock.wait();
        tokio::time::timeout(TICK * 2, w.tick())
            .await
            .expect("the clock ticks again");
        run.abort();
    }

    /// `wake_all` wakes a wait at once, long before the next tick, even one
    /// whose tick was made before `wake_all` and polled only after; and
    /// says when the phase can change no more.
    #[tokio::test(start_paused = true)]
    async fn wake_all_wakes_waits_without_a_tick() {
        let clock = Arc::new(IdleClock::new());
        let w = clock.wait();
        let early = w.tick();
        assert!(!clock.ended());
        let waiter = tokio::spawn({
            let c = clock.clone();
            async move {
                let w = c.wait();
                w.tick().await;
            }
        });
        tokio::task::yield_now().await;
        let start = tokio::time::Instant::now();
        clock.wake_all(false);
        tokio::time::timeout(TICK / 2, waiter)
            .await
            .expect("woken before a tick")
            .expect("the waiter ran");
        tokio::time::timeout(TICK / 2, early)
            .await
            .expect("a tick made before wake_all is woken by it");
        assert!(start.elapsed() < TICK);
        assert!(!clock.ended());
        clock.wake_all(true);
        assert!(clock.ended());
    }
}
