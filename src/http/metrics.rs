//! `metrics`: the figures of the `api` and `stub_status` handlers in the
//! Prometheus text exposition format (version 0.0.4). The writer at the top
//! (families, label escaping, number formatting) is pure and unit-tested;
//! `collect` reads the zones and the shared counters. Only upstreams in a
//! zone are shown: the others' counters are each worker's own.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use http::Method;

use super::Reply;
use super::response;
use super::status::{downtime_ms, no_cache};
use super::vars::Req;
use crate::net::stats::Stats;
use crate::upstream::peers::now_ms;
use crate::upstream::{UpstreamRt, Upstreams};

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Metric families in the order first seen, each with its samples, so that
/// every sample of a family follows its one `# HELP` and `# TYPE`.
#[derive(Default)]
pub struct Families {
    order: Vec<&'static str>,
    by_name: BTreeMap<&'static str, Family>,
}

struct Family {
    help: &'static str,
    kind: Kind,
    /// Each sample's name suffix (a histogram's `_bucket`, `_sum`,
    /// `_count`), labels and value.
    samples: Vec<(&'static str, String, f64)>,
}

impl Families {
    /// Adds one sample; `labels` are (name, value) pairs, values escaped here.
    pub fn add(
        &mut self,
        name: &'static str,
        kind: Kind,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        self.push(name, kind, help, "", label_set(labels), value);
    }

    /// Adds one histogram: its buckets' upper bounds and counts (the last
    /// count: above every bound), made cumulative here with the `+Inf`
    /// bucket, and the sum of the observations.
    pub fn add_histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) {
        let mut total = 0u64;
        for (k, c) in counts.iter().enumerate() {
            total += c;
            // As the client libraries write bounds: 1.0, 0.05.
            let le = bounds
                .get(k)
                .map_or_else(|| "+Inf".to_string(), |b| format!("{b:?}"));
            let mut with = labels.to_vec();
            with.push(("le", le.as_str()));
            self.push(
                name,
                Kind::Histogram,
                help,
                "_bucket",
                label_set(&with),
                total as f64,
            );
        }
        self.push(name, Kind::Histogram, help, "_sum", label_set(labels), sum);
        self.push(
            name,
            Kind::Histogram,
            help,
            "_count",
            label_set(labels),
            total as f64,
        );
    }

    fn push(
        &mut self,
        name: &'static str,
        kind: Kind,
        help: &'static str,
        suffix: &'static str,
        labels: String,
        value: f64,
    ) {
        let f = self.by_name.entry(name).or_insert_with(|| Family {
            help,
            kind,
            samples: Vec::new(),
        });
        if f.samples.is_empty() && !self.order.contains(&name) {
            self.order.push(name);
        }
        f.samples.push((suffix, labels, value));
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            let Some(f) = self.by_name.get(name) else {
                continue;
            };
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(out, "# HELP {} {}", name, escape_help(f.help));
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (suffix, labels, v) in &f.samples {
                let _ = writeln!(out, "{name}{suffix}{labels} {}", number(*v));
            }
        }
        out
    }
}

fn label_set(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}=\"{}\"", k, escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A label value: backslash, double quote and line feed escaped.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// HELP text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Integers without a fraction, others as Rust's shortest round-trip form.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The `metrics` handler.
pub fn serve(
    r: &Req,
    upstreams: &Upstreams,
    stream: &Upstreams,
    stats: Option<&Stats>,
    process: &Process,
) -> Reply {
    if r.method != Method::GET && r.method != Method::HEAD {
        return Reply::Status(405);
    }
    let mut f = Families::default();
    process_figures(&mut f, process);
    if let Some(c) = stats.and_then(Stats::counters) {
        connections(&mut f, c);
    }
    let mut zones = HashSet::new();
    for (list, stream) in [(upstreams, false), (stream, true)] {
        for u in list.iter().filter(|u| u.zone().is_some()) {
            upstream(&mut f, u, stream, &mut zones);
        }
    }
    let mut resp = response::build(
        200,
        Some(CONTENT_TYPE),
        Bytes::from(f.render()),
        r.conf.server_tokens,
    );
    no_cache(&mut resp);
    Reply::Full(resp)
}

