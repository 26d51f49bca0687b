//! `log_format NAME [escape=default|json|none] STRING...` and
//! `access_log PATH [FORMAT] | off`. Formats are looked up when `access_log` is
//! read, so a format must be defined before it is used, as in nginx.

use std::sync::Arc;

use super::build::{Args, Builder, HTTP, LOC, Node, SRV, SSRV, STREAM, Spec, not_here};
use super::loc::{AccessLog, Escape, LogFormat};
use super::tree::Directive;
use super::{ConfError, vars};

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
    list.push(Arc::new(LogFormat {
        name,
        escape,
        template,
    }));
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
    // buffer= and flush= are accepted (each line is written at once);
    // gzip is refused; if= is a condition.
    let mut cond = None;
    for p in d.args.iter().skip(2) {
        if let Some(size) = p.strip_prefix("buffer=") {
            if super::values::parse_size(size).is_none_or(|n| n == 0) {
                return Err(ConfError::at(
                    format!("invalid buffer size \"{size}\""),
                    &d.src,
                ));
            }
        } else if let Some(t) = p.strip_prefix("flush=") {
            if super::values::parse_time(t, true).is_none_or(|t| t.is_zero()) {
                return Err(ConfError::at(format!("invalid flush time \"{t}\""), &d.src));
            }
        } else if let Some(c) = p.strip_prefix("if=") {
            cond = Some(vars::compile(c).map_err(|m| ConfError::at(m, &d.src))?);
        } else if p == "gzip" || p.starts_with("gzip=") {
            return Err(ConfError::at(
                format!("access_log parameter \"{p}\" is not supported"),
                &d.src,
            ));
        } else {
            return Err(ConfError::at(format!("invalid parameter \"{p}\""), &d.src));
        }
    }
    let off = d.args[0] == "off";
    if off && d.args.len() > 1 {
        return Err(ConfError::at("invalid parameter \"off\"", &d.src));
    }
    let path = b.path(&d.args[0]);
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
