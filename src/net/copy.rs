//! Copying bytes both ways between two connections: stream sessions and
//! WebSocket tunnels. One future drives both directions (no split halves,
//! no task per direction), each with one buffer (1 KiB at first, its whole
//! size once a read fills that; no allocation per chunk, no zeroing). A
//! direction reads only when its buffer is empty and writes what it read at
//! once, reading again right after a write drained it. Ends when both
//! directions are done (with half-close: each end passed on as a shutdown
//! of the other side), or one is (without), or a write fails, or nothing
//! moved for `idle` (one timer per session, moved on only when it fires
//! after something moved). A direction may have a rate limit (stream's
//! `proxy_upload_rate` / `proxy_download_rate`): it then reads no more than
//! its bucket (`net::rate`) allows.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::time::{Instant, Sleep};

/// A direction's buffer: nginx's `proxy_buffer_size` default for stream.
pub const BUFFER: usize = 16 * 1024;

/// A direction's first buffer, when its size is larger: enough for the
/// small messages most sessions carry, so that those hold 2 KiB for their
/// two directions rather than twice the size (a stream session idle after
/// one request: 14,976 B of worker RSS with 16 KiB buffers, 9,238 B with
/// these). The first read that fills it gives the direction its whole
/// size.
const FIRST: usize = 1024;

/// What a copy moved, and why it ended.
#[derive(Debug, Default, Clone, Copy)]
pub struct Copied {
    /// Bytes from `a` to `b`, and from `b` to `a` (written to the other
    /// side).
    pub ab: u64,
    pub ba: u64,
    /// When the first byte from `b` came.
    pub first_ba: Option<std::time::Instant>,
    /// Nothing moved for the idle time.
    pub timed_out: bool,
    /// A read failed (not an end): on `a` (false) or `b` (true), and its
    /// errno (for the log line nginx writes).
    pub read_failed: Option<(bool, i32)>,
    /// The side whose end ended the copy: `a` (false) or `b` (true).
    pub ended_by_b: Option<bool>,
}

/// One direction: what was read from one side and not yet written to the
/// other (`buf[pos..]`).
struct Half {
    buf: BytesMut,
    pos: usize,
    /// The buffer's size once a read filled the first one (see `FIRST`).
    size: usize,
    /// The source ended (or failed): nothing more is read.
    eof: bool,
    /// Ended and passed on: the buffer is drained and, with half-close, the
    /// other side was shut down.
    done: bool,
    /// Bytes written to the other side.
    moved: u64,
    /// When the first bytes were read.
    first: Option<std::time::Instant>,
    /// The rate limit on reading, if any.
    bucket: Option<super::rate::Bucket>,
    /// A read failed with this errno (the source counts as ended).
    failed: Option<i32>,
}

/// What polling a direction came to.
enum Step {
    /// Waiting for its source or its destination (`bool`: bytes moved on
    /// the way).
    Waiting(bool),
    /// Done (see `Half::done`).
    Done,
    /// A write failed: the session ends.
    Failed,
}

impl Half {
    fn new(size: usize) -> Half {
        Half {
            buf: BytesMut::with_capacity(size.min(FIRST)),
            pos: 0,
            size,
            eof: false,
            done: false,
            moved: 0,
            first: None,
            bucket: None,
            failed: None,
        }
    }

