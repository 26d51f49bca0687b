//! Settings that nginx merges from `http` to `server` to `location`: a level
//! that does not set one takes its parent's. One macro declares each setting
//! once, with its type and default; it makes both the builder (all `Option`)
//! and the finished `LocConf`. Pure.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::vars::Template;

/// What defaults may depend on.
pub struct Defaults {
    pub prefix: PathBuf,
    pub combined: Arc<LogFormat>,
}

macro_rules! loc_settings {
    ($( $(#[$m:meta])* $name:ident : $ty:ty = $default:expr ),* $(,)?) => {
        /// The settings in force for one location (or server).
        #[derive(Debug, Clone)]
        pub struct LocConf {
            $( $(#[$m])* pub $name: $ty, )*
        }

        /// The same settings while parsing: None means "not set at this level".
        #[derive(Debug, Clone, Default)]
        pub struct LocB {
            $( pub $name: Option<$ty>, )*
        }

        impl LocB {
            /// Takes every setting this level left unset from `parent`.
            pub fn inherit(&mut self, parent: &LocB) {
                $( if self.$name.is_none() { self.$name = parent.$name.clone(); } )*
            }

            /// Fills what no level set with nginx's defaults.
            pub fn finish(&self, d: &Defaults) -> LocConf {
                LocConf {
                    $( $name: match &self.$name {
                        Some(v) => v.clone(),
                        None => { let f: fn(&Defaults) -> $ty = $default; f(d) }
                    }, )*
                }
            }
        }
    };
}

loc_settings! {
    /// `access_log PATH [FORMAT] | off`; empty when off.
    access_log: Vec<AccessLog> = |d| vec![AccessLog {
        path: d.prefix.join("logs/access.log"),
        format: d.combined.clone(),
        cond: None,
    }],
    keepalive_timeout: Duration = |_| Duration::from_secs(75),
    /// The second argument of `keepalive_timeout`: `Keep-Alive: timeout=N`.
    keepalive_header: Option<u64> = |_| None,
    keepalive_requests: u64 = |_| 1000,
    client_header_timeout: Duration = |_| Duration::from_secs(60),
    /// `client_header_buffer_size`: where a request head starts; a line that
    /// does not fit moves to a large buffer.
    client_header_buffer_size: u64 = |_| 1024,
    /// `large_client_header_buffers NUMBER SIZE`: a request line or header
    /// longer than SIZE, or heads beyond NUMBER x SIZE, are refused.
    large_client_header_buffers: (u32, u64) = |_| (4, 8192),
    client_body_timeout: Duration = |_| Duration::from_secs(60),
    send_timeout: Duration = |_| Duration::from_secs(60),
    proxy_intercept_errors: bool = |_| false,
    /// `proxy_redirect`: None is `off`; the default is `default`.
    proxy_redirect: Option<Vec<Redirect>> = |_| Some(vec![Redirect::Default]),
    /// `client_body_temp_path` / `proxy_temp_path` as named: created at
    /// start-up as nginx does.
    temp_paths: Vec<PathBuf> = |_| Vec::new(),
    /// Where a request body larger than `client_body_buffer_size` goes
    /// (levels are accepted and not used: files are unlinked at once).
    client_body_temp_path: PathBuf = |d| d.prefix.join("client_body_temp"),
    /// nginx's default on 64-bit platforms: two pages.
    client_body_buffer_size: u64 = |_| 16 * 1024,
    proxy_buffering: bool = |_| true,
    /// `proxy_request_buffering off`: the client's body goes upstream as it
    /// arrives instead of being read whole before connecting.
    proxy_request_buffering: bool = |_| true,
    proxy_buffer_size: u64 = |_| 4096,
    /// `proxy_buffers NUMBER SIZE`.
    proxy_buffers: (u32, u64) = |_| (8, 4096),
    /// Where a response larger than the buffers goes (`proxy_buffering
    /// on`); levels are accepted and not used: files are unlinked at once.
    proxy_temp_path: PathBuf = |d| d.prefix.join("proxy_temp"),
    /// `proxy_max_temp_file_size`: 0 keeps responses out of files.
    proxy_max_temp_file_size: u64 = |_| 1024 * 1024 * 1024,
    /// `proxy_busy_buffers_size`, `proxy_temp_file_write_size`: None is
    /// nginx's default, twice the larger of `proxy_buffer_size` and one of
    /// `proxy_buffers`.
    proxy_busy_buffers_size: Option<u64> = |_| None,
    proxy_temp_file_write_size: Option<u64> = |_| None,
    client_max_body_size: u64 = |_| 1024 * 1024,
    /// `limit_rate`, `limit_rate_after`, `proxy_limit_rate` (see
    /// `conf::rate`): None is 0.
    limit_rate: Option<Template> = |_| None,
    limit_rate_after: Option<Template> = |_| None,
    proxy_limit_rate: Option<Template> = |_| None,
    server_tokens: bool = |_| true,
    /// `http2 on`: HTTP/2 on this server's addresses (ALPN `h2` over TLS,
    /// prior-knowledge h2c on plain ones). Read at server level.
    http2: bool = |_| false,
    /// `http2_max_concurrent_streams`: streams at once on one connection.
    http2_max_concurrent_streams: u32 = |_| 128,
    /// `http2_recv_buffer_size` (http level): the request-body bytes one
    /// connection, and one stream, may have in flight (the flow-control
    /// windows sluice advertises).
    http2_recv_buffer_size: u64 = |_| 256 * 1024,
    /// `http2_chunk_size`: the largest DATA frame a response is cut into.
    http2_chunk_size: u64 = |_| 8 * 1024,
    default_type: String = |_| "text/plain".to_string(),
    /// `root PATH` or `alias PATH` (with the location prefix alias replaces).
    root: Root = |d| Root { path: d.prefix.join("html"), alias: None, vars: None, whole: false },
    index: Vec<String> = |_| vec!["index.html".to_string()],
    /// `if_modified_since off | exact | before`.
    if_modified_since: IfModifiedSince = |_| IfModifiedSince::Exact,
    /// `etag`: static files carry an ETag.
    etag: bool = |_| true,
    /// `log_not_found`: 404s from files log their error line.
    log_not_found: bool = |_| true,
    /// `underscores_in_headers` (server level; the default server's applies).
    underscores_in_headers: bool = |_| false,
    /// `ignore_invalid_headers` (server level; the default server's applies).
    ignore_invalid_headers: bool = |_| true,
    /// `max_ranges N`: a Range header with more byte ranges gets the whole
    /// file; 0 turns byte ranges off (no `Accept-Ranges` either).
    max_ranges: u32 = |_| u32::MAX,
    /// `disable_symlinks off | on | if_not_owner [from=PART]`.
    disable_symlinks: DisableSymlinks = |_| DisableSymlinks::default(),
    /// `types { MIME EXT...; }`: extension (lowercase) to MIME type.
    types: Arc<HashMap<String, String>> = |_| Arc::new(
        [("html", "text/html"), ("gif", "image/gif"), ("jpg", "image/jpeg")]
            .into_iter()
            .map(|(e, m)| (e.to_string(), m.to_string()))
            .collect(),
    ),
    add_header: Vec<AddHeader> = |_| Vec::new(),
    /// `autoindex`: a directory without an index file is listed.
    autoindex: bool = |_| false,
    autoindex_exact_size: bool = |_| true,
    autoindex_format: super::autoindex::Format = |_| super::autoindex::Format::Html,
    autoindex_localtime: bool = |_| false,
    /// `expires`: `Expires` and `Cache-Control` (`http::expires`).
    expires: super::expires::ExpiresConf = |_| super::expires::ExpiresConf::default(),
    rewrite_log: bool = |_| false,
    /// `set_real_ip_from`: trusted addresses (address, prefix length); unix
    /// clients are trusted with `unix:`.
    set_real_ip_from: Vec<Trusted> = |_| Vec::new(),
    real_ip_header: String = |_| "x-real-ip".to_string(),
    real_ip_recursive: bool = |_| false,
    uninitialized_variable_warn: bool = |_| true,
    error_page: Vec<ErrorPage> = |_| Vec::new(),
    /// `proxy_set_header NAME VALUE`, names as written.
    proxy_set_header: Vec<(String, Template)> = |_| Vec::new(),
    /// 10, 11, or 20 (HTTP/2, as `grpc_pass` always speaks).
    proxy_http_version: u8 = |_| 11,
    /// `proxy_socket_keepalive`: SO_KEEPALIVE on upstream connections.
    proxy_socket_keepalive: bool = |_| false,
    proxy_pass_request_headers: bool = |_| true,
    proxy_pass_request_body: bool = |_| true,
    proxy_hide_header: Vec<String> = |_| Vec::new(),
    /// `proxy_cookie_domain` rules (empty: `off`, the default).
    proxy_cookie_domain: Arc<Vec<super::proxy_more::CookieRewrite>> = |_| Arc::default(),
    proxy_cookie_path: Arc<Vec<super::proxy_more::CookieRewrite>> = |_| Arc::default(),
    /// `proxy_cookie_flags` rules (empty: `off`, the default).
    proxy_cookie_flags: Arc<Vec<super::proxy_more::CookieFlags>> = |_| Arc::default(),
    /// `proxy_ignore_headers`: `super::proxy_more::ignore` bits.
    proxy_ignore_headers: u32 = |_| 0,
    /// `proxy_method`: the method sent upstream instead of the client's.
    proxy_method: Option<Template> = |_| None,
    proxy_bind: super::proxy_more::Bind = |_| super::proxy_more::Bind::Off,
    /// `proxy_ignore_client_abort`: the upstream request goes on when the
    /// client leaves.
    proxy_ignore_client_abort: bool = |_| false,
    proxy_pass_header: Vec<String> = |_| Vec::new(),
    proxy_set_body: Option<Template> = |_| None,
    proxy_connect_timeout: Duration = |_| Duration::from_secs(60),
    /// `proxy_connect_race TIME | off`: start a second connect after TIME.
    proxy_connect_race: Option<Duration> = |_| None,
    proxy_read_timeout: Duration = |_| Duration::from_secs(60),
    proxy_send_timeout: Duration = |_| Duration::from_secs(60),
    proxy_next_upstream: NextUpstream = |_| NextUpstream(NextUpstream::ERROR | NextUpstream::TIMEOUT),
    /// 0: as many tries as there are peers.
    proxy_next_upstream_tries: u32 = |_| 0,
    /// Zero: no limit.
    proxy_next_upstream_timeout: Duration = |_| Duration::ZERO,
    /// `resolver` (its `resolver_timeout` is filled in when used).
    resolver: Option<super::model::Resolver> = |_| None,
    resolver_timeout: Duration = |_| Duration::from_secs(30),
    /// `proxy_ssl_server_name`: send SNI to an https upstream.
    proxy_ssl_server_name: bool = |_| false,
    /// `proxy_ssl_name`; None: `$proxy_host`.
    proxy_ssl_name: Option<Template> = |_| None,
    proxy_ssl_verify: bool = |_| false,
    proxy_ssl_verify_depth: u32 = |_| 1,
    /// `proxy_ssl_trusted_certificate`, read where it is written.
    proxy_ssl_trusted_certificate: Option<Arc<super::proxy_ssl::TrustedCerts>> = |_| None,
    /// `proxy_ssl_certificate` and its key as written (read once the
    /// location is finished: both may come from different levels).
    proxy_ssl_certificate: Option<(PathBuf, super::Src)> = |_| None,
    proxy_ssl_certificate_key: Option<(PathBuf, super::Src)> = |_| None,
    proxy_ssl_protocols: Vec<super::ssl::Protocol> =
        |_| vec![super::ssl::Protocol::Tls12, super::ssl::Protocol::Tls13],
    /// None: every TLS 1.2 suite rustls has (nginx's `DEFAULT`).
    proxy_ssl_ciphers: Option<Vec<rustls::SupportedCipherSuite>> = |_| None,
    proxy_ssl_session_reuse: bool = |_| true,
    /// `proxy_ssl_crl`, read where it is written.
    proxy_ssl_crl: Option<Arc<super::proxy_ssl::CrlFile>> = |_| None,
    /// `proxy_ssl_key_log`, opened where it is written.
    proxy_ssl_key_log: Option<Arc<super::ssl::KeyLogFile>> = |_| None,
    /// `limit_req` lines of one level (a level with none takes its
    /// parent's, as nginx's array).
    limit_req: Vec<super::limit::LimitReq> = |_| Vec::new(),
    limit_req_status: u16 = |_| 503,
    limit_req_log_level: crate::log::Level = |_| crate::log::Level::Error,
    limit_req_dry_run: bool = |_| false,
    limit_conn: Vec<super::limit::LimitConn> = |_| Vec::new(),
    limit_conn_status: u16 = |_| 503,
    limit_conn_log_level: crate::log::Level = |_| crate::log::Level::Error,
    limit_conn_dry_run: bool = |_| false,
    /// `allow` and `deny`, in order (also the stream levels' rules).
    access_rules: Arc<Vec<super::allow::Rule>> = |_| Arc::default(),
    satisfy: super::allow::Satisfy = |_| super::allow::Satisfy::All,
    /// `auth_basic REALM`; None is `off`.
    auth_basic: Option<super::vars::Template> = |_| None,
    auth_basic_user_file: Option<super::allow::UserFile> = |_| None,
    /// `auth_request URI`; None is `off`.
    auth_request: Option<String> = |_| None,
    /// `auth_request_set $VAR VALUE`, in order.
    auth_request_set: Arc<Vec<(String, Template)>> = |_| Arc::default(),
    /// `gzip`: compress responses (`http::gzip`).
    gzip: bool = |_| false,
    /// `gzip_types`: `text/html` always, these besides.
    gzip_types: Arc<super::gzip::GzipTypes> = |_| Arc::default(),
    gzip_min_length: u64 = |_| 20,
    gzip_comp_level: u32 = |_| 1,
    /// `gzip_proxied`: `super::gzip::proxied` bits.
    gzip_proxied: u32 = |_| super::gzip::proxied::OFF,
    gzip_vary: bool = |_| false,
    /// `gzip_buffers NUMBER SIZE`: accepted, not used (flate2 sizes its own).
    gzip_buffers: (u32, u64) = |_| (32, 4096),
    /// 10 or 11: the lowest request version compressed for.
    gzip_http_version: u8 = |_| 11,
    gzip_disable: Arc<Vec<super::gzip::GzipDisable>> = |_| Arc::default(),
    gzip_static: super::gzip::GzipStatic = |_| super::gzip::GzipStatic::Off,
    /// `sub_filter STRING REPLACEMENT`, in order (a level with none takes
    /// its parent's, as nginx's).
    sub_filter: Arc<Vec<super::sub_mirror::SubFilter>> = |_| Arc::default(),
    /// `sub_filter_types`: `text/html` always, these besides.
    sub_filter_types: Arc<super::sub_mirror::SubFilterTypes> = |_| Arc::default(),
    sub_filter_once: bool = |_| true,
    /// `sub_filter_last_modified`: keep `Last-Modified` (off: removed).
    sub_filter_last_modified: bool = |_| false,
    /// `mirror URI ...`; empty when `off`.
    mirror: Arc<Vec<String>> = |_| Arc::default(),
    mirror_request_body: bool = |_| true,
    /// A `fastcgi_pass` location (never set by a directive: `take_fastcgi`).
    fastcgi: bool = |_| false,
    /// `fastcgi_param NAME VALUE [if_not_empty]` lines of one level (a level
    /// with none takes its parent's, as nginx's array).
    fastcgi_param: Arc<Vec<super::fastcgi::Param>> = |_| Arc::default(),
    /// `fastcgi_index NAME`: appended to `$fastcgi_script_name` ending in `/`.
    fastcgi_index: Option<Template> = |_| None,
    /// `fastcgi_split_path_info REGEX` (two captures).
    fastcgi_split_path_info: Option<regex::Regex> = |_| None,
    /// `fastcgi_keep_conn`: FCGI_KEEP_CONN, the connection cached after.
    fastcgi_keep_conn: bool = |_| false,
    /// `fastcgi_catch_stderr STRING`: stderr holding one is an invalid
    /// response (next upstream) while the head is awaited.
    fastcgi_catch_stderr: Vec<String> = |_| Vec::new(),
    /// `charset`: None is `off` (`http::charset`).
    charset: Option<String> = |_| None,
    source_charset: Option<String> = |_| None,
    charset_types: Arc<super::charset::CharsetTypes> = |_| Arc::default(),
    override_charset: bool = |_| false,
    /// `charset_map` tables (http level), for every location.
    charset_maps: Arc<Vec<Arc<super::charset::CharsetMap>>> = |_| Arc::default(),
    /// `absolute_redirect`: a redirect sluice makes to a path on this
    /// server gets scheme, host and port (`http::script::absolute`).
    absolute_redirect: bool = |_| true,
    port_in_redirect: bool = |_| true,
    /// `server_name_in_redirect`: the server's first name, not the Host.
    server_name_in_redirect: bool = |_| false,
    /// `merge_slashes` (server level): `//` in the path is one `/`.
    merge_slashes: bool = |_| true,
    /// `chunked_transfer_encoding off`: a response of unknown length to an
    /// HTTP/1.1 client is sent as it comes and the connection closed.
    chunked_transfer_encoding: bool = |_| true,
    /// `recursive_error_pages`: an error_page target's own error may use
    /// error_page again.
    recursive_error_pages: bool = |_| false,
    /// `client_body_in_file_only on | clean | off`.
    client_body_in_file_only: BodyInFile = |_| BodyInFile::Off,
    /// `auth_delay`: how long a 401 of auth_basic or auth_request waits.
    auth_delay: Duration = |_| Duration::ZERO,
    /// `limit_except`: the access rules for the methods it does not list.
    limit_except: Option<Arc<super::limit_except::LimitExcept>> = |_| None,
    /// The finished TLS client settings, made for a location whose
    /// `proxy_pass` is https or has variables (never set by a directive).
    proxy_ssl: Option<Arc<super::proxy_ssl::ProxySsl>> = |_| None,
}

impl LocConf {
    /// A `grpc_pass` location: the `grpc_*` settings (`grpc`, finished as
    /// the `proxy_*` ones are) stand in for the `proxy_*` ones, and what
    /// the grpc module has no directive for is fixed: HTTP/2, the response
    /// streamed as it comes, the request body streamed too (kept for a
    /// retry while it fits `client_body_buffer_size`), no redirect rewrite.
    pub fn take_grpc(&mut self, grpc: &LocConf) {
        self.proxy_set_header = grpc.proxy_set_header.clone();
        self.proxy_hide_header = grpc.proxy_hide_header.clone();
        self.proxy_pass_header = grpc.proxy_pass_header.clone();
        self.proxy_connect_timeout = grpc.proxy_connect_timeout;
        self.proxy_read_timeout = grpc.proxy_read_timeout;
        self.proxy_send_timeout = grpc.proxy_send_timeout;
        self.proxy_next_upstream = grpc.proxy_next_upstream;
        self.proxy_next_upstream_tries = grpc.proxy_next_upstream_tries;
        self.proxy_next_upstream_timeout = grpc.proxy_next_upstream_timeout;
        self.proxy_buffer_size = grpc.proxy_buffer_size;
        self.proxy_intercept_errors = grpc.proxy_intercept_errors;
        self.proxy_socket_keepalive = grpc.proxy_socket_keepalive;
        self.proxy_ssl_server_name = grpc.proxy_ssl_server_name;
        self.proxy_ssl_name = grpc.proxy_ssl_name.clone();
        self.proxy_ssl_verify = grpc.proxy_ssl_verify;
        self.proxy_ssl_verify_depth = grpc.proxy_ssl_verify_depth;
        self.proxy_ssl_trusted_certificate = grpc.proxy_ssl_trusted_certificate.clone();
        self.proxy_ssl_certificate = grpc.proxy_ssl_certificate.clone();
        self.proxy_ssl_certificate_key = grpc.proxy_ssl_certificate_key.clone();
        self.proxy_ssl_protocols = grpc.proxy_ssl_protocols.clone();
        self.proxy_ssl_ciphers = grpc.proxy_ssl_ciphers.clone();
        self.proxy_ssl_session_reuse = grpc.proxy_ssl_session_reuse;
        self.proxy_ssl_crl = grpc.proxy_ssl_crl.clone();
        self.proxy_ssl_key_log = grpc.proxy_ssl_key_log.clone();
        self.proxy_http_version = 20;
        self.proxy_buffering = false;
        self.proxy_request_buffering = false;
        self.proxy_redirect = None;
        self.proxy_set_body = None;
        self.proxy_pass_request_headers = true;
        self.proxy_pass_request_body = true;
    }
}

impl LocConf {
    /// A `fastcgi_pass` location: the `fastcgi_*` settings (`fcgi`,
    /// finished as the `proxy_*` ones are) stand in for the `proxy_*` ones
    /// the fastcgi module has namesakes for; the rest is fixed as the
    /// module has it (no header set, no redirect or cookie rewrite).
    pub fn take_fastcgi(&mut self, fcgi: &LocConf) {
        self.fastcgi = true;
        self.proxy_hide_header = fcgi.proxy_hide_header.clone();
        self.proxy_pass_header = fcgi.proxy_pass_header.clone();
        self.proxy_ignore_headers = fcgi.proxy_ignore_headers;
        self.proxy_connect_timeout = fcgi.proxy_connect_timeout;
        self.proxy_read_timeout = fcgi.proxy_read_timeout;
        self.proxy_send_timeout = fcgi.proxy_send_timeout;
        self.proxy_next_upstream = fcgi.proxy_next_upstream;
        self.proxy_next_upstream_tries = fcgi.proxy_next_upstream_tries;
        self.proxy_next_upstream_timeout = fcgi.proxy_next_upstream_timeout;
        self.proxy_buffer_size = fcgi.proxy_buffer_size;
        self.proxy_buffers = fcgi.proxy_buffers;
        self.proxy_buffering = fcgi.proxy_buffering;
        // The body is read whole first (`fastcgi_request_buffering off` is
        // accepted and has no effect: the man page says so).
        self.proxy_request_buffering = true;
        self.proxy_intercept_errors = fcgi.proxy_intercept_errors;
        self.proxy_socket_keepalive = fcgi.proxy_socket_keepalive;
        self.proxy_pass_request_headers = fcgi.proxy_pass_request_headers;
        self.proxy_pass_request_body = fcgi.proxy_pass_request_body;
        self.proxy_bind = fcgi.proxy_bind.clone();
        self.proxy_limit_rate = fcgi.proxy_limit_rate.clone();
        self.proxy_ignore_client_abort = fcgi.proxy_ignore_client_abort;
        self.proxy_http_version = 11;
        self.proxy_set_header = Vec::new();
        self.proxy_redirect = None;
        self.proxy_set_body = None;
        self.proxy_method = None;
        self.proxy_cookie_domain = Arc::default();
        self.proxy_cookie_path = Arc::default();
        self.proxy_cookie_flags = Arc::default();
    }
}

/// `client_body_in_file_only`: a body read whole always goes to a file in
/// `client_body_temp_path`, named by `$request_body_file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyInFile {
    #[default]
    Off,
    /// The file is left after the request.
    On,
    /// The file is removed after the request.
    Clean,
}

/// Where files come from: `root` (path + URI) or `alias` (path replaces the
/// location prefix `alias` holds; in a regex location, the whole URI).
#[derive(Debug, Clone)]
pub struct Root {
    /// The path; with variables, the prefix a relative value is under.
    pub path: PathBuf,
    pub alias: Option<String>,
    /// The path with variables (nginx evaluates it per request; a
    /// relative result is under the prefix).
    pub vars: Option<super::vars::Template>,
    /// `alias` in a location given by a regular expression: the path is
    /// the file, nothing of the URI is added (nginx's rule).
    pub whole: bool,
}

/// `if_modified_since`: how a static file's time is compared with a
/// request's `If-Modified-Since` for a 304.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IfModifiedSince {
    /// Never 304 for it.
    Off,
    /// 304 when the times are equal.
    #[default]
    Exact,
    /// 304 when the file is not newer.
    Before,
}

/// How static files treat symbolic links on their path (`disable_symlinks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Symlinks {
    /// Followed, as the system follows them.
    #[default]
    Off,
    /// Any link on the path is refused.
    On,
    /// A link is refused when its owner is not its target's.
    IfNotOwner,
}

/// `disable_symlinks MODE [from=PART]`: links in the part of the path that
/// `from` names (a text with variables, such as `$document_root`) are not
/// checked.
#[derive(Debug, Clone, Default)]
pub struct DisableSymlinks {
    pub mode: Symlinks,
    pub from: Option<Template>,
}

/// One `proxy_redirect` rule for upstream `Location` and `Refresh` headers.
#[derive(Debug, Clone)]
pub enum Redirect {
    /// The `proxy_pass` URL (with `/` when it has no URI part) becomes the
    /// location prefix (or `/`).
    Default,
    /// A prefix and its replacement (variables allowed).
    Rule(Template, Template),
    /// `~` or `~*`: a match anywhere in the value replaces the whole value
    /// with the replacement, which may use the captures.
    Regex(regex::Regex, Template),
}

/// One `set_real_ip_from` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trusted {
    Net(std::net::IpAddr, u8),
    Unix,
}

