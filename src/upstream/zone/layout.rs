//! Where each record of a zone lies, and the records a new zone starts
//! with: the header, the acknowledgement entries, one record per upstream
//! and per `server` line (what another binary needs to read the zone without
//! its configuration), the two peer lists per upstream and the peer slots.
//! A zone made by another binary is checked (magic, layout version) and its
//! layout read back from its header.

use std::mem::size_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering::*};
use std::time::Duration;

use super::{LAYOUT, MAGIC, Zone, ZoneError};
use crate::conf::model::Upstream;
use crate::shm::records::{Ack, BACKUP, DOWN, Header, PeerSlot, RESOLVE, ServerRec, UpstreamRec};
use crate::shm::{Region, ShmError};

/// Bytes a zone needs besides its peers, and per peer.
pub(super) const HEADER: usize = 128;
pub(super) fn fixed(upstreams: usize, servers: usize, workers: usize) -> usize {
    HEADER
        + workers * size_of::<Ack>()
        + upstreams * size_of::<UpstreamRec>()
        + servers * size_of::<ServerRec>()
}
pub(super) fn per_peer(upstreams: usize) -> usize {
    size_of::<PeerSlot>() + 2 * 4 * upstreams
}

/// The size a zone needs for `peers` peers.
pub fn size_needed(peers: usize, upstreams: usize, servers: usize, workers: usize) -> u64 {
    let bytes = fixed(upstreams, servers, workers) + peers * per_peer(upstreams) + 8;
    (bytes as u64).div_ceil(4096) * 4096
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
                    let (h, p) = crate::upstream::balancer::split_server(&line.text);
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
            ping: None,
            zone: Some(self.name.clone()),
            resolver: None,
            state: None,
            implicit: false,
            health: None,
            queue: None,
            sticky: None,
            src: crate::conf::Src {
                file: None,
                line: 0,
            },
        })
    }

    pub(super) fn header(&self) -> Result<&Header, ShmError> {
        self.region.get::<Header>(0)
    }

    pub(super) fn rec(&self, u: usize) -> Result<&UpstreamRec, ShmError> {
        if u >= self.upstreams.len() {
            return Err(ShmError::OutOfBounds {
                offset: u,
                size: size_of::<UpstreamRec>(),
                len: self.upstreams.len(),
            });
        }
        self.region
            .get::<UpstreamRec>(self.ups_off + u * size_of::<UpstreamRec>())
    }

    pub(super) fn server(&self, i: usize) -> Result<&ServerRec, ShmError> {
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

    pub(super) fn ack_entry(&self, worker: usize) -> Result<&Ack, ShmError> {
        self.region
            .get::<Ack>(self.acks_off + worker * size_of::<Ack>())
    }

    pub(super) fn list(&self, u: usize, which: usize) -> Result<&[AtomicU32], ShmError> {
        self.region.slice::<AtomicU32>(
            self.lists_off + (2 * u + which) * self.slots * 4,
            self.slots,
        )
    }

    pub(super) fn slot_off(&self, i: usize) -> usize {
        self.slots_off + i * size_of::<PeerSlot>()
    }

    pub(super) fn slot(&self, i: usize) -> Result<&PeerSlot, ShmError> {
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

    /// Bytes one more peer takes in this zone.
    pub fn bytes_per_peer(&self) -> usize {
        per_peer(self.upstreams.len())
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

/// A duration as the u32 milliseconds a record keeps (capped).
pub(super) fn ms32(d: Duration) -> u32 {
    d.as_millis().min(u128::from(u32::MAX)) as u32
}

pub(super) fn flags(backup: bool, down: bool) -> u32 {
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

#[cfg(test)]
mod tests {
    use super::super::test_util::up;
    use super::*;
    use crate::upstream::peer_list::NewPeer;

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
}
