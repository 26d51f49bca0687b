//! HTTP/2 connections to upstream peers (`grpc_pass`, `proxy_http_version
//! 2`), per upstream and worker: for each peer (and TLS settings) a set of
//! `keepalive_min` connections (1 by default) made with the `h2` crate over
//! the usual connect path (plain: prior knowledge; TLS: ALPN `h2`). A new
//! stream goes to the connection with the fewest active streams, then the
//! one least recently given a stream, never past the peer's SETTINGS_MAX_CONCURRENT_STREAMS: when all
//! are full it waits for a slot, bounded by the connect timeout. A
//! connection past `keepalive_time` (less its jitter) stops taking streams
//! once another one is open, finishes its open streams and closes; one that
//! received GOAWAY stops at once. `http2_ping_interval` closes a connection
//! whose PING goes unanswered. The keeper (`http::keeper`) opens what is
//! missing, with back-off; a request finding nothing usable opens one.
//! Not here: requests and bodies (`http::proxy_h2`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::attempt::{Failure, Kind};
use super::peers::{Ms, PeerId, Peers, now_ms};
use super::pool::{Registry, Track};
use super::tls::Tls;
use crate::conf::model::{PeerAddr, Ping};
use crate::log::Level;
use crate::net::stream::Stream;

pub type Sender = h2::client::SendRequest<Bytes>;

/// A set's key: the peer, and the TLS settings (0: plain).
pub type Key = (PeerAddr, u64);

/// What every connection of one set shares with the streams on it.
pub struct ConnState {
    /// Streams open on it now.
    active: AtomicUsize,
    /// The last stream id of a GOAWAY it received (u32::MAX: none).
    goaway: AtomicU32,
    /// Its connection task ended: nothing more goes or comes.
    closed: AtomicBool,
    /// The peer sent something (its SETTINGS come first).
    heard: AtomicBool,
    /// Told when `heard` or `closed` is set.
    changed: Notify,
    /// Its peer's counters (open, idle, recycled), while it is open.
    track: Mutex<Option<Track>>,
}

impl ConnState {
    fn new() -> ConnState {
        ConnState {
            active: AtomicUsize::new(0),
            goaway: AtomicU32::new(u32::MAX),
            closed: AtomicBool::new(false),
            heard: AtomicBool::new(false),
            changed: Notify::new(),
            track: Mutex::new(None),
        }
    }

    fn track(&self) -> MutexGuard<'_, Option<Track>> {
        self.track.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn going_away(&self) -> bool {
        self.goaway.load(Acquire) != u32::MAX
    }

    /// A stream with this id was never processed by the peer: it came
    /// after the peer's GOAWAY (so it may go to another connection).
    pub fn refused(&self, stream: u32) -> bool {
        stream > self.goaway.load(Acquire)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Acquire)
    }

    /// It received a GOAWAY that kept some of its streams: the peer goes on
    /// serving, only not on this connection.
    pub fn processed_some(&self) -> bool {
        let last = self.goaway.load(Acquire);
        last != u32::MAX && last > 0
    }
}

/// One HTTP/2 connection in a set.
struct Conn {
    send: Sender,
    created: Instant,
    /// `keepalive_time`, with its jitter drawn for this connection.
    max_age: Duration,
    /// When it was last given a stream (its set's `given` count then; when
    /// it joined the set, until then), the tie-break among equally loaded
    /// connections.
    last: u64,
    state: Arc<ConnState>,
}

impl Conn {
    /// Open, not going away, and allowed to open streams at all: a peer that
    /// sets SETTINGS_MAX_CONCURRENT_STREAMS to 0 (RFC 9113 would have it
    /// do so briefly, and close a connection it will not use) does not
    /// keep its set from opening another, nor requests waiting for room
    /// that never comes; `retire` closes it once its streams are done.
    fn usable(&self) -> bool {
        !self.state.is_closed() && !self.state.going_away() && self.allows_streams()
    }

    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS is above 0.
    fn allows_streams(&self) -> bool {
        self.send.current_max_send_streams() > 0
    }

