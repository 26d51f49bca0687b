//! The keep-alive cache of idle upstream connections, per upstream and worker:
//! at most `keepalive N` idle connections (more when `keepalive_min` or
//! `pick_first warm=` ask to keep more open), the least recently used evicted
//! first once it has been idle `GRACE` (nginx closes it at once; kept that
//! long, the next burst of requests finds the connections the last one
//! opened instead of opening and closing them again: `Pool::purge`). A
//! connection is reused most-recently-used first as nginx does, or,
//! with `keepalive_min`, least-recently-used first so that traffic rotates
//! over every open connection. Never after `keepalive_timeout` idle,
//! `keepalive_time` of age (less its jitter) or `keepalive_requests`.
//!
//! Every connection is counted while it is open: in the worker's registry
//! (what `keepalive_min` tops up) and in its peer's live state (what the API
//! shows for all workers: open, idle, age, recycled).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::h1conn::H1;
use super::peers::{Ms, PeerId, PeerLive, Peers, now_ms};
use crate::conf::model::{Keepalive, PeerAddr};

/// A `location` no request set: a connection the keeper opened.
pub const ANY_LOCATION: usize = usize::MAX;

/// An upstream connection ready for a request. Its fields live in a box:
/// a connection moves at every step of a request (out of the cache, through
/// the attempt, into the response body, back into the cache) and the box
/// is a pointer where the fields are some 230 bytes, copied each time
/// (`scripts/cost`). The box is made once, when the connection opens.
pub struct Pooled(Box<Conn>);

/// What `Pooled` holds; its fields are read and set through it.
pub struct Conn {
    pub h1: H1,
    pub peer: PeerAddr,
    pub created: Instant,
    /// `keepalive_time`, with its jitter drawn for this connection.
    pub max_age: Duration,
    pub idle_since: Instant,
    /// Requests sent on it so far.
    pub requests: u64,
    /// With `keepalive N local`, the location it belongs to.
    pub location: usize,
    /// 0: plain; else TLS made with these settings and name (see
    /// `http::proxy::Tls`): only a request that would make the same
    /// handshake takes it.
    pub tls: u64,
    track: Option<Track>,
}

impl std::ops::Deref for Pooled {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.0
    }
}

impl std::ops::DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.0
    }
}

impl Pooled {
    /// The connection's fields out of their box (to take its stream for a
    /// tunnel).
    pub fn into_conn(self) -> Conn {
        *self.0
    }

    pub fn new(
        h1: H1,
        peer: PeerAddr,
        now: Instant,
        max_age: Duration,
        location: usize,
        tls: u64,
    ) -> Pooled {
        Pooled(Box::new(Conn {
            h1,
            peer,
            created: now,
            max_age,
            idle_since: now,
            requests: 0,
            location,
            tls,
            track: None,
        }))
    }

    /// Counts it as a connection to peer `id` of `peers` (again, when the
    /// peers were republished since: the counts move to the current ones).
    pub fn track(&mut self, reg: &Arc<Registry>, peers: &Arc<Peers>, id: PeerId) {
        if let Some(t) = &self.track {
            if Arc::ptr_eq(&t.peers, peers) {
                return;
            }
        }
        let created = match self.track.take() {
            Some(mut t) => {
                // Moving, not closing: the registry keeps its entry.
                t.moved = true;
                t.created
            }
            None => {
                let c = now_ms().saturating_sub(self.created.elapsed().as_millis() as Ms);
                reg.add(&self.peer, c);
                c
            }
        };
        self.track = Some(Track::open(reg.clone(), peers.clone(), id, created));
    }

    fn set_idle(&mut self, idle: bool) {
        if let Some(t) = &mut self.track {
            t.set_idle(idle);
        }
    }

    fn too_old(&self, now: Instant) -> bool {
        now.duration_since(self.created) >= self.max_age
    }

    /// Closes it because of its age (`keepalive_time`): counted as recycled.
    fn recycle(self) {
        if let Some(t) = &self.track {
            t.live().recycled.fetch_add(1, Relaxed);
        }
    }
}

