//! The http, server and location contexts: `http`, `server`, `listen`,
//! `server_name`, `location`, `return`, and the finishing pass that merges
//! settings down the levels (nginx's merge), resolves `proxy_pass` targets and
//! checks what spans servers. Pure except for resolving `listen` host names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, duplicate, not_here};
use super::loc::{Defaults, Escape, LocB, LogFormat};
use super::model::*;
use super::proxy::{ProxyPassB, UpstreamB};
use super::tree::Directive;
use super::values::{self, HostPortError};
use super::{ConfError, Paths, Src, vars};
use crate::log::LogSpec;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "http",
        ctx: super::build::MAIN,
        args: Args::Exactly(0),
        block: true,
        set: set_http,
    },
    Spec {
        name: "server",
        ctx: HTTP,
        args: Args::Exactly(0),
        block: true,
        set: set_server,
    },
    Spec {
        name: "listen",
        ctx: SRV,
        args: Args::AtLeast(1),
        block: false,
        set: set_listen,
    },
    Spec {
        name: "server_name",
        ctx: SRV,
        args: Args::AtLeast(1),
        block: false,
        set: set_server_name,
    },
    Spec {
        name: "location",
        ctx: SRV | LOC,
        args: Args::Range(1, 2),
        block: true,
        set: set_location,
    },
];

#[derive(Default)]
pub(super) struct HttpB {
    pub(super) settings: LocB,
    /// The `grpc_*` settings: the `proxy_*` ones of a `grpc_pass` location.
    pub(super) grpc: LocB,
    /// The `fastcgi_*` settings that mean what their `proxy_*` namesakes do.
    pub(super) fcgi: LocB,
    pub(super) ssl: super::ssl::SslB,
    pub(super) error_log: Vec<LogSpec>,
    pub(super) servers: Vec<ServerB>,
    pub(super) upstreams: Vec<UpstreamB>,
    /// `match` blocks.
    pub(super) matches: Vec<Arc<super::health::Match>>,
    /// `metrics_buckets` (ms).
    pub(super) metrics_buckets: Option<Vec<u32>>,
}

pub(super) struct ServerB {
    pub(super) settings: LocB,
    pub(super) grpc: LocB,
    pub(super) fcgi: LocB,
    pub(super) ssl: super::ssl::SslB,
    pub(super) error_log: Vec<LogSpec>,
    pub(super) listen: Vec<Listen>,
    pub(super) server_name: Vec<ServerName>,
    pub(super) primary_name: String,
    pub(super) names_set: bool,
    pub(super) script: Vec<Stmt>,
    pub(super) locations: Vec<LocationB>,
    pub(super) try_files: Option<Arc<super::try_files::TryFiles>>,
    pub(super) src: Src,
}

pub(super) struct LocationB {
    pub(super) settings: LocB,
    pub(super) grpc: LocB,
    pub(super) fcgi: LocB,
    pub(super) error_log: Vec<LogSpec>,
    pub(super) modifier: Modifier,
    pub(super) uri: String,
    pub(super) regex: Option<regex::Regex>,
    pub(super) script: Vec<Stmt>,
    pub(super) proxy_pass: Option<ProxyPassB>,
    pub(super) proxy_pass_var: Option<super::vars::Template>,
    /// `fastcgi_pass`: the pass speaks FastCGI.
    pub(super) fastcgi: bool,
    /// `api` or `stub_status`.
    pub(super) handler: Option<Handler>,
    pub(super) locations: Vec<LocationB>,
    pub(super) try_files: Option<Arc<super::try_files::TryFiles>>,
    pub(super) internal: bool,
    pub(super) health_check: Option<super::health::HealthCheckB>,
    pub(super) src: Src,
    /// The `if` blocks with settings of their own (`Stmt::If`'s `conf`
    /// indexes them).
    pub(super) if_locs: Vec<LocationB>,
    /// This is such a block (an `if` in it is one of the rewrite module's
    /// only).
    pub(super) is_if: bool,
}

