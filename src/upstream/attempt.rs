//! The attempt engine: how one HTTP request or one stream session gets to a
//! connected upstream peer, and how every failure on the way is accounted.
//! The HTTP proxy and the stream proxy both use it and differ only in what
//! they exchange once connected.
//!
//! Per request it owns the peer snapshot, the tried set, the tries left and
//! `proxy_next_upstream_timeout`; the balancer key; the connect race and its
//! background losers; the guards that release a peer whose request went
//! away; the pick_first move; and the failure accounting with its error-log
//! line. A failure is a typed [`Failure`]: which side failed and what kind,
//! from which come the status (502, 504, 499) and the `proxy_next_upstream`
//! condition, in one place. A [`Connector`] opens connections (TCP and unix
//! here; the HTTP proxy's adds its keep-alive cache and handshake).

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::balancer::{Key, PickState};
use super::peers::now_ms;
use super::race::{Ended, Race};
use super::{Outcome, PeerId, Peers, Released, Tried, UpstreamRt, in_time};
use crate::conf::model::{Balancer, NextUpstream, PeerAddr, Queue};
use crate::conf::vars::Template;
use crate::log::Level;
use crate::net::stream::{ConnectError, Stream};

/// Which side of the proxy an attempt failed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Upstream,
    /// The client went away first (nginx's 499).
    Client,
}

/// What went wrong. `proxy_next_upstream` sees `Timeout` as `timeout`,
/// `InvalidHeader` as `invalid_header` and the rest as `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// connect() refused (ECONNREFUSED).
    Refused,
    /// The connection was reset.
    Reset,
    /// The connection was set up but the protocol's start failed.
    Handshake,
    /// The peer closed before it answered (or the request could not go).
    Closed,
    /// Any other failure (unreachable, no live upstreams, ...).
    Error,
    /// Nothing within the time allowed.
    Timeout,
    /// An answer that cannot be used.
    InvalidHeader,
}

/// A failed attempt: who, what, and nginx's words for it (without the
/// "while ..." stage, which the caller knows, except for a connect's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub side: Side,
    pub kind: Kind,
    pub text: String,
    /// Where a connect failed: nginx's "while ..." words for it.
    pub stage: &'static str,
}

/// A connect's stages as nginx's error log names them.
pub const CONNECTING: &str = "connecting to upstream";
pub const HANDSHAKING: &str = "SSL handshaking to upstream";

impl Failure {
    pub fn upstream(kind: Kind, text: impl Into<String>) -> Failure {
        Failure {
            side: Side::Upstream,
            kind,
            text: text.into(),
            stage: CONNECTING,
        }
    }

    /// A TLS handshake with the upstream that did not complete; `name`:
    /// the name its certificate was checked against.
    pub fn handshake(e: &crate::net::tls_client::ClientError, name: &str) -> Failure {
        Failure {
            stage: HANDSHAKING,
            ..Failure::upstream(Kind::Handshake, e.text(name))
        }
    }

    /// A TLS handshake with the upstream that did not end in time.
    pub fn handshake_timeout() -> Failure {
        Failure {
            stage: HANDSHAKING,
            ..Failure::upstream(
                Kind::Timeout,
                "upstream timed out (110: Connection timed out)",
            )
        }
    }

    /// A connect that did not complete, as nginx words it.
    pub fn connect(addr: &PeerAddr, e: ConnectError) -> Failure {
        match e {
            ConnectError::Timeout => Failure::upstream(
                Kind::Timeout,
                "upstream timed out (110: Connection timed out)",
            ),
            ConnectError::Failed(e) => {
                let errno = crate::log::errno_text(&e);
                let kind = match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => Kind::Refused,
                    std::io::ErrorKind::ConnectionReset => Kind::Reset,
                    _ => Kind::Error,
                };
                Failure::upstream(
                    kind,
                    match addr {
                        PeerAddr::Unix(p) => {
                            format!("connect() to unix:{} failed ({errno})", p.display())
                        }
                        PeerAddr::Inet(_) => format!("connect() failed ({errno})"),
                    },
                )
            }
        }
    }

    /// The `proxy_next_upstream` condition it meets.
    pub fn condition(&self) -> u32 {
        match self.kind {
            Kind::Timeout => NextUpstream::TIMEOUT,
            Kind::InvalidHeader => NextUpstream::INVALID_HEADER,
            Kind::Refused | Kind::Reset | Kind::Handshake | Kind::Closed | Kind::Error => {
                NextUpstream::ERROR
            }
        }
    }

    /// The status a request answers with when no other try follows.
    pub fn status(&self) -> u16 {
        match (self.side, self.kind) {
            (Side::Client, _) => 499,
            (_, Kind::Timeout) => 504,
            _ => 502,
        }
    }
}

