//! Reading a zone without blocking: the publication counter a worker
//! checks per request, snapshots of an upstream's peer list taken through
//! its seqlock (retried while a writer is at work), the resolver's records
//! per `server` line, the lease and the usage figures.

use std::mem::{offset_of, size_of};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::*};

use super::{Usage, Zone};
use crate::conf::model::{PeerAddr, Upstream};
use crate::shm::Ref;
use crate::shm::records::{BACKUP, DOWN, LOOKUP_ENDS, PeerSlot, ServerRec, UpstreamRec};
use crate::upstream::peers::{Choice, Live, Peer, PeerLive, Peers};

impl Zone {
    /// The upstream's publication counter: one atomic load, what a worker
    /// checks per request to know its snapshot is current.
    pub fn seq(&self, u: usize) -> u64 {
        self.rec(u).map(|r| r.seq.current()).unwrap_or(0)
    }

    pub fn usage(&self) -> Usage {
        let h = self.header().ok();
        let in_use = h.map(|h| h.in_use.load(Relaxed)).unwrap_or(0);
        let size = self.region.len() as u64;
        Usage {
            size,
            used: (self.slots_off + in_use as usize * size_of::<PeerSlot>()) as u64,
            slots: self.slots as u32,
            in_use,
            generation: h.map(|h| h.generation.load(Relaxed)).unwrap_or(0),
        }
    }

    /// Reads the upstream's published peers into a snapshot, or None while a
    /// write is in progress (the caller keeps the one it has).
    pub fn snapshot(&self, u: usize, cfg: &Upstream) -> Option<Peers> {
        let rec = self.rec(u).ok()?;
        for _ in 0..16 {
            let Some(start) = rec.seq.read_begin() else {
                std::hint::spin_loop();
                continue;
            };
            let which = rec.active.load(Relaxed) as usize & 1;
            let n = (rec.count[which].load(Relaxed) as usize).min(self.slots);
            let config = rec.config.load(Relaxed);
            let list = self.list(u, which).ok()?;
            let peers: Vec<Peer> = list[..n]
                .iter()
                .filter_map(|i| self.read_peer(i.load(Relaxed) as usize, cfg))
                .collect();
            if rec.seq.read_valid(start) && peers.len() == n {
                let mut p = Peers::assemble(cfg, peers, config);
                if let Ok(c) = Ref::<AtomicU64>::new(
                    &self.region,
                    self.ups_off + u * size_of::<UpstreamRec>() + offset_of!(UpstreamRec, choice),
                ) {
                    p.choice = Choice::Zone(c);
                }
                return Some(p);
            }
        }
        None
    }

