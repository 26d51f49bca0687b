//! Texts with variables (`$name`, `${name}`), compiled once at config load into
//! literal and variable segments. Unknown variables are config errors. Evaluation
//! happens per request in `http::vars`; this module only names what exists.
//! `map` variables are named here too (`Var::Map`), each with the map that the
//! block builds and a slot for the per-request cache.

use std::sync::{Arc, OnceLock};

/// A variable the request path knows how to evaluate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Var {
    Args,
    Connection,
    Host,
    Hostname,
    IsArgs,
    Msec,
    Pid,
    RemoteAddr,
    RemotePort,
    Request,
    RequestMethod,
    RequestUri,
    Scheme,
    ServerAddr,
    ServerName,
    ServerPort,
    ServerProtocol,
    /// The stream `$protocol`: TCP or UDP.
    Protocol,
    TimeLocal,
    Uri,
    /// `$http_NAME`: a request header; NAME lowercased with `_` for `-`.
    Http(String),
    /// `$arg_NAME`: a query argument.
    Arg(String),
    /// `$cookie_NAME`.
    Cookie(String),
    BinaryRemoteAddr,
    RemoteUser,
    /// `$gzip_ratio`: set once a compressed body has ended.
    GzipRatio,
    Status,
    BodyBytesSent,
    BytesSent,
    RequestLength,
    /// `$request_body`: the client's body when it was read into memory.
    RequestBody,
    /// `$request_body_file`: the body's file (`client_body_in_file_only`).
    RequestBodyFile,
    RequestTime,
    TimeIso8601,
    ProxyHost,
    /// `$fastcgi_script_name`, `$fastcgi_path_info` (`fastcgi_split_path_info`).
    FastcgiScriptName,
    FastcgiPathInfo,
    ProxyPort,
    ProxyAddXForwardedFor,
    UpstreamAddr,
    UpstreamStatus,
    UpstreamConnectTime,
    /// `$upstream_queue_time`: the wait for a name's first DNS answer.
    UpstreamQueueTime,
    UpstreamHeaderTime,
    UpstreamResponseTime,
    UpstreamResponseLength,
    UpstreamBytesReceived,
    UpstreamBytesSent,
    /// Stream only: `$upstream_first_byte_time`, `$upstream_session_time`,
    /// `$bytes_received`, `$session_time`.
    UpstreamFirstByteTime,
    UpstreamSessionTime,
    BytesReceived,
    SessionTime,
    /// `$upstream_http_NAME`: a header of the upstream's response.
    UpstreamHttp(String),
    /// `$upstream_cookie_NAME`: a cookie the upstream's `Set-Cookie` sets.
    UpstreamCookie(String),
    /// `$nginx_version`: the nginx version sluice follows (`-v`).
    NginxVersion,
    /// The stub_status counters: `$connections_active`, `_reading`,
    /// `_writing`, `_waiting` (http).
    ConnectionsActive,
    ConnectionsReading,
    ConnectionsWriting,
    ConnectionsWaiting,
    /// `$https`: "on" over TLS, else empty.
    Https,
    /// `$http2`: "h2" over TLS, "h2c" in clear, empty for HTTP/1.
    Http2,
    SslProtocol,
    SslCipher,
    SslServerName,
    /// `$ssl_session_reused`: "r" or ".".
    SslSessionReused,
    /// `$ssl_client_verify`: NONE, SUCCESS, FAILED:why.
    SslClientVerify,
    SslClientSDn,
    SslClientIDn,
    SslClientSerial,
    SslClientFingerprint,
    SslClientEscapedCert,
    /// `$ssl_client_cert` (deprecated in nginx) and `$ssl_client_raw_cert`.
    SslClientCert,
    SslClientRawCert,
    /// `$ssl_alpn_protocol`: the protocol ALPN chose, else empty.
    SslAlpnProtocol,
    /// Stream only, with `ssl_preread on`: what the ClientHello says.
    SslPrereadServerName,
    SslPrereadAlpnProtocols,
    SslPrereadProtocol,
    /// `$request_filename`: the file the URI maps to under root or alias.
    RequestFilename,
    /// `$document_root`.
    DocumentRoot,
    /// `$realpath_root`: the root with symbolic links resolved.
    RealpathRoot,
    /// `$request_id`: 32 hex digits, random, one per request.
    RequestId,
    /// `$connection_requests`: this request's number on its connection.
    ConnectionRequests,
    /// `$request_completion`: `OK` once the response went out whole, else
    /// empty.
    RequestCompletion,
    /// `$sent_http_NAME`: a header of the response sent (for logs).
    SentHttp(String),
    /// `$realip_remote_addr`: the peer's address before the realip module.
    RealipRemoteAddr,
    /// `$realip_remote_port`: the peer's port before the realip module.
    RealipRemotePort,
    /// `$proxy_protocol_addr`, `_port`, `_server_addr`, `_server_port`:
    /// what the PROXY protocol header said (empty without one).
    ProxyProtocolAddr,
    ProxyProtocolPort,
    ProxyProtocolServerAddr,
    ProxyProtocolServerPort,
    /// `$proxy_protocol_tlv_NAME`: a TLV of a version 2 header.
    ProxyProtocolTlv(ProxyTlv),
    /// `$limit_req_status` and `$limit_conn_status` (stream: the latter).
    LimitReqStatus,
    LimitConnStatus,
    /// A variable `set` declares.
    User(String),
    /// `$1`..`$9`: a capture of the last regex that matched.
    Capture(usize),
    /// A variable a `map` block makes.
    Map(Arc<MapVar>),
}