/// What the worker knows of its processes.
pub struct Process {
    pub workers: usize,
    pub generation: u64,
    /// Binary upgrades that led to this master.
    pub upgrades: u64,
    /// The master's pid: a worker's parent, or this process alone.
    pub master: i32,
}

fn process_figures(f: &mut Families, p: &Process) {
    use Kind::*;
    f.add(
        "sluice_process_workers",
        Gauge,
        "Worker processes the configuration asks for.",
        &[],
        p.workers as f64,
    );
    f.add(
        "sluice_process_generation",
        Gauge,
        "The configuration generation this worker serves (1 at start, +1 per reload).",
        &[],
        p.generation as f64,
    );
    f.add(
        "sluice_process_reloads_total",
        Counter,
        "Successful reloads since this master process started.",
        &[],
        p.generation.saturating_sub(1) as f64,
    );
    f.add(
        "sluice_process_upgrades_total",
        Counter,
        "Binary upgrades (USR2) that led to this master process.",
        &[],
        p.upgrades as f64,
    );
    if let Some(start) = start_time(p.master) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        f.add(
            "sluice_process_start_time_seconds",
            Gauge,
            "When the master process started, in seconds since the epoch.",
            &[],
            start,
        );
        f.add(
            "sluice_process_uptime_seconds",
            Gauge,
            "Seconds since the master process started.",
            &[],
            (now - start).max(0.0).floor(),
        );
    }
}

/// A process's start in seconds since the epoch, from /proc (Linux).
fn start_time(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis, the 20th field is starttime.
    let rest = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)
        .unwrap_or(100);
    Some(boot as f64 + ticks as f64 / hz as f64)
}

fn connections(f: &mut Families, c: &crate::shm::records::StatusCounters) {
    use Kind::*;
    let active = c.active.load(Relaxed);
    let reading = c.reading.load(Relaxed);
    let writing = c.writing.load(Relaxed);
    let rows: [(&'static str, Kind, &'static str, u64); 10] = [
        (
            "sluice_connections_accepted_total",
            Counter,
            "Client connections accepted (stub_status accepts).",
            c.accepted.load(Relaxed),
        ),
        (
            "sluice_connections_handled_total",
            Counter,
            "Client connections handled (stub_status handled).",
            c.handled.load(Relaxed),
        ),
        (
            "sluice_http_requests_total",
            Counter,
            "Client requests (stub_status requests).",
            c.requests.load(Relaxed),
        ),
        (
            "sluice_connections_active",
            Gauge,
            "Open client connections, waiting ones included.",
            active,
        ),
        (
            "sluice_connections_reading",
            Gauge,
            "Connections reading a request head.",
            reading,
        ),
        (
            "sluice_connections_writing",
            Gauge,
            "Connections with a request being processed.",
            writing,
        ),
        (
            "sluice_connections_waiting",
            Gauge,
            "Idle keep-alive connections.",
            active.saturating_sub(reading + writing),
        ),
        (
            "sluice_stream_sessions_total",
            Counter,
            "Stream (TCP) sessions accepted.",
            c.stream_sessions.load(Relaxed),
        ),
        (
            "sluice_stream_sessions_active",
            Gauge,
            "Stream (TCP) sessions open now.",
            c.stream_active.load(Relaxed),
        ),
        (
            "sluice_http2_client_resets_total",
            Counter,
            "HTTP/2 streams the client reset (RST_STREAM) before their response ended.",
            c.h2_client_resets.load(Relaxed),
        ),
    ];
    for (name, kind, help, v) in rows {
        f.add(name, kind, help, &[], v as f64);
    }
}

/// Metric names of one upstream kind (HTTP or stream).
struct Names {
    state: &'static str,
    active: &'static str,
    requests: &'static str,
    responses: &'static str,
    fails: &'static str,
    unavail: &'static str,
    downtime: &'static str,
    sent: &'static str,
    received: &'static str,
    open: &'static str,
    idle: &'static str,
    recycled: &'static str,
    weight: &'static str,
    peers: &'static str,
    answer_age: &'static str,
    expires_in: &'static str,
    error: &'static str,
    addresses: &'static str,
    lookups: &'static str,
    lookup_ends: &'static str,
}

