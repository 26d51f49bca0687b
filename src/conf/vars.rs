//! Texts with variables (`$name`, `${name}`), compiled once at config load into
//! literal and variable segments. Unknown variables are config errors. Evaluation
//! happens per request in `http::vars`; this module only names what exists.

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
    Status,
    BodyBytesSent,
    BytesSent,
    RequestLength,
    RequestTime,
    TimeIso8601,
    ProxyHost,
    ProxyPort,
    ProxyAddXForwardedFor,
    UpstreamAddr,
    UpstreamStatus,
    UpstreamConnectTime,
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
    /// `$https`: "on" over TLS, else empty.
    Https,
    SslProtocol,
    SslCipher,
    SslServerName,
    /// `$ssl_session_reused`: "r" or ".".
    SslSessionReused,
    /// `$request_filename`: the file the URI maps to under root or alias.
    RequestFilename,
    /// `$document_root`.
    DocumentRoot,
    /// `$realip_remote_addr`: the peer's address before the realip module.
    RealipRemoteAddr,
    /// A variable `set` declares.
    User(String),
    /// `$1`..`$9`: a capture of the last regex that matched.
    Capture(usize),
}

thread_local! {
    /// The names `set` declares in the configuration being built.
    static DECLARED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Declares `set` variables while a configuration is built; undone on drop.
pub struct Declared;

pub fn declare(names: Vec<String>) -> Declared {
    DECLARED.with(|d| *d.borrow_mut() = names);
    Declared
}

impl Drop for Declared {
    fn drop(&mut self) {
        DECLARED.with(|d| d.borrow_mut().clear());
    }
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
        DECLARED
            .with(|d| d.borrow().iter().any(|n| n == name))
            .then(|| Var::User(name.to_string()))
    }

    fn lookup_builtin(name: &str) -> Option<Var> {
        if let Some(h) = name.strip_prefix("upstream_http_") {
            return Some(Var::UpstreamHttp(h.to_ascii_lowercase()));
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
            "time_local" => Var::TimeLocal,
            "uri" | "document_uri" => Var::Uri,
            "binary_remote_addr" => Var::BinaryRemoteAddr,
            "request_filename" => Var::RequestFilename,
            "document_root" => Var::DocumentRoot,
            "realip_remote_addr" => Var::RealipRemoteAddr,
            "remote_user" => Var::RemoteUser,
            "status" => Var::Status,
            "body_bytes_sent" => Var::BodyBytesSent,
            "bytes_sent" => Var::BytesSent,
            "request_length" => Var::RequestLength,
            "request_time" => Var::RequestTime,
            "time_iso8601" => Var::TimeIso8601,
            "proxy_host" => Var::ProxyHost,
            "proxy_port" => Var::ProxyPort,
            "proxy_add_x_forwarded_for" => Var::ProxyAddXForwardedFor,
            "upstream_addr" => Var::UpstreamAddr,
            "upstream_status" => Var::UpstreamStatus,
            "upstream_connect_time" => Var::UpstreamConnectTime,
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
            "ssl_protocol" => Var::SslProtocol,
            "ssl_cipher" => Var::SslCipher,
            "ssl_server_name" => Var::SslServerName,
            "ssl_session_reused" => Var::SslSessionReused,
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