/// One open connection's share of its peer's live counters.
pub(crate) struct Track {
    reg: Arc<Registry>,
    peers: Arc<Peers>,
    id: PeerId,
    /// Creation time on the shared clock.
    created: Ms,
    idle: bool,
    /// Re-counted under newer peers: the registry entry stays.
    moved: bool,
}

impl Track {
    /// Counts a new connection to peer `id`, created at `created` (shared
    /// clock), in the worker's registry and the peer's counters.
    pub(crate) fn start(reg: Arc<Registry>, peers: Arc<Peers>, id: PeerId, created: Ms) -> Track {
        let peer = peers.get(id).addr.clone();
        reg.add(&peer, created);
        Track::open(reg, peers, id, created)
    }

    /// It closes because of its age (`keepalive_time`).
    pub(crate) fn recycled(&self) {
        self.live().recycled.fetch_add(1, Relaxed);
    }

    fn open(reg: Arc<Registry>, peers: Arc<Peers>, id: PeerId, created: Ms) -> Track {
        let t = Track {
            reg,
            peers,
            id,
            created,
            idle: false,
            moved: false,
        };
        let l = t.live();
        l.open.fetch_add(1, Relaxed);
        l.created_sum.fetch_add(created, Relaxed);
        older(l, created);
        t
    }

    fn live(&self) -> &PeerLive {
        &self.peers.get(self.id).live
    }

    pub(crate) fn set_idle(&mut self, idle: bool) {
        if idle != self.idle {
            self.idle = idle;
            let l = self.live();
            if idle {
                l.idle.fetch_add(1, Relaxed);
            } else {
                let _ = l.idle.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
            }
        }
    }
}

impl Drop for Track {
    fn drop(&mut self) {
        self.set_idle(false);
        let peer = self.peers.get(self.id).addr.clone();
        let left = if self.moved {
            None
        } else {
            self.reg.remove(&peer, self.created)
        };
        let l = self.live();
        let _ = l.open.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        let _ = l
            .created_sum
            .fetch_update(Relaxed, Relaxed, |s| s.checked_sub(self.created));
        if !self.moved {
            // The oldest closed: this worker's next oldest stands in until
            // the other workers restate theirs (`Registry::restate`).
            let _ = l
                .oldest
                .compare_exchange(self.created, left.unwrap_or(0), Relaxed, Relaxed);
        }
    }
}

/// Lowers a peer's oldest connection time to `created` (0 means none).
fn older(l: &PeerLive, created: Ms) {
    let _ = l.oldest.fetch_update(Relaxed, Relaxed, |o| {
        (o == 0 || created < o).then_some(created)
    });
}

/// The connections this worker has open per peer (busy or idle), by their
/// creation times.
#[derive(Default)]
pub struct Registry {
    open: Mutex<HashMap<PeerAddr, Vec<Ms>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PeerAddr, Vec<Ms>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, peer: &PeerAddr, created: Ms) {
        self.lock().entry(peer.clone()).or_default().push(created);
    }

    /// Forgets one connection; the oldest left to the peer, if any.
    fn remove(&self, peer: &PeerAddr, created: Ms) -> Option<Ms> {
        let mut open = self.lock();
        let list = open.get_mut(peer)?;
        if let Some(i) = list.iter().position(|c| *c == created) {
            list.swap_remove(i);
        }
        let left = list.iter().min().copied();
        if list.is_empty() {
            open.remove(peer);
        }
        left
    }

    /// Connections open to `peer` in this worker.
    pub fn count(&self, peer: &PeerAddr) -> usize {
        self.lock().get(peer).map_or(0, Vec::len)
    }

    /// States this worker's oldest connection to each peer of `peers`.
    pub fn restate(&self, peers: &Peers) {
        let open = self.lock();
        for p in peers.primary.iter().chain(peers.backup.iter()) {
            if let Some(m) = open.get(&p.addr).and_then(|l| l.iter().min()) {
                older(&p.live, *m);
            }
        }
    }
}