impl LocationB {
    /// A location with nothing set yet.
    fn new(modifier: Modifier, uri: String, regex: Option<regex::Regex>, src: Src) -> LocationB {
        LocationB {
            settings: LocB::default(),
            grpc: LocB::default(),
            fcgi: LocB::default(),
            error_log: Vec::new(),
            modifier,
            uri,
            regex,
            script: Vec::new(),
            proxy_pass: None,
            proxy_pass_var: None,
            fastcgi: false,
            handler: None,
            locations: Vec::new(),
            try_files: None,
            internal: false,
            health_check: None,
            src,
            if_locs: Vec::new(),
            is_if: false,
        }
    }

    /// An `if` block of `parent` with settings of its own.
    pub(super) fn for_if(parent: &LocationB, src: Src) -> LocationB {
        LocationB {
            is_if: true,
            ..LocationB::new(parent.modifier, parent.uri.clone(), None, src)
        }
    }
}

/// nginx's predefined `combined` format.
pub fn combined() -> Arc<LogFormat> {
    let text = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";
    Arc::new(LogFormat::new(
        "combined".into(),
        Escape::Default,
        vars::compile(text).unwrap_or(vars::Template {
            segments: Vec::new(),
        }),
    ))
}

fn set_http(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    if m.http_is_set() {
        return Err(duplicate(d));
    }
    let mut http = HttpB::default();
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Http(&mut http),
        HTTP,
    )?;
    m.set_http(http);
    Ok(())
}

fn set_server(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Http(h) = n else {
        return Err(not_here(d));
    };
    let mut s = ServerB {
        settings: LocB::default(),
        grpc: LocB::default(),
        fcgi: LocB::default(),
        ssl: super::ssl::SslB::default(),
        error_log: Vec::new(),
        listen: Vec::new(),
        server_name: Vec::new(),
        primary_name: String::new(),
        names_set: false,
        script: Vec::new(),
        locations: Vec::new(),
        try_files: None,
        src: d.src.clone(),
    };
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Server(&mut s),
        SRV,
    )?;
    if s.listen.is_empty() {
        // nginx's default: *:80 as root, *:8000 otherwise.
        let port = if nix::unistd::geteuid().is_root() {
            80
        } else {
            8000
        };
        s.listen.push(Listen {
            addr: ListenAddr::Inet(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)),
            default_server: false,
            reuseport: false,
            ssl: false,
            http2: false,
            backlog: 511,
            proxy_protocol: false,
            sock: Default::default(),
            src: d.src.clone(),
        });
    }
    h.servers.push(s);
    Ok(())
}

pub(super) fn parse_listen_addr(a: &str) -> Result<Vec<ListenAddr>, String> {
    if let Some(p) = a.strip_prefix("unix:") {
        if p.is_empty() {
            return Err(format!("no path in the unix domain socket \"{a}\""));
        }
        return Ok(vec![ListenAddr::Unix(PathBuf::from(p))]);
    }
    let bad_port = || format!("invalid port in \"{a}\"");
    let bad_v6 = || format!("invalid IPv6 address in \"{a}\"");
    // A bare number is a port on every address, as `listen 8080`.
    if a.bytes().all(|b| b.is_ascii_digit()) {
        let port = values::parse_port(a).ok_or_else(bad_port)?;
        return Ok(vec![ListenAddr::Inet(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        ))]);
    }
    let hp = values::split_host_port(a).map_err(|e| match e {
        HostPortError::InvalidPort => bad_port(),
        HostPortError::InvalidIpv6 => bad_v6(),
    })?;
    let port = hp.port.unwrap_or(80);
    if hp.written.starts_with('[') {
        let ip: Ipv6Addr = hp.host.parse().map_err(|_| bad_v6())?;
        return Ok(vec![ListenAddr::Inet(SocketAddr::new(
            IpAddr::V6(ip),
            port,
        ))]);
    }
    let host = hp.host;
    if host == "*" {
        return Ok(vec![ListenAddr::Inet(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        ))]);
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(vec![ListenAddr::Inet(SocketAddr::new(
            IpAddr::V4(ip),
            port,
        ))]);
    }
    // A host name: every address it has at start-up, as nginx binds them all.
    let mut v: Vec<ListenAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|_| format!("host not found in \"{a}\" of the \"listen\" directive"))?
        .map(ListenAddr::Inet)
        .collect();
    v.dedup();
    if v.is_empty() {
        return Err(format!(
            "host not found in \"{a}\" of the \"listen\" directive"
        ));
    }
    Ok(v)
}

