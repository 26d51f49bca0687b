//! Connections opened ahead of requests, per worker and upstream:
//! `keepalive_min N` keeps N connections open to every primary peer that is
//! not down or failed (behind one address that an L4 balancer spreads, N
//! distinct backends); `pick_first warm=N` keeps an idle connection open to
//! each of the next N peers after the chosen one, so that a failover needs no
//! handshake. Every `KEEP_TICK` the keeper lets go of idle connections that
//! may not serve again (closed, idle too long, `keepalive_time` reached) or
//! whose peer left the list, and opens what is missing. A peer it could not
//! connect to is left alone for `BACK_OFF`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::proxy::open;
use crate::conf::model::{Balancer, Http, PeerAddr, Upstream};
use crate::log::Level;
use crate::net::tls_client::Clients;
use crate::upstream::attempt::Failure;
use crate::upstream::clock::Clock;
use crate::upstream::h2set::{self, Opener};
use crate::upstream::peers::{Ms, PeerId, Peers};
use crate::upstream::pool::ANY_LOCATION;
use crate::upstream::tls::Tls;
use crate::upstream::{Pooled, UpstreamRt};

const KEEP_TICK: Duration = Duration::from_millis(100);
const BACK_OFF: Duration = Duration::from_secs(1);

/// Whether an upstream asks for connections ahead of requests.
pub fn wants_keeper(u: &Upstream) -> bool {
    u.keepalive.min > 0 || matches!(u.balancer, Balancer::PickFirst { warm, .. } if warm > 0)
}

/// The connections this worker keeps open to each peer.
pub fn wanted(u: &Upstream, peers: &Peers, now: Ms) -> Vec<(PeerId, usize)> {
    wanted_with(u, u.keepalive.min, peers, now)
}

/// `wanted` with `min` for `keepalive_min` (HTTP/2 keeps at least one).
fn wanted_with(u: &Upstream, min: usize, peers: &Peers, now: Ms) -> Vec<(PeerId, usize)> {
    let id = |index| PeerId {
        backup: false,
        index,
    };
    let alive = |i: usize| peers.primary[i].alive(now);
    match &u.balancer {
        _ if peers.primary.is_empty() => Vec::new(),
        Balancer::PickFirst { warm, .. } => {
            let chosen = peers.chosen_index();
            let mut out = Vec::new();
            if min > 0 && alive(chosen) {
                out.push((id(chosen), min));
            }
            out.extend(
                peers
                    .warm(*warm, now)
                    .into_iter()
                    .map(|i| (id(i), min.max(1))),
            );
            out
        }
        _ if min > 0 => (0..peers.primary.len())
            .filter(|&i| alive(i))
            .map(|i| (id(i), min))
            .collect(),
        _ => Vec::new(),
    }
}

type Opened = Result<Pooled, Failure>;

/// The TLS the keeper's connections to upstream `index` make: that of the
/// first location that proxies to it over https, with `proxy_ssl_name`
/// when it has no variables, else `$proxy_host` (a request whose name
/// differs makes connections of its own). None: plain connections.
pub(crate) fn tls_for(http: &Http, index: usize, clients: &Arc<Clients>) -> Option<Tls> {
    super::case::all_passes(http)
        .into_iter()
        .find(|(_, p)| p.upstream == index && p.ssl)
        .and_then(|(conf, p)| {
            let ssl = conf.proxy_ssl.clone()?;
            let name = match ssl.name.as_ref() {
                Some(t) => t.as_literal().unwrap_or(&p.proxy_host).to_string(),
                None => p.proxy_host.to_string(),
            };
            Some(Tls::new(clients.clone(), ssl, &name))
        })
}

/// Keeps `u`'s connections open until the task is aborted (the worker
/// drains). `timeout` bounds each connect (and each TLS handshake).
pub(crate) async fn keep(u: Arc<UpstreamRt>, timeout: Duration, clock: Clock, tls: Option<Tls>) {
    keep_with(u, clock, move |addr, max_age| {
        open(
            addr,
            timeout,
            max_age,
            ANY_LOCATION,
            tls.clone(),
            None,
            false,
        )
    })
    .await
}

