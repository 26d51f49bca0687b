//! An upstream zone (`zone NAME [SIZE]`): the peers of one or more upstreams
//! and their live state in one shared region, laid out as `#[repr(C)]`
//! records of atomics linked by `u32` index. The master builds it before
//! forking; workers read peer lists through a per-upstream seqlock into
//! snapshots and update the live state in place. Peer lists change only
//! under the zone's pid-owned writer lock ([`Zone::publish`]); a removed
//! peer's slot is reused only after every live worker has acknowledged a
//! publication that no longer lists it ([`Zone::ack`]). The master repairs
//! the zone when it reaps a worker that died abnormally ([`Zone::repair`]).
//! No I/O besides creating the region.

use std::mem::{offset_of, size_of};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering::*};
use std::time::Duration;

use super::peer_list::{NewPeer, Resolved, peer_list};
use super::peers::{Choice, Live, Peer, PeerLive, Peers};
use crate::conf::model::{PeerAddr, Upstream, UpstreamBlocks, ZoneSpec, zone_upstream};
use crate::shm::records::{Ack, BACKUP, DOWN, Header, PeerSlot, RESOLVE, ServerRec, UpstreamRec};
use crate::shm::{Ref, Region, ShmError};

pub use crate::shm::records::{LAYOUT, MAGIC};

/// Bytes a zone needs besides its peers, and per peer.
const HEADER: usize = 128;
fn fixed(upstreams: usize, servers: usize, workers: usize) -> usize {
    HEADER
        + workers * size_of::<Ack>()
        + upstreams * size_of::<UpstreamRec>()
        + servers * size_of::<ServerRec>()
}
fn per_peer(upstreams: usize) -> usize {
    size_of::<PeerSlot>() + 2 * 4 * upstreams
}

/// The size a zone needs for `peers` peers.
pub fn size_needed(peers: usize, upstreams: usize, servers: usize, workers: usize) -> u64 {
    let bytes = fixed(upstreams, servers, workers) + peers * per_peer(upstreams) + 8;
    (bytes as u64).div_ceil(4096) * 4096
}

#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("{0}")]
    Shm(#[from] ShmError),
    #[error("could not create shared memory zone \"{zone}\" of {size} bytes: {source} in {at}")]
    Create {
        zone: String,
        size: u64,
        source: ShmError,
        at: crate::conf::Src,
    },
    #[error(
        "zone \"{zone}\" of {size} bytes is too small for its upstreams: {needed} bytes needed"
    )]
    TooSmall {
        zone: String,
        size: u64,
        needed: u64,
    },
    #[error("zone \"{zone}\" is busy: its writer lock is held by process {pid}")]
    Busy { zone: String, pid: u32 },
    #[error("zone \"{zone}\" was made by another layout ({found}, this binary uses {LAYOUT})")]
    Layout { zone: String, found: u32 },
}

/// What a publication did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub kept: usize,
    pub added: usize,
    pub removed: usize,
    /// Peers that did not fit; `needed` is the zone size that would hold all.
    pub refused: usize,
    pub needed: u64,
}

/// Usage figures for the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub size: u64,
    pub used: u64,
    pub slots: u32,
    pub in_use: u32,
    pub generation: u64,
}

pub struct Zone {
    pub name: String,
    region: Arc<Region>,
    upstreams: Vec<String>,
    servers: usize,
    slots: usize,
    acks_off: usize,
    ups_off: usize,
    servers_off: usize,
    lists_off: usize,
    slots_off: usize,
}

impl Zone {
    /// Lays out a zone of `size` bytes for these upstreams (by name) and
    /// `workers` acknowledgement entries, in a new memfd.
    pub fn create(
        name: &str,
        size: u64,
        generation: u64,
        upstreams: &[&Upstream],
        workers: usize,
    ) -> Result<Zone, ZoneError> {
        let len = usize::try_from(size).map_err(|_| ShmError::Size(nix::Error::EFBIG))?;
        let region = Region::create(name, len)?;
        Zone::init(name, Arc::new(region), generation, upstreams, workers)
    }