/// Opens connections to peers for the engine.
pub trait Connector {
    type Conn: Send + 'static;

    /// A kept-alive connection to `addr`, if there is one.
    fn cached(&self, addr: &PeerAddr) -> Option<Self::Conn>;

    /// Connections in use go back to a cache `cached` takes from (the
    /// upstream has `keepalive`).
    fn caches(&self) -> bool {
        false
    }

    /// A new connection (runs in a task of its own when raced).
    fn open(
        &self,
        addr: PeerAddr,
    ) -> impl Future<Output = Result<Self::Conn, Failure>> + Send + 'static;
}

/// TCP or unix connections, with TLS on top when `tls` says (the stream
/// proxy's: `proxy_ssl on`); the handshake has `timeout` too, as nginx's
/// `proxy_connect_timeout` bounds it.
pub struct Plain {
    pub timeout: Duration,
    pub tls: Option<super::tls::Tls>,
    /// A PROXY protocol header to send first (`proxy_protocol on`), before
    /// any TLS, on every connection opened.
    pub proxy_protocol: Option<Arc<[u8]>>,
    /// The local address to connect from (stream's `proxy_bind`).
    pub bind: Option<IpAddr>,
    /// SO_KEEPALIVE on the connection (`proxy_socket_keepalive on`).
    pub keepalive: bool,
}

impl Connector for Plain {
    type Conn = Stream;

    fn cached(&self, _: &PeerAddr) -> Option<Stream> {
        None
    }

    fn open(
        &self,
        addr: PeerAddr,
    ) -> impl Future<Output = Result<Stream, Failure>> + Send + 'static {
        let timeout = self.timeout;
        let tls = self.tls.clone();
        let header = self.proxy_protocol.clone();
        let (bind, keepalive) = (self.bind, self.keepalive);
        async move {
            let s = crate::net::stream::connect_from(&addr, bind, timeout)
                .await
                .map_err(|e| Failure::connect(&addr, e))?;
            if let (true, Stream::Tcp(t)) = (keepalive, &s) {
                let _ = socket2::SockRef::from(t).set_keepalive(true);
            }
            if let Some(h) = header {
                s.write_all_ref(&h, timeout).await.map_err(|e| {
                    Failure::upstream(
                        Kind::Error,
                        format!(
                            "could not send PROXY protocol header ({})",
                            crate::log::errno_text(&e)
                        ),
                    )
                })?;
            }
            match tls {
                None => Ok(s),
                Some(t) => t.handshake(&addr, s, timeout).await,
            }
        }
    }
}

/// The request (or session) an engine works for: what its balancer hashes,
/// and how its log lines and `$upstream_*` records read.
pub trait Requester {
    /// The connection number for the error log.
    fn number(&self) -> u64;
    /// `hash KEY`'s key, for this request.
    fn hash_text(&self, key: &Template) -> String;
    fn client_ip(&self) -> Option<IpAddr>;
    /// The error log's context for an attempt on `peer` (a peer's name, or
    /// the upstream's when none was had).
    fn context(&self, peer: &str) -> String;
    /// An attempt on `peer` failed before anything was exchanged, `took`
    /// after it began.
    fn record_failed(&mut self, peer: &Arc<str>, f: &Failure, took: Duration);
}

/// When another try may follow, from the location's settings.
#[derive(Debug, Clone)]
pub struct Policy {
    /// `proxy_next_upstream`'s conditions.
    pub mask: NextUpstream,
    /// `proxy_next_upstream_tries` (0: as many as there are peers).
    pub tries: u32,
    /// `proxy_next_upstream_timeout` (zero: none).
    pub timeout: Duration,
    /// `proxy_connect_race`.
    pub race: Option<Duration>,
    /// A request nginx does not send twice once an upstream may have acted
    /// on it (POST, LOCK, PATCH), unless `non_idempotent` is listed.
    pub non_idempotent: bool,
}

