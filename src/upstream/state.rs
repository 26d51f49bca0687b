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
//! server 10.0.0.2:8080 drain;
//! ```
//!
//! The API's changes (`api write=on`; the file is rewritten after each)
//! follow, one line per peer the API changed, of any `server` line, in
//! nginx's own words: `server ADDRESS down;`, `server ADDRESS drain;` or
//! `server ADDRESS;` (up, although its line says `down`).
//!
//! Entries for lines no longer in the configuration are ignored; each bad
//! line of a corrupt file is an `[error]` and ignored on its own (a name left
//! without entries is resolved as if there were no file).

use std::net::SocketAddr;
use std::path::Path;

use super::admin::Target;
use super::dns::clamp_expiry;
use super::peer_list::{Resolved, peer_list};
use super::peers::{Peers, now_ms};
use super::zone::{Zone, Zones};
use crate::conf::model::{PeerAddr, Upstream, UpstreamBlocks, UpstreamServer, zone_upstream};
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
        let entry = Entry {
            host: line.host.clone(),
            service: line.service.clone(),
            addr: *addr,
            weight: u32::try_from(p.weight).unwrap_or(1),
            backup: p.backup,
            expires: (wall + expires).saturating_sub(mono),
        };
        out.push_str(&entry.line());
    }
    for p in peers.primary.iter().chain(peers.backup.iter()) {
        if super::admin::overridden(p) {
            out.push_str(&admin_line(&p.name, super::admin::target(p)));
        }
    }
    out
}

/// An API change as a state file line: nginx's `server` directive.
pub fn admin_line(addr: &str, target: Target) -> String {
    match target.word() {
        Some(w) => format!("server {addr} {w};\n"),
        None => format!("server {addr};\n"),
    }
}

impl Entry {
    /// The entry as one line of the file, with its newline.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {}\n",
            self.host,
            self.service.as_deref().unwrap_or("-"),
            self.addr,
            self.weight,
            u8::from(self.backup),
            self.expires
        )
    }
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
            crate::log::errno_text(&e)
        );
    }
}

