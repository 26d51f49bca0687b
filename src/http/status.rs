//! The status handlers: `api` (JSON in the shape of the NGINX Plus
//! API, for upstreams in zones, with sluice's additions under a `sluice`
//! key; its writes are `api_write`) and `stub_status` (nginx's text, from
//! `net::stats`' shared counters). Called by the dispatcher for a location whose
//! handler is one of them.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use http::Method;
use serde_json::{Map, Value, json};

use super::Reply;
use super::response;
use super::vars::Req;
use crate::net::stats::Stats;
use crate::shm::records::StatusCounters;
use crate::upstream::peers::now_ms;
use crate::upstream::{Peers, UpstreamRt, Upstreams, Zones};

/// What a worker inherits from the master in shared memory.
#[derive(Clone, Default)]
pub struct Shm {
    pub zones: Zones,
    pub stats: Option<Arc<Stats>>,
    pub generation: u64,
    /// Told when resolved peers changed (the master writes state files);
    /// None: write them here.
    pub saved: Option<Arc<tokio::sync::Notify>>,
    /// Session cache zones and ticket keys.
    pub tls: crate::net::tls::TlsShared,
    /// `limit_req_zone` and `limit_conn_zone` zones.
    pub limits: Arc<crate::net::limit::LimitZones>,
    /// `sticky learn` zones.
    pub sticky: Arc<crate::upstream::sticky::LearnZones>,
    /// The workers' connection counts for `accept_balance` (more than one
    /// worker, and not `accept_balance off`).
    pub balance: Option<Arc<crate::net::balance::Balance>>,
}

/// `$connections_active`, `_reading`, `_writing` or `_waiting`, as
/// stub_status counts them (every worker's connections).
pub fn connections_var(v: &crate::conf::vars::Var) -> String {
    use crate::conf::vars::Var;
    let Some(c) = crate::net::stats::current() else {
        return "0".into();
    };
    let (active, reading, writing) = (
        c.active.load(Relaxed),
        c.reading.load(Relaxed),
        c.writing.load(Relaxed),
    );
    match v {
        Var::ConnectionsActive => active,
        Var::ConnectionsReading => reading,
        Var::ConnectionsWriting => writing,
        _ => active.saturating_sub(writing + reading),
    }
    .to_string()
}

/// nginx's `stub_status` page.
pub fn stub_status(r: &Req, stats: Option<&Stats>) -> Reply {
    if r.method != Method::GET && r.method != Method::HEAD {
        return Reply::Status(405);
    }
    let Some(c) = stats.and_then(Stats::counters) else {
        return Reply::Status(500);
    };
    let active = c.active.load(Relaxed);
    let writing = c.writing.load(Relaxed);
    let reading = c.reading.load(Relaxed);
    let text = format!(
        "Active connections: {} \nserver accepts handled requests\n {} {} {} \nReading: {} Writing: {} Waiting: {} \n",
        active,
        c.accepted.load(Relaxed),
        c.handled.load(Relaxed),
        c.requests.load(Relaxed),
        reading,
        writing,
        active.saturating_sub(writing + reading),
    );
    let mut resp = response::build(
        200,
        Some("text/plain"),
        Bytes::from(text),
        r.conf.server_tokens,
    );
    no_cache(&mut resp);
    Reply::Full(resp)
}

pub(super) fn no_cache(resp: &mut http::Response<response::Body>) {
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::header::HeaderValue::from_static("no-cache"),
    );
}

const DOCS: &str = "https://nginx.org/en/docs/http/ngx_http_api_module.html";
pub(super) const VERSIONS: std::ops::RangeInclusive<u32> = 1..=9;

pub(super) fn api_error(r: &Req, status: u16, text: &str, code: &str) -> Reply {
    json_reply(
        r,
        status,
        &json!({
            "error": { "status": status, "text": text, "code": code },
            "request_id": format!("{:016x}", r.conn.number),
            "href": DOCS,
        }),
    )
}

pub(super) fn json_reply(r: &Req, status: u16, v: &Value) -> Reply {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut resp = response::build(
        status,
        Some("application/json"),
        Bytes::from(body),
        r.conf.server_tokens,
    );
    no_cache(&mut resp);
    Reply::Full(resp)
}

