//! An upstream's peers as one worker sees them (a snapshot), and nginx's
//! round-robin arithmetic over them: smooth weighted round robin,
//! `max_fails` within `fail_timeout`, `max_conns`, `down`, backup peers used
//! only when no primary is usable, and the bookkeeping when a peer is
//! released. The live state is atomics ([`PeerLive`]): in the worker's own
//! memory, or in a shared zone so that every worker sees it. Pure otherwise:
//! the caller passes the time in (milliseconds of the shared monotonic clock).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::conf::model::{PeerAddr, Upstream};
use crate::shm::Ref;
pub use crate::shm::records::PeerLive;

/// Milliseconds on CLOCK_MONOTONIC: one clock for every process, so a time
/// stored in a zone by one worker means the same to another.
pub type Ms = u64;

pub fn now_ms() -> Ms {
    crate::net::clock::mono_ms()
}

/// Where a peer's live state is: this worker's memory or a zone.
#[derive(Clone, Debug)]
pub enum Live {
    Local(Arc<PeerLive>),
    Zone(Ref<PeerLive>),
}

impl std::ops::Deref for Live {
    type Target = PeerLive;
    fn deref(&self) -> &PeerLive {
        match self {
            Live::Local(l) => l,
            Live::Zone(r) => r,
        }
    }
}

/// `pick_first`'s chosen peer (its `Peer::key`; 0: none yet): the
/// worker's own, or in the zone so that every worker follows one choice.
#[derive(Clone, Debug)]
pub enum Choice {
    Local(Arc<AtomicU64>),
    Zone(Ref<AtomicU64>),
}

impl std::ops::Deref for Choice {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        match self {
            Choice::Local(a) => a,
            Choice::Zone(r) => r,
        }
    }
}

/// One peer: one address of one `server` line.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Names the peer: its zone slot + 1 with the publication that gave
    /// it the slot, or its position + 1 among the worker's own peers.
    pub key: u64,
    pub addr: PeerAddr,
    /// `ip:port`, `[v6]:port` or `unix:/path`, as `$upstream_addr` shows it.
    pub name: std::sync::Arc<str>,
    /// Which `server` line it comes from (index into `Peers::servers`).
    pub server: usize,
    pub weight: i64,
    pub max_fails: u32,
    pub fail_timeout: Ms,
    pub max_conns: u32,
    pub down: bool,
    pub backup: bool,
    /// `health_check ... mandatory`: not used before its first check passed.
    pub hc_mandatory: bool,
    /// `slow_start=` (0: off).
    pub slow_start: Ms,
    pub live: Live,
}

impl Peer {
    /// The peer's ID in the API: its slot in the zone (its position among
    /// the worker's own peers without a zone). The same in every worker and
    /// kept while the peer exists, so a resolve change that adds or drops
    /// other peers does not move it; a slot freed by a dropped peer can be
    /// given to a later one.
    pub fn api_id(&self) -> usize {
        usize::try_from((self.key & 0xffff_ffff).saturating_sub(1)).unwrap_or(usize::MAX)
    }

    pub fn conns(&self) -> u32 {
        self.live.conns.load(Relaxed)
    }

    pub fn fails(&self) -> u32 {
        self.live.fails.load(Relaxed)
    }

    /// Failed `max_fails` times within `fail_timeout`.
    pub fn failed(&self, now: Ms) -> bool {
        let checked = self.live.checked.load(Relaxed);
        self.max_fails > 0
            && self.fails() >= self.max_fails
            && checked != 0
            && now.saturating_sub(checked) <= self.fail_timeout
    }

    /// `down` by its `server` line, unless the API changed that: down,
    /// draining (no new requests) or up (`super::admin`). One relaxed load.
    pub fn is_down(&self) -> bool {
        match self.live.admin.load(Relaxed) {
            super::admin::NONE => self.down,
            super::admin::UP => false,
            _ => true,
        }
    }

    /// Neither `down` nor failed nor kept out by health checks
    /// (`max_conns` aside).
    pub fn alive(&self, now: Ms) -> bool {
        !self.is_down() && !self.failed(now) && self.health_ok()
    }