fn set_listen(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Server(s) = n else {
        return Err(not_here(d));
    };
    let addrs = parse_listen_addr(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    let mut default_server = false;
    let mut reuseport = false;
    let mut ssl = false;
    let mut http2 = false;
    let mut proxy_protocol = false;
    let mut backlog = 511;
    let mut sock = super::listen_opts::SockParams::default();
    for p in &d.args[1..] {
        if super::listen_opts::sock_param(p, &mut sock, true, d)? {
            continue;
        }
        match p.as_str() {
            "default_server" | "default" => default_server = true,
            "reuseport" => reuseport = true,
            "ssl" => ssl = true,
            "http2" => {
                http2 = true;
                b.warnings.push(ConfError::at(
                    "the \"listen ... http2\" directive is deprecated, use the \"http2\" directive instead",
                    &d.src,
                ));
            }
            "proxy_protocol" => proxy_protocol = true,
            _ if p.starts_with("backlog=") => {
                backlog = p["backlog=".len()..]
                    .parse::<i32>()
                    .ok()
                    .filter(|b| *b > 0)
                    .ok_or_else(|| {
                        ConfError::at(format!("invalid backlog \"{}\"", &p[8..]), &d.src)
                    })?;
            }
            _ => {
                return Err(ConfError::at(format!("invalid parameter \"{p}\""), &d.src));
            }
        }
    }
    if ssl && matches!(addrs.first(), Some(ListenAddr::Unix(_))) {
        return Err(ConfError::at(
            "\"ssl\" on unix sockets is not supported yet",
            &d.src,
        ));
    }
    if reuseport && matches!(addrs.first(), Some(ListenAddr::Unix(_))) {
        return Err(ConfError::at(
            "reuseport is not supported on unix sockets",
            &d.src,
        ));
    }
    for addr in addrs {
        if s.listen.iter().any(|l| l.addr == addr) {
            return Err(ConfError::at(format!("duplicate listen {addr}"), &d.src));
        }
        s.listen.push(Listen {
            addr,
            default_server,
            reuseport,
            ssl,
            http2,
            backlog,
            proxy_protocol,
            sock,
            src: d.src.clone(),
        });
    }
    Ok(())
}

fn set_server_name(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Server(s) = n else {
        return Err(not_here(d));
    };
    for a in &d.args {
        let name = if a == "$hostname" {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            a.clone()
        };
        let sn = if let Some(re) = name.strip_prefix('~') {
            let r = regex::Regex::new(re)
                .map_err(|e| ConfError::at(format!("regex \"{re}\" is invalid: {e}"), &d.src))?;
            ServerName::Regex(r)
        } else {
            let lower = name.to_ascii_lowercase();
            let stars = lower.matches('*').count();
            if let Some(sfx) = lower.strip_prefix("*.") {
                if stars != 1 || sfx.is_empty() {
                    return Err(invalid_server_name(a, d));
                }
                ServerName::Front {
                    suffix: format!(".{sfx}"),
                    bare_too: false,
                }
            } else if let Some(pfx) = lower.strip_suffix(".*") {
                if stars != 1 || pfx.is_empty() {
                    return Err(invalid_server_name(a, d));
                }
                ServerName::Back(format!("{pfx}."))
            } else if stars > 0 {
                return Err(invalid_server_name(a, d));
            } else if lower.starts_with('.') && lower.len() > 1 {
                ServerName::Front {
                    suffix: lower,
                    bare_too: true,
                }
            } else {
                ServerName::Exact(lower)
            }
        };
        if !s.names_set {
            s.primary_name = name.clone();
            s.names_set = true;
        }
        s.server_name.push(sn);
    }
    Ok(())
}

fn invalid_server_name(a: &str, d: &Directive) -> ConfError {
    ConfError::at(format!("invalid server name or wildcard \"{a}\""), &d.src)
}

fn set_location(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let (modifier, uri) = if d.args.len() == 2 {
        let m = match d.args[0].as_str() {
            "=" => Modifier::Exact,
            "^~" => Modifier::PrefixNoRegex,
            "~" => Modifier::Regex,
            "~*" => Modifier::RegexCaseless,
            other => {
                return Err(ConfError::at(
                    format!("invalid location modifier \"{other}\""),
                    &d.src,
                ));
            }
        };
        (m, d.args[1].clone())
    } else {
        let a = &d.args[0];
        if let Some(u) = a.strip_prefix('=') {
            (Modifier::Exact, u.to_string())
        } else if let Some(u) = a.strip_prefix("^~") {
            (Modifier::PrefixNoRegex, u.to_string())
        } else if let Some(u) = a.strip_prefix("~*") {
            (Modifier::RegexCaseless, u.to_string())
        } else if let Some(u) = a.strip_prefix('~') {
            (Modifier::Regex, u.to_string())
        } else if a.starts_with('@') {
            (Modifier::Named, a.clone())
        } else {
            (Modifier::Prefix, a.clone())
        }
    };
    if uri.is_empty() {
        return Err(ConfError::at("empty location", &d.src));
    }
    let regex =
        match modifier {
            Modifier::Regex | Modifier::RegexCaseless => {
                let re = if modifier == Modifier::RegexCaseless {
                    format!("(?i){uri}")
                } else {
                    uri.clone()
                };
                Some(regex::Regex::new(&re).map_err(|e| {
                    ConfError::at(format!("regex \"{uri}\" is invalid: {e}"), &d.src)
                })?)
            }
            _ => None,
        };
    let mut loc = LocationB::new(modifier, uri, regex, d.src.clone());
    // Where a location may stand, as nginx checks it.
    let siblings = match n {
        Node::Server(s) => &mut s.locations,
        Node::Location(parent) => {
            if modifier == Modifier::Named {
                return Err(ConfError::at(
                    format!(
                        "named location \"{}\" can be on the server level only",
                        loc.uri
                    ),
                    &d.src,
                ));
            }
            if parent.modifier == Modifier::Exact {
                return Err(ConfError::at(
                    format!(
                        "location \"{}\" cannot be inside the exact location \"{}\"",
                        loc.uri, parent.uri
                    ),
                    &d.src,
                ));
            }
            if parent.modifier == Modifier::Named {
                return Err(ConfError::at(
                    format!(
                        "location \"{}\" cannot be inside the named location \"{}\"",
                        loc.uri, parent.uri
                    ),
                    &d.src,
                ));
            }
            let plain_parent =
                matches!(parent.modifier, Modifier::Prefix | Modifier::PrefixNoRegex);
            let plain_child = matches!(
                modifier,
                Modifier::Prefix | Modifier::PrefixNoRegex | Modifier::Exact
            );
            if plain_parent && plain_child && !loc.uri.starts_with(&parent.uri) {
                return Err(ConfError::at(
                    format!(
                        "location \"{}\" is outside location \"{}\"",
                        loc.uri, parent.uri
                    ),
                    &d.src,
                ));
            }
            &mut parent.locations
        }
        _ => return Err(not_here(d)),
    };
    let kind = |m: Modifier| match m {
        Modifier::Prefix | Modifier::PrefixNoRegex => 0,
        Modifier::Exact => 1,
        Modifier::Regex | Modifier::RegexCaseless => 2,
        Modifier::Named => 3,
    };
    if siblings
        .iter()
        .any(|o| o.uri == loc.uri && kind(o.modifier) == kind(modifier) && kind(modifier) != 2)
    {
        return Err(ConfError::at(
            format!("duplicate location \"{}\"", loc.uri),
            &d.src,
        ));
    }
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Location(&mut loc),
        LOC,
    )?;
    siblings.push(loc);
    Ok(())
}