impl Trusted {
    pub fn contains(&self, ip: Option<std::net::IpAddr>) -> bool {
        use std::net::IpAddr;
        match (self, ip) {
            (Trusted::Unix, None) => true,
            (Trusted::Net(IpAddr::V4(n), len), Some(IpAddr::V4(a))) => {
                let mask = if *len == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(*len))
                };
                u32::from(*n) & mask == u32::from(a) & mask
            }
            (Trusted::Net(IpAddr::V6(n), len), Some(IpAddr::V6(a))) => {
                let mask = if *len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(*len))
                };
                u128::from(*n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// `add_header NAME VALUE [always]`.
#[derive(Debug, Clone)]
pub struct AddHeader {
    pub name: String,
    pub value: Template,
    pub always: bool,
}

/// What status an `error_page` answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPageStatus {
    /// The original error's.
    Keep,
    /// `=CODE`.
    Code(u16),
    /// `=`: whatever the target answers.
    Target,
}

/// `error_page CODE... [=[RESP]] URI|@name|URL`.
#[derive(Debug, Clone)]
pub struct ErrorPage {
    pub codes: Vec<u16>,
    pub status: ErrorPageStatus,
    pub target: Template,
}

/// How a log format escapes variable values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// `"`, `\` and bytes below 0x20 or above 0x7e as `\xXX`.
    Default,
    /// JSON string escapes.
    Json,
    None,
}

