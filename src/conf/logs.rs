//! `log_format NAME [escape=default|json|none] STRING...` and
//! `access_log PATH [FORMAT [buffer=SIZE] [gzip[=LEVEL]] [flush=TIME] [if=COND]] | off`. Formats are looked up when `access_log` is
//! read, so a format must be defined before it is used, as in nginx.

use std::sync::Arc;

use super::build::{Args, Builder, HTTP, LOC, Node, SRV, SSRV, STREAM, Spec, not_here};
use super::loc::{AccessLog, Escape, LogFormat};
use super::tree::Directive;
use super::{ConfError, vars};
use crate::log::files::Buffering;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "log_format",
        ctx: HTTP | STREAM,
        args: Args::AtLeast(2),
        block: false,
        set: set_log_format,
    },
    Spec {
        name: "access_log",
        ctx: HTTP | SRV | LOC | STREAM | SSRV,
        args: Args::AtLeast(1),
        block: false,
        set: set_access_log,
    },
];

fn set_log_format(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    // The stream module has its own formats (and no predefined one).
    let stream = match n {
        Node::Http(_) => false,
        Node::Stream(_) => true,
        _ => return Err(not_here(d)),
    };
    let name = d.args[0].clone();
    let known = if stream {
        &b.stream_log_formats
    } else {
        &b.log_formats
    };
    if known.iter().any(|f| f.name == name) {
        return Err(ConfError::at(
            format!("duplicate \"log_format\" name \"{name}\""),
            &d.src,
        ));
    }
    let mut rest = &d.args[1..];
    let mut escape = Escape::Default;
    if let Some(e) = rest[0].strip_prefix("escape=") {
        escape = match e {
            "default" => Escape::Default,
            "json" => Escape::Json,
            "none" => Escape::None,
            other => {
                return Err(ConfError::at(
                    format!("unknown log format escaping \"{other}\""),
                    &d.src,
                ));
            }
        };
        rest = &rest[1..];
        if rest.is_empty() {
            return Err(ConfError::at(
                "invalid number of arguments in \"log_format\" directive",
                &d.src,
            ));
        }
    }
    // The strings are concatenated with no separator.
    let text: String = rest.concat();
    let template = vars::compile(&text).map_err(|m| ConfError::at(m, &d.src))?;
    let list = if stream {
        &mut b.stream_log_formats
    } else {
        &mut b.log_formats
    };
    list.push(Arc::new(LogFormat::new(name, escape, template)));
    Ok(())
}

fn set_access_log(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let stream = matches!(n, Node::Stream(_) | Node::StreamServer(_));
    let formats = if stream {
        &b.stream_log_formats
    } else {
        &b.log_formats
    };
    let format = match d.args.get(1) {
        // http has `combined`; a stream access log names its format.
        None if !stream => b.log_formats[0].clone(),
        None if d.args[0] != "off" => {
            return Err(ConfError::at(
                "invalid number of arguments in \"access_log\" directive",
                &d.src,
            ));
        }
        None => b.log_formats[0].clone(),
        Some(name) => formats
            .iter()
            .find(|f| f.name == *name)
            .cloned()
            .ok_or_else(|| ConfError::at(format!("unknown log format \"{name}\""), &d.src))?,
    };
    // buffer=, gzip and flush= buffer the file's lines; if= is a condition.
    let mut cond = None;
    let (mut size, mut flush, mut gzip) = (None, None, None);
    for p in d.args.iter().skip(2) {
        if let Some(s) = p.strip_prefix("buffer=") {
            match super::values::parse_size(s)
                .filter(|&n| n > 0)
                .and_then(|n| usize::try_from(n).ok())
            {
                Some(n) => size = Some(n),
                None => {
                    return Err(ConfError::at(
                        format!("invalid buffer size \"{s}\""),
                        &d.src,
                    ));
                }
            }
        } else if let Some(t) = p.strip_prefix("flush=") {
            match super::values::parse_time(t, true).filter(|t| !t.is_zero()) {
                Some(t) => flush = Some(t),
                None => {
                    return Err(ConfError::at(format!("invalid flush time \"{t}\""), &d.src));
                }
            }
        } else if let Some(c) = p.strip_prefix("if=") {
            cond = Some(vars::compile(c).map_err(|m| ConfError::at(m, &d.src))?);
        } else if p == "gzip" {
            gzip = Some(1);
        } else if let Some(l) = p.strip_prefix("gzip=") {
            match l.parse::<u32>().ok().filter(|n| (1..=9).contains(n)) {
                Some(n) if l.bytes().all(|c| c.is_ascii_digit()) => gzip = Some(n),
                _ => {
                    return Err(ConfError::at(
                        format!("invalid compression level \"{l}\""),
                        &d.src,
                    ));
                }
            }
        } else {
            return Err(ConfError::at(format!("invalid parameter \"{p}\""), &d.src));
        }
    }
    // gzip alone buffers 64k, as nginx does.
    if gzip.is_some() && size.is_none() {
        size = Some(64 * 1024);
    }
    if flush.is_some() && size.is_none() {
        return Err(ConfError::at(
            format!("no buffer is defined for access_log \"{}\"", d.args[0]),
            &d.src,
        ));
    }
    let off = d.args[0] == "off";
    if off && d.args.len() > 1 {
        return Err(ConfError::at("invalid parameter \"off\"", &d.src));
    }
    let path = if crate::log::syslog::is_syslog(&d.args[0]) {
        crate::log::syslog::Spec::parse(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
        if size.is_some() {
            return Err(ConfError::at("logs to syslog cannot be buffered", &d.src));
        }
        std::path::PathBuf::from(&d.args[0])
    } else {
        // nginx opens a path with variables for each line, as the worker;
        // sluice's log files are the master's, opened once (they survive
        // the workers' change of user). Refused, not taken as a file of
        // that literal name, which would get every line.
        if !off && d.args[0].contains('$') {
            return Err(ConfError::at(
                format!(
                    "variables in the access_log path \"{}\" are not supported",
                    d.args[0]
                ),
                &d.src,
            ));
        }
        b.path(&d.args[0])
    };
    if let Some(size) = size {
        // One buffer per file: every buffered access_log naming it must agree.
        let buffering = Buffering { size, flush, gzip };
        match b.log_buffers.iter().find(|(p, _)| *p == path) {
            Some((_, had)) if *had != buffering => {
                return Err(ConfError::at(
                    format!(
                        "access_log \"{}\" already defined with conflicting parameters",
                        d.args[0]
                    ),
                    &d.src,
                ));
            }
            Some(_) => {}
            None => b.log_buffers.push((path.clone(), buffering)),
        }
    }
    let list = match n {
        Node::Stream(st) => st.access_log.get_or_insert_with(Vec::new),
        Node::StreamServer(s) => s.access_log.get_or_insert_with(Vec::new),
        other => other
            .loc_b()
            .ok_or_else(|| not_here(d))?
            .access_log
            .get_or_insert_with(Vec::new),
    };
    if off {
        list.clear();
    } else {
        list.push(AccessLog { path, format, cond });
    }
    Ok(())
}