/// Two servers may share an address only when at most one is its default.
/// Two servers may share an address only when at most one is its default.
fn check_listen_conflicts(servers: &[ServerB]) -> Result<(), ConfError> {
    let mut defaults: Vec<&ListenAddr> = Vec::new();
    for s in servers {
        for l in s.listen.iter().filter(|l| l.default_server) {
            if defaults.contains(&&l.addr) {
                return Err(ConfError::at(
                    format!("a duplicate default server for {}", l.addr),
                    &l.src,
                ));
            }
            defaults.push(&l.addr);
        }
    }
    Ok(())
}

/// Merges settings down the levels, resolves `proxy_pass` targets (creating
/// implicit upstreams) and produces the finished `Http`.
pub(super) fn finish(
    h: HttpB,
    paths: &Paths,
    warnings: &mut Vec<ConfError>,
) -> Result<Http, ConfError> {
    check_listen_conflicts(&h.servers)?;
    let defaults = Defaults {
        prefix: paths.prefix.clone(),
        combined: combined(),
    };
    let (mut upstreams, zones) = super::proxy::finish_upstreams(h.upstreams, &h.settings)?;
    let mut access_log_paths: Vec<PathBuf> = Vec::new();
    let mut temp_paths: Vec<PathBuf> = Vec::new();
    let mut servers = Vec::with_capacity(h.servers.len());
    let mut loaded = super::ssl::Loaded::default();
    let mut profiles = super::proxy_ssl::Profiles::default();
    for mut s in h.servers {
        s.settings.inherit(&h.settings);
        s.grpc.inherit(&h.grpc);
        s.fcgi.inherit(&h.fcgi);
        s.ssl.inherit(&h.ssl);
        let ssl_listen = s.listen.iter().find(|l| l.ssl).map(|l| &l.src);
        let ssl = Arc::new(super::ssl::finish(
            &s.ssl,
            ssl_listen,
            &mut loaded,
            warnings,
        )?);
        let conf = Arc::new(s.settings.finish(&defaults));
        note_logs(&conf, &mut access_log_paths);
        note_temps(&conf, &mut temp_paths);
        let mut locations = Vec::with_capacity(s.locations.len());
        for l in s.locations {
            locations.push(finish_location(
                l,
                (&s.settings, &s.grpc, &s.fcgi),
                &defaults,
                &mut upstreams,
                &mut Notes {
                    logs: &mut access_log_paths,
                    temps: &mut temp_paths,
                    profiles: &mut profiles,
                    warnings,
                    matches: &h.matches,
                },
            )?);
        }
        servers.push(Server {
            listen: s.listen,
            server_name: s.server_name,
            primary_name: s.primary_name.into(),
            script: s.script,
            locations,
            error_log: s.error_log,
            conf,
            ssl,
            try_files: s.try_files,
            src: s.src,
        });
    }
    Ok(Http {
        servers,
        error_log: h.error_log,
        upstreams: UpstreamBlocks {
            list: upstreams.into_iter().map(Arc::new).collect(),
            zones,
            time_buckets: h
                .metrics_buckets
                .unwrap_or_else(|| crate::upstream::zone::DEFAULT_BOUNDS_MS.to_vec()),
        },
        access_log_paths,
        temp_paths,
    })
}