/// Which TLV `$proxy_protocol_tlv_NAME` names: a type, at the top level or
/// inside the SSL TLV (`ssl_*`), or the SSL TLV's verify field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyTlv {
    Top(u8),
    Ssl(u8),
    SslVerify,
}

impl ProxyTlv {
    /// nginx's names (`alpn`, `ssl_cn`, ...), or the type in hex after `0x`
    /// (`ssl_0x` for one inside the SSL TLV).
    pub fn from_name(name: &str) -> Option<ProxyTlv> {
        let hex = |h: &str| {
            (!h.is_empty() && h.len() <= 2)
                .then(|| u8::from_str_radix(h, 16).ok())
                .flatten()
        };
        Some(match name {
            "alpn" => ProxyTlv::Top(0x01),
            "authority" => ProxyTlv::Top(0x02),
            "unique_id" => ProxyTlv::Top(0x05),
            "ssl" => ProxyTlv::Top(0x20),
            "netns" => ProxyTlv::Top(0x30),
            "ssl_verify" => ProxyTlv::SslVerify,
            "ssl_version" => ProxyTlv::Ssl(0x21),
            "ssl_cn" => ProxyTlv::Ssl(0x22),
            "ssl_cipher" => ProxyTlv::Ssl(0x23),
            "ssl_sig_alg" => ProxyTlv::Ssl(0x24),
            "ssl_key_alg" => ProxyTlv::Ssl(0x25),
            _ => {
                if let Some(h) = name.strip_prefix("ssl_0x") {
                    ProxyTlv::Ssl(hex(h)?)
                } else {
                    ProxyTlv::Top(hex(name.strip_prefix("0x")?)?)
                }
            }
        })
    }
}

/// A `map` variable: known by name before any text is compiled (so a use may
/// come before its block), given its map when the block is read.
#[derive(Debug)]
pub struct MapVar {
    pub name: String,
    /// Its place in a request's cache of map results; unique in one
    /// configuration.
    pub index: usize,
    pub map: OnceLock<super::map::Map>,
}

impl PartialEq for MapVar {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}
impl Eq for MapVar {}

/// The `map` variables of the http and of the stream block being built, and
/// which block is being read.
#[derive(Default)]
struct MapScope {
    http: Vec<Arc<MapVar>>,
    stream: Vec<Arc<MapVar>>,
    in_stream: bool,
}