    pub(super) fn usable(&self, now: Ms) -> bool {
        let full = self.max_conns > 0 && self.conns() >= self.max_conns;
        !(self.is_down() || full || self.failed(now)) && self.health_ok()
    }

    /// What the active health checks say: unhealthy peers get no traffic,
    /// nor (with `mandatory`) peers not checked yet.
    pub fn health_ok(&self) -> bool {
        match self.live.health.load(Relaxed) {
            super::health::UNHEALTHY => false,
            super::health::UNCHECKED => !self.hc_mandatory,
            _ => true,
        }
    }

    /// `slow_start`: within that time after it came back, its weight grows
    /// from 1 in proportion to the time passed.
    pub(super) fn slowed(&self, weight: i64, now: Ms) -> i64 {
        let back = self.live.hc.recovered.load(Relaxed);
        let since = now.saturating_sub(back);
        if self.slow_start == 0 || back == 0 || since >= self.slow_start {
            return weight;
        }
        (weight * since as i64 / self.slow_start as i64).max(1)
    }

    /// nginx: a pick opens a new failure window once the last one is over.
    pub(super) fn mark_chosen(&self, now: Ms) {
        let l = &self.live;
        let checked = l.checked.load(Relaxed);
        if checked == 0 || now.saturating_sub(checked) > self.fail_timeout {
            l.checked.store(now, Relaxed);
        }
    }
}

/// nginx's smooth weighted round robin over the peers `eligible` admits:
/// each gains its effective weight, the heaviest wins and pays the total.
/// With the state in a zone, two workers may pick at once: every step is an
/// atomic update, so the weights still add up and the shares stay right.
/// The caller marks the pick (`mark_chosen`).
pub(super) fn smooth_pick(
    set: &[Peer],
    now: Ms,
    eligible: impl Fn(usize, &Peer) -> bool,
) -> Option<usize> {
    let mut best: Option<(usize, i64)> = None;
    let mut total: i64 = 0;
    for (i, p) in set.iter().enumerate() {
        if !eligible(i, p) {
            continue;
        }
        let l = &p.live;
        let full = l.effective_weight.load(Relaxed);
        let eff = p.slowed(full, now);
        let cur = l.current_weight.fetch_add(eff, Relaxed) + eff;
        total += eff;
        if full < p.weight {
            let _ = l
                .effective_weight
                .fetch_update(Relaxed, Relaxed, |e| (e < p.weight).then_some(e + 1));
        }
        if best.is_none_or(|(_, bc)| cur > bc) {
            best = Some((i, cur));
        }
    }
    let (b, _) = best?;
    set[b].live.current_weight.fetch_sub(total, Relaxed);
    Some(b)
}

/// Which peer: primary or backup, and its index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerId {
    pub backup: bool,
    pub index: usize,
}

/// The peers tried for one request (a bit per peer, primary then backup).
#[derive(Debug, Clone, Default)]
pub struct Tried {
    bits: TriedBits,
    primaries: usize,
    slots: usize,
}

/// One bit a peer: in the value itself for up to 128 peers (as nginx keeps
/// up to a word's worth in the request), so a request's attempts allocate
/// nothing for it; in a vector for more.
#[derive(Debug, Clone)]
enum TriedBits {
    Inline(u128),
    Heap(Vec<bool>),
}

impl Default for TriedBits {
    fn default() -> TriedBits {
        TriedBits::Inline(0)
    }
}

