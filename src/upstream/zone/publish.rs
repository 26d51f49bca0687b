//! Changing a zone, under its pid-owned writer lock: publishing an
//! upstream's new peer list (matching peers keep their slot and live
//! state, new ones take free slots, removed ones are retired), the slot
//! allocator, reclaiming retired slots once every live worker has
//! acknowledged a publication without them, the resolver's records, and
//! the repair after a worker died holding the lock.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::*;
use std::time::Duration;

use super::layout::{flags, ms32, size_needed};
use super::{LookupEnd, Published, Zone, ZoneError};
use crate::conf::model::PeerAddr;
use crate::shm::records::{BACKUP, Header};
use crate::upstream::peer_list::NewPeer;
use crate::upstream::peers::PeerLive;

impl Zone {
    /// Publishes `peers` as upstream `u`'s list: peers already listed with
    /// the same address and `server` line keep their slot and live state,
    /// the others are retired, new ones take free slots. Peers that find no
    /// slot are refused (reported with the size that would hold them all).
    pub fn publish(&self, u: usize, pid: u32, peers: &[NewPeer]) -> Result<Published, ZoneError> {
        self.publish_within(u, pid, peers, Some(Duration::from_secs(1)))
    }

    /// `publish` for a worker: the writer lock is tried once, never waited
    /// for on the worker's runtime; `Busy` means "try again next tick".
    pub fn try_publish(
        &self,
        u: usize,
        pid: u32,
        peers: &[NewPeer],
    ) -> Result<Published, ZoneError> {
        self.publish_within(u, pid, peers, None)
    }

    fn publish_within(
        &self,
        u: usize,
        pid: u32,
        peers: &[NewPeer],
        wait: Option<Duration>,
    ) -> Result<Published, ZoneError> {
        let h = self.header()?;
        let rec = self.rec(u)?;
        let locked = match wait {
            Some(limit) => h.writer.lock(pid, limit),
            None => h.writer.try_take(pid),
        };
        let guard = locked.ok_or_else(|| ZoneError::Busy {
            zone: self.name.clone(),
            pid: h.writer.owner(),
        })?;
        self.reclaim(h);
        let active = rec.active.load(Relaxed) as usize & 1;
        let old_n = (rec.count[active].load(Relaxed) as usize).min(self.slots);
        let old: Vec<usize> = self.list(u, active)?[..old_n]
            .iter()
            .map(|i| i.load(Relaxed) as usize)
            .collect();
        let mut taken = vec![false; old.len()];
        let mut out = Published::default();
        let mut list = Vec::with_capacity(peers.len());
        for p in peers {
            let (family, port, bytes) = encode(&p.addr);
            let found = old.iter().enumerate().position(|(k, &i)| {
                !taken[k]
                    && self.slot(i).is_ok_and(|s| {
                        s.family.load(Relaxed) == family
                            && s.port.load(Relaxed) == port
                            && s.server.load(Relaxed) == p.server
                            && s.weight.load(Relaxed) == p.weight
                            && (s.flags.load(Relaxed) & BACKUP != 0) == p.backup
                            && s.addr
                                .iter()
                                .zip(&bytes)
                                .all(|(a, b)| a.load(Relaxed) == *b)
                    })
            });
            if let Some(k) = found {
                taken[k] = true;
                list.push((old[k], p, false));
                out.kept += 1;
                continue;
            }
            match self.alloc(h) {
                Some(i) => {
                    let s = self.slot(i)?;
                    s.family.store(family, Relaxed);
                    s.port.store(port, Relaxed);
                    for (a, b) in s.addr.iter().zip(&bytes) {
                        a.store(*b, Relaxed);
                    }
                    s.server.store(p.server, Relaxed);
                    s.born
                        .store(h.version.load(Relaxed).wrapping_add(1) as u32, Relaxed);
                    reset(&s.live, i64::from(p.weight));
                    list.push((i, p, true));
                    out.added += 1;
                }
                None => out.refused += 1,
            }
        }
        let version = h.version.fetch_add(1, AcqRel) + 1;
        let inactive = 1 - active;
        let target = self.list(u, inactive)?;
        rec.seq.write(&guard, || {
            for (k, (i, p, _)) in list.iter().enumerate() {
                if let Ok(s) = self.slot(*i) {
                    s.weight.store(p.weight, Relaxed);
                    s.max_fails.store(p.max_fails, Relaxed);
                    s.fail_timeout_ms.store(ms32(p.fail_timeout), Relaxed);
                    s.max_conns.store(p.max_conns, Relaxed);
                    s.flags.store(flags(p.backup, p.down), Relaxed);
                }
                target[k].store(*i as u32, Relaxed);
            }
            rec.count[inactive].store(list.len() as u32, Relaxed);
            rec.active.store(inactive as u32, Relaxed);
            rec.config.store(version, Relaxed);
        });
        for (k, &i) in old.iter().enumerate() {
            if !taken[k] {
                if let Ok(s) = self.slot(i) {
                    s.retired_at.store(version, Relaxed);
                    s.next.store(h.retired.load(Relaxed), Relaxed);
                    h.retired.store(i as u32 + 1, Relaxed);
                }
                out.removed += 1;
            }
        }
        if out.refused > 0 {
            let used = h.in_use.load(Relaxed) as usize;
            out.needed = size_needed(
                used + out.refused,
                self.upstreams.len(),
                self.servers,
                h.workers.load(Relaxed) as usize,
            );
        }
        drop(guard);
        Ok(out)
    }