#[derive(Debug, Clone)]
pub struct LogFormat {
    pub name: String,
    pub escape: Escape,
    pub template: Template,
    /// It reads `$sent_http_*`: a request keeps its response's headers
    /// for the line.
    pub sent_http: bool,
    /// It reads `$upstream_http_*` or `$upstream_cookie_*`: a request
    /// keeps the upstream's headers for the line.
    pub upstream_http: bool,
}

impl LogFormat {
    /// The format, with what its variables make a request keep worked out
    /// once, not on each request.
    pub fn new(name: String, escape: Escape, template: Template) -> LogFormat {
        use super::vars::{Segment, Var};
        let reads = |want: fn(&Var) -> bool| {
            template.segments.iter().any(|s| match s {
                Segment::Var(v) => want(v),
                Segment::Lit(_) => false,
            })
        };
        let sent_http = reads(|v| matches!(v, Var::SentHttp(_)));
        let upstream_http = reads(|v| matches!(v, Var::UpstreamHttp(_) | Var::UpstreamCookie(_)));
        LogFormat {
            name,
            escape,
            template,
            sent_http,
            upstream_http,
        }
    }
}

#[derive(Debug, Clone)]
pub struct AccessLog {
    pub path: PathBuf,
    pub format: Arc<LogFormat>,
    /// `if=CONDITION`: the line is written only when it is neither empty
    /// nor "0".
    pub cond: Option<Template>,
}

