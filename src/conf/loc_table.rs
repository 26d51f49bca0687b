//! Directives that set one merged location setting (`loc::LocConf`): times,
//! sizes, flags, numbers and lists, in the http, server and location contexts.
//! Each is set at most once per level.

use std::time::Duration;

use super::build::{
    Args, Builder, HTTP, LOC, Node, SRV, SSRV, STREAM, Spec, duplicate, flag, not_here, number,
    offset_arg, size_arg, time_arg,
};
use super::loc::{
    AddHeader, ErrorPage, ErrorPageStatus, LocB, NextUpstream, Redirect, Root, Trusted,
};
use super::tree::Directive;
use super::{ConfError, vars};

const HSL: u8 = HTTP | SRV | LOC;
const HS: u8 = HTTP | SRV;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "if_modified_since",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_if_modified_since,
    },
    Spec {
        name: "etag",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "log_not_found",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "underscores_in_headers",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "ignore_invalid_headers",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_redirect",
        ctx: HSL,
        args: Args::Range(1, 2),
        block: false,
        set: set_redirect,
    },
    Spec {
        name: "client_body_temp_path",
        ctx: HSL,
        args: Args::Range(1, 4),
        block: false,
        set: set_temp_path,
    },
    Spec {
        name: "fastcgi_temp_path",
        ctx: HSL,
        args: Args::Range(1, 4),
        block: false,
        set: set_temp_path,
    },
    Spec {
        name: "proxy_temp_path",
        ctx: HSL,
        args: Args::Range(1, 4),
        block: false,
        set: set_temp_path,
    },
    Spec {
        name: "proxy_buffering",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_request_buffering",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_buffer_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "proxy_buffers",
        ctx: HSL,
        args: Args::Exactly(2),
        block: false,
        set: set_buffers,
    },
    Spec {
        name: "proxy_busy_buffers_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "proxy_max_temp_file_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "proxy_temp_file_write_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "send_timeout",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "proxy_intercept_errors",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "client_header_buffer_size",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "large_client_header_buffers",
        ctx: HS,
        args: Args::Exactly(2),
        block: false,
        set: set_header_buffers,
    },
    Spec {
        name: "set_real_ip_from",
        // Stream too: the stream realip module's, for the PROXY protocol.
        ctx: HSL | STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_real_ip_from,
    },
    Spec {
        name: "real_ip_header",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_real_ip_header,
    },
    Spec {
        name: "real_ip_recursive",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "root",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_root,
    },
    Spec {
        name: "alias",
        ctx: LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_root,
    },
    Spec {
        name: "index",
        ctx: HSL,
        args: Args::AtLeast(1),
        block: false,
        set: set_index,
    },
    Spec {
        name: "types",
        ctx: HSL,
        args: Args::Exactly(0),
        block: true,
        set: set_types,
    },
    Spec {
        name: "add_header",
        ctx: HSL,
        args: Args::Range(2, 3),
        block: false,
        set: set_add_header,
    },
    Spec {
        name: "error_page",
        ctx: HSL,
        args: Args::AtLeast(2),
        block: false,
        set: set_error_page,
    },
    Spec {
        name: "keepalive_timeout",
        ctx: HSL,
        args: Args::Range(1, 2),
        block: false,
        set: set_time,
    },
    Spec {
        name: "client_header_timeout",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "client_body_timeout",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "proxy_connect_timeout",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "proxy_connect_race",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_race,
    },
    Spec {
        name: "proxy_read_timeout",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "proxy_send_timeout",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "proxy_next_upstream_timeout",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "keepalive_requests",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_number,
    },
    Spec {
        name: "proxy_next_upstream_tries",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_number,
    },
    Spec {
        name: "client_max_body_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "client_body_buffer_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    },
    Spec {
        name: "rewrite_log",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "uninitialized_variable_warn",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "server_tokens",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_pass_request_headers",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_socket_keepalive",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_pass_request_body",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "default_type",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_default_type,
    },
    Spec {
        name: "proxy_http_version",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_http_version,
    },
    Spec {
        name: "proxy_set_header",
        ctx: HSL,
        args: Args::Exactly(2),
        block: false,
        set: set_header,
    },
    Spec {
        name: "proxy_hide_header",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_header_name,
    },
    Spec {
        name: "proxy_pass_header",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_header_name,
    },
    Spec {
        name: "proxy_set_body",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_body,
    },
    Spec {
        name: "proxy_next_upstream",
        ctx: HSL,
        args: Args::AtLeast(1),
        block: false,
        set: set_next_upstream,
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

fn set_time(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let l = loc(n, d)?;
    let v = time_arg(d, 0)?;
    if d.name == "keepalive_timeout" {
        // The header's timeout is in whole seconds (nginx's `is_sec`).
        let header = match d.args.get(1) {
            Some(a) => Some(
                super::values::parse_time(a, false)
                    .ok_or_else(|| super::build::invalid_value(d))?
                    .as_secs(),
            ),
            None => None,
        };
        once(&mut l.keepalive_header, header, d)?;
    }
    let slot: &mut Option<Duration> = match d.name.as_str() {
        "keepalive_timeout" => &mut l.keepalive_timeout,
        "client_header_timeout" => &mut l.client_header_timeout,
        "client_body_timeout" => &mut l.client_body_timeout,
        "send_timeout" => &mut l.send_timeout,
        "proxy_connect_timeout" => &mut l.proxy_connect_timeout,
        "proxy_read_timeout" => &mut l.proxy_read_timeout,
        "proxy_send_timeout" => &mut l.proxy_send_timeout,
        _ => &mut l.proxy_next_upstream_timeout,
    };
    once(slot, v, d)
}

/// `proxy_connect_race TIME | off`.
fn set_race(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let l = loc(n, d)?;
    let v = race_arg(d)?;
    once(&mut l.proxy_connect_race, v, d)
}

/// The argument of `proxy_connect_race` (http and stream): `off` or a
/// time above zero.
pub(super) fn race_arg(d: &Directive) -> Result<Option<Duration>, ConfError> {
    if d.args[0] == "off" {
        return Ok(None);
    }
    let t = time_arg(d, 0)?;
    if t.is_zero() {
        return Err(ConfError::at(
            format!(
                "invalid value \"{}\" in \"{}\" directive",
                d.args[0], d.name
            ),
            &d.src,
        ));
    }
    Ok(Some(t))
}

fn set_number(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let l = loc(n, d)?;
    let bad = || ConfError::at(format!("\"{}\" directive invalid number", d.name), &d.src);
    match d.name.as_str() {
        "keepalive_requests" => once(
            &mut l.keepalive_requests,
            number(&d.args[0]).ok_or_else(bad)?,
            d,
        ),
        _ => once(
            &mut l.proxy_next_upstream_tries,
            number(&d.args[0]).ok_or_else(bad)?,
            d,
        ),
    }
}

fn set_size(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let l = loc(n, d)?;
    match d.name.as_str() {
        "client_max_body_size" => once(&mut l.client_max_body_size, offset_arg(d, 0)?, d),
        "client_body_buffer_size" => once(&mut l.client_body_buffer_size, size_arg(d, 0)?, d),
        "client_header_buffer_size" => {
            let size = size_arg(d, 0)?;
            if size == 0 {
                return Err(super::build::invalid_value(d));
            }
            once(&mut l.client_header_buffer_size, size, d)
        }
        "proxy_busy_buffers_size" => once(&mut l.proxy_busy_buffers_size, Some(size_arg(d, 0)?), d),
        "proxy_temp_file_write_size" => {
            once(&mut l.proxy_temp_file_write_size, Some(size_arg(d, 0)?), d)
        }
        "proxy_max_temp_file_size" => once(&mut l.proxy_max_temp_file_size, size_arg(d, 0)?, d),
        _ => once(&mut l.proxy_buffer_size, size_arg(d, 0)?, d),
    }
}

fn set_flag(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    // `server_tokens build` names the build too in nginx; sluice has no
    // build name, and says what `on` says (as nginx does without one).
    let v = if d.name == "server_tokens" && d.args[0] == "build" {
        true
    } else {
        flag(d)?
    };
    let l = loc(n, d)?;
    let slot = match d.name.as_str() {
        "server_tokens" => &mut l.server_tokens,
        "rewrite_log" => &mut l.rewrite_log,
        "proxy_intercept_errors" => &mut l.proxy_intercept_errors,
        "proxy_buffering" => &mut l.proxy_buffering,
        "proxy_request_buffering" => &mut l.proxy_request_buffering,
        "real_ip_recursive" => &mut l.real_ip_recursive,
        "uninitialized_variable_warn" => &mut l.uninitialized_variable_warn,
        "proxy_pass_request_headers" => &mut l.proxy_pass_request_headers,
        "log_not_found" => &mut l.log_not_found,
        "etag" => &mut l.etag,
        "underscores_in_headers" => &mut l.underscores_in_headers,
        "ignore_invalid_headers" => &mut l.ignore_invalid_headers,
        "proxy_socket_keepalive" => &mut l.proxy_socket_keepalive,
        _ => &mut l.proxy_pass_request_body,
    };
    once(slot, v, d)
}

fn set_default_type(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let l = loc(n, d)?;
    once(&mut l.default_type, d.args[0].clone(), d)
}

fn set_http_version(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = match d.args[0].as_str() {
        "1.0" => 10,
        "1.1" => 11,
        "2" | "2.0" => 20,
        other => {
            return Err(ConfError::at(
                format!(
                    "invalid value \"{other}\" in \"{}\" directive, it must be \"1.0\", \"1.1\" or \"2\"",
                    d.name
                ),
                &d.src,
            ));
        }
    };
    once(&mut loc(n, d)?.proxy_http_version, v, d)
}

fn valid_header_name(s: &str) -> bool {
    !s.is_empty() && http::header::HeaderName::from_bytes(s.as_bytes()).is_ok()
}

fn set_header(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    if !valid_header_name(&d.args[0]) {
        return Err(ConfError::at(
            format!("invalid header name \"{}\"", d.args[0]),
            &d.src,
        ));
    }
    let t = vars::compile(&d.args[1]).map_err(|m| ConfError::at(m, &d.src))?;
    let l = loc(n, d)?;
    l.proxy_set_header
        .get_or_insert_with(Vec::new)
        .push((d.args[0].clone(), t));
    Ok(())
}

fn set_header_name(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    if !valid_header_name(&d.args[0]) {
        return Err(ConfError::at(
            format!("invalid header name \"{}\"", d.args[0]),
            &d.src,
        ));
    }
    let l = loc(n, d)?;
    let list = if d.name == "proxy_hide_header" {
        &mut l.proxy_hide_header
    } else {
        &mut l.proxy_pass_header
    };
    list.get_or_insert_with(Vec::new)
        .push(d.args[0].to_ascii_lowercase());
    Ok(())
}

fn set_body(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let t = vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    once(&mut loc(n, d)?.proxy_set_body, Some(t), d)
}

fn set_next_upstream(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    // `off` among other values turns them all off, as nginx has it (its
    // merge keeps only the off bit).
    let mut bits = 0;
    let mut off = false;
    for a in &d.args {
        match NextUpstream::parse(a) {
            Some(0) => off = true,
            Some(b) => bits |= b,
            None => {
                return Err(ConfError::at(
                    format!("invalid value \"{a}\" in \"{}\" directive", d.name),
                    &d.src,
                ));
            }
        }
    }
    let bits = if off { 0 } else { bits };
    once(&mut loc(n, d)?.proxy_next_upstream, NextUpstream(bits), d)
}

fn set_root(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    use super::model::Modifier;
    let (location, regex) = match n {
        super::build::Node::Location(l) => (
            Some(l.uri.clone()),
            matches!(l.modifier, Modifier::Regex | Modifier::RegexCaseless),
        ),
        _ => (None, false),
    };
    let l = loc(n, d)?;
    if let Some(prev) = &l.root {
        let earlier = if prev.alias.is_some() {
            "alias"
        } else {
            "root"
        };
        return Err(ConfError::at(
            format!(
                "\"{}\" directive is duplicate, \"{earlier}\" directive was specified earlier",
                d.name
            ),
            &d.src,
        ));
    }
    // Variables are evaluated per request (a regex location's captures
    // among them), as nginx's script for the path.
    let vars = super::vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    let (path, vars) = match vars.as_literal() {
        Some(_) => (b.path(&d.args[0]), None),
        None => (b.path(""), Some(vars)),
    };
    let is_alias = d.name == "alias";
    let alias = if is_alias { location } else { None };
    l.root = Some(Root {
        path,
        alias,
        vars,
        whole: is_alias && regex,
    });
    Ok(())
}

fn set_index(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    for a in &d.args {
        if a.is_empty() {
            return Err(ConfError::at(
                "index \"\" in \"index\" directive is invalid",
                &d.src,
            ));
        }
    }
    let l = loc(n, d)?;
    l.index
        .get_or_insert_with(Vec::new)
        .extend(d.args.iter().cloned());
    Ok(())
}

/// `types { MIME EXT...; }`: the block's "directives" are MIME types.
fn set_types(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let mut map = std::collections::HashMap::new();
    for t in d.block.as_deref().unwrap_or_default() {
        if t.block.is_some() || t.args.is_empty() {
            return Err(ConfError::at(
                format!("invalid number of arguments in \"{}\" directive", t.name),
                &t.src,
            ));
        }
        for ext in &t.args {
            map.insert(ext.to_ascii_lowercase(), t.name.clone());
        }
    }
    let l = loc(n, d)?;
    once(&mut l.types, std::sync::Arc::new(map), d)
}

fn set_if_modified_since(
    _: &mut Builder,
    d: &Directive,
    n: &mut Node<'_>,
) -> Result<(), ConfError> {
    use super::loc::IfModifiedSince;
    let v = match d.args[0].as_str() {
        "off" => IfModifiedSince::Off,
        "exact" => IfModifiedSince::Exact,
        "before" => IfModifiedSince::Before,
        a => {
            return Err(ConfError::at(
                format!("invalid value \"{a}\" in \"{}\" directive", d.name),
                &d.src,
            ));
        }
    };
    let l = loc(n, d)?;
    once(&mut l.if_modified_since, v, d)
}

fn set_add_header(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    if !valid_header_name(&d.args[0]) {
        return Err(ConfError::at(
            format!("invalid header name \"{}\"", d.args[0]),
            &d.src,
        ));
    }
    let always = match d.args.get(2).map(String::as_str) {
        None => false,
        Some("always") => true,
        Some(other) => {
            return Err(ConfError::at(
                format!("invalid parameter \"{other}\""),
                &d.src,
            ));
        }
    };
    let value = vars::compile(&d.args[1]).map_err(|m| ConfError::at(m, &d.src))?;
    let l = loc(n, d)?;
    l.add_header.get_or_insert_with(Vec::new).push(AddHeader {
        name: d.args[0].clone(),
        value,
        always,
    });
    Ok(())
}

fn set_error_page(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let (target, rest) = match d.args.split_last() {
        Some(x) => x,
        None => {
            return Err(ConfError::at(
                "invalid number of arguments in \"error_page\" directive",
                &d.src,
            ));
        }
    };
    let mut codes = Vec::new();
    let mut status = ErrorPageStatus::Keep;
    for (i, a) in rest.iter().enumerate() {
        if let Some(resp) = a.strip_prefix('=') {
            if i != rest.len() - 1 {
                return Err(ConfError::at(format!("invalid value \"{a}\""), &d.src));
            }
            status = if resp.is_empty() {
                ErrorPageStatus::Target
            } else {
                match number::<u16>(resp) {
                    Some(c) if (100..=999).contains(&c) => ErrorPageStatus::Code(c),
                    _ => return Err(ConfError::at(format!("invalid value \"{a}\""), &d.src)),
                }
            };
            continue;
        }
        match number::<u16>(a) {
            Some(c) if (300..=599).contains(&c) && c != 499 => codes.push(c),
            _ => {
                return Err(ConfError::at(
                    format!("value \"{a}\" must be between 300 and 599"),
                    &d.src,
                ));
            }
        }
    }
    if codes.is_empty() {
        return Err(ConfError::at(
            "invalid number of arguments in \"error_page\" directive",
            &d.src,
        ));
    }
    let target = vars::compile(target).map_err(|m| ConfError::at(m, &d.src))?;
    let l = loc(n, d)?;
    l.error_page.get_or_insert_with(Vec::new).push(ErrorPage {
        codes,
        status,
        target,
    });
    Ok(())
}

fn set_real_ip_from(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let a = &d.args[0];
    let t = if a == "unix:" {
        Trusted::Unix
    } else {
        let (ip, len) = match a.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (a.as_str(), None),
        };
        let ip: std::net::IpAddr = ip
            .parse()
            .map_err(|_| ConfError::at(format!("invalid parameter \"{a}\""), &d.src))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = match len {
            Some(l) => number::<u8>(l)
                .filter(|l| *l <= max)
                .ok_or_else(|| ConfError::at(format!("invalid parameter \"{a}\""), &d.src))?,
            None => max,
        };
        Trusted::Net(ip, len)
    };
    let l = match n {
        Node::Stream(st) => &mut st.proxy_ssl,
        Node::StreamServer(s) => &mut s.proxy_ssl,
        other => loc(other, d)?,
    };
    l.set_real_ip_from.get_or_insert_with(Vec::new).push(t);
    Ok(())
}

