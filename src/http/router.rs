//! Which `server` and which `location` answer a request: the server by the
//! listening address the connection came in on, then by `Host` against
//! `server_name` (exact, leading wildcard, trailing wildcard, regex, else the
//! address's default server); the location by nginx's rules (exact, longest
//! prefix, nested locations, then regexes in order unless `^~`). Pure lookups.

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::conf::model::{Http, ListenAddr, Location, Modifier, Server, ServerName};

/// The servers that share one listening address.
#[derive(Debug, Default)]
struct AddrServers {
    servers: Vec<usize>,
    default: usize,
    /// Connections to the address speak TLS (one `listen ... ssl` says so).
    ssl: bool,
    /// HTTP/2 on the address (one `listen ... http2` says so, as nginx).
    http2: bool,
    /// Connections to the address start with a PROXY protocol header.
    proxy_protocol: bool,
}

#[derive(Debug)]
pub struct Router {
    /// By listening address: two lookups a request (the server for the
    /// Host, and the one the address chose for the URI's parsing), so the
    /// keys are hashed with FNV-1a, not SipHash (they are the
    /// configuration's addresses, not the clients' choice).
    by_addr: HashMap<ListenAddr, AddrServers, std::hash::BuildHasherDefault<Fnv>>,
}

/// FNV-1a, 64 bits: a few multiplications for a socket address.
#[derive(Debug)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

impl Router {
    pub fn new(http: &Http) -> Router {
        let mut by_addr: HashMap<ListenAddr, AddrServers, _> = HashMap::default();
        for (i, s) in http.servers.iter().enumerate() {
            for l in &s.listen {
                let e = by_addr
                    .entry(l.addr.clone())
                    .or_insert_with(|| AddrServers {
                        servers: Vec::new(),
                        default: i,
                        ssl: false,
                        http2: false,
                        proxy_protocol: false,
                    });
                e.ssl |= l.ssl;
                e.http2 |= l.http2;
                e.proxy_protocol |= l.proxy_protocol;
                if !e.servers.contains(&i) {
                    e.servers.push(i);
                }
                if l.default_server {
                    e.default = i;
                }
            }
        }
        Router { by_addr }
    }

    /// The server for a connection that arrived on `listen` (the bound address)
    /// with local address `local`, asking for `host` (lowercase, no port).
    pub fn server<'h>(
        &self,
        http: &'h Http,
        listen: &ListenAddr,
        local: Option<SocketAddr>,
        host: Option<&str>,
    ) -> Option<&'h Server> {
        http.servers
            .get(self.server_index(http, listen, local, host)?)
    }

    /// The same server, by its index in `http.servers`.
    pub fn server_index(
        &self,
        http: &Http,
        listen: &ListenAddr,
        local: Option<SocketAddr>,
        host: Option<&str>,
    ) -> Option<usize> {
        let entry = self.entry(listen, local)?;
        Some(
            host.and_then(|h| find_by_name(http, &entry.servers, h))
                .unwrap_or(entry.default),
        )
    }

    fn entry(&self, listen: &ListenAddr, local: Option<SocketAddr>) -> Option<&AddrServers> {
        // One listening address (the common configuration): every
        // connection came through it, with nothing to look up.
        if self.by_addr.len() == 1 {
            return self.by_addr.values().next();
        }
        // A wildcard socket carries servers of specific addresses on its port too.
        local
            .map(ListenAddr::Inet)
            .and_then(|a| self.by_addr.get(&a))
            .or_else(|| self.by_addr.get(listen))
    }

    /// Whether a connection to `local` through the socket bound for
    /// `listen` speaks TLS.
    pub fn ssl(&self, listen: &ListenAddr, local: Option<SocketAddr>) -> bool {
        self.entry(listen, local).is_some_and(|e| e.ssl)
    }

    /// Whether HTTP/2 is on for a connection to `local` through the socket
    /// bound for `listen`: its `listen ... http2`, or `http2 on` in
    /// `server` (the default server, or the one SNI chose), as nginx 1.25.
    pub fn http2(
        &self,
        listen: &ListenAddr,
        local: Option<SocketAddr>,
        server: Option<&Server>,
    ) -> bool {
        self.entry(listen, local).is_some_and(|e| e.http2) || server.is_some_and(|s| s.conf.http2)
    }

    /// Whether any address the socket bound for `listen` takes connections
    /// for speaks TLS (else its connections need no look).
    pub fn ssl_on(&self, listen: &ListenAddr) -> bool {
        self.any_on(listen, |e| e.ssl)
    }

    /// Whether a connection to `local` through the socket bound for
    /// `listen` starts with a PROXY protocol header.
    pub fn proxy_protocol(&self, listen: &ListenAddr, local: Option<SocketAddr>) -> bool {
        self.entry(listen, local).is_some_and(|e| e.proxy_protocol)
    }

    /// Whether any address the socket bound for `listen` takes connections
    /// for expects a PROXY protocol header.
    pub fn proxy_protocol_on(&self, listen: &ListenAddr) -> bool {
        self.any_on(listen, |e| e.proxy_protocol)
    }

    fn any_on(&self, listen: &ListenAddr, on: impl Fn(&AddrServers) -> bool) -> bool {
        self.by_addr.iter().any(|(a, e)| {
            on(e)
                && match (a, listen) {
                    _ if a == listen => true,
                    (ListenAddr::Inet(a), ListenAddr::Inet(w)) => {
                        w.ip().is_unspecified()
                            && w.port() == a.port()
                            && w.is_ipv4() == a.is_ipv4()
                    }
                    _ => false,
                }
        })
    }
}

