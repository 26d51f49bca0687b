//! Following DNS for `server NAME resolve`: in every worker, one task per
//! such line waits until this worker holds its zone's resolver lease, then
//! resolves the name on nginx's schedule (success or NXDOMAIN: again after
//! the answer's validity + 1 s; an error: after max(resolver_timeout, 1 s),
//! keeping the peers) and publishes the answer into the zone: peers whose
//! address is still answered keep their state, the others go, new ones are
//! appended with the `server` line's port and parameters. Only the lease
//! holder sends queries; another worker takes over when it dies or hangs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::clock::Clock;
use super::dns::{Answer, Client, DnsError, SrvAnswer, clamp_expiry, strerror};
use super::peer_list::{Resolved, peer_list};
use super::zone::LookupEnd;
use super::{UpstreamRt, Upstreams};
use crate::conf::model::{Resolver, UpstreamServer};
use crate::log::Level;

/// How often a worker looks at the lease (and renews it when it holds it).
pub const LEASE_TICK: Duration = Duration::from_millis(500);
/// A holder silent this long (ms) is taken over.
pub const LEASE_STALE: u64 = 1500;

/// The upkeep of zone upstreams in a worker: the resolving tasks, and every
/// `LEASE_TICK` the lease, the snapshots and the acknowledgements (see
/// `Upstreams::tick`) for worker slot `slot`.
pub fn start_upkeep(upstreams: &Upstreams, slot: usize, saved: Option<Arc<tokio::sync::Notify>>) {
    spawn_all(upstreams, saved);
    super::health::spawn_all(upstreams);
    let upstreams = upstreams.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(LEASE_TICK);
        loop {
            tick.tick().await;
            upstreams.tick(slot);
        }
    });
}

/// Starts the resolving tasks for every `resolve` line of every zone upstream.
/// `saved` is told when a `state` upstream's peers changed (the master
/// writes the file); without it the file is written here.
pub fn spawn_all(upstreams: &Upstreams, saved: Option<Arc<tokio::sync::Notify>>) {
    let client = Arc::new(Client::new());
    for u in upstreams.iter() {
        if u.zone().is_none() || u.cfg.resolver.is_none() {
            continue;
        }
        for (k, line) in u.cfg.servers.iter().enumerate() {
            if line.resolve {
                tokio::spawn(follow(u.clone(), k, client.clone(), saved.clone()));
            }
        }
    }
}

async fn follow(
    u: Arc<UpstreamRt>,
    k: usize,
    client: Arc<Client>,
    saved: Option<Arc<tokio::sync::Notify>>,
) {
    let ask = move |line: UpstreamServer, resolver: Arc<Resolver>| {
        let client = client.clone();
        async move { lookup(&client, &line, &resolver).await }
    };
    follow_with(u, k, Clock::new(), ask, saved).await;
}

/// `follow` on a given clock and with a given way to ask DNS, so that a
/// test runs the schedule on paused time with answers it chooses.
async fn follow_with<A, F>(
    u: Arc<UpstreamRt>,
    k: usize,
    clock: Clock,
    ask: A,
    saved: Option<Arc<tokio::sync::Notify>>,
) where
    A: Fn(UpstreamServer, Arc<Resolver>) -> F,
    F: std::future::Future<Output = Result<Found, DnsError>>,
{
    let (Some((zone, i)), Some(resolver)) = (u.shared.clone(), u.cfg.resolver.clone()) else {
        return;
    };
    let line = &u.cfg.servers[k];
    let me = std::process::id();
    let mut due: Option<u64> = None;
    loop {
        let held = zone.lease().is_some_and(|l| l.holder() == me);
        if !held {
            due = None;
            tokio::time::sleep(LEASE_TICK).await;
            continue;
        }
        let now = clock.now_ms();
        // A new holder continues the schedule the zone records, no later
        // than an answer could be valid (the expiry may come from a zone an
        // older binary wrote).
        let next = *due.get_or_insert_with(|| {
            let (expires, answered, _) = zone.resolved(i, k);
            if answered == 0 {
                now + 1
            } else {
                clamp_expiry(expires, now, resolver.valid) + 1000
            }
        });
        if next > now {
            let wait = Duration::from_millis((next - now).min(LEASE_TICK.as_millis() as u64));
            tokio::time::sleep(wait).await;
            continue;
        }
        let result = ask(line.clone(), resolver.clone()).await;
        if zone.lease().is_none_or(|l| l.holder() != me) {
            due = None;
            continue;
        }
        let now = clock.now_ms();
        let ms = |d: Duration| d.as_millis() as u64;
        zone.count_lookup(
            i,
            k,
            match &result {
                Ok(Found::Peers(..)) => LookupEnd::NoError,
                Ok(Found::NxDomain) => LookupEnd::NxDomain,
                Err(e) => LookupEnd::of(*e),
            },
        );
        match result {
            Ok(Found::Peers(peers, valid)) => {
                if !publish_when_free(&u, k, &peers, valid).await {
                    due = None;
                    continue;
                }
                zone.set_resolved(i, k, now + ms(valid), now, 0);
                save_state(&u, saved.as_deref());
                due = Some(now + ms(valid) + 1000);
            }
            Ok(Found::NxDomain) => {
                crate::log!(
                    Level::Error,
                    "{} could not be resolved (3: {})",
                    query_name(line),
                    strerror(3)
                );
                let keep = resolver.valid.unwrap_or(Duration::from_secs(10));
                if !publish_when_free(&u, k, &[], keep).await {
                    due = None;
                    continue;
                }
                let valid = ms(keep);
                zone.set_resolved(i, k, now + valid, now, 3);
                save_state(&u, saved.as_deref());
                due = Some(now + valid + 1000);
            }
            Err(e) => {
                crate::log!(
                    Level::Error,
                    "{} could not be resolved ({})",
                    query_name(line),
                    e
                );
                let (expires, answered, _) = zone.resolved(i, k);
                zone.set_resolved(i, k, expires, answered, e.code());
                due = Some(now + ms(resolver.timeout.max(Duration::from_secs(1))));
            }
        }
    }
}