    /// A free slot, or None when the zone is full.
    fn alloc(&self, h: &Header) -> Option<usize> {
        let head = h.free.load(Relaxed);
        if head == 0 {
            // The next never-used slot, if any.
            let unlinked = (h.unlinked.load(Relaxed) as usize).min(self.slots);
            if unlinked == 0 {
                return None;
            }
            let i = self.slots - unlinked;
            self.slot(i).ok()?;
            h.unlinked.store(unlinked as u32 - 1, Relaxed);
            h.in_use.fetch_add(1, Relaxed);
            return Some(i);
        }
        let i = head as usize - 1;
        let s = self.slot(i).ok()?;
        h.free.store(s.next.load(Relaxed), Relaxed);
        h.in_use.fetch_add(1, Relaxed);
        Some(i)
    }

    /// Moves retired slots that no live worker can still hold to the free
    /// list. Called with the writer lock held.
    fn reclaim(&self, h: &Header) {
        let workers = h.workers.load(Relaxed) as usize;
        let oldest = (0..workers)
            .filter_map(|w| self.ack_entry(w).ok())
            .filter(|a| a.pid.load(Acquire) != 0)
            .map(|a| a.seen.load(Acquire))
            .min()
            .unwrap_or(u64::MAX);
        let mut prev: Option<usize> = None;
        let mut cur = h.retired.load(Relaxed);
        while cur != 0 {
            let i = cur as usize - 1;
            let Ok(s) = self.slot(i) else { break };
            let next = s.next.load(Relaxed);
            if s.retired_at.load(Relaxed) <= oldest {
                match prev {
                    None => h.retired.store(next, Relaxed),
                    Some(p) => {
                        if let Ok(ps) = self.slot(p) {
                            ps.next.store(next, Relaxed);
                        }
                    }
                }
                s.family.store(0, Relaxed);
                s.next.store(h.free.load(Relaxed), Relaxed);
                h.free.store(cur, Relaxed);
                let _ = h
                    .in_use
                    .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
            } else {
                prev = Some(i);
            }
            cur = next;
        }
    }

    /// Worker `worker` (pid `pid`) holds no peers older than publication
    /// `seen` (the zone's version when it holds none).
    pub fn ack(&self, worker: usize, pid: u32, seen: u64) {
        if let Ok(a) = self.ack_entry(worker) {
            a.seen.store(seen, Release);
            a.pid.store(pid, Release);
        }
    }

