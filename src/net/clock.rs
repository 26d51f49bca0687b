//! A connection task's clock, read once each time the task is polled, as
//! nginx reads its clock once per turn of its event loop (`ngx_time_update`)
//! and every timer and timing of that turn uses the one reading.
//!
//! A proxied request used to read the clock about twenty times: its start,
//! each upstream attempt's timings, the keep-alive cache's ages, and every
//! timer (`tokio::time::sleep` and `timeout` read it to make a deadline).
//! In a task polled through [`clocked`], [`now`] returns the reading taken
//! when the poll began, and [`sleep`] and [`timeout`] make their deadlines
//! from it; outside one, [`now`] reads the clock. A deadline from a reading
//! taken earlier in the same poll is at most that poll's own run time early,
//! as nginx's are.
//!
//! In a runtime that says when its turns begin ([`turn_began`], a worker's
//! `on_thread_unpark`), the polls of one turn share a reading, up to
//! [`SHARED`] of them: after each wait for events, the first poll reads the
//! clock and the next ones use its reading. A proxied request's three polls
//! (its request read, its response read, its response written at the
//! turn's end) each read the clock before: with [`mono_ms`] for the peers'
//! times, a worker at 8 connections read it 6.0 times a request, now 1.5
//! (nginx 0.4), and the reads' share of its user time went from 6.7% to 4.0%
//! (`perf`). A reading is at most [`SHARED`] polls' run time old, as nginx's
//! is at most one turn's events' run time old.

use std::cell::Cell;
use std::future::{Future, IntoFuture};
use std::time::{Duration, Instant};

thread_local! {
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
    static TURN: Cell<Turn> = const { Cell::new(Turn::Untracked) };
    /// The last reading [`mono_ms`] turned into milliseconds, and what it
    /// made of it.
    static MONO: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
}

/// Polls of a turn that may share its reading.
pub const SHARED: u8 = 16;

/// What this thread knows of its event loop's turns.
#[derive(Clone, Copy)]
enum Turn {
    /// Its runtime does not say when a turn begins: every poll reads.
    Untracked,
    /// A turn began and nothing has read the clock since.
    Begun,
    /// This turn's reading, and how many more polls may use it.
    Read(Instant, u8),
}

/// A new turn of this thread's event loop begins (it waited for events):
/// the next poll of a clocked task reads the clock, and the polls after it
/// in the same turn use that reading. For the runtime's
/// `on_thread_unpark`.
pub fn turn_began() {
    TURN.with(|t| t.set(Turn::Begun));
}

/// The reading for a poll that begins: this turn's, or a new one.
fn for_poll() -> Instant {
    TURN.with(|turn| match turn.get() {
        Turn::Untracked => read(),
        Turn::Read(at, left) if left > 0 => {
            turn.set(Turn::Read(at, left - 1));
            at
        }
        Turn::Begun | Turn::Read(..) => {
            let at = read();
            turn.set(Turn::Read(at, SHARED - 1));
            at
        }
    })
}

/// The time: the reading taken when the current task's poll began, if it
/// runs through [`clocked`], or the clock's own.
pub fn now() -> Instant {
    NOW.with(Cell::get).unwrap_or_else(read)
}

/// Milliseconds on CLOCK_MONOTONIC, the clock every process shares (a time
/// one worker writes into a zone means the same to the others), from
/// [`now`]: in a clocked task, the poll's reading, with no read of its own
/// (a proxied request read the clock twice more for its peer's bookkeeping).
/// std's `Instant` is CLOCK_MONOTONIC on Linux; where the two stand against
/// each other is read once per process, in nanoseconds (whole milliseconds
/// would lag a direct reading by up to one). The calls of one poll share
/// its reading, and so one conversion: a proxied request's peer
/// bookkeeping asks four times, and each `Instant` subtraction cost some
/// 50 instructions.
pub fn mono_ms() -> u64 {
    static BASE: std::sync::OnceLock<(Instant, u64)> = std::sync::OnceLock::new();
    let t = now();
    if let Some((seen, ms)) = MONO.with(Cell::get)
        && seen == t
    {
        return ms;
    }
    let &(at, ns) = BASE.get_or_init(|| (Instant::now(), mono_ns()));
    let ms = (ns + t.saturating_duration_since(at).as_nanos() as u64) / 1_000_000;
    MONO.with(|c| c.set(Some((t, ms))));
    ms
}

