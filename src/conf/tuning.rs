//! nginx directives that tune what sluice does its own way (`sendfile`,
//! `tcp_nopush`, the hash table sizes, `open_file_cache`, ...): their
//! arguments are checked as nginx checks them, then they are accepted with no
//! effect, so a real nginx configuration loads unchanged. `load_module` is
//! refused with the reason. man/sluice.conf.5 lists each with why it has no
//! effect. Pure.

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, MAIN, Node, SRV, SSRV, STREAM, Spec, invalid_value};
use super::tree::Directive;
use super::values::{parse_flag, parse_size, parse_time};

const HSL: u8 = HTTP | SRV | LOC;

/// How a tuning directive's arguments look.
#[derive(Clone, Copy)]
enum Shape {
    Flag,
    Size,
    Time,
    Number,
    /// A size or `off` (`directio`).
    SizeOrOff,
    /// One of the words.
    Word(&'static [&'static str]),
    /// `open_file_cache off | max=N [inactive=time]`.
    OpenFileCache,
    /// `open_log_file_cache off | max=N [inactive=time] [min_uses=N]
    /// [valid=time]`.
    OpenLogFileCache,
    /// `aio on | off | threads[=pool]`.
    Aio,
    /// `output_buffers number size`.
    Buffers,
    /// `thread_pool name threads=N [max_queue=N]`.
    ThreadPool,
    /// A path (`lock_file`).
    Path,
}

/// Each accepted directive with the shape of its one argument.
const SHAPES: &[(&str, Shape)] = &[
    ("sendfile", Shape::Flag),
    ("tcp_nopush", Shape::Flag),
    ("tcp_nodelay", Shape::Flag),
    ("sendfile_max_chunk", Shape::Size),
    ("directio", Shape::SizeOrOff),
    ("directio_alignment", Shape::Size),
    ("aio", Shape::Aio),
    ("aio_write", Shape::Flag),
    ("types_hash_max_size", Shape::Number),
    ("types_hash_bucket_size", Shape::Size),
    ("variables_hash_max_size", Shape::Number),
    ("variables_hash_bucket_size", Shape::Size),
    ("server_names_hash_max_size", Shape::Number),
    ("server_names_hash_bucket_size", Shape::Size),
    ("map_hash_max_size", Shape::Number),
    ("map_hash_bucket_size", Shape::Size),
    ("proxy_headers_hash_max_size", Shape::Number),
    ("proxy_headers_hash_bucket_size", Shape::Size),
    ("open_file_cache", Shape::OpenFileCache),
    ("open_log_file_cache", Shape::OpenLogFileCache),
    ("open_file_cache_valid", Shape::Time),
    ("open_file_cache_min_uses", Shape::Number),
    ("open_file_cache_errors", Shape::Flag),
    ("reset_timedout_connection", Shape::Flag),
    ("lingering_close", Shape::Word(&["off", "on", "always"])),
    ("lingering_time", Shape::Time),
    ("lingering_timeout", Shape::Time),
    (
        "keepalive_disable",
        Shape::Word(&["none", "msie6", "safari"]),
    ),
    ("log_subrequest", Shape::Flag),
    ("pcre_jit", Shape::Flag),
    ("timer_resolution", Shape::Time),
    ("connection_pool_size", Shape::Size),
    ("request_pool_size", Shape::Size),
    ("output_buffers", Shape::Buffers),
    ("postpone_output", Shape::Size),
    ("read_ahead", Shape::Size),
    ("send_lowat", Shape::Size),
    ("subrequest_output_buffer_size", Shape::Size),
    ("client_body_in_single_buffer", Shape::Flag),
    ("msie_padding", Shape::Flag),
    ("msie_refresh", Shape::Flag),
    ("keepalive_min_timeout", Shape::Time),
    ("debug_points", Shape::Word(&["abort", "stop"])),
    ("lock_file", Shape::Path),
    ("thread_pool", Shape::ThreadPool),
];

const fn spec(name: &'static str, ctx: u8) -> Spec {
    Spec {
        name,
        ctx,
        args: Args::Exactly(1),
        block: false,
        set: set_tuning,
    }
}