    /// The same layout over process-private memory (tests).
    pub fn heap(
        name: &str,
        size: u64,
        upstreams: &[&Upstream],
        workers: usize,
    ) -> Result<Zone, ZoneError> {
        Zone::init(
            name,
            Arc::new(Region::heap(size as usize)),
            1,
            upstreams,
            workers,
        )
    }

    fn init(
        name: &str,
        region: Arc<Region>,
        generation: u64,
        upstreams: &[&Upstream],
        workers: usize,
    ) -> Result<Zone, ZoneError> {
        let size = region.len();
        let (u, w) = (upstreams.len(), workers.max(1));
        let servers: usize = upstreams.iter().map(|u| u.servers.len()).sum();
        let room = size.saturating_sub(fixed(u, servers, w) + 8);
        let slots = (room / per_peer(u)).min(u32::MAX as usize - 1);
        if slots == 0 {
            let peers: usize = upstreams
                .iter()
                .flat_map(|u| u.servers.iter())
                .map(|s| s.addrs.len().max(1))
                .sum();
            return Err(ZoneError::TooSmall {
                zone: name.into(),
                size: size as u64,
                needed: size_needed(peers, u, servers, w),
            });
        }
        let names = upstreams.iter().map(|u| u.name.clone()).collect();
        let zone = Zone::laid_out(name, region, names, servers, slots, w);
        let h = zone.header()?;
        h.layout.store(LAYOUT, Relaxed);
        h.creator.store(std::process::id(), Relaxed);
        h.size.store(size as u64, Relaxed);
        h.generation.store(generation, Relaxed);
        h.upstreams.store(u as u32, Relaxed);
        h.workers.store(w as u32, Relaxed);
        h.slots.store(slots as u32, Relaxed);
        // No slot is linked: `alloc` takes never-used slots in order, so a
        // big zone costs memory only for the pages its peers use (a new
        // memfd reads as zeros without being written).
        h.free.store(0, Relaxed);
        h.unlinked.store(slots as u32, Relaxed);
        let mut first = 0;
        for (i, up) in upstreams.iter().enumerate() {
            let rec = zone.rec(i)?;
            rec.name_len
                .store(put_text(&rec.name, &up.name) as u32, Relaxed);
            rec.servers.store(up.servers.len() as u32, Relaxed);
            rec.first_server.store(first as u32, Relaxed);
            for (k, line) in up.servers.iter().enumerate() {
                let s = zone.server(first + k)?;
                let (host, port) = if line.resolve {
                    (line.host.as_str(), u32::from(line.port))
                } else {
                    let (h, p) = super::balancer::split_server(&line.text);
                    (h, p.parse().unwrap_or(0))
                };
                s.host_len.store(put_text(&s.host, host) as u32, Relaxed);
                s.port.store(port, Relaxed);
                let service = line.service.as_deref().unwrap_or("");
                s.service_len
                    .store(put_text(&s.service, service) as u32, Relaxed);
                s.weight.store(line.weight, Relaxed);
                s.max_fails.store(line.max_fails, Relaxed);
                s.fail_timeout_ms.store(ms32(line.fail_timeout), Relaxed);
                s.max_conns.store(line.max_conns, Relaxed);
                s.flags.store(
                    flags(line.backup, line.down) | (u32::from(line.resolve) * RESOLVE),
                    Relaxed,
                );
            }
            first += up.servers.len();
        }
        h.magic.store(MAGIC, Release);
        Ok(zone)
    }