    /// Records the outcome of resolving server line `k` of upstream `u`:
    /// when the answer expires and came (monotonic ms) and the error code
    /// (0: none).
    pub fn set_resolved(&self, u: usize, k: usize, expires: u64, answered: u64, error: u16) {
        let Some(s) = self.server_of(u, k) else {
            return;
        };
        s.expires.store(expires, Relaxed);
        s.answered.store(answered, Relaxed);
        s.last_error.store(u32::from(error), Release);
    }

    /// Counts a lookup of server line `k` of upstream `u` and how it ended.
    pub fn count_lookup(&self, u: usize, k: usize, end: LookupEnd) {
        let Some(s) = self.server_of(u, k) else {
            return;
        };
        s.lookups.fetch_add(1, Relaxed);
        if let Some(e) = s.ends.get(end as usize) {
            e.fetch_add(1, Relaxed);
        }
    }

    /// Takes over the lookup counters of another zone's server line (a
    /// reload or an upgrade carrying the line).
    pub fn carry_lookups(&self, u: usize, k: usize, from: &Zone, fu: usize, fk: usize) {
        let (Some(to), Some(was)) = (self.server_of(u, k), from.server_of(fu, fk)) else {
            return;
        };
        to.lookups.store(was.lookups.load(Relaxed), Relaxed);
        for (t, w) in to.ends.iter().zip(was.ends.iter()) {
            t.store(w.load(Relaxed), Relaxed);
        }
    }

    /// After worker `worker` (pid `pid`) died abnormally: forget its
    /// acknowledgement and its resolver lease, open the writer lock if it
    /// held it and make every half-written seqlock even. True when the lock
    /// was held (the caller logs it as nginx does).
    pub fn repair(&self, worker: usize, pid: u32) -> bool {
        if let Ok(a) = self.ack_entry(worker) {
            if a.pid.load(Acquire) == pid {
                a.pid.store(0, Release);
            }
        }
        let Ok(h) = self.header() else { return false };
        h.lease.release(pid);
        h.hc_lease.release(pid);
        let held = h.writer.force_unlock(pid);
        if held {
            for u in 0..self.upstreams.len() {
                if let Ok(r) = self.rec(u) {
                    r.seq.repair();
                }
            }
        }
        held
    }
}

fn encode(addr: &PeerAddr) -> (u32, u32, [u8; 16]) {
    let mut b = [0u8; 16];
    match addr {
        PeerAddr::Inet(SocketAddr::V4(a)) => {
            b[..4].copy_from_slice(&a.ip().octets());
            (4, u32::from(a.port()), b)
        }
        PeerAddr::Inet(SocketAddr::V6(a)) => (6, u32::from(a.port()), a.ip().octets()),
        PeerAddr::Unix(_) => (1, 0, b),
    }
}