impl Tried {
    pub fn new(peers: &Peers) -> Tried {
        let slots = peers.primary.len() + peers.backup.len();
        Tried {
            bits: if slots <= 128 {
                TriedBits::Inline(0)
            } else {
                TriedBits::Heap(vec![false; slots])
            },
            primaries: peers.primary.len(),
            slots,
        }
    }
    /// The peer's bit, if it is one of the peers this set was made for.
    fn slot(&self, id: PeerId) -> Option<usize> {
        let s = if id.backup {
            self.primaries.checked_add(id.index)?
        } else {
            id.index
        };
        (s < self.slots).then_some(s)
    }
    pub fn set(&mut self, id: PeerId) {
        let Some(s) = self.slot(id) else {
            return;
        };
        match &mut self.bits {
            TriedBits::Inline(b) => {
                if s < 128 {
                    *b |= 1u128 << s;
                }
            }
            TriedBits::Heap(v) => {
                if let Some(b) = v.get_mut(s) {
                    *b = true;
                }
            }
        }
    }
    pub fn has(&self, id: PeerId) -> bool {
        let Some(s) = self.slot(id) else {
            return false;
        };
        match &self.bits {
            TriedBits::Inline(b) => s < 128 && b & (1u128 << s) != 0,
            TriedBits::Heap(v) => v.get(s).copied().unwrap_or(false),
        }
    }
}

/// How a peer's use ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// A failure that counts towards `max_fails`.
    Failed,
    /// Moved on without counting a failure (`http_403`, `http_404`).
    Next,
}

/// What a release reports for the error log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    Quiet,
    /// The peer reached `max_fails`: `upstream server temporarily disabled`.
    Disabled,
}

#[derive(Debug, Clone)]
pub struct Peers {
    pub primary: Vec<Peer>,
    pub backup: Vec<Peer>,
    /// The `server` lines' addresses as written (`hash ... consistent` hashes them).
    pub servers: Vec<String>,
    /// The consistent-hash ring: (point, server line), sorted, de-duplicated.
    pub points: Vec<(u32, usize)>,
    /// The zone's publication this snapshot was read at (nginx's config
    /// counter); 0 for a worker's own peers, which never change.
    pub config: u64,
    /// `pick_first`'s choice.
    pub choice: Choice,
    /// `queue`: woken when a peer is released (see `UpstreamRt::queue`).
    pub freed: Option<std::sync::Arc<super::QueueWake>>,
}

fn peer_name(addr: &PeerAddr) -> std::sync::Arc<str> {
    addr.to_string().into()
}

impl Peer {
    /// A peer for one address of `server` line number `server`.
    pub fn from_server(
        server: usize,
        s: &crate::conf::model::UpstreamServer,
        addr: &PeerAddr,
        live: Live,
    ) -> Peer {
        Peer {
            key: 0,
            addr: addr.clone(),
            name: peer_name(addr),
            server,
            weight: i64::from(s.weight),
            max_fails: s.max_fails,
            fail_timeout: s.fail_timeout.as_millis() as Ms,
            max_conns: s.max_conns,
            down: s.down,
            backup: s.backup,
            hc_mandatory: false,
            slow_start: s.slow_start.as_millis() as Ms,
            live,
        }
    }
}

impl Peers {
    /// Every address of the `server` lines, with this worker's own state.
    pub fn from_config(u: &Upstream) -> Peers {
        let peers = u
            .servers
            .iter()
            .enumerate()
            .flat_map(|(si, s)| {
                s.addrs.iter().map(move |a| {
                    let live = Live::Local(Arc::new(PeerLive::with_weight(i64::from(s.weight))));
                    Peer::from_server(si, s, a, live)
                })
            })
            .zip(1..)
            .map(|(mut p, key)| {
                p.key = key;
                p
            })
            .collect();
        Peers::assemble(u, peers, 0)
    }

    /// Peers in `server` order, split into primary and backup.
    pub fn assemble(u: &Upstream, peers: Vec<Peer>, config: u64) -> Peers {
        let mandatory = u.health.as_ref().is_some_and(|h| h.mandatory);
        let (backup, primary): (Vec<Peer>, Vec<Peer>) = peers
            .into_iter()
            .map(|mut p| {
                p.hc_mandatory = mandatory;
                p
            })
            .partition(|p| p.backup);
        let servers: Vec<String> = u.servers.iter().map(|s| s.text.clone()).collect();
        let points = match &u.balancer {
            crate::conf::model::Balancer::Hash {
                consistent: true, ..
            } => super::balancer::ketama_points(&primary, &servers),
            _ => Vec::new(),
        };
        Peers {
            primary,
            backup,
            servers,
            points,
            config,
            choice: Choice::Local(Arc::new(AtomicU64::new(0))),
            freed: None,
        }
    }

