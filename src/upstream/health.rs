//! Active health checks (`health_check`): in every worker one task per
//! checked zone upstream, but only the holder of the zone's health-check
//! lease (taken and renewed in `Upstreams::tick`, freed by the master when
//! its worker dies) sends checks: an HTTP/1.1 `GET` (http) or a TCP connect
//! with an optional `send`/`expect` exchange (stream) to every peer, every
//! `interval` (+ up to `jitter`). The verdict (`fails`/`passes` in a row)
//! and the counters go into the peer's zone record, so every worker's
//! balancer skips unhealthy peers. TLS to the peers is not checked.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::UpstreamRt;
use super::peers::{Ms, PeerLive, now_ms};
use crate::conf::model::{HealthCheck, PeerAddr};
use crate::log::Level;

/// `PeerLive::health`: never checked (up, unless `mandatory`).
pub const UNCHECKED: u32 = 0;
pub const HEALTHY: u32 = 1;
pub const UNHEALTHY: u32 = 2;

/// The most of a response a check reads.
const READ_MAX: usize = 256 * 1024;

/// Starts the checking task of every zone upstream with a `health_check`.
pub fn spawn_all(upstreams: &super::Upstreams) {
    for u in upstreams.iter() {
        if u.zone().is_some() && u.cfg.health.is_some() {
            tokio::spawn(check_loop(u.clone()));
        }
    }
}

async fn check_loop(u: Arc<UpstreamRt>) {
    let (Some(zone), Some(hc)) = (u.zone().cloned(), u.cfg.health.clone()) else {
        return;
    };
    let me = std::process::id();
    let holds = || zone.hc_lease().is_some_and(|l| l.holder() == me);
    let mut held = false;
    loop {
        if !holds() {
            held = false;
            tokio::time::sleep(super::resolve::LEASE_TICK).await;
            continue;
        }
        if !held {
            held = true;
            crate::log!(
                Level::Notice,
                "health checks of upstream \"{}\" in zone \"{}\" run in this worker",
                u.cfg.name,
                zone.name
            );
        }
        let started = tokio::time::Instant::now();
        let peers = u.peers();
        let mut set = tokio::task::JoinSet::new();
        for p in peers.primary.iter().chain(peers.backup.iter()) {
            let PeerAddr::Inet(addr) = p.addr else {
                continue;
            };
            let addr = SocketAddr::new(addr.ip(), hc.port.unwrap_or(addr.port()));
            let (hc, live, name) = (hc.clone(), p.live.clone(), p.name.clone());
            set.spawn(async move {
                let verdict = check(addr, &hc).await;
                (verdict, live, name)
            });
        }
        while let Some(done) = set.join_next().await {
            let Ok((verdict, live, name)) = done else {
                continue;
            };
            // A worker that lost the lease meanwhile publishes nothing.
            if !holds() {
                continue;
            }
            let was = live.health.load(Relaxed);
            let now = apply(&live, verdict.is_ok(), &hc, now_ms());
            if now == UNHEALTHY && was != UNHEALTHY {
                crate::log!(
                    Level::Warn,
                    "peer is unhealthy while {}, health check \"{}\" of peer {} in upstream \"{}\"",
                    verdict.err().unwrap_or_default(),
                    if hc.stream { "" } else { hc.uri.as_str() },
                    name,
                    u.cfg.name
                );
            } else if now == HEALTHY && was == UNHEALTHY {
                crate::log!(
                    Level::Notice,
                    "peer is healthy, health check of peer {} in upstream \"{}\"",
                    name,
                    u.cfg.name
                );
            }
        }
        let jitter = if hc.jitter.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_millis(super::random::next_u64() % (hc.jitter.as_millis() as u64 + 1))
        };
        tokio::time::sleep_until(started + hc.interval + jitter).await;
    }
}

/// Records one check's result and returns the peer's verdict: `fails`
/// failures in a row make it unhealthy, `passes` passes in a row healthy
/// again; a peer never checked takes the first result (a `mandatory` one
/// is waiting for it).
pub fn apply(l: &PeerLive, passed: bool, hc: &HealthCheck, now: Ms) -> u32 {
    let h = &l.hc;
    h.checks.fetch_add(1, Relaxed);
    let state = l.health.load(Relaxed);
    if passed {
        h.last_passed.store(1, Relaxed);
        h.fail_run.store(0, Relaxed);
        let run = h.pass_run.fetch_add(1, Relaxed) + 1;
        if state == UNCHECKED || (state == UNHEALTHY && run >= hc.passes) {
            let since = h.downstart.swap(0, Relaxed);
            if since != 0 {
                h.downtime.fetch_add(now.saturating_sub(since), Relaxed);
                h.recovered.store(now.max(1), Relaxed);
            }
            l.health.store(HEALTHY, Relaxed);
            return HEALTHY;
        }
        return state;
    }
    h.fails.fetch_add(1, Relaxed);
    h.last_passed.store(0, Relaxed);
    h.pass_run.store(0, Relaxed);
    let run = h.fail_run.fetch_add(1, Relaxed) + 1;
    if state != UNHEALTHY && (run >= hc.fails || (state == UNCHECKED && hc.mandatory)) {
        h.unhealthy.fetch_add(1, Relaxed);
        h.downstart.store(now.max(1), Relaxed);
        l.health.store(UNHEALTHY, Relaxed);
        return UNHEALTHY;
    }
    state
}