/// Collects the files and directories the master opens or creates: access
/// logs first in `paths`, temp directories in `temps`.
fn note_logs(conf: &LocConf, paths: &mut Vec<PathBuf>) {
    for p in conf.access_log.iter().map(|a| &a.path) {
        if !paths.contains(p) {
            paths.push(p.clone());
        }
    }
}

fn note_temps(conf: &LocConf, temps: &mut Vec<PathBuf>) {
    for p in conf
        .temp_paths
        .iter()
        .chain([&conf.client_body_temp_path, &conf.proxy_temp_path])
    {
        if !temps.contains(p) {
            temps.push(p.clone());
        }
    }
}

/// What finishing locations collects on the way.
struct Notes<'a> {
    logs: &'a mut Vec<PathBuf>,
    temps: &'a mut Vec<PathBuf>,
    profiles: &'a mut super::proxy_ssl::Profiles,
    warnings: &'a mut Vec<ConfError>,
    matches: &'a [Arc<super::health::Match>],
}

/// Gives each `if` of a script its settings.
fn resolve_ifs(script: &mut [Stmt], confs: &[Arc<super::model::IfBlock>]) {
    use super::model::IfConf;
    for s in script {
        if let Stmt::If { conf, body, .. } = s {
            if let Some(IfConf::Pending(i)) = conf {
                *conf = confs.get(*i).cloned().map(IfConf::Ready);
            }
            resolve_ifs(body, confs);
        }
    }
}

