//! nginx's balancers other than plain round robin, with its arithmetic:
//! `least_conn`, `hash KEY` (CRC32, rehashing up to 20 times), `hash KEY
//! consistent` (ketama: 160 points per weight unit), `ip_hash` and `random
//! [two]`. Each falls back to round robin where nginx does. Pure: the request's
//! state (`PickState`), its key and the time come in, a peer comes out.

use super::crc32::{Crc32, crc32};
use super::peers::{Ms, Peer, PeerId, Peers, Tried, smooth_pick};
use crate::conf::model::Balancer;
use std::sync::atomic::Ordering::Relaxed;

/// Per-request balancer state, kept across retries as nginx keeps it.
#[derive(Debug, Clone)]
pub struct PickState {
    hash: u32,
    rehash: u32,
    tries: u32,
    /// ip_hash's running hash (starts at 89).
    ip: u32,
    /// Consistent hash: the ring position, once found.
    point: Option<usize>,
    rng: u64,
}

impl PickState {
    pub fn new(seed: u64) -> PickState {
        PickState {
            hash: 0,
            rehash: 0,
            tries: 0,
            ip: 89,
            point: None,
            rng: seed | 1,
        }
    }

    fn random(&mut self) -> u64 {
        // xorshift64*: plenty for spreading load.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// What a balancer hashes: the evaluated `hash` key, or the client address.
pub enum Key<'a> {
    None,
    Text(&'a str),
    /// ip_hash: the first three octets of IPv4, all of IPv6, or three zeros.
    Addr(&'a [u8]),
}

/// The ketama ring for `hash ... consistent`.
pub fn ketama_points(primary: &[Peer], servers: &[String]) -> Vec<(u32, usize)> {
    let mut points = Vec::new();
    for p in primary {
        let text = &servers[p.server];
        let (host, port) = split_server(text);
        let base = Crc32::new()
            .update(host.as_bytes())
            .update(b"\0")
            .update(port.as_bytes());
        let mut prev: u32 = 0;
        for _ in 0..(160 * p.weight.max(0)) {
            let h = base.update(&prev.to_le_bytes()).finish();
            points.push((h, p.server));
            prev = h;
        }
    }
    points.sort_by_key(|&(h, _)| h);
    points.dedup_by_key(|&mut (h, _)| h);
    points
}

/// nginx splits the `server` text into host and port for the ring.
pub(super) fn split_server(text: &str) -> (&str, &str) {
    if let Some(h) = text.strip_prefix("unix:") {
        return (h, "");
    }
    let digits = text.bytes().rev().take_while(u8::is_ascii_digit).count();
    let cut = text.len() - digits;
    if cut > 0 && text.as_bytes()[cut - 1] == b':' {
        (&text[..cut - 1], &text[cut..])
    } else {
        (text, "")
    }
}

/// The primary peer whose weight range contains `w`.
fn by_weight(primary: &[Peer], mut w: i64) -> usize {
    let mut i = 0;
    while i + 1 < primary.len() && w >= primary[i].weight {
        w -= primary[i].weight;
        i += 1;
    }
    i
}

fn free(peers: &Peers, tried: &Tried, i: usize, now: Ms) -> bool {
    !tried.has(PeerId {
        backup: false,
        index: i,
    }) && peers.primary[i].usable(now)
}

/// Marks the pick as nginx does (`checked` opens a new failure window).
fn chosen(peers: &Peers, i: usize, now: Ms) -> PeerId {
    peers.primary[i].mark_chosen(now);
    PeerId {
        backup: false,
        index: i,
    }
}

impl Peers {
    /// The balancer's choice among peers not yet tried, or None: no live upstreams.
    pub fn pick(
        &self,
        b: &Balancer,
        st: &mut PickState,
        key: &Key<'_>,
        tried: &Tried,
        now: Ms,
    ) -> Option<PeerId> {
        // One peer: nginx's shortcut (never failed); pick_first still
        // records it as its choice.
        if self.single() && !b.is_pick_first() {
            return self.pick_round_robin(tried, now);
        }
        match b {
            Balancer::RoundRobin => self.pick_round_robin(tried, now),
            Balancer::LeastConn => self.pick_least_conn(tried, now),
            Balancer::Hash {
                consistent: false, ..
            } => self.pick_hash(st, key, tried, now),
            Balancer::Hash {
                consistent: true, ..
            } => self.pick_ketama(st, key, tried, now),
            Balancer::IpHash => self.pick_ip_hash(st, key, tried, now),
            Balancer::Random { two } => self.pick_random(st, *two, tried, now),
            Balancer::PickFirst { revert, .. } => self.pick_first(*revert, tried, now),
        }
    }

    /// A try: the balancer's pick, counted as a connection of the peer,
    /// marked tried and taken from `tries_left`. None: no live upstreams.
    pub fn take(
        &self,
        b: &Balancer,
        st: &mut PickState,
        key: &Key<'_>,
        tried: &mut Tried,
        tries_left: &mut usize,
        now: Ms,
    ) -> Option<PeerId> {
        let id = self.pick(b, st, key, tried, now)?;
        self.acquire(id, now);
        tried.set(id);
        *tries_left = tries_left.saturating_sub(1);
        Some(id)
    }

    /// The primary index of `pick_first`'s choice (the first peer before
    /// any choice was made, or when the chosen one is no longer listed).
    pub fn chosen_index(&self) -> usize {
        self.chosen().0
    }

    /// The choice's primary index and the key it was read as.
    fn chosen(&self) -> (usize, u64) {
        let key = self.choice.load(Relaxed);
        let i = self.primary.iter().position(|p| p.key == key).unwrap_or(0);
        (i, key)
    }

    /// `pick_first`: the chosen peer while it is alive (not down, not
    /// failed), else the next alive one in `server` order, which becomes the
    /// choice (for every worker, with a zone); with `revert` the first alive
    /// one in `server` order. The request takes the first of them it may use:
    /// one at `max_conns`, or already tried by this request (a retry, a
    /// connect race), is passed over without moving the choice (a failure
    /// moves it: `move_on`).
    fn pick_first(&self, revert: bool, tried: &Tried, now: Ms) -> Option<PeerId> {
        let n = self.primary.len();
        let (current, seen) = self.chosen();
        let start = if revert { 0 } else { current };
        let order = || (0..n).map(|k| (start + k) % n);
        if let Some(u) = order().find(|&i| self.primary[i].alive(now)) {
            self.choose(seen, u);
        }
        let i = order().find(|&i| free(self, tried, i, now))?;
        Some(chosen(self, i, now))
    }

    /// Makes primary peer `i` the choice, unless another worker changed the
    /// choice since it was read as `seen` (its move stands).
    fn choose(&self, seen: u64, i: usize) {
        let key = self.primary[i].key;
        if seen != key {
            let _ = self.choice.compare_exchange(seen, key, Relaxed, Relaxed);
        }
    }

    /// `pick_first`: the chosen peer failed (a `proxy_next_upstream`
    /// condition); the next alive one in `server` order becomes the choice,
    /// unless the choice is already another peer.
    pub fn move_on(&self, id: PeerId, now: Ms) {
        let n = self.primary.len();
        let (current, seen) = self.chosen();
        if id.backup || n < 2 || current != id.index {
            return;
        }
        if let Some(i) = (1..n)
            .map(|k| (id.index + k) % n)
            .find(|&i| self.primary[i].alive(now))
        {
            self.choose(seen, i);
        }
    }

    /// `pick_first ... warm=N`: the next `warm` peers after the choice in
    /// `server` order that are not down or failed, which keep idle
    /// connections open for a failover without a handshake.
    pub fn warm(&self, warm: usize, now: Ms) -> Vec<usize> {
        let n = self.primary.len();
        let start = self.chosen_index();
        (1..n)
            .map(|k| (start + k) % n)
            .filter(|&i| self.primary[i].alive(now))
            .take(warm)
            .collect()
    }

    /// The fewest connections per weight; ties by smooth weighted round robin.
    fn pick_least_conn(&self, tried: &Tried, now: Ms) -> Option<PeerId> {
        let mut best: Option<usize> = None;
        let mut many = false;
        for i in 0..self.primary.len() {
            if !free(self, tried, i, now) {
                continue;
            }
            let p = &self.primary[i];
            match best {
                None => best = Some(i),
                Some(b) => {
                    let q = &self.primary[b];
                    let (l, r) = (
                        i64::from(p.conns()) * q.weight,
                        i64::from(q.conns()) * p.weight,
                    );
                    if l < r {
                        best = Some(i);
                        many = false;
                    } else if l == r {
                        many = true;
                    }
                }
            }
        }
        let Some(mut b) = best else {
            return if self.backup.is_empty() {
                None
            } else {
                self.pick_in(true, tried, now)
            };
        };
        if many {
            // Ties from the first best on go to smooth weighted round robin.
            let (bc, bw) = (i64::from(self.primary[b].conns()), self.primary[b].weight);
            let first = b;
            if let Some(t) = smooth_pick(&self.primary, now, |i, p| {
                i >= first
                    && !tried.has(PeerId {
                        backup: false,
                        index: i,
                    })
                    && p.usable(now)
                    && i64::from(p.conns()) * bw == bc * p.weight
            }) {
                b = t;
            }
        }
        Some(chosen(self, b, now))
    }

    fn pick_hash(
        &self,
        st: &mut PickState,
        key: &Key<'_>,
        tried: &Tried,
        now: Ms,
    ) -> Option<PeerId> {
        let text = match key {
            Key::Text(t) if !t.is_empty() => *t,
            _ => return self.pick_round_robin(tried, now),
        };
        let total = self.total_weight();
        if st.tries > 20 || total <= 0 {
            return self.pick_round_robin(tried, now);
        }
        loop {
            let mut c = Crc32::new();
            if st.rehash > 0 {
                c = c.update(st.rehash.to_string().as_bytes());
            }
            let h = (c.update(text.as_bytes()).finish() >> 16) & 0x7fff;
            st.hash = st.hash.wrapping_add(h);
            st.rehash += 1;
            let i = by_weight(&self.primary, i64::from(st.hash) % total);
            if free(self, tried, i, now) {
                return Some(chosen(self, i, now));
            }
            st.tries += 1;
            if st.tries > 20 {
                return self.pick_round_robin(tried, now);
            }
        }
    }

    fn pick_ketama(
        &self,
        st: &mut PickState,
        key: &Key<'_>,
        tried: &Tried,
        now: Ms,
    ) -> Option<PeerId> {
        // An empty key spreads as round robin, as nginx's.
        let text = match key {
            Key::Text(t) if !t.is_empty() => *t,
            _ => return self.pick_round_robin(tried, now),
        };
        if self.points.is_empty() || st.tries > 20 {
            return self.pick_round_robin(tried, now);
        }
        let n = self.points.len();
        let mut pos = *st.point.get_or_insert_with(|| {
            let h = crc32(text.as_bytes());
            self.points.partition_point(|&(p, _)| p < h) % n
        });
        loop {
            let server = self.points[pos % n].1;
            let pick = smooth_pick(&self.primary, now, |i, p| {
                p.server == server
                    && !tried.has(PeerId {
                        backup: false,
                        index: i,
                    })
                    && p.usable(now)
            });
            if let Some(b) = pick {
                st.point = Some(pos);
                return Some(chosen(self, b, now));
            }
            pos += 1;
            st.point = Some(pos);
            st.tries += 1;
            if st.tries > 20 {
                return self.pick_round_robin(tried, now);
            }
        }
    }

    fn pick_ip_hash(
        &self,
        st: &mut PickState,
        key: &Key<'_>,
        tried: &Tried,
        now: Ms,
    ) -> Option<PeerId> {
        let addr: &[u8] = match key {
            Key::Addr(a) => a,
            _ => &[0, 0, 0],
        };
        let total = self.total_weight();
        if st.tries > 20 || total <= 0 {
            return self.pick_round_robin(tried, now);
        }
        let mut hash = st.ip;
        loop {
            for &b in addr {
                hash = (hash * 113 + u32::from(b)) % 6271;
            }
            let i = by_weight(&self.primary, i64::from(hash) % total);
            if free(self, tried, i, now) {
                st.ip = hash;
                return Some(chosen(self, i, now));
            }
            st.tries += 1;
            if st.tries > 20 {
                return self.pick_round_robin(tried, now);
            }
        }
    }

    fn peek_random(&self, st: &mut PickState, total: i64) -> usize {
        by_weight(&self.primary, (st.random() % total as u64) as i64)
    }

    fn pick_random(&self, st: &mut PickState, two: bool, tried: &Tried, now: Ms) -> Option<PeerId> {
        let total = self.total_weight();
        if total <= 0 {
            return self.pick_round_robin(tried, now);
        }
        let mut first = None;
        let mut count = 0;
        while first.is_none() {
            let i = self.peek_random(st, total);
            if free(self, tried, i, now) {
                first = Some(i);
            } else {
                count += 1;
                if count > 20 {
                    return self.pick_round_robin(tried, now);
                }
            }
        }
        let mut pick = first?;
        if two {
            let mut count = 0;
            let other = loop {
                let i = self.peek_random(st, total);
                if i != pick && free(self, tried, i, now) {
                    break i;
                }
                count += 1;
                if count > 20 {
                    return self.pick_round_robin(tried, now);
                }
            };
            let (a, b) = (&self.primary[pick], &self.primary[other]);
            // The second wins unless it carries more load per weight.
            if i64::from(b.conns()) * a.weight > i64::from(a.conns()) * b.weight {
                // keep `pick`
            } else {
                pick = other;
            }
        }
        Some(chosen(self, pick, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::peers::Outcome;

    fn peers(addrs: &[&str], balancer: Balancer) -> Peers {
        let servers: Vec<(&str, u32, bool)> = addrs.iter().map(|a| (*a, 1, false)).collect();
        Peers::from_config(&crate::upstream::peers::test_upstream(&servers, balancer))
    }

    fn hash(consistent: bool) -> Balancer {
        Balancer::Hash {
            key: crate::conf::vars::compile("$remote_addr").unwrap(),
            consistent,
        }
    }

    #[test]
    fn hash_remote_addr_goes_to_second_peer() {
        let b = hash(false);
        let p = peers(&["127.0.0.1:8081", "127.0.0.1:8082"], b.clone());
        let now = 1_000_000u64;
        for _ in 0..5 {
            let mut st = PickState::new(1);
            let id = p
                .pick(&b, &mut st, &Key::Text("127.0.0.1"), &Tried::new(&p), now)
                .unwrap();
            assert_eq!(id.index, 1);
        }
    }

    #[test]
    fn hash_empty_key_is_round_robin() {
        let b = hash(false);
        let p = peers(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], b.clone());
        let now = 1_000_000u64;
        let mut counts = [0; 3];
        for _ in 0..6 {
            let mut st = PickState::new(1);
            counts[p
                .pick(&b, &mut st, &Key::Text(""), &Tried::new(&p), now)
                .unwrap()
                .index] += 1;
        }
        assert_eq!(counts, [2, 2, 2]);
    }

    #[test]
    fn ip_hash_spreads_class_c() {
        for (n, want) in [(2usize, vec![15, 15]), (3, vec![10, 10, 10])] {
            let addrs: Vec<String> = (1..=n).map(|i| format!("127.0.0.1:{}", 8080 + i)).collect();
            let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
            let p = peers(&refs, Balancer::IpHash);
            let now = 1_000_000u64;
            let mut counts = vec![0; n];
            for i in 1..=30u8 {
                let mut st = PickState::new(1);
                let key = [127, 0, i];
                counts[p
                    .pick(
                        &Balancer::IpHash,
                        &mut st,
                        &Key::Addr(&key),
                        &Tried::new(&p),
                        now,
                    )
                    .unwrap()
                    .index] += 1;
            }
            assert_eq!(counts, want);
        }
    }

    #[test]
    fn least_conn_prefers_idle_peer() {
        let b = Balancer::LeastConn;
        let p = peers(&["127.0.0.1:1", "127.0.0.1:2"], b.clone());
        let now = 1_000_000u64;
        let mut counts = [0; 2];
        for _ in 0..10 {
            let mut st = PickState::new(1);
            let id = p
                .pick(&b, &mut st, &Key::None, &Tried::new(&p), now)
                .unwrap();
            counts[id.index] += 1;
            p.acquire(id, 1_000_000);
            p.release(id, Outcome::Ok, now);
        }
        assert_eq!(counts, [5, 5]);
        // A long request on the first peer sends the next ones to the second.
        let busy = PeerId {
            backup: false,
            index: 0,
        };
        p.acquire(busy, 1_000_000);
        for _ in 0..10 {
            let mut st = PickState::new(1);
            let id = p
                .pick(&b, &mut st, &Key::None, &Tried::new(&p), now)
                .unwrap();
            assert_eq!(id.index, 1);
            p.acquire(id, 1_000_000);
            p.release(id, Outcome::Ok, now);
        }
    }

    #[test]
    fn consistent_hash_keeps_keys_when_a_peer_goes() {
        let b = hash(true);
        let now = 1_000_000u64;
        let three = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"];
        let p3 = peers(&three, b.clone());
        let p2 = peers(&three[..2], b.clone());
        let mut moved = 0;
        for k in 0..200 {
            let key = format!("key{k}");
            let a = p3
                .pick(
                    &b,
                    &mut PickState::new(1),
                    &Key::Text(&key),
                    &Tried::new(&p3),
                    now,
                )
                .unwrap();
            let c = p2
                .pick(
                    &b,
                    &mut PickState::new(1),
                    &Key::Text(&key),
                    &Tried::new(&p2),
                    now,
                )
                .unwrap();
            if a.index < 2 && a.index != c.index {
                moved += 1;
            }
        }
        assert_eq!(moved, 0, "keys of remaining peers must stay");
        assert_eq!(p3.points.len(), 480);
    }

    #[test]
    fn random_two_picks_less_loaded() {
        let b = Balancer::Random { two: true };
        let p = peers(&["127.0.0.1:1", "127.0.0.1:2"], b.clone());
        let now = 1_000_000u64;
        p.acquire(
            PeerId {
                backup: false,
                index: 0,
            },
            1_000_000,
        );
        p.acquire(
            PeerId {
                backup: false,
                index: 0,
            },
            1_000_000,
        );
        let mut st = PickState::new(42);
        for _ in 0..10 {
            assert_eq!(
                p.pick(&b, &mut st, &Key::None, &Tried::new(&p), now)
                    .unwrap()
                    .index,
                1
            );
        }
    }

    #[test]
    fn split_server_text() {
        assert_eq!(split_server("127.0.0.1:8080"), ("127.0.0.1", "8080"));
        assert_eq!(split_server("backend"), ("backend", ""));
        assert_eq!(split_server("unix:/tmp/s"), ("/tmp/s", ""));
        assert_eq!(split_server("[::1]:80"), ("[::1]", "80"));
    }

    #[test]
    fn pick_first_stays_moves_and_reverts() {
        let b = Balancer::PickFirst {
            warm: 1,
            revert: false,
        };
        let p = peers(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], b.clone());
        let now = 1_000_000;
        let pick = |p: &Peers, tried: &Tried, now| {
            p.pick(&b, &mut PickState::new(1), &Key::None, tried, now)
                .map(|id| id.index)
        };
        for _ in 0..5 {
            assert_eq!(pick(&p, &Tried::new(&p), now), Some(0));
        }
        assert_eq!(p.warm(1, now), vec![1]);
        // A retry (or a race) passes over the tried peer without moving.
        let mut t = Tried::new(&p);
        t.set(PeerId {
            backup: false,
            index: 0,
        });
        assert_eq!(pick(&p, &t, now), Some(1));
        assert_eq!(p.chosen_index(), 0);
        // A failure moves the choice on, and it stays after the peer recovers.
        let first = PeerId {
            backup: false,
            index: 0,
        };
        p.acquire(first, now);
        p.release(first, Outcome::Failed, now);
        p.move_on(first, now);
        assert_eq!(p.chosen_index(), 1);
        assert_eq!(p.warm(1, now), vec![2], "the failed peer is not kept warm");
        let later = now + 20_000;
        assert_eq!(pick(&p, &Tried::new(&p), later), Some(1));
        // Wraps around in server order.
        let second = PeerId {
            backup: false,
            index: 1,
        };
        p.move_on(second, later);
        assert_eq!(p.chosen_index(), 2);
        p.move_on(
            PeerId {
                backup: false,
                index: 2,
            },
            later,
        );
        assert_eq!(p.chosen_index(), 0);
        // A move from a peer that is no longer the choice is ignored.
        p.move_on(second, later);
        assert_eq!(p.chosen_index(), 0);

        // revert: back to the first as soon as it is usable.
        let rb = Balancer::PickFirst {
            warm: 0,
            revert: true,
        };
        let r = peers(&["127.0.0.1:1", "127.0.0.1:2"], rb.clone());
        let rpick = |now| {
            r.pick(
                &rb,
                &mut PickState::new(1),
                &Key::None,
                &Tried::new(&r),
                now,
            )
            .map(|id| id.index)
        };
        r.acquire(first, now);
        r.release(first, Outcome::Failed, now);
        r.move_on(first, now);
        assert_eq!(rpick(now + 1), Some(1));
        assert_eq!(rpick(now + 20_000), Some(0));
        assert_eq!(r.chosen_index(), 0);
    }
}