fn set_real_ip_header(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    if d.args[0] == "proxy_protocol" {
        return once(&mut loc(n, d)?.real_ip_header, d.args[0].clone(), d);
    }
    if !valid_header_name(&d.args[0]) {
        return Err(ConfError::at(
            format!("invalid header name \"{}\"", d.args[0]),
            &d.src,
        ));
    }
    once(
        &mut loc(n, d)?.real_ip_header,
        d.args[0].to_ascii_lowercase(),
        d,
    )
}

fn set_header_buffers(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let count: u32 = number(&d.args[0])
        .filter(|c| *c > 0)
        .ok_or_else(|| ConfError::at(format!("invalid value \"{}\"", d.args[0]), &d.src))?;
    let size = size_arg(d, 1)?;
    if size < 64 {
        return Err(ConfError::at(
            format!("invalid value \"{}\"", d.args[1]),
            &d.src,
        ));
    }
    once(
        &mut loc(n, d)?.large_client_header_buffers,
        (count, size),
        d,
    )
}

fn set_buffers(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let count: u32 = number(&d.args[0])
        .filter(|c| *c > 0)
        .ok_or_else(|| ConfError::at(format!("invalid value \"{}\"", d.args[0]), &d.src))?;
    let size = size_arg(d, 1)?;
    if size == 0 {
        return Err(super::build::invalid_value(d));
    }
    once(&mut loc(n, d)?.proxy_buffers, (count, size), d)
}

