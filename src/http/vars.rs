//! One request's state as variables see it (`Req`), and the evaluation of
//! compiled texts against it. Values are computed only when a text asks.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, Version};

use crate::conf::map::{Captures, Evaluator, MapCache};
use crate::conf::model::LocConf;
use crate::conf::vars::{Segment, Template, Var};

/// What one connection knows about itself.
#[derive(Debug)]
pub struct ConnInfo {
    /// nginx's connection number (`$connection`, `*N` in the error log).
    pub number: u64,
    /// None for a unix-socket client.
    pub remote: Option<SocketAddr>,
    pub local: Option<SocketAddr>,
    /// The listening address text for a unix socket (`unix:/path`).
    pub listen_text: Arc<str>,
    /// Its `worker_connections` slot, given back when the connection ends
    /// (a tunnel it became included).
    pub slot: Option<crate::net::slots::Slot>,
    /// Whether it speaks TLS.
    pub tls: ConnTls,
    /// What its PROXY protocol header said (`listen ... proxy_protocol`).
    pub proxy: Option<Box<crate::net::proxy_protocol::Addrs>>,
    /// The request being handled proxies with `proxy_ignore_client_abort
    /// on`: a client that goes away does not end it (HTTP/1).
    pub ignore_abort: std::sync::atomic::AtomicBool,
}

/// A connection's TLS, as the `$ssl_*` variables see it.
#[derive(Debug, Default)]
pub enum ConnTls {
    /// A plain listener.
    #[default]
    None,
    /// Plain HTTP sent to a TLS listener (answered 497).
    Plain,
    Tls(Box<crate::net::tls::Details>),
}

impl ConnInfo {
    /// The TLS details, when it speaks TLS.
    pub fn tls(&self) -> Option<&crate::net::tls::Details> {
        match &self.tls {
            ConnTls::Tls(d) => Some(d),
            _ => None,
        }
    }
}

/// One upstream attempt, for the `$upstream_*` variables.
#[derive(Debug, Clone, Default)]
pub struct Attempt {
    /// `ip:port`, or the upstream's name when no peer was available.
    pub addr: Arc<str>,
    pub status: Option<u16>,
    pub connect: Option<Duration>,
    pub header: Option<Duration>,
    pub response: Option<Duration>,
    pub length: Option<u64>,
    pub received: u64,
    pub sent: u64,
}

/// An upstream attempt under way (see `UpstreamLog::in_flight`).
#[derive(Debug)]
pub struct InFlight {
    pub addr: Arc<str>,
    pub connect: Duration,
    pub began: std::time::Instant,
    /// The request's head and body, once written.
    pub sent: u64,
}

/// The upstream side of a request; shared with the body that streams the
/// upstream's response, which finishes the last attempt's figures.
#[derive(Debug, Default)]
pub struct UpstreamLog {
    /// One in place: most requests make one attempt.
    pub attempts: smallvec::SmallVec<[Attempt; 1]>,
    /// How long the request waited for peers before its first attempt
    /// (a `resolve` name's first answer).
    pub queued: Option<Duration>,
    /// The upstream's response headers as received (`$upstream_http_*`,
    /// `$upstream_cookie_*`), kept only when something reads them.
    pub headers: Option<crate::h1::head::Headers>,
    /// The zone upstreams whose time histograms count the attempts: each
    /// with the index of its first attempt (an `X-Accel-Redirect` may go
    /// on to another upstream).
    pub histograms: Vec<Histograms>,
    /// The attempt under way once connected: recorded by
    /// `proxy::abandoned` if the client goes first.
    pub in_flight: Option<InFlight>,
}

/// A zone upstream's time histograms, and its first attempt's index.
pub struct Histograms {
    pub zone: std::sync::Arc<crate::upstream::Zone>,
    pub upstream: usize,
    pub from: usize,
}

impl std::fmt::Debug for Histograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Histograms({}, {}, {})",
            self.zone.name, self.upstream, self.from
        )
    }
}

