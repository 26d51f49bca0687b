//! The state file (`state FILE;`): a zone upstream's resolved peers, kept for
//! a cold start. The lease holder rewrites it (temp file + rename) after each
//! change of resolved peers; the master reads it at start, or at a reload
//! that has no old zone to copy from, and seeds the peers with their expiry
//! (an expired entry is still used, and looked up again at once). One peer
//! per line:
//!
//! ```text
//! # sluice state: HOST SERVICE ADDRESS WEIGHT BACKUP EXPIRES(unix ms)
//! app.example - 10.0.0.1:8080 1 0 1767225600000
//! ```
//!
//! Entries for lines no longer in the configuration are ignored; a corrupt
//! file is an `[error]` and ignored.

use std::net::SocketAddr;
use std::path::Path;

use super::dns::clamp_expiry;
use super::peers::{Peers, now_ms};
use super::zone::{NewPeer, Zone, Zones};
use crate::conf::model::{Http, PeerAddr, Upstream};
use crate::log::Level;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub host: String,
    pub service: Option<String>,
    pub addr: SocketAddr,
    pub weight: u32,
    pub backup: bool,
    /// Unix time in ms.
    pub expires: u64,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The file's text for upstream `u` (index `i` in `zone`) as `peers` has it.
pub fn render(u: &Upstream, zone: &Zone, i: usize, peers: &Peers) -> String {
    let (mono, wall) = (now_ms(), unix_ms());
    let mut out = String::from("# sluice state: HOST SERVICE ADDRESS WEIGHT BACKUP EXPIRES\n");
    for p in peers.primary.iter().chain(peers.backup.iter()) {
        let Some(line) = u.servers.get(p.server).filter(|l| l.resolve) else {
            continue;
        };
        let PeerAddr::Inet(addr) = &p.addr else {
            continue;
        };
        let (expires, _, _) = zone.resolved(i, p.server);
        let expires_wall = (wall + expires).saturating_sub(mono);
        out.push_str(&format!(
            "{} {} {} {} {} {}\n",
            line.host,
            line.service.as_deref().unwrap_or("-"),
            addr,
            p.weight,
            u8::from(p.backup),
            expires_wall
        ));
    }
    out
}

/// Rewrites the state file of upstream `u` (index `i` in `zone`), if it has one.
pub fn save(zone: &Zone, i: usize, u: &Upstream) {
    let Some(path) = &u.state else { return };
    let Some(now) = zone.snapshot(i, u) else {
        return;
    };
    if let Err(e) = write(path, &render(u, zone, i, &now)) {
        crate::log!(
            Level::Error,
            "state file \"{}\" could not be written ({})",
            path.display(),
            crate::conf::tree::errno_text(&e)
        );
    }
}

/// Rewrites every state file of a generation (in the master, when a worker
/// says its resolved peers changed).
pub fn save_all(zones: &Zones, http: Option<&Http>) {
    let Some(http) = http else { return };
    for z in zones.values() {
        for (i, name) in z.upstream_names().iter().enumerate() {
            if let Some(u) = http.upstreams.iter().find(|u| &u.name == name) {
                if u.state.is_some() {
                    save(z, i, u);
                }
            }
        }
    }
}

/// Replaces the file atomically.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The entries, or the number of the first bad line.
pub fn parse(text: &str) -> Result<Vec<Entry>, usize> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = || n + 1;
        if f.len() != 6 {
            return Err(bad());
        }
        out.push(Entry {
            host: f[0].to_string(),
            service: (f[1] != "-").then(|| f[1].to_string()),
            addr: f[2].parse().map_err(|_| bad())?,
            weight: f[3].parse().ok().filter(|w| *w > 0).ok_or_else(bad)?,
            backup: match f[4] {
                "0" => false,
                "1" => true,
                _ => return Err(bad()),
            },
            expires: f[5].parse().map_err(|_| bad())?,
        });
    }
    Ok(out)
}

/// Seeds the zone upstreams that have a state file, except those in `skip`
/// (zone and upstream names: a reload copied them from the old zone).
pub fn seed_all(zones: &Zones, http: Option<&Http>, skip: &[(String, String)]) {
    let Some(http) = http else { return };
    for (zname, z) in zones {
        for (i, name) in z.upstream_names().iter().enumerate() {
            if skip.iter().any(|(a, b)| a == zname && b == name) {
                continue;
            }
            let Some(u) = http.upstreams.iter().find(|u| &u.name == name) else {
                continue;
            };
            let Some(path) = &u.state else { continue };
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    crate::log!(
                        Level::Error,
                        "open() \"{}\" failed ({})",
                        path.display(),
                        crate::conf::tree::errno_text(&e)
                    );
                    continue;
                }
            };
            match parse(&text) {
                Ok(entries) => seed(z, i, u, &entries),
                Err(line) => crate::log!(
                    Level::Error,
                    "invalid state file \"{}\" at line {}, ignored",
                    path.display(),
                    line
                ),
            }
        }
    }
}

/// Publishes the entries that match a `resolve` line (same host and
/// service), with the line's port unless SRV, and their expiry.
fn seed(z: &Zone, i: usize, u: &Upstream, entries: &[Entry]) {
    let (mono, wall) = (now_ms(), unix_ms());
    let mut list = Vec::new();
    for (k, line) in u.servers.iter().enumerate() {
        let base = |addr: PeerAddr| NewPeer::for_line(line, k, addr);
        if !line.resolve {
            list.extend(line.addrs.iter().cloned().map(base));
            continue;
        }
        let mine: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.host == line.host && e.service == line.service)
            .collect();
        if mine.is_empty() {
            continue;
        }
        for e in &mine {
            list.push(if line.service.is_some() {
                NewPeer {
                    weight: e.weight,
                    backup: e.backup,
                    ..base(PeerAddr::Inet(e.addr))
                }
            } else {
                base(PeerAddr::Inet(SocketAddr::new(e.addr.ip(), line.port)))
            });
        }
        // An expired entry is used and looked up again at once; one too far
        // in the future (a TTL of years, an edited file) no later than an
        // answer could be valid.
        let expires = mine.iter().map(|e| e.expires).min().unwrap_or(0);
        let left = expires.saturating_sub(wall);
        let at = if left == 0 {
            mono.saturating_sub(1000)
        } else {
            let valid = u.resolver.as_ref().and_then(|r| r.valid);
            clamp_expiry(mono.saturating_add(left), mono, valid)
        };
        z.set_resolved(i, k, at, mono, 0);
    }
    if let Err(e) = z.publish(i, std::process::id(), &list) {
        crate::log!(Level::Error, "{}", e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_reject() {
        let e = parse("# c\napp.test - 10.0.0.1:80 1 0 123\n_s x.test 10.0.0.2:81 5 1 9\n")
            .expect("valid");
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].service, None);
        assert_eq!(e[1].service.as_deref(), Some("x.test"));
        assert!(e[1].backup && e[1].weight == 5);
        assert_eq!(parse("app.test - nonsense 1 0 1\n"), Err(1));
        assert_eq!(parse("\n\napp.test - 10.0.0.1:80 0 0 1\n"), Err(3));
        assert_eq!(parse("a b c\n"), Err(1));
    }
}