/// CLOCK_MONOTONIC in nanoseconds, read now (1 ms should the read fail,
/// which Linux's does not): the base that [`mono_ms`] and
/// `upstream::clock::Clock` count from.
pub fn mono_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(1_000_000, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// The clock's own reading: std's, through tokio's `Instant::now`, which is
/// exactly that in a build (tokio's `test-util` is a dev-dependency's
/// feature) and in tests follows a paused runtime's clock, as the runtime's
/// timers do.
fn read() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The time since `t`, by [`now`] (zero if `t` is later).
pub fn since(t: Instant) -> Duration {
    now().saturating_duration_since(t)
}

pin_project_lite::pin_project! {
    /// Polls its future with one clock reading per poll for [`now`]. A
    /// struct, not an `async fn`: an `async fn` keeps its argument beside
    /// the future it awaits, so a task's state would be twice the size of
    /// the future (1,360 bytes for a cleartext connection's, 10,720 for a
    /// TLS one's, by `-Zprint-type-sizes`).
    pub struct Clocked<F> {
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Clocked<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let _reading = Reading::take();
        self.project().fut.poll(cx)
    }
}

/// Polls `fut` with one clock reading per poll for [`now`].
pub fn clocked<F: Future>(fut: F) -> Clocked<F> {
    Clocked { fut }
}

/// Spawns `fut` as a task whose polls each read the clock once.
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(clocked(fut))
}

/// `tokio::time::sleep(d)` with its deadline from [`now`].
pub fn sleep(d: Duration) -> tokio::time::Sleep {
    tokio::time::sleep_until(deadline(d))
}

/// `tokio::time::timeout(d, fut)` with its deadline from [`now`], and its
/// timer made only if `fut` is not ready at once (see [`Timeout`]).
pub fn timeout<F: IntoFuture>(d: Duration, fut: F) -> Timeout<F::IntoFuture> {
    Timeout {
        fut: fut.into_future(),
        timer: None,
        at: Deadline::After(d),
    }
}

/// `tokio::time::timeout_at(at, fut)`, its timer made only if `fut` is not
/// ready at once.
pub fn timeout_at<F: IntoFuture>(at: tokio::time::Instant, fut: F) -> Timeout<F::IntoFuture> {
    Timeout {
        fut: fut.into_future(),
        timer: None,
        at: Deadline::At(at),
    }
}

/// When a [`Timeout`] expires: a time, or a span from [`now`] at its first
/// poll (in a task polled through [`clocked`], the reading its caller had).
#[derive(Clone, Copy)]
enum Deadline {
    At(tokio::time::Instant),
    After(Duration),
}

/// The error of a [`Timeout`] that expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for std::io::Error {
    fn from(_: Elapsed) -> std::io::Error {
        std::io::ErrorKind::TimedOut.into()
    }
}

pin_project_lite::pin_project! {
    /// A future with a time limit, as `tokio::time::Timeout`, whose timer is
    /// made the first time the future is not ready. Most waits of a
    /// proxied request are over at once (a head already read, a body
    /// already whole); a tokio `Timeout` made and dropped its timer each
    /// time all the same (about 100 instructions a request, per wait).
    pub struct Timeout<F> {
        #[pin]
        fut: F,
        #[pin]
        timer: Option<tokio::time::Sleep>,
        at: Deadline,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut me = self.project();
        if let std::task::Poll::Ready(v) = me.fut.poll(cx) {
            return std::task::Poll::Ready(Ok(v));
        }
        if me.timer.is_none() {
            let at = match *me.at {
                Deadline::At(at) => at,
                Deadline::After(d) => deadline(d),
            };
            me.timer.set(Some(tokio::time::sleep_until(at)));
        }
        match me.timer.as_pin_mut() {
            Some(t) => t.poll(cx).map(|()| Err(Elapsed)),
            None => std::task::Poll::Pending,
        }
    }
}

/// [`now`] plus `d`; a `d` too large for the clock is about 30 years, as
/// tokio's own `sleep` makes it.
pub fn deadline(d: Duration) -> tokio::time::Instant {
    let now = now();
    let at = now
        .checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(86_400 * 365 * 30)))
        .unwrap_or(now);
    tokio::time::Instant::from_std(at)
}

/// The reading of one poll; the one before it (a task polled inside
/// another's poll, as `block_on` does) comes back when it ends.
struct Reading(Option<Instant>);