/// Fresh live state for a slot nobody references.
fn reset(l: &PeerLive, weight: i64) {
    l.conns.store(0, Relaxed);
    l.fails.store(0, Relaxed);
    l.current_weight.store(0, Relaxed);
    l.effective_weight.store(weight, Relaxed);
    for a in [
        &l.accessed,
        &l.checked,
        &l.selected,
        &l.requests,
        &l.sent,
        &l.received,
        &l.downtime,
        &l.down_since,
        &l.created_sum,
        &l.oldest,
        &l.recycled,
    ] {
        a.store(0, Relaxed);
    }
    for r in &l.responses {
        r.store(0, Relaxed);
    }
    l.unavail.store(0, Relaxed);
    l.health.store(0, Relaxed);
    l.admin.store(0, Relaxed);
    let hc = &l.hc;
    for a in [
        &hc.checks,
        &hc.fails,
        &hc.unhealthy,
        &hc.downstart,
        &hc.downtime,
        &hc.recovered,
    ] {
        a.store(0, Relaxed);
    }
    for a in [&hc.fail_run, &hc.pass_run, &hc.last_passed] {
        a.store(0, Relaxed);
    }
    l.open.store(0, Relaxed);
    l.idle.store(0, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::super::layout::{fixed, per_peer};
    use super::super::test_util::{names, up};
    use super::*;

    #[test]
    fn a_worker_does_not_wait_for_a_busy_writer_lock() {
        let cfg = up(&["127.0.0.1:1"]);
        let z = Zone::heap("z", 64 * 1024, &[&cfg], 1).expect("zone");
        let h = z.header().expect("header");
        // Another live process holds the lock (this test's own pid, as a
        // stand-in that the lock will not take for dead).
        let held = h.writer.try_lock(std::process::id()).expect("free");
        let t = std::time::Instant::now();
        let r = z.try_publish(0, 1, &NewPeer::from_config(&cfg));
        assert!(matches!(r, Err(ZoneError::Busy { .. })));
        // The lock waited for 1 s before; now it is tried once.
        assert!(t.elapsed() < Duration::from_millis(500), "no waiting");
        drop(held);
        assert_eq!(
            z.try_publish(0, 1, &NewPeer::from_config(&cfg))
                .expect("free now")
                .added,
            1
        );
    }

    #[test]
    fn duplicate_answers_become_duplicate_peers() {
        let cfg = up(&["127.0.0.1:1"]);
        let z = Zone::heap("z", 64 * 1024, &[&cfg], 1).expect("zone");
        let mut two = NewPeer::from_config(&cfg);
        two.push(two[0].clone());
        let r = z.publish(0, 1, &two).expect("publish");
        assert_eq!(r.added, 2);
        let r = z.publish(0, 1, &two).expect("publish");
        assert_eq!((r.kept, r.added), (2, 0));
        let r = z.publish(0, 1, &two[..1]).expect("publish");
        assert_eq!((r.kept, r.removed), (1, 1));
        assert_eq!(
            names(&z.snapshot(0, &cfg).expect("snapshot")),
            ["127.0.0.1:1"]
        );
    }

    #[test]
    fn republish_keeps_matching_peers_and_their_state() {
        let cfg = up(&["127.0.0.1:1", "127.0.0.1:2"]);
        let z = Zone::heap("z", 64 * 1024, &[&cfg], 1).expect("zone");
        z.publish(0, 1, &NewPeer::from_config(&cfg))
            .expect("publish");
        let s1 = z.seq(0);
        let before = z.snapshot(0, &cfg).expect("snapshot");
        before.primary[1].live.requests.store(5, Relaxed);
        let mut next = NewPeer::from_config(&cfg);
        next.remove(0);
        let r = z.publish(0, 1, &next).expect("publish");
        assert_eq!((r.kept, r.added, r.removed), (1, 0, 1));
        assert_ne!(z.seq(0), s1, "readers see the list moved");
        let after = z.snapshot(0, &cfg).expect("snapshot");
        assert_eq!(names(&after), ["127.0.0.1:2"]);
        assert_eq!(after.primary[0].live.requests.load(Relaxed), 5);
        assert!(after.config > before.config);
    }

    #[test]
    fn full_zone_refuses_extra_peers_and_says_what_is_needed() {
        let base = up(&["127.0.0.1:1"]);
        let z = Zone::heap("small", 2048, &[&base], 1).expect("zone");
        let slots = z.usage().slots as usize;
        let addrs: Vec<String> = (0..slots + 3)
            .map(|i| format!("127.0.0.1:{}", i + 1))
            .collect();
        let refs: Vec<&str> = addrs.iter().map(|s| s.as_str()).collect();
        let cfg = up(&refs);
        let r = z
            .publish(0, 1, &NewPeer::from_config(&cfg))
            .expect("publish");
        assert_eq!((r.added, r.refused), (slots, 3));
        assert!(r.needed > 2048);
        assert_eq!(z.snapshot(0, &cfg).expect("snapshot").count(), slots);
        assert!(Zone::heap("tiny", 100, &[&base], 1).is_err());
    }

    #[test]
    fn new_slots_are_taken_in_order_and_old_linked_zones_still_work() {
        let base = up(&["127.0.0.1:1"]);
        let z = Zone::heap("lazy", 64 * 1024, &[&base], 1).expect("zone");
        let h = z.header().expect("header");
        let slots = z.usage().slots;
        // A new zone links no slot; alloc takes the never-used ones in order.
        assert_eq!((h.free.load(Relaxed), h.unlinked.load(Relaxed)), (0, slots));
        assert_eq!(z.alloc(h), Some(0));
        assert_eq!(z.alloc(h), Some(1));
        assert_eq!(h.unlinked.load(Relaxed), slots - 2);
        // A zone laid out by an older binary: every slot linked, none
        // unlinked (the word was padding, so 0).
        let old = Zone::heap("linked", 64 * 1024, &[&base], 1).expect("zone");
        let h = old.header().expect("header");
        for i in 0..slots as usize {
            let next = if i + 1 < slots as usize {
                i as u32 + 2
            } else {
                0
            };
            old.slot(i).expect("slot").next.store(next, Relaxed);
        }
        h.free.store(1, Relaxed);
        h.unlinked.store(0, Relaxed);
        let all: Vec<usize> = std::iter::from_fn(|| old.alloc(h)).collect();
        assert_eq!(all, (0..slots as usize).collect::<Vec<_>>());
    }

    #[test]
    fn slots_are_reused_only_after_every_worker_acknowledged() {
        let a = up(&["127.0.0.1:1"]);
        let b = up(&["127.0.0.1:2"]);
        // Room for exactly one peer.
        let size = (fixed(1, 1, 2) + per_peer(1) + 8) as u64;
        let z = Zone::heap("z", size, &[&a], 2).expect("zone");
        assert_eq!(z.usage().slots, 1);
        z.publish(0, 1, &NewPeer::from_config(&a)).expect("publish");
        // Both workers hold the first list.
        let held = z.snapshot(0, &a).expect("snapshot");
        let (first, first_key) = (held.config, held.primary[0].key);
        z.ack(0, 100, first);
        z.ack(1, 101, first);
        // Replacing the peer: its slot is retired, not free, so the new one
        // does not fit yet.
        let r = z.publish(0, 1, &NewPeer::from_config(&b)).expect("publish");
        assert_eq!((r.removed, r.refused), (1, 1));
        // One worker moves on; the other still may hold the old peer.
        let now = z.version();
        z.ack(0, 100, now);
        let r = z.publish(0, 1, &NewPeer::from_config(&b)).expect("publish");
        assert_eq!(r.refused, 1);
        // The second worker dies: the master forgets its acknowledgement.
        assert!(!z.repair(1, 101));
        let r = z.publish(0, 1, &NewPeer::from_config(&b)).expect("publish");
        assert_eq!((r.added, r.refused), (1, 0));
        let s = z.snapshot(0, &b).expect("snapshot");
        assert_eq!(names(&s), ["127.0.0.1:2"]);
        assert_eq!(s.primary[0].live.requests.load(Relaxed), 0, "fresh state");
        // The same slot, another peer: another key (pick_first's choice of
        // the old peer does not pass to the new one).
        assert_ne!(s.primary[0].key, first_key);
        assert_eq!(s.primary[0].key & 0xffff_ffff, first_key & 0xffff_ffff);
    }

    #[test]
    fn repair_opens_a_dead_writers_lock() {
        let cfg = up(&["127.0.0.1:1"]);
        let z = Zone::heap("z", 64 * 1024, &[&cfg], 1).expect("zone");
        let h = z.header().expect("header");
        // pid 1 (init) is alive: the lock is not pushed out by a waiter.
        std::mem::forget(h.writer.try_lock(1));
        assert!(matches!(
            z.publish(0, 7, &NewPeer::from_config(&cfg)),
            Err(ZoneError::Busy { pid: 1, .. })
        ));
        assert!(z.repair(0, 1));
        assert!(z.publish(0, 1, &NewPeer::from_config(&cfg)).is_ok());
        assert!(z.check_layout().is_ok());
    }
}