    /// The sum of the primary peers' weights.
    pub fn total_weight(&self) -> i64 {
        self.primary.iter().map(|p| p.weight).sum()
    }

    /// nginx's tries: one per peer, primary and backup.
    pub fn count(&self) -> usize {
        self.primary.len() + self.backup.len()
    }

    /// nginx's tries for a request: one per peer not marked `down`,
    /// primary and backup (a down one is never tried).
    pub fn tries(&self) -> usize {
        self.primary
            .iter()
            .chain(&self.backup)
            .filter(|p| !p.down)
            .count()
    }

    /// One primary peer and no backup: it never fails and is always tried.
    pub fn single(&self) -> bool {
        self.primary.len() == 1 && self.backup.is_empty()
    }

    /// The peer at `addr`, if listed.
    pub fn find(&self, addr: &PeerAddr) -> Option<PeerId> {
        let at = |backup: bool, set: &[Peer]| {
            set.iter()
                .position(|p| p.addr == *addr)
                .map(|index| PeerId { backup, index })
        };
        at(false, &self.primary).or_else(|| at(true, &self.backup))
    }

    pub fn get(&self, id: PeerId) -> &Peer {
        if id.backup {
            &self.backup[id.index]
        } else {
            &self.primary[id.index]
        }
    }

    /// Smooth weighted round robin over the usable, untried peers of one set.
    pub(super) fn pick_in(&self, backup: bool, tried: &Tried, now: Ms) -> Option<PeerId> {
        let set = if backup { &self.backup } else { &self.primary };
        let b = smooth_pick(set, now, |i, p| {
            !tried.has(PeerId { backup, index: i }) && p.usable(now)
        })?;
        set[b].mark_chosen(now);
        Some(PeerId { backup, index: b })
    }

    /// The next peer by round robin: primaries first, backups when no primary
    /// is usable. None is nginx's "no live upstreams".
    pub fn pick_round_robin(&self, tried: &Tried, now: Ms) -> Option<PeerId> {
        if self.single() {
            let p = &self.primary[0];
            if p.is_down() || (p.max_conns > 0 && p.conns() >= p.max_conns) || !p.health_ok() {
                return None;
            }
            return Some(PeerId {
                backup: false,
                index: 0,
            });
        }
        self.pick_in(false, tried, now).or_else(|| {
            if self.backup.is_empty() {
                None
            } else {
                self.pick_in(true, tried, now)
            }
        })
    }

    /// Counts a connection to a peer the balancer chose.
    pub fn acquire(&self, id: PeerId, now: Ms) {
        let l = &self.get(id).live;
        l.conns.fetch_add(1, Relaxed);
        l.requests.fetch_add(1, Relaxed);
        l.selected.store(now, Relaxed);
    }

    /// Counts a response from the peer by its status class.
    pub fn responded(&self, id: PeerId, status: u16) {
        let l = &self.get(id).live;
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        l.responses[class].fetch_add(1, Relaxed);
    }

    /// Releases a peer after use, with nginx's failure accounting.
    pub fn release(&self, id: PeerId, outcome: Outcome, now: Ms) -> Released {
        let p = self.get(id);
        let l = &p.live;
        let _ = l
            .conns
            .fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_sub(1)));
        if let Some(q) = &self.freed {
            q.freed();
        }
        if self.single() {
            return Released::Quiet;
        }
        match outcome {
            Outcome::Failed => {
                let fails = l.fails.fetch_add(1, Relaxed) + 1;
                l.accessed.store(now, Relaxed);
                l.checked.store(now, Relaxed);
                if p.max_fails > 0 {
                    let step = p.weight / i64::from(p.max_fails);
                    let _ = l
                        .effective_weight
                        .fetch_update(Relaxed, Relaxed, |e| Some((e - step).max(0)));
                    if fails == p.max_fails {
                        l.unavail.fetch_add(1, Relaxed);
                        l.down_since.store(now, Relaxed);
                    }
                    if fails >= p.max_fails {
                        return Released::Disabled;
                    }
                }
                Released::Quiet
            }
            Outcome::Ok | Outcome::Next => {
                // A success after the failure window closes the window.
                if outcome == Outcome::Ok && l.accessed.load(Relaxed) < l.checked.load(Relaxed) {
                    l.fails.store(0, Relaxed);
                    let since = l.down_since.swap(0, Relaxed);
                    if since != 0 {
                        l.downtime.fetch_add(now.saturating_sub(since), Relaxed);
                        l.hc.recovered.store(now.max(1), Relaxed);
                    }
                }
                Released::Quiet
            }
        }
    }
}