pub(super) const TABLE: &[Spec] = &[
    spec("sendfile", HSL),
    spec("tcp_nopush", HSL),
    spec("tcp_nodelay", HSL | STREAM | SSRV),
    spec("sendfile_max_chunk", HSL),
    spec("directio", HSL),
    spec("directio_alignment", HSL),
    spec("aio", HSL),
    spec("aio_write", HSL),
    spec("types_hash_max_size", HSL),
    spec("types_hash_bucket_size", HSL),
    spec("variables_hash_max_size", HTTP | STREAM),
    spec("variables_hash_bucket_size", HTTP | STREAM),
    spec("server_names_hash_max_size", HTTP | STREAM),
    spec("server_names_hash_bucket_size", HTTP | STREAM),
    spec("map_hash_max_size", HTTP | STREAM),
    spec("map_hash_bucket_size", HTTP | STREAM),
    spec("proxy_headers_hash_max_size", HSL),
    spec("proxy_headers_hash_bucket_size", HSL),
    Spec {
        name: "open_file_cache",
        ctx: HSL,
        args: Args::Range(1, 2),
        block: false,
        set: set_tuning,
    },
    Spec {
        name: "open_log_file_cache",
        ctx: HSL | STREAM | SSRV,
        args: Args::Range(1, 4),
        block: false,
        set: set_tuning,
    },
    spec("open_file_cache_valid", HSL),
    spec("open_file_cache_min_uses", HSL),
    spec("open_file_cache_errors", HSL),
    spec("reset_timedout_connection", HSL),
    spec("lingering_close", HSL),
    spec("lingering_time", HSL),
    spec("lingering_timeout", HSL),
    Spec {
        name: "keepalive_disable",
        ctx: HSL,
        args: Args::AtLeast(1),
        block: false,
        set: set_tuning,
    },
    spec("log_subrequest", HSL),
    spec("pcre_jit", MAIN),
    spec("timer_resolution", MAIN),
    spec("connection_pool_size", HTTP | SRV | STREAM | SSRV),
    spec("request_pool_size", HTTP | SRV),
    Spec {
        name: "output_buffers",
        ctx: HSL,
        args: Args::Exactly(2),
        block: false,
        set: set_tuning,
    },
    spec("postpone_output", HSL),
    spec("read_ahead", HSL),
    spec("send_lowat", HSL),
    spec("subrequest_output_buffer_size", HSL),
    spec("client_body_in_single_buffer", HSL),
    spec("msie_padding", HSL),
    spec("msie_refresh", HSL),
    spec("keepalive_min_timeout", HSL),
    spec("debug_points", MAIN),
    spec("lock_file", MAIN),
    Spec {
        name: "thread_pool",
        ctx: MAIN,
        args: Args::Range(2, 3),
        block: false,
        set: set_tuning,
    },
    Spec {
        name: "load_module",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_load_module,
    },
];

fn fits(shape: Shape, a: &str) -> bool {
    match shape {
        Shape::Flag => parse_flag(a).is_some(),
        Shape::Size => parse_size(a).is_some(),
        Shape::Time => parse_time(a, true).is_some(),
        Shape::Number => super::build::number::<u64>(a).is_some(),
        Shape::SizeOrOff => a == "off" || parse_size(a).is_some(),
        Shape::Word(words) => words.contains(&a),
        Shape::OpenFileCache | Shape::OpenLogFileCache | Shape::Buffers | Shape::ThreadPool => {
            false
        }
        Shape::Path => !a.is_empty(),
        Shape::Aio => {
            matches!(a, "on" | "off" | "threads")
                || a.strip_prefix("threads=").is_some_and(|p| !p.is_empty())
        }
    }
}

/// `open_file_cache off | max=N [inactive=time]`, as nginx checks it; with
/// `log`, `open_log_file_cache`'s `min_uses=N` and `valid=time` too.
fn open_file_cache(args: &[String], log: bool) -> bool {
    if args.len() == 1 && args[0] == "off" {
        return true;
    }
    let mut max = false;
    for a in args {
        if let Some(n) = a.strip_prefix("max=") {
            match super::build::number::<u64>(n) {
                Some(n) if n > 0 => max = true,
                _ => return false,
            }
        } else if let Some(t) = a.strip_prefix("inactive=") {
            if parse_time(t, false).is_none() {
                return false;
            }
        } else if let (true, Some(t)) = (log, a.strip_prefix("valid=")) {
            if parse_time(t, false).is_none() {
                return false;
            }
        } else if let (true, Some(n)) = (log, a.strip_prefix("min_uses=")) {
            if super::build::number::<u32>(n).is_none() {
                return false;
            }
        } else {
            return false;
        }
    }
    max
}

/// `thread_pool name threads=N [max_queue=N]`, as nginx checks it.
fn thread_pool(args: &[String]) -> bool {
    let Some((name, rest)) = args.split_first() else {
        return false;
    };
    let mut threads = false;
    for a in rest {
        if let Some(n) = a.strip_prefix("threads=") {
            match super::build::number::<u32>(n) {
                Some(n) if n > 0 => threads = true,
                _ => return false,
            }
        } else if let Some(n) = a.strip_prefix("max_queue=") {
            if super::build::number::<u32>(n).is_none() {
                return false;
            }
        } else {
            return false;
        }
    }
    !name.is_empty() && threads
}