/// `proxy_next_upstream` conditions as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextUpstream(pub u32);

impl NextUpstream {
    pub const ERROR: u32 = 1 << 0;
    pub const TIMEOUT: u32 = 1 << 1;
    pub const INVALID_HEADER: u32 = 1 << 2;
    pub const HTTP_500: u32 = 1 << 3;
    pub const HTTP_502: u32 = 1 << 4;
    pub const HTTP_503: u32 = 1 << 5;
    pub const HTTP_504: u32 = 1 << 6;
    pub const HTTP_403: u32 = 1 << 7;
    pub const HTTP_404: u32 = 1 << 8;
    pub const HTTP_429: u32 = 1 << 9;
    pub const NON_IDEMPOTENT: u32 = 1 << 10;
    /// `grpc_status=CODE`: bit `GRPC_STATUS << CODE` per gRPC status
    /// code (0 to 16) that a Trailers-Only answer may carry.
    pub const GRPC_STATUS: u32 = 1 << 11;
    /// `unavailable`: grpc-status 14.
    pub const UNAVAILABLE: u32 = Self::GRPC_STATUS << 14;

    /// The condition a Trailers-Only answer with gRPC status `code` meets.
    pub fn for_grpc_status(code: u32) -> Option<u32> {
        (1..=16).contains(&code).then(|| Self::GRPC_STATUS << code)
    }