/// Rewrites every state file of a generation (in the master, when a worker
/// says its resolved peers changed).
pub fn save_all(zones: &Zones, blocks: &[&UpstreamBlocks]) {
    for (zname, z) in zones {
        for (i, name) in z.upstream_names().iter().enumerate() {
            if let Some(u) = zone_upstream(blocks, zname, name) {
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

/// A line longer than this is not one sluice wrote (a host name has at most
/// 253 bytes, so does an SRV service name).
const MAX_LINE: usize = 1024;
/// A larger file is not read at all.
pub const MAX_FILE: u64 = 64 << 20;
/// How far ahead an expiry may be: the longest TTL DNS allows (2^31-1 s).
const MAX_AHEAD_MS: u64 = i32::MAX as u64 * 1000;

/// What a state file holds: the entries of its good lines, and the numbers
/// of the lines refused (each is ignored on its own).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub entries: Vec<Entry>,
    /// The API's changes: peer address (as `$upstream_addr` shows it) and
    /// what it was set to.
    pub admin: Vec<(String, Target)>,
    pub bad: Vec<usize>,
}

/// Reads the file's bytes, given the current Unix time in ms. A line is
/// refused when it is not UTF-8, too long, has other than six fields, a
/// bad or unspecified address, a port 0, a weight of 0 or past 2^32-1, a
/// backup flag other than 0 or 1, an expiry that is not a number or lies
/// further ahead than DNS could make it; and the last line when it has no
/// newline (the file was cut while it was written: `10.0.0.1:8` may be half
/// of `10.0.0.1:8080`).
pub fn parse(bytes: &[u8], now: u64) -> Parsed {
    let mut out = Parsed::default();
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // After the last newline: nothing in a whole file.
    let tail = lines.pop().unwrap_or_default();
    for (n, line) in lines.iter().enumerate() {
        match parse_line(line, now) {
            Ok(Some(Line::Entry(e))) => out.entries.push(e),
            Ok(Some(Line::Admin(a, t))) => out.admin.push((a, t)),
            Ok(None) => {}
            Err(()) => out.bad.push(n + 1),
        }
    }
    if !tail.iter().all(u8::is_ascii_whitespace) {
        out.bad.push(lines.len() + 1);
    }
    out
}

/// `[0-9]+` that fits `T`.
fn digits<T: std::str::FromStr>(a: &str) -> Option<T> {
    if a.is_empty() || !a.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    a.parse().ok()
}

enum Line {
    Entry(Entry),
    Admin(String, Target),
}

/// `server ADDRESS [down|drain];`: an address as sluice names a peer
/// (`ip:port`, `[ipv6]:port`, `unix:/path`).
fn admin_entry(f: &[&str]) -> Result<Line, ()> {
    let target = match f {
        [_, _] => Target::Up,
        [_, _, "down"] => Target::Down,
        [_, _, "drain"] => Target::Drain,
        _ => return Err(()),
    };
    let addr = f[1];
    let ok = match addr.strip_prefix("unix:") {
        Some(path) => path.starts_with('/'),
        None => addr
            .parse::<SocketAddr>()
            .is_ok_and(|a| !a.ip().is_unspecified() && a.port() != 0),
    };
    if !ok || addr.contains(';') {
        return Err(());
    }
    Ok(Line::Admin(addr.to_string(), target))
}

/// One line: an entry, None for a blank line or a comment, Err when bad.
fn parse_line(line: &[u8], now: u64) -> Result<Option<Line>, ()> {
    if line.len() > MAX_LINE {
        return Err(());
    }
    let line = std::str::from_utf8(line).map_err(|_| ())?.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    if let Some(rest) = line.strip_prefix("server ") {
        let rest = rest.strip_suffix(';').ok_or(())?;
        let f: Vec<&str> = std::iter::once("server")
            .chain(rest.split_whitespace())
            .collect();
        return admin_entry(&f).map(Some);
    }
    let f: Vec<&str> = line.split_whitespace().collect();
    let [host, service, addr, weight, backup, expires] = f[..] else {
        return Err(());
    };
    let addr: SocketAddr = addr.parse().map_err(|_| ())?;
    if addr.ip().is_unspecified() || addr.port() == 0 {
        return Err(());
    }
    let expires: u64 = digits(expires).ok_or(())?;
    if expires > now.saturating_add(MAX_AHEAD_MS) {
        return Err(());
    }
    Ok(Some(Line::Entry(Entry {
        host: host.to_string(),
        service: (service != "-").then(|| service.to_string()),
        addr,
        weight: digits(weight).filter(|w| *w > 0).ok_or(())?,
        backup: match backup {
            "0" => false,
            "1" => true,
            _ => return Err(()),
        },
        expires,
    })))
}

/// Reads upstream `name`'s state file: its entries and API changes (none
/// when the file is missing), with an `[error]` for what cannot be read and
/// for each bad line (the first few, then how many more).
pub fn read(path: &Path) -> Parsed {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Parsed::default(),
        Err(e) => {
            crate::log!(
                Level::Error,
                "open() \"{}\" failed ({})",
                path.display(),
                crate::log::errno_text(&e)
            );
            return Parsed::default();
        }
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_FILE + 1).read_to_end(&mut bytes) {
        crate::log!(
            Level::Error,
            "read() \"{}\" failed ({})",
            path.display(),
            crate::log::errno_text(&e)
        );
        return Parsed::default();
    }
    if bytes.len() as u64 > MAX_FILE {
        crate::log!(
            Level::Error,
            "state file \"{}\" is larger than {} bytes, ignored",
            path.display(),
            MAX_FILE
        );
        return Parsed::default();
    }
    let parsed = parse(&bytes, unix_ms());
    const SHOWN: usize = 5;
    for line in parsed.bad.iter().take(SHOWN) {
        crate::log!(
            Level::Error,
            "invalid state file \"{}\" at line {}, ignored",
            path.display(),
            line
        );
    }
    if parsed.bad.len() > SHOWN {
        crate::log!(
            Level::Error,
            "invalid state file \"{}\": {} more bad lines ignored",
            path.display(),
            parsed.bad.len() - SHOWN
        );
    }
    parsed
}

/// Seeds the zone upstreams that have a state file, except those in `skip`
/// (zone and upstream names: a reload copied them from the old zone).
pub fn seed_all(zones: &Zones, blocks: &[&UpstreamBlocks], skip: &[(String, String)]) {
    for (zname, z) in zones {
        for (i, name) in z.upstream_names().iter().enumerate() {
            if skip.iter().any(|(a, b)| a == zname && b == name) {
                continue;
            }
            let Some(u) = zone_upstream(blocks, zname, name) else {
                continue;
            };
            let Some(path) = &u.state else { continue };
            let saved = read(path);
            if !saved.entries.is_empty() {
                seed(z, i, u, &saved.entries);
            }
            if !saved.admin.is_empty() {
                seed_admin(z, i, u, &saved.admin);
            }
        }
    }
}

/// Sets the API's changes on the peers listed at those addresses (of any
/// `server` line); those no longer listed are ignored.
fn seed_admin(z: &Zone, i: usize, u: &Upstream, admin: &[(String, Target)]) {
    let Some(now) = z.snapshot(i, u) else { return };
    for p in now.primary.iter().chain(now.backup.iter()) {
        if let Some((_, t)) = admin.iter().rev().find(|(a, _)| *a == *p.name) {
            super::admin::set(p, *t);
        }
    }
}

/// Publishes the entries that match a `resolve` line (same host and
/// service), with the line's port unless SRV, and their expiry.
fn seed(z: &Zone, i: usize, u: &Upstream, entries: &[Entry]) {
    let (mono, wall) = (now_ms(), unix_ms());
    let mine = |e: &&Entry, line: &UpstreamServer| e.host == line.host && e.service == line.service;
    let list = peer_list(u, |_, line| {
        entries
            .iter()
            .filter(|e| mine(e, line))
            .map(|e| Resolved {
                addr: e.addr,
                weight: e.weight,
                backup: e.backup,
            })
            .collect()
    });
    for (k, line) in u.servers.iter().enumerate().filter(|(_, l)| l.resolve) {
        // An expired entry is used and looked up again at once; one too far
        // in the future (a TTL of years, an edited file) no later than an
        // answer could be valid.
        let expires = entries.iter().filter(|e| mine(e, line)).map(|e| e.expires);
        let Some(expires) = expires.min() else {
            continue;
        };
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

    const NOW: u64 = 1_767_225_600_000;

    fn bad(text: &[u8]) -> Vec<usize> {
        parse(text, NOW).bad
    }

    #[test]
    fn parse_and_reject() {
        let p = parse(
            b"# c\napp.test - 10.0.0.1:80 1 0 123\n_s x.test 10.0.0.2:81 5 1 9\n",
            NOW,
        );
        assert!(p.bad.is_empty());
        let e = p.entries;
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].service, None);
        assert_eq!(e[1].service.as_deref(), Some("x.test"));
        assert!(e[1].backup && e[1].weight == 5);
        assert_eq!(bad(b"app.test - nonsense 1 0 1\n"), vec![1]);
        assert_eq!(bad(b"\n\napp.test - 10.0.0.1:80 0 0 1\n"), vec![3]);
        assert_eq!(bad(b"a b c\n"), vec![1]);
        assert!(parse(b"", NOW) == Parsed::default());
    }

    #[test]
    fn bad_lines_are_refused_one_by_one() {
        let good = "app.test - 10.0.0.1:80 1 0 123\n";
        let cases: [&[u8]; 17] = [
            b"garbage\n",
            b"\xff\xfe\x00\x01 - 10.0.0.1:80 1 0 1\n",
            b"app.test - 10.0.0.1:80 1 0 99999999999999999999999\n",
            b"app.test - 10.0.0.1:80 99999999999 0 1\n",
            b"app.test - 10.0.0.1:80 -1 0 1\n",
            b"app.test - 10.0.0.1:80 1 2 1\n",
            b"app.test - 10.0.0.1:80 1 0 -5\n",
            b"app.test - 10.0.0.1:80 1 0 18446744073709551615\n",
            b"app.test - 10.0.0.1:99999 1 0 1\n",
            b"app.test - 10.0.0.1:0 1 0 1\n",
            b"app.test - 0.0.0.0:80 1 0 1\n",
            b"app.test - [::]:80 1 0 1\n",
            b"app.test - 10.0.0.1 1 0 1\n",
            b"app.test - 300.0.0.1:80 1 0 1\n",
            b"app.test - unix:/x 1 0 1\n",
            b"app.test - 10.0.0.1:80 1 0 1 extra\n",
            b"app.test - 10.0.0.1:80 1 0 1\0\n",
        ];
        for c in cases {
            let mut text = good.as_bytes().to_vec();
            text.extend_from_slice(c);
            text.extend_from_slice(good.as_bytes());
            let p = parse(&text, NOW);
            assert_eq!(p.bad, vec![2], "{:?}", String::from_utf8_lossy(c));
            assert_eq!(p.entries.len(), 2);
        }
        // A very long line.
        let long = format!("{} - 10.0.0.1:80 1 0 1\n", "a".repeat(5000));
        assert_eq!(bad(long.as_bytes()), vec![1]);
        // As far ahead as DNS allows, and one ms more.
        let edge = format!("a - 10.0.0.1:80 1 0 {}\n", NOW + MAX_AHEAD_MS);
        assert!(bad(edge.as_bytes()).is_empty());
        let past = format!("a - 10.0.0.1:80 1 0 {}\n", NOW + MAX_AHEAD_MS + 1);
        assert_eq!(bad(past.as_bytes()), vec![1]);
    }

    #[test]
    fn api_lines() {
        let p = parse(
            b"a - 10.0.0.1:80 1 0 1\nserver 10.0.0.1:80 down;\nserver [::1]:81;\nserver unix:/tmp/s drain;\n",
            NOW,
        );
        assert!(p.bad.is_empty(), "{:?}", p.bad);
        assert_eq!(p.entries.len(), 1);
        assert_eq!(
            p.admin,
            [
                ("10.0.0.1:80".to_string(), Target::Down),
                ("[::1]:81".to_string(), Target::Up),
                ("unix:/tmp/s".to_string(), Target::Drain),
            ]
        );
        for t in [Target::Up, Target::Down, Target::Drain] {
            let back = parse(admin_line("10.0.0.9:8080", t).as_bytes(), NOW);
            assert_eq!(back.admin, [("10.0.0.9:8080".to_string(), t)]);
        }
        for c in [
            "server 10.0.0.1:80 weight=2;\n",
            "server 10.0.0.1:80 down\n",
            "server nonsense down;\n",
            "server 0.0.0.0:80;\n",
            "server 10.0.0.1:0;\n",
            "server unix:relative;\n",
            "server 10.0.0.1:80 down drain;\n",
            "server ;\n",
            "server 10.0.0.1:80;; down;\n",
        ] {
            assert_eq!(bad(c.as_bytes()), vec![1], "{c:?}");
        }
    }

    #[test]
    fn a_cut_last_line_is_refused() {
        let p = parse(b"a - 10.0.0.1:80 1 0 1\nb - 10.0.0.2:8", NOW);
        assert_eq!(p.bad, vec![2]);
        assert_eq!(p.entries.len(), 1);
        // Trailing blanks after the last newline are nothing.
        assert!(bad(b"a - 10.0.0.1:80 1 0 1\n  ").is_empty());
        // A whole file without a newline at all.
        assert_eq!(bad(b"a - 10.0.0.1:80 1 0 1"), vec![1]);
    }

    /// http and stream may each have an upstream `u`, in zones of their
    /// own: each is seeded from and saved to its own state file.
    #[test]
    fn same_name_in_two_contexts_keeps_its_own_file() {
        use crate::conf::model::{Balancer, ZoneSpec};
        let dir = std::env::temp_dir().join(format!("sluice-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let up = |zone: &str, host: &str, port: u16| {
            let mut u = crate::upstream::peers::test_upstream(&[], Balancer::RoundRobin);
            let mut line = crate::conf::model::UpstreamServer::new(host.into(), Vec::new());
            (line.resolve, line.host, line.port) = (true, host.into(), port);
            u.servers.push(line);
            u.zone = Some(zone.into());
            u.state = Some(dir.join(format!("{zone}.state")));
            let spec = ZoneSpec {
                name: zone.into(),
                size: Some(64 * 1024),
                upstreams: vec!["u".into()],
                src: u.src.clone(),
            };
            UpstreamBlocks {
                list: vec![std::sync::Arc::new(u)],
                zones: vec![spec],
                time_buckets: Vec::new(),
            }
        };
        let (http, stream) = (up("hz", "h.test", 80), up("sz", "s.test", 81));
        let blocks = [&http, &stream];
        let later = unix_ms() + 60_000;
        for (zone, line) in [
            ("hz", "h.test - 10.0.0.1:80"),
            ("sz", "s.test - 10.0.0.2:81"),
        ] {
            let text = format!("{line} 1 0 {later}\n");
            std::fs::write(dir.join(format!("{zone}.state")), text).expect("write");
        }
        let zones = super::super::zone::create_all(&blocks, 1, 1).expect("zones");
        seed_all(&zones, &blocks, &[]);
        for (zone, u, addr) in [("hz", &http, "10.0.0.1:80"), ("sz", &stream, "10.0.0.2:81")] {
            let z = &zones[zone];
            let peers = z.snapshot(0, &u.list[0]).expect("snapshot");
            let got: Vec<String> = peers.primary.iter().map(|p| p.name.to_string()).collect();
            assert_eq!(got, [addr], "zone {zone}");
            std::fs::remove_file(dir.join(format!("{zone}.state"))).expect("rm");
        }
        save_all(&zones, &blocks);
        let read = |zone: &str| std::fs::read_to_string(dir.join(format!("{zone}.state")));
        let (h, s) = (read("hz").expect("hz"), read("sz").expect("sz"));
        assert!(
            h.contains("h.test - 10.0.0.1:80 ") && !h.contains("s.test"),
            "{h}"
        );
        assert!(
            s.contains("s.test - 10.0.0.2:81 ") && !s.contains("h.test"),
            "{s}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The API's changes go to the state file of a static upstream and
    /// come back from it at a cold start (new zones).
    #[test]
    fn api_changes_are_saved_and_seeded() {
        use crate::conf::model::{Balancer, ZoneSpec};
        let dir = std::env::temp_dir().join(format!("sluice-admin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut u = crate::upstream::peers::test_upstream(
            &[
                ("127.0.0.1:1", 1, false),
                ("127.0.0.1:2", 1, false),
                ("127.0.0.1:3", 1, false),
            ],
            Balancer::RoundRobin,
        );
        u.servers[2].down = true;
        u.zone = Some("az".into());
        u.state = Some(dir.join("az.state"));
        let spec = ZoneSpec {
            name: "az".into(),
            size: Some(64 * 1024),
            upstreams: vec!["u".into()],
            src: u.src.clone(),
        };
        let b = UpstreamBlocks {
            list: vec![std::sync::Arc::new(u)],
            zones: vec![spec],
            time_buckets: Vec::new(),
        };
        let blocks = [&b];
        let zones = super::super::zone::create_all(&blocks, 1, 1).expect("zones");
        let peers = zones["az"].snapshot(0, &b.list[0]).expect("snapshot");
        super::super::admin::set(&peers.primary[0], Target::Drain);
        super::super::admin::set(&peers.primary[2], Target::Up);
        save_all(&zones, &blocks);
        let text = std::fs::read_to_string(dir.join("az.state")).expect("read");
        assert!(text.contains("server 127.0.0.1:1 drain;\n"), "{text}");
        assert!(text.contains("server 127.0.0.1:3;\n"), "{text}");
        assert!(!text.contains("127.0.0.1:2"), "{text}");
        drop(peers);
        drop(zones);
        let zones = super::super::zone::create_all(&blocks, 2, 1).expect("zones");
        seed_all(&zones, &blocks, &[]);
        let peers = zones["az"].snapshot(0, &b.list[0]).expect("snapshot");
        let t: Vec<Target> = peers
            .primary
            .iter()
            .map(super::super::admin::target)
            .collect();
        assert_eq!(t, [Target::Drain, Target::Up, Target::Up]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn entry() -> impl Strategy<Value = Entry> {
            (
                "[a-z][a-z0-9.-]{0,40}",
                proptest::option::of("_[a-z]{1,10}\\._tcp\\.[a-z]{1,10}"),
                any::<[u8; 4]>(),
                any::<[u8; 16]>(),
                any::<bool>(),
                1..=u16::MAX,
                1..=u32::MAX,
                any::<bool>(),
                0..=NOW + MAX_AHEAD_MS,
            )
                .prop_filter_map(
                    "an address sluice would not write",
                    |(host, service, v4, v6, six, port, weight, backup, expires)| {
                        let ip: std::net::IpAddr = if six {
                            std::net::Ipv6Addr::from(v6).into()
                        } else {
                            std::net::Ipv4Addr::from(v4).into()
                        };
                        (!ip.is_unspecified()).then(|| Entry {
                            host,
                            service,
                            addr: SocketAddr::new(ip, port),
                            weight,
                            backup,
                            expires,
                        })
                    },
                )
        }

        fn write(entries: &[Entry]) -> String {
            let mut out =
                String::from("# sluice state: HOST SERVICE ADDRESS WEIGHT BACKUP EXPIRES\n");
            for e in entries {
                out.push_str(&e.line());
            }
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(crate::proptest_cases(512)))]

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
                let p = parse(&bytes, NOW);
                let lines = bytes.split(|&b| b == b'\n').count();
                prop_assert!(p.bad.iter().all(|&n| n >= 1 && n <= lines));
                prop_assert!(p.entries.len() + p.admin.len() + p.bad.len() <= lines);
            }

            #[test]
            fn written_state_reads_back(entries in proptest::collection::vec(entry(), 0..20)) {
                let p = parse(write(&entries).as_bytes(), NOW);
                prop_assert!(p.bad.is_empty());
                prop_assert_eq!(p.entries, entries);
            }

            #[test]
            fn a_cut_file_keeps_only_whole_lines(
                entries in proptest::collection::vec(entry(), 1..10),
                cut in any::<proptest::sample::Index>(),
            ) {
                let text = write(&entries);
                let cut = cut.index(text.len());
                let p = parse(&text.as_bytes()[..cut], NOW);
                let whole = text[..cut].matches('\n').count().saturating_sub(1);
                prop_assert_eq!(&p.entries[..], &entries[..whole]);
                prop_assert!(p.bad.len() <= 1);
            }
        }
    }
}