    /// A zone another binary made, from its memfd (a binary upgrade): the
    /// header is checked (magic, layout) and the layout read back from it.
    pub fn attach(name: &str, fd: std::os::fd::OwnedFd) -> Result<Zone, ZoneError> {
        let region = Arc::new(Region::from_fd(fd)?);
        let h = region.get::<Header>(0)?;
        let found = h.layout.load(Acquire);
        if h.magic.load(Acquire) != MAGIC || found != LAYOUT {
            return Err(ZoneError::Layout {
                zone: name.into(),
                found,
            });
        }
        let u = h.upstreams.load(Acquire) as usize;
        let w = h.workers.load(Acquire) as usize;
        let slots = h.slots.load(Acquire) as usize;
        let ups_off = HEADER + w * size_of::<Ack>();
        let mut servers = 0;
        let mut names = Vec::with_capacity(u);
        for k in 0..u {
            let rec = region.get::<UpstreamRec>(ups_off + k * size_of::<UpstreamRec>())?;
            servers += rec.servers.load(Acquire) as usize;
            names.push(get_text(&rec.name, rec.name_len.load(Acquire)));
        }
        let zone = Zone::laid_out(name, region, names, servers, slots, w);
        zone.region
            .check_span(zone.slots_off, slots * size_of::<PeerSlot>())?;
        Ok(zone)
    }

    /// Where each part of a zone lies, from what it holds.
    fn laid_out(
        name: &str,
        region: Arc<Region>,
        upstreams: Vec<String>,
        servers: usize,
        slots: usize,
        workers: usize,
    ) -> Zone {
        let acks_off = HEADER;
        let ups_off = acks_off + workers * size_of::<Ack>();
        let servers_off = ups_off + upstreams.len() * size_of::<UpstreamRec>();
        let lists_off = servers_off + servers * size_of::<ServerRec>();
        let slots_off = (lists_off + 2 * 4 * upstreams.len() * slots).next_multiple_of(8);
        Zone {
            name: name.into(),
            region,
            upstreams,
            servers,
            slots,
            acks_off,
            ups_off,
            servers_off,
            lists_off,
            slots_off,
        }
    }

    /// The upstream as the zone records it (its `server` lines: host, port,
    /// service, parameters, `resolve`), for reading a zone another binary
    /// made without its configuration.
    pub fn upstream_config(&self, u: usize) -> Option<Upstream> {
        let rec = self.rec(u).ok()?;
        let first = rec.first_server.load(Relaxed) as usize;
        let mut servers = Vec::new();
        for k in 0..rec.servers.load(Relaxed) as usize {
            let s = self.server(first + k).ok()?;
            let host = get_text(&s.host, s.host_len.load(Relaxed));
            let port = s.port.load(Relaxed) as u16;
            let service = get_text(&s.service, s.service_len.load(Relaxed));
            let flags = s.flags.load(Relaxed);
            let mut line =
                crate::conf::model::UpstreamServer::new(format!("{host}:{port}"), Vec::new());
            line.host = host;
            line.port = port;
            line.service = (!service.is_empty()).then_some(service);
            line.resolve = flags & RESOLVE != 0;
            line.backup = flags & BACKUP != 0;
            line.down = flags & DOWN != 0;
            line.weight = s.weight.load(Relaxed);
            line.max_fails = s.max_fails.load(Relaxed);
            line.fail_timeout = Duration::from_millis(u64::from(s.fail_timeout_ms.load(Relaxed)));
            line.max_conns = s.max_conns.load(Relaxed);
            servers.push(line);
        }
        Some(Upstream {
            name: self.upstreams.get(u)?.clone(),
            servers,
            balancer: crate::conf::model::Balancer::RoundRobin,
            keepalive: crate::conf::model::Keepalive::off(),
            zone: Some(self.name.clone()),
            resolver: None,
            state: None,
            implicit: false,
            src: crate::conf::Src {
                file: None,
                line: 0,
            },
        })
    }

    fn header(&self) -> Result<&Header, ShmError> {
        self.region.get::<Header>(0)
    }

    fn rec(&self, u: usize) -> Result<&UpstreamRec, ShmError> {
        self.region
            .get::<UpstreamRec>(self.ups_off + u * size_of::<UpstreamRec>())
    }

    fn server(&self, i: usize) -> Result<&ServerRec, ShmError> {
        if i >= self.servers {
            return Err(ShmError::OutOfBounds {
                offset: i,
                size: size_of::<ServerRec>(),
                len: self.servers,
            });
        }
        self.region
            .get::<ServerRec>(self.servers_off + i * size_of::<ServerRec>())
    }

