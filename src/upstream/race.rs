//! `proxy_connect_race`: connection attempts that run side by side. The
//! first attempt starts alone; when none has finished after the race delay,
//! the caller may start another (to the next peer its balancer picks). The
//! first to succeed wins; an attempt that fails while another is still
//! running is reported and the race goes on. The losers still running are
//! never used, but may be left to finish in the background (`finish`), so
//! that a peer whose connect fails is known to have failed.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;

/// How a race ended.
pub enum Ended<T, E> {
    /// Attempt `k` succeeded.
    Won(usize, T),
    /// Attempt `k` failed and nothing else was running.
    Lost(usize, E),
}

/// Attempts in flight, numbered in the order they started. Dropping it
/// aborts the losers (a `JoinSet` aborts its tasks when dropped): their
/// connects stop and their sockets close.
pub struct Race<T, E> {
    set: JoinSet<(usize, Result<T, E>)>,
    started: usize,
}

impl<T: Send + 'static, E: Send + 'static> Default for Race<T, E> {
    fn default() -> Self {
        Race {
            set: JoinSet::new(),
            started: 0,
        }
    }
}

impl<T: Send + 'static, E: Send + 'static> Race<T, E> {
    /// Starts an attempt; its number.
    pub fn start(&mut self, attempt: impl Future<Output = Result<T, E>> + Send + 'static) -> usize {
        let k = self.started;
        self.started += 1;
        self.set.spawn(async move { (k, attempt.await) });
        k
    }

    /// The first attempt, raced (see `run`) when there is a `delay`;
    /// without one it runs in the caller's task and nothing else starts.
    pub async fn first(
        &mut self,
        attempt: impl Future<Output = Result<T, E>> + Send + 'static,
        delay: Option<Duration>,
        more: impl FnMut(&mut Self) -> bool,
        failed: impl FnMut(usize, E),
    ) -> Option<Ended<T, E>> {
        match delay {
            None => Some(match attempt.await {
                Ok(t) => Ended::Won(0, t),
                Err(e) => Ended::Lost(0, e),
            }),
            Some(_) => {
                self.start(attempt);
                self.run(delay, more, failed).await
            }
        }
    }

    /// Lets the attempts still running finish in a task of their own and
    /// hands each outcome to `done` (a connection that completes late is
    /// the caller's to close).
    pub fn finish(mut self, mut done: impl FnMut(usize, Result<T, E>) + Send + 'static) {
        if self.set.is_empty() {
            return;
        }
        tokio::spawn(async move {
            while let Some(next) = self.set.join_next().await {
                if let Ok((k, result)) = next {
                    done(k, result);
                }
            }
        });
    }

    /// Runs the race. Each time `delay` passes with no attempt finished,
    /// `more` may start another (it says whether it did; once it did not,
    /// it is not asked again). `failed` hears of attempts that failed while
    /// others were still running.
    pub async fn run(
        &mut self,
        delay: Option<Duration>,
        mut more: impl FnMut(&mut Self) -> bool,
        mut failed: impl FnMut(usize, E),
    ) -> Option<Ended<T, E>> {
        let mut delay = delay;
        loop {
            let next = match delay {
                Some(d) => match tokio::time::timeout(d, self.set.join_next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        if !more(self) {
                            delay = None;
                        }
                        continue;
                    }
                },
                None => self.set.join_next().await,
            };
            // A panicked attempt counts as nothing; an empty set ends it.
            let (k, result) = match next? {
                Ok(done) => done,
                Err(_) => continue,
            };
            match result {
                Ok(t) => return Some(Ended::Won(k, t)),
                Err(e) if self.set.is_empty() => return Some(Ended::Lost(k, e)),
                Err(e) => failed(k, e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    // Paused time: sleeps end when the runtime has nothing else to do, so
    // these tests check the schedule to the millisecond and take no time.

    #[tokio::test(start_paused = true)]
    async fn a_slow_first_attempt_loses_to_a_second_at_the_delay() {
        let mut race: Race<&str, &str> = Race::default();
        race.start(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok("slow")
        });
        let began = Instant::now();
        let mut asked = Vec::new();
        let end = race
            .run(
                Some(Duration::from_millis(20)),
                |r| {
                    asked.push(began.elapsed());
                    r.start(async { Ok("fast") });
                    true
                },
                |_, _| {},
            )
            .await;
        assert!(matches!(end, Some(Ended::Won(1, "fast"))));
        assert_eq!(asked, vec![Duration::from_millis(20)]);
        assert_eq!(began.elapsed(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_reported_until_the_last() {
        let mut race: Race<(), u32> = Race::default();
        race.start(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Err(1)
        });
        let began = Instant::now();
        let mut seen = Vec::new();
        let end = race
            .run(
                Some(Duration::from_millis(10)),
                |r| {
                    if r.started < 2 {
                        r.start(async {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            Err(2)
                        });
                        true
                    } else {
                        false
                    }
                },
                |k, e| seen.push((k, e, began.elapsed())),
            )
            .await;
        // The first fails at 50 ms while the second runs; the second,
        // started at 10 ms, fails last at 110 ms.
        assert_eq!(seen, vec![(0, 1, Duration::from_millis(50))]);
        assert!(matches!(end, Some(Ended::Lost(1, 2))));
        assert_eq!(began.elapsed(), Duration::from_millis(110));
    }

    #[tokio::test(start_paused = true)]
    async fn losers_finish_in_the_background() {
        let mut race: Race<&str, &str> = Race::default();
        race.start(async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Err("timed out")
        });
        let end = race
            .run(
                Some(Duration::from_millis(10)),
                |r| {
                    r.start(async { Ok("fast") });
                    true
                },
                |_, _| {},
            )
            .await;
        assert!(matches!(end, Some(Ended::Won(1, "fast"))));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        race.finish(move |k, r| {
            let _ = tx.send((k, r));
        });
        // The loser's outcome arrives when its own time is up.
        assert_eq!(rx.recv().await, Some((0, Err("timed out"))));
        assert_eq!(rx.recv().await, None, "nothing else, and the task ended");
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_delay_the_first_attempt_runs_alone() {
        let mut race: Race<(), &str> = Race::default();
        race.start(async { Err("refused") });
        let end = race.run(None, |_| panic!("not asked"), |_, _| {}).await;
        assert!(matches!(end, Some(Ended::Lost(0, "refused"))));
    }
}