impl Reading {
    fn take() -> Reading {
        Reading(NOW.with(|c| c.replace(Some(for_poll()))))
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        NOW.with(|c| c.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wrapper adds nothing to the future's size (an `async fn`
    /// wrapper doubled it).
    #[test]
    fn clocked_is_the_size_of_its_future() {
        let big = [7u8; 2048];
        let fut = async move { big.iter().map(|&b| u64::from(b)).sum::<u64>() };
        let inner = std::mem::size_of_val(&fut);
        assert!(inner >= 2048);
        assert_eq!(std::mem::size_of_val(&clocked(fut)), inner);
    }

    /// `mono_ms` follows CLOCK_MONOTONIC, read anew outside a clocked
    /// task (its last conversion is not taken for a later reading); within
    /// one, see the test below.
    #[test]
    fn mono_ms_follows_the_clock() {
        let before = mono_ns() / 1_000_000;
        let a = mono_ms();
        // Within a millisecond of a direct reading (the two bases were
        // read one after the other).
        assert!(
            a >= before && a <= mono_ns() / 1_000_000 + 1,
            "{before} {a}"
        );
        std::thread::sleep(Duration::from_millis(3));
        let b = mono_ms();
        assert!(b >= a + 3, "{a} {b}");
    }

    #[test]
    fn outside_a_clocked_task_now_reads_the_clock() {
        let a = now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(now() >= a + Duration::from_millis(2));
    }

    #[test]
    fn one_reading_per_poll_and_a_new_one_for_the_next() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        // `mono_ms` too stays one value through a poll.
        let outside = mono_ms();
        let ((first, first_ms), (same, same_ms), (next, next_ms)) = rt.block_on(clocked(async {
            let first = (now(), mono_ms());
            std::thread::sleep(Duration::from_millis(2));
            let same = (now(), mono_ms());
            // A real wait: the task is polled again, with a new reading.
            tokio::time::sleep(Duration::from_millis(2)).await;
            (first, same, (now(), mono_ms()))
        }));
        assert_eq!(first, same);
        assert!(next >= first + Duration::from_millis(4));
        assert!(first_ms >= outside);
        assert_eq!(first_ms, same_ms);
        assert!(next_ms >= first_ms + 4, "{first_ms} {next_ms}");
        // The reading ended with the task's poll.
        let after = now();
        assert!(after >= next);
        std::thread::sleep(Duration::from_millis(1));
        assert!(now() > after);
    }

    /// With turns told (`turn_began`, as a worker's runtime does after each
    /// wait for events), the polls of one turn share the first one's
    /// reading, up to `SHARED` of them; a new turn reads again. Without, each
    /// poll reads (the test above).
    #[test]
    fn the_polls_of_a_turn_share_its_reading() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .on_thread_unpark(turn_began)
            .build()
            .expect("runtime");
        let polls = |n: usize| {
            (0..n)
                .map(|_| {
                    let mut one = std::pin::pin!(clocked(std::future::ready(())));
                    let reading = std::cell::Cell::new(None);
                    let mut probe = std::pin::pin!(clocked(async {
                        reading.set(Some(now()));
                    }));
                    let _ = futures_util::FutureExt::now_or_never(one.as_mut());
                    let _ = futures_util::FutureExt::now_or_never(probe.as_mut());
                    std::thread::sleep(Duration::from_micros(200));
                    reading.get()
                })
                .collect::<Vec<_>>()
        };
        rt.block_on(async {
            // A wait for events: the runtime parks, and a turn begins.
            tokio::time::sleep(Duration::from_millis(2)).await;
            let seen = polls(usize::from(SHARED) / 2);
            assert!(
                seen.iter().all(|r| r.is_some() && *r == seen[0]),
                "{seen:?}"
            );
            // Past SHARED polls in the turn, a new reading.
            let more = polls(usize::from(SHARED));
            assert!(more.iter().any(|r| *r != seen[0]), "{more:?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
            let next = polls(1);
            assert!(next[0] >= seen[0].map(|t| t + Duration::from_millis(2)));
        });
    }

    #[test]
    fn timers_count_from_the_reading() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(clocked(async {
            let start = now();
            let at = deadline(Duration::from_millis(50));
            assert_eq!(at.into_std(), start + Duration::from_millis(50));
            sleep(Duration::from_millis(5)).await;
            assert!(Instant::now() >= start + Duration::from_millis(5));
            let slow = timeout(Duration::from_millis(5), std::future::pending::<()>()).await;
            assert!(slow.is_err());
            let quick = timeout(Duration::from_secs(5), async { 7 }).await;
            assert_eq!(quick.ok(), Some(7));
            // The deadline of a wait counts from the reading of its first
            // poll, and one that is over at once makes no timer.
            let t = timeout(Duration::from_millis(5), std::future::pending::<()>());
            let mut t = std::pin::pin!(t);
            assert!(futures_util::FutureExt::now_or_never(t.as_mut()).is_none());
            assert!(t.as_mut().project().timer.is_some());
            assert_eq!(t.await, Err(Elapsed));
            let at = deadline(Duration::from_millis(5));
            assert!(timeout_at(at, std::future::pending::<()>()).await.is_err());
            let t = timeout(Duration::from_millis(5), async { 1 });
            let mut t = std::pin::pin!(t);
            assert_eq!(
                futures_util::FutureExt::now_or_never(t.as_mut()),
                Some(Ok(1))
            );
            assert!(t.as_mut().project().timer.is_none());
            // Too far for the clock: about 30 years, no panic.
            assert!(deadline(Duration::MAX).into_std() > start);
        }));
    }
}