    fn due(&self, now: Instant) -> bool {
        now.duration_since(self.created) >= self.max_age
    }

    fn has_room(&self) -> bool {
        self.state.active.load(Relaxed) < self.send.current_max_send_streams()
    }
}

/// One peer's connections.
#[derive(Default)]
struct PeerSet {
    conns: Vec<Conn>,
    /// Connections being opened for it now.
    opening: usize,
    /// Streams given out so far: orders the connections' `last`.
    given: u64,
    /// Streams ending and connections opening wake the requests waiting.
    notify: Arc<Notify>,
}

/// Every set of one upstream in one worker.
#[derive(Default)]
pub struct H2Sets {
    sets: Mutex<HashMap<Key, PeerSet>>,
}

/// A stream's place on a connection: held from before the request is sent
/// until its response ends (dropped: the slot is free again).
pub struct Slot {
    pub send: Sender,
    pub state: Arc<ConnState>,
    notify: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.state.active.fetch_sub(1, Relaxed) == 1 {
            if let Some(t) = self.state.track().as_mut() {
                t.set_idle(true);
            }
        }
        self.notify.notify_waiters();
    }
}

fn take_slot(conn: &Conn, notify: &Arc<Notify>) -> Slot {
    if conn.state.active.fetch_add(1, Relaxed) == 0 {
        if let Some(t) = conn.state.track().as_mut() {
            t.set_idle(false);
        }
    }
    Slot {
        send: conn.send.clone(),
        state: conn.state.clone(),
        notify: notify.clone(),
    }
}

/// How a set opens connections.
#[derive(Clone)]
pub struct Opener {
    pub timeout: Duration,
    pub tls: Option<Tls>,
    pub ping: Option<Ping>,
    pub keepalive: bool,
    /// `keepalive_min` (at least 1).
    pub target: usize,
    /// `keepalive_time` with jitter: drawn per connection.
    pub keepalive_time: crate::conf::model::Keepalive,
    /// The largest response head its location takes (`proxy_buffer_size`,
    /// `grpc_buffer_size`): what the connection decodes is bounded from it
    /// (`header_list_max`).
    pub head_max: u64,
}

/// The most of a response head's fields (h2's measure: name, value and
/// 32 bytes each) one of a connection's streams may decode: 16 times the
/// opening location's buffer, and at least 1 MiB, so that any location
/// whose buffer is up to 64 kB finds every head it takes decoded whole.
/// Past it h2 refuses the stream, and past four times it (an HPACK bomb)
/// ends the connection, holding no more than that meanwhile.
fn header_list_max(head_max: u64) -> u32 {
    let max = head_max.saturating_mul(16).max(1 << 20);
    u32::try_from(max).unwrap_or(u32::MAX)
}

impl Opener {
    pub fn key(&self, addr: &PeerAddr) -> Key {
        (addr.clone(), self.tls.as_ref().map_or(0, |t| t.key))
    }
}

/// A connection opened, ready to join its set.
pub struct Opened {
    send: Sender,
    created: Instant,
    max_age: Duration,
    state: Arc<ConnState>,
}

impl Opened {
    /// The connection's sender and state, for a user that keeps it alone
    /// (the health checker).
    pub fn into_parts(self) -> (Sender, Arc<ConnState>) {
        (self.send, self.state)
    }
}

impl H2Sets {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, PeerSet>> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot on the set's best connection, if one has room: the fewest
    /// active streams, then the one least recently given a stream (a new
    /// one joins at the end of the turn: its peer's SETTINGS, or a layer-4
    /// proxy closing it, have come by then), so that calls that never
    /// overlap still rotate over
    /// every connection, that is every backend a layer-4 balancer behind
    /// one address chose for them, as `keepalive_min` rotates HTTP/1
    /// connections; a connection past its age only while no younger one
    /// is usable (it is retired then).
    pub fn take(&self, key: &Key) -> Option<Slot> {
        let mut sets = self.lock();
        let set = sets.get_mut(key)?;
        let now = Instant::now();
        retire(set, now);
        // Past its age, a connection takes no stream once a younger one is
        // open (its own finish there, and it closes).
        let younger = set.conns.iter().any(|c| c.usable() && !c.due(now));
        let best = set
            .conns
            .iter_mut()
            .filter(|c| c.usable() && c.has_room() && !(younger && c.due(now)))
            .min_by_key(|c| (c.state.active.load(Relaxed), c.last))?;
        set.given += 1;
        best.last = set.given;
        Some(take_slot(best, &set.notify))
    }