fn find_by_name(http: &Http, servers: &[usize], host: &str) -> Option<usize> {
    let names = || {
        servers
            .iter()
            .filter_map(move |&i| http.servers.get(i).map(|s| (i, s)))
            .flat_map(|(i, s)| s.server_name.iter().map(move |n| (i, n)))
    };
    if let Some((i, _)) = names().find(|(_, n)| matches!(n, ServerName::Exact(e) if e == host)) {
        return Some(i);
    }
    // The longest matching wildcard wins, leading wildcards before trailing ones.
    let front = names()
        .filter_map(|(i, n)| match n {
            ServerName::Front { suffix, .. } if plain_match(n, host) => Some((suffix.len(), i)),
            _ => None,
        })
        .max_by_key(|(len, i)| (*len, std::cmp::Reverse(*i)));
    if let Some((_, i)) = front {
        return Some(i);
    }
    let back = names()
        .filter_map(|(i, n)| match n {
            ServerName::Back(prefix) if plain_match(n, host) => Some((prefix.len(), i)),
            _ => None,
        })
        .max_by_key(|(len, i)| (*len, std::cmp::Reverse(*i)));
    if let Some((_, i)) = back {
        return Some(i);
    }
    names()
        .find(|(_, n)| matches!(n, ServerName::Regex(r) if r.is_match(host)))
        .map(|(i, _)| i)
}

/// Whether `host` matches a name that is not a regex.
fn plain_match(n: &ServerName, host: &str) -> bool {
    match n {
        ServerName::Exact(e) => e == host,
        ServerName::Front { suffix, bare_too } => {
            (host.ends_with(suffix.as_str()) && host.len() > suffix.len())
                || (*bare_too && host == &suffix[1..])
        }
        ServerName::Back(prefix) => host.starts_with(prefix.as_str()),
        ServerName::Regex(_) => false,
    }
}

/// The regex name that chose `server` for `host` (none of its other names
/// matches it): its captures are the request's, as nginx sets them.
pub fn chosen_by_regex<'s>(server: &'s Server, host: &str) -> Option<&'s regex::Regex> {
    if server.server_name.iter().any(|n| plain_match(n, host)) {
        return None;
    }
    server.server_name.iter().find_map(|n| match n {
        ServerName::Regex(r) if r.is_match(host) => Some(r),
        _ => None,
    })
}

/// The location for `uri` among `locs`, as nginx's `find_location` chooses it.
pub fn find_location<'a>(locs: &'a [Location], uri: &str) -> Option<&'a Location> {
    find(locs, uri).0
}