pub struct Pool {
    cfg: Keepalive,
    /// Idle connections kept at most: `keepalive N` plus what the keeper
    /// keeps open.
    cap: usize,
    /// The keeper's connections per peer: idle ones up to that many are
    /// evicted last, and kept even when `keepalive 0` turns the cache off.
    targets: HashMap<PeerAddr, usize>,
    /// Most recently used at the front.
    idle: VecDeque<Pooled>,
    /// Per peer, the connections found closed unused within `YOUNG` of
    /// their opening since the keeper last asked (`take_died_young`): a
    /// peer that closes them as they open (a layer-4 proxy with nothing
    /// behind it) is left alone a while instead of reconnected every tick.
    died_young: HashMap<PeerAddr, usize>,
}

/// A connection closed unused this soon after it opened "died young".
const YOUNG: Duration = Duration::from_secs(1);

/// How long an idle connection over `keepalive N` stays before it closes
/// (`Pool::purge`, each `GRACE`, closes those that have stayed so long).
pub const GRACE: Duration = Duration::from_secs(1);

/// Idle connections, the surplus kept for `GRACE` included, are at most
/// this many times `keepalive N`.
const SURPLUS: usize = 4;

impl Pool {
    pub fn new(cfg: Keepalive) -> Pool {
        Pool {
            cap: cfg.max,
            cfg,
            targets: HashMap::new(),
            idle: VecDeque::new(),
            died_young: HashMap::new(),
        }
    }

    fn target(&self, peer: &PeerAddr) -> usize {
        self.targets.get(peer).copied().unwrap_or(0)
    }

    fn fresh(&self, c: &Pooled, now: Instant) -> bool {
        c.h1.is_open()
            && now.duration_since(c.idle_since) < self.cfg.timeout
            && c.requests < self.cfg.requests
    }

    /// Drops an idle connection that may not serve again: closed, idle too
    /// long, used up or, with the keeper (`keepalive_min`), too old
    /// (recycled). Without it, as nginx, `keepalive_time` is checked when a
    /// connection goes back to the cache (`put`), not while it is idle: one
    /// that crossed it meanwhile serves once more.
    fn usable(&mut self, c: Pooled, now: Instant) -> Option<Pooled> {
        if !self.fresh(&c, now) {
            // Counted for the keeper only (`keepalive_min`), which takes
            // the count every tick: without it nothing would empty it.
            if self.cfg.min > 0
                && c.requests == 0
                && now.duration_since(c.created) < YOUNG
                && !c.h1.is_open()
            {
                *self.died_young.entry(c.peer.clone()).or_default() += 1;
            }
            return None;
        }
        if self.cfg.min > 0 && c.too_old(now) {
            c.recycle();
            return None;
        }
        Some(c)
    }

    /// An idle connection to `peer` (plain, or TLS as `tls` says), if one
    /// is cached and still usable: the most recently used, or with
    /// `keepalive_min` the least.
    pub fn take(
        &mut self,
        peer: &PeerAddr,
        location: usize,
        tls: u64,
        now: Instant,
    ) -> Option<Pooled> {
        let local = self.cfg.local;
        let rotate = self.cfg.min > 0;
        let matches = |c: &Pooled| {
            c.peer == *peer
                && c.tls == tls
                && (!local || c.location == location || c.location == ANY_LOCATION)
        };
        loop {
            let i = if rotate {
                self.idle.iter().rposition(matches)?
            } else {
                self.idle.iter().position(matches)?
            };
            let c = self.idle.remove(i)?;
            if let Some(mut c) = self.usable(c, now) {
                c.set_idle(false);
                return Some(c);
            }
        }
    }

    /// Whether connections are cached at all (`keepalive`, or the
    /// keeper's).
    pub fn caches(&self) -> bool {
        self.cap > 0 || !self.targets.is_empty()
    }

    /// Whether a connection that just finished a response may be cached.
    pub fn may_keep(&self, c: &Pooled, now: Instant) -> bool {
        let room = self.cfg.max > 0 || self.idle_to(&c.peer) < self.target(&c.peer);
        room && !c.too_old(now) && c.requests < self.cfg.requests
    }