    /// Usable connections to `key`'s peer, not past their age, and those
    /// being opened.
    pub fn count(&self, key: &Key) -> (usize, usize) {
        let mut sets = self.lock();
        let Some(set) = sets.get_mut(key) else {
            return (0, 0);
        };
        let now = Instant::now();
        retire(set, now);
        let fresh = set
            .conns
            .iter()
            .filter(|c| c.usable() && !c.due(now))
            .count();
        (fresh, set.opening)
    }

    /// Notes a connection being opened (by the keeper or a request).
    pub fn opening(&self, key: &Key, delta: isize) {
        let mut sets = self.lock();
        let set = sets.entry(key.clone()).or_default();
        set.opening = set.opening.saturating_add_signed(delta);
        set.notify.notify_waiters();
    }

    /// Adds an opened connection to its set, counted as one to peer `id`.
    pub fn insert(&self, key: &Key, c: Opened, reg: &Arc<Registry>, peers: &Arc<Peers>) {
        if let Some(id) = peers.find(&key.0) {
            let created = now_ms().saturating_sub(c.created.elapsed().as_millis() as Ms);
            let mut t = Track::start(reg.clone(), peers.clone(), id, created);
            t.set_idle(c.state.active.load(Relaxed) == 0);
            *c.state.track() = Some(t);
        }
        let mut sets = self.lock();
        let set = sets.entry(key.clone()).or_default();
        set.conns.push(Conn {
            send: c.send,
            created: c.created,
            max_age: c.max_age,
            last: set.given,
            state: c.state,
        });
        set.notify.notify_waiters();
    }

    /// Forgets closed connections and sets of peers no longer listed.
    pub fn prune(&self, listed: impl Fn(&PeerAddr) -> Option<PeerId>) {
        let now = Instant::now();
        let mut sets = self.lock();
        sets.retain(|(addr, _), set| {
            retire(set, now);
            listed(addr).is_some() || set.opening > 0
        });
    }

    /// A slot on a connection to `addr`, waiting (at most `o.timeout`) for
    /// room, and opening a connection when the set has fewer than it
    /// should and none is being opened.
    pub async fn acquire(
        self: Arc<Self>,
        addr: PeerAddr,
        o: Opener,
        reg: Arc<Registry>,
        peers: Arc<Peers>,
    ) -> Result<Slot, Failure> {
        let key = o.key(&addr);
        let deadline = tokio::time::Instant::now() + o.timeout;
        loop {
            let notify = self.lock().entry(key.clone()).or_default().notify.clone();
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(s) = self.take(&key) {
                return Ok(s);
            }
            let (fresh, opening) = self.count(&key);
            let any = self
                .lock()
                .get(&key)
                .is_some_and(|s| s.conns.iter().any(Conn::usable));
            if (fresh + opening < o.target) || (!any && opening == 0) {
                self.opening(&key, 1);
                let opened = open(addr.clone(), o.clone()).await;
                self.opening(&key, -1);
                match opened {
                    Ok(c) => {
                        self.insert(&key, c, &reg, &peers);
                        continue;
                    }
                    Err(f) => return Err(f),
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Failure::upstream(
                    Kind::Timeout,
                    "upstream timed out (110: Connection timed out) waiting for a free HTTP/2 stream",
                ));
            }
        }
    }
}

