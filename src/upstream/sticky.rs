//! `sticky` at run time, as nginx's sticky module does it: a peer's id
//! (its `route=`, else the MD5 in hex of its address, the same in every
//! worker, generation and binary), the peer a request's id names when it is
//! usable (the balancer picks otherwise), the `Set-Cookie` line of `sticky
//! cookie`, and `sticky learn`'s sessions in a shared zone (the table of
//! `net::tls_cache`: the oldest entries give way when it is full). Pure but
//! for the zone; the attempt engine and the HTTP proxy call it.

use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};

use super::peers::{Ms, Peer, PeerId, Peers, Tried};
use crate::conf::model::Upstream;
use crate::conf::sticky::{CookieExpires, StickyCookie};
use crate::net::tls_cache::SessionZone;

/// What `sticky learn` zones' memfds are called (`sluice:sticky:NAME`).
pub const KIND: &str = "sticky";

/// The longest id a peer can have (nginx's `NGX_HTTP_UPSTREAM_SID_LEN`).
pub const SID_MAX: usize = 32;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The id of `p`: its server's `route=`, else the MD5 of its address.
pub fn sid(cfg: &Upstream, p: &Peer) -> String {
    match cfg.servers.get(p.server).and_then(|s| s.route.as_deref()) {
        Some(r) => r.to_string(),
        None => hex(&Md5::digest(p.name.as_bytes())),
    }
}

/// The peer whose id is `want`, if this request may use it now: not tried
/// yet, not down, failed, unhealthy or at `max_conns`. A backup peer only
/// while no primary peer is usable (it is one only then). None: the
/// balancer chooses, as if the request named none.
pub fn pick(peers: &Peers, cfg: &Upstream, want: &str, tried: &Tried, now: Ms) -> Option<PeerId> {
    if want.is_empty() || want.len() > SID_MAX {
        return None;
    }
    // An MD5 id is 32 hex digits: no digest is made for anything else.
    let is = |p: &Peer| match cfg.servers.get(p.server).and_then(|s| s.route.as_deref()) {
        Some(r) => r == want,
        None => want.len() == 32 && sid(cfg, p) == want,
    };
    let find = |backup: bool, set: &[Peer]| {
        set.iter().enumerate().find_map(|(index, p)| {
            let id = PeerId { backup, index };
            (!tried.has(id) && p.usable(now) && is(p)).then_some(id)
        })
    };
    if let Some(id) = find(false, &peers.primary) {
        peers.primary[id.index].mark_chosen(now);
        return Some(id);
    }
    if peers.primary.iter().any(|p| p.usable(now)) {
        return None;
    }
    let id = find(true, &peers.backup)?;
    peers.backup[id.index].mark_chosen(now);
    Some(id)
}

/// nginx's `expires=max`: `Thu, 31-Dec-37 23:55:55 GMT`, with its max-age.
const MAX_EXPIRES: &str = "; expires=Thu, 31-Dec-37 23:55:55 GMT; max-age=315360000";

/// The `Set-Cookie` value naming `sid`, in nginx's order: expires and
/// max-age, domain, httponly, secure, samesite, path. `domain` and
/// `samesite` are the evaluated parameters (empty: left out); `now` is the
/// unix time.
pub fn cookie_line(c: &StickyCookie, sid: &str, domain: &str, samesite: &str, now: i64) -> String {
    let mut s = format!("{}={sid}", c.name);
    match c.expires {
        None => {}
        Some(CookieExpires::Max) => s.push_str(MAX_EXPIRES),
        Some(CookieExpires::After(d)) => {
            let secs = d.as_secs();
            let at = now.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX));
            s.push_str("; expires=");
            s.push_str(&cookie_time(at));
            s.push_str(&format!("; max-age={secs}"));
        }
    }
    if !domain.is_empty() {
        s.push_str("; domain=");
        s.push_str(domain);
    }
    if c.httponly {
        s.push_str("; httponly");
    }
    if c.secure {
        s.push_str("; secure");
    }
    if !samesite.is_empty() {
        // A variable's value that is none of the three is `strict` (nginx).
        let v = if crate::conf::sticky::samesite_ok(samesite) {
            samesite
        } else {
            "strict"
        };
        s.push_str("; samesite=");
        s.push_str(v);
    }
    if let Some(p) = &c.path {
        s.push_str("; path=");
        s.push_str(p);
    }
    s
}