const HTTP: Names = Names {
    state: "sluice_upstream_peer_state",
    active: "sluice_upstream_peer_active",
    requests: "sluice_upstream_peer_requests_total",
    responses: "sluice_upstream_peer_responses_total",
    fails: "sluice_upstream_peer_fails_total",
    unavail: "sluice_upstream_peer_unavail_total",
    downtime: "sluice_upstream_peer_downtime_seconds_total",
    sent: "sluice_upstream_peer_sent_bytes_total",
    received: "sluice_upstream_peer_received_bytes_total",
    open: "sluice_upstream_peer_connections_open",
    idle: "sluice_upstream_peer_connections_idle",
    recycled: "sluice_upstream_peer_connections_recycled_total",
    weight: "sluice_upstream_peer_weight",
    peers: "sluice_upstream_peers",
    answer_age: "sluice_upstream_resolve_answer_age_seconds",
    expires_in: "sluice_upstream_resolve_expires_in_seconds",
    error: "sluice_upstream_resolve_last_error",
    addresses: "sluice_upstream_resolve_addresses",
    lookups: "sluice_upstream_resolve_lookups_total",
    lookup_ends: "sluice_upstream_resolve_lookup_results_total",
};

const STREAM: Names = Names {
    state: "sluice_stream_upstream_peer_state",
    active: "sluice_stream_upstream_peer_active",
    requests: "sluice_stream_upstream_peer_connections_total",
    responses: "",
    fails: "sluice_stream_upstream_peer_fails_total",
    unavail: "sluice_stream_upstream_peer_unavail_total",
    downtime: "sluice_stream_upstream_peer_downtime_seconds_total",
    sent: "sluice_stream_upstream_peer_sent_bytes_total",
    received: "sluice_stream_upstream_peer_received_bytes_total",
    open: "",
    idle: "",
    recycled: "",
    weight: "sluice_stream_upstream_peer_weight",
    peers: "sluice_stream_upstream_peers",
    answer_age: "sluice_stream_upstream_resolve_answer_age_seconds",
    expires_in: "sluice_stream_upstream_resolve_expires_in_seconds",
    error: "sluice_stream_upstream_resolve_last_error",
    addresses: "sluice_stream_upstream_resolve_addresses",
    lookups: "sluice_stream_upstream_resolve_lookups_total",
    lookup_ends: "sluice_stream_upstream_resolve_lookup_results_total",
};