/// Retires, in one set: closed connections, and those past their age
/// with no streams once a younger usable one is there (one with streams
/// stops taking new ones by `take`'s order and goes when they end).
fn retire(set: &mut PeerSet, now: Instant) {
    let younger = set.conns.iter().any(|c| c.usable() && !c.due(now));
    set.conns.retain(|c| {
        if c.state.is_closed() {
            return false;
        }
        let idle = c.state.active.load(Relaxed) == 0;
        // Allowed to open no stream (see `Conn::usable`), and idle.
        if idle && !c.allows_streams() {
            return false;
        }
        let old = c.due(now) || c.state.going_away();
        if old && (younger || c.state.going_away()) && idle {
            if c.due(now) {
                if let Some(t) = c.state.track().as_ref() {
                    t.recycled();
                }
            }
            // Dropping the last handle lets the connection end gracefully.
            return false;
        }
        true
    });
}

/// Opens one HTTP/2 connection: connect and TLS within `o.timeout` each,
/// then the HTTP/2 handshake within it again; its task runs the
/// connection (and the PINGs) until it ends.
pub async fn open(addr: PeerAddr, o: Opener) -> Result<Opened, Failure> {
    let s = crate::net::stream::connect(&addr, o.timeout)
        .await
        .map_err(|e| Failure::connect(&addr, e))?;
    if o.keepalive {
        if let Stream::Tcp(t) = &s {
            let _ = socket2::SockRef::from(t).set_keepalive(true);
        }
    }
    let s = match &o.tls {
        None => s,
        Some(t) => t.handshake(&addr, s, o.timeout).await?,
    };
    let state = Arc::new(ConnState::new());
    let io = Sniff::new(s, state.clone());
    let mut b = h2::client::Builder::new();
    b.initial_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .max_header_list_size(header_list_max(o.head_max))
        .enable_push(false);
    let handshake = tokio::time::timeout(o.timeout, b.handshake::<_, Bytes>(io)).await;
    let (send, mut conn) = match handshake {
        Err(_) => {
            return Err(Failure::upstream(
                Kind::Timeout,
                "upstream timed out (110: Connection timed out) while starting HTTP/2",
            ));
        }
        Ok(Err(e)) => {
            return Err(Failure::upstream(
                Kind::Handshake,
                format!("upstream HTTP/2 handshake failed ({e})"),
            ));
        }
        Ok(Ok(x)) => x,
    };
    let pinger = o.ping.and_then(|p| conn.ping_pong().map(|pp| (pp, p)));
    let run = state.clone();
    let name = addr.to_string();
    tokio::spawn(async move {
        let alive = async {
            match pinger {
                Some((pp, p)) => ping_loop(pp, p).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut conn => {}
            () = alive => {
                crate::log!(
                    Level::Error,
                    "upstream {} did not answer an HTTP/2 PING in time, closing its connection",
                    name
                );
            }
        }
        run.closed.store(true, Release);
        run.changed.notify_waiters();
        drop(run.track().take());
    });
    let max_age = o.keepalive_time.age_limit(super::random::next_u64);
    Ok(Opened {
        send,
        created: Instant::now(),
        max_age,
        state,
    })
}

/// `open`, then the peer's first bytes (its SETTINGS) within `o.timeout`:
/// for connections opened ahead of requests (`keepalive_min`), so that a
/// peer that takes connections and closes them at once (a layer-4 proxy
/// with nothing behind it) is a failed open, left alone for a while, not a
/// connection opened again on every tick.
pub async fn open_heard(addr: PeerAddr, o: Opener) -> Result<Opened, Failure> {
    let timeout = o.timeout;
    let c = open(addr, o).await?;
    let state = &c.state;
    let heard = async {
        loop {
            let changed = state.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if state.heard.load(Acquire) {
                return Ok(());
            }
            if state.is_closed() {
                return Err(Failure::upstream(
                    Kind::Closed,
                    "upstream prematurely closed connection while starting HTTP/2",
                ));
            }
            changed.await;
        }
    };
    match tokio::time::timeout(timeout, heard).await {
        Ok(Ok(())) => Ok(c),
        Ok(Err(f)) => Err(f),
        Err(_) => Err(Failure::upstream(
            Kind::Timeout,
            "upstream timed out (110: Connection timed out) while starting HTTP/2",
        )),
    }
}

/// A PING every interval; returns when one goes unanswered in time.
async fn ping_loop(mut pp: h2::PingPong, p: Ping) {
    loop {
        tokio::time::sleep(p.interval).await;
        match tokio::time::timeout(p.timeout, pp.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {}
            // An error: the connection is ending anyway.
            Ok(Err(_)) => return std::future::pending().await,
            Err(_) => return,
        }
    }
}

/// The connection's bytes as they come in, watched for GOAWAY: the `h2`
/// crate gives a client no word of one, and a connection that received it
/// must take no new stream. Only frame headers are looked at (type 7,
/// and the last stream id that starts its payload); `h2` parses all of it.
struct Sniff {
    io: Stream,
    state: Arc<ConnState>,
    /// The frame header being read (9 bytes), then the payload left.
    head: [u8; 9],
    have: usize,
    left: usize,
    /// In a GOAWAY's payload: its first 4 bytes so far.
    goaway: Option<([u8; 4], usize)>,
}

impl Sniff {
    fn new(io: Stream, state: Arc<ConnState>) -> Sniff {
        Sniff {
            io,
            state,
            head: [0; 9],
            have: 0,
            left: 0,
            goaway: None,
        }
    }

    fn watch(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.left == 0 && self.goaway.is_none() {
                let n = (9 - self.have).min(bytes.len());
                self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                bytes = &bytes[n..];
                if self.have == 9 {
                    self.have = 0;
                    self.left = usize::from(self.head[0]) << 16
                        | usize::from(self.head[1]) << 8
                        | usize::from(self.head[2]);
                    if self.head[3] == 7 {
                        self.goaway = Some(([0; 4], 0));
                    }
                }
                continue;
            }
            let n = self.left.min(bytes.len());
            if let Some((id, got)) = &mut self.goaway {
                let k = (4 - *got).min(n);
                id[*got..*got + k].copy_from_slice(&bytes[..k]);
                *got += k;
                if *got == 4 {
                    let last = u32::from_be_bytes(*id) & 0x7fff_ffff;
                    self.state.goaway.fetch_min(last, Release);
                    self.goaway = None;
                }
            }
            self.left -= n;
            bytes = &bytes[n..];
            if self.left == 0 {
                // A GOAWAY cut short is no GOAWAY (h2 ends the connection).
                self.goaway = None;
            }
        }
    }
}