/// `api`: the path after the location's prefix names the endpoint (GET and
/// HEAD; the writes are `api_write`).
/// `stream` holds the stream block's upstreams (their state is the zones').
/// `stats`: the `stub_status` counters, for `connections` and
/// `http/requests`. `dashboard.html` (or the bare prefix asked for with
/// `Accept: text/html`) is the dashboard page.
pub fn api(
    r: &Req,
    prefix: &str,
    upstreams: &Upstreams,
    stream: &Upstreams,
    stats: Option<&Stats>,
    generation: u64,
) -> Reply {
    if r.method != Method::GET && r.method != Method::HEAD {
        return api_error(r, 405, "method disabled", "MethodDisabled");
    }
    let rest = r.uri.strip_prefix(prefix).unwrap_or(&r.uri);
    let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let Some((version, path)) = parts.split_first() else {
        if wants_html(r) {
            return super::dashboard::page(r, prefix);
        }
        return json_reply(r, 200, &json!(VERSIONS.collect::<Vec<u32>>()));
    };
    if *version == "dashboard.html" && path.is_empty() {
        return super::dashboard::page(r, prefix);
    }
    if !version.parse::<u32>().is_ok_and(|v| VERSIONS.contains(&v)) {
        return api_error(r, 404, "unknown version", "UnknownVersion");
    }
    let counters = stats.and_then(Stats::counters);
    let (list, is_stream, rest) = match path {
        [] => {
            return json_reply(r, 200, &json!(["nginx", "connections", "http", "stream"]));
        }
        ["nginx"] => return json_reply(r, 200, &nginx_info(generation)),
        ["connections"] => {
            return match counters {
                Some(c) => json_reply(r, 200, &connections_info(c)),
                None => api_error(r, 404, "path not found", "PathNotFound"),
            };
        }
        ["http", "requests"] => {
            return match counters {
                Some(c) => json_reply(
                    r,
                    200,
                    &json!({
                        "total": c.requests.load(Relaxed),
                        "current": c.writing.load(Relaxed),
                    }),
                ),
                None => api_error(r, 404, "path not found", "PathNotFound"),
            };
        }
        ["http", rest @ ..] => (upstreams, false, rest),
        ["stream", rest @ ..] => (stream, true, rest),
        _ => return api_error(r, 404, "path not found", "PathNotFound"),
    };
    let zoned = |u: &&Arc<UpstreamRt>| u.zone().is_some();
    match rest {
        [] if !is_stream => json_reply(r, 200, &json!(["requests", "upstreams"])),
        [] => json_reply(r, 200, &json!(["upstreams"])),
        ["upstreams"] => {
            let mut all = Map::new();
            for u in list.iter().filter(zoned) {
                all.insert(u.cfg.name.clone(), upstream_json(u, is_stream));
            }
            json_reply(r, 200, &Value::Object(all))
        }
        ["upstreams", name] => match list.iter().filter(zoned).find(|u| u.cfg.name == *name) {
            Some(u) => json_reply(r, 200, &upstream_json(u, is_stream)),
            None => api_error(r, 404, "upstream not found", "UpstreamNotFound"),
        },
        ["upstreams", name, "servers", id @ ..] if id.len() <= 1 => {
            match super::api_write::upstream(r, list, name) {
                Ok(u) => super::api_write::get_servers(r, u, is_stream, id.first().copied()),
                Err(reply) => *reply,
            }
        }
        _ => api_error(r, 404, "path not found", "PathNotFound"),
    }
}

/// A browser's request for a page rather than JSON.
fn wants_html(r: &Req) -> bool {
    r.headers
        .get("accept")
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.split(',').next())
        .is_some_and(|m| m.trim().starts_with("text/html"))
}

/// NGINX Plus's `/connections`: accepted, dropped (accepted but not
/// handled), active (reading or writing) and idle.
fn connections_info(c: &StatusCounters) -> Value {
    let accepted = c.accepted.load(Relaxed);
    let active = c.active.load(Relaxed);
    let busy = c.reading.load(Relaxed) + c.writing.load(Relaxed);
    json!({
        "accepted": accepted,
        "dropped": accepted.saturating_sub(c.handled.load(Relaxed)),
        "active": busy.min(active),
        "idle": active.saturating_sub(busy),
    })
}

fn nginx_info(generation: u64) -> Value {
    json!({
        "version": crate::NGINX_VERSION,
        "build": format!("sluice/{}", crate::VERSION),
        "generation": generation,
        "timestamp": iso(std::time::SystemTime::now()),
        "pid": std::process::id(),
        "ppid": nix::unistd::getppid().as_raw(),
    })
}