/// nginx's automatic redirect: `uri` names a prefix location that passes
/// requests on (`proxy_pass`, `grpc_pass`) but for its final "/", and no
/// location is `uri` itself. The search stops there, before any regex
/// location, with a 301 to `uri/`.
pub fn auto_redirect<'a>(locs: &'a [Location], uri: &str) -> Option<&'a Location> {
    let named = uri.strip_suffix('/').map_or(Some(uri), |_| None)?;
    let prefix = |l: &Location| matches!(l.modifier, Modifier::Prefix | Modifier::PrefixNoRegex);
    let mut level = locs;
    loop {
        if level.iter().any(|l| l.regex.is_none() && l.uri == named) {
            return None;
        }
        if let Some(l) = level.iter().find(|l| {
            prefix(l)
                && (l.proxy_pass.is_some() || l.proxy_pass_var.is_some())
                && l.uri.strip_suffix('/') == Some(named)
        }) {
            return Some(l);
        }
        // Into the longest prefix location that holds the URI.
        let best = level
            .iter()
            .filter(|l| prefix(l) && named.starts_with(l.uri.as_str()))
            .max_by_key(|l| l.uri.len())?;
        level = &best.locations;
    }
}

/// Returns the match and whether the search is final (exact, regex, or `^~`).
fn find<'a>(locs: &'a [Location], uri: &str) -> (Option<&'a Location>, bool) {
    let mut best: Option<&Location> = None;
    for l in locs {
        match l.modifier {
            Modifier::Exact if l.uri == uri => return (Some(l), true),
            Modifier::Prefix | Modifier::PrefixNoRegex
                if uri.starts_with(l.uri.as_str())
                    && best.is_none_or(|b| l.uri.len() > b.uri.len()) =>
            {
                best = Some(l);
            }
            _ => {}
        }
    }
    let mut result = best;
    if let Some(b) = best {
        if !b.locations.is_empty() {
            let (inner, done) = find(&b.locations, uri);
            if done {
                return (inner, true);
            }
            if inner.is_some() {
                result = inner;
            }
        }
        if b.modifier == Modifier::PrefixNoRegex
            || result.is_some_and(|r| r.modifier == Modifier::PrefixNoRegex)
        {
            return (result, true);
        }
    }
    for l in locs {
        if let Some(re) = &l.regex {
            if re.is_match(uri) {
                return (Some(l), true);
            }
        }
    }
    (result, false)
}