/// A looked-up server line: its peers and how long they are valid, or gone.
enum Found {
    Peers(Vec<Resolved>, Duration),
    NxDomain,
}

/// The name asked: the host, or `_service._tcp.host` (a service with a dot
/// is used as given) for SRV.
fn query_name(line: &UpstreamServer) -> String {
    match &line.service {
        Some(s) if s.contains('.') => format!("{s}.{}", line.host),
        Some(s) => format!("_{s}._tcp.{}", line.host),
        None => line.host.clone(),
    }
}

async fn lookup(
    client: &Client,
    line: &UpstreamServer,
    resolver: &Resolver,
) -> Result<Found, DnsError> {
    if line.service.is_none() {
        return Ok(match client.resolve(&line.host, resolver).await? {
            Answer::Addrs { addrs, valid } => Found::Peers(
                addrs
                    .into_iter()
                    .map(|ip| Resolved {
                        addr: SocketAddr::new(ip, line.port),
                        weight: line.weight,
                        backup: line.backup,
                    })
                    .collect(),
                valid,
            ),
            Answer::NxDomain => Found::NxDomain,
        });
    }
    Ok(
        match client.resolve_srv(&query_name(line), resolver).await? {
            // The SRV weight, unless the line sets a weight other than 1.
            SrvAnswer::Peers { peers, valid } => Found::Peers(
                peers
                    .into_iter()
                    .map(|p| {
                        let weight = if line.weight_set && line.weight != 1 {
                            line.weight
                        } else {
                            u32::from(p.weight)
                        };
                        Resolved {
                            addr: SocketAddr::new(p.addr, p.port),
                            weight,
                            backup: p.backup || line.backup,
                        }
                    })
                    .collect(),
                valid,
            ),
            SrvAnswer::NxDomain => Found::NxDomain,
        },
    )
}

/// The upstream's state file (`state FILE`) is rewritten: by the master
/// when there is one (told through `saved`), else here.
fn save_state(u: &UpstreamRt, saved: Option<&tokio::sync::Notify>) {
    let (Some((zone, i)), Some(_)) = (&u.shared, &u.cfg.state) else {
        return;
    };
    match saved {
        Some(n) => n.notify_one(),
        None => super::state::save(zone, *i, &u.cfg),
    }
}

/// How soon a publication that met a busy zone is tried again.
const BUSY_RETRY: Duration = Duration::from_millis(100);

/// Publishes an answer, trying again every `BUSY_RETRY` while the zone is
/// busy (another writer, or a publication under way), for as long as the
/// answer is `valid`: the worker's runtime never waits for the lock, and
/// DNS is not asked again meanwhile. Logged once. False if the zone stayed
/// busy (the caller looks the name up afresh).
async fn publish_when_free(u: &UpstreamRt, k: usize, found: &[Resolved], valid: Duration) -> bool {
    let began = tokio::time::Instant::now();
    let mut told = false;
    loop {
        match publish(u, k, found) {
            Ok(()) => return true,
            Err(why) => {
                if !told {
                    crate::log!(
                        Level::Info,
                        "{}, answer for upstream \"{}\" applied when it is free",
                        why,
                        u.cfg.name
                    );
                    told = true;
                }
            }
        }
        if began.elapsed() >= valid.max(BUSY_RETRY) {
            return false;
        }
        tokio::time::sleep(BUSY_RETRY).await;
    }
}

