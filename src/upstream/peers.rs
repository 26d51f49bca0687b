//! An upstream's peers as one worker sees them, and nginx's round-robin
//! arithmetic over them: smooth weighted round robin, `max_fails` within
//! `fail_timeout`, `max_conns`, `down`, backup peers used only when no primary
//! is usable, and the bookkeeping when a peer is released. Pure: the caller
//! passes the time in; the zone issue moves this state into shared memory.

use std::time::{Duration, Instant};

use crate::conf::model::{PeerAddr, Upstream};

/// One peer: one address of one `server` line.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: PeerAddr,
    /// `ip:port`, `[v6]:port` or `unix:/path`, as `$upstream_addr` shows it.
    pub name: std::sync::Arc<str>,
    /// Which `server` line it comes from (index into `Peers::servers`).
    pub server: usize,
    pub weight: i64,
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub max_conns: u32,
    pub down: bool,
    pub current_weight: i64,
    pub effective_weight: i64,
    pub conns: u32,
    pub fails: u32,
    pub accessed: Option<Instant>,
    pub checked: Option<Instant>,
}

impl Peer {
    pub(super) fn usable(&self, now: Instant) -> bool {
        if self.down {
            return false;
        }
        if self.max_fails > 0
            && self.fails >= self.max_fails
            && self
                .checked
                .is_some_and(|c| now.duration_since(c) <= self.fail_timeout)
        {
            return false;
        }
        !(self.max_conns > 0 && self.conns >= self.max_conns)
    }
}

/// nginx's smooth weighted round robin over the peers `eligible` admits:
/// each gains its effective weight, the heaviest wins and pays the total.
/// The caller marks the pick (`checked`).
pub(super) fn smooth_pick(
    set: &mut [Peer],
    eligible: impl Fn(usize, &Peer) -> bool,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut total: i64 = 0;
    for i in 0..set.len() {
        if !eligible(i, &set[i]) {
            continue;
        }
        let p = &mut set[i];
        p.current_weight += p.effective_weight;
        total += p.effective_weight;
        if p.effective_weight < p.weight {
            p.effective_weight += 1;
        }
        if best.is_none_or(|b| set[i].current_weight > set[b].current_weight) {
            best = Some(i);
        }
    }
    let b = best?;
    set[b].current_weight -= total;
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
    bits: Vec<bool>,
    primaries: usize,
}