/// One check of one peer: Ok when it passed, else what failed (for the log).
async fn check(addr: SocketAddr, hc: &HealthCheck) -> Result<(), &'static str> {
    let mut s = match tokio::time::timeout(hc.connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        _ => return Err("connecting to upstream"),
    };
    if hc.stream {
        return stream_exchange(&mut s, hc).await;
    }
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: sluice health check\r\nConnection: close\r\n\r\n",
        hc.uri, hc.host
    );
    let io = async {
        s.write_all(req.as_bytes())
            .await
            .map_err(|_| "sending request to upstream")?;
        read_response(&mut s).await
    };
    let (status, headers, body) = tokio::time::timeout(hc.read_timeout, io)
        .await
        .map_err(|_| "reading response header from upstream")??;
    let ok = match &hc.matcher {
        Some(m) => m.http_ok(status, &headers, &body),
        None => (200..400).contains(&status),
    };
    if ok {
        Ok(())
    } else {
        Err("checking response of upstream")
    }
}

type Headers = Vec<(String, String)>;
type Response = (u16, Headers, Vec<u8>);

/// Reads a response to a `Connection: close` request: to its
/// `Content-Length`, else to the end (at most `READ_MAX`); a chunked body
/// is decoded.
async fn read_response(s: &mut TcpStream) -> Result<Response, &'static str> {
    let mut buf = Vec::with_capacity(4096);
    let mut head: Option<(u16, Headers, usize)> = None;
    loop {
        if let Some((_, h, len)) = &head {
            let cl = h
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok());
            if cl.is_some_and(|cl| buf.len() >= len + cl) {
                break;
            }
        }
        if buf.len() >= READ_MAX {
            break;
        }
        let mut chunk = [0u8; 8192];
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|_| "reading response from upstream")?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if head.is_none() {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut hs);
            match r.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let headers = r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    head = Some((r.code.unwrap_or(0), headers, len));
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Err("reading response header from upstream"),
            }
        }
    }
    let (status, headers, len) = head.ok_or("reading response header from upstream")?;
    let mut body = buf.split_off(len.min(buf.len()));
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Ok((status, headers, body))
}

/// A chunked body's data (what arrived of it).
fn dechunk(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = b;
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok());
        let Some(size) = size.filter(|&n| n > 0) else {
            break;
        };
        let data = &rest[eol + 2..];
        out.extend_from_slice(&data[..size.min(data.len())]);
        rest = data.get(size + 2..).unwrap_or_default();
    }
    out
}

/// Stream: `send` the match's bytes, then read until `expect` holds (or the
/// peer closes, or the limit). No match: connecting is the check.
async fn stream_exchange(s: &mut TcpStream, hc: &HealthCheck) -> Result<(), &'static str> {
    let Some(m) = &hc.matcher else {
        return Ok(());
    };
    let io = async {
        if let Some(b) = &m.send {
            s.write_all(b)
                .await
                .map_err(|_| "sending data to upstream")?;
        }
        if m.expect.is_none() {
            return Ok(());
        }
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = s
                .read(&mut chunk)
                .await
                .map_err(|_| "reading data from upstream")?;
            got.extend_from_slice(&chunk[..n]);
            if m.stream_ok(&got) {
                return Ok(());
            }
            if n == 0 || got.len() >= READ_MAX {
                return Err("checking response of upstream");
            }
        }
    };
    tokio::time::timeout(hc.read_timeout, io)
        .await
        .map_err(|_| "reading data from upstream")?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hc(fails: u32, passes: u32, mandatory: bool) -> HealthCheck {
        HealthCheck {
            fails,
            passes,
            mandatory,
            ..HealthCheck::default()
        }
    }

    #[test]
    fn fails_and_passes_in_a_row() {
        let l = PeerLive::default();
        let c = hc(2, 3, false);
        assert_eq!(apply(&l, true, &c, 10), HEALTHY);
        assert_eq!(apply(&l, false, &c, 20), HEALTHY, "one failure of two");
        assert_eq!(apply(&l, true, &c, 30), HEALTHY);
        assert_eq!(apply(&l, false, &c, 40), HEALTHY);
        assert_eq!(apply(&l, false, &c, 50), UNHEALTHY);
        assert_eq!(l.hc.unhealthy.load(Relaxed), 1);
        assert_eq!(apply(&l, true, &c, 60), UNHEALTHY);
        assert_eq!(apply(&l, true, &c, 70), UNHEALTHY);
        assert_eq!(apply(&l, true, &c, 80), HEALTHY);
        assert_eq!(l.hc.downtime.load(Relaxed), 30);
        assert_eq!(l.hc.checks.load(Relaxed), 8);
        assert_eq!(l.hc.fails.load(Relaxed), 3);
        assert_eq!(l.hc.last_passed.load(Relaxed), 1);
    }

    #[test]
    fn mandatory_first_check_decides() {
        let l = PeerLive::default();
        assert_eq!(apply(&l, false, &hc(3, 1, true), 10), UNHEALTHY);
        let l = PeerLive::default();
        assert_eq!(apply(&l, false, &hc(3, 1, false), 10), UNCHECKED);
    }

    #[test]
    fn dechunks() {
        assert_eq!(
            dechunk(b"2\r\nok\r\n3;x\r\n!!!\r\n0\r\n\r\n"),
            b"ok!!!".to_vec()
        );
    }
}