    /// Caches an idle connection (false: it was closed instead), evicting
    /// the least recently used one of a peer above the keeper's target.
    pub fn put(&mut self, mut c: Pooled, now: Instant) -> bool {
        if !self.may_keep(&c, now) {
            if c.too_old(now) {
                c.recycle();
            }
            return false;
        }
        c.idle_since = now;
        c.set_idle(true);
        self.idle.push_front(c);
        // Without a keeper: the least recently used, as nginx, once it has
        // been idle `GRACE`.
        if self.targets.is_empty() {
            self.purge(now);
            return true;
        }
        while self.idle.len() > self.cap {
            let mut count: HashMap<&PeerAddr, usize> = HashMap::new();
            for c in &self.idle {
                *count.entry(&c.peer).or_default() += 1;
            }
            let spare = self
                .idle
                .iter()
                .rposition(|c| count.get(&c.peer).copied().unwrap_or(0) > self.target(&c.peer));
            match spare {
                Some(i) => drop(self.idle.remove(i)),
                None => drop(self.idle.pop_back()),
            }
        }
        true
    }

    /// Drops idle connections that may not serve again or whose peer is no
    /// longer listed (`listed` says), and counts the others under `peers`
    /// (the current snapshot, so that old ones are let go).
    pub fn prune(
        &mut self,
        now: Instant,
        reg: &Arc<Registry>,
        peers: &Arc<Peers>,
        listed: impl Fn(&PeerAddr) -> Option<PeerId>,
    ) {
        let idle = std::mem::take(&mut self.idle);
        for c in idle {
            let Some(id) = listed(&c.peer) else { continue };
            if let Some(mut c) = self.usable(c, now) {
                c.track(reg, peers, id);
                c.set_idle(true);
                self.idle.push_back(c);
            }
        }
    }

    /// The peers whose connections were found closed unused soon after
    /// they opened since the last call, and how many.
    pub fn take_died_young(&mut self) -> HashMap<PeerAddr, usize> {
        std::mem::take(&mut self.died_young)
    }

    /// The keeper's connections per peer; the cache holds them besides
    /// `keepalive N`.
    pub fn set_targets(&mut self, targets: HashMap<PeerAddr, usize>) {
        self.cap = self.cfg.max + targets.values().sum::<usize>();
        self.targets = targets;
    }

    /// Whether the least recently used idle connection, one over
    /// `keepalive N`, goes now: idle `GRACE`, or the surplus at its bound.
    fn surplus_expired(&self, now: Instant) -> bool {
        let stale = self
            .idle
            .back()
            .is_none_or(|c| now.saturating_duration_since(c.idle_since) >= GRACE);
        stale || self.idle.len() > self.cap.saturating_mul(SURPLUS)
    }

    /// Closes the idle connections over `keepalive N` that have been idle
    /// `GRACE` (the least recently used first). The worker calls it every
    /// `GRACE`, so a surplus left by a burst goes when traffic stops.
    pub fn purge(&mut self, now: Instant) {
        if !self.targets.is_empty() {
            return;
        }
        while self.idle.len() > self.cap && self.surplus_expired(now) {
            self.idle.pop_back();
        }
    }

    pub fn idle_count(&self) -> usize {
        self.idle.len()
    }

    /// Idle connections to `peer`.
    pub fn idle_to(&self, peer: &PeerAddr) -> usize {
        self.idle.iter().filter(|c| c.peer == *peer).count()
    }
}