impl Tried {
    pub fn new(peers: &Peers) -> Tried {
        Tried {
            bits: vec![false; peers.primary.len() + peers.backup.len()],
            primaries: peers.primary.len(),
        }
    }
    fn slot(&self, id: PeerId) -> usize {
        if id.backup {
            self.primaries + id.index
        } else {
            id.index
        }
    }
    pub fn set(&mut self, id: PeerId) {
        let s = self.slot(id);
        if let Some(b) = self.bits.get_mut(s) {
            *b = true;
        }
    }
    pub fn has(&self, id: PeerId) -> bool {
        self.bits.get(self.slot(id)).copied().unwrap_or(false)
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
}

fn peer_name(addr: &PeerAddr) -> std::sync::Arc<str> {
    addr.to_string().into()
}

impl Peers {
    pub fn from_config(u: &Upstream) -> Peers {
        let mut primary = Vec::new();
        let mut backup = Vec::new();
        for (si, s) in u.servers.iter().enumerate() {
            for a in &s.addrs {
                let p = Peer {
                    addr: a.clone(),
                    name: peer_name(a),
                    server: si,
                    weight: i64::from(s.weight),
                    max_fails: s.max_fails,
                    fail_timeout: s.fail_timeout,
                    max_conns: s.max_conns,
                    down: s.down,
                    current_weight: 0,
                    effective_weight: i64::from(s.weight),
                    conns: 0,
                    fails: 0,
                    accessed: None,
                    checked: None,
                };
                if s.backup {
                    backup.push(p)
                } else {
                    primary.push(p)
                }
            }
        }
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

    /// One primary peer and no backup: it never fails and is always tried.
    pub fn single(&self) -> bool {
        self.primary.len() == 1 && self.backup.is_empty()
    }

    pub fn get(&self, id: PeerId) -> &Peer {
        if id.backup {
            &self.backup[id.index]
        } else {
            &self.primary[id.index]
        }
    }

    pub fn get_mut(&mut self, id: PeerId) -> &mut Peer {
        if id.backup {
            &mut self.backup[id.index]
        } else {
            &mut self.primary[id.index]
        }
    }

    /// Smooth weighted round robin over the usable, untried peers of one set.
    pub(super) fn pick_in(&mut self, backup: bool, tried: &Tried, now: Instant) -> Option<PeerId> {
        let set = if backup {
            &mut self.backup
        } else {
            &mut self.primary
        };
        let b = smooth_pick(set, |i, p| {
            !tried.has(PeerId { backup, index: i }) && p.usable(now)
        })?;
        let p = &mut set[b];
        if p.checked
            .is_none_or(|c| now.duration_since(c) > p.fail_timeout)
        {
            p.checked = Some(now);
        }
        Some(PeerId { backup, index: b })
    }

    /// The next peer by round robin: primaries first, backups when no primary
    /// is usable. None is nginx's "no live upstreams".
    pub fn pick_round_robin(&mut self, tried: &Tried, now: Instant) -> Option<PeerId> {
        if self.single() {
            let p = &self.primary[0];
            if p.down || (p.max_conns > 0 && p.conns >= p.max_conns) {
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
    pub fn acquire(&mut self, id: PeerId) {
        self.get_mut(id).conns += 1;
    }

    /// Releases a peer after use, with nginx's failure accounting.
    pub fn release(&mut self, id: PeerId, outcome: Outcome, now: Instant) -> Released {
        let single = self.single();
        let p = self.get_mut(id);
        p.conns = p.conns.saturating_sub(1);
        if single {
            return Released::Quiet;
        }
        match outcome {
            Outcome::Failed => {
                p.fails += 1;
                p.accessed = Some(now);
                p.checked = Some(now);
                if p.max_fails > 0 {
                    p.effective_weight -= p.weight / i64::from(p.max_fails);
                    if p.effective_weight < 0 {
                        p.effective_weight = 0;
                    }
                    if p.fails >= p.max_fails {
                        return Released::Disabled;
                    }
                }
                if p.effective_weight < 0 {
                    p.effective_weight = 0;
                }
                Released::Quiet
            }
            Outcome::Ok | Outcome::Next => {
                // A success after the failure window closes the window.
                if outcome == Outcome::Ok && p.accessed < p.checked {
                    p.fails = 0;
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
            .map(|(a, w, backup)| UpstreamServer {
                text: a.to_string(),
                addrs: a.parse().map(PeerAddr::Inet).into_iter().collect(),
                weight: *w,
                max_fails: 1,
                fail_timeout: Duration::from_secs(10),
                max_conns: 0,
                backup: *backup,
                down: false,
            })
            .collect(),
        balancer,
        keepalive: Keepalive {
            max: 0,
            local: false,
            requests: 0,
            time: Duration::ZERO,
            timeout: Duration::ZERO,
        },
        implicit: false,
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

    fn run(p: &mut Peers, n: usize) -> Vec<usize> {
        let now = Instant::now();
        let mut counts = vec![0; p.count()];
        for _ in 0..n {
            let t = Tried::new(p);
            let id = p.pick_round_robin(&t, now).unwrap();
            p.acquire(id);
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
        let mut p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:2", 1, false),
        ]));
        assert_eq!(run(&mut p, 30), vec![15, 15]);
    }

    #[test]
    fn weights_one_two() {
        let mut p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:2", 2, false),
        ]));
        assert_eq!(run(&mut p, 30), vec![10, 20]);
        // Smooth: never two of the lighter peer in a row.
        let now = Instant::now();
        let seq: Vec<usize> = (0..6)
            .map(|_| p.pick_round_robin(&Tried::new(&p), now).unwrap().index)
            .collect();
        assert!(!seq.windows(2).any(|w| w == [0, 0]), "{seq:?}");
    }

    #[test]
    fn failures_disable_then_recover() {
        let mut p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:2", 1, false),
        ]));
        let t0 = Instant::now();
        let id = PeerId {
            backup: false,
            index: 0,
        };
        p.acquire(id);
        assert_eq!(p.release(id, Outcome::Failed, t0), Released::Disabled);
        // Within fail_timeout only the other peer is chosen.
        for _ in 0..5 {
            assert_eq!(
                p.pick_round_robin(&Tried::new(&p), t0 + Duration::from_secs(1))
                    .unwrap()
                    .index,
                1
            );
        }
        // After it, the failed peer is tried again; a success resets its fails.
        let later = t0 + Duration::from_secs(11);
        let mut seen = false;
        for _ in 0..4 {
            let id = p.pick_round_robin(&Tried::new(&p), later).unwrap();
            p.acquire(id);
            p.release(id, Outcome::Ok, later);
            seen |= id.index == 0;
        }
        assert!(seen);
        assert_eq!(p.primary[0].fails, 0);
    }

    #[test]
    fn backup_only_when_primaries_unusable() {
        let mut p = Peers::from_config(&upstream(&[
            ("127.0.0.1:1", 1, false),
            ("127.0.0.1:9", 1, true),
        ]));
        assert_eq!(run(&mut p, 4), vec![4, 0]);
        let now = Instant::now();
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

    #[test]
    fn single_peer_never_fails() {
        let mut p = Peers::from_config(&upstream(&[("127.0.0.1:1", 1, false)]));
        let now = Instant::now();
        let id = PeerId {
            backup: false,
            index: 0,
        };
        p.acquire(id);
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
        let mut p = Peers::from_config(&u);
        let now = Instant::now();
        let id = p.pick_round_robin(&Tried::new(&p), now).unwrap();
        assert_eq!(id.index, 1);
        p.acquire(id);
        assert_eq!(p.pick_round_robin(&Tried::new(&p), now), None);
    }
}