/// The peer of an attempt under way: released without counting a failure if
/// it is dropped still armed (the request went away before the attempt
/// released the peer or handed it on to a body or a tunnel).
pub struct Held {
    snap: Arc<Peers>,
    id: PeerId,
    armed: bool,
}

impl Held {
    fn new(snap: Arc<Peers>, id: PeerId) -> Held {
        Held {
            snap,
            id,
            armed: true,
        }
    }

    /// Released or handed on: nothing left to do.
    pub fn done(&mut self) {
        self.armed = false;
    }

    /// The attempt ended well (or its end was not the peer's doing):
    /// releases the peer with `outcome`, which counts no failure.
    /// Adds a session's bytes to the peer's counters (the API's `sent` and
    /// `received`).
    pub fn account(&self, sent: u64, received: u64) {
        let live = &self.snap.get(self.id).live;
        live.sent
            .fetch_add(sent, std::sync::atomic::Ordering::Relaxed);
        live.received
            .fetch_add(received, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn finish(mut self, outcome: Outcome) {
        self.armed = false;
        self.snap.release(self.id, outcome, now_ms());
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.armed {
            self.snap.release(self.id, Outcome::Next, now_ms());
        }
    }
}

/// Peers taken for connect attempts not yet decided: released (without
/// counting a failure) if the request goes away while they connect.
struct Undecided {
    snap: Arc<Peers>,
    ids: Vec<PeerId>,
}

impl Drop for Undecided {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            self.snap.release(id, Outcome::Next, now_ms());
        }
    }
}

/// A connected attempt.
pub struct Connected<C> {
    pub conn: C,
    pub id: PeerId,
    pub name: Arc<str>,
    /// When the attempt began (for `$upstream_connect_time` and the rest).
    pub began: Instant,
    /// It came from the keep-alive cache.
    pub cached: bool,
    /// Releases the peer if the request goes away.
    pub held: Held,
}

/// One request's attempts on one upstream.
pub struct Attempts {
    ups: Arc<UpstreamRt>,
    /// The peers as this request sees them, for all its tries.
    pub snap: Arc<Peers>,
    tried: Tried,
    tries_left: usize,
    pick: PickState,
    started: Instant,
    policy: Policy,
    hash_text: String,
    addr_key: Vec<u8>,
    first: bool,
    /// `connect` has let the other woken tasks run once before opening a
    /// connection (it does so once per request).
    yielded: bool,
    number: u64,
    /// How long `new` waited for a name's first answer or in the queue.
    pub queued: std::time::Duration,
    /// `queue`: the peer the first pick took while the request waited.
    pending: Undecided,
    /// `queue`: why the request got no peer (full, timed out).
    refused: Option<&'static str>,
    /// `sticky`: the id of the peer the request names (its cookie, its
    /// route, or its learned session's peer).
    sticky: Option<String>,
    /// `sticky learn`: the session id the request brought (`lookup=`).
    pub session: Option<String>,
}

/// How often a request in the queue looks for a peer when no release in
/// this worker woke it (peers freed by other workers, health checks and DNS
/// answers change the zone's peers without a wake-up).
const QUEUE_TICK: Duration = Duration::from_millis(25);

/// The tries a request has on `snap`: `proxy_next_upstream_tries`, at most
/// the number of peers.
fn tries(policy: &Policy, snap: &Peers) -> usize {
    let n = snap.tries();
    match policy.tries {
        0 => n,
        limit => n.min(limit as usize),
    }
}

/// One of an upstream's `queue` places in this worker, freed when dropped.
struct QueuePlace(Arc<UpstreamRt>, Arc<super::QueueWake>);

impl QueuePlace {
    /// A place, counted in the zone (for the API and the metrics); None
    /// (an overflow, counted too) when the worker's queue is full.
    fn enter(ups: &Arc<UpstreamRt>, max: usize) -> Option<QueuePlace> {
        let wake = ups.queue.clone()?;
        let zone = ups.zone().zip(ups.zone_index());
        let entered = wake
            .waiting
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .is_ok();
        if let Some((z, i)) = zone {
            match entered {
                true => z.queue_wait(i, true),
                false => z.queue_overflow(i),
            }
        }
        entered.then(|| QueuePlace(ups.clone(), wake))
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.1.waiting.fetch_sub(1, Relaxed);
        if let (Some(z), Some(i)) = (self.0.zone(), self.0.zone_index()) {
            z.queue_wait(i, false);
        }
    }
}