/// A location's settings merged from its parent's, with a `grpc_pass`'s
/// or `fastcgi_pass`'s own in place of the proxy ones.
fn merged(
    l: &mut LocationB,
    parent: (&LocB, &LocB, &LocB),
    grpc_pass: bool,
    fastcgi: bool,
    defaults: &Defaults,
) -> super::loc::LocConf {
    l.settings.inherit(parent.0);
    l.grpc.inherit(parent.1);
    l.fcgi.inherit(parent.2);
    let mut conf = l.settings.finish(defaults);
    if grpc_pass {
        conf.take_grpc(&l.grpc.finish(defaults));
    }
    if fastcgi {
        conf.take_fastcgi(&l.fcgi.finish(defaults));
    }
    conf
}

/// A location's merged settings checked as nginx checks them, shared, and
/// the log and temp files they name noted for the master to open.
fn sealed(
    conf: super::loc::LocConf,
    src: &Src,
    notes: &mut Notes<'_>,
) -> Result<Arc<super::loc::LocConf>, ConfError> {
    super::loc::check_proxy_buffers(&conf).map_err(|m| ConfError::at(m, src))?;
    super::charset::check(
        conf.charset.as_deref(),
        conf.source_charset.as_deref(),
        &conf.charset_maps,
    )
    .map_err(|m| ConfError::at(m, src))?;
    let conf = Arc::new(conf);
    note_logs(&conf, notes.logs);
    note_temps(&conf, notes.temps);
    Ok(conf)
}

