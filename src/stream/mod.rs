//! The TCP (stream) proxy of a worker, on the same upstream layer as HTTP:
//! accept on the stream listeners, pick a peer with the upstream's balancer
//! (zones, resolve and failure accounting as for HTTP), connect within
//! `proxy_connect_timeout`, trying the next peer only when connecting fails
//! (`proxy_next_upstream`, `_tries`, `_timeout`), then copy bytes both ways
//! until either side closes (both with `proxy_half_close`) or nothing moves
//! for `proxy_timeout`. `return` sends its text and closes. A graceful stop
//! closes the listeners and lets sessions finish (bounded by
//! `worker_shutdown_timeout`). Called by `process::worker`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, watch};

use crate::conf::Config;
use crate::conf::model::{ListenAddr, PeerAddr, StreamServer, StreamTarget};
use crate::conf::vars::{Segment, Template, Var};
use crate::http::client_io::Stream;
use crate::http::{Listener, Phase};
use crate::log::Level;
use crate::upstream::balancer::{Key, PickState};
use crate::upstream::peers::now_ms;
use crate::upstream::race::{Ended, Race};
use crate::upstream::{
    Outcome, PeerId, Peers, Released, Tried, UpstreamRt, Upstreams, Zones, in_time,
};

struct Shared {
    cfg: Arc<Config>,
    upstreams: Upstreams,
    /// Shared with the worker's HTTP server.
    next_conn: Arc<AtomicU64>,
    active: AtomicUsize,
    drained: Notify,
}

/// Serves the stream listeners until the phase leaves `Running`, then waits
/// for the sessions (bounded by `worker_shutdown_timeout`).
pub async fn serve(
    cfg: Arc<Config>,
    listeners: Vec<Listener>,
    mut phase: watch::Receiver<Phase>,
    zones: Zones,
    saved: Option<Arc<Notify>>,
    slot: usize,
    next_conn: Arc<AtomicU64>,
) {
    let Some(stream) = cfg.stream.as_ref() else {
        return;
    };
    let shared = Arc::new(Shared {
        upstreams: Upstreams::from_list(&stream.upstreams, &zones),
        cfg: cfg.clone(),
        next_conn,
        active: AtomicUsize::new(0),
        drained: Notify::new(),
    });
    if !zones.is_empty() {
        crate::upstream::resolve::start_upkeep(&shared.upstreams, slot, saved);
    }
    let mut accepts = tokio::task::JoinSet::new();
    for l in listeners {
        let Some(server) = server_for(stream.servers.as_slice(), &l.addr) else {
            continue;
        };
        accepts.spawn(accept_loop(l, server, shared.clone()));
    }
    while *phase.borrow_and_update() == Phase::Running {
        if phase.changed().await.is_err() {
            break;
        }
    }
    accepts.shutdown().await;
    if *phase.borrow() == Phase::Fast {
        return;
    }
    crate::http::drain(
        &shared.active,
        &shared.drained,
        &mut phase,
        cfg.main.worker_shutdown_timeout,
    )
    .await;
}

/// The server a listener was bound for.
fn server_for(servers: &[StreamServer], addr: &ListenAddr) -> Option<usize> {
    servers
        .iter()
        .position(|s| s.listen.iter().any(|l| &l.addr == addr))
        .or_else(|| {
            // A specific address served by a wildcard listener.
            let port = match addr {
                ListenAddr::Inet(a) => a.port(),
                ListenAddr::Unix(_) => return None,
            };
            servers.iter().position(|s| {
                s.listen
                    .iter()
                    .any(|l| matches!(&l.addr, ListenAddr::Inet(a) if a.port() == port))
            })
        })
}

/// The listeners of `cfg` that belong to stream servers.
pub fn is_stream_listener(cfg: &Config, addr: &ListenAddr) -> bool {
    cfg.stream
        .as_ref()
        .is_some_and(|st| server_for(&st.servers, addr).is_some())
}

