//! The directive table: each directive's name, the contexts it may appear in, its
//! arity and its setter, as nginx's `ngx_command_t` lists do. `build` walks the
//! tree through the tables (this module's for the main and events contexts,
//! `http`, `loc`, `proxy` and `logs` for theirs) into a typed `Config`. No I/O.

use std::path::PathBuf;
use std::time::Duration;

use super::http::{HttpB, LocationB, ServerB};
use super::loc::LocB;
use super::model::*;
use super::proxy::UpstreamB;
use super::tree::{Directive, Files, full_name};
use super::values::{parse_flag, parse_time};
use super::{ConfError, Paths};
use crate::log::{Level, LogSpec, Target};

pub(super) const MAIN: u8 = 1;
pub(super) const EVENTS: u8 = 2;
pub(super) const HTTP: u8 = 4;
pub(super) const SRV: u8 = 8;
pub(super) const LOC: u8 = 16;
pub(super) const UPS: u8 = 32;
pub(super) const STREAM: u8 = 64;
pub(super) const SSRV: u8 = 128;

#[derive(Clone, Copy)]
pub(super) enum Args {
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
pub(super) enum Node<'a> {
    Main(&'a mut MainB),
    Events(&'a mut Events, &'a mut bool),
    Http(&'a mut HttpB),
    Server(&'a mut ServerB),
    Location(&'a mut LocationB),
    Upstream(&'a mut UpstreamB),
    If(&'a mut Vec<Stmt>),
    Stream(&'a mut super::stream::StreamB),
    StreamServer(&'a mut super::stream::StreamServerB),
    /// A level's `grpc_*` settings, which the `proxy_*` setters fill.
    Grpc(&'a mut LocB),
}

impl Node<'_> {
    /// The rewrite script of a server, location or `if` block.
    pub(super) fn script(&mut self) -> Option<&mut Vec<Stmt>> {
        match self {
            Node::Server(s) => Some(&mut s.script),
            Node::Location(l) => Some(&mut l.script),
            Node::If(body) => Some(body),
            _ => None,
        }
    }

    /// The merged settings of an http, server or location level.
    pub(super) fn loc_b(&mut self) -> Option<&mut LocB> {
        match self {
            Node::Http(h) => Some(&mut h.settings),
            Node::Server(s) => Some(&mut s.settings),
            Node::Location(l) => Some(&mut l.settings),
            Node::Grpc(g) => Some(g),
            _ => None,
        }
    }

    /// The level's `grpc_*` settings, or (`fcgi`) its `fastcgi_*` ones.
    fn side_b(&mut self, fcgi: bool) -> Option<&mut LocB> {
        match self {
            Node::Http(h) => Some(if fcgi { &mut h.fcgi } else { &mut h.grpc }),
            Node::Server(s) => Some(if fcgi { &mut s.fcgi } else { &mut s.grpc }),
            Node::Location(l) => Some(if fcgi { &mut l.fcgi } else { &mut l.grpc }),
            _ => None,
        }
    }
}

pub(super) type Setter = fn(&mut Builder, &Directive, &mut Node<'_>) -> Result<(), ConfError>;

pub(super) struct Spec {
    pub(super) name: &'static str,
    pub(super) ctx: u8,
    pub(super) args: Args,
    pub(super) block: bool,
    pub(super) set: Setter,
}

/// The directives of nginx's core modules (main, events, http and stream
/// core), to tell which sluice does not have: `missing_core`.
const NGINX_CORE: &[&str] = &[
    // main
    "daemon",
    "debug_points",
    "env",
    "error_log",
    "load_module",
    "lock_file",
    "master_process",
    "pcre_jit",
    "pid",
    "ssl_engine",
    "thread_pool",
    "timer_resolution",
    "user",
    "worker_cpu_affinity",
    "worker_priority",
    "worker_processes",
    "worker_rlimit_core",
    "worker_rlimit_nofile",
    "worker_shutdown_timeout",
    "working_directory",
    // events
    "accept_mutex",
    "accept_mutex_delay",
    "debug_connection",
    "multi_accept",
    "use",
    "worker_aio_requests",
    "worker_connections",
    // http core
    "absolute_redirect",
    "aio",
    "aio_write",
    "alias",
    "auth_delay",
    "chunked_transfer_encoding",
    "client_body_buffer_size",
    "client_body_in_file_only",
    "client_body_in_single_buffer",
    "client_body_temp_path",
    "client_body_timeout",
    "client_header_buffer_size",
    "client_header_timeout",
    "client_max_body_size",
    "connection_pool_size",
    "default_type",
    "directio",
    "directio_alignment",
    "disable_symlinks",
    "error_page",
    "etag",
    "http",
    "if_modified_since",
    "ignore_invalid_headers",
    "internal",
    "keepalive_disable",
    "keepalive_min_timeout",
    "keepalive_requests",
    "keepalive_time",
    "keepalive_timeout",
    "large_client_header_buffers",
    "limit_except",
    "limit_rate",
    "limit_rate_after",
    "lingering_close",
    "lingering_time",
    "lingering_timeout",
    "listen",
    "location",
    "log_not_found",
    "log_subrequest",
    "max_ranges",
    "merge_slashes",
    "msie_padding",
    "msie_refresh",
    "open_file_cache",
    "open_file_cache_errors",
    "open_file_cache_min_uses",
    "open_file_cache_valid",
    "output_buffers",
    "port_in_redirect",
    "postpone_output",
    "read_ahead",
    "recursive_error_pages",
    "request_pool_size",
    "reset_timedout_connection",
    "resolver",
    "resolver_timeout",
    "root",
    "satisfy",
    "send_lowat",
    "send_timeout",
    "sendfile",
    "sendfile_max_chunk",
    "server",
    "server_name",
    "server_name_in_redirect",
    "server_names_hash_bucket_size",
    "server_names_hash_max_size",
    "server_tokens",
    "subrequest_output_buffer_size",
    "tcp_nodelay",
    "tcp_nopush",
    "try_files",
    "types",
    "types_hash_bucket_size",
    "types_hash_max_size",
    "underscores_in_headers",
    "variables_hash_bucket_size",
    "variables_hash_max_size",
    // stream core
    "preread_buffer_size",
    "preread_timeout",
    "proxy_protocol_timeout",
    "stream",
];

/// The directives of nginx's core modules that sluice does not know, for
/// `-V` and the man page: everything else of the core is accepted.
pub fn missing_core() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = NGINX_CORE
        .iter()
        .copied()
        .filter(|n| !TABLES.iter().flat_map(|t| t.iter()).any(|s| s.name == *n))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Every directive table, searched in order.
/// nginx's grpc module directives that mean what their `proxy_*` namesakes
/// mean, for a `grpc_pass` location.
const GRPC_ALIASES: [&str; 26] = [
    "grpc_set_header",
    "grpc_hide_header",
    "grpc_pass_header",
    "grpc_connect_timeout",
    "grpc_read_timeout",
    "grpc_send_timeout",
    "grpc_next_upstream",
    "grpc_next_upstream_tries",
    "grpc_next_upstream_timeout",
    "grpc_buffer_size",
    "grpc_intercept_errors",
    "grpc_socket_keepalive",
    "grpc_ssl_server_name",
    "grpc_ssl_verify",
    "grpc_ssl_session_reuse",
    "grpc_ssl_name",
    "grpc_ssl_verify_depth",
    "grpc_ssl_trusted_certificate",
    "grpc_ssl_certificate",
    "grpc_ssl_certificate_key",
    "grpc_ssl_protocols",
    "grpc_ssl_ciphers",
    "grpc_ssl_crl",
    "grpc_ssl_key_log",
    "grpc_ssl_password_file",
    "grpc_ssl_conf_command",
];

/// nginx's fastcgi module directives that mean what their `proxy_*`
/// namesakes mean, for a `fastcgi_pass` location.
const FASTCGI_ALIASES: [&str; 20] = [
    "fastcgi_hide_header",
    "fastcgi_pass_header",
    "fastcgi_ignore_headers",
    "fastcgi_connect_timeout",
    "fastcgi_read_timeout",
    "fastcgi_send_timeout",
    "fastcgi_next_upstream",
    "fastcgi_next_upstream_tries",
    "fastcgi_next_upstream_timeout",
    "fastcgi_buffer_size",
    "fastcgi_buffers",
    "fastcgi_buffering",
    "fastcgi_request_buffering",
    "fastcgi_intercept_errors",
    "fastcgi_socket_keepalive",
    "fastcgi_pass_request_headers",
    "fastcgi_pass_request_body",
    "fastcgi_bind",
    "fastcgi_limit_rate",
    "fastcgi_ignore_client_abort",
];

/// The `proxy_*` directive a `grpc_*` or `fastcgi_*` one stands for, and
/// whether it is a `fastcgi_*` one.
fn side_alias(name: &str) -> Option<(String, bool)> {
    if GRPC_ALIASES.contains(&name) {
        return Some((format!("proxy_{}", &name["grpc_".len()..]), false));
    }
    FASTCGI_ALIASES
        .contains(&name)
        .then(|| (format!("proxy_{}", &name["fastcgi_".len()..]), true))
}

const TABLES: &[&[Spec]] = &[
    super::rewrite::TABLE,
    TABLE,
    super::http::TABLE,
    super::loc_table::TABLE,
    super::switches::TABLE,
    super::limit_except::TABLE,
    super::http2::TABLE,
    super::files::TABLE,
    super::proxy::TABLE,
    super::proxy_ssl::TABLE,
    super::logs::TABLE,
    super::status::TABLE,
    super::resolver::TABLE,
    super::stream::TABLE,
    super::map::TABLE,
    super::limit::TABLE,
    super::geo::TABLE,
    super::ssl::TABLE,
    super::tuning::TABLE,
    super::try_files::TABLE,
    super::worker_setup::TABLE,
    super::gzip::TABLE,
    super::charset::TABLE,
    super::allow::TABLE,
    super::health::TABLE,
    super::expires::TABLE,
    super::autoindex::TABLE,
    super::proxy_more::TABLE,
    super::auth_request::TABLE,
    super::sub_mirror::TABLE,
    super::buckets::TABLE,
    super::rate::TABLE,
    super::stream_more::TABLE,
    super::sticky::TABLE,
    super::fastcgi::TABLE,
];

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
        ctx: MAIN | HTTP | SRV | LOC | STREAM | SSRV,
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
        set: set_events_flag,
    },
    Spec {
        name: "accept_balance",
        ctx: EVENTS,
        args: Args::Exactly(1),
        block: false,
        set: set_events_flag,
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
];

#[derive(Default)]
pub(super) struct MainB {
    worker_processes: Option<usize>,
    pid: Option<PathBuf>,
    error_log: Vec<LogSpec>,
    daemon: Option<bool>,
    master_process: Option<bool>,
    user: Option<User>,
    worker_rlimit_nofile: Option<u64>,
    worker_shutdown_timeout: Option<Duration>,
    worker_setup: super::worker_setup::WorkerSetup,
    events: Option<Events>,
    http: Option<HttpB>,
    pub(super) stream: Option<super::stream::StreamB>,
}

impl MainB {
    pub(super) fn worker_setup(&mut self) -> &mut super::worker_setup::WorkerSetup {
        &mut self.worker_setup
    }
    pub(super) fn http_is_set(&self) -> bool {
        self.http.is_some()
    }
    pub(super) fn set_http(&mut self, h: HttpB) {
        self.http = Some(h);
    }
}

pub(super) struct Builder<'p> {
    pub(super) paths: &'p Paths,
    pub(super) warnings: Vec<ConfError>,
    /// `log_format`s so far, `combined` first.
    pub(super) log_formats: Vec<std::sync::Arc<super::loc::LogFormat>>,
    /// The stream block's `log_format`s.
    pub(super) stream_log_formats: Vec<std::sync::Arc<super::loc::LogFormat>>,
    /// `map` blocks read so far, each with its variable.
    pub(super) maps: Vec<(std::sync::Arc<super::vars::MapVar>, super::map::Map)>,
    /// `ssl_session_cache shared:NAME:SIZE` zones so far.
    pub(super) ssl_zones: Vec<(String, u64)>,
    /// `limit_req_zone` and `limit_conn_zone` so far, and the zones the
    /// `limit_*` directives name.
    pub(super) limit_zones: Vec<super::limit::LimitZoneSpec>,
    pub(super) limit_uses: Vec<super::limit::ZoneUse>,
    /// `access_log ... buffer=` settings by file, http and stream alike.
    pub(super) log_buffers: Vec<(std::path::PathBuf, crate::log::files::Buffering)>,
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
        log_formats: vec![super::http::combined()],
        stream_log_formats: Vec::new(),
        maps: Vec::new(),
        ssl_zones: Vec::new(),
        limit_zones: Vec::new(),
        limit_uses: Vec::new(),
        log_buffers: Vec::new(),
    };
    let mut main = MainB::default();
    let mut declared = Vec::new();
    super::rewrite::declared(&dirs, &mut declared);
    let (mut http_maps, mut stream_maps) = (Vec::new(), Vec::new());
    super::map::declared(&dirs, &mut http_maps, &mut stream_maps, &mut declared);
    let _guard = super::vars::declare(declared);
    super::vars::declare_maps(&http_maps, &stream_maps);
    b.walk(&dirs, &mut Node::Main(&mut main), MAIN)?;
    super::map::fill(std::mem::take(&mut b.maps));
    if let Some(e) = syntax_err {
        return Err(e);
    }
    super::limit::check_uses(&b.limit_zones, &b.limit_uses)?;
    let events = main
        .events
        .take()
        .ok_or_else(|| ConfError::bare("no \"events\" section in configuration"))?;
    let http = match main.http.take() {
        Some(h) => Some(super::http::finish(h, paths, &mut b.warnings)?),
        None => None,
    };
    let stream = match main.stream.take() {
        Some(st) => Some(super::stream::finish(
            st,
            http.as_ref(),
            paths,
            &mut b.warnings,
        )?),
        None => None,
    };
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
            worker_setup: main.worker_setup,
        },
        events,
        http,
        stream,
        limit_zones: std::mem::take(&mut b.limit_zones),
        access_log_buffers: std::mem::take(&mut b.log_buffers),
    };
    Ok((cfg, b.warnings))
}

impl Builder<'_> {
    pub(super) fn walk(
        &mut self,
        dirs: &[Directive],
        node: &mut Node<'_>,
        ctx: u8,
    ) -> Result<(), ConfError> {
        for d in dirs {
            if let Some((proxy, fcgi)) = side_alias(&d.name) {
                self.side_directive(d, proxy, fcgi, node, ctx)?;
                continue;
            }
            // A name may have one entry per context (`server` in http and upstream).
            let mut named = TABLES
                .iter()
                .flat_map(|t| t.iter())
                .filter(|s| s.name == d.name)
                .peekable();
            if named.peek().is_none() {
                return Err(ConfError::at(
                    format!("unknown directive \"{}\"", d.name),
                    &d.src,
                ));
            }
            let Some(spec) = named.find(|s| s.ctx & ctx != 0) else {
                return Err(ConfError::at(
                    format!("\"{}\" directive is not allowed here", d.name),
                    &d.src,
                ));
            };
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

    /// A `grpc_*` (`fastcgi_*`) directive: the `proxy_*` directive of the
    /// same meaning, with its checks and its setter, filling the level's
    /// gRPC (FastCGI) settings; its errors name the directive as written.
    fn side_directive(
        &mut self,
        d: &Directive,
        proxy: String,
        fcgi: bool,
        node: &mut Node<'_>,
        ctx: u8,
    ) -> Result<(), ConfError> {
        let (from, to) = (format!("\"{proxy}\""), format!("\"{}\"", d.name));
        let rename = |mut e: ConfError| {
            e.message = e.message.replace(&from, &to);
            e
        };
        let grpc = match node.side_b(fcgi) {
            Some(g) if ctx & (HTTP | SRV | LOC) != 0 => g,
            _ => {
                return Err(ConfError::at(
                    format!("\"{}\" directive is not allowed here", d.name),
                    &d.src,
                ));
            }
        };
        let mut as_proxy = d.clone();
        as_proxy.name = proxy;
        self.walk(std::slice::from_ref(&as_proxy), &mut Node::Grpc(grpc), ctx)
            .map_err(rename)
    }

    pub(super) fn path(&self, s: &str) -> PathBuf {
        full_name(&self.paths.prefix, s)
    }
}

pub(super) fn duplicate(d: &Directive) -> ConfError {
    ConfError::at(format!("\"{}\" directive is duplicate", d.name), &d.src)
}

pub(super) fn invalid_value(d: &Directive) -> ConfError {
    ConfError::at(format!("\"{}\" directive invalid value", d.name), &d.src)
}

pub(super) fn not_here(d: &Directive) -> ConfError {
    ConfError::at(
        format!("\"{}\" directive is not allowed here", d.name),
        &d.src,
    )
}

pub(super) fn set_once<T>(slot: &mut Option<T>, v: T, d: &Directive) -> Result<(), ConfError> {
    if slot.is_some() {
        return Err(duplicate(d));
    }
    *slot = Some(v);
    Ok(())
}

pub(super) fn flag(d: &Directive) -> Result<bool, ConfError> {
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

/// nginx spawns at most this many processes (`NGX_MAX_PROCESSES`); sluice
/// refuses more workers when the configuration is read.
const MAX_PROCESSES: usize = 1024;

/// The most `worker_connections` sluice takes: far beyond what memory allows,
/// and within what its connection counter can hold.
const MAX_CONNECTIONS: usize = i32::MAX as usize;

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
            Ok(v)
                if (1..=MAX_PROCESSES).contains(&v)
                    && d.args[0].bytes().all(|b| b.is_ascii_digit()) =>
            {
                v
            }
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
        t if crate::log::syslog::is_syslog(t) => {
            crate::log::syslog::Spec::parse(t).map_err(|m| ConfError::at(m, &d.src))?;
            Target::Syslog(t.to_string())
        }
        t if t.starts_with("memory:") => {
            return Err(ConfError::at(
                format!("error_log target \"{t}\" is not supported, use a file, stderr or syslog"),
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
        Node::Server(s) => &mut s.error_log,
        Node::Location(l) => &mut l.error_log,
        // Checked; as in http, the messages go to the main context's logs.
        Node::Stream(_) | Node::StreamServer(_) => return Ok(()),
        Node::Events(..) | Node::Upstream(_) | Node::If(_) | Node::Grpc(_) => {
            return Err(not_here(d));
        }
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
        multi_accept: None,
        accept_balance: None,
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
        Ok(v)
            if (1..=MAX_CONNECTIONS).contains(&v)
                && d.args[0].bytes().all(|b| b.is_ascii_digit()) =>
        {
            v
        }
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

/// `multi_accept on|off` (`net::accept::Sock`), `accept_balance on|off`
/// (`net::balance`).
fn set_events_flag(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Events(ev, _) = n else {
        return Err(not_here(d));
    };
    let field = match d.name.as_str() {
        "accept_balance" => &mut ev.accept_balance,
        _ => &mut ev.multi_accept,
    };
    if field.is_some() {
        return Err(duplicate(d));
    }
    *field = Some(flag(d)?);
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
        "accept_mutex" => {
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

/// A whole number (`[0-9]+`) that fits `T`.
pub(super) fn number<T: std::str::FromStr>(a: &str) -> Option<T> {
    if a.is_empty() || !a.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    a.parse().ok()
}

pub(super) fn time_arg(d: &Directive, i: usize) -> Result<Duration, ConfError> {
    super::values::parse_time(&d.args[i], true).ok_or_else(|| invalid_value(d))
}

pub(super) fn size_arg(d: &Directive, i: usize) -> Result<u64, ConfError> {
    super::values::parse_size(&d.args[i]).ok_or_else(|| invalid_value(d))
}

/// A size that may end in `g` (nginx's `ngx_conf_set_off_slot`).
pub(super) fn offset_arg(d: &Directive, i: usize) -> Result<u64, ConfError> {
    super::values::parse_offset(&d.args[i]).ok_or_else(|| invalid_value(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testutil::{err, try_build};

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
        let (_, w) = try_build("events { use epoll; accept_mutex on; }").unwrap();
        assert_eq!(w.len(), 2);
        assert!(w[0].to_string().contains("\"use\" directive is ignored"));
    }

    #[test]
    fn events_flags_are_set_once() {
        let (c, w) = try_build("events { multi_accept on; accept_balance off; }").unwrap();
        assert!(w.is_empty());
        assert_eq!(c.events.multi_accept, Some(true));
        assert_eq!(c.events.accept_balance, Some(false));
        let (c, _) = try_build("events { }").unwrap();
        assert_eq!(c.events.multi_accept, None);
        assert_eq!(c.events.accept_balance, None);
        for name in ["multi_accept", "accept_balance"] {
            assert_eq!(
                err(&format!("events {{\n{name} yes;\n}}")),
                format!(
                    "invalid value \"yes\" in \"{name}\" directive, it must be \"on\" or \"off\" in /t.conf:2"
                )
            );
            assert_eq!(
                err(&format!("events {{ {name} off;\n{name} on; }}")),
                format!("\"{name}\" directive is duplicate in /t.conf:2")
            );
        }
        // Each its own: one set does not make the other a duplicate.
        let (c, _) = try_build("events { accept_balance on; multi_accept off; }").unwrap();
        assert_eq!(
            (c.events.accept_balance, c.events.multi_accept),
            (Some(true), Some(false))
        );
    }
}

#[cfg(test)]
mod core_list {
    /// The man page's list of core directives not implemented is the one
    /// the tables give (so neither goes stale).
    #[test]
    fn man_page_lists_missing_core() {
        let man = include_str!("../../man/sluice.conf.5");
        let start = man
            .find(".SH CORE DIRECTIVES NOT IMPLEMENTED")
            .expect("man page section");
        let body = &man[start..];
        // The list follows the section's text; one name is a `.B` line.
        let list = body
            .lines()
            .skip_while(|l| *l != "prints the same list.")
            .nth(1)
            .unwrap_or("");
        let named: Vec<&str> = list
            .split('"')
            .filter(|w| !w.trim().is_empty() && !w.contains(','))
            .map(|w| {
                w.trim_start_matches(".BR ")
                    .trim_start_matches(".B ")
                    .trim()
            })
            .filter(|w| !w.is_empty())
            .collect();
        assert_eq!(named, super::missing_core());
    }
}