impl UpstreamLog {
    /// Counts the attempts' connect, header and response times into their
    /// upstreams' histograms (once, when the request ends).
    pub fn observe(&self) {
        use crate::upstream::zone::Timing;
        for (n, h) in self.histograms.iter().enumerate() {
            let to = self
                .histograms
                .get(n + 1)
                .map_or(self.attempts.len(), |x| x.from);
            for a in self.attempts.get(h.from..to).unwrap_or_default() {
                for (t, d) in [
                    (Timing::Connect, a.connect),
                    (Timing::Header, a.header),
                    (Timing::Response, a.response),
                ] {
                    if let Some(d) = d {
                        h.zone.observe(h.upstream, t, d);
                    }
                }
            }
        }
    }

    /// The attempts from here on are `ups`'s (counted in its histograms if
    /// it has a zone).
    pub fn upstream(&mut self, ups: &crate::upstream::UpstreamRt) {
        if let (Some(zone), Some(upstream)) = (ups.zone(), ups.zone_index()) {
            self.histograms.push(Histograms {
                zone: zone.clone(),
                upstream,
                from: self.attempts.len(),
            });
        }
    }
}

/// `$proxy_host` before a `proxy_pass` set it: one empty string per thread,
/// shared, so that a request does not allocate one.
pub fn no_proxy_host() -> std::sync::Arc<str> {
    thread_local! {
        static EMPTY: std::sync::Arc<str> = std::sync::Arc::from("");
    }
    EMPTY.with(std::sync::Arc::clone)
}

/// One request, owned: it outlives the handler to write the access log.
pub struct Req {
    pub conn: Arc<ConnInfo>,
    pub start: Instant,
    pub method: Method,
    pub version: Version,
    /// The path and query as received (`$request_uri`): a slice of the
    /// request's own bytes, not a copy.
    pub request_uri: http::uri::PathAndQuery,
    /// The normalized path (`$uri`).
    pub uri: String,
    pub args: Option<String>,
    pub headers: crate::h1::head::Headers,
    /// `Host` without the port, lowercased, else the server's name (`$host`).
    pub host: String,
    /// The request named its host (Host, `:authority` or an absolute URI):
    /// a redirect then names it, else the address it came to (nginx's
    /// `headers_in.server`).
    pub host_given: bool,
    pub server_name: Arc<str>,
    pub conf: Arc<LocConf>,
    pub status: u16,
    pub body_bytes_sent: u64,
    pub bytes_sent: u64,
    pub request_length: u64,
    pub proxy_host: std::sync::Arc<str>,
    pub proxy_port: u16,
    pub upstream: Arc<Mutex<UpstreamLog>>,
    /// Variables `set` assigned.
    pub vars: Vec<(String, String)>,
    /// The captures of the last regex that matched (`$0`..`$9`).
    pub captures: Vec<String>,
    /// A `rewrite` changed `$uri`: the proxy then sends it, not `$request_uri`.
    pub uri_changed: bool,
    /// `try_files` found the URI under a regex location's `alias`: the
    /// file is the alias and the URI (nginx's `add_uri_to_alias`).
    pub add_uri_to_alias: bool,
    /// An `if` that held had a `proxy_pass` of its own: its location's
    /// pass is the request's.
    pub if_pass: Option<Arc<crate::conf::model::Location>>,
    /// The client address the realip module found, replacing the peer's
    /// (port 0 when it came from a header, as nginx: `$remote_port` empty).
    pub realip: Option<std::net::SocketAddr>,
    /// The `map` variables evaluated so far.
    pub maps: MapCache,
    /// `$request_id`, made when first asked for.
    pub request_id: std::sync::OnceLock<String>,
    /// `$connection_requests`.
    pub conn_requests: u64,
    /// The response headers sent, kept for `$sent_http_NAME` when an access
    /// log asks for them.
    pub sent_headers: Option<http::HeaderMap>,
    /// What `limit_req` and `limit_conn` decided, and the connections the
    /// request holds (released when it ends).
    pub limits: super::limit::State,
    /// The compressed body's sizes, for `$gzip_ratio`.
    pub gzip_ratio: Option<Arc<super::gzip::Ratio>>,
    /// The client's body, when a proxied request read it into memory
    /// (`$request_body`; none for one spooled to a file, as nginx).
    pub request_body: Option<bytes::Bytes>,
    /// `$request_body_file`: the body's file with
    /// `client_body_in_file_only`.
    pub request_body_file: Option<String>,
    /// `auth_basic`'s challenge, sent with a 401.
    pub www_authenticate: Option<String>,
    /// An `auth_request` subrequest: no access phase, its upstream's
    /// headers kept for `auth_request_set`.
    pub subrequest: bool,
    /// The upstream's `X-Accel-Limit-Rate` (bytes per second), unless
    /// ignored: it overrides `limit_rate`.
    pub accel_limit_rate: Option<u64>,
    /// The response went out whole (`$request_completion`), known when
    /// its body ends.
    pub completed: bool,
    /// The proxied response's headers that go on as the upstream sent
    /// them (`proxy::headers_as_received`), set with the response it
    /// belongs to and written before the response's map.
    pub as_received: Option<crate::h1::head::AsReceived>,
}