/// A named location (`@name`) of a server.
pub fn named_location<'a>(server: &'a Server, name: &str) -> Option<&'a Location> {
    server
        .locations
        .iter()
        .find(|l| l.modifier == Modifier::Named && l.uri == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::{Paths, load};
    use crate::log::Target;
    use std::path::PathBuf;

    fn http(body: &str) -> Http {
        let dir = std::env::temp_dir().join(format!(
            "sluice-router-{}-{}",
            std::process::id(),
            body.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.conf");
        std::fs::write(&f, format!("events {{}}\nhttp {{\n{body}\n}}\n")).unwrap();
        let c = load(&Paths {
            prefix: PathBuf::from(&dir),
            conf_file: f,
            globals: None,
            error_log: Target::Stderr,
        })
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        c.http.unwrap()
    }

    fn loc_of(h: &Http, uri: &str) -> Option<String> {
        find_location(&h.servers[0].locations, uri).map(|l| l.uri.clone())
    }

    #[test]
    fn location_rules() {
        let h = http(
            "server { listen 127.0.0.1:1;\n\
             location = / { }\n location / { }\n location /docs/ { location /docs/old/ { } location ~ \\.txt$ { } }\n\
             location ^~ /static/ { }\n location ~ \\.(png|txt)$ { }\n location ~* \\.JPG$ { }\n location @fallback { } }",
        );
        assert_eq!(loc_of(&h, "/").as_deref(), Some("/"));
        assert_eq!(
            find_location(&h.servers[0].locations, "/")
                .unwrap()
                .modifier,
            Modifier::Exact
        );
        assert_eq!(loc_of(&h, "/x").as_deref(), Some("/"));
        assert_eq!(loc_of(&h, "/docs/a").as_deref(), Some("/docs/"));
        assert_eq!(loc_of(&h, "/docs/old/a").as_deref(), Some("/docs/old/"));
        // A nested regex is tried before the server's regexes.
        assert_eq!(loc_of(&h, "/docs/a.txt").as_deref(), Some("\\.txt$"));
        // ^~ stops the regex search.
        assert_eq!(loc_of(&h, "/static/a.png").as_deref(), Some("/static/"));
        assert_eq!(loc_of(&h, "/img/a.png").as_deref(), Some("\\.(png|txt)$"));
        assert_eq!(loc_of(&h, "/img/a.jpg").as_deref(), Some("\\.JPG$"));
        // Named locations never match a URI.
        assert_eq!(loc_of(&h, "@fallback"), None);
        assert!(named_location(&h.servers[0], "@fallback").is_some());
    }

    #[test]
    fn server_names() {
        let h = http(
            "server { listen 127.0.0.1:1; server_name first; }\n\
             server { listen 127.0.0.1:1; server_name example.com www.example.*; }\n\
             server { listen 127.0.0.1:1 default_server; server_name *.example.com; }\n\
             server { listen 127.0.0.1:1; server_name *.a.example.com ~^re\\d+\\.org$ .example.net; }\n\
             server { listen 127.0.0.1:2; server_name other; }",
        );
        let r = Router::new(&h);
        let a: ListenAddr = ListenAddr::Inet("127.0.0.1:1".parse().unwrap());
        let pick = |host: Option<&str>| {
            r.server(&h, &a, None, host)
                .unwrap()
                .primary_name
                .to_string()
        };
        assert_eq!(pick(Some("example.com")), "example.com");
        assert_eq!(pick(Some("x.example.com")), "*.example.com");
        assert_eq!(pick(Some("x.a.example.com")), "*.a.example.com");
        assert_eq!(pick(Some("www.example.org")), "example.com");
        assert_eq!(pick(Some("re42.org")), "*.a.example.com");
        assert_eq!(pick(Some("example.net")), "*.a.example.com");
        assert_eq!(pick(Some("nothing")), "*.example.com");
        assert_eq!(pick(None), "*.example.com");
        let b: ListenAddr = ListenAddr::Inet("127.0.0.1:2".parse().unwrap());
        assert_eq!(
            &*r.server(&h, &b, None, Some("first")).unwrap().primary_name,
            "other"
        );
        // The regex is what chose the server only where no other name of
        // it matches.
        let s = r.server(&h, &a, None, Some("re42.org")).unwrap();
        assert!(chosen_by_regex(s, "re42.org").is_some());
        assert!(chosen_by_regex(s, "x.a.example.com").is_none());
        assert!(chosen_by_regex(s, "re4.net").is_none());
    }

    /// A wildcard socket serves the servers of a specific address on its
    /// port when the connection came to that address, its own otherwise;
    /// with one address, every connection is its.
    #[test]
    fn servers_by_local_address() {
        let h = http(
            "server { listen 0.0.0.0:3; server_name wild; }\n\
             server { listen 127.0.0.2:3; server_name two; }\n\
             server { listen 127.0.0.1:4; server_name four; }",
        );
        let r = Router::new(&h);
        let wild: ListenAddr = ListenAddr::Inet("0.0.0.0:3".parse().unwrap());
        let name = |local: &str| {
            r.server(&h, &wild, Some(local.parse().unwrap()), None)
                .map(|s| s.primary_name.to_string())
        };
        assert_eq!(name("127.0.0.2:3").as_deref(), Some("two"));
        assert_eq!(name("127.0.0.3:3").as_deref(), Some("wild"));
        let four: ListenAddr = ListenAddr::Inet("127.0.0.1:4".parse().unwrap());
        assert_eq!(
            r.server(&h, &four, None, Some("wild"))
                .map(|s| &*s.primary_name),
            Some("four")
        );
        let one = http("server { listen 127.0.0.1:5; server_name only; }");
        let r = Router::new(&one);
        let five: ListenAddr = ListenAddr::Inet("127.0.0.1:5".parse().unwrap());
        assert_eq!(
            r.server(&one, &five, Some("127.0.0.1:5".parse().unwrap()), Some("x"))
                .map(|s| &*s.primary_name),
            Some("only")
        );
    }
}