    pub fn parse(word: &str) -> Option<u32> {
        Some(match word {
            "error" => Self::ERROR,
            "timeout" => Self::TIMEOUT,
            "invalid_header" => Self::INVALID_HEADER,
            "http_500" => Self::HTTP_500,
            "http_502" => Self::HTTP_502,
            "http_503" => Self::HTTP_503,
            "http_504" => Self::HTTP_504,
            "http_403" => Self::HTTP_403,
            "http_404" => Self::HTTP_404,
            "http_429" => Self::HTTP_429,
            "non_idempotent" => Self::NON_IDEMPOTENT,
            "unavailable" => Self::UNAVAILABLE,
            "off" => 0,
            _ => {
                let list = word.strip_prefix("grpc_status=")?;
                let mut bits = 0;
                for code in list.split(',') {
                    let n: u32 = code.parse().ok()?;
                    bits |= Self::for_grpc_status(n)?;
                }
                bits
            }
        })
    }

    /// The condition a response status stands for, if any.
    pub fn for_status(status: u16) -> Option<u32> {
        Some(match status {
            500 => Self::HTTP_500,
            502 => Self::HTTP_502,
            503 => Self::HTTP_503,
            504 => Self::HTTP_504,
            403 => Self::HTTP_403,
            404 => Self::HTTP_404,
            429 => Self::HTTP_429,
            _ => return None,
        })
    }

