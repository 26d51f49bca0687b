//! The API's writes (`api write=on`): `PATCH /api/N/http/upstreams/NAME/servers/ID`
//! (and the stream block's) with `{"down": true|false}` or
//! `{"drain": true|false}`, in NGINX Plus's shape. The change is the peer's
//! admin word in its zone (`upstream::admin`), so every worker follows it at
//! once; the state file, if the upstream has one, is rewritten. Also the
//! read side of the same objects: Plus's server objects for
//! `.../servers` and `.../servers/ID`.
//!
//! A body is taken whole (at most [`BODY_MAX`] bytes), parsed, and checked
//! before anything changes: malformed JSON, a value that is not an object,
//! a nested object or list, a duplicate key, an unknown or unsupported
//! parameter or a wrong type is a 400 and changes nothing.

use std::sync::Arc;

use http::Method;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use super::ClientBody;
use super::Reply;
use super::status::{api_error, json_reply};
use super::vars::Req;
use crate::upstream::admin::{self, Target};
use crate::upstream::peers::Peer;
use crate::upstream::{Peers, UpstreamRt, Upstreams};

/// The largest request body the API reads.
pub const BODY_MAX: usize = 16 * 1024;

/// What a PATCH asks for.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct Patch {
    pub down: Option<bool>,
    pub drain: Option<bool>,
}

/// Why a request is refused: Plus's text and code (the status is 400).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    pub text: String,
    pub code: &'static str,
}

fn refused(text: impl Into<String>, code: &'static str) -> Refused {
    Refused {
        text: text.into(),
        code,
    }
}

/// Parameters of Plus's server objects that this API does not change.
const UNSUPPORTED: &[&str] = &[
    "id",
    "server",
    "service",
    "weight",
    "max_conns",
    "max_fails",
    "fail_timeout",
    "slow_start",
    "route",
    "backup",
];

/// A parameter's value: only scalars are taken.
enum Scalar {
    Bool(bool),
    Other,
    Nested,
}

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            // A nested value is read through (serde_json bounds its depth)
            // and refused afterwards.
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Scalar, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Nested)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Scalar, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Nested)
            }
        }
        d.deserialize_any(V)
    }
}

/// The body's top-level object as its pairs, duplicates kept.
struct Pairs(Vec<(String, Scalar)>);