/// `client_body_temp_path PATH [L1 [L2 [L3]]]` and `proxy_temp_path`: the
/// directory is created at start-up, as nginx creates it.
fn set_temp_path(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    for level in &d.args[1..] {
        if !matches!(level.as_str(), "1" | "2") {
            return Err(ConfError::at(format!("invalid value \"{level}\""), &d.src));
        }
    }
    let path = b.path(&d.args[0]);
    let l = loc(n, d)?;
    if d.name == "client_body_temp_path" {
        once(&mut l.client_body_temp_path, path.clone(), d)?;
    } else {
        once(&mut l.proxy_temp_path, path.clone(), d)?;
    }
    l.temp_paths.get_or_insert_with(Vec::new).push(path);
    Ok(())
}

/// `proxy_redirect default | off | REDIRECT REPLACEMENT` (several allowed;
/// REDIRECT a prefix with variables, or `~REGEX` / `~*REGEX`).
fn set_redirect(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let l = loc(n, d)?;
    let rule = match d.args.as_slice() {
        [a] if a == "off" => {
            l.proxy_redirect = Some(None);
            return Ok(());
        }
        [a] if a == "default" => Redirect::Default,
        [from, to] => {
            let c = |t: &str| vars::compile(t).map_err(|m| ConfError::at(m, &d.src));
            if let Some(re) = from.strip_prefix('~') {
                let regex = super::map::regex(re).map_err(|m| ConfError::at(m, &d.src))?;
                let names: Vec<String> =
                    regex.capture_names().flatten().map(String::from).collect();
                let to = vars::with_names(&names, || c(to))?;
                Redirect::Regex(regex, to)
            } else {
                Redirect::Rule(c(from)?, c(to)?)
            }
        }
        _ => {
            return Err(ConfError::at(
                format!("invalid parameter \"{}\"", d.args[0]),
                &d.src,
            ));
        }
    };
    match &mut l.proxy_redirect {
        Some(Some(list)) => list.push(rule),
        slot => *slot = Some(Some(vec![rule])),
    }
    Ok(())
}
