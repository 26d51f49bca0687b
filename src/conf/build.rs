//! The directive table: each directive's name, the contexts it may appear in, its
//! arity and its setter, as nginx's `ngx_command_t` lists do. `build` walks the
//! tree through the table into a typed `Config`. No I/O except resolving
//! `listen` host names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::model::*;
use super::tree::{Directive, Files, full_name};
use super::values::{parse_flag, parse_time};
use super::{ConfError, Paths, Src, vars};
use crate::log::{Level, LogSpec, Target};

const MAIN: u8 = 1;
const EVENTS: u8 = 2;
const HTTP: u8 = 4;
const SRV: u8 = 8;
const LOC: u8 = 16;

#[derive(Clone, Copy)]
enum Args {
    Exactly(usize),
    Range(usize, usize),
    AtLeast(usize),
}

impl Args {
    fn fits(self, n: usize) -> bool {
        match self {
            Args::Exactly(k) => n == k,
            Args::Range(a, b) => (a..=b).contains(&n),
            Args::AtLeast(k) => n >= k,
        }
    }
}

/// The object a directive sets, one per context.
enum Node<'a> {
    Main(&'a mut MainB),
    Events(&'a mut Events, &'a mut bool),
    Http(&'a mut Http),
    Server(&'a mut ServerB),
    Location(&'a mut Location),
}

type Setter = fn(&mut Builder, &Directive, &mut Node<'_>) -> Result<(), ConfError>;

struct Spec {
    name: &'static str,
    ctx: u8,
    args: Args,
    block: bool,
    set: Setter,
}

const TABLE: &[Spec] = &[
    Spec {
        name: "worker_processes",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_worker_processes,
    },
    Spec {
        name: "pid",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_pid,
    },
    Spec {
        name: "error_log",
        ctx: MAIN | HTTP | SRV | LOC,
        args: Args::Range(1, 2),
        block: false,
        set: set_error_log,
    },
    Spec {
        name: "daemon",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_main_flag,
    },
    Spec {
        name: "master_process",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_main_flag,
    },
    Spec {
        name: "user",
        ctx: MAIN,
        args: Args::Range(1, 2),
        block: false,
        set: set_user,
    },
    Spec {
        name: "worker_rlimit_nofile",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_rlimit_nofile,
    },
    Spec {
        name: "worker_shutdown_timeout",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_shutdown_timeout,
    },
    Spec {
        name: "events",
        ctx: MAIN,
        args: Args::Exactly(0),
        block: true,
        set: set_events,
    },
    Spec {
        name: "worker_connections",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_worker_connections,
    },
    Spec {
        name: "use",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_ignored_event,
    },
    Spec {
        name: "multi_accept",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_ignored_event,
    },
    Spec {
        name: "accept_mutex",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_ignored_event,
    },
    Spec {
        name: "accept_mutex_delay",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_ignored_event,
    },
    Spec {
        name: "worker_aio_requests",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_ignored_event,
    },
    Spec {
        name: "debug_connection",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_ignored_event,
    },
    Spec {
        name: "http",
        ctx: MAIN,
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
    Spec {
        name: "return",
        ctx: SRV | LOC,
        args: Args::Range(1, 2),
        block: false,
        set: set_return,
    },
];

#[derive(Default)]
struct MainB {
    worker_processes: Option<usize>,
    pid: Option<PathBuf>,
    error_log: Vec<LogSpec>,
    daemon: Option<bool>,
    master_process: Option<bool>,
    user: Option<User>,
    worker_rlimit_nofile: Option<u64>,
    worker_shutdown_timeout: Option<Duration>,
    events: Option<Events>,
    http: Option<Http>,
}

struct ServerB {
    server: Server,
    names_set: bool,
}

struct Builder<'p> {
    paths: &'p Paths,
    warnings: Vec<ConfError>,
}

/// Builds the typed configuration. `syntax_err` is the first syntax error met while
/// reading; an error from a directive read before it is reported first, as nginx
/// does. Warnings are returned with the config for the caller to log.
pub fn build_with_warnings(
    paths: &Paths,
    dirs: Vec<Directive>,
    files: Files,
    syntax_err: Option<ConfError>,
) -> Result<(Config, Vec<ConfError>), ConfError> {
    let mut b = Builder {
        paths,
        warnings: Vec::new(),
    };
    let mut main = MainB::default();
    b.walk(&dirs, &mut Node::Main(&mut main), MAIN)?;
    if let Some(e) = syntax_err {
        return Err(e);
    }
    let events = main
        .events
        .take()
        .ok_or_else(|| ConfError::bare("no \"events\" section in configuration"))?;
    if let Some(http) = &main.http {
        check_listen_conflicts(http)?;
    }
    let error_log = if main.error_log.is_empty() {
        vec![LogSpec {
            // Without `error_log` in the file, nginx keeps logging where `-e` pointed.
            target: paths.error_log.clone(),
            level: Level::Error,
        }]
    } else {
        main.error_log
    };
    let cfg = Config {
        prefix: paths.prefix.clone(),
        conf_file: paths.conf_file.clone(),
        files,
        main: Main {
            worker_processes: main.worker_processes.unwrap_or(1),
            pid: main
                .pid
                .unwrap_or_else(|| full_name(&paths.prefix, "logs/nginx.pid")),
            error_log,
            daemon: main.daemon.unwrap_or(true),
            master_process: main.master_process.unwrap_or(true),
            user: main.user.unwrap_or(User {
                user: "nobody".into(),
                group: None,
            }),
            worker_rlimit_nofile: main.worker_rlimit_nofile,
            worker_shutdown_timeout: main.worker_shutdown_timeout,
        },
        events,
        http: main.http,
    };
    Ok((cfg, b.warnings))
}

impl Builder<'_> {
    fn walk(&mut self, dirs: &[Directive], node: &mut Node<'_>, ctx: u8) -> Result<(), ConfError> {
        for d in dirs {
            let Some(spec) = TABLE.iter().find(|s| s.name == d.name) else {
                return Err(ConfError::at(
                    format!("unknown directive \"{}\"", d.name),
                    &d.src,
                ));
            };
            if spec.ctx & ctx == 0 {
                return Err(ConfError::at(
                    format!("\"{}\" directive is not allowed here", d.name),
                    &d.src,
                ));
            }
            if spec.block && d.block.is_none() {
                return Err(ConfError::at(
                    format!("directive \"{}\" has no opening \"{{\"", d.name),
                    &d.src,
                ));
            }
            if !spec.block && d.block.is_some() {
                return Err(ConfError::at(
                    format!("directive \"{}\" is not terminated by \";\"", d.name),
                    &d.src,
                ));
            }
            if !spec.args.fits(d.args.len()) {
                return Err(ConfError::at(
                    format!("invalid number of arguments in \"{}\" directive", d.name),
                    &d.src,
                ));
            }
            (spec.set)(self, d, node)?;
        }
        Ok(())
    }

    fn path(&self, s: &str) -> PathBuf {
        full_name(&self.paths.prefix, s)
    }
}

fn duplicate(d: &Directive) -> ConfError {
    ConfError::at(format!("\"{}\" directive is duplicate", d.name), &d.src)
}

fn invalid_value(d: &Directive) -> ConfError {
    ConfError::at(format!("\"{}\" directive invalid value", d.name), &d.src)
}

fn not_here(d: &Directive) -> ConfError {
    ConfError::at(
        format!("\"{}\" directive is not allowed here", d.name),
        &d.src,
    )
}

fn set_once<T>(slot: &mut Option<T>, v: T, d: &Directive) -> Result<(), ConfError> {
    if slot.is_some() {
        return Err(duplicate(d));
    }
    *slot = Some(v);
    Ok(())
}

fn flag(d: &Directive) -> Result<bool, ConfError> {
    parse_flag(&d.args[0]).ok_or_else(|| {
        ConfError::at(
            format!(
                "invalid value \"{}\" in \"{}\" directive, it must be \"on\" or \"off\"",
                d.args[0], d.name
            ),
            &d.src,
        )
    })
}

fn set_worker_processes(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    let v = if d.args[0] == "auto" {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    } else {
        match d.args[0].parse::<usize>() {
            Ok(v) if v >= 1 && d.args[0].bytes().all(|b| b.is_ascii_digit()) => v,
            _ => {
                return Err(ConfError::at(
                    format!(
                        "invalid value \"{}\" in \"worker_processes\" directive",
                        d.args[0]
                    ),
                    &d.src,
                ));
            }
        }
    };
    set_once(&mut m.worker_processes, v, d)
}

fn set_pid(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    let p = b.path(&d.args[0]);
    set_once(&mut m.pid, p, d)
}

fn set_error_log(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let target = match d.args[0].as_str() {
        "stderr" => Target::Stderr,
        t if t.starts_with("syslog:") || t.starts_with("memory:") => {
            return Err(ConfError::at(
                format!("error_log target \"{t}\" is not supported, use a file or stderr"),
                &d.src,
            ));
        }
        t => Target::File(b.path(t)),
    };
    let level = match d.args.get(1) {
        None => Level::Error,
        Some(l) => Level::parse(l)
            .ok_or_else(|| ConfError::at(format!("invalid log level \"{l}\""), &d.src))?,
    };
    let spec = LogSpec { target, level };
    let list = match n {
        Node::Main(m) => &mut m.error_log,
        Node::Http(h) => &mut h.error_log,
        Node::Server(s) => &mut s.server.error_log,
        Node::Location(l) => &mut l.error_log,
        Node::Events(..) => return Err(not_here(d)),
    };
    if list.iter().any(|s| s.target == spec.target) {
        return Err(duplicate(d));
    }
    list.push(spec);
    Ok(())
}

fn set_main_flag(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    let v = flag(d)?;
    let slot = if d.name == "daemon" {
        &mut m.daemon
    } else {
        &mut m.master_process
    };
    set_once(slot, v, d)
}

fn set_user(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    let u = User {
        user: d.args[0].clone(),
        group: d.args.get(1).cloned(),
    };
    set_once(&mut m.user, u, d)
}

fn set_rlimit_nofile(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    let v = d.args[0]
        .parse::<u64>()
        .ok()
        .filter(|_| d.args[0].bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| ConfError::at(format!("invalid number \"{}\"", d.args[0]), &d.src))?;
    set_once(&mut m.worker_rlimit_nofile, v, d)
}

fn set_shutdown_timeout(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    let v = parse_time(&d.args[0], true).ok_or_else(|| invalid_value(d))?;
    set_once(&mut m.worker_shutdown_timeout, v, d)
}

fn set_events(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    if m.events.is_some() {
        return Err(duplicate(d));
    }
    let mut ev = Events {
        worker_connections: 512,
    };
    let mut wc_set = false;
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Events(&mut ev, &mut wc_set),
        EVENTS,
    )?;
    m.events = Some(ev);
    Ok(())
}

fn set_worker_connections(
    _: &mut Builder,
    d: &Directive,
    n: &mut Node<'_>,
) -> Result<(), ConfError> {
    let Node::Events(ev, set) = n else {
        return Err(not_here(d));
    };
    if **set {
        return Err(duplicate(d));
    }
    ev.worker_connections = match d.args[0].parse::<usize>() {
        Ok(v) if v >= 1 && d.args[0].bytes().all(|b| b.is_ascii_digit()) => v,
        _ => {
            return Err(ConfError::at(
                format!("invalid number \"{}\"", d.args[0]),
                &d.src,
            ));
        }
    };
    **set = true;
    Ok(())
}

/// Event-loop tuning that has no meaning under tokio: checked as nginx checks it,
/// then ignored with a warning.
fn set_ignored_event(b: &mut Builder, d: &Directive, _: &mut Node<'_>) -> Result<(), ConfError> {
    let a = &d.args[0];
    let ok = match d.name.as_str() {
        "use" => {
            if !matches!(a.as_str(), "epoll" | "poll" | "select") {
                return Err(ConfError::at(format!("invalid event type \"{a}\""), &d.src));
            }
            true
        }
        "multi_accept" | "accept_mutex" => {
            flag(d)?;
            true
        }
        "accept_mutex_delay" => parse_time(a, true).is_some(),
        "worker_aio_requests" => a.parse::<u32>().is_ok(),
        _ => true,
    };
    if !ok {
        return Err(invalid_value(d));
    }
    b.warnings.push(ConfError::at(
        format!(
            "the \"{}\" directive is ignored: sluice's event loop needs no tuning",
            d.name
        ),
        &d.src,
    ));
    Ok(())
}

fn set_http(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    if m.http.is_some() {
        return Err(duplicate(d));
    }
    let mut http = Http {
        servers: Vec::new(),
        error_log: Vec::new(),
    };
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Http(&mut http),
        HTTP,
    )?;
    m.http = Some(http);
    Ok(())
}

fn set_server(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Http(h) = n else {
        return Err(not_here(d));
    };
    let mut sb = ServerB {
        server: Server {
            listen: Vec::new(),
            server_name: Vec::new(),
            primary_name: String::new(),
            ret: None,
            locations: Vec::new(),
            error_log: Vec::new(),
            src: d.src.clone(),
        },
        names_set: false,
    };
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Server(&mut sb),
        SRV,
    )?;
    let mut s = sb.server;
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
            backlog: 511,
            src: d.src.clone(),
        });
    }
    h.servers.push(s);
    Ok(())
}