impl Attempts {
    /// Takes the request's snapshot (waiting, bounded, for a name's first
    /// answer) and its balancer key. With `queue` the first pick is made
    /// here: a request that finds no peer waits in the queue for one.
    pub async fn new(ups: &Arc<UpstreamRt>, policy: Policy, who: &impl Requester) -> Attempts {
        let waiting = crate::net::clock::now();
        // The queue waits for a first answer too.
        let snap = match ups.cfg.queue {
            Some(_) => ups.peers(),
            None => ups.peers_ready().await,
        };
        let tries_left = tries(&policy, &snap);
        let hash_text = match &ups.cfg.balancer {
            Balancer::Hash { key, .. } => who.hash_text(key),
            _ => String::new(),
        };
        let addr_key = match (&ups.cfg.balancer, who.client_ip()) {
            (Balancer::IpHash, Some(IpAddr::V4(ip))) => ip.octets()[..3].to_vec(),
            (Balancer::IpHash, Some(IpAddr::V6(ip))) => ip.octets().to_vec(),
            (Balancer::IpHash, None) => vec![0, 0, 0],
            _ => Vec::new(),
        };
        // Only `random` draws numbers; the others need no seed.
        let seed = match &ups.cfg.balancer {
            Balancer::Random { .. } => super::random::next_u64(),
            _ => 0,
        };
        let (sticky, session) = sticky_hint(ups, who);
        let mut a = Attempts {
            sticky,
            session,
            ups: ups.clone(),
            tried: Tried::new(&snap),
            pending: Undecided {
                snap: snap.clone(),
                ids: Vec::new(),
            },
            snap,
            tries_left,
            pick: PickState::new(seed),
            started: crate::net::clock::now(),
            policy,
            hash_text,
            addr_key,
            first: true,
            yielded: false,
            number: who.number(),
            queued: Duration::ZERO,
            refused: None,
        };
        if let Some(q) = ups.cfg.queue {
            match a.take() {
                Some(id) => a.pending.ids.push(id),
                None => match a.queue(q).await {
                    Ok(id) => a.pending.ids.push(id),
                    Err(why) => a.refused = Some(why),
                },
            }
            // proxy_next_upstream_timeout counts from the first attempt.
            a.started = crate::net::clock::now();
        }
        a.queued = crate::net::clock::since(waiting);
        a
    }