impl AsyncRead for Sniff {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            let fresh = &buf.filled()[before..];
            if !fresh.is_empty() && !self.state.heard.load(Relaxed) {
                self.state.heard.store(true, Release);
                self.state.changed.notify_waiters();
            }
            self.watch(fresh);
        }
        r
    }
}

impl AsyncWrite for Sniff {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sniff() -> (Sniff, Arc<ConnState>) {
        let state = Arc::new(ConnState::new());
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let s = rt.block_on(async { tokio::net::UnixStream::from_std(a).unwrap() });
        (Sniff::new(Stream::Unix(s), state.clone()), state)
    }

    /// An HTTP/2 server on 127.0.0.1 that takes `max` streams at a time
    /// per connection and never answers (the streams stay open).
    async fn server(max: u32) -> PeerAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(max)
                        .handshake::<_, Bytes>(s)
                        .await
                        .unwrap();
                    let mut held = Vec::new();
                    while let Some(Ok(req)) = conn.accept().await {
                        held.push(req);
                    }
                });
            }
        });
        PeerAddr::Inet(addr)
    }

    /// An HTTP/2 server on 127.0.0.1 that never answers, and shuts a
    /// connection down gracefully when a request for `/bye` comes on it:
    /// GOAWAY with last stream id 2^31-1 and a PING, then, once the PING
    /// is answered, GOAWAY with the real last stream id (as grpc-core and
    /// `h2` do).
    async fn draining_server() -> PeerAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(s).await.unwrap();
                    let mut held = Vec::new();
                    while let Some(Ok((req, respond))) = conn.accept().await {
                        if req.uri().path() == "/bye" {
                            conn.graceful_shutdown();
                        }
                        held.push((req, respond));
                    }
                });
            }
        });
        PeerAddr::Inet(addr)
    }

    /// Sets for one peer at `addr`: its peers and registry, an opener
    /// whose connections do not age, and the peer's key.
    fn one_peer(addr: &PeerAddr) -> (H2Sets, Arc<Peers>, Arc<Registry>, Opener, Key) {
        let u = crate::upstream::peers::test_upstream(
            &[(&addr.to_string(), 1, false)],
            crate::conf::model::Balancer::RoundRobin,
        );
        let o = opener(Duration::from_secs(3600));
        let key = o.key(addr);
        (
            H2Sets::default(),
            Arc::new(Peers::from_config(&u)),
            Arc::new(Registry::default()),
            o,
            key,
        )
    }

    #[test]
    fn a_connection_decodes_sixteen_buffers_and_at_least_a_mebibyte() {
        assert_eq!(header_list_max(0), 1 << 20);
        assert_eq!(header_list_max(4096), 1 << 20);
        assert_eq!(header_list_max(1 << 20), 16 << 20);
        assert_eq!(header_list_max(u64::MAX), u32::MAX);
    }

    fn opener(time: Duration) -> Opener {
        let mut k = crate::upstream::pool::tests_keepalive();
        k.time = time;
        Opener {
            timeout: Duration::from_secs(5),
            tls: None,
            ping: None,
            keepalive: false,
            target: 2,
            keepalive_time: k,
            head_max: 0,
        }
    }

    /// A stream goes to the connection with the fewest active streams,
    /// then the one least recently given a stream (calls that never
    /// overlap rotate over all); never past the peer's limit; a
    /// connection past its age takes none once a younger one is open, and
    /// leaves the set when its streams are done.
    #[tokio::test]
    async fn fewest_active_then_least_recently_given() {
        let addr = server(2).await;
        let (sets, peers, reg, o, key) = one_peer(&addr);
        let first = open(addr.clone(), o.clone()).await.unwrap();
        let first_state = first.state.clone();
        sets.insert(&key, first, &reg, &peers);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let second = open(addr.clone(), o.clone()).await.unwrap();
        let second_state = second.state.clone();
        sets.insert(&key, second, &reg, &peers);
        let mut slots = Vec::new();
        let on = |s: &Slot, st: &Arc<ConnState>| Arc::ptr_eq(&s.state, st);
        // One stream at a time, each done before the next: they alternate
        // (by age alone, every one would go to the first).
        for want in [&first_state, &second_state, &first_state, &second_state] {
            let s = sets.take(&key).expect("room");
            assert!(on(&s, want));
            drop(s);
        }
        // Both idle: the least recently given; then the other (fewer
        // active); then the least recently given again.
        for want in [&first_state, &second_state, &first_state, &second_state] {
            let s = sets.take(&key).expect("room");
            assert!(on(&s, want));
            let (_resp, _tx) = s
                .send
                .clone()
                .ready()
                .await
                .unwrap()
                .send_request(http::Request::get("http://x/").body(()).unwrap(), false)
                .unwrap();
            slots.push((s, _resp, _tx));
        }
        // Both at the peer's limit of 2 once its SETTINGS came.
        let full = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                if sets.take(&key).is_none() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        assert!(
            full.await.is_ok(),
            "no stream past SETTINGS_MAX_CONCURRENT_STREAMS"
        );
        // One ends: its connection has room again.
        let (s, ..) = slots.remove(0);
        drop(s);
        assert!(on(&sets.take(&key).expect("room"), &first_state));
        // A connection past its age takes nothing once a younger one is open.
        let old = open(addr.clone(), opener(Duration::ZERO)).await.unwrap();
        let old_state = old.state.clone();
        sets.insert(&key, old, &reg, &peers);
        slots.clear();
        for _ in 0..4 {
            let s = sets.take(&key).expect("room");
            assert!(!on(&s, &old_state));
        }
        assert_eq!(sets.count(&key), (2, 0), "the old one is not counted");
    }

    /// A connection that joins the set takes its turn after those already
    /// there: it is not given the next stream at once.
    #[tokio::test]
    async fn a_new_connection_waits_its_turn() {
        let addr = server(2).await;
        let (sets, peers, reg, o, key) = one_peer(&addr);
        let mut states = Vec::new();
        for _ in 0..2 {
            let c = open(addr.clone(), o.clone()).await.unwrap();
            states.push(c.state.clone());
            sets.insert(&key, c, &reg, &peers);
        }
        for _ in 0..3 {
            drop(sets.take(&key).expect("room"));
        }
        let c = open(addr.clone(), o.clone()).await.unwrap();
        states.push(c.state.clone());
        sets.insert(&key, c, &reg, &peers);
        // 0 was given a stream last, 1 before it; 2 joined after both (were
        // a new one first, it would be given the next).
        for want in [1, 0, 2, 1, 0] {
            let s = sets.take(&key).expect("room");
            assert!(Arc::ptr_eq(&s.state, &states[want]), "want {want}");
        }
    }

    /// A connection that a peer shuts down gracefully (two GOAWAYs, see
    /// `a_graceful_shutdown_is_two_goaways`) takes no new stream: the
    /// next go to the other connection, and the set lacks one. The
    /// stream it took before is not refused; a later id would be.
    #[tokio::test]
    async fn a_draining_connection_takes_no_new_stream() {
        let addr = draining_server().await;
        let (sets, peers, reg, o, key) = one_peer(&addr);
        for _ in 0..2 {
            let c = open(addr.clone(), o.clone()).await.unwrap();
            sets.insert(&key, c, &reg, &peers);
        }
        let bye = sets.take(&key).expect("room");
        let draining = bye.state.clone();
        let (_resp, _tx) = bye
            .send
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(http::Request::get("http://x/bye").body(()).unwrap(), true)
            .unwrap();
        let seen = tokio::time::timeout(Duration::from_secs(5), async {
            while !draining.going_away() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert!(seen.await.is_ok(), "the GOAWAY was seen");
        for _ in 0..4 {
            let s = sets.take(&key).expect("the other connection has room");
            assert!(!Arc::ptr_eq(&s.state, &draining));
        }
        assert_eq!(sets.count(&key), (1, 0), "one connection is missing");
        // The final GOAWAY names stream 1, the last the peer took.
        let last = tokio::time::timeout(Duration::from_secs(5), async {
            while !draining.refused(3) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert!(last.await.is_ok(), "the last GOAWAY was seen");
        assert!(!draining.refused(1));
        drop(bye);
    }

    /// The first GOAWAY of a graceful shutdown (last stream id 2^31-1,
    /// then a PING) stops new streams at once, though nothing sent counts
    /// as refused: the peer may still process what is on its way. The
    /// second one, with the real last stream id, refuses the ids above it.
    #[test]
    fn a_graceful_shutdown_is_two_goaways() {
        let (mut s, state) = sniff();
        s.watch(&[
            0, 0, 8, 7, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0,
        ]);
        s.watch(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(state.going_away());
        assert!(!state.refused(1) && !state.refused(0x7fff_ffff));
        s.watch(&[0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0]);
        assert!(state.going_away());
        assert!(!state.refused(9) && state.refused(11));
    }

    /// A GOAWAY is seen in any split of the bytes, after other frames, and
    /// its last stream id is what `refused` compares with.
    #[test]
    fn goaway_is_seen_across_reads() {
        let mut bytes = Vec::new();
        // SETTINGS with one setting (6 bytes), then PING (8 bytes).
        bytes.extend_from_slice(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
        bytes.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        // GOAWAY: last stream 5, NO_ERROR, debug "x".
        bytes.extend_from_slice(&[0, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, b'x']);
        for split in 1..bytes.len() {
            let (mut s, state) = sniff();
            for part in bytes.chunks(split) {
                s.watch(part);
            }
            assert!(state.going_away(), "split {split}");
            assert!(!state.refused(5) && state.refused(7), "split {split}");
        }
        let (mut s, state) = sniff();
        s.watch(&bytes[..32]);
        assert!(!state.going_away());
    }
}