/// A monotonic millisecond time as wall-clock ISO 8601, as the API shows it.
fn iso_ms(ms: u64) -> Value {
    if ms == 0 {
        return Value::Null;
    }
    let now = now_ms();
    let wall = std::time::SystemTime::now();
    // A time in the past or (an expiry) in the future.
    let t = if ms <= now {
        wall - std::time::Duration::from_millis(now - ms)
    } else {
        wall + std::time::Duration::from_millis(ms - now)
    };
    iso(t)
}

fn iso(t: std::time::SystemTime) -> Value {
    let t: chrono::DateTime<chrono::Utc> = t.into();
    Value::String(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
}

/// The states a peer shows, in the API's words.
pub(super) const PEER_STATES: [&str; 6] =
    ["up", "down", "draining", "unavail", "unhealthy", "checking"];

/// A peer's state as NGINX Plus names it: `down` by config or the API,
/// `draining` by the API, `unhealthy` or `checking` by active health
/// checks, `unavail` after `max_fails`, else `up`.
pub(super) fn peer_state(p: &crate::upstream::peers::Peer, now: u64) -> &'static str {
    use crate::upstream::admin::{Target, target};
    let admin = target(p);
    if admin == Target::Drain {
        "draining"
    } else if admin == Target::Down {
        "down"
    } else if p.live.health.load(Relaxed) == crate::upstream::health::UNHEALTHY {
        "unhealthy"
    } else if !p.health_ok() {
        "checking"
    } else if p.failed(now) {
        "unavail"
    } else {
        "up"
    }
}

/// One upstream in the API's shape; a stream one counts `connections`
/// where HTTP counts `requests` and `responses`.
fn upstream_json(u: &UpstreamRt, stream: bool) -> Value {
    let peers: Arc<Peers> = u.peers();
    let now = now_ms();
    let mut list = Vec::new();
    for p in peers.primary.iter().chain(peers.backup.iter()) {
        let id = p.api_id();
        let l = &p.live;
        let state = peer_state(p, now);
        let r = &l.responses;
        let mut peer = json!({
            "id": id,
            "server": p.name.as_ref(),
            "name": peers.servers.get(p.server).cloned().unwrap_or_default(),
            "backup": p.backup,
            "weight": p.weight,
            "state": state,
            "active": l.conns.load(Relaxed),
            "requests": l.requests.load(Relaxed),
            "responses": {
                "1xx": r[0].load(Relaxed),
                "2xx": r[1].load(Relaxed),
                "3xx": r[2].load(Relaxed),
                "4xx": r[3].load(Relaxed),
                "5xx": r[4].load(Relaxed),
                "total": r[..5].iter().map(|c| c.load(Relaxed)).sum::<u64>(),
            },
            "sent": l.sent.load(Relaxed),
            "received": l.received.load(Relaxed),
            "fails": l.fails.load(Relaxed),
            "unavail": l.unavail.load(Relaxed),
            "health_checks": health_checks(l),
            "downtime": downtime_ms(l, now),
        });
        if let Some(o) = peer.as_object_mut() {
            if stream {
                if let Some(n) = o.remove("requests") {
                    o.insert("connections".into(), n);
                }
                o.remove("responses");
            }
            if p.max_conns > 0 {
                o.insert("max_conns".into(), json!(p.max_conns));
            }
            let since = match l.hc.downstart.load(Relaxed) {
                0 => l.down_since.load(Relaxed),
                hc => hc,
            };
            if since != 0 {
                o.insert("downstart".into(), iso_ms(since));
            }
            let selected = l.selected.load(Relaxed);
            if selected != 0 {
                o.insert("selected".into(), iso_ms(selected));
            }
            if !stream {
                o.insert("sluice".into(), connections_json(l, now));
            }
        }
        list.push(peer);
    }
    let mut out = json!({
        "peers": list,
        "keepalive": u.pool().idle_count(),
        "zombies": 0,
    });
    if let (Some(o), Some(z)) = (out.as_object_mut(), u.zone()) {
        let usage = z.usage();
        o.insert("zone".into(), json!(z.name));
        // NGINX Plus's queue object (the size: every worker's waiting
        // requests; max_size: each worker's).
        if let (Some(q), Some(i)) = (u.cfg.queue, u.zone_index()) {
            let (size, overflows) = z.queue(i);
            o.insert(
                "queue".into(),
                json!({"size": size, "max_size": q.max, "overflows": overflows}),
            );
        }
        o.insert(
            "sluice".into(),
            json!({
                "zone": z.name,
                "size": usage.size,
                "used": usage.used,
                "peer_slots": usage.slots,
                "peer_slots_used": usage.in_use,
                "bytes_per_peer": z.bytes_per_peer(),
                "generation": usage.generation,
                "config": peers.config,
                "resolver_pid": z.lease().map(|l| l.holder()).unwrap_or(0),
                "resolve": resolve_json(u, &peers),
                "pick_first": if u.cfg.balancer.is_pick_first() && !peers.primary.is_empty() {
                    json!(peers.primary[peers.chosen_index()].name.as_ref())
                } else {
                    Value::Null
                },
            }),
        );
    }
    out
}

