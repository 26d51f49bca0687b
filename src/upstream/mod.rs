//! Upstreams at run time, per worker: each configured upstream's peers (a
//! snapshot; with `zone`, read from shared memory and rebuilt only when the
//! zone's publication counter moved) and its keep-alive connection cache. The
//! HTTP proxy takes a snapshot per request, asks it for a peer, connects or
//! reuses, and releases the peer with the outcome.

pub mod admin;
pub mod attempt;
pub mod balancer;
pub mod body;
pub mod carry;
pub mod clock;
mod crc32;
pub mod dns;
pub mod fcgi;
pub mod h1conn;
pub mod h2set;
pub mod health;
pub mod peer_list;
pub mod peers;
pub mod pool;
pub mod race;
pub mod random;
pub mod resolve;
pub mod state;
pub mod sticky;
pub mod tls;
pub mod zone;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::conf::model::{Upstream, UpstreamBlocks};
pub use peers::{Outcome, PeerId, Peers, Released, Tried};
pub use pool::{Pool, Pooled, Registry};
pub use zone::{Zone, Zones};

/// `proxy_next_upstream_timeout`: whether another try may start after
/// `elapsed` (a zero limit: always).
pub fn in_time(elapsed: std::time::Duration, limit: std::time::Duration) -> bool {
    limit.is_zero() || elapsed < limit
}

/// A worker's current snapshot of an upstream, and older ones that requests
/// in flight may still hold.
struct Snap {
    seq: u64,
    peers: Arc<Peers>,
    old: Vec<Weak<Peers>>,
}

/// One upstream in one worker.
pub struct UpstreamRt {
    pub cfg: Arc<Upstream>,
    /// The zone holding its peers, and its index there.
    shared: Option<(Arc<Zone>, usize)>,
    // Process-local locks: a worker's own snapshot and cache.
    snap: Mutex<Snap>,
    pool: Mutex<Pool>,
    /// The connections this worker has open to each peer.
    pub reg: Arc<Registry>,
    /// Its HTTP/2 connections (`grpc_pass`, `proxy_http_version 2`).
    pub h2: Arc<h2set::H2Sets>,
    /// `queue`: this worker's waiting requests, woken when a peer frees
    /// here (its snapshots carry it to `Peers::release`).
    pub queue: Option<Arc<QueueWake>>,
    /// `sticky learn`: the zone of its sessions (set once the worker has
    /// the generation's zones).
    pub sessions: std::sync::OnceLock<Arc<crate::net::tls_cache::SessionZone>>,
}

/// An upstream's `queue` in one worker: how many requests wait, and the
/// wake-up a release of a peer gives the longest-waiting one.
#[derive(Debug, Default)]
pub struct QueueWake {
    pub waiting: std::sync::atomic::AtomicUsize,
    pub notify: tokio::sync::Notify,
}

impl QueueWake {
    /// A peer freed a connection: the longest-waiting request looks again.
    pub fn freed(&self) {
        if self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            self.notify.notify_one();
        }
    }
}

impl UpstreamRt {
    /// An upstream made at run time by `proxy_pass` with variables (HTTP and
    /// stream): round robin over `addrs` at `port`, no zone, no keep-alive
    /// cache. `name` is `host:port` as written.
    pub fn for_addresses(
        name: &str,
        host: &str,
        port: u16,
        addrs: Vec<std::net::IpAddr>,
    ) -> Arc<UpstreamRt> {
        use crate::conf::model::PeerAddr;
        let peers = addrs
            .into_iter()
            .map(|ip| PeerAddr::Inet(std::net::SocketAddr::new(ip, port)))
            .collect();
        UpstreamRt::for_peers(name, host, port, peers)
    }

    /// A round robin over `peers` made for one request (`proxy_pass` with
    /// variables naming an address or a `unix:` socket).
    pub fn for_peers(
        name: &str,
        host: &str,
        port: u16,
        peers: Vec<crate::conf::model::PeerAddr>,
    ) -> Arc<UpstreamRt> {
        use crate::conf::model::{Balancer, Keepalive, UpstreamServer};
        let mut server = UpstreamServer::new(name.to_string(), peers);
        server.host = host.to_string();
        server.port = port;
        let u = Upstream {
            name: name.to_string(),
            servers: vec![server],
            balancer: Balancer::RoundRobin,
            keepalive: Keepalive::off(),
            ping: None,
            zone: None,
            resolver: None,
            state: None,
            implicit: true,
            health: None,
            queue: None,
            sticky: None,
            src: crate::conf::Src {
                file: None,
                line: 0,
            },
        };
        Arc::new(UpstreamRt::new(Arc::new(u), None))
    }

    pub fn new(cfg: Arc<Upstream>, zone: Option<Arc<Zone>>) -> UpstreamRt {
        let shared = zone.and_then(|z| z.upstream(&cfg.name).map(|i| (z, i)));
        let (seq, peers) = match &shared {
            Some((z, i)) => {
                let seq = z.seq(*i);
                // A writer mid-publication: an empty snapshot now, the next
                // request reads the list again (the counter will have moved).
                let peers = z
                    .snapshot(*i, &cfg)
                    .unwrap_or_else(|| Peers::assemble(&cfg, Vec::new(), 0));
                (seq, peers)
            }
            None => (0, Peers::from_config(&cfg)),
        };
        let queue = cfg.queue.map(|_| Arc::new(QueueWake::default()));
        let mut peers = peers;
        peers.freed = queue.clone();
        let pool = Pool::new(cfg.keepalive.clone());
        UpstreamRt {
            cfg,
            shared,
            snap: Mutex::new(Snap {
                seq,
                peers: Arc::new(peers),
                old: Vec::new(),
            }),
            pool: Mutex::new(pool),
            reg: Arc::new(Registry::default()),
            h2: Arc::new(h2set::H2Sets::default()),
            queue,
            sessions: std::sync::OnceLock::new(),
        }
    }