async fn accept_loop(l: Listener, server: usize, shared: Arc<Shared>) {
    let listen = l.addr.to_string();
    let Some(sock) = crate::http::Sock::adopt(l) else {
        return;
    };
    loop {
        let (io, remote, local) = sock.accept().await;
        shared.active.fetch_add(1, Ordering::AcqRel);
        let session = Session {
            number: shared.next_conn.fetch_add(1, Ordering::Relaxed),
            remote,
            local,
            listen: listen.clone(),
            start: Instant::now(),
            status: 200,
            attempts: Vec::new(),
            copied: Default::default(),
            connected_at: None,
            ended: None,
        };
        let shared2 = shared.clone();
        tokio::spawn(async move {
            run(io, session, server, &shared2).await;
            if shared2.active.fetch_sub(1, Ordering::AcqRel) == 1 {
                shared2.drained.notify_waiters();
            }
        });
    }
}

/// One client session, and what its access log line says.
struct Session {
    number: u64,
    remote: Option<SocketAddr>,
    local: Option<SocketAddr>,
    listen: String,
    start: Instant,
    /// nginx's stream `$status`: 200, or 502 when no upstream could be had.
    status: u16,
    /// Per connection attempt: the peer and how long connecting took (None:
    /// it failed).
    attempts: Vec<(String, Option<Duration>)>,
    copied: crate::net::copy::Copied,
    connected_at: Option<Instant>,
    ended: Option<Instant>,
}

impl Session {
    fn client(&self) -> String {
        self.remote
            .map(|a| a.ip().to_string())
            .unwrap_or_else(|| "unix:".into())
    }

    /// nginx's stream log context.
    fn context(&self, upstream: &str, up: (u64, u64)) -> String {
        format!(
            ", client: {}, server: {}, upstream: \"{}\", bytes from/to client:0/0, bytes from/to upstream:{}/{}",
            self.client(),
            self.listen,
            upstream,
            up.0,
            up.1
        )
    }

    /// The variables a stream template may use here.
    fn eval(&self, t: &Template) -> String {
        let mut out = String::new();
        for seg in &t.segments {
            match seg {
                Segment::Lit(s) => out.push_str(s),
                Segment::Var(v) => out.push_str(&self.var(v)),
            }
        }
        out
    }

    fn var(&self, v: &Var) -> String {
        match v {
            Var::RemoteAddr => self.client(),
            Var::RemotePort => self
                .remote
                .map(|a| a.port().to_string())
                .unwrap_or_default(),
            Var::ServerAddr => self.local.map(|a| a.ip().to_string()).unwrap_or_default(),
            Var::ServerPort => self.local.map(|a| a.port().to_string()).unwrap_or_default(),
            Var::Connection => self.number.to_string(),
            Var::Pid => std::process::id().to_string(),
            Var::Status => self.status.to_string(),
            Var::UpstreamAddr => self.list(|(a, _)| a.clone()),
            Var::UpstreamConnectTime => self.list(|(_, t)| t.map_or("-".into(), secs)),
            Var::UpstreamFirstByteTime => match (self.connected_at, self.copied.first_ba) {
                (Some(c), Some(f)) => secs(f.duration_since(c)),
                _ => "-".into(),
            },
            Var::UpstreamSessionTime => match (self.connected_at, self.ended) {
                (Some(c), Some(e)) => secs(e.duration_since(c)),
                _ => "-".into(),
            },
            Var::SessionTime => secs(self.ended.unwrap_or_else(Instant::now) - self.start),
            // Seen from the client: sent to it, received from it.
            Var::BytesSent | Var::UpstreamBytesReceived => self.copied.ba.to_string(),
            Var::BytesReceived | Var::UpstreamBytesSent => self.copied.ab.to_string(),
            _ => String::new(),
        }
    }

    fn list(&self, f: impl Fn(&(String, Option<Duration>)) -> String) -> String {
        if self.attempts.is_empty() {
            return "-".into();
        }
        self.attempts.iter().map(f).collect::<Vec<_>>().join(", ")
    }