fn finish_location(
    mut l: LocationB,
    parent: (&LocB, &LocB, &LocB),
    defaults: &Defaults,
    upstreams: &mut Vec<Upstream>,
    notes: &mut Notes<'_>,
) -> Result<Location, ConfError> {
    let grpc_pass = l.proxy_pass.as_ref().is_some_and(|p| p.grpc);
    let fastcgi = l.fastcgi;
    let mut conf = merged(&mut l, parent, grpc_pass, fastcgi, defaults);
    // TLS to the upstream: an https URL, or variables that may make one.
    let tls_src = match (&l.proxy_pass, &l.proxy_pass_var) {
        (Some(p), _) if p.ssl => Some(&p.src),
        (None, Some(_)) => Some(&l.src),
        _ => None,
    };
    if let Some(src) = tls_src {
        let made = notes
            .profiles
            .make(&conf, src, notes.warnings)
            .map_err(|mut e| {
                // A grpc_pass location's settings are the grpc_ssl_* ones.
                if grpc_pass {
                    e.message = e.message.replace("proxy_ssl_", "grpc_ssl_");
                }
                e
            })?;
        conf.proxy_ssl = Some(made);
    }
    let conf = sealed(conf, &l.src, notes)?;
    // An `if` block's pass takes no URI part, as a named location's.
    let modifier = if l.is_if { Modifier::Named } else { l.modifier };
    let proxy_pass = match l.proxy_pass {
        Some(p) => Some(super::proxy::resolve_proxy_pass(
            p, modifier, &l.uri, upstreams,
        )?),
        None => None,
    };
    if let Some(hc) = l.health_check.as_ref().filter(|_| l.fastcgi) {
        // Its checks would speak HTTP to a FastCGI application.
        return Err(ConfError::at(
            "\"health_check\" is not supported with \"fastcgi_pass\"",
            &hc.src,
        ));
    }
    if let Some(hc) = l.health_check {
        if hc.check.grpc.is_some() && conf.proxy_http_version != 20 {
            return Err(ConfError::at(
                "\"health_check\" type=grpc requires \"grpc_pass\" or \"proxy_http_version 2\"",
                &hc.src,
            ));
        }
        let target = proxy_pass
            .as_ref()
            .map(|p| (p.upstream, p.proxy_host.clone(), p.ssl));
        let literal = |name: &str| {
            conf.proxy_set_header
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, t)| t.as_literal().map(str::to_string))
        };
        let host = literal("host");
        let headers = super::health::check_headers(&conf.proxy_set_header);
        let tls = match (&target, &conf.proxy_ssl) {
            (Some((_, proxy_host, true)), Some(ssl)) => {
                let name = match ssl.name.as_ref() {
                    Some(t) => t.as_literal().unwrap_or(proxy_host).to_string(),
                    None => proxy_host.to_string(),
                };
                Some((ssl.clone(), name))
            }
            _ => None,
        };
        let (connect, read) = (conf.proxy_connect_timeout, conf.proxy_read_timeout);
        let h2 = conf.proxy_http_version == 20;
        super::health::attach(
            hc,
            target.as_ref().and_then(|(i, _, _)| upstreams.get_mut(*i)),
            notes.matches,
            |c| {
                c.host = host
                    .or_else(|| target.map(|(_, h, _)| h.to_string()))
                    .unwrap_or_else(|| "localhost".into());
                c.headers = headers;
                c.tls = tls;
                c.h2 = h2;
                c.connect_timeout = connect;
                c.read_timeout = read;
            },
        )?;
    }
    let mut locations = Vec::with_capacity(l.locations.len());
    for c in l.locations {
        locations.push(finish_location(
            c,
            (&l.settings, &l.grpc, &l.fcgi),
            defaults,
            upstreams,
            notes,
        )?);
    }
    // The `if` blocks with settings: the location's, with theirs on top;
    // one with a `proxy_pass` of its own is finished as a location.
    let mut if_confs = Vec::with_capacity(l.if_locs.len());
    for mut il in l.if_locs {
        if il.proxy_pass.is_some() || il.proxy_pass_var.is_some() {
            let fin = finish_location(
                il,
                (&l.settings, &l.grpc, &l.fcgi),
                defaults,
                upstreams,
                notes,
            )?;
            if_confs.push(Arc::new(super::model::IfBlock {
                conf: fin.conf.clone(),
                pass: Some(Arc::new(fin)),
            }));
            continue;
        }
        // The location's pass stays: its kind of settings and its TLS.
        let mut c = merged(
            &mut il,
            (&l.settings, &l.grpc, &l.fcgi),
            grpc_pass,
            l.fastcgi,
            defaults,
        );
        c.proxy_ssl = conf.proxy_ssl.clone();
        if_confs.push(Arc::new(super::model::IfBlock {
            conf: sealed(c, &il.src, notes)?,
            pass: None,
        }));
    }
    let mut script = l.script;
    resolve_ifs(&mut script, &if_confs);
    Ok(Location {
        modifier: l.modifier,
        uri: l.uri,
        regex: l.regex,
        script,
        locations,
        error_log: l.error_log,
        conf,
        proxy_pass,
        proxy_pass_var: l.proxy_pass_var,
        handler: l.handler,
        try_files: l.try_files,
        internal: l.internal,
        src: l.src,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testutil::{err, try_build};

    #[test]
    fn http_servers_and_locations() {
        let (c, _) = try_build(
            "events {}\nhttp {\n server { listen 127.0.0.1:8080 default_server backlog=10; listen [::1]:8081; listen unix:/tmp/s.sock;\n\
             server_name example.com *.example.org www.example.* .example.net ~^a\\d+$;\n\
             location / { return 200 \"hi $host\"; location /a { return 404; } }\n\
             location = /x { return 301 http://e/; }\n location ~* \\.PNG$ { return 403; }\n location @n { return 204; }\n\
             return https://elsewhere/;\n } }",
        )
        .unwrap();
        let http = c.http.unwrap();
        let s = &http.servers[0];
        assert_eq!(s.listen.len(), 3);
        assert!(s.listen[0].default_server);
        assert_eq!(s.listen[0].backlog, 10);
        assert_eq!(s.listen[1].addr.to_string(), "[::1]:8081");
        assert_eq!(s.server_name.len(), 5);
        assert_eq!(&*s.primary_name, "example.com");
        assert_eq!(s.locations.len(), 4);
        assert_eq!(s.locations[0].locations.len(), 1);
        assert_eq!(s.locations[1].modifier, Modifier::Exact);
        assert!(s.locations[2].regex.as_ref().unwrap().is_match("/A.png"));
        assert!(matches!(&s.script[0], Stmt::Return(r) if r.code == 302));
    }

    /// `proxy_request_buffering`: on by default, merged down the levels,
    /// its value and repetition checked with the file and line.
    #[test]
    fn proxy_request_buffering() {
        let (c, _) = try_build(
            "events {}\nhttp {\nproxy_request_buffering off;\nserver { location /a { }\n\
             location /b { proxy_request_buffering on; } }\nserver { listen 81; proxy_request_buffering on; } }",
        )
        .unwrap();
        let http = c.http.unwrap();
        let s = &http.servers[0];
        assert!(!s.conf.proxy_request_buffering);
        assert!(!s.locations[0].conf.proxy_request_buffering);
        assert!(s.locations[1].conf.proxy_request_buffering);
        assert!(http.servers[1].conf.proxy_request_buffering);
        let (c, _) = try_build("events {}\nhttp { server { location / { } } }").unwrap();
        assert!(
            c.http.unwrap().servers[0].locations[0]
                .conf
                .proxy_request_buffering
        );
        let e = |s: &str| err(&format!("events {{}}\nhttp {{\nserver {{\n{s}\n}}\n}}"));
        assert_eq!(
            e("proxy_request_buffering maybe;"),
            "invalid value \"maybe\" in \"proxy_request_buffering\" directive, it must be \"on\" or \"off\" in /t.conf:4"
        );
        assert_eq!(
            e("proxy_request_buffering on;\nproxy_request_buffering off;"),
            "\"proxy_request_buffering\" directive is duplicate in /t.conf:5"
        );
        assert_eq!(
            e("proxy_request_buffering;"),
            "invalid number of arguments in \"proxy_request_buffering\" directive in /t.conf:4"
        );
    }

    #[test]
    fn http_errors() {
        let e = |s: &str| err(&format!("events {{}}\nhttp {{\nserver {{\n{s}\n}}\n}}"));
        assert_eq!(
            e("listen 127.0.0.1:99999;"),
            "invalid port in \"127.0.0.1:99999\" in /t.conf:4"
        );
        // nginx's port rule everywhere: digits only, 1 to 65535.
        for bad in ["0", "[::1]:0", "127.0.0.1:0", "*:+80"] {
            assert_eq!(
                e(&format!("listen {bad};")),
                format!("invalid port in \"{bad}\" in /t.conf:4")
            );
        }
        assert_eq!(
            e("listen [::1]x;"),
            "invalid IPv6 address in \"[::1]x\" in /t.conf:4"
        );
        assert_eq!(
            e("listen 80 bogus;"),
            "invalid parameter \"bogus\" in /t.conf:4"
        );
        assert_eq!(
            e("server_name a*b;"),
            "invalid server name or wildcard \"a*b\" in /t.conf:4"
        );
        assert_eq!(
            e("location /a { location /b { } }"),
            "location \"/b\" is outside location \"/a\" in /t.conf:4"
        );
        assert_eq!(
            e("location = /a { location /a/b { } }"),
            "location \"/a/b\" cannot be inside the exact location \"/a\" in /t.conf:4"
        );
        assert_eq!(
            e("location /a { location @n { } }"),
            "named location \"@n\" can be on the server level only in /t.conf:4"
        );
        assert_eq!(
            e("location /a {} location /a {}"),
            "duplicate location \"/a\" in /t.conf:4"
        );
        assert_eq!(
            e("return 200 $nope;"),
            "unknown \"nope\" variable in /t.conf:4"
        );
        assert_eq!(e("return abc;"), "invalid return code \"abc\" in /t.conf:4");
        assert_eq!(e("location ~ ( { }"), e("location ~ ( { }"));
        assert!(e("location ~ ( { }").starts_with("regex \"(\" is invalid"));
        assert_eq!(
            err(
                "events {}\nhttp { server { listen 127.0.0.1:1 default_server; }\nserver { listen 127.0.0.1:1 default; } }"
            ),
            "a duplicate default server for 127.0.0.1:1 in /t.conf:3"
        );
    }
}