/// A peer's keep-alive connections, every worker's: open (busy or idle),
/// idle, their age (the oldest, restated by each worker every half second,
/// and the average) and how many were closed for their age.
fn connections_json(l: &crate::upstream::peers::PeerLive, now: u64) -> Value {
    let open = u64::from(l.open.load(Relaxed));
    let oldest = l.oldest.load(Relaxed);
    let sum = l.created_sum.load(Relaxed);
    json!({
        "open": open,
        "idle": l.idle.load(Relaxed),
        "age_max_ms": if open > 0 && oldest != 0 { now.saturating_sub(oldest) } else { 0 },
        "age_avg_ms": sum.checked_div(open).map_or(0, |avg| now.saturating_sub(avg)),
        "recycled": l.recycled.load(Relaxed),
    })
}

/// Per `resolve` server line: its name, the last answer's time and
/// expiry, the last error, and the addresses it has now.
fn resolve_json(u: &UpstreamRt, peers: &Peers) -> Value {
    let Some(i) = u.zone_index() else {
        return json!([]);
    };
    let Some(z) = u.zone() else {
        return json!([]);
    };
    let list: Vec<Value> = u
        .cfg
        .servers
        .iter()
        .enumerate()
        .filter(|(_, s)| s.resolve)
        .map(|(k, s)| {
            let (expires, answered, error) = z.resolved(i, k);
            let (lookups, ends) = z.lookups(i, k);
            let results: serde_json::Map<String, Value> = crate::upstream::zone::LookupEnd::ALL
                .iter()
                .map(|(e, label)| (label.to_string(), json!(ends[*e as usize])))
                .collect();
            let addrs: Vec<&str> = peers
                .primary
                .iter()
                .chain(peers.backup.iter())
                .filter(|p| p.server == k)
                .map(|p| p.name.as_ref())
                .collect();
            json!({
                "name": s.text,
                "answered": iso_ms(answered),
                "expires": iso_ms(expires),
                "last_error": if error == 0 {
                    Value::Null
                } else {
                    json!(format!("{}: {}", error, crate::upstream::dns::strerror(error)))
                },
                "addresses": addrs,
                "lookups": lookups,
                "results": results,
            })
        })
        .collect();
    Value::Array(list)
}

/// Milliseconds unavailable or unhealthy, the current stretches included.
pub(super) fn downtime_ms(l: &crate::upstream::peers::PeerLive, now: u64) -> u64 {
    let stretch = |since: u64| {
        if since != 0 {
            now.saturating_sub(since)
        } else {
            0
        }
    };
    l.downtime.load(Relaxed)
        + stretch(l.down_since.load(Relaxed))
        + l.hc.downtime.load(Relaxed)
        + stretch(l.hc.downstart.load(Relaxed))
}

/// A peer's `health_checks` object, as NGINX Plus shows it: `last_passed`
/// once a check ran.
fn health_checks(l: &crate::upstream::peers::PeerLive) -> Value {
    let h = &l.hc;
    let checks = h.checks.load(Relaxed);
    let mut v = json!({
        "checks": checks,
        "fails": h.fails.load(Relaxed),
        "unhealthy": h.unhealthy.load(Relaxed),
    });
    if let Some(o) = v.as_object_mut() {
        if checks > 0 {
            o.insert(
                "last_passed".into(),
                Value::Bool(h.last_passed.load(Relaxed) == 1),
            );
        }
    }
    v
}