    fn read_peer(&self, i: usize, cfg: &Upstream) -> Option<Peer> {
        let s = self.slot(i).ok()?;
        let server = s.server.load(Relaxed) as usize;
        let line = cfg.servers.get(server)?;
        let port = s.port.load(Relaxed) as u16;
        let mut b = [0u8; 16];
        for (d, a) in b.iter_mut().zip(&s.addr) {
            *d = a.load(Relaxed);
        }
        let addr = match s.family.load(Relaxed) {
            4 => PeerAddr::Inet(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
                port,
            )),
            6 => PeerAddr::Inet(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(b)), port)),
            1 => line
                .addrs
                .iter()
                .find(|a| matches!(a, PeerAddr::Unix(_)))?
                .clone(),
            _ => return None,
        };
        let flags = s.flags.load(Relaxed);
        let live =
            Ref::<PeerLive>::new(&self.region, self.slot_off(i) + offset_of!(PeerSlot, live))
                .ok()?;
        let mut p = Peer::from_server(server, line, &addr, Live::Zone(live));
        p.key = (u64::from(s.born.load(Relaxed)) << 32) | (i as u64 + 1);
        p.weight = i64::from(s.weight.load(Relaxed));
        p.max_fails = s.max_fails.load(Relaxed);
        p.fail_timeout = u64::from(s.fail_timeout_ms.load(Relaxed));
        p.max_conns = s.max_conns.load(Relaxed);
        p.backup = flags & BACKUP != 0;
        p.down = flags & DOWN != 0;
        Some(p)
    }

    /// The zone's publication counter.
    pub fn version(&self) -> u64 {
        self.header().map(|h| h.version.load(Acquire)).unwrap_or(0)
    }

    /// The health-check lease of this zone.
    pub fn hc_lease(&self) -> Option<&crate::shm::Lease> {
        self.header().ok().map(|h| &h.hc_lease)
    }

    /// The resolver lease of this zone.
    pub fn lease(&self) -> Option<&crate::shm::Lease> {
        self.header().ok().map(|h| &h.lease)
    }

    /// (expires, answered, last error) of server line `k` of upstream `u`.
    pub fn resolved(&self, u: usize, k: usize) -> (u64, u64, u16) {
        self.server_of(u, k)
            .map(|s| {
                (
                    s.expires.load(Relaxed),
                    s.answered.load(Relaxed),
                    s.last_error.load(Acquire) as u16,
                )
            })
            .unwrap_or_default()
    }

    /// Server line `k`'s lookups so far and how they ended (indexed by
    /// `LookupEnd`).
    pub fn lookups(&self, u: usize, k: usize) -> (u64, [u64; LOOKUP_ENDS]) {
        self.server_of(u, k)
            .map(|s| {
                (
                    s.lookups.load(Relaxed),
                    std::array::from_fn(|e| s.ends[e].load(Relaxed)),
                )
            })
            .unwrap_or_default()
    }

    pub(super) fn server_of(&self, u: usize, k: usize) -> Option<&ServerRec> {
        let rec = self.rec(u).ok()?;
        if k >= rec.servers.load(Relaxed) as usize {
            return None;
        }
        self.server(rec.first_server.load(Relaxed) as usize + k)
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::test_util::{names, up};
    use super::*;
    use crate::upstream::peer_list::NewPeer;

    #[test]
    fn static_peers_published_and_shared() {
        let cfg = up(&["127.0.0.1:1", "[::1]:2"]);
        let z = Zone::heap("z", 64 * 1024, &[&cfg], 2).expect("zone");
        let r = z
            .publish(0, 1, &NewPeer::from_config(&cfg))
            .expect("publish");
        assert_eq!((r.added, r.refused), (2, 0));
        let a = z.snapshot(0, &cfg).expect("snapshot");
        let b = z.snapshot(0, &cfg).expect("snapshot");
        assert_eq!(names(&a), ["127.0.0.1:1", "[::1]:2"]);
        // Two snapshots (two workers) see one live state.
        a.primary[0].live.fails.store(3, Relaxed);
        assert_eq!(b.primary[0].fails(), 3);
        assert_eq!(z.upstream("u"), Some(0));
        assert!(z.usage().used > 0);
    }

    /// One thread republishes one of two lists over and over; readers
    /// taking snapshots always see one list or the other, whole.
    #[test]
    fn snapshots_are_never_torn() {
        let a = up(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let b = up(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let mut pa = NewPeer::from_config(&a);
        pa.truncate(2);
        let pb: Vec<NewPeer> = NewPeer::from_config(&b).into_iter().rev().collect();
        let z = Arc::new(Zone::heap("z", 64 * 1024, &[&a], 1).expect("zone"));
        z.publish(0, 1, &pa).expect("publish");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (z, stop) = (z.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(Relaxed) {
                    let list = if n.is_multiple_of(2) { &pb } else { &pa };
                    z.publish(0, 1, list).expect("publish");
                    n += 1;
                }
                n
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (z, a) = (z.clone(), a.clone());
                std::thread::spawn(move || {
                    let mut seen = 0;
                    while seen < 3000 {
                        let Some(s) = z.snapshot(0, &a) else { continue };
                        let got = names(&s);
                        assert!(
                            got == ["127.0.0.1:1", "127.0.0.1:2"]
                                || got == ["127.0.0.1:3", "127.0.0.1:2", "127.0.0.1:1"],
                            "torn: {got:?}"
                        );
                        seen += 1;
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().expect("reader");
        }
        stop.store(true, Relaxed);
        assert!(writer.join().expect("writer") > 0);
    }
}