impl Evaluator for Req {
    fn maps(&self) -> &MapCache {
        &self.maps
    }

    fn text(&self, t: &Template, caps: Option<&Captures>) -> String {
        match caps {
            None => self.eval(t),
            Some(_) => crate::conf::map::eval_with_captures(t, caps, |v| self.value(v)),
        }
    }

    fn assigned(&self, name: &str) -> Option<String> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    fn cycle(&self, name: &str) {
        crate::log_conn!(
            crate::log::Level::Error,
            self.conn.number,
            "cycle while evaluating variable \"{}\"{}",
            name,
            self.log_context(None)
        );
    }
}

fn secs(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{}.{:03}", d.as_secs(), d.subsec_millis()),
        None => "-".to_string(),
    }
}

/// What a request is made from: who asked, for what, and where it is
/// served. Everything else a request carries starts fresh (`Req::new`):
/// the request from a client, a subrequest and the tests' requests share
/// that start.
pub struct Asked {
    pub conn: Arc<ConnInfo>,
    pub method: Method,
    pub version: Version,
    pub request_uri: http::uri::PathAndQuery,
    pub uri: String,
    pub args: Option<String>,
    pub headers: crate::h1::head::Headers,
    pub host: String,
    pub host_given: bool,
    pub server_name: Arc<str>,
    pub conf: Arc<LocConf>,
    pub conn_requests: u64,
}

impl Req {
    /// A request begun now: what `asked` says, and nothing done yet (no
    /// status, no bytes counted, no upstream, no variables set). Always
    /// inlined: the client's request is written straight into its box
    /// (`pipeline::handle`), where a call returned it on the stack and
    /// copied its 880 bytes in (scripts/cost: some 240 instructions).
    #[inline(always)]
    pub fn new(asked: Asked) -> Req {
        let Asked {
            conn,
            method,
            version,
            request_uri,
            uri,
            args,
            headers,
            host,
            host_given,
            server_name,
            conf,
            conn_requests,
        } = asked;
        Req {
            conn,
            start: crate::net::clock::now(),
            method,
            version,
            request_uri,
            uri,
            args,
            headers,
            host,
            host_given,
            server_name,
            conf,
            conn_requests,
            status: 0,
            body_bytes_sent: 0,
            bytes_sent: 0,
            request_length: 0,
            proxy_host: no_proxy_host(),
            proxy_port: 0,
            upstream: Arc::default(),
            vars: Vec::new(),
            captures: Vec::new(),
            uri_changed: false,
            add_uri_to_alias: false,
            if_pass: None,
            realip: None,
            maps: Default::default(),
            request_id: Default::default(),
            sent_headers: None,
            limits: Default::default(),
            gzip_ratio: None,
            request_body: None,
            request_body_file: None,
            www_authenticate: None,
            subrequest: false,
            accel_limit_rate: None,
            completed: false,
            as_received: None,
        }
    }
}