    /// The session's access log lines.
    fn log(&self, logs: &[crate::conf::loc::AccessLog]) {
        use crate::conf::loc::Escape;
        for l in logs {
            let Some(file) = crate::log::files::get(&l.path) else {
                continue;
            };
            let mut line = String::new();
            for seg in &l.format.template.segments {
                match seg {
                    Segment::Lit(s) => line.push_str(s),
                    Segment::Var(v) => {
                        let value = self.var(v);
                        match l.format.escape {
                            Escape::Default => {
                                crate::log::escape::escape_default(&value, &mut line)
                            }
                            Escape::Json => crate::log::escape::escape_json(&value, &mut line),
                            Escape::None => line.push_str(&value),
                        }
                    }
                }
            }
            line.push('\n');
            file.write_line(line.as_bytes());
        }
    }
}

/// Seconds with milliseconds, as nginx prints times.
fn secs(d: Duration) -> String {
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

async fn run(mut client: Stream, mut s: Session, server: usize, shared: &Shared) {
    let Some(conf) = shared
        .cfg
        .stream
        .as_ref()
        .and_then(|st| st.servers.get(server))
    else {
        return;
    };
    match &conf.target {
        StreamTarget::Return(t) => {
            let text = s.eval(t);
            if client.write_all(text.as_bytes()).await.is_ok() {
                s.copied.ba = text.len() as u64;
            }
            let _ = client.shutdown().await;
        }
        StreamTarget::Upstream(i) => {
            if let Some(ups) = shared.upstreams.get(*i).cloned() {
                match connect(&mut s, conf, &ups).await {
                    Some((upstream, peers, id)) => {
                        s.connected_at = Some(Instant::now());
                        s.copied = crate::net::copy::both(
                            client,
                            upstream,
                            conf.proxy_timeout,
                            conf.proxy_half_close,
                        )
                        .await;
                        peers.release(id, Outcome::Ok, now_ms());
                    }
                    None => s.status = 502,
                }
            }
        }
    }
    s.ended = Some(Instant::now());
    s.log(&conf.access_log);
}

type Connected = (Stream, Arc<crate::upstream::Peers>, crate::upstream::PeerId);

/// Picks and connects, trying the next peer when connecting fails, as
/// `proxy_next_upstream` allows.
async fn connect(s: &mut Session, conf: &StreamServer, ups: &Arc<UpstreamRt>) -> Option<Connected> {
    let snap = ups.peers_ready().await;
    let mut tried = Tried::new(&snap);
    let limit = conf.proxy_next_upstream_tries as usize;
    let mut tries_left = if limit > 0 {
        snap.count().min(limit)
    } else {
        snap.count()
    };
    let started = Instant::now();
    let hash_text = match &ups.cfg.balancer {
        crate::conf::model::Balancer::Hash { key, .. } => s.eval(key),
        _ => String::new(),
    };
    let addr_key: Vec<u8> = match s.remote.map(|a| a.ip()) {
        Some(std::net::IpAddr::V4(ip)) => ip.octets()[..3].to_vec(),
        Some(std::net::IpAddr::V6(ip)) => ip.octets().to_vec(),
        None => vec![0, 0, 0],
    };
    let key = match &ups.cfg.balancer {
        crate::conf::model::Balancer::Hash { .. } => Key::Text(&hash_text),
        crate::conf::model::Balancer::IpHash => Key::Addr(&addr_key),
        _ => Key::None,
    };
    let mut pick_state = PickState::new(crate::upstream::random::next_u64());
    let pick_first = ups.cfg.balancer.is_pick_first();
    // A failed attempt: logged, recorded, the peer released as failed.
    let failed = |s: &mut Session, id: PeerId, why: &str| {
        let peer = snap.get(id);
        s.attempts.push((peer.name.to_string(), None));
        let ctx = s.context(&peer.name, (0, 0));
        connect_failed(s.number, &ctx, why, &snap, id, pick_first);
    };
    loop {
        let (b, ms) = (&ups.cfg.balancer, now_ms());
        let Some(id) = snap.take(b, &mut pick_state, &key, &mut tried, &mut tries_left, ms) else {
            s.attempts.push((ups.cfg.name.clone(), None));
            crate::log_conn!(
                Level::Error,
                s.number,
                "no live upstreams while connecting to upstream{}",
                s.context(&ups.cfg.name, (0, 0))
            );
            return None;
        };
        // With proxy_connect_race, more attempts join a slow one.
        let mut racers = vec![(id, Instant::now())];
        let first = open(snap.get(id).addr.clone(), conf.proxy_connect_timeout);
        let mut race: Race<Stream, String> = Race::default();
        let mut failures = Vec::new();
        let ended = race
            .first(
                first,
                conf.proxy_connect_race,
                |race| {
                    let in_time = in_time(started.elapsed(), conf.proxy_next_upstream_timeout);
                    if !conf.proxy_next_upstream || tries_left == 0 || !in_time {
                        return false;
                    }
                    let (b, ms) = (&ups.cfg.balancer, now_ms());
                    let Some(next) =
                        snap.take(b, &mut pick_state, &key, &mut tried, &mut tries_left, ms)
                    else {
                        return false;
                    };
                    racers.push((next, Instant::now()));
                    race.start(open(
                        snap.get(next).addr.clone(),
                        conf.proxy_connect_timeout,
                    ));
                    true
                },
                |k, why| failures.push((k, why)),
            )
            .await;
        for (k, why) in failures {
            failed(s, racers[k].0, &why);
        }
        match ended {
            Some(Ended::Won(k, c)) if racers.len() == 1 => {
                s.attempts
                    .push((snap.get(id).name.to_string(), Some(racers[k].1.elapsed())));
                return Some((c, snap.clone(), id));
            }
            Some(Ended::Won(k, c)) => {
                // The losers still connecting finish in the background: one
                // that fails counts as failed, one that connects is closed.
                let losers: Vec<(PeerId, String)> = racers
                    .iter()
                    .map(|(id, _)| (*id, s.context(&snap.get(*id).name, (0, 0))))
                    .collect();
                let (peers, number) = (snap.clone(), s.number);
                race.finish(move |j, result| {
                    let Some((id, ctx)) = losers.get(j) else {
                        return;
                    };
                    match result {
                        Ok(_unused) => {
                            peers.release(*id, Outcome::Next, now_ms());
                        }
                        Err(why) => connect_failed(number, ctx, &why, &peers, *id, pick_first),
                    }
                });
                let (id, began) = racers[k];
                s.attempts
                    .push((snap.get(id).name.to_string(), Some(began.elapsed())));
                return Some((c, snap.clone(), id));
            }
            Some(Ended::Lost(k, why)) => failed(s, racers[k].0, &why),
            None => return None,
        }
        let in_time = in_time(started.elapsed(), conf.proxy_next_upstream_timeout);
        if !conf.proxy_next_upstream || tries_left == 0 || !in_time {
            return None;
        }
    }
}

/// A connect that failed: logged (for session `number`, with the error
/// log's context `ctx`), the peer released as failed; with `pick_first`
/// the choice moves on.
fn connect_failed(number: u64, ctx: &str, why: &str, peers: &Peers, id: PeerId, pick_first: bool) {
    crate::log_conn!(
        Level::Error,
        number,
        "{} while connecting to upstream{}",
        why,
        ctx
    );
    let now = now_ms();
    if peers.release(id, Outcome::Failed, now) == Released::Disabled {
        crate::log_conn!(
            Level::Warn,
            number,
            "upstream server temporarily disabled while connecting to upstream{}",
            ctx
        );
    }
    if pick_first {
        peers.move_on(id, now);
    }
}

/// Connects to a peer within `timeout`; the reason as the error log says it.
async fn open(addr: PeerAddr, timeout: Duration) -> Result<Stream, String> {
    let attempt = match &addr {
        PeerAddr::Inet(a) => tokio::time::timeout(timeout, tokio::net::TcpStream::connect(a))
            .await
            .map(|r| r.map(Stream::Tcp)),
        PeerAddr::Unix(p) => tokio::time::timeout(timeout, tokio::net::UnixStream::connect(p))
            .await
            .map(|r| r.map(Stream::Unix)),
    };
    match attempt {
        Ok(Ok(c)) => {
            if let Stream::Tcp(t) = &c {
                let _ = t.set_nodelay(true);
            }
            Ok(c)
        }
        Ok(Err(e)) => Err(format!("connect() failed ({})", crate::log::errno_text(&e))),
        Err(_) => Err("upstream timed out (110: Connection timed out)".to_string()),
    }
}