    /// The `server` lines of upstream `u` as the zone records them: host,
    /// port and `service=` (for a later generation or binary to match).
    pub fn servers(&self, u: usize) -> Vec<(String, u16, String)> {
        let Ok(rec) = self.rec(u) else {
            return Vec::new();
        };
        let first = rec.first_server.load(Relaxed) as usize;
        (0..rec.servers.load(Relaxed) as usize)
            .filter_map(|k| self.server(first + k).ok())
            .map(|s| {
                (
                    get_text(&s.host, s.host_len.load(Relaxed)),
                    s.port.load(Relaxed) as u16,
                    get_text(&s.service, s.service_len.load(Relaxed)),
                )
            })
            .collect()
    }

    fn ack_entry(&self, worker: usize) -> Result<&Ack, ShmError> {
        self.region
            .get::<Ack>(self.acks_off + worker * size_of::<Ack>())
    }

    fn list(&self, u: usize, which: usize) -> Result<&[AtomicU32], ShmError> {
        self.region.slice::<AtomicU32>(
            self.lists_off + (2 * u + which) * self.slots * 4,
            self.slots,
        )
    }

    fn slot_off(&self, i: usize) -> usize {
        self.slots_off + i * size_of::<PeerSlot>()
    }

    fn slot(&self, i: usize) -> Result<&PeerSlot, ShmError> {
        self.region.get::<PeerSlot>(self.slot_off(i))
    }

    /// The index of upstream `name` in this zone.
    pub fn upstream(&self, name: &str) -> Option<usize> {
        self.upstreams.iter().position(|n| n == name)
    }

    pub fn upstream_names(&self) -> &[String] {
        &self.upstreams
    }