    /// `queue`: waits, in one of the upstream's queue places in this
    /// worker, until the balancer finds a peer (looking again when a release
    /// here wakes it, the longest-waiting first, else every `QUEUE_TICK`, as
    /// other workers' requests, checks and answers change the zone's peers)
    /// or the queue's timeout passes. Err: why not, in the
    /// error log's words.
    async fn queue(&mut self, q: Queue) -> Result<PeerId, &'static str> {
        let Some(place) = QueuePlace::enter(&self.ups, q.max) else {
            return Err("upstream queue is full");
        };
        let deadline = crate::net::clock::now() + q.timeout;
        let wake = place.1.clone();
        // One registration kept across the ticks, so that a release wakes
        // the longest-waiting request (a new registration goes to the back).
        let mut woken = std::pin::pin!(wake.notify.notified());
        woken.as_mut().enable();
        loop {
            let left = deadline.saturating_duration_since(crate::net::clock::now());
            tokio::select! {
                _ = woken.as_mut() => {
                    woken.set(wake.notify.notified());
                    woken.as_mut().enable();
                }
                _ = crate::net::clock::sleep(QUEUE_TICK.min(left)) => {}
            }
            let latest = self.ups.peers();
            if latest.config != self.snap.config || self.snap.count() == 0 {
                self.tried = Tried::new(&latest);
                self.pending.snap = latest.clone();
                self.snap = latest;
            }
            // Peers the API brought back count again.
            self.tries_left = tries(&self.policy, &self.snap);
            if let Some(id) = self.take() {
                return Ok(id);
            }
            if crate::net::clock::now() >= deadline {
                return Err("upstream queue timed out");
            }
        }
    }

    /// nginx's next-upstream decision: tries are left, the condition is
    /// listed, a non-idempotent request that reached the upstream has
    /// `non_idempotent`, and `proxy_next_upstream_timeout` has not passed.
    pub fn retry(&self, condition: u32, request_sent: bool) -> bool {
        may_retry(
            &self.policy,
            condition,
            self.tries_left,
            request_sent,
            crate::net::clock::since(self.started),
        )
    }

    /// A race may start another connect: a failed one could go on to the
    /// next peer, and the peers have not changed.
    fn may_race(&self) -> bool {
        let mask = self.policy.mask;
        self.tries_left > 0
            && in_time(crate::net::clock::since(self.started), self.policy.timeout)
            && (mask.has(NextUpstream::ERROR) || mask.has(NextUpstream::TIMEOUT))
            && self.ups.peers().config == self.snap.config
    }

    /// The id `sticky` gives the peer `id` (for its cookie, its session).
    pub fn sid(&self, id: PeerId) -> String {
        super::sticky::sid(&self.ups.cfg, self.snap.get(id))
    }

    /// The balancer's next peer, taken for a try: the one `sticky` names
    /// first, while it is usable and untried (nginx's hint).
    fn take(&mut self) -> Option<PeerId> {
        let (b, ms) = (&self.ups.cfg.balancer, now_ms());
        if let Some(want) = &self.sticky {
            if let Some(id) = super::sticky::pick(&self.snap, &self.ups.cfg, want, &self.tried, ms)
            {
                self.snap.acquire(id, ms);
                self.tried.set(id);
                self.tries_left = self.tries_left.saturating_sub(1);
                return Some(id);
            }
        }
        let key = match b {
            Balancer::Hash { .. } => Key::Text(&self.hash_text),
            Balancer::IpHash => Key::Addr(&self.addr_key),
            _ => Key::None,
        };
        self.snap.take(
            b,
            &mut self.pick,
            &key,
            &mut self.tried,
            &mut self.tries_left,
            ms,
        )
    }

    /// Picks a peer and connects: a cached connection first, else a new one
    /// (raced against the next peers' with `proxy_connect_race`), trying
    /// the next peer after a failed connect as the policy allows. Each
    /// failure is logged, recorded and counted. Err: the status to answer
    /// with.
    pub async fn connect<K: Connector>(
        &mut self,
        k: &K,
        who: &mut impl Requester,
    ) -> Result<Connected<K::Conn>, u16> {
        loop {
            // nginx: a retry after the zone's peer list changed is refused.
            let moved = !self.first && self.ups.peers().config != self.snap.config;
            self.first = false;
            let pick = match self.pending.ids.pop() {
                Some(id) => Some(id),
                None if moved => None,
                None => self.take(),
            };
            let Some(id) = pick else {
                let name: Arc<str> = self.ups.cfg.name.as_str().into();
                let why = self.refused.take().unwrap_or("no live upstreams");
                crate::log_conn!(
                    Level::Error,
                    self.number,
                    "{why} while connecting to upstream{}",
                    who.context(&name)
                );
                who.record_failed(&name, &Failure::upstream(Kind::Error, why), Duration::ZERO);
                return Err(502);
            };
            let now = crate::net::clock::now();
            let addr = self.snap.get(id).addr.clone();
            if let Some(conn) = k.cached(&addr) {
                return Ok(self.connected(conn, id, now, true));
            }
            // None cached: the tasks already woken in this turn of the
            // event loop run first (their responses read, their
            // connections cached), then the cache is asked once more
            // before a new connection is paid for. Under load, requests
            // and responses come in the same turn.
            if k.caches() && !std::mem::replace(&mut self.yielded, true) {
                tokio::task::yield_now().await;
                if let Some(conn) = k.cached(&addr) {
                    return Ok(self.connected(conn, id, now, true));
                }
            }
            // Per attempt: the peer, when it began, whether cached.
            let mut racers = vec![(id, now, false)];
            let mut undecided = Undecided {
                snap: self.snap.clone(),
                ids: vec![id],
            };
            let mut race: Race<K::Conn, Failure> = Race::default();
            let mut failures = Vec::new();
            // Boxed: a new connection's race (connect, TLS handshake) is
            // over 4 kB of state that a request served from the keep-alive
            // cache should not carry in its own future.
            let ended = crate::net::boxed::boxed(|| {
                race.first(
                    k.open(addr),
                    self.policy.race,
                    |race| {
                        if !self.may_race() {
                            return false;
                        }
                        let Some(next) = self.take() else {
                            return false;
                        };
                        let t = crate::net::clock::now();
                        let addr = self.snap.get(next).addr.clone();
                        let cached = k.cached(&addr);
                        racers.push((next, t, cached.is_some()));
                        undecided.ids.push(next);
                        match cached {
                            Some(c) => race.start(async move { Ok(c) }),
                            None => race.start(k.open(addr)),
                        };
                        true
                    },
                    |j, f| failures.push((j, f)),
                )
            })
            .await;
            // Every attempt is accounted for below.
            undecided.ids.clear();
            for (j, f) in failures {
                self.connect_failed(racers[j].0, racers[j].1, &f, who);
            }
            match ended {
                Some(Ended::Won(j, conn)) => {
                    let (wid, began, cached) = racers[j];
                    if racers.len() > 1 {
                        self.losers(race, &racers, who);
                    }
                    return Ok(self.connected(conn, wid, began, cached));
                }
                Some(Ended::Lost(j, f)) => {
                    self.connect_failed(racers[j].0, racers[j].1, &f, who);
                    if !self.retry(f.condition(), false) {
                        return Err(f.status());
                    }
                }
                None => return Err(502),
            }
        }
    }

    fn connected<C>(&self, conn: C, id: PeerId, began: Instant, cached: bool) -> Connected<C> {
        Connected {
            conn,
            id,
            name: self.snap.get(id).name.clone(),
            began,
            cached,
            held: Held::new(self.snap.clone(), id),
        }
    }

    /// The losers of a race still connecting finish in the background: one
    /// that fails counts as failed, one that connects is closed unused.
    fn losers<C: Send + 'static>(
        &self,
        race: Race<C, Failure>,
        racers: &[(PeerId, Instant, bool)],
        who: &impl Requester,
    ) {
        // Race numbers are the racers' places: they started in that order.
        let losers: Vec<(PeerId, String)> = racers
            .iter()
            .map(|(id, ..)| (*id, who.context(&self.snap.get(*id).name)))
            .collect();
        let (snap, number) = (self.snap.clone(), self.number);
        let pick_first = self.ups.cfg.balancer.is_pick_first();
        race.finish(move |j, result| {
            let Some((id, ctx)) = losers.get(j) else {
                return;
            };
            match result {
                Ok(_unused) => {
                    snap.release(*id, Outcome::Next, now_ms());
                }
                Err(f) => failed(number, ctx.clone(), &f, &snap, pick_first, *id),
            }
        });
    }

    /// A connect that failed: logged, recorded, the peer released as failed.
    fn connect_failed(&self, id: PeerId, began: Instant, f: &Failure, who: &mut impl Requester) {
        let name = self.snap.get(id).name.clone();
        who.record_failed(&name, f, crate::net::clock::since(began));
        let pick_first = self.ups.cfg.balancer.is_pick_first();
        failed(
            self.number,
            who.context(&name),
            f,
            &self.snap,
            pick_first,
            id,
        );
    }

    /// Releases a peer after an attempt with its outcome, logging (with
    /// the context `ctx` makes) when it reaches `max_fails`; with
    /// pick_first a failure moves the choice on.
    pub fn release(&self, id: PeerId, outcome: Outcome, ctx: impl FnOnce() -> String) {
        release(
            self.number,
            ctx,
            &self.snap,
            self.ups.cfg.balancer.is_pick_first(),
            id,
            outcome,
        );
    }

    /// A cached connection the upstream had closed: the next try does not
    /// use up a try, as nginx does (and a single peer may be tried again).
    pub fn stale(&mut self) {
        self.tries_left += 1;
        if self.snap.single() {
            self.tried = Tried::new(&self.snap);
        }
    }

    /// No try is left after this one.
    pub fn last(&self) -> bool {
        self.tries_left == 0
    }
}