    pub fn has(self, bits: u32) -> bool {
        bits != 0 && self.0 & bits == bits
    }
}

/// nginx's checks of `proxy_busy_buffers_size`, `proxy_temp_file_write_size`
/// and `proxy_max_temp_file_size` against the buffers, made once the
/// location's values are inherited (nginx makes them when it merges).
pub fn check_proxy_buffers(c: &LocConf) -> Result<(), String> {
    let (count, one) = c.proxy_buffers;
    let size = c.proxy_buffer_size.max(one);
    let min = "the maximum of the value of \"proxy_buffer_size\" and one of the \"proxy_buffers\"";
    if count < 2 {
        return Err("there must be at least 2 \"proxy_buffers\"".into());
    }
    let busy = c.proxy_busy_buffers_size.unwrap_or(size.saturating_mul(2));
    if busy < size {
        return Err(format!(
            "\"proxy_busy_buffers_size\" must be equal to or greater than {min}"
        ));
    }
    if busy > u64::from(count - 1).saturating_mul(one) {
        return Err("\"proxy_busy_buffers_size\" must be less than the size of all \"proxy_buffers\" minus one buffer".into());
    }
    if c.proxy_temp_file_write_size
        .unwrap_or(size.saturating_mul(2))
        < size
    {
        return Err(format!(
            "\"proxy_temp_file_write_size\" must be equal to or greater than {min}"
        ));
    }
    let max = c.proxy_max_temp_file_size;
    if max != 0 && max < size {
        return Err(format!(
            "\"proxy_max_temp_file_size\" must be equal to zero to disable temporary files usage or must be equal to or greater than {min}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a format's variables make a request keep is read once.
    #[test]
    fn log_formats_say_what_they_read() {
        let f = |t: &str| {
            let f = LogFormat::new(
                "f".into(),
                Escape::Default,
                super::super::vars::compile(t).unwrap(),
            );
            (f.sent_http, f.upstream_http)
        };
        assert_eq!(f("$status $body_bytes_sent"), (false, false));
        assert_eq!(f("[$sent_http_content_type]"), (true, false));
        assert_eq!(f("$upstream_http_x_id"), (false, true));
        assert_eq!(f("$upstream_cookie_s $sent_http_etag"), (true, true));
        assert_eq!(f("sent_http_x upstream_http_y"), (false, false));
    }

    fn defaults() -> Defaults {
        Defaults {
            prefix: PathBuf::from("/p"),
            combined: Arc::new(LogFormat::new(
                "combined".into(),
                Escape::Default,
                super::super::vars::compile("x").unwrap(),
            )),
        }
    }

    #[test]
    fn inherit_and_defaults() {
        let http = LocB {
            keepalive_timeout: Some(Duration::from_secs(5)),
            ..LocB::default()
        };
        let mut loc = LocB {
            keepalive_requests: Some(7),
            ..LocB::default()
        };
        loc.inherit(&http);
        let c = loc.finish(&defaults());
        assert_eq!(c.keepalive_timeout, Duration::from_secs(5));
        assert_eq!(c.keepalive_requests, 7);
        assert_eq!(c.proxy_connect_timeout, Duration::from_secs(60));
        assert_eq!(c.access_log[0].path, PathBuf::from("/p/logs/access.log"));
        assert!(c.proxy_next_upstream.has(NextUpstream::ERROR));
        assert!(!c.proxy_next_upstream.has(NextUpstream::HTTP_500));
    }

    #[test]
    fn grpc_statuses_are_conditions() {
        assert_eq!(
            NextUpstream::parse("unavailable"),
            Some(NextUpstream::UNAVAILABLE)
        );
        let both = NextUpstream::parse("grpc_status=14,4").unwrap();
        assert!(NextUpstream(both).has(NextUpstream::UNAVAILABLE));
        assert!(NextUpstream(both).has(NextUpstream::for_grpc_status(4).unwrap()));
        assert!(!NextUpstream(both).has(NextUpstream::for_grpc_status(13).unwrap()));
        // OK is never a failure; codes end at 16.
        for bad in [
            "grpc_status=0",
            "grpc_status=17",
            "grpc_status=",
            "grpc_status=a",
        ] {
            assert_eq!(NextUpstream::parse(bad), None, "{bad}");
        }
        assert!(NextUpstream::for_status(200).is_none());
    }
}