    /// Reads one chunk from `r` into the (empty) buffer. Ready(true): bytes
    /// came; Ready(false): the source ended or failed.
    fn poll_fill<R>(&mut self, cx: &mut Context<'_>, r: &mut R) -> Poll<bool>
    where
        R: AsyncRead + Unpin + ?Sized,
    {
        // `read_buf` keeps no state of its own: a fresh one per poll reads
        // into the buffer's spare capacity, which needs no zeroing. With a
        // rate limit, no more than the bucket's room is read (as nginx
        // shortens its read to what the limit leaves).
        let polled = match self.bucket.as_mut() {
            None => {
                let read = r.read_buf(&mut self.buf);
                tokio::pin!(read);
                read.poll(cx)
            }
            Some(b) => {
                let Poll::Ready(room) = b.poll_room(cx) else {
                    return Poll::Pending;
                };
                let mut limited = (&mut *r).take(room);
                let read = limited.read_buf(&mut self.buf);
                tokio::pin!(read);
                let polled = read.poll(cx);
                if let Poll::Ready(Ok(n)) = polled {
                    b.used(n as u64);
                }
                polled
            }
        };
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(n)) if n > 0 => {
                self.first.get_or_insert_with(super::clock::now);
                Poll::Ready(true)
            }
            Poll::Ready(r) => {
                // An end or a failure is the first thing read too (nginx's
                // first byte time of an upstream that closes at once).
                self.first.get_or_insert_with(super::clock::now);
                if let Err(e) = r {
                    self.failed = Some(e.raw_os_error().unwrap_or(nix::libc::EIO));
                }
                self.eof = true;
                Poll::Ready(false)
            }
        }
    }

    /// The buffer, all written, made empty for the next read: the whole
    /// size when the last read filled a smaller first one.
    fn drained(&mut self) {
        if self.buf.len() == self.buf.capacity() && self.buf.capacity() < self.size {
            self.buf = BytesMut::with_capacity(self.size);
        } else {
            self.buf.clear();
        }
        self.pos = 0;
    }

    /// Moves what it can from `r` to `w`.
    fn poll_move<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
        w: &mut W,
        half_close: bool,
    ) -> Step
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        if self.done {
            return Step::Done;
        }
        let mut moved = false;
        loop {
            while self.pos < self.buf.len() {
                match Pin::new(&mut *w).poll_write(cx, &self.buf[self.pos..]) {
                    Poll::Ready(Ok(n)) if n > 0 => {
                        self.pos += n;
                        self.moved += n as u64;
                        moved = true;
                    }
                    Poll::Ready(_) => return Step::Failed,
                    Poll::Pending => return Step::Waiting(moved),
                }
            }
            self.drained();
            if self.eof {
                break;
            }
            match self.poll_fill(cx, r) {
                Poll::Ready(true) => moved = true,
                Poll::Ready(false) => break,
                Poll::Pending => return Step::Waiting(moved),
            }
        }
        // The end is passed on: a shutdown of the other side with
        // half-close; without, the session ends and closes both.
        if half_close && Pin::new(&mut *w).poll_shutdown(cx).is_pending() {
            return Step::Waiting(moved);
        }
        self.done = true;
        Step::Done
    }
}

/// A session's copy, set up before the other side is connected so that
/// what `a` sends meanwhile is read into its buffer (see `early`).
pub struct Relay {
    ab: Half,
    ba: Half,
    idle: Duration,
    half_close: bool,
    /// When something last moved (as of the last poll).
    last: Instant,
    /// The idle timer fired.
    timed_out: bool,
    /// Which direction's end ended it (`ba`: true).
    ended_by_b: Option<bool>,
}

impl Default for Relay {
    fn default() -> Self {
        Relay::new()
    }
}

impl Relay {
    pub fn new() -> Relay {
        Relay::with_buffer(BUFFER)
    }

    /// A relay whose directions each have a `size`-byte buffer (stream's
    /// `proxy_buffer_size`).
    pub fn with_buffer(size: usize) -> Relay {
        Relay {
            ab: Half::new(size.max(1)),
            ba: Half::new(size.max(1)),
            idle: Duration::ZERO,
            half_close: false,
            last: Instant::from_std(super::clock::now()),
            timed_out: false,
            ended_by_b: None,
        }
    }

    /// Limits reading from `a` (`ab`) and from `b` (`ba`) to so many bytes
    /// per second (0: no limit), counted from now.
    pub fn set_rates(&mut self, ab: u64, ba: u64) {
        // What `early` read already counts, as nginx counts every byte
        // received from the client against the limit.
        for (h, rate) in [(&mut self.ab, ab), (&mut self.ba, ba)] {
            h.bucket = super::rate::Bucket::new(rate, 0);
            if let Some(b) = h.bucket.as_mut() {
                b.used((h.buf.len() - h.pos) as u64);
            }
        }
    }

    /// While `b` is not there yet: ends if `a` closes (or fails) before
    /// sending anything. What it sends is kept for `b`; once it has sent
    /// something this never ends (its end is seen by `run`).
    pub async fn early<A>(&mut self, a: &mut A)
    where
        A: AsyncRead + Unpin + ?Sized,
    {
        let h = &mut self.ab;
        if h.eof || !h.buf.is_empty() {
            return std::future::pending().await;
        }
        if std::future::poll_fn(|cx| h.poll_fill(cx, a)).await {
            std::future::pending::<()>().await;
        }
    }