thread_local! {
    /// The names `set` declares in the configuration being built.
    static DECLARED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The `map` variables of the configuration being built.
    static MAPS: std::cell::RefCell<MapScope> = std::cell::RefCell::new(MapScope::default());
}

/// Declares `set` variables while a configuration is built; undone on drop.
pub struct Declared;

pub fn declare(names: Vec<String>) -> Declared {
    DECLARED.with(|d| *d.borrow_mut() = names);
    Declared
}

/// Runs `f` with `names` (a regex's named captures) known as variables too,
/// as nginx knows a regex's names once it compiles it.
pub fn with_names<T>(names: &[String], f: impl FnOnce() -> T) -> T {
    let before = DECLARED.with(|d| {
        let mut d = d.borrow_mut();
        let n = d.len();
        d.extend(names.iter().cloned());
        n
    });
    let out = f();
    DECLARED.with(|d| d.borrow_mut().truncate(before));
    out
}

impl Drop for Declared {
    fn drop(&mut self) {
        DECLARED.with(|d| d.borrow_mut().clear());
        MAPS.with(|m| *m.borrow_mut() = MapScope::default());
    }
}

/// Declares the `map` variables of the http and stream blocks (names without
/// `$`, in order; a name given twice is one variable, as in nginx). Undone
/// with the `Declared` guard.
pub fn declare_maps(http: &[String], stream: &[String]) {
    let mut index = 0;
    let mut slots = |names: &[String]| {
        let mut out: Vec<Arc<MapVar>> = Vec::new();
        for n in names {
            if out.iter().any(|m| &m.name == n) {
                continue;
            }
            out.push(Arc::new(MapVar {
                name: n.clone(),
                index,
                map: OnceLock::new(),
            }));
            index += 1;
        }
        out
    };
    let scope = MapScope {
        http: slots(http),
        stream: slots(stream),
        in_stream: false,
    };
    MAPS.with(|m| *m.borrow_mut() = scope);
}

/// Texts compiled while this lives are the stream block's: its `map`
/// variables, not the http block's.
pub struct InStream;

pub fn in_stream() -> InStream {
    MAPS.with(|m| m.borrow_mut().in_stream = true);
    InStream
}

impl Drop for InStream {
    fn drop(&mut self) {
        MAPS.with(|m| m.borrow_mut().in_stream = false);
    }
}

/// The declared `map` variable `name` of the block being read.
pub fn map_var(name: &str) -> Option<Arc<MapVar>> {
    MAPS.with(|m| {
        let m = m.borrow();
        let list = if m.in_stream { &m.stream } else { &m.http };
        list.iter().find(|v| v.name == name).cloned()
    })
}

/// A variable name sluice provides itself (`set` may not redefine it).
pub fn is_builtin(name: &str) -> bool {
    !matches!(Var::lookup_builtin(name), None | Some(Var::User(_)))
}

impl Var {
    fn lookup(name: &str) -> Option<Var> {
        if let Some(v) = Var::lookup_builtin(name) {
            return Some(v);
        }
        if name.len() == 1 && name.as_bytes()[0].is_ascii_digit() {
            return Some(Var::Capture(usize::from(name.as_bytes()[0] - b'0')));
        }
        if let Some(m) = map_var(name) {
            return Some(Var::Map(m));
        }
        DECLARED
            .with(|d| d.borrow().iter().any(|n| n == name))
            .then(|| Var::User(name.to_string()))
    }