fn upstream(f: &mut Families, u: &UpstreamRt, stream: bool, zones: &mut HashSet<String>) {
    use Kind::*;
    let n = if stream { &STREAM } else { &HTTP };
    let peers = u.peers();
    let now = now_ms();
    let up = u.cfg.name.as_str();
    let all: Vec<_> = peers.primary.iter().chain(peers.backup.iter()).collect();
    f.add(
        n.peers,
        Gauge,
        "Peers the upstream has now (resolved ones included).",
        &[("upstream", up)],
        all.len() as f64,
    );
    if let (Some(z), Some(i), Some(_)) = (u.zone(), u.zone_index(), u.cfg.queue) {
        let (size, overflows) = z.queue(i);
        f.add(
            "sluice_upstream_queue_size",
            Gauge,
            "Requests waiting in the upstream's queue now, every worker's.",
            &[("upstream", up)],
            f64::from(size),
        );
        f.add(
            "sluice_upstream_queue_overflows_total",
            Counter,
            "Requests turned away with 502 because their worker's queue was full.",
            &[("upstream", up)],
            overflows as f64,
        );
    }
    if let (false, Some(z), Some(i)) = (stream, u.zone(), u.zone_index()) {
        use crate::upstream::zone::Timing;
        for (t, name, help) in [
            (
                Timing::Connect,
                "sluice_upstream_connect_seconds",
                "Time the upstream's attempts took to connect ($upstream_connect_time).",
            ),
            (
                Timing::Header,
                "sluice_upstream_header_seconds",
                "Time to the upstream's response header ($upstream_header_time).",
            ),
            (
                Timing::Response,
                "sluice_upstream_response_seconds",
                "Time to the upstream's whole response ($upstream_response_time).",
            ),
        ] {
            let h = z.histogram(i, t);
            let bounds: Vec<f64> = h.bounds_ms.iter().map(|b| f64::from(*b) / 1000.0).collect();
            f.add_histogram(
                name,
                help,
                &[("upstream", up)],
                &bounds,
                &h.counts,
                h.sum_us as f64 / 1e6,
            );
        }
    }
    let mut seen: HashSet<(String, bool)> = HashSet::new();
    for p in all {
        let l = &p.live;
        // The same address twice (two lines, or a duplicate DNS answer)
        // would repeat a label set: the repeats are told apart by "#N".
        let mut peer = p.name.to_string();
        let mut k = 1;
        while !seen.insert((peer.clone(), p.backup)) {
            k += 1;
            peer = format!("{}#{}", p.name, k);
        }
        let server = peers.servers.get(p.server).map_or("", String::as_str);
        let backup = if p.backup { "true" } else { "false" };
        let labels = [
            ("upstream", up),
            ("peer", peer.as_str()),
            ("server", server),
            ("backup", backup),
        ];
        let state = super::status::peer_state(p, now);
        for s in super::status::PEER_STATES {
            let mut with = labels.to_vec();
            with.push(("state", s));
            f.add(
                n.state,
                Gauge,
                "1 for the peer's state (up, down, draining, unavail, unhealthy, checking), 0 for the others.",
                &with,
                if s == state { 1.0 } else { 0.0 },
            );
        }
        f.add(
            n.active,
            Gauge,
            "Requests or connections to the peer in progress.",
            &labels,
            f64::from(l.conns.load(Relaxed)),
        );
        f.add(
            n.requests,
            Counter,
            if stream {
                "Connections proxied to the peer."
            } else {
                "Requests sent to the peer."
            },
            &labels,
            l.requests.load(Relaxed) as f64,
        );
        if !stream {
            for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
                let mut with = labels.to_vec();
                with.push(("code", class));
                f.add(
                    n.responses,
                    Counter,
                    "Responses from the peer by status class.",
                    &with,
                    l.responses[i].load(Relaxed) as f64,
                );
            }
        }
        f.add(
            n.fails,
            Counter,
            "Failed attempts to the peer.",
            &labels,
            f64::from(l.fails.load(Relaxed)),
        );
        f.add(
            n.unavail,
            Counter,
            "Times the peer became unavailable (max_fails reached).",
            &labels,
            f64::from(l.unavail.load(Relaxed)),
        );
        f.add(
            n.downtime,
            Counter,
            "Seconds the peer has been unavailable, the current stretch included.",
            &labels,
            downtime_ms(l, now) as f64 / 1000.0,
        );
        f.add(
            n.sent,
            Counter,
            "Bytes sent to the peer.",
            &labels,
            l.sent.load(Relaxed) as f64,
        );
        f.add(
            n.received,
            Counter,
            "Bytes received from the peer.",
            &labels,
            l.received.load(Relaxed) as f64,
        );
        f.add(
            n.weight,
            Gauge,
            "The peer's weight.",
            &labels,
            p.weight as f64,
        );
        if !stream {
            f.add(
                n.open,
                Gauge,
                "Connections to the peer open in every worker (HTTP/1 keep-alive pool and HTTP/2 sets), busy or idle.",
                &labels,
                f64::from(l.open.load(Relaxed)),
            );
            f.add(
                n.idle,
                Gauge,
                "Idle connections to the peer in every worker's keep-alive pool.",
                &labels,
                f64::from(l.idle.load(Relaxed)),
            );
            f.add(
                n.recycled,
                Counter,
                "Connections to the peer closed for their age (keepalive_time).",
                &labels,
                l.recycled.load(Relaxed) as f64,
            );
        }
    }
    let (Some(z), Some(i)) = (u.zone(), u.zone_index()) else {
        return;
    };
    for (k, s) in u.cfg.servers.iter().enumerate().filter(|(_, s)| s.resolve) {
        let (expires, answered, error) = z.resolved(i, k);
        let labels = [("upstream", up), ("server", s.text.as_str())];
        if answered != 0 {
            f.add(
                n.answer_age,
                Gauge,
                "Seconds since the last DNS answer for the server line.",
                &labels,
                now.saturating_sub(answered) as f64 / 1000.0,
            );
        }
        if expires != 0 {
            f.add(
                n.expires_in,
                Gauge,
                "Seconds until the server line's answer expires (negative: overdue).",
                &labels,
                (expires as f64 - now as f64) / 1000.0,
            );
        }
        f.add(
            n.error,
            Gauge,
            "The last lookup's error code for the server line (0: none).",
            &labels,
            f64::from(error),
        );
        let count = peers
            .primary
            .iter()
            .chain(peers.backup.iter())
            .filter(|p| p.server == k)
            .count();
        f.add(
            n.addresses,
            Gauge,
            "Addresses the server line stands for now.",
            &labels,
            count as f64,
        );
        let (lookups, ends) = z.lookups(i, k);
        f.add(
            n.lookups,
            Counter,
            "DNS lookups of the server line's name (A and AAAA, or SRV).",
            &labels,
            lookups as f64,
        );
        for (end, label) in crate::upstream::zone::LookupEnd::ALL {
            let mut with = labels.to_vec();
            with.push(("result", label));
            f.add(
                n.lookup_ends,
                Counter,
                "How the server line's lookups ended: the answer's rcode, or timeout.",
                &with,
                ends[end as usize] as f64,
            );
        }
    }
    if !zones.insert(z.name.clone()) {
        return;
    }
    let usage = z.usage();
    let zl = [("zone", z.name.as_str())];
    let rows: [(&'static str, &'static str, f64); 6] = [
        (
            "sluice_upstream_zone_size_bytes",
            "The zone's size.",
            usage.size as f64,
        ),
        (
            "sluice_upstream_zone_used_bytes",
            "Bytes of the zone in use.",
            usage.used as f64,
        ),
        (
            "sluice_upstream_zone_peer_slots",
            "Peer slots the zone has.",
            f64::from(usage.slots),
        ),
        (
            "sluice_upstream_zone_peer_slots_free",
            "Peer slots free for new peers.",
            f64::from(usage.slots.saturating_sub(usage.in_use)),
        ),
        (
            "sluice_upstream_zone_generation",
            "The generation that made the zone.",
            usage.generation as f64,
        ),
        (
            "sluice_upstream_zone_resolver_pid",
            "The worker holding the zone's resolver lease (0: none).",
            f64::from(z.lease().map(|l| l.holder()).unwrap_or(0)),
        ),
    ];
    for (name, help, v) in rows {
        f.add(name, Gauge, help, &zl, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escape_label("plain"), "plain");
    }

    #[test]
    fn families_group_samples_under_one_help() {
        let mut f = Families::default();
        f.add("a_total", Kind::Counter, "A.", &[("x", "1")], 3.0);
        f.add("b", Kind::Gauge, "B\\n", &[], 0.5);
        f.add("a_total", Kind::Counter, "A.", &[("x", "q\"")], 4.0);
        assert_eq!(
            f.render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3\n\
             a_total{x=\"q\\\"\"} 4\n# HELP b B\\\\n\n# TYPE b gauge\nb 0.5\n"
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(12345678.0), "12345678");
        assert_eq!(number(1.25), "1.25");
        assert_eq!(number(-0.5), "-0.5");
        assert_eq!(number(f64::INFINITY), "+Inf");
    }

    #[test]
    fn start_time_of_this_process() {
        let t = start_time(std::process::id() as i32).expect("linux /proc");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        assert!(t <= now + 1.0 && t > now - 3600.0, "{t} vs {now}");
    }
}