    /// Copies until the session ends; what moved.
    pub async fn run<A, B>(mut self, mut a: A, mut b: B, idle: Duration, half_close: bool) -> Copied
    where
        A: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        (self.idle, self.half_close, self.last) =
            (idle, half_close, Instant::from_std(super::clock::now()));
        let timer = tokio::time::sleep_until(after(self.last, idle));
        tokio::pin!(timer);
        std::future::poll_fn(|cx| self.poll_run(cx, &mut a, &mut b, timer.as_mut())).await;
        let read_failed = match (self.ab.failed, self.ba.failed) {
            (Some(e), _) => Some((false, e)),
            (None, Some(e)) => Some((true, e)),
            (None, None) => None,
        };
        Copied {
            ab: self.ab.moved,
            ba: self.ba.moved,
            first_ba: self.ba.first,
            timed_out: self.timed_out,
            read_failed,
            ended_by_b: self.ended_by_b,
        }
    }

    fn poll_run<A, B>(
        &mut self,
        cx: &mut Context<'_>,
        a: &mut A,
        b: &mut B,
        mut timer: Pin<&mut Sleep>,
    ) -> Poll<()>
    where
        A: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        let half_close = self.half_close;
        let ab_done_before = self.ab.done;
        let ab = self.ab.poll_move(cx, a, b, half_close);
        let ba = self.ba.poll_move(cx, b, a, half_close);
        let mut moved = false;
        for (from_b, step) in [(false, ab), (true, ba)] {
            match step {
                Step::Failed => return Poll::Ready(()),
                Step::Done if !half_close => {
                    self.ended_by_b = Some(from_b);
                    return Poll::Ready(());
                }
                Step::Done => {}
                Step::Waiting(m) => moved |= m,
            }
        }
        if self.ab.done && self.ba.done {
            // With half-close the last to end ends it.
            self.ended_by_b.get_or_insert(ab_done_before);
            return Poll::Ready(());
        }
        if moved {
            self.last = Instant::from_std(super::clock::now());
        }
        // The timer is moved on only when it fires: to `idle` after the
        // last time something moved, if that is later.
        while timer.as_mut().poll(cx).is_ready() {
            let due = after(self.last, self.idle);
            if due <= timer.deadline() {
                self.timed_out = true;
                return Poll::Ready(());
            }
            timer.as_mut().reset(due);
        }
        Poll::Pending
    }
}

/// `idle` after `t` (far off for a time too long to add).
fn after(t: Instant, idle: Duration) -> Instant {
    t.checked_add(idle)
        .unwrap_or_else(|| t + Duration::from_secs(86400 * 365 * 30))
}