/// The next-upstream rule as a function of its inputs (see
/// [`Attempts::retry`]).
/// `sticky`: (the peer id the request names, the session id it brought).
/// The first non-empty `lookup` variable; with `learn`, the peer its
/// session was learned for.
fn sticky_hint(ups: &UpstreamRt, who: &impl Requester) -> (Option<String>, Option<String>) {
    use crate::conf::sticky::Sticky;
    let Some(s) = &ups.cfg.sticky else {
        return (None, None);
    };
    let id = s
        .lookup()
        .iter()
        .map(|t| who.hash_text(t))
        .find(|v| !v.is_empty());
    match s {
        Sticky::Learn(_) => {
            let sid = id
                .as_deref()
                .zip(ups.sessions.get())
                .and_then(|(i, z)| super::sticky::lookup(z, i));
            (sid, id)
        }
        _ => (id, None),
    }
}

fn may_retry(
    policy: &Policy,
    condition: u32,
    tries_left: usize,
    request_sent: bool,
    elapsed: Duration,
) -> bool {
    let mask = policy.mask;
    tries_left > 0
        && mask.has(condition)
        && !(request_sent && policy.non_idempotent && !mask.has(NextUpstream::NON_IDEMPOTENT))
        && in_time(elapsed, policy.timeout)
}