fn parse_listen_addr(a: &str) -> Result<Vec<ListenAddr>, String> {
    if let Some(p) = a.strip_prefix("unix:") {
        if p.is_empty() {
            return Err(format!("no path in the unix domain socket \"{a}\""));
        }
        return Ok(vec![ListenAddr::Unix(PathBuf::from(p))]);
    }
    let bad_port = || format!("invalid port in \"{a}\"");
    if let Some(rest) = a.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("invalid IPv6 address in \"{a}\""))?;
        let ip: Ipv6Addr = host
            .parse()
            .map_err(|_| format!("invalid IPv6 address in \"{a}\""))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| bad_port())?,
            None if after.is_empty() => 80,
            None => return Err(format!("invalid IPv6 address in \"{a}\"")),
        };
        return Ok(vec![ListenAddr::Inet(SocketAddr::new(
            IpAddr::V6(ip),
            port,
        ))]);
    }
    if a.bytes().all(|b| b.is_ascii_digit()) {
        let port = a.parse::<u16>().map_err(|_| bad_port())?;
        return Ok(vec![ListenAddr::Inet(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        ))]);
    }
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad_port())?),
        None => (a, 80),
    };
    if port == 0 {
        return Err(bad_port());
    }
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

fn set_listen(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Server(s) = n else {
        return Err(not_here(d));
    };
    let addrs = parse_listen_addr(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    let mut default_server = false;
    let mut reuseport = false;
    let mut backlog = 511;
    for p in &d.args[1..] {
        match p.as_str() {
            "default_server" | "default" => default_server = true,
            "reuseport" => reuseport = true,
            "ssl" => {
                return Err(ConfError::at(
                    "the \"ssl\" parameter requires ngx_http_ssl_module",
                    &d.src,
                ));
            }
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
    if reuseport && matches!(addrs.first(), Some(ListenAddr::Unix(_))) {
        return Err(ConfError::at(
            "reuseport is not supported on unix sockets",
            &d.src,
        ));
    }
    for addr in addrs {
        if s.server.listen.iter().any(|l| l.addr == addr) {
            return Err(ConfError::at(format!("duplicate listen {addr}"), &d.src));
        }
        s.server.listen.push(Listen {
            addr,
            default_server,
            reuseport,
            backlog,
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
            s.server.primary_name = name.clone();
            s.names_set = true;
        }
        s.server.server_name.push(sn);
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
    let mut loc = Location {
        modifier,
        uri,
        regex,
        ret: None,
        locations: Vec::new(),
        error_log: Vec::new(),
        src: d.src.clone(),
    };
    // Where a location may stand, as nginx checks it.
    let siblings = match n {
        Node::Server(s) => &mut s.server.locations,
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
    let same_kind = |m: Modifier| match m {
        Modifier::Prefix | Modifier::PrefixNoRegex => 0,
        Modifier::Exact => 1,
        Modifier::Regex | Modifier::RegexCaseless => 2,
        Modifier::Named => 3,
    };
    if siblings.iter().any(|o| {
        o.uri == loc.uri && same_kind(o.modifier) == same_kind(modifier) && same_kind(modifier) != 2
    }) {
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

fn set_return(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let slot = match n {
        Node::Server(s) => &mut s.server.ret,
        Node::Location(l) => &mut l.ret,
        _ => return Err(not_here(d)),
    };
    let compile = |t: &str| vars::compile(t).map_err(|m| ConfError::at(m, &d.src));
    let first = &d.args[0];
    let ret = match first.parse::<u16>() {
        Ok(code) if first.bytes().all(|b| b.is_ascii_digit()) => {
            if code > 999 {
                return Err(ConfError::at(
                    format!("invalid return code \"{first}\""),
                    &d.src,
                ));
            }
            Return {
                code,
                text: d.args.get(1).map(|t| compile(t)).transpose()?,
            }
        }
        _ => {
            if d.args.len() == 2 {
                return Err(ConfError::at(
                    format!("invalid return code \"{first}\""),
                    &d.src,
                ));
            }
            let is_url = first.starts_with("http://")
                || first.starts_with("https://")
                || first.starts_with("$scheme");
            if !is_url {
                return Err(ConfError::at(
                    format!("invalid return code \"{first}\""),
                    &d.src,
                ));
            }
            Return {
                code: 302,
                text: Some(compile(first)?),
            }
        }
    };
    // Like nginx, a later `return` in the same block is never reached; keep the first.
    if slot.is_none() {
        *slot = Some(ret);
    }
    Ok(())
}

/// Two servers may share an address only when at most one is its default.
fn check_listen_conflicts(http: &Http) -> Result<(), ConfError> {
    let mut defaults: Vec<(&ListenAddr, &Src)> = Vec::new();
    for s in &http.servers {
        for l in s.listen.iter().filter(|l| l.default_server) {
            if defaults.iter().any(|(a, _)| *a == &l.addr) {
                return Err(ConfError::at(
                    format!("a duplicate default server for {}", l.addr),
                    &l.src,
                ));
            }
            defaults.push((&l.addr, &l.src));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::tree::TreeParser;
    use std::path::Path;
    use std::sync::Arc;

    fn paths() -> Paths {
        Paths {
            prefix: PathBuf::from("/pfx/"),
            conf_file: PathBuf::from("/pfx/conf/t.conf"),
            globals: None,
            error_log: Target::File(PathBuf::from("/pfx/logs/error.log")),
        }
    }

    fn try_build(text: &str) -> Result<(Config, Vec<ConfError>), ConfError> {
        let mut files = Files::default();
        let mut tp = TreeParser::new(Path::new("/pfx/conf"), &mut files);
        let (d, e) = tp.parse_text(text, Some(Arc::new(PathBuf::from("/t.conf"))));
        build_with_warnings(&paths(), d, files, e)
    }

    fn err(text: &str) -> String {
        try_build(text).map(|_| ()).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let (c, w) = try_build("events {}").unwrap();
        assert!(w.is_empty());
        assert_eq!(c.main.worker_processes, 1);
        assert_eq!(c.main.pid, PathBuf::from("/pfx/logs/nginx.pid"));
        assert!(c.main.daemon && c.main.master_process);
        assert_eq!(c.events.worker_connections, 512);
        assert_eq!(c.main.error_log[0].level, Level::Error);
        assert_eq!(c.main.user.user, "nobody");
    }

    #[test]
    fn main_directives() {
        let (c, _) = try_build(
            "worker_processes 3; pid run/x.pid; daemon off; master_process off;\n\
             error_log stderr info; error_log /a.log; user www group; worker_rlimit_nofile 1000;\n\
             worker_shutdown_timeout 1m30s; events { worker_connections 99; }",
        )
        .unwrap();
        assert_eq!(c.main.worker_processes, 3);
        assert_eq!(c.main.pid, PathBuf::from("/pfx/run/x.pid"));
        assert!(!c.main.daemon && !c.main.master_process);
        assert_eq!(c.main.error_log.len(), 2);
        assert_eq!(c.main.error_log[0].level, Level::Info);
        assert_eq!(c.main.user.group.as_deref(), Some("group"));
        assert_eq!(c.main.worker_rlimit_nofile, Some(1000));
        assert_eq!(
            c.main.worker_shutdown_timeout,
            Some(Duration::from_secs(90))
        );
        assert_eq!(c.events.worker_connections, 99);
    }

    #[test]
    fn nginx_error_wording() {
        assert_eq!(
            err("events {}\nfoo bar;"),
            "unknown directive \"foo\" in /t.conf:2"
        );
        assert_eq!(
            err("events {}\npid a;\npid b;"),
            "\"pid\" directive is duplicate in /t.conf:3"
        );
        assert_eq!(
            err("events { pid a; }"),
            "\"pid\" directive is not allowed here in /t.conf:1"
        );
        assert_eq!(
            err("events {}\ndaemon;"),
            "invalid number of arguments in \"daemon\" directive in /t.conf:2"
        );
        assert_eq!(
            err("events {}\ndaemon yes;"),
            "invalid value \"yes\" in \"daemon\" directive, it must be \"on\" or \"off\" in /t.conf:2"
        );
        assert_eq!(
            err("events {}\nworker_shutdown_timeout 10x;"),
            "\"worker_shutdown_timeout\" directive invalid value in /t.conf:2"
        );
        assert_eq!(
            err("events {\n"),
            "unexpected end of file, expecting \"}\" in /t.conf:1"
        );
        assert_eq!(err("daemon off;"), "no \"events\" section in configuration");
        assert_eq!(
            err("events;"),
            "directive \"events\" has no opening \"{\" in /t.conf:1"
        );
        assert_eq!(
            err("events {} daemon off { }"),
            "directive \"daemon\" is not terminated by \";\" in /t.conf:1"
        );
        assert_eq!(
            err("events {} events {}"),
            "\"events\" directive is duplicate in /t.conf:1"
        );
        assert_eq!(
            err("events {}\nerror_log x.log verbose;"),
            "invalid log level \"verbose\" in /t.conf:2"
        );
        assert_eq!(
            err("events { use kqueue; }"),
            "invalid event type \"kqueue\" in /t.conf:1"
        );
        assert_eq!(
            err("events {}\nworker_processes 0;"),
            "invalid value \"0\" in \"worker_processes\" directive in /t.conf:2"
        );
    }

    #[test]
    fn directive_error_before_later_syntax_error() {
        assert_eq!(
            err("events {}\nbogus;\nhttp {\n"),
            "unknown directive \"bogus\" in /t.conf:2"
        );
    }

    #[test]
    fn ignored_events_warn() {
        let (_, w) = try_build("events { use epoll; multi_accept on; }").unwrap();
        assert_eq!(w.len(), 2);
        assert!(w[0].to_string().contains("\"use\" directive is ignored"));
    }

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
        assert_eq!(s.primary_name, "example.com");
        assert_eq!(s.locations.len(), 4);
        assert_eq!(s.locations[0].locations.len(), 1);
        assert_eq!(s.locations[1].modifier, Modifier::Exact);
        assert!(s.locations[2].regex.as_ref().unwrap().is_match("/A.png"));
        assert_eq!(s.ret.as_ref().unwrap().code, 302);
    }

    #[test]
    fn http_errors() {
        let e = |s: &str| err(&format!("events {{}}\nhttp {{\nserver {{\n{s}\n}}\n}}"));
        assert_eq!(
            e("listen 127.0.0.1:99999;"),
            "invalid port in \"127.0.0.1:99999\" in /t.conf:4"
        );
        assert_eq!(
            e("listen 80 ssl;"),
            "the \"ssl\" parameter requires ngx_http_ssl_module in /t.conf:4"
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