/// nginx's cookie time: `Thu, 01-Jan-26 00:00:00 GMT` (two-digit years
/// until 2037, four after).
fn cookie_time(t: i64) -> String {
    let Some(d) = chrono::DateTime::from_timestamp(t, 0) else {
        return "Thu, 31-Dec-37 23:55:55 GMT".to_string();
    };
    if chrono::Datelike::year(&d) > 2037 {
        d.format("%a, %d-%b-%Y %H:%M:%S GMT").to_string()
    } else {
        d.format("%a, %d-%b-%y %H:%M:%S GMT").to_string()
    }
}

/// The value of cookie `name` in the upstream's `Set-Cookie` lines
/// (`$upstream_cookie_NAME`): the first that sets it, up to its `;`.
pub fn upstream_cookie(headers: &crate::h1::head::Headers, name: &str) -> Option<String> {
    headers
        .get_all(http::header::SET_COOKIE)
        .filter_map(|v| v.to_str().ok())
        .find_map(|line| {
            let pair = line.split(';').next()?;
            let (n, v) = pair.split_once('=')?;
            (n.trim() == name).then(|| v.trim().to_string())
        })
}

/// A learned session's key in the zone: the MD5 of its id (as nginx).
fn key(session: &str) -> [u8; 16] {
    Md5::digest(session.as_bytes()).into()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The peer id a learned session points at.
pub fn lookup(zone: &SessionZone, session: &str) -> Option<String> {
    if session.is_empty() {
        return None;
    }
    let v = zone.get(&key(session))?;
    String::from_utf8(v).ok()
}

/// Learns that `session` goes to the peer `sid`, for `timeout` more: a
/// `create`d session is made or moved; a looked-up one (`create` false)
/// is only kept alive, and moved if the balancer chose another peer.
pub fn learn(zone: &SessionZone, session: &str, sid: &str, create: bool, timeout: Duration) {
    if session.is_empty() || sid.len() > SID_MAX {
        return;
    }
    let k = key(session);
    if !create && zone.get(&k).is_none() {
        return;
    }
    // Whole seconds, at least one: the table keeps unix seconds.
    let expires = now_secs() + timeout.as_secs_f64().ceil().max(1.0) as u64;
    zone.put(&k, sid.as_bytes(), expires);
}

/// The `sticky learn` zones of a generation, by name, with the upstream
/// each serves.
pub type LearnZones = std::collections::HashMap<String, (String, Arc<SessionZone>)>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::model::Balancer;
    use crate::upstream::peers::test_upstream;

    #[test]
    fn ids_are_routes_or_md5s_of_addresses() {
        let mut u = test_upstream(
            &[("127.0.0.1:8081", 1, false), ("127.0.0.1:8082", 1, false)],
            Balancer::RoundRobin,
        );
        u.servers[1].route = Some("b".into());
        let peers = Peers::from_config(&u);
        // echo -n 127.0.0.1:8081 | md5sum
        assert_eq!(
            sid(&u, &peers.primary[0]),
            "df2b80dc43705d28db9be6f29fe58da3"
        );
        assert_eq!(sid(&u, &peers.primary[1]), "b");
        let tried = Tried::new(&peers);
        assert_eq!(
            pick(&peers, &u, "b", &tried, 1),
            Some(PeerId {
                backup: false,
                index: 1
            })
        );
        assert_eq!(pick(&peers, &u, "nope", &tried, 1), None);
        assert_eq!(pick(&peers, &u, "", &tried, 1), None);
        let mut tried = tried;
        tried.set(PeerId {
            backup: false,
            index: 1,
        });
        assert_eq!(pick(&peers, &u, "b", &tried, 1), None);
    }

    #[test]
    fn a_backup_peer_only_while_no_primary_is_usable() {
        let mut u = test_upstream(
            &[("127.0.0.1:1", 1, false), ("127.0.0.1:2", 1, true)],
            Balancer::RoundRobin,
        );
        u.servers[1].route = Some("bk".into());
        let peers = Peers::from_config(&u);
        assert_eq!(pick(&peers, &u, "bk", &Tried::new(&peers), 1), None);
        u.servers[0].down = true;
        let peers = Peers::from_config(&u);
        assert_eq!(
            pick(&peers, &u, "bk", &Tried::new(&peers), 1),
            Some(PeerId {
                backup: true,
                index: 0
            })
        );
    }

    #[test]
    fn cookie_lines_as_nginx_writes_them() {
        let c = StickyCookie {
            name: "srv".into(),
            lookup: crate::conf::vars::compile("$cookie_srv").expect("var"),
            expires: Some(CookieExpires::After(Duration::from_secs(3600))),
            domain: None,
            path: Some("/".into()),
            httponly: true,
            secure: true,
            samesite: None,
        };
        assert_eq!(
            cookie_line(&c, "a", ".example.com", "Lax", 0),
            "srv=a; expires=Thu, 01-Jan-70 01:00:00 GMT; max-age=3600; \
             domain=.example.com; httponly; secure; samesite=Lax; path=/"
        );
        let c = StickyCookie {
            expires: Some(CookieExpires::Max),
            path: None,
            httponly: false,
            secure: false,
            ..c
        };
        assert_eq!(
            cookie_line(&c, "b", "", "bogus", 0),
            "srv=b; expires=Thu, 31-Dec-37 23:55:55 GMT; max-age=315360000; samesite=strict"
        );
    }

    #[test]
    fn upstream_cookies_from_hostile_lines() {
        let h = crate::h1::head::Headers::from_pairs(
            [
                "junk",
                "=x",
                "other=1; path=/",
                " sid = abc ; HttpOnly",
                "sid=late",
            ]
            .map(|v| ("set-cookie", v)),
        );
        assert_eq!(upstream_cookie(&h, "sid").as_deref(), Some("abc"));
        assert_eq!(upstream_cookie(&h, "none"), None);
        assert_eq!(
            upstream_cookie(&crate::h1::head::Headers::default(), "sid"),
            None
        );
    }

    #[test]
    fn sessions_learned_kept_and_evicted_oldest_first() {
        let z = SessionZone::heap("s", 32 * 1024).expect("zone");
        let t = Duration::from_secs(60);
        learn(&z, "s1", "a", false, t);
        assert_eq!(lookup(&z, "s1"), None, "a lookup does not create");
        learn(&z, "s1", "a", true, t);
        assert_eq!(lookup(&z, "s1").as_deref(), Some("a"));
        learn(&z, "s1", "b", false, t);
        assert_eq!(lookup(&z, "s1").as_deref(), Some("b"), "moved");
        // A full zone drops its oldest sessions.
        let cap = z.capacity();
        for i in 0..cap + 5 {
            learn(&z, &format!("k{i}"), "c", true, t);
        }
        assert_eq!(lookup(&z, "k0"), None);
        assert_eq!(lookup(&z, &format!("k{}", cap + 4)).as_deref(), Some("c"));
        assert_eq!(lookup(&z, ""), None);
        learn(&z, "x", &"y".repeat(33), true, t);
        assert_eq!(lookup(&z, "x"), None);
    }

    proptest::proptest! {
        /// Whatever the upstream's Set-Cookie lines and the client's id
        /// hold, nothing panics, and a pick is a usable peer with that id.
        #[test]
        fn hostile_ids_and_cookies(
            lines in proptest::collection::vec("[ -~]{0,60}", 0..6),
            name in "[a-z=; ]{0,6}",
            want in "[ -~]{0,40}",
        ) {
            let h = crate::h1::head::Headers::from_pairs(lines.iter().map(|l| ("Set-Cookie", l.as_str())));
            if let Some(v) = upstream_cookie(&h, &name) {
                proptest::prop_assert!(!v.contains(';'));
            }
            let mut u = test_upstream(
                &[("127.0.0.1:1", 1, false), ("127.0.0.1:2", 1, true)],
                Balancer::RoundRobin,
            );
            u.servers[0].route = Some(want.chars().take(32).collect());
            let peers = Peers::from_config(&u);
            let tried = Tried::new(&peers);
            if let Some(id) = pick(&peers, &u, &want, &tried, 1) {
                proptest::prop_assert_eq!(sid(&u, peers.get(id)), want.clone());
            }
            let z = SessionZone::heap("p", 32 * 1024).expect("zone");
            learn(&z, &want, &name, true, Duration::from_secs(5));
            if !want.is_empty() && name.len() <= SID_MAX {
                proptest::prop_assert_eq!(lookup(&z, &want), Some(name.clone()));
            }
        }
    }
}