/// A failed connect as a request and a race's background loser both account
/// it: logged with its context, the peer released as failed.
fn failed(number: u64, ctx: String, f: &Failure, snap: &Peers, pick_first: bool, id: PeerId) {
    crate::log_conn!(Level::Error, number, "{} while {}{}", f.text, f.stage, ctx);
    release_at(
        number,
        f.stage,
        || ctx,
        snap,
        pick_first,
        id,
        Outcome::Failed,
    );
}

/// The release rule both proxies share (see [`Attempts::release`]).
fn release(
    number: u64,
    ctx: impl FnOnce() -> String,
    snap: &Peers,
    pick_first: bool,
    id: PeerId,
    outcome: Outcome,
) {
    release_at(number, CONNECTING, ctx, snap, pick_first, id, outcome);
}

/// `release`, logged as happening `while` the stage named.
fn release_at(
    number: u64,
    stage: &str,
    ctx: impl FnOnce() -> String,
    snap: &Peers,
    pick_first: bool,
    id: PeerId,
    outcome: Outcome,
) {
    let now = now_ms();
    if snap.release(id, outcome, now) == Released::Disabled {
        crate::log_conn!(
            Level::Warn,
            number,
            "upstream server temporarily disabled while {}{}",
            stage,
            ctx()
        );
    }
    if outcome == Outcome::Failed && pick_first {
        snap.move_on(id, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_conditions_come_from_the_type() {
        let t = Failure::upstream(Kind::Timeout, "upstream timed out");
        assert_eq!((t.status(), t.condition()), (504, NextUpstream::TIMEOUT));
        let e = Failure::upstream(Kind::Error, "connect() failed");
        assert_eq!((e.status(), e.condition()), (502, NextUpstream::ERROR));
        let h = Failure::upstream(Kind::InvalidHeader, "upstream sent invalid header");
        assert_eq!(
            (h.status(), h.condition()),
            (502, NextUpstream::INVALID_HEADER)
        );
        let c = Failure {
            side: Side::Client,
            ..t
        };
        assert_eq!(c.status(), 499);
    }

    #[test]
    fn retry_rules() {
        let policy = |mask: u32, non_idempotent: bool, timeout: u64| Policy {
            mask: NextUpstream(mask),
            tries: 0,
            timeout: Duration::from_secs(timeout),
            race: None,
            non_idempotent,
        };
        let m = NextUpstream::ERROR | NextUpstream::TIMEOUT;
        let z = Duration::ZERO;
        let get = policy(m, false, 0);
        assert!(may_retry(&get, NextUpstream::ERROR, 1, false, z));
        assert!(!may_retry(&get, NextUpstream::ERROR, 0, false, z));
        assert!(!may_retry(&get, NextUpstream::HTTP_500, 1, true, z));
        // A POST that reached the upstream is not retried without
        // non_idempotent...
        let post = policy(m, true, 0);
        assert!(!may_retry(&post, NextUpstream::ERROR, 1, true, z));
        // ...but one that never got there is.
        assert!(may_retry(&post, NextUpstream::ERROR, 1, false, z));
        let post2 = policy(m | NextUpstream::NON_IDEMPOTENT, true, 0);
        assert!(may_retry(&post2, NextUpstream::ERROR, 1, true, z));
        // proxy_next_upstream_timeout.
        let timed = policy(m, false, 1);
        assert!(!may_retry(
            &timed,
            NextUpstream::ERROR,
            1,
            false,
            Duration::from_secs(1)
        ));
        assert!(may_retry(
            &timed,
            NextUpstream::ERROR,
            1,
            false,
            Duration::from_millis(500)
        ));
        assert!(!may_retry(
            &policy(0, false, 0),
            NextUpstream::ERROR,
            1,
            false,
            z
        ));
    }

    /// Connections are numbers: `cache` holds the idle ones, `opened`
    /// counts the new ones.
    #[derive(Default)]
    struct Numbers {
        cache: std::sync::Mutex<Vec<u32>>,
        opened: std::sync::atomic::AtomicU32,
    }

    impl Connector for Numbers {
        type Conn = u32;

        fn cached(&self, _: &PeerAddr) -> Option<u32> {
            self.cache.lock().unwrap().pop()
        }

        fn caches(&self) -> bool {
            true
        }

        fn open(&self, _: PeerAddr) -> impl Future<Output = Result<u32, Failure>> + Send + 'static {
            let n = self
                .opened
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move { Ok(100 + n) }
        }
    }

    struct Nobody;

    impl Requester for Nobody {
        fn number(&self) -> u64 {
            0
        }
        fn hash_text(&self, _: &Template) -> String {
            String::new()
        }
        fn client_ip(&self) -> Option<IpAddr> {
            None
        }
        fn context(&self, _: &str) -> String {
            String::new()
        }
        fn record_failed(&mut self, _: &Arc<str>, _: &Failure, _: Duration) {}
    }

    #[test]
    fn a_connection_put_back_in_the_same_turn_is_taken_not_opened() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ups = crate::upstream::UpstreamRt::for_addresses(
                "t:1",
                "t",
                1,
                vec![IpAddr::from([127, 0, 0, 1])],
            );
            let policy = Policy {
                mask: NextUpstream(NextUpstream::ERROR),
                tries: 0,
                timeout: Duration::ZERO,
                race: None,
                non_idempotent: false,
            };
            let k = Numbers::default();
            // The cache is empty when the request looks; a response read
            // in the same turn puts connection 7 back.
            let mut a = Attempts::new(&ups, policy.clone(), &Nobody).await;
            let put_back = async {
                k.cache.lock().unwrap().push(7);
            };
            let mut who = Nobody;
            let (got, ()) = tokio::join!(a.connect(&k, &mut who), put_back);
            let got = got.unwrap();
            assert_eq!((got.conn, got.cached), (7, true));
            assert_eq!(k.opened.load(std::sync::atomic::Ordering::Relaxed), 0);
            // Nothing comes back: one look more, then a new connection.
            let mut b = Attempts::new(&ups, policy, &Nobody).await;
            let got = b.connect(&k, &mut Nobody).await.unwrap();
            assert_eq!((got.conn, got.cached), (100, false));
            assert_eq!(k.opened.load(std::sync::atomic::Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn connect_failures_read_as_nginx_writes_them() {
        let refused = || ConnectError::Failed(std::io::Error::from_raw_os_error(111));
        let inet = PeerAddr::Inet("127.0.0.1:1".parse().unwrap());
        let unix = PeerAddr::Unix("/tmp/x.sock".into());
        let f = Failure::connect(&inet, refused());
        assert_eq!(f.text, "connect() failed (111: Connection refused)");
        assert_eq!(
            (f.kind, f.condition(), f.status()),
            (Kind::Refused, NextUpstream::ERROR, 502)
        );
        assert_eq!(
            Failure::connect(&unix, refused()).text,
            "connect() to unix:/tmp/x.sock failed (111: Connection refused)"
        );
        let t = Failure::connect(&inet, ConnectError::Timeout);
        assert_eq!(t.kind, Kind::Timeout);
        assert_eq!(t.text, "upstream timed out (110: Connection timed out)");
    }
}