/// Keep-alive settings for unit tests: no cache, an hour of life.
#[cfg(test)]
pub(crate) fn tests_keepalive() -> Keepalive {
    Keepalive {
        min: 0,
        max: 0,
        local: false,
        requests: 1000,
        time: Duration::from_secs(3600),
        timeout: Duration::from_secs(60),
        jitter: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// A real (idle) connection to `addr`'s listener.
    async fn conn(l: &std::net::TcpListener, peer: &PeerAddr) -> Pooled {
        let addr = l.local_addr().expect("addr");
        let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        Pooled::new(
            H1::new(crate::net::stream::Stream::Tcp(s)),
            peer.clone(),
            Instant::now(),
            Duration::from_secs(3600),
            0,
            0,
        )
    }

    /// A current-thread runtime with I/O and time, for a test's body.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// A peer at 127.0.0.1:`port` (only its address is compared).
    fn peer(port: u16) -> PeerAddr {
        PeerAddr::Inet(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// `conn`, marked as opened by `location` (to tell connections apart).
    async fn conn_at(l: &std::net::TcpListener, peer: &PeerAddr, location: usize) -> Pooled {
        let mut c = conn(l, peer).await;
        c.location = location;
        c
    }

    fn cfg(max: usize, min: usize) -> Keepalive {
        Keepalive {
            max,
            min,
            ..tests_keepalive()
        }
    }

    #[test]
    fn the_keepers_connections_are_evicted_last_and_kept_without_a_cache() {
        runtime().block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let a = peer(1);
            let b = peer(2);
            let now = Instant::now();

            // keepalive 1, the keeper keeps one to a: a request's
            // connections to b push out b's, never a's.
            let mut p = Pool::new(cfg(1, 0));
            p.set_targets([(a.clone(), 1)].into_iter().collect());
            assert!(p.put(conn(&l, &a).await, now));
            assert!(p.put(conn(&l, &b).await, now));
            assert!(p.put(conn(&l, &b).await, now));
            assert_eq!((p.idle_to(&a), p.idle_to(&b)), (1, 1));

            // keepalive 0: only what the keeper keeps is cached.
            let mut p = Pool::new(cfg(0, 0));
            p.set_targets([(a.clone(), 1)].into_iter().collect());
            assert!(!p.put(conn(&l, &b).await, now));
            assert!(p.put(conn(&l, &a).await, now));
            assert!(!p.put(conn(&l, &a).await, now));

            // keepalive_min: the least recently used first; without it the most.
            for (min, want) in [(1, 0), (0, 2)] {
                let mut p = Pool::new(cfg(3, min));
                for location in 0..3 {
                    assert!(p.put(conn_at(&l, &a, location).await, now));
                }
                let got = p.take(&a, 0, 0, now).map(|c| c.location);
                assert_eq!(got, Some(want), "keepalive_min {min}");
            }

            // A TLS connection serves only requests that would make the
            // same handshake; a plain one only plain requests.
            let mut p = Pool::new(cfg(2, 0));
            let mut c = conn(&l, &a).await;
            c.tls = 7;
            assert!(p.put(c, now));
            assert!(p.take(&a, 0, 0, now).is_none());
            assert!(p.take(&a, 0, 9, now).is_none());
            assert_eq!(p.take(&a, 0, 7, now).map(|c| c.tls), Some(7));
        });
    }

    /// Over `keepalive N`, idle connections stay `GRACE` (the next burst
    /// takes them again), then go: at the next `put` or `purge`, the least
    /// recently used first; never more than `SURPLUS` times N.
    #[test]
    fn connections_over_the_cache_stay_their_grace_then_go() {
        runtime().block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let a = peer(1);
            let t0 = Instant::now();
            let mut p = Pool::new(cfg(1, 0));
            for location in 0..3 {
                assert!(p.put(conn_at(&l, &a, location).await, t0));
            }
            assert_eq!(p.idle_count(), 3, "a burst's connections stay");
            p.purge(t0 + GRACE / 2);
            assert_eq!(p.idle_count(), 3, "within the grace");
            // Taken again (the most recently used first) and put back later.
            let c = p.take(&a, 0, 0, t0).expect("cached");
            assert_eq!(c.location, 2);
            let later = t0 + GRACE / 2;
            assert!(p.put(c, later));
            // Past the grace of the two older ones: they go, oldest first.
            p.purge(t0 + GRACE);
            assert_eq!(p.idle_count(), 1);
            assert_eq!(p.take(&a, 0, 0, t0 + GRACE).map(|c| c.location), Some(2));

            // The surplus has a bound: SURPLUS times N, then the least
            // recently used goes at once.
            let mut p = Pool::new(cfg(1, 0));
            for location in 0..SURPLUS + 2 {
                assert!(p.put(conn_at(&l, &a, location).await, t0));
            }
            assert_eq!(p.idle_count(), SURPLUS);
            let oldest = p.idle.back().map(|c| c.location);
            assert_eq!(oldest, Some(2), "the two least recently used went");
        });
    }
}
