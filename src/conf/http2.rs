//! The `ngx_http_v2_module` directives: `http2`, its stream and buffer
//! limits, and the obsolete ones nginx still accepts with a warning (their
//! work is done by `keepalive_timeout`, `keepalive_requests` and
//! `large_client_header_buffers`, as in nginx 1.19.7 and later). The
//! `listen ... http2` parameter is `http.rs`'s. Pure.

use super::build::{Args, Builder, HTTP, Node, SRV, Spec, duplicate, flag, not_here, number};
use super::loc::LocB;
use super::tree::Directive;
use super::{ConfError, values};

const HS: u8 = HTTP | SRV;
const HSL: u8 = HTTP | SRV | super::build::LOC;

/// nginx's largest DATA frame (2^24 - 1): a larger `http2_chunk_size` is
/// cut to it.
const MAX_FRAME: u64 = (1 << 24) - 1;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "http2",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_http2,
    },
    Spec {
        name: "http2_max_concurrent_streams",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_streams,
    },
    Spec {
        name: "http2_recv_buffer_size",
        ctx: HTTP,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "http2_chunk_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "http2_idle_timeout",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_obsolete,
    },
    Spec {
        name: "http2_recv_timeout",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_obsolete,
    },
    Spec {
        name: "http2_max_requests",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_obsolete,
    },
    Spec {
        name: "http2_max_field_size",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_obsolete,
    },
    Spec {
        name: "http2_max_header_size",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_obsolete,
    },
];

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| not_here(d))
}

fn once<T>(slot: &mut Option<T>, v: T, d: &Directive) -> Result<(), ConfError> {
    if slot.is_some() {
        return Err(duplicate(d));
    }
    *slot = Some(v);
    Ok(())
}

fn set_http2(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = flag(d)?;
    once(&mut loc(n, d)?.http2, v, d)
}

fn set_streams(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v: u32 = number(&d.args[0])
        .ok_or_else(|| ConfError::at(format!("\"{}\" directive invalid number", d.name), &d.src))?;
    once(&mut loc(n, d)?.http2_max_concurrent_streams, v, d)
}

/// `http2_recv_buffer_size` must hold more than two of nginx's 16-byte
/// state buffers; `http2_chunk_size` must be above zero and is cut to the
/// largest frame.
fn set_size(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = values::parse_size(&d.args[0]).ok_or_else(|| super::build::invalid_value(d))?;
    let l = loc(n, d)?;
    let small = || {
        ConfError::at(
            format!("\"{}\" directive value is too small", d.name),
            &d.src,
        )
    };
    if d.name == "http2_recv_buffer_size" {
        if v <= 32 {
            return Err(small());
        }
        return once(&mut l.http2_recv_buffer_size, v, d);
    }
    if v == 0 {
        return Err(small());
    }
    once(&mut l.http2_chunk_size, v.min(MAX_FRAME), d)
}

/// The directives nginx 1.19.7 made obsolete: the value is checked as
/// nginx checks it, then a warning names the directive that does the work.
fn set_obsolete(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    loc(n, d)?;
    let a = &d.args[0];
    let (ok, instead) = match d.name.as_str() {
        "http2_idle_timeout" => (values::parse_time(a, true).is_some(), "keepalive_timeout"),
        "http2_recv_timeout" => (
            values::parse_time(a, true).is_some(),
            "client_header_timeout",
        ),
        "http2_max_requests" => (number::<u64>(a).is_some(), "keepalive_requests"),
        _ => (
            values::parse_size(a).is_some(),
            "large_client_header_buffers",
        ),
    };
    if !ok {
        return Err(super::build::invalid_value(d));
    }
    b.warnings.push(ConfError::at(
        format!(
            "the \"{}\" directive is obsolete, use the \"{instead}\" directive instead",
            d.name
        ),
        &d.src,
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};

    fn conf(body: &str) -> String {
        format!("events {{}} http {{ {body} }}")
    }

    #[test]
    fn defaults_and_levels() {
        let (c, w) = try_build(&conf(
            "http2_recv_buffer_size 1m; server { listen 127.0.0.1:8080; http2 on; \
             http2_max_concurrent_streams 7; location / { http2_chunk_size 100k; } }",
        ))
        .unwrap();
        assert!(w.is_empty());
        let s = &c.http.as_ref().unwrap().servers[0];
        assert!(s.conf.http2);
        assert_eq!(s.conf.http2_max_concurrent_streams, 7);
        assert_eq!(s.conf.http2_recv_buffer_size, 1 << 20);
        assert_eq!(s.conf.http2_chunk_size, 8192);
        assert_eq!(s.locations[0].conf.http2_chunk_size, 100 * 1024);
        let (c, _) = try_build(&conf("server { listen 127.0.0.1:8080; }")).unwrap();
        let s = &c.http.as_ref().unwrap().servers[0];
        assert!(!s.conf.http2);
        assert_eq!(s.conf.http2_max_concurrent_streams, 128);
        assert_eq!(s.conf.http2_recv_buffer_size, 256 * 1024);
    }

    #[test]
    fn listen_http2_is_deprecated_but_works() {
        let (c, w) = try_build(&conf("server { listen 127.0.0.1:8080 http2; }")).unwrap();
        assert!(c.http.as_ref().unwrap().servers[0].listen[0].http2);
        assert!(w[0].to_string().contains(
            "the \"listen ... http2\" directive is deprecated, use the \"http2\" directive instead"
        ));
    }

    #[test]
    fn obsolete_ones_warn() {
        let (_, w) = try_build(&conf(
            "http2_max_field_size 4k; http2_max_header_size 16k; \
             http2_idle_timeout 3m; http2_max_requests 1000;",
        ))
        .unwrap();
        let w: Vec<String> = w.iter().map(|e| e.to_string()).collect();
        assert!(w[0].contains("the \"http2_max_field_size\" directive is obsolete, use the \"large_client_header_buffers\" directive instead"));
        assert!(w[2].contains("use the \"keepalive_timeout\" directive instead"));
        assert!(w[3].contains("use the \"keepalive_requests\" directive instead"));
    }

    #[test]
    fn errors_name_the_line() {
        assert!(err(&conf("http2 maybe;")).contains("in /t.conf:1"));
        assert!(
            err(&conf("http2_chunk_size 0;"))
                .contains("\"http2_chunk_size\" directive value is too small")
        );
        assert!(err(&conf("http2_recv_buffer_size 16;")).contains("value is too small"));
        assert!(
            err(&conf("server { http2_recv_buffer_size 1m; }")).contains("is not allowed here")
        );
        assert!(err(&conf("http2_max_concurrent_streams x;")).contains("invalid number"));
        assert!(err(&conf("http2_idle_timeout forever;")).contains("invalid value"));
        assert!(err(&conf("http2 on; http2 off;")).contains("is duplicate"));
        assert!(
            err(&conf("server { listen 127.0.0.1:8080 http3; }"))
                .contains("invalid parameter \"http3\"")
        );
    }
}