    fn lookup_builtin(name: &str) -> Option<Var> {
        if let Some(h) = name.strip_prefix("upstream_http_") {
            return Some(Var::UpstreamHttp(h.to_ascii_lowercase()));
        }
        if let Some(c) = name.strip_prefix("upstream_cookie_") {
            return Some(Var::UpstreamCookie(c.to_string()));
        }
        if let Some(h) = name.strip_prefix("sent_http_") {
            return Some(Var::SentHttp(h.to_ascii_lowercase()));
        }
        if let Some(h) = name.strip_prefix("http_") {
            return Some(Var::Http(h.to_ascii_lowercase()));
        }
        if let Some(a) = name.strip_prefix("arg_") {
            return Some(Var::Arg(a.to_string()));
        }
        if let Some(c) = name.strip_prefix("cookie_") {
            return Some(Var::Cookie(c.to_string()));
        }
        if let Some(t) = name.strip_prefix("proxy_protocol_tlv_") {
            return ProxyTlv::from_name(t).map(Var::ProxyProtocolTlv);
        }
        Some(match name {
            "args" | "query_string" => Var::Args,
            "connection" => Var::Connection,
            "host" => Var::Host,
            "hostname" => Var::Hostname,
            "is_args" => Var::IsArgs,
            "msec" => Var::Msec,
            "pid" => Var::Pid,
            "remote_addr" => Var::RemoteAddr,
            "remote_port" => Var::RemotePort,
            "request" => Var::Request,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "scheme" => Var::Scheme,
            "server_addr" => Var::ServerAddr,
            "server_name" => Var::ServerName,
            "server_port" => Var::ServerPort,
            "server_protocol" => Var::ServerProtocol,
            // The stream module's only, as nginx (http has none).
            "protocol" if MAPS.with(|m| m.borrow().in_stream) => Var::Protocol,
            "time_local" => Var::TimeLocal,
            "uri" | "document_uri" => Var::Uri,
            "binary_remote_addr" => Var::BinaryRemoteAddr,
            "request_filename" => Var::RequestFilename,
            "document_root" => Var::DocumentRoot,
            "realpath_root" => Var::RealpathRoot,
            "request_id" => Var::RequestId,
            "connection_requests" => Var::ConnectionRequests,
            "request_completion" => Var::RequestCompletion,
            "nginx_version" => Var::NginxVersion,
            "connections_active" => Var::ConnectionsActive,
            "connections_reading" => Var::ConnectionsReading,
            "connections_writing" => Var::ConnectionsWriting,
            "connections_waiting" => Var::ConnectionsWaiting,
            "realip_remote_addr" => Var::RealipRemoteAddr,
            "realip_remote_port" => Var::RealipRemotePort,
            "proxy_protocol_addr" => Var::ProxyProtocolAddr,
            "proxy_protocol_port" => Var::ProxyProtocolPort,
            "proxy_protocol_server_addr" => Var::ProxyProtocolServerAddr,
            "proxy_protocol_server_port" => Var::ProxyProtocolServerPort,
            "limit_req_status" => Var::LimitReqStatus,
            "limit_conn_status" => Var::LimitConnStatus,
            "remote_user" => Var::RemoteUser,
            "gzip_ratio" => Var::GzipRatio,
            "status" => Var::Status,
            "body_bytes_sent" => Var::BodyBytesSent,
            "bytes_sent" => Var::BytesSent,
            "request_length" => Var::RequestLength,
            // nginx's `$limit_rate`, which `set` may change: a user variable
            // that reads the rate in force until set.
            "limit_rate" => Var::User(name.to_string()),
            "request_body" => Var::RequestBody,
            "request_body_file" => Var::RequestBodyFile,
            "request_time" => Var::RequestTime,
            "time_iso8601" => Var::TimeIso8601,
            "proxy_host" => Var::ProxyHost,
            "fastcgi_script_name" => Var::FastcgiScriptName,
            // The request headers (fastcgi_params reads them).
            "content_type" => Var::Http("content_type".into()),
            "content_length" => Var::Http("content_length".into()),
            "fastcgi_path_info" => Var::FastcgiPathInfo,
            "proxy_port" => Var::ProxyPort,
            "proxy_add_x_forwarded_for" => Var::ProxyAddXForwardedFor,
            "upstream_addr" => Var::UpstreamAddr,
            "upstream_status" => Var::UpstreamStatus,
            "upstream_connect_time" => Var::UpstreamConnectTime,
            "upstream_queue_time" => Var::UpstreamQueueTime,
            "upstream_header_time" => Var::UpstreamHeaderTime,
            "upstream_response_time" => Var::UpstreamResponseTime,
            "upstream_response_length" => Var::UpstreamResponseLength,
            "upstream_bytes_received" => Var::UpstreamBytesReceived,
            "upstream_first_byte_time" => Var::UpstreamFirstByteTime,
            "upstream_session_time" => Var::UpstreamSessionTime,
            "bytes_received" => Var::BytesReceived,
            "session_time" => Var::SessionTime,
            "upstream_bytes_sent" => Var::UpstreamBytesSent,
            "https" => Var::Https,
            "http2" => Var::Http2,
            "ssl_protocol" => Var::SslProtocol,
            "ssl_cipher" => Var::SslCipher,
            "ssl_server_name" => Var::SslServerName,
            "ssl_session_reused" => Var::SslSessionReused,
            "ssl_client_verify" => Var::SslClientVerify,
            "ssl_client_s_dn" => Var::SslClientSDn,
            "ssl_client_i_dn" => Var::SslClientIDn,
            "ssl_client_serial" => Var::SslClientSerial,
            "ssl_client_fingerprint" => Var::SslClientFingerprint,
            "ssl_client_escaped_cert" => Var::SslClientEscapedCert,
            "ssl_client_cert" => Var::SslClientCert,
            "ssl_client_raw_cert" => Var::SslClientRawCert,
            "ssl_alpn_protocol" => Var::SslAlpnProtocol,
            "ssl_preread_server_name" => Var::SslPrereadServerName,
            "ssl_preread_alpn_protocols" => Var::SslPrereadAlpnProtocols,
            "ssl_preread_protocol" => Var::SslPrereadProtocol,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Lit(String),
    Var(Var),
}

/// A compiled text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub segments: Vec<Segment>,
}

impl Template {
    /// The text when it has no variables.
    pub fn as_literal(&self) -> Option<&str> {
        match self.segments.as_slice() {
            [] => Some(""),
            [Segment::Lit(s)] => Some(s),
            _ => None,
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Compiles `text`; the error is nginx's message without the location.
pub fn compile(text: &str) -> Result<Template, String> {
    let mut segments = Vec::new();
    let mut lit = String::new();
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        lit.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, next) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], &inner[end + 1..]),
                None => {
                    return Err(format!(
                        "the closing bracket in \"{inner}\" variable is missing"
                    ));
                }
            }
        } else {
            let n = after
                .find(|c: char| !is_name_char(c))
                .unwrap_or(after.len());
            (&after[..n], &after[n..])
        };
        if name.is_empty() || !name.chars().all(is_name_char) {
            return Err("invalid variable name".to_string());
        }
        let var = Var::lookup(name).ok_or_else(|| format!("unknown \"{name}\" variable"))?;
        if !lit.is_empty() {
            segments.push(Segment::Lit(std::mem::take(&mut lit)));
        }
        segments.push(Segment::Var(var));
        rest = next;
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        segments.push(Segment::Lit(lit));
    }
    Ok(Template { segments })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_vars() {
        let t = compile("hello").unwrap();
        assert_eq!(t.as_literal(), Some("hello"));
        let t = compile("a $host-${uri}b $http_User_Agent").unwrap();
        assert_eq!(
            t.segments,
            vec![
                Segment::Lit("a ".into()),
                Segment::Var(Var::Host),
                Segment::Lit("-".into()),
                Segment::Var(Var::Uri),
                Segment::Lit("b ".into()),
                Segment::Var(Var::Http("user_agent".into())),
            ]
        );
        assert_eq!(compile("").unwrap().as_literal(), Some(""));
    }

    #[test]
    fn errors() {
        assert_eq!(compile("$nope").unwrap_err(), "unknown \"nope\" variable");
        assert_eq!(compile("a $").unwrap_err(), "invalid variable name");
        assert!(compile("${host").unwrap_err().contains("closing bracket"));
    }
}