    fn snap(&self) -> MutexGuard<'_, Snap> {
        self.snap.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The peers now: one atomic load when nothing changed.
    pub fn peers(&self) -> Arc<Peers> {
        let mut s = self.snap();
        if let Some((z, i)) = &self.shared {
            let seq = z.seq(*i);
            if seq != s.seq {
                if let Some(mut p) = z.snapshot(*i, &self.cfg) {
                    p.freed = self.queue.clone();
                    let old = std::mem::replace(&mut s.peers, Arc::new(p));
                    s.old.push(Arc::downgrade(&old));
                    s.seq = seq;
                }
            }
        }
        s.peers.clone()
    }

    /// The peers for a request. A zone upstream with no peers because its
    /// names have had no answer yet first waits for that answer, bounded by
    /// `resolver_timeout`. (An answer that removed the peers is an answer:
    /// no wait.)
    pub async fn peers_ready(&self) -> Arc<Peers> {
        let peers = self.peers();
        let Some((z, i)) = &self.shared else {
            return peers;
        };
        let unanswered = || {
            self.cfg
                .servers
                .iter()
                .enumerate()
                .any(|(k, s)| s.resolve && z.resolved(*i, k).1 == 0)
        };
        if peers.count() > 0 || !unanswered() {
            return peers;
        }
        let limit = self
            .cfg
            .resolver
            .as_ref()
            .map(|r| r.timeout)
            .unwrap_or(std::time::Duration::from_secs(30));
        let deadline = std::time::Instant::now() + limit;
        // The answer comes from whichever worker resolves: look every 10 ms.
        while unanswered() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.peers()
    }

    /// The oldest zone publication whose peers this worker may still use.
    fn oldest(&self) -> u64 {
        let mut s = self.snap();
        s.old.retain(|w| w.strong_count() > 0);
        s.old
            .iter()
            .filter_map(Weak::upgrade)
            .map(|p| p.config)
            .chain(std::iter::once(s.peers.config))
            .min()
            .unwrap_or(0)
    }

    pub fn zone(&self) -> Option<&Arc<Zone>> {
        self.shared.as_ref().map(|(z, _)| z)
    }

    /// Its index in its zone.
    pub fn zone_index(&self) -> Option<usize> {
        self.shared.as_ref().map(|(_, i)| *i)
    }

    pub fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets go of idle connections that may not serve again or whose peer
    /// left, counts the others under the current peers, and states this
    /// worker's oldest connection to each peer.
    pub fn tidy(&self) -> Arc<Peers> {
        let peers = self.peers();
        self.pool()
            .prune(std::time::Instant::now(), &self.reg, &peers, |a| {
                peers.find(a)
            });
        self.h2.prune(|a| peers.find(a));
        self.reg.restate(&peers);
        peers
    }
}

/// Every upstream of one context (http's or stream's), indexed as its
/// `UpstreamBlocks::list`.
#[derive(Clone)]
pub struct Upstreams(Vec<Arc<UpstreamRt>>);

impl Upstreams {
    /// The context's upstreams (none when it is absent), each with its zone
    /// from `zones`: the generation's shared zones this worker inherited.
    pub fn new(blocks: Option<&UpstreamBlocks>, zones: &Zones) -> Upstreams {
        Upstreams(
            blocks
                .iter()
                .flat_map(|b| b.iter())
                .map(|u| {
                    let zone = u.zone.as_ref().and_then(|z| zones.get(z)).cloned();
                    Arc::new(UpstreamRt::new(u.clone(), zone))
                })
                .collect(),
        )
    }

    pub fn get(&self, i: usize) -> Option<&Arc<UpstreamRt>> {
        self.0.get(i)
    }

    /// Gives each `sticky learn` upstream its zone of sessions.
    pub fn with_sessions(self, zones: &sticky::LearnZones) -> Upstreams {
        for u in &self.0 {
            if let Some(crate::conf::sticky::Sticky::Learn(l)) = &u.cfg.sticky {
                if let Some((_, z)) = zones.get(&l.zone) {
                    let _ = u.sessions.set(z.clone());
                }
            }
        }
        self
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<UpstreamRt>> {
        self.0.iter()
    }

    /// Every `resolve::LEASE_TICK`: takes or renews the resolver lease of
    /// each zone that has names to follow, brings every zone snapshot up to
    /// date and tells each zone the oldest publication this worker (slot
    /// `worker`) still holds peers of, so that the writer may reuse slots
    /// nobody holds.
    pub fn tick(&self, worker: usize) {
        let now = peers::now_ms();
        let me = std::process::id();
        for u in &self.0 {
            if let Some(z) = u.zone() {
                if u.cfg.servers.iter().any(|s| s.resolve) {
                    if let Some(l) = z.lease() {
                        l.hold(me, now, resolve::LEASE_STALE);
                    }
                }
                if u.cfg.health.is_some() {
                    if let Some(l) = z.hc_lease() {
                        l.hold(me, now, resolve::LEASE_STALE);
                    }
                }
            }
        }
        self.acknowledge(worker);
    }

    fn acknowledge(&self, worker: usize) {
        let mut oldest: HashMap<*const Zone, (Arc<Zone>, u64)> = HashMap::new();
        for u in &self.0 {
            let Some(z) = u.zone() else { continue };
            u.tidy();
            let seen = u.oldest();
            oldest
                .entry(Arc::as_ptr(z))
                .and_modify(|e| e.1 = e.1.min(seen))
                .or_insert((z.clone(), seen));
        }
        for (z, seen) in oldest.into_values() {
            z.ack(worker, std::process::id(), seen);
        }
    }
}