/// `keep`, with the connections opened by `opener(peer, max_age)`; the
/// tests' opener records when it was called.
async fn keep_with<F, Fut>(u: Arc<UpstreamRt>, clock: Clock, opener: F)
where
    F: Fn(PeerAddr, Duration) -> Fut,
    Fut: Future<Output = Opened> + Send + 'static,
{
    let mut tick = tokio::time::interval(KEEP_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut opening: JoinSet<Opened> = JoinSet::new();
    let mut pending: HashMap<PeerAddr, usize> = HashMap::new();
    let mut opened_for: HashMap<tokio::task::Id, PeerAddr> = HashMap::new();
    let mut resting: HashMap<PeerAddr, tokio::time::Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let peers = u.tidy();
                let want = wanted(&u.cfg, &peers, clock.now_ms());
                u.pool().set_targets(
                    want.iter().map(|(id, n)| (peers.get(*id).addr.clone(), *n)).collect(),
                );
                let now = clock.now();
                resting.retain(|_, until| *until > now);
                pending.retain(|_, n| *n > 0);
                // Connections the peer closed as they opened, unused: it
                // rests, as after a failed connect.
                let died = u.pool().take_died_young();
                for addr in died.into_keys() {
                    if let std::collections::hash_map::Entry::Vacant(e) = resting.entry(addr) {
                        crate::log!(
                            Level::Info,
                            "upstream closed new connections unused while keeping connections open to {} in upstream \"{}\"",
                            e.key(),
                            u.cfg.name
                        );
                        e.insert(now + BACK_OFF);
                    }
                }
                for (id, n) in want {
                    let addr = &peers.get(id).addr;
                    if resting.contains_key(addr) {
                        continue;
                    }
                    let busy = pending.entry(addr.clone()).or_default();
                    let have = u.reg.count(addr) + *busy;
                    for _ in have..n {
                        *busy += 1;
                        let max_age = u.cfg.keepalive.age_limit(crate::upstream::random::next_u64);
                        let task = opening.spawn(opener(addr.clone(), max_age));
                        opened_for.insert(task.id(), addr.clone());
                    }
                }
            }
            Some(done) = opening.join_next_with_id(), if !opening.is_empty() => {
                let (task, result) = match done {
                    Ok((task, result)) => (task, Some(result)),
                    Err(e) => (e.id(), None),
                };
                let Some(addr) = opened_for.remove(&task) else { continue };
                if let Some(n) = pending.get_mut(&addr) {
                    *n = n.saturating_sub(1);
                }
                match result {
                    None => {}
                    Some(Ok(mut c)) => {
                        let peers = u.peers();
                        if let Some(id) = peers.find(&addr) {
                            c.track(&u.reg, &peers, id);
                            // Refused (keepalive_requests 0 and the like):
                            // opening more now would only churn.
                            if !u.pool().put(c, Instant::now()) {
                                resting.insert(addr, clock.now() + BACK_OFF);
                            }
                        }
                    }
                    Some(Err(f)) => {
                        crate::log!(
                            Level::Info,
                            "{} while keeping connections open to {} in upstream \"{}\"",
                            f.text,
                            addr,
                            u.cfg.name
                        );
                        resting.insert(addr, clock.now() + BACK_OFF);
                    }
                }
            }
        }
    }
}

/// The HTTP/2 settings of the first location that proxies to upstream
/// `index` over HTTP/2, with its TLS (as `tls_for`), if any does.
pub(crate) fn h2_for(
    http: &Http,
    index: usize,
    u: &UpstreamRt,
    clients: &Arc<Clients>,
) -> Option<Opener> {
    let (conf, p) = super::case::all_passes(http)
        .into_iter()
        .find(|(c, p)| p.upstream == index && c.proxy_http_version == 20)?;
    let tls = if p.ssl {
        conf.proxy_ssl.clone().map(|ssl| {
            let name = match ssl.name.as_ref() {
                Some(t) => t.as_literal().unwrap_or(&p.proxy_host).to_string(),
                None => p.proxy_host.to_string(),
            };
            Tls::new(clients.clone(), ssl, &name)
        })
    } else {
        None
    };
    Some(super::proxy_h2::opener(u, conf, tls))
}