/// Publishes server line `k`'s new peers with every other line's current
/// ones. Err (why) when the zone was busy: nothing changed.
fn publish(u: &UpstreamRt, k: usize, found: &[Resolved]) -> Result<(), String> {
    let Some((zone, i)) = &u.shared else {
        return Ok(());
    };
    let Some(current) = zone.snapshot(*i, &u.cfg) else {
        return Err(format!("zone \"{}\" is busy", zone.name));
    };
    let list = peer_list(&u.cfg, |j, _| {
        if j == k {
            found.to_vec()
        } else {
            Resolved::of_line(&current, j)
        }
    });
    match zone.try_publish(*i, std::process::id(), &list) {
        Ok(r) if r.refused > 0 => crate::log!(
            Level::Error,
            "zone \"{}\" is too small for the peers of upstream \"{}\": {} of them not added, {} bytes needed",
            zone.name,
            u.cfg.name,
            r.refused,
            r.needed
        ),
        Ok(_) => {}
        Err(e @ super::zone::ZoneError::Busy { .. }) => return Err(e.to_string()),
        Err(e) => crate::log!(Level::Error, "{}", e),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Zone;
    use std::sync::Mutex;

    /// A zone upstream with one `resolve` line, its zone, and this process
    /// holding the zone's resolver lease.
    fn resolving(clock: &Clock) -> Arc<UpstreamRt> {
        let (cfg, _) = crate::conf::testutil::try_build(
            "events {} http { resolver 127.0.0.1:53; resolver_timeout 2s; \
             upstream u { zone z 64k; server app.test:80 resolve; } \
             server { listen 127.0.0.1:8080; location / { proxy_pass http://u; } } }",
        )
        .expect("config");
        let ups = cfg.http.expect("http").upstreams;
        let up = ups.get(0).expect("upstream").clone();
        let zone = Zone::heap("z", 64 * 1024, &[&*up], 1).expect("zone");
        let lease = zone.lease().expect("lease");
        assert!(lease.hold(std::process::id(), clock.now_ms(), LEASE_STALE));
        Arc::new(UpstreamRt::new(up, Some(Arc::new(zone))))
    }

    fn peer(last: u8) -> Resolved {
        Resolved {
            addr: SocketAddr::from(([127, 0, 0, last], 80)),
            weight: 1,
            backup: false,
        }
    }

    /// nginx's schedule, on paused time: asked at once; after an answer,
    /// again when it is no longer valid plus a second; after an error,
    /// again after max(resolver_timeout, 1 s), the peers kept.
    #[tokio::test(start_paused = true)]
    async fn asks_on_nginx_schedule() {
        let clock = Clock::new();
        let u = resolving(&clock);
        let t0 = clock.now();
        let asked: Arc<Mutex<Vec<u128>>> = Arc::default();
        let ask = {
            let asked = asked.clone();
            move |_: UpstreamServer, _: Arc<Resolver>| {
                let n = {
                    let mut a = asked.lock().expect("lock");
                    a.push(t0.elapsed().as_millis());
                    a.len()
                };
                async move {
                    match n {
                        2 => Err(DnsError::Timeout),
                        _ => Ok(Found::Peers(vec![peer(n as u8)], Duration::from_secs(5))),
                    }
                }
            }
        };
        let task = tokio::spawn(follow_with(u.clone(), 0, clock, ask, None));
        let holds = |last: u8| {
            let p = u.peers();
            p.count() == 1 && p.primary[0].addr.to_string() == peer(last).addr.to_string()
        };
        // At 7 s the error at 6001 ms has left the first answer's peer.
        tokio::time::sleep(Duration::from_millis(7_000)).await;
        assert!(holds(1), "an error keeps the last good peers");
        tokio::time::sleep(Duration::from_millis(8_000)).await;
        task.abort();
        // 1 ms: the first query; 6001: 5 s valid + 1 s; 8001: after the
        // error, the 2 s resolver_timeout; 14001: 5 s + 1 s again.
        assert_eq!(*asked.lock().expect("lock"), vec![1, 6001, 8001, 14001]);
        assert!(holds(4), "the zone holds the last answer's peers");
    }

    /// A worker that does not hold the lease never asks.
    #[tokio::test(start_paused = true)]
    async fn only_the_lease_holder_asks() {
        let clock = Clock::new();
        let u = resolving(&clock);
        if let Some((z, _)) = &u.shared {
            let l = z.lease().expect("lease");
            assert!(l.release(std::process::id()));
        }
        let asked = Arc::new(Mutex::new(0));
        let ask = {
            let asked = asked.clone();
            move |_: UpstreamServer, _: Arc<Resolver>| {
                *asked.lock().expect("lock") += 1;
                async { Err(DnsError::Timeout) }
            }
        };
        let task = tokio::spawn(follow_with(u, 0, clock, ask, None));
        tokio::time::sleep(Duration::from_secs(10)).await;
        task.abort();
        assert_eq!(*asked.lock().expect("lock"), 0);
    }
}