/// Copies both ways between `a` and `b` (see the module's comment).
pub async fn both<A, B>(a: A, b: B, idle: Duration, half_close: bool) -> Copied
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    Relay::new().run(a, b, idle, half_close).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

    const IDLE: Duration = Duration::from_secs(10);

    /// A client end, the relay's two sides, and an upstream end.
    fn pairs(size: usize) -> (DuplexStream, DuplexStream, DuplexStream, DuplexStream) {
        let (client, a) = duplex(size);
        let (b, upstream) = duplex(size);
        (client, a, b, upstream)
    }

    async fn read_n(s: &mut DuplexStream, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        s.read_exact(&mut v).await.unwrap();
        v
    }

    #[tokio::test(start_paused = true)]
    async fn copies_both_ways_and_counts_what_was_written() {
        let (mut client, a, b, mut upstream) = pairs(64 * 1024);
        let copy = tokio::spawn(both(a, b, IDLE, false));
        // More than a buffer's worth one way, in pieces the other.
        let big = vec![7u8; 3 * BUFFER + 5];
        client.write_all(&big).await.unwrap();
        assert_eq!(read_n(&mut upstream, big.len()).await, big);
        let before = crate::net::clock::now();
        for _ in 0..3 {
            upstream.write_all(b"pong").await.unwrap();
            assert_eq!(read_n(&mut client, 4).await, b"pong");
        }
        drop(upstream);
        let c = copy.await.unwrap();
        assert_eq!((c.ab, c.ba), (big.len() as u64, 12));
        assert!(c.first_ba.is_some_and(|t| t >= before));
        // The client sees the end.
        assert_eq!(client.read(&mut [0u8; 8]).await.unwrap(), 0);
    }

    /// Polls `h` once, moving what it can from `r` to `w`.
    async fn move_once(h: &mut Half, r: &mut DuplexStream, w: &mut DuplexStream) {
        std::future::poll_fn(|cx| {
            let _ = h.poll_move(cx, r, w, false);
            Poll::Ready(())
        })
        .await;
    }

    #[tokio::test]
    async fn a_direction_takes_its_whole_buffer_once_a_read_fills_the_first() {
        let (mut client, mut a, mut b, mut upstream) = pairs(64 * 1024);
        let mut h = Half::new(BUFFER);
        assert_eq!(h.buf.capacity(), FIRST);
        // Small messages: the first buffer stays.
        for _ in 0..3 {
            client.write_all(b"ping").await.unwrap();
            move_once(&mut h, &mut a, &mut b).await;
            assert_eq!(read_n(&mut upstream, 4).await, b"ping");
            assert_eq!(h.buf.capacity(), FIRST);
        }
        // One read fills it: the next reads get the whole size, and every
        // byte goes through in order.
        let big: Vec<u8> = (0..3 * FIRST).map(|i| (i % 251) as u8).collect();
        client.write_all(&big).await.unwrap();
        move_once(&mut h, &mut a, &mut b).await;
        assert_eq!(read_n(&mut upstream, big.len()).await, big);
        assert_eq!(h.buf.capacity(), BUFFER);
        assert_eq!(h.moved, 12 + big.len() as u64);
        // A size no larger than the first buffer is the size.
        assert_eq!(Half::new(512).buf.capacity(), 512);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_moving_ends_it_after_idle() {
        let (_client, a, b, _upstream) = pairs(1024);
        let t = Instant::now();
        let c = both(a, b, IDLE, true).await;
        assert_eq!(t.elapsed(), IDLE);
        assert_eq!((c.ab, c.ba, c.first_ba), (0, 0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn each_message_moves_the_idle_deadline_on() {
        let (mut client, a, b, mut upstream) = pairs(1024);
        let t = Instant::now();
        let copy = tokio::spawn(both(a, b, IDLE, false));
        // Messages at 6 s, 12 s and 18 s: each within IDLE of the last.
        for i in 1..=3u64 {
            tokio::time::sleep_until(t + Duration::from_secs(6 * i)).await;
            client.write_all(b"ping").await.unwrap();
            assert_eq!(read_n(&mut upstream, 4).await, b"ping");
        }
        let c = copy.await.unwrap();
        assert_eq!(t.elapsed(), Duration::from_secs(18) + IDLE);
        assert_eq!(c.ab, 12);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_never_goes_through_times_out() {
        // The upstream never reads: once its pipe is full the copy waits on
        // the write, and the idle timer still runs.
        let (mut client, a, b, _upstream) = pairs(16);
        let t = Instant::now();
        let copy = tokio::spawn(both(a, b, IDLE, false));
        // 16 bytes in each pipe and 16 in the relay's buffer.
        client.write_all(&[1u8; 48]).await.unwrap();
        let c = copy.await.unwrap();
        assert_eq!(t.elapsed(), IDLE);
        assert_eq!(c.ab, 16);
    }

    #[tokio::test(start_paused = true)]
    async fn with_half_close_an_end_is_passed_on_and_the_other_way_goes_on() {
        let (mut client, a, b, mut upstream) = pairs(1024);
        let copy = tokio::spawn(both(a, b, IDLE, true));
        client.write_all(b"request").await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"request");
        // The other way still works after the client's end.
        upstream.write_all(b"answer").await.unwrap();
        assert_eq!(read_n(&mut client, 6).await, b"answer");
        upstream.shutdown().await.unwrap();
        let c = copy.await.unwrap();
        assert_eq!((c.ab, c.ba), (7, 6));
        assert_eq!(client.read(&mut [0u8; 8]).await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn without_half_close_one_end_ends_the_session() {
        let (mut client, a, b, mut upstream) = pairs(1024);
        let copy = tokio::spawn(both(a, b, IDLE, false));
        client.write_all(b"request").await.unwrap();
        client.shutdown().await.unwrap();
        let c = copy.await.unwrap();
        assert_eq!((c.ab, c.ba), (7, 0));
        // What came before the end was passed on, then the end.
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"request");
        assert!(upstream.write_all(b"late").await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn what_comes_before_the_upstream_is_kept_for_it() {
        let (mut client, mut a, b, mut upstream) = pairs(1024);
        let mut relay = Relay::new();
        client.write_all(b"early").await.unwrap();
        // `early` keeps the bytes and then waits for good.
        let waited = tokio::time::timeout(IDLE, relay.early(&mut a)).await;
        assert!(waited.is_err());
        let copy = tokio::spawn(relay.run(a, b, IDLE, false));
        assert_eq!(read_n(&mut upstream, 5).await, b"early");
        drop(client);
        assert_eq!(copy.await.unwrap().ab, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_gone_before_the_upstream_ends_early() {
        let (client, mut a, _b, _upstream) = pairs(1024);
        let mut relay = Relay::new();
        drop(client);
        let t = Instant::now();
        relay.early(&mut a).await;
        assert_eq!(t.elapsed(), Duration::ZERO);
    }
}