/// An upstream for unit tests: (address, weight, backup) per server.
#[cfg(test)]
pub(crate) fn test_upstream(
    servers: &[(&str, u32, bool)],
    balancer: crate::conf::model::Balancer,
) -> Upstream {
    use crate::conf::Src;
    use crate::conf::model::{Keepalive, UpstreamServer};
    Upstream {
        name: "u".into(),
        servers: servers
            .iter()
            .map(|(a, w, backup)| {
                let mut s = UpstreamServer::new(
                    a.to_string(),
                    a.parse().map(PeerAddr::Inet).into_iter().collect(),
                );
                s.weight = *w;
                s.backup = *backup;
                s
            })
            .collect(),
        balancer,
        keepalive: Keepalive::off(),
        ping: None,
        zone: None,
        resolver: None,
        state: None,
        implicit: false,
        health: None,
        queue: None,
        sticky: None,
        src: Src {
            file: None,
            line: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::model::Balancer;

    fn upstream(servers: &[(&str, u32, bool)]) -> Upstream {
        test_upstream(servers, Balancer::RoundRobin)
    }

    /// slow_start: a peer back at t=1000 with slow_start=4s weighs 1 at
    /// first, a quarter of its weight a second later, all of it after 4 s;
    /// round robin follows.
    #[test]
    fn slow_start_grows_the_weight() {
        let mut u = upstream(&[("127.0.0.1:1", 8, false), ("127.0.0.1:2", 8, false)]);
        u.servers[0].slow_start = std::time::Duration::from_secs(4);
        let p = Peers::from_config(&u);
        let a = &p.primary[0];
        assert_eq!(a.slowed(8, 5000), 8, "never recovered");
        a.live.hc.recovered.store(1000, Relaxed);
        assert_eq!(a.slowed(8, 1000), 1);
        assert_eq!(a.slowed(8, 2000), 2);
        assert_eq!(a.slowed(8, 5000), 8);
        let mut first = 0;
        for _ in 0..18 {
            let id = p.pick_round_robin(&Tried::new(&p), 1000).unwrap();
            first += usize::from(id.index == 0);
        }
        assert_eq!(first, 2, "weight 1 against 8");
    }

    fn run(p: &Peers, n: usize) -> Vec<usize> {
        let now = 1_000_000u64;
        let mut counts = vec![0; p.count()];
        for _ in 0..n {
            let t = Tried::new(p);
            let id = p.pick_round_robin(&t, now).unwrap();
            p.acquire(id, 1_000_000);
            p.release(id, Outcome::Ok, now);
            counts[if id.backup {
                p.primary.len() + id.index
            } else {
                id.index
            }] += 1;
        }
        counts
    }

    #[test]
    fn equal_weights_alternate() {
        let p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:2", 1, false),
        ]));
        assert_eq!(run(&p, 30), vec![15, 15]);
    }

    #[test]
    fn weights_one_two() {
        let p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:2", 2, false),
        ]));
        assert_eq!(run(&p, 30), vec![10, 20]);
        // Smooth: never two of the lighter peer in a row.
        let now = 1_000_000u64;
        let seq: Vec<usize> = (0..6)
            .map(|_| p.pick_round_robin(&Tried::new(&p), now).unwrap().index)
            .collect();
        assert!(!seq.windows(2).any(|w| w == [0, 0]), "{seq:?}");
    }

    #[test]
    fn failures_disable_then_recover() {
        let p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:2", 1, false),
        ]));
        let t0 = 1_000_000u64;
        let id = PeerId {
            backup: false,
            index: 0,
        };
        p.acquire(id, 1_000_000);
        assert_eq!(p.release(id, Outcome::Failed, t0), Released::Disabled);
        // Within fail_timeout only the other peer is chosen.
        for _ in 0..5 {
            assert_eq!(
                p.pick_round_robin(&Tried::new(&p), t0 + 1000)
                    .unwrap()
                    .index,
                1
            );
        }
        // After it, the failed peer is tried again; a success resets its fails.
        let later = t0 + 11_000;
        let mut seen = false;
        for _ in 0..4 {
            let id = p.pick_round_robin(&Tried::new(&p), later).unwrap();
            p.acquire(id, 1_000_000);
            p.release(id, Outcome::Ok, later);
            seen |= id.index == 0;
        }
        assert!(seen);
        assert_eq!(p.primary[0].fails(), 0);
    }

    #[test]
    fn backup_only_when_primaries_unusable() {
        let p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:9", 1, true),
        ]));
        assert_eq!(run(&p, 4), vec![4, 0]);
        let now = 1_000_000u64;
        let mut t = Tried::new(&p);
        t.set(PeerId {
            backup: false,
            index: 0,
        });
        assert_eq!(
            p.pick_round_robin(&t, now),
            Some(PeerId {
                backup: true,
                index: 0
            })
        );
        t.set(PeerId {
            backup: true,
            index: 0,
        });
        assert_eq!(p.pick_round_robin(&t, now), None);
    }

    /// The tried set marks exactly the peers set, primary and backup
    /// apart, with its bits in the value (up to 128 peers) and in a vector
    /// past that.
    #[test]
    fn tried_marks_exactly_the_peers_set() {
        for (primaries, backups) in [(1usize, 0usize), (100, 28), (100, 29), (300, 5)] {
            let addrs: Vec<String> = (0..primaries + backups)
                .map(|i| format!("127.0.{}.{}:80", i / 250, i % 250 + 1))
                .collect();
            let list: Vec<(&str, u32, bool)> = addrs
                .iter()
                .enumerate()
                .map(|(i, a)| (a.as_str(), 1, i >= primaries))
                .collect();
            let p = Peers::from_config(&upstream(&list));
            let id = |i: usize| PeerId {
                backup: i >= primaries,
                index: if i >= primaries { i - primaries } else { i },
            };
            let mut t = Tried::new(&p);
            let marked: Vec<usize> = (0..primaries + backups).filter(|i| i % 7 == 3).collect();
            for &i in &marked {
                t.set(id(i));
            }
            for i in 0..primaries + backups {
                assert_eq!(
                    t.has(id(i)),
                    marked.contains(&i),
                    "peer {i} of {primaries}+{backups}"
                );
            }
            // Out of range: never marked, and setting it changes nothing.
            let far = PeerId {
                backup: true,
                index: backups + 5,
            };
            t.set(far);
            assert!(!t.has(far));
        }
    }

    #[test]
    fn single_peer_never_fails() {
        let p = Peers::from_config(&upstream(&[("127.0.0.1:1", 1, false)]));
        let now = 1_000_000u64;
        let id = PeerId {
            backup: false,
            index: 0,
        };
        p.acquire(id, 1_000_000);
        assert_eq!(p.release(id, Outcome::Failed, now), Released::Quiet);
        let mut t = Tried::new(&p);
        t.set(id);
        assert_eq!(p.pick_round_robin(&t, now), Some(id));
    }

    #[test]
    fn down_and_max_conns() {
        let mut u = upstream(&[("127.0.0.1:1", 1, false), ("127.0.0.1:2", 1, false)]);
        u.servers[0].down = true;
        u.servers[1].max_conns = 1;
        let p = Peers::from_config(&u);
        let now = 1_000_000u64;
        let id = p.pick_round_robin(&Tried::new(&p), now).unwrap();
        assert_eq!(id.index, 1);
        p.acquire(id, 1_000_000);
        assert_eq!(p.pick_round_robin(&Tried::new(&p), now), None);
    }
}