impl<'de> de::Deserialize<'de> for Pairs {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Pairs, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Pairs, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = a.next_entry::<String, Scalar>()? {
                    // An object of thousands of keys is nobody's request.
                    if out.len() >= 64 {
                        return Err(de::Error::custom("too many parameters"));
                    }
                    out.push(kv);
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A parameter name as an error message quotes it (at most 64 characters).
fn quoted(k: &str) -> String {
    let mut s: String = k.chars().take(64).collect();
    if s.len() < k.len() {
        s.push_str("...");
    }
    s
}

/// Parses a PATCH body: one JSON object whose parameters are `down` and
/// `drain`, booleans, each at most once.
pub fn parse_patch(body: &[u8]) -> Result<Patch, Refused> {
    if body.len() > BODY_MAX {
        return Err(refused(
            format!("request body is larger than {BODY_MAX} bytes"),
            "BodyReadError",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let pairs = de::Deserialize::deserialize(&mut de)
        .and_then(|p: Pairs| de.end().map(|()| p))
        .map_err(|e| refused(format!("invalid JSON body: {e}"), "JsonError"))?;
    let mut patch = Patch::default();
    for (k, v) in pairs.0 {
        let slot = match k.as_str() {
            "down" => &mut patch.down,
            "drain" => &mut patch.drain,
            _ if UNSUPPORTED.contains(&k.as_str()) => {
                return Err(refused(
                    format!(
                        "parameter \"{k}\" cannot be changed through this API: only \"down\" and \"drain\" can"
                    ),
                    "UpstreamConfFormatError",
                ));
            }
            _ => {
                return Err(refused(
                    format!("unknown parameter \"{}\"", quoted(&k)),
                    "UpstreamConfFormatError",
                ));
            }
        };
        let b = match v {
            Scalar::Bool(b) => b,
            Scalar::Nested => {
                return Err(refused(
                    format!("nested object or list in \"{k}\""),
                    "UpstreamConfFormatError",
                ));
            }
            Scalar::Other => {
                return Err(refused(
                    format!("invalid \"{k}\" value: a boolean is expected"),
                    "UpstreamConfFormatError",
                ));
            }
        };
        if slot.replace(b).is_some() {
            return Err(refused(
                format!("duplicate parameter \"{k}\""),
                "UpstreamConfFormatError",
            ));
        }
    }
    Ok(patch)
}

/// What a patch makes of a peer that is `now`: `down` wins over `drain`;
/// `down: false` brings it up; `drain: false` ends a drain (and leaves a
/// down peer down). None: no change.
pub fn outcome(patch: Patch, now: Target) -> Option<Target> {
    match (patch.down, patch.drain) {
        (Some(true), _) => Some(Target::Down),
        (_, Some(true)) => Some(Target::Drain),
        (Some(false), _) => Some(Target::Up),
        (None, Some(false)) if now == Target::Drain => Some(Target::Up),
        _ => None,
    }
}

/// A duration as nginx writes one in its configuration: `10s`, `1500ms`.
fn duration(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// NGINX Plus's server object for peer `id` ([`Peer::api_id`], as the
/// upstream's `peers` list numbers them).
pub fn server_json(id: usize, p: &Peer, stream: bool) -> Value {
    let target = admin::target(p);
    let mut v = json!({
        "id": id,
        "server": p.name.as_ref(),
        "weight": p.weight,
        "max_conns": p.max_conns,
        "max_fails": p.max_fails,
        "fail_timeout": duration(p.fail_timeout),
        "slow_start": duration(p.slow_start),
        "backup": p.backup,
        "down": target == Target::Down,
    });
    if let Some(o) = v.as_object_mut() {
        if !stream {
            o.insert("route".into(), json!(""));
        }
        if target == Target::Drain {
            o.insert("drain".into(), json!(true));
        }
    }
    v
}

fn peer_at(peers: &Peers, id: usize) -> Option<&Peer> {
    peers
        .primary
        .iter()
        .chain(peers.backup.iter())
        .find(|p| p.api_id() == id)
}

/// The upstream named `name` of `list` for the servers endpoints: Err is
/// the reply (404 unknown, 400 without a zone: Plus's "static" upstream).
pub(super) fn upstream<'a>(
    r: &Req,
    list: &'a Upstreams,
    name: &str,
) -> Result<&'a Arc<UpstreamRt>, Box<Reply>> {
    match list.iter().find(|u| u.cfg.name == name) {
        None => Err(Box::new(api_error(
            r,
            404,
            "upstream not found",
            "UpstreamNotFound",
        ))),
        Some(u) if u.zone().is_none() => Err(Box::new(api_error(
            r,
            400,
            "upstream is static: it has no zone, so its servers cannot be shown or changed",
            "UpstreamStatic",
        ))),
        Some(u) => Ok(u),
    }
}

fn not_found(r: &Req, id: &str) -> Reply {
    let text = format!("server with ID \"{}\" does not exist", quoted(id));
    api_error(r, 404, &text, "UpstreamServerNotFound")
}

/// `GET .../upstreams/NAME/servers[/ID]`.
pub(super) fn get_servers(r: &Req, u: &UpstreamRt, stream: bool, id: Option<&str>) -> Reply {
    let peers = u.peers();
    match id {
        None => {
            let all: Vec<Value> = peers
                .primary
                .iter()
                .chain(peers.backup.iter())
                .map(|p| server_json(p.api_id(), p, stream))
                .collect();
            json_reply(r, 200, &Value::Array(all))
        }
        Some(id) => match id
            .parse::<usize>()
            .ok()
            .and_then(|i| Some((i, peer_at(&peers, i)?)))
        {
            Some((i, p)) => json_reply(r, 200, &server_json(i, p, stream)),
            None => not_found(r, id),
        },
    }
}

/// Reads the request body: at most `BODY_MAX` bytes (and
/// `client_max_body_size`), each read within `client_body_timeout`.
async fn read_body(r: &Req, body: ClientBody) -> Result<Vec<u8>, Reply> {
    use http_body_util::BodyExt;
    let mut body = match body {
        ClientBody::Incoming(b) => b,
        // Read whole for a mirror: in memory, or spooled (then larger than
        // any API body).
        ClientBody::Read(crate::upstream::body::Payload::Mem(b)) if b.len() <= BODY_MAX => {
            return Ok(b.to_vec());
        }
        ClientBody::Read(_) => return Err(Reply::Status(413)),
        ClientBody::Empty => return Ok(Vec::new()),
    };
    let max = r.conf.client_max_body_size;
    body.limit(if max == 0 {
        BODY_MAX as u64 + 1
    } else {
        max.min(BODY_MAX as u64 + 1)
    });
    let mut out = Vec::new();
    loop {
        let frame = match tokio::time::timeout(r.conf.client_body_timeout, body.frame()).await {
            Err(_) => return Err(Reply::Status(super::proxy_plan::body_timed_out(r))),
            Ok(None) => return Ok(out),
            Ok(Some(Err(e))) => {
                let status = super::proxy_plan::body_failed(r, &e);
                // Past client_max_body_size: nginx's 413.
                if status == 413 && max > 0 && max <= BODY_MAX as u64 {
                    return Err(Reply::Status(413));
                }
                let text = if status == 413 {
                    format!("request body is larger than {BODY_MAX} bytes")
                } else {
                    "reading request body failed".to_string()
                };
                return Err(api_error(r, 400, &text, "BodyReadError"));
            }
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(d) = frame.into_data() {
            out.extend_from_slice(&d);
            if out.len() > BODY_MAX {
                let text = format!("request body is larger than {BODY_MAX} bytes");
                return Err(api_error(r, 400, &text, "BodyReadError"));
            }
        }
    }
}

/// The state file after a change: the master writes it when there is one
/// (told through `saved`), else this process.
fn save_state(u: &UpstreamRt, saved: Option<&tokio::sync::Notify>) {
    let (Some(zone), Some(i)) = (u.zone(), u.zone_index()) else {
        return;
    };
    if u.cfg.state.is_none() {
        return;
    }
    match saved {
        Some(n) => n.notify_one(),
        None => crate::upstream::state::save(zone, i, &u.cfg),
    }
}

/// A request other than GET and HEAD to the `api` location: PATCH of one
/// server with `write=on`; 405 otherwise (`MethodDisabled` without
/// `write=on`, as NGINX Plus).
pub async fn request(
    r: &Req,
    prefix: &str,
    http: &Upstreams,
    stream: &Upstreams,
    write: bool,
    body: ClientBody,
    saved: Option<&tokio::sync::Notify>,
) -> Reply {
    if !write {
        drop(body);
        return api_error(r, 405, "method disabled", "MethodDisabled");
    }
    let rest = r.uri.strip_prefix(prefix).unwrap_or(&r.uri);
    let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    if let Some(v) = parts.first() {
        if !v
            .parse::<u32>()
            .is_ok_and(|v| super::status::VERSIONS.contains(&v))
        {
            return api_error(r, 404, "unknown version", "UnknownVersion");
        }
    }
    let (list, is_stream, name, id) = match parts[..] {
        [_, "http", "upstreams", name, "servers", id] if r.method == Method::PATCH => {
            (http, false, name, id)
        }
        [_, "stream", "upstreams", name, "servers", id] if r.method == Method::PATCH => {
            (stream, true, name, id)
        }
        _ => return api_error(r, 405, "method not supported", "MethodNotSupported"),
    };
    let u = match upstream(r, list, name) {
        Ok(u) => u,
        Err(reply) => return *reply,
    };
    let bytes = match read_body(r, body).await {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let patch = match parse_patch(&bytes) {
        Ok(p) => p,
        Err(e) => return api_error(r, 400, &e.text, e.code),
    };
    let peers = u.peers();
    let Some((i, p)) = id
        .parse::<usize>()
        .ok()
        .and_then(|i| Some((i, peer_at(&peers, i)?)))
    else {
        return not_found(r, id);
    };
    if let Some(t) = outcome(patch, admin::target(p)) {
        let before = p.live.admin.load(std::sync::atomic::Ordering::Relaxed);
        admin::set(p, t);
        if p.live.admin.load(std::sync::atomic::Ordering::Relaxed) != before {
            save_state(u, saved);
        }
    }
    json_reply(r, 200, &server_json(i, p, is_stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Patch {
        parse_patch(body.as_bytes()).expect(body)
    }

    fn err(body: &[u8]) -> Refused {
        match parse_patch(body) {
            Err(e) => e,
            Ok(p) => panic!("{:?} parsed as {p:?}", String::from_utf8_lossy(body)),
        }
    }

    #[test]
    fn down_and_drain() {
        assert_eq!(ok(r#"{"down": true}"#).down, Some(true));
        assert_eq!(ok(r#"{"down":false}"#).down, Some(false));
        assert_eq!(ok(r#" { "drain" : true } "#).drain, Some(true));
        assert_eq!(
            ok(r#"{"down": false, "drain": true}"#),
            Patch {
                down: Some(false),
                drain: Some(true)
            }
        );
        assert_eq!(ok("{}"), Patch::default());
    }

    #[test]
    fn malformed_json_is_refused() {
        for b in [
            &b""[..],
            b"   ",
            b"{",
            b"{\"down\": tru}",
            b"{\"down\": true,}",
            b"{'down': true}",
            b"{\"down\": true} x",
            b"{\"down\": true}{}",
            b"\xff\xfe",
            b"{\"d\xffown\": true}",
            b"[]",
            b"true",
            b"\"down\"",
            b"null",
        ] {
            assert_eq!(err(b).code, "JsonError", "{:?}", String::from_utf8_lossy(b));
        }
    }

    #[test]
    fn wrong_types_unknown_and_duplicate_keys_are_refused() {
        for (b, text) in [
            (r#"{"down": 1}"#, "invalid \"down\" value"),
            (r#"{"down": "true"}"#, "invalid \"down\" value"),
            (r#"{"drain": null}"#, "invalid \"drain\" value"),
            (r#"{"down": [true]}"#, "nested object or list in \"down\""),
            (r#"{"drain": {"a": 1}}"#, "nested object or list"),
            (
                r#"{"down": true, "down": false}"#,
                "duplicate parameter \"down\"",
            ),
            (
                r#"{"drain": true, "drain": true}"#,
                "duplicate parameter \"drain\"",
            ),
            (r#"{"Down": true}"#, "unknown parameter \"Down\""),
            (r#"{"down": true, "x": 1}"#, "unknown parameter \"x\""),
            (r#"{"weight": 2}"#, "parameter \"weight\" cannot be changed"),
            (
                r#"{"backup": true}"#,
                "parameter \"backup\" cannot be changed",
            ),
        ] {
            let e = err(b.as_bytes());
            assert_eq!(e.code, "UpstreamConfFormatError", "{b}");
            assert!(e.text.contains(text), "{b}: {}", e.text);
        }
        // A long unknown name is cut in the message.
        let long = format!(r#"{{"{}": true}}"#, "k".repeat(5000));
        assert!(err(long.as_bytes()).text.len() < 200);
    }

    #[test]
    fn hostile_bodies_are_refused() {
        // Larger than the API reads.
        let huge = format!(r#"{{"down": true{}}}"#, " ".repeat(BODY_MAX));
        assert_eq!(err(huge.as_bytes()).code, "BodyReadError");
        // Nested as deep as the body allows, inside a parameter (read
        // through without recursion, then refused) and outside (past
        // serde_json's recursion limit).
        let n = BODY_MAX / 2 - 8;
        let deep = format!(r#"{{"down": {}{}}}"#, "[".repeat(n), "]".repeat(n));
        assert!(err(deep.as_bytes()).text.contains("nested object or list"));
        let deep = format!(r#"{{"down": {}}}"#, "[".repeat(BODY_MAX - 12));
        assert_eq!(err(deep.as_bytes()).code, "JsonError");
        let deep = "[".repeat(10_000);
        assert_eq!(err(deep.as_bytes()).code, "JsonError");
        // Many keys.
        let many: Vec<String> = (0..1000).map(|i| format!("\"k{i}\": 1")).collect();
        let many = format!("{{{}}}", many.join(","));
        assert!(parse_patch(many.as_bytes()).is_err());
        // Control characters and NUL.
        assert_eq!(err(b"{\"down\": true}\0").code, "JsonError");
        assert_eq!(err(b"{\"do\x01wn\": true}").code, "JsonError");
    }

    #[test]
    fn outcomes() {
        let p = |down, drain| Patch { down, drain };
        assert_eq!(
            outcome(p(Some(true), Some(true)), Target::Up),
            Some(Target::Down)
        );
        assert_eq!(
            outcome(p(Some(false), Some(true)), Target::Up),
            Some(Target::Drain)
        );
        assert_eq!(
            outcome(p(Some(false), None), Target::Drain),
            Some(Target::Up)
        );
        assert_eq!(
            outcome(p(None, Some(false)), Target::Drain),
            Some(Target::Up)
        );
        assert_eq!(outcome(p(None, Some(false)), Target::Down), None);
        assert_eq!(outcome(p(None, None), Target::Down), None);
    }

    #[test]
    fn durations() {
        assert_eq!(duration(10_000), "10s");
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(1500), "1500ms");
    }
}