impl Req {
    /// Gives the variable `name` (one `set` declares, or a regex's named
    /// capture) the value `v`.
    pub fn set_var(&mut self, name: &str, v: String) {
        match self.vars.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = v,
            None => self.vars.push((name.to_string(), v)),
        }
    }

    /// What a regex that matched leaves, as nginx's `ngx_http_regex_exec`:
    /// its named captures as variables, and its numbered ones for `$N` when
    /// it has any (a regex without groups leaves the last ones in place).
    pub fn set_captures(&mut self, re: &regex::Regex, caps: &regex::Captures<'_>) {
        for name in re.capture_names().flatten() {
            let v = caps.name(name).map(|m| m.as_str().to_string());
            self.set_var(name, v.unwrap_or_default());
        }
        if re.captures_len() > 1 {
            self.captures = caps
                .iter()
                .map(|m| m.map(|m| m.as_str().to_string()).unwrap_or_default())
                .collect();
        }
    }

    /// An `if` or `rewrite` regex that did not match: the numbered
    /// captures are gone, as nginx sets their count to 0 then (named ones
    /// stay, as its variables do).
    pub fn forget_captures(&mut self) {
        self.captures.clear();
    }

    pub fn protocol(&self) -> &'static str {
        match self.version {
            Version::HTTP_10 => "HTTP/1.0",
            Version::HTTP_2 => "HTTP/2.0",
            Version::HTTP_09 => "HTTP/0.9",
            _ => "HTTP/1.1",
        }
    }

    /// The client's address: the realip module's, else the connection's peer.
    pub fn client_ip(&self) -> Option<std::net::IpAddr> {
        self.realip.or(self.conn.remote).map(|a| a.ip())
    }

    /// The file the URI maps to under `root` (path + URI) or `alias` (the
    /// location prefix replaced).
    pub fn filename(&self) -> std::path::PathBuf {
        // A regex location's `alias` is the file itself (but what
        // `try_files` found there).
        if self.conf.root.whole && !self.add_uri_to_alias {
            return self.root_dir();
        }
        self.filename_of(&self.uri)
    }

    /// The `root` or `alias` path: with variables, evaluated now (a
    /// relative value under the prefix, as nginx has it).
    pub fn root_dir(&self) -> std::path::PathBuf {
        let root = &self.conf.root;
        match &root.vars {
            None => root.path.clone(),
            Some(t) => {
                use std::os::unix::ffi::OsStrExt;
                let v = self.eval(t);
                let v = std::ffi::OsStr::from_bytes(&crate::octets::bytes(&v)).to_os_string();
                root.path.join(v)
            }
        }
    }

    /// The file a URI maps to under this location's `root` or `alias`
    /// (`try_files` names go after a regex location's `alias` whole, as
    /// nginx puts them).
    pub fn filename_of(&self, uri: &str) -> std::path::PathBuf {
        let root = &self.conf.root;
        let rel = match &root.alias {
            Some(prefix) if !root.whole => uri.strip_prefix(prefix.as_str()).unwrap_or(uri),
            _ => uri,
        };
        let mut p = self.root_dir().into_os_string();
        if root.alias.is_some()
            && !rel.is_empty()
            && !rel.starts_with('/')
            && !p.to_string_lossy().ends_with('/')
        {
            p.push("/");
        }
        // The bytes the URI stands for: a Latin-1 name is opened as such.
        p.push(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&crate::octets::bytes(
                rel,
            )),
        );
        std::path::PathBuf::from(p)
    }

    /// `$request`: the request line.
    pub fn request_line(&self) -> String {
        format!("{} {} {}", self.method, self.request_uri, self.protocol())
    }

    /// The context nginx appends to request errors: client, server, request,
    /// upstream (when given) and host.
    pub fn log_context(&self, upstream: Option<&str>) -> String {
        let mut s = format!(
            ", client: {}, server: {}, request: \"{}\"",
            self.client_ip()
                .map(|a| a.to_string())
                .unwrap_or_else(|| "unix:".into()),
            self.server_name,
            self.request_line()
        );
        if let Some(u) = upstream {
            s.push_str(&format!(", upstream: \"{u}\""));
        }
        if let Some(h) = self
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
        {
            s.push_str(&format!(", host: \"{h}\""));
        }
        s
    }

    pub fn header(&self, name: &str) -> Option<String> {
        // $http_x_forwarded_for matches X-Forwarded-For: `_` stands for `-`.
        let wanted = name.replace('_', "-");
        let mut vals = self
            .headers
            .get_all(wanted.as_str())
            .filter_map(|v| v.to_str().ok());
        let first = vals.next()?;
        let mut s = first.to_string();
        // nginx joins repeated headers (cookies with "; ", others with ", ").
        let sep = if wanted == "cookie" { "; " } else { ", " };
        for v in vals {
            s.push_str(sep);
            s.push_str(v);
        }
        Some(s)
    }

    pub(super) fn arg(&self, name: &str) -> Option<String> {
        self.args
            .as_deref()?
            .split('&')
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_string())
    }

    fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("cookie")
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }

    fn upstream_list(&self, f: impl Fn(&Attempt) -> String) -> String {
        let u = self.upstream.lock().unwrap_or_else(|e| e.into_inner());
        u.attempts.iter().map(f).collect::<Vec<_>>().join(", ")
    }

    pub fn value(&self, v: &Var) -> String {
        let c = &self.conn;
        match v {
            Var::Args => self.args.clone().unwrap_or_default(),
            Var::Connection => c.number.to_string(),
            Var::Host => self.host.clone(),
            Var::Hostname => nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Var::IsArgs => if self.args.is_some() { "?" } else { "" }.to_string(),
            Var::Msec => {
                let d = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                format!("{}.{:03}", d.as_secs(), d.subsec_millis())
            }
            Var::Pid => std::process::id().to_string(),
            Var::RemoteAddr => self
                .client_ip()
                .map(|a| a.to_string())
                .unwrap_or_else(|| "unix:".into()),
            Var::RealipRemoteAddr => c
                .remote
                .map(|a| a.ip().to_string())
                .unwrap_or_else(|| "unix:".into()),
            Var::RemotePort => self
                .realip
                .or(c.remote)
                .map(|a| a.port())
                .filter(|p| *p > 0)
                .map(|p| p.to_string())
                .unwrap_or_default(),
            Var::RealipRemotePort => c.remote.map(|a| a.port().to_string()).unwrap_or_default(),
            Var::ProxyProtocolAddr => c
                .proxy
                .as_ref()
                .map_or_else(String::new, |p| p.src_addr.clone()),
            Var::ProxyProtocolPort => c.proxy.as_ref().map_or_else(String::new, |p| {
                crate::net::proxy_protocol::Addrs::port_text(p.src_port)
            }),
            Var::ProxyProtocolServerAddr => c
                .proxy
                .as_ref()
                .map_or_else(String::new, |p| p.dst_addr.clone()),
            Var::ProxyProtocolServerPort => c.proxy.as_ref().map_or_else(String::new, |p| {
                crate::net::proxy_protocol::Addrs::port_text(p.dst_port)
            }),
            Var::ProxyProtocolTlv(k) => match c.proxy.as_ref().map(|p| p.tlv(*k)) {
                None | Some(Ok(None)) => String::new(),
                Some(Ok(Some(v))) => String::from_utf8_lossy(&v).into_owned(),
                Some(Err(_)) => {
                    crate::log_conn!(
                        crate::log::Level::Error,
                        c.number,
                        "broken PROXY protocol TLV{}",
                        self.log_context(None)
                    );
                    String::new()
                }
            },
            Var::BinaryRemoteAddr => crate::net::vars::binary_addr(self.client_ip()),
            Var::Request => self.request_line(),
            Var::RequestMethod => self.method.to_string(),
            Var::RequestUri => self.request_uri.to_string(),
            Var::Scheme => if c.tls().is_some() { "https" } else { "http" }.to_string(),
            Var::Https => if c.tls().is_some() { "on" } else { "" }.to_string(),
            Var::Http2 => match (self.version, c.tls().is_some()) {
                (Version::HTTP_2, true) => "h2",
                (Version::HTTP_2, false) => "h2c",
                _ => "",
            }
            .to_string(),
            Var::SslProtocol
            | Var::SslCipher
            | Var::SslServerName
            | Var::SslSessionReused
            | Var::SslClientVerify
            | Var::SslClientSDn
            | Var::SslClientIDn
            | Var::SslClientSerial
            | Var::SslClientFingerprint
            | Var::SslClientEscapedCert
            | Var::SslClientCert
            | Var::SslClientRawCert
            | Var::SslAlpnProtocol => c.tls().and_then(|t| t.value(v)).unwrap_or_default(),
            Var::ServerAddr => c
                .local
                .map(|a| a.ip().to_string())
                .unwrap_or_else(|| c.listen_text.to_string()),
            Var::ServerName => self.server_name.to_string(),
            Var::ServerPort => c.local.map(|a| a.port().to_string()).unwrap_or_default(),
            Var::ServerProtocol => self.protocol().to_string(),
            Var::TimeLocal => chrono::Local::now()
                .format("%d/%b/%Y:%H:%M:%S %z")
                .to_string(),
            Var::TimeIso8601 => chrono::Local::now()
                .format("%Y-%m-%dT%H:%M:%S%:z")
                .to_string(),
            Var::Uri => self.uri.clone(),
            Var::Http(h) => self.header(h).unwrap_or_default(),
            Var::Arg(a) => self.arg(a).unwrap_or_default(),
            Var::Cookie(k) => self.cookie(k).unwrap_or_default(),
            Var::RemoteUser => self
                .headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| super::htpasswd::basic_credentials(v.as_bytes()))
                .map(|(u, _)| String::from_utf8_lossy(&u).into_owned())
                .unwrap_or_default(),
            Var::GzipRatio => self
                .gzip_ratio
                .as_ref()
                .map(|r| r.text())
                .unwrap_or_default(),
            Var::Status => format!("{:03}", self.status),
            Var::BodyBytesSent => self.body_bytes_sent.to_string(),
            Var::BytesSent => self.bytes_sent.to_string(),
            Var::RequestLength => self.request_length.to_string(),
            Var::RequestBody => self
                .request_body
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
            Var::RequestBodyFile => self.request_body_file.clone().unwrap_or_default(),
            Var::RequestTime => secs(Some(crate::net::clock::since(self.start))),
            Var::ProxyHost => self.proxy_host.to_string(),
            Var::ProxyPort => self.proxy_port.to_string(),
            Var::ProxyAddXForwardedFor => {
                let addr = self.value(&Var::RemoteAddr);
                match self.header("x_forwarded_for") {
                    Some(x) => format!("{x}, {addr}"),
                    None => addr,
                }
            }
            Var::UpstreamAddr => self.upstream_list(|a| a.addr.to_string()),
            Var::UpstreamStatus => {
                self.upstream_list(|a| a.status.map_or("-".into(), |s| s.to_string()))
            }
            Var::UpstreamConnectTime => self.upstream_list(|a| secs(a.connect)),
            Var::UpstreamQueueTime => {
                let u = self.upstream.lock().unwrap_or_else(|e| e.into_inner());
                // The first attempt waited; the retries did not.
                (0..u.attempts.len())
                    .map(|i| match i {
                        0 => secs(Some(u.queued.unwrap_or_default())),
                        _ => secs(Some(Duration::ZERO)),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }
            Var::UpstreamHeaderTime => self.upstream_list(|a| secs(a.header)),
            Var::UpstreamResponseTime => self.upstream_list(|a| secs(a.response)),
            // A number for every attempt, 0 for one that brought no body
            // (nginx has no `-` here, unlike the times).
            Var::UpstreamResponseLength => {
                self.upstream_list(|a| a.length.unwrap_or(0).to_string())
            }
            Var::UpstreamBytesReceived => self.upstream_list(|a| a.received.to_string()),
            // Stream variables: nothing in an HTTP request.
            Var::UpstreamFirstByteTime
            | Var::UpstreamSessionTime
            | Var::BytesReceived
            | Var::SessionTime
            | Var::SslPrereadServerName
            | Var::SslPrereadAlpnProtocols
            | Var::SslPrereadProtocol
            | Var::Protocol => String::new(),
            Var::UpstreamBytesSent => self.upstream_list(|a| a.sent.to_string()),
            Var::LimitReqStatus => self.limits.req_status.unwrap_or_default().to_string(),
            Var::LimitConnStatus => self.limits.conn_status.unwrap_or_default().to_string(),
            Var::Map(m) => crate::conf::map::value(self, m),
            Var::User(name) => match self
                .vars
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                // A named capture of a map regex.
                .or_else(|| self.maps.named(name))
            {
                // nginx keeps what `set $limit_rate` gave as a number.
                Some(v) if name == "limit_rate" => {
                    crate::conf::values::parse_size(v.trim()).map_or(v, |n| n.to_string())
                }
                Some(v) => v,
                None if name == "limit_rate" => self.accel_limit_rate.map_or_else(
                    || {
                        // `limit_rate $limit_rate` reads as 0, not forever.
                        let t = self
                            .conf
                            .limit_rate
                            .as_ref()
                            .filter(|t| !crate::conf::rate::reads_itself(t));
                        crate::conf::rate::size(t, |t| self.eval(t)).to_string()
                    },
                    |n| n.to_string(),
                ),
                None => {
                    if self.conf.uninitialized_variable_warn {
                        crate::log_conn!(
                            crate::log::Level::Warn,
                            self.conn.number,
                            "using uninitialized \"{}\" variable{}",
                            name,
                            self.log_context(None)
                        );
                    }
                    String::new()
                }
            },
            Var::FastcgiScriptName => super::fastcgi::split_path(self).0,
            Var::FastcgiPathInfo => super::fastcgi::split_path(self).1,
            Var::RequestFilename => {
                use std::os::unix::ffi::OsStrExt;
                crate::octets::text(self.filename().as_os_str().as_bytes()).into_owned()
            }
            Var::DocumentRoot => self.root_dir().to_string_lossy().into_owned(),
            Var::RealpathRoot => std::fs::canonicalize(self.root_dir())
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Var::RequestId => self
                .request_id
                .get_or_init(|| {
                    use crate::upstream::random::next_u64;
                    format!("{:016x}{:016x}", next_u64(), next_u64())
                })
                .clone(),
            Var::ConnectionRequests => self.conn_requests.to_string(),
            Var::RequestCompletion => if self.completed { "OK" } else { "" }.to_string(),
            Var::SentHttp(h) => self
                .sent_headers
                .as_ref()
                .map(|m| {
                    let name = h.replace('_', "-");
                    let vals: Vec<&str> = m
                        .get_all(name.as_str())
                        .iter()
                        .filter_map(|v| v.to_str().ok())
                        .collect();
                    vals.join(if name == "cookie" { "; " } else { ", " })
                })
                .unwrap_or_default(),
            Var::Capture(i) => self.captures.get(*i).cloned().unwrap_or_default(),
            Var::NginxVersion => crate::NGINX_VERSION.to_string(),
            Var::ConnectionsActive
            | Var::ConnectionsReading
            | Var::ConnectionsWriting
            | Var::ConnectionsWaiting => super::status::connections_var(v),
            Var::UpstreamCookie(name) => {
                let u = self.upstream.lock().unwrap_or_else(|e| e.into_inner());
                u.headers
                    .as_ref()
                    .and_then(|hm| super::vars_more::set_cookie_value(hm, name))
                    .unwrap_or_default()
            }
            Var::UpstreamHttp(h) => {
                let u = self.upstream.lock().unwrap_or_else(|e| e.into_inner());
                let name = h.replace('_', "-");
                u.headers
                    .as_ref()
                    .and_then(|hm| hm.get(name.as_str()))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string()
            }
        }
    }

    /// Evaluates a text; `escape` writes each variable's value (given the
    /// variable too).
    pub fn eval_with(&self, t: &Template, escape: impl Fn(&Var, &str, &mut String)) -> String {
        let mut out = String::new();
        for s in &t.segments {
            match s {
                Segment::Lit(l) => out.push_str(l),
                Segment::Var(v) => escape(v, &self.value(v), &mut out),
            }
        }
        out
    }

    pub fn eval(&self, t: &Template) -> String {
        if let Some(l) = t.as_literal() {
            return l.to_string();
        }
        self.eval_with(t, |_, v, out| out.push_str(v))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::conf::vars::compile;

    pub(crate) fn req() -> Req {
        let conn = Arc::new(ConnInfo {
            number: 7,
            remote: Some("127.0.0.2:5555".parse().unwrap()),
            local: Some("127.0.0.1:8080".parse().unwrap()),
            listen_text: Arc::from(""),
            slot: None,
            tls: Default::default(),
            proxy: None,
            ignore_abort: Default::default(),
        });
        let headers = crate::h1::head::Headers::from_pairs([
            ("X-Forwarded-For", "1.2.3.4"),
            ("x-forwarded-for", "5.6.7.8"),
            ("Cookie", "a=1; b=2"),
        ]);
        let d = crate::conf::loc::Defaults {
            prefix: "/".into(),
            combined: crate::conf::http::combined(),
        };
        let mut r = Req::new(Asked {
            conn,
            method: Method::GET,
            version: Version::HTTP_11,
            request_uri: http::uri::PathAndQuery::from_static("/p?x=1&y=2"),
            uri: "/p".into(),
            args: Some("x=1&y=2".into()),
            headers,
            host: "example.com".into(),
            host_given: true,
            server_name: "srv".into(),
            conf: Arc::new(crate::conf::loc::LocB::default().finish(&d)),
            conn_requests: 1,
        });
        r.status = 200;
        r.proxy_host = "backend".into();
        r.proxy_port = 80;
        r
    }

    #[test]
    fn evaluates() {
        let r = req();
        let t = compile("$remote_addr:$remote_port $server_addr:$server_port $connection $request $arg_y $cookie_b [$http_x_forwarded_for] $host$is_args$args $server_name $status").unwrap();
        assert_eq!(
            r.eval(&t),
            "127.0.0.2:5555 127.0.0.1:8080 7 GET /p?x=1&y=2 HTTP/1.1 2 2 [1.2.3.4, 5.6.7.8] example.com?x=1&y=2 srv 200"
        );
        let t = compile("$proxy_add_x_forwarded_for").unwrap();
        assert_eq!(r.eval(&t), "1.2.3.4, 5.6.7.8, 127.0.0.2");
    }

    #[test]
    fn upstream_lists() {
        let r = req();
        {
            let mut u = r.upstream.lock().unwrap();
            u.attempts.push(Attempt {
                addr: "127.0.0.1:1".into(),
                status: Some(502),
                connect: None,
                ..Attempt::default()
            });
            u.attempts.push(Attempt {
                addr: "127.0.0.1:2".into(),
                status: Some(200),
                connect: Some(Duration::from_millis(1)),
                ..Attempt::default()
            });
        }
        let t = compile("$upstream_addr|$upstream_status|$upstream_connect_time").unwrap();
        assert_eq!(r.eval(&t), "127.0.0.1:1, 127.0.0.1:2|502, 200|-, 0.001");
        r.upstream.lock().unwrap().queued = Some(Duration::from_millis(1250));
        let t = compile("$upstream_queue_time").unwrap();
        assert_eq!(r.eval(&t), "1.250, 0.000");
    }
}