fn set_tuning(_: &mut Builder, d: &Directive, _: &mut Node<'_>) -> Result<(), ConfError> {
    let Some(&(_, shape)) = SHAPES.iter().find(|(name, _)| *name == d.name) else {
        return Err(invalid_value(d));
    };
    let ok = match shape {
        Shape::OpenFileCache => open_file_cache(&d.args, false),
        Shape::OpenLogFileCache => open_file_cache(&d.args, true),
        Shape::Buffers => {
            super::build::number::<u32>(&d.args[0]).is_some_and(|n| n > 0)
                && parse_size(&d.args[1]).is_some_and(|n| n > 0)
        }
        Shape::ThreadPool => thread_pool(&d.args),
        Shape::Word(_) if d.name == "keepalive_disable" => d
            .args
            .iter()
            .all(|a| fits(shape, a) && (d.args.len() == 1 || a != "none")),
        _ => d.args.len() == 1 && fits(shape, &d.args[0]),
    };
    if ok {
        return Ok(());
    }
    Err(match shape {
        Shape::Flag => ConfError::at(
            format!(
                "invalid value \"{}\" in \"{}\" directive, it must be \"on\" or \"off\"",
                d.args[0], d.name
            ),
            &d.src,
        ),
        _ => ConfError::at(
            format!(
                "invalid value \"{}\" in \"{}\" directive",
                d.args.join(" "),
                d.name
            ),
            &d.src,
        ),
    })
}

fn set_load_module(_: &mut Builder, d: &Directive, _: &mut Node<'_>) -> Result<(), ConfError> {
    Err(ConfError::at(
        format!(
            "\"load_module\" cannot load \"{}\": sluice has no dynamic modules (what it has is built in; `sluice -V` lists the nginx modules it does not have)",
            d.args[0]
        ),
        &d.src,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};

    #[test]
    fn stock_tuning_accepted() {
        let (_, w) = try_build(
            "pcre_jit on; thread_pool default threads=32 max_queue=65536; lock_file logs/nginx.lock;
             events {} http { sendfile on; tcp_nopush on; tcp_nodelay off;
             types_hash_max_size 2048; server_names_hash_bucket_size 64;
             open_file_cache max=1000 inactive=20s; open_file_cache_valid 30s;
             open_file_cache_min_uses 2; open_file_cache_errors on;
             keepalive_disable msie6 safari; aio threads=default; directio 4m;
             lingering_close always; reset_timedout_connection on;
             output_buffers 2 32k; postpone_output 1460; connection_pool_size 512;
             open_log_file_cache max=1000 inactive=20s valid=1m min_uses=2;
             server { listen 127.0.0.1:8080; location / { sendfile off; open_file_cache off;
             open_log_file_cache off; } } }
             stream { open_log_file_cache max=10; server { listen 127.0.0.1:9000; return x;
             open_log_file_cache off; } }",
        )
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn tuning_errors() {
        assert_eq!(
            err("events {} http { sendfile yes; }"),
            "invalid value \"yes\" in \"sendfile\" directive, it must be \"on\" or \"off\" in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { types_hash_max_size big; }"),
            "invalid value \"big\" in \"types_hash_max_size\" directive in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { open_file_cache inactive=20s; }"),
            "invalid value \"inactive=20s\" in \"open_file_cache\" directive in /t.conf:1"
        );
        assert_eq!(
            err("events {} stream { open_log_file_cache valid=1m; }"),
            "invalid value \"valid=1m\" in \"open_log_file_cache\" directive in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { open_file_cache max=1 valid=1m; }"),
            "invalid value \"max=1 valid=1m\" in \"open_file_cache\" directive in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { keepalive_disable none msie6; }"),
            "invalid value \"none msie6\" in \"keepalive_disable\" directive in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { lingering_close sometimes; }"),
            "invalid value \"sometimes\" in \"lingering_close\" directive in /t.conf:1"
        );
        assert_eq!(
            err("thread_pool p max_queue=10; events {}"),
            "invalid value \"p max_queue=10\" in \"thread_pool\" directive in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { output_buffers 0 32k; }"),
            "invalid value \"0 32k\" in \"output_buffers\" directive in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { pcre_jit on; }"),
            "\"pcre_jit\" directive is not allowed here in /t.conf:1"
        );
    }

    #[test]
    fn load_module_refused() {
        let e = err("load_module modules/ngx_http_echo_module.so; events {}");
        assert!(
            e.starts_with("\"load_module\" cannot load \"modules/ngx_http_echo_module.so\": sluice has no dynamic modules"),
            "{e}"
        );
        assert!(e.ends_with("in /t.conf:1"), "{e}");
    }
}