/// Keeps `u`'s HTTP/2 connection sets filled until the task is aborted:
/// `keepalive_min` (at least 1) connections to each peer `wanted` names,
/// counting those past `keepalive_time` as gone so that their replacement
/// opens before they close; a peer it could not connect to, or that closed
/// a connection before its SETTINGS, is left alone for `BACK_OFF`.
pub(crate) async fn keep_h2(u: Arc<UpstreamRt>, o: Opener, clock: Clock) {
    let mut tick = tokio::time::interval(KEEP_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut opening: JoinSet<(PeerAddr, Result<h2set::Opened, Failure>)> = JoinSet::new();
    let mut resting: HashMap<PeerAddr, tokio::time::Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let peers = u.tidy();
                let want = wanted_with(&u.cfg, o.target, &peers, clock.now_ms());
                let now = clock.now();
                resting.retain(|_, until| *until > now);
                for (id, n) in want {
                    let addr = peers.get(id).addr.clone();
                    if resting.contains_key(&addr) {
                        continue;
                    }
                    let key = o.key(&addr);
                    let (fresh, pending) = u.h2.count(&key);
                    for _ in fresh + pending..n {
                        u.h2.opening(&key, 1);
                        let (addr, o) = (addr.clone(), o.clone());
                        opening.spawn(async move { (addr.clone(), h2set::open_heard(addr, o).await) });
                    }
                }
            }
            Some(done) = opening.join_next(), if !opening.is_empty() => {
                let Ok((addr, result)) = done else { continue };
                let key = o.key(&addr);
                u.h2.opening(&key, -1);
                match result {
                    Ok(c) => {
                        let peers = u.peers();
                        u.h2.insert(&key, c, &u.reg, &peers);
                    }
                    Err(f) => {
                        crate::log!(
                            Level::Info,
                            "{} while keeping HTTP/2 connections open to {} in upstream \"{}\"",
                            f.text,
                            addr,
                            u.cfg.name
                        );
                        resting.insert(addr, clock.now() + BACK_OFF);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::attempt::Kind;
    use crate::upstream::peers::test_upstream;

    #[test]
    fn targets_per_balancer() {
        let servers = [
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:2", 1, false),
            ("127.0.0.1:3", 1, false),
        ];
        let mut u = test_upstream(&servers, Balancer::RoundRobin);
        let p = Peers::from_config(&u);
        assert!(wanted(&u, &p, 1_000_000).is_empty());
        u.keepalive.min = 4;
        let w = wanted(&u, &p, 1_000_000);
        assert_eq!(
            w.iter().map(|(id, n)| (id.index, *n)).collect::<Vec<_>>(),
            [(0, 4), (1, 4), (2, 4)]
        );
        // pick_first warm=1: nothing for the chosen peer (requests open
        // theirs), one for the next; keepalive_min adds to both.
        u.keepalive.min = 0;
        u.balancer = Balancer::PickFirst {
            warm: 1,
            revert: false,
        };
        let p = Peers::from_config(&u);
        let w = wanted(&u, &p, 1_000_000);
        assert_eq!(
            w.iter().map(|(id, n)| (id.index, *n)).collect::<Vec<_>>(),
            [(1, 1)]
        );
        u.keepalive.min = 2;
        let w = wanted(&u, &p, 1_000_000);
        assert_eq!(
            w.iter().map(|(id, n)| (id.index, *n)).collect::<Vec<_>>(),
            [(0, 2), (1, 2)]
        );
    }

    /// When (since `start`) each connection to a peer came.
    type Times = Arc<std::sync::Mutex<Vec<Duration>>>;

    /// A peer on `l` that records when each connection came, then drops it
    /// (`serve` false: a layer-4 proxy with nothing behind it) or serves
    /// HTTP/2 on it.
    fn recording_peer(
        l: tokio::net::TcpListener,
        start: tokio::time::Instant,
        serve: bool,
    ) -> Times {
        let times = Times::default();
        let seen = times.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                seen.lock().unwrap().push(start.elapsed());
                if serve {
                    tokio::spawn(async move {
                        let Ok(mut conn) = h2::server::handshake(s).await else {
                            return;
                        };
                        while let Some(Ok(_)) = conn.accept().await {}
                    });
                }
            }
        });
        times
    }

    /// An upstream of the one peer at `addr` with `keepalive_min 3` and
    /// connections that do not age within a test.
    fn three_kept(addr: std::net::SocketAddr) -> Arc<UpstreamRt> {
        let mut u = test_upstream(&[(&addr.to_string(), 1, false)], Balancer::RoundRobin);
        u.keepalive.min = 3;
        u.keepalive.max = 8;
        u.keepalive.time = Duration::from_secs(3600);
        u.keepalive.timeout = Duration::from_secs(60);
        u.keepalive.requests = 1000;
        Arc::new(UpstreamRt::new(Arc::new(u), None))
    }

    /// The HTTP/2 keeper's opener for `u`'s three connections.
    fn h2_opener(u: &UpstreamRt) -> Opener {
        Opener {
            timeout: Duration::from_secs(2),
            tls: None,
            ping: None,
            keepalive: false,
            target: 3,
            keepalive_time: u.cfg.keepalive.clone(),
            head_max: 4096,
        }
    }

    /// The HTTP/2 keeper fills a peer's set to `keepalive_min`. Opens that
    /// fail (nothing listens on the peer's port at first) leave the peer
    /// alone for BACK_OFF: the server, up after 300 ms, sees no connection
    /// before the back-off ends, then the set fills at once. Real sockets
    /// and time: the bounds are the back-off's floor and a generous ceiling.
    #[tokio::test]
    async fn h2_sets_back_off_from_failed_opens_then_fill() {
        // A port on a loopback address of its own: while nothing listens
        // on it, the port chosen here stays free for the bind below; on
        // 127.0.0.1 a parallel test's outgoing connection could take it
        // as its own (local) port meanwhile (AddrInUse, seen in CI).
        let addr = std::net::TcpListener::bind("127.83.41.7:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let start = tokio::time::Instant::now();
        let u = three_kept(addr);
        let o = h2_opener(&u);
        let key = o.key(&PeerAddr::Inet(addr));
        let keeper = tokio::spawn(keep_h2(u.clone(), o, Clock::new()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let l = tokio::net::TcpListener::bind(addr).await.unwrap();
        let times = recording_peer(l, start, true);
        let mut filled = None;
        while start.elapsed() < Duration::from_secs(5) {
            if u.h2.count(&key).0 == 3 {
                filled = Some(start.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        keeper.abort();
        let times = times.lock().unwrap().clone();
        assert!(filled.is_some(), "the set filled: {times:?}");
        assert_eq!(
            times.len(),
            3,
            "three connections, each opened once: {times:?}"
        );
        assert!(
            times
                .iter()
                .all(|t| *t >= BACK_OFF - Duration::from_millis(50)),
            "none before the back-off ended: {times:?}"
        );
    }

    /// A peer that takes connections and closes them at once (a layer-4
    /// proxy with nothing behind it): the HTTP/2 keeper takes each for a
    /// failed open (no SETTINGS came), the HTTP/1 keeper finds them closed
    /// young and unused; either way the peer rests for BACK_OFF between
    /// rounds instead of getting three new connections on every tick.
    #[tokio::test]
    async fn both_keepers_rest_from_a_peer_that_closes_at_once() {
        for h2 in [true, false] {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let u = three_kept(l.local_addr().unwrap());
            let start = tokio::time::Instant::now();
            let times = recording_peer(l, start, false);
            let stop = Duration::from_millis(1500);
            let run = if h2 {
                let o = h2_opener(&u);
                tokio::time::timeout(stop, keep_h2(u, o, Clock::new())).await
            } else {
                let timeout = Duration::from_secs(2);
                tokio::time::timeout(stop, keep(u, timeout, Clock::new(), None)).await
            };
            assert!(run.is_err(), "the keeper runs until stopped");
            let times = times.lock().unwrap().clone();
            // Three at the start, three once the back-off ended (not 45).
            assert!((3..=6).contains(&times.len()), "h2 {h2}: {times:?}");
            assert!(
                times
                    .iter()
                    .skip(3)
                    .all(|t| *t >= BACK_OFF - Duration::from_millis(50)),
                "h2 {h2}: none between the first round and the back-off's end: {times:?}"
            );
        }
    }

    /// A peer that cannot be connected to is tried on the first tick, then
    /// left alone for BACK_OFF each time: on paused time, no sleeping.
    #[tokio::test(start_paused = true)]
    async fn backs_off_from_a_peer_it_cannot_reach() {
        let mut u = test_upstream(&[("127.0.0.1:1", 1, false)], Balancer::RoundRobin);
        u.keepalive.min = 1;
        let u = Arc::new(UpstreamRt::new(Arc::new(u), None));
        let clock = Clock::new();
        let start = clock.now();
        let tries = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = tries.clone();
        let opener = move |_: PeerAddr, _: Duration| {
            seen.lock().unwrap().push(clock.now() - start);
            async { Err(Failure::upstream(Kind::Error, "connect() failed")) }
        };
        let run = tokio::time::timeout(Duration::from_millis(3050), keep_with(u, clock, opener));
        assert!(run.await.is_err(), "the keeper runs until stopped");
        let ms: Vec<u128> = tries
            .lock()
            .unwrap()
            .iter()
            .map(|d| d.as_millis())
            .collect();
        assert_eq!(ms, [0, 1000, 2000, 3000]);
    }
}
