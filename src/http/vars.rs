//! Per-request evaluation of compiled texts (`conf::vars::Template`). Values are
//! computed only when a text asks for them.

use std::net::SocketAddr;

use hyper::HeaderMap;

use crate::conf::vars::{Segment, Template, Var};

/// What one connection knows about itself.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// nginx's connection number (`$connection`, `*N` in the error log).
    pub number: u64,
    /// None for a unix-socket client.
    pub remote: Option<SocketAddr>,
    pub local: Option<SocketAddr>,
    /// The listening address text for a unix socket (`unix:/path`).
    pub listen_text: String,
}

/// What evaluation of a request's variables needs.
pub struct RequestVars<'a> {
    pub conn: &'a ConnInfo,
    pub method: &'a str,
    /// The normalized path (`$uri`).
    pub uri: &'a str,
    /// The path and query as received (`$request_uri`).
    pub request_uri: &'a str,
    pub args: Option<&'a str>,
    pub protocol: &'a str,
    pub headers: &'a HeaderMap,
    /// `Host` without the port, lowercased, else the server's name.
    pub host: &'a str,
    pub server_name: &'a str,
}

impl RequestVars<'_> {
    fn header(&self, name: &str) -> Option<String> {
        // $http_x_forwarded_for matches X-Forwarded-For: `_` stands for `-`.
        let wanted = name.replace('_', "-");
        let mut vals = self
            .headers
            .get_all(wanted.as_str())
            .iter()
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

    fn arg(&self, name: &str) -> Option<String> {
        self.args?
            .split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_string())
    }

    fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }

    pub fn value(&self, v: &Var) -> String {
        let c = self.conn;
        match v {
            Var::Args => self.args.unwrap_or("").to_string(),
            Var::Connection => c.number.to_string(),
            Var::Host => self.host.to_string(),
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
            Var::RemoteAddr => c
                .remote
                .map(|a| a.ip().to_string())
                .unwrap_or_else(|| "unix:".into()),
            Var::RemotePort => c.remote.map(|a| a.port().to_string()).unwrap_or_default(),
            Var::Request => format!("{} {} {}", self.method, self.request_uri, self.protocol),
            Var::RequestMethod => self.method.to_string(),
            Var::RequestUri => self.request_uri.to_string(),
            Var::Scheme => "http".to_string(),
            Var::ServerAddr => c
                .local
                .map(|a| a.ip().to_string())
                .unwrap_or_else(|| c.listen_text.clone()),
            Var::ServerName => self.server_name.to_string(),
            Var::ServerPort => c.local.map(|a| a.port().to_string()).unwrap_or_default(),
            Var::ServerProtocol => self.protocol.to_string(),
            Var::TimeLocal => chrono::Local::now()
                .format("%d/%b/%Y:%H:%M:%S %z")
                .to_string(),
            Var::Uri => self.uri.to_string(),
            Var::Http(h) => self.header(h).unwrap_or_default(),
            Var::Arg(a) => self.arg(a).unwrap_or_default(),
            Var::Cookie(k) => self.cookie(k).unwrap_or_default(),
        }
    }

    pub fn eval(&self, t: &Template) -> String {
        if let Some(l) = t.as_literal() {
            return l.to_string();
        }
        let mut out = String::new();
        for s in &t.segments {
            match s {
                Segment::Lit(l) => out.push_str(l),
                Segment::Var(v) => out.push_str(&self.value(v)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::vars::compile;

    #[test]
    fn evaluates() {
        let conn = ConnInfo {
            number: 7,
            remote: Some("127.0.0.2:5555".parse().unwrap()),
            local: Some("127.0.0.1:8080".parse().unwrap()),
            listen_text: String::new(),
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "1.2.3.4".parse().unwrap());
        headers.append("x-forwarded-for", "5.6.7.8".parse().unwrap());
        headers.insert("cookie", "a=1; b=2".parse().unwrap());
        let rv = RequestVars {
            conn: &conn,
            method: "GET",
            uri: "/p",
            request_uri: "/p?x=1&y=2",
            args: Some("x=1&y=2"),
            protocol: "HTTP/1.1",
            headers: &headers,
            host: "example.com",
            server_name: "srv",
        };
        let t = compile("$remote_addr:$remote_port $server_addr:$server_port $connection $request $arg_y $cookie_b [$http_x_forwarded_for] $host$is_args$args $server_name").unwrap();
        assert_eq!(
            rv.eval(&t),
            "127.0.0.2:5555 127.0.0.1:8080 7 GET /p?x=1&y=2 HTTP/1.1 2 2 [1.2.3.4, 5.6.7.8] example.com?x=1&y=2 srv"
        );
    }
}