    /// The memfd, for a binary upgrade.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.region.fd()
    }

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

    /// Bytes one more peer takes in this zone.
    pub fn bytes_per_peer(&self) -> usize {
        per_peer(self.upstreams.len())
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

    /// Publishes `peers` as upstream `u`'s list: peers already listed with
    /// the same address and `server` line keep their slot and live state,
    /// the others are retired, new ones take free slots. Peers that find no
    /// slot are refused (reported with the size that would hold them all).
    pub fn publish(&self, u: usize, pid: u32, peers: &[NewPeer]) -> Result<Published, ZoneError> {
        let h = self.header()?;
        let rec = self.rec(u)?;
        let guard = h
            .writer
            .lock(pid, Duration::from_secs(1))
            .ok_or_else(|| ZoneError::Busy {
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

    /// The zone's publication counter.
    pub fn version(&self) -> u64 {
        self.header().map(|h| h.version.load(Acquire)).unwrap_or(0)
    }

    /// The resolver lease of this zone.
    pub fn lease(&self) -> Option<&crate::shm::Lease> {
        self.header().ok().map(|h| &h.lease)
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

    fn server_of(&self, u: usize, k: usize) -> Option<&ServerRec> {
        let rec = self.rec(u).ok()?;
        if k >= rec.servers.load(Relaxed) as usize {
            return None;
        }
        self.server(rec.first_server.load(Relaxed) as usize + k)
            .ok()
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

    /// Checks a zone another binary made (a binary upgrade).
    pub fn check_layout(&self) -> Result<(), ZoneError> {
        let h = self.header()?;
        let found = h.layout.load(Acquire);
        if h.magic.load(Acquire) != MAGIC || found != LAYOUT {
            return Err(ZoneError::Layout {
                zone: self.name.clone(),
                found,
            });
        }
        Ok(())
    }
}

/// A generation's zones by name.
pub type Zones = std::collections::HashMap<String, Arc<Zone>>;

/// Builds the zones the upstream blocks name (in the master, before
/// forking) and publishes each zone upstream's configured peers. Peers a
/// zone has no room for are refused with an `[error]` that says the size
/// needed.
pub fn create_all(
    blocks: &[&UpstreamBlocks],
    generation: u64,
    workers: usize,
) -> Result<Zones, ZoneError> {
    let mut zones = Zones::new();
    for (b, spec) in blocks
        .iter()
        .flat_map(|b| b.zones.iter().map(move |z| (b, z)))
    {
        let ups: Vec<&Upstream> = b.of_zone(spec).map(|u| u.as_ref()).collect();
        let size = spec.size.unwrap_or(ZoneSpec::MIN_SIZE);
        let zone =
            Zone::create(&spec.name, size, generation, &ups, workers).map_err(|e| match e {
                ZoneError::Shm(source) => ZoneError::Create {
                    zone: spec.name.clone(),
                    size,
                    source,
                    at: spec.src.clone(),
                },
                other => other,
            })?;
        for (i, u) in ups.iter().enumerate() {
            let name = &u.name;
            let r = zone.publish(i, std::process::id(), &NewPeer::from_config(u))?;
            if r.refused > 0 {
                crate::log!(
                    crate::log::Level::Error,
                    "zone \"{}\" is too small for the peers of upstream \"{}\": {} of them not added, {} bytes needed",
                    spec.name,
                    name,
                    r.refused,
                    r.needed
                );
            }
        }
        zones.insert(spec.name.clone(), Arc::new(zone));
    }
    Ok(zones)
}

/// Reload (nginx's preresolve): for each zone upstream of the new
/// configuration whose old counterpart has the same zone and upstream name,
/// every `resolve` line starts with the peers the old line with the same
/// host and `service=` has now (address from the old peer; port and
/// parameters from the new line, except an SRV peer's port and weight), and
/// with the old answer's expiry, so the first lookup comes when it expires.
/// Returns the (zone, upstream) names it carried peers for.
pub fn preresolve(
    new: &Zones,
    nb: &[&UpstreamBlocks],
    old: &Zones,
    ob: &[&UpstreamBlocks],
) -> Vec<(String, String)> {
    let mut carried = Vec::new();
    for (name, z) in new {
        let Some(oz) = old.get(name) else { continue };
        for (i, up_name) in z.upstream_names().iter().enumerate() {
            let Some(nu) = zone_upstream(nb, name, up_name) else {
                continue;
            };
            if !nu.servers.iter().any(|s| s.resolve) {
                continue;
            }
            let (Some(j), Some(ou)) = (oz.upstream(up_name), zone_upstream(ob, name, up_name))
            else {
                continue;
            };
            let Some(current) = oz.snapshot(j, ou) else {
                continue;
            };
            // A resolve line's counterpart: the old line with its host and
            // service.
            let old_line = |line: &crate::conf::model::UpstreamServer| {
                ou.servers
                    .iter()
                    .position(|o| o.resolve && o.host == line.host && o.service == line.service)
            };
            let list = peer_list(nu, |_, line| {
                old_line(line)
                    .map(|ok| Resolved::of_line(&current, ok))
                    .unwrap_or_default()
            });
            for (k, line) in nu.servers.iter().enumerate() {
                let Some(ok) = old_line(line).filter(|_| line.resolve) else {
                    continue;
                };
                // No later than the new resolver could make it.
                let (expires, answered, error) = oz.resolved(j, ok);
                let valid = nu.resolver.as_ref().and_then(|r| r.valid);
                let expires = super::dns::clamp_expiry(expires, super::peers::now_ms(), valid);
                z.set_resolved(i, k, expires, answered, error);
            }
            if let Err(e) = z.publish(i, std::process::id(), &list) {
                crate::log!(crate::log::Level::Error, "{}", e);
            }
            carried.push((name.clone(), up_name.clone()));
        }
    }
    carry_choices(new, nb, old, ob);
    carried
}

/// `pick_first` across a reload or an upgrade: a new zone upstream whose
/// old counterpart had chosen a peer that is still listed keeps that choice
/// (else it starts from the first server again).
fn carry_choices(new: &Zones, nb: &[&UpstreamBlocks], old: &Zones, ob: &[&UpstreamBlocks]) {
    for (name, z) in new {
        let Some(oz) = old.get(name) else { continue };
        for (i, up_name) in z.upstream_names().iter().enumerate() {
            let (Some(nu), Some(ou), Some(j)) = (
                zone_upstream(nb, name, up_name),
                zone_upstream(ob, name, up_name),
                oz.upstream(up_name),
            ) else {
                continue;
            };
            if !nu.balancer.is_pick_first() {
                continue;
            }
            let (Some(before), Some(now)) = (oz.snapshot(j, ou), z.snapshot(i, nu)) else {
                continue;
            };
            let key = before.choice.load(Relaxed);
            let Some(was) = before.primary.iter().find(|p| p.key == key) else {
                continue;
            };
            if let Some(p) = now.primary.iter().find(|p| p.addr == was.addr) {
                now.choice.store(p.key, Relaxed);
            }
        }
    }
}

/// A duration as the u32 milliseconds a record keeps (capped).
fn ms32(d: Duration) -> u32 {
    d.as_millis().min(u128::from(u32::MAX)) as u32
}

fn flags(backup: bool, down: bool) -> u32 {
    (u32::from(backup) * BACKUP) | (u32::from(down) * DOWN)
}

/// Writes text into a fixed byte field (cut at its size); returns the length kept.
fn put_text(field: &[AtomicU8], text: &str) -> usize {
    let len = text.len().min(field.len());
    for (d, b) in field.iter().zip(&text.as_bytes()[..len]) {
        d.store(*b, Relaxed);
    }
    len
}

fn get_text(field: &[AtomicU8], len: u32) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take(len as usize)
        .map(|b| b.load(Relaxed))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
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
    l.open.store(0, Relaxed);
    l.idle.store(0, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::model::Balancer;
    use crate::upstream::peers::test_upstream;

    fn up(addrs: &[&str]) -> Upstream {
        let servers: Vec<(&str, u32, bool)> = addrs.iter().map(|a| (*a, 1, false)).collect();
        test_upstream(&servers, Balancer::RoundRobin)
    }

    fn names(p: &Peers) -> Vec<String> {
        p.primary.iter().map(|p| p.name.to_string()).collect()
    }

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

    /// A binary upgrade: the new binary maps the old zone from its memfd and
    /// reads it back; a zone of another layout is refused.
    #[test]
    fn attach_reads_back_or_refuses_another_layout() {
        let mut cfg = up(&["127.0.0.1:1"]);
        cfg.servers[0].resolve = true;
        cfg.servers[0].host = "app.test".into();
        cfg.servers[0].port = 8080;
        let z = Zone::create("up", 64 * 1024, 1, &[&cfg], 2).expect("zone");
        z.publish(0, 1, &NewPeer::from_config(&cfg))
            .expect("publish");
        let dup = || z.fd().expect("memfd").try_clone_to_owned().expect("dup");
        let back = Zone::attach("up", dup()).expect("attach");
        assert_eq!(back.upstream_names(), ["u"]);
        let synth = back.upstream_config(0).expect("config");
        assert!(synth.servers[0].resolve);
        assert_eq!(synth.servers[0].host, "app.test");
        assert_eq!(back.snapshot(0, &cfg).expect("snapshot").count(), 1);
        z.header()
            .expect("header")
            .layout
            .store(LAYOUT + 1, Relaxed);
        assert!(matches!(
            Zone::attach("up", dup()),
            Err(ZoneError::Layout { found, .. }) if found == LAYOUT + 1
        ));
    }

    #[test]
    fn server_lines_are_recorded() {
        let cfg = up(&["127.0.0.1:1", "[::1]:8080", "unix:/tmp/x.sock"]);
        let z = Zone::heap("z", 64 * 1024, &[&cfg], 1).expect("zone");
        assert_eq!(
            z.servers(0),
            [
                ("127.0.0.1".to_string(), 1, String::new()),
                ("[::1]".to_string(), 8080, String::new()),
                ("/tmp/x.sock".to_string(), 0, String::new()),
            ]
        );
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
                    let list = if n % 2 == 0 { &pb } else { &pa };
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
