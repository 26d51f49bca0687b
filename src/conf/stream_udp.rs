//! The stream block's UDP settings: `listen ... udp` (what may go with it,
//! as nginx's `ngx_stream_core_listen` checks) and the numbers of
//! `proxy_responses` and `proxy_requests`. Parsing and checks only; the
//! sessions are `stream::udp`'s.

use super::build::number;
use super::model::ListenAddr;
use super::tree::Directive;
use super::{ConfError, Src};

/// The addresses of a `listen ... udp`: datagram ones. nginx refuses `ssl`,
/// `proxy_protocol` and `backlog=` with `udp` in these words; a unix
/// datagram socket is not supported here.
pub(super) fn listen_udp(
    addrs: Vec<ListenAddr>,
    ssl: bool,
    proxy_protocol: bool,
    backlog: bool,
    src: &Src,
) -> Result<Vec<ListenAddr>, ConfError> {
    let refuse = |what: &str| {
        Err(ConfError::at(
            format!("\"{what}\" parameter is incompatible with \"udp\""),
            src,
        ))
    };
    if backlog {
        return refuse("backlog");
    }
    if ssl {
        return refuse("ssl");
    }
    if proxy_protocol {
        return refuse("proxy_protocol");
    }
    addrs
        .into_iter()
        .map(|a| match a {
            ListenAddr::Inet(a) | ListenAddr::Udp(a) => Ok(ListenAddr::Udp(a)),
            ListenAddr::Unix(_) => Err(ConfError::at(
                "\"udp\" on unix sockets is not supported",
                src,
            )),
        })
        .collect()
}

/// The number of `proxy_responses` or `proxy_requests` (nginx's
/// `ngx_conf_set_num_slot`: a non-negative integer).
pub(super) fn count(d: &Directive) -> Result<u32, ConfError> {
    number::<u32>(&d.args[0])
        .ok_or_else(|| ConfError::at(format!("\"{}\" directive invalid number", d.name), &d.src))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use crate::conf::model::ListenAddr;

    #[test]
    fn udp_listen_and_counts() {
        let (c, _) = try_build(
            "events {} stream { proxy_responses 1; \
             server { listen 127.0.0.1:9000 udp reuseport; listen 127.0.0.1:9000; \
             proxy_pass 127.0.0.1:9001; proxy_requests 2; } \
             server { listen 127.0.0.1:9002 udp; proxy_pass 127.0.0.1:9001; \
             proxy_responses 0; } \
             server { listen 127.0.0.1:9003; proxy_pass 127.0.0.1:9001; } }",
        )
        .expect("config");
        let st = c.stream.expect("stream");
        let (a, b, t) = (&st.servers[0], &st.servers[1], &st.servers[2]);
        assert!(matches!(a.listen[0].addr, ListenAddr::Udp(_)) && a.listen[0].reuseport);
        assert!(matches!(a.listen[1].addr, ListenAddr::Inet(_)));
        assert_ne!(a.listen[0].addr, a.listen[1].addr, "TCP and UDP differ");
        assert_eq!((a.proxy_responses, a.proxy_requests), (Some(1), 2));
        assert_eq!((b.proxy_responses, b.proxy_requests), (Some(0), 0));
        let _ = t;
        let (c, _) = try_build(
            "events {} stream { server { listen 127.0.0.1:9000 udp; proxy_pass 127.0.0.1:1; } }",
        )
        .expect("config");
        let s = &c.stream.expect("stream").servers[0];
        assert_eq!((s.proxy_responses, s.proxy_requests), (None, 0), "defaults");
    }

    #[test]
    fn udp_errors() {
        let srv = |l: &str| format!("events {{}}\nstream {{\nserver {{\n{l}\nreturn x;\n}}\n}}");
        assert_eq!(
            err(&srv("listen 127.0.0.1:1 udp ssl;")),
            "\"ssl\" parameter is incompatible with \"udp\" in /t.conf:4"
        );
        assert_eq!(
            err(&srv("listen 127.0.0.1:1 proxy_protocol udp;")),
            "\"proxy_protocol\" parameter is incompatible with \"udp\" in /t.conf:4"
        );
        assert_eq!(
            err(&srv("listen 127.0.0.1:1 udp backlog=10;")),
            "\"backlog\" parameter is incompatible with \"udp\" in /t.conf:4"
        );
        assert_eq!(
            err(&srv("listen unix:/tmp/x.sock udp;")),
            "\"udp\" on unix sockets is not supported in /t.conf:4"
        );
        assert_eq!(
            err(&srv("listen 127.0.0.1:1 udp;\nproxy_responses -1;")),
            "\"proxy_responses\" directive invalid number in /t.conf:5"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_requests x;\n}"),
            "\"proxy_requests\" directive invalid number in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_requests 1;\nproxy_requests 2;\n}"),
            "\"proxy_requests\" directive is duplicate in /t.conf:4"
        );
        assert!(err("events {} http { server { listen 127.0.0.1:1 udp; } }").contains("udp"));
    }
}
