//! UDP sessions of the stream proxy (`listen ... udp`), as nginx's: each
//! client address:port is a session; its first datagram picks a peer through
//! the attempt engine (balancers, zones, resolve, failures, health verdicts,
//! as TCP) and gets a connected socket to it; datagrams go both ways whole
//! until `proxy_responses`/`proxy_requests` say the session is done, nothing
//! moves for `proxy_timeout`, or the worker stops. An ICMP port unreachable
//! before any answer fails the peer and sends the first datagram on to the
//! next one, as nginx's `ngx_stream_proxy_next_upstream` does.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{Notify, watch};

use super::{Counted, Session, Shared};
use crate::conf::model::{ListenAddr, NextUpstream, PeerAddr, StreamServer, StreamTarget};
use crate::log::Level;
use crate::net::accept::{Listener, Phase};
use crate::upstream::attempt::{Attempts, Connector, Failure, Kind, Policy};
use crate::upstream::{Outcome, UpstreamRt};

/// The largest datagram taken or relayed (a UDP length field's limit).
const MAX_DATAGRAM: usize = 65535;

/// Datagrams a session keeps while its peer is being chosen (or the
/// upstream socket is full); more are dropped, as a full socket would.
const QUEUED_MAX: usize = 64;

thread_local! {
    /// Where a worker's sessions read their peers' datagrams: one buffer
    /// for all of them (a worker is one thread and each read is passed on
    /// before the next await), so a session costs no 64 KiB of its own.
    static REPLY: RefCell<Vec<u8>> = RefCell::new(vec![0; MAX_DATAGRAM]);
}

/// What the listener and a session share.
struct Link {
    state: Mutex<LinkState>,
    /// The listener queued a datagram or hit an error: the session looks.
    wake: Notify,
}

#[derive(Default)]
struct LinkState {
    /// The connected socket to the peer, once chosen.
    up: Option<Arc<UdpSocket>>,
    /// Client datagrams not yet sent to the peer.
    queued: VecDeque<Vec<u8>>,
    /// Datagrams and bytes from the client (nginx's `u->requests`,
    /// `s->received`).
    requests: u64,
    received: u64,
    /// Bytes the listener sent to the peer itself.
    sent: u64,
    /// When a datagram last moved (either way), for `proxy_timeout`.
    last: Option<Instant>,
    /// A send to the peer the listener made failed.
    send_error: Option<std::io::Error>,
    /// The session ended: its datagrams start a new one.
    closed: bool,
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A listener's sessions by client address.
type Table = Mutex<HashMap<SocketAddr, Arc<Link>>>;

fn lock(t: &Table) -> MutexGuard<'_, HashMap<SocketAddr, Arc<Link>>> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the datagrams of one `listen ... udp` socket in this worker and
/// hands each to its client's session, starting one for a new client.
pub(super) async fn serve(
    l: Listener,
    server: usize,
    shared: Arc<Shared>,
    phase: watch::Receiver<Phase>,
) {
    let Some(conf) = shared
        .cfg
        .stream
        .as_ref()
        .and_then(|st| st.servers.get(server))
    else {
        return;
    };
    let listen = l.addr.to_string();
    let bound = match l.addr {
        ListenAddr::Udp(a) if !a.ip().is_unspecified() && a.port() != 0 => Some(a),
        _ => None,
    };
    let sock = match UdpSocket::from_std(std::net::UdpSocket::from(l.fd)) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            crate::log!(
                Level::Alert,
                "cannot use listening socket {}: {}",
                listen,
                e
            );
            return;
        }
    };
    let local = bound.or_else(|| sock.local_addr().ok());
    let table: Arc<Table> = Arc::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut warned = false;
    let mut stop = phase.clone();
    loop {
        // A stopping worker takes no more datagrams: they stay queued in
        // the socket for the workers that go on.
        let got = tokio::select! {
            r = sock.recv_from(&mut buf) => r,
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() != Phase::Running {
                    return;
                }
                continue;
            }
        };
        let (n, from) = match got {
            Ok(r) => r,
            Err(e) => {
                crate::log!(
                    Level::Crit,
                    "recvmsg() failed ({})",
                    crate::log::errno_text(&e)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let data = &buf[..n];
        if deliver(&table, from, data, conf.proxy_requests) {
            continue;
        }
        // A new session takes a worker_connections slot, as nginx counts
        // every UDP session as a connection; none free drops the datagram.
        let Some(permit) = shared.slots.try_acquire() else {
            if !warned {
                warned = true;
                crate::log!(
                    Level::Alert,
                    "{} worker_connections are not enough",
                    shared.cfg.events.worker_connections
                );
            }
            continue;
        };
        let link = Arc::new(Link {
            state: Mutex::new(LinkState {
                requests: 1,
                received: n as u64,
                last: Some(Instant::now()),
                ..Default::default()
            }),
            wake: Notify::new(),
        });
        // proxy_requests 1: the next datagram is another session already.
        if conf.proxy_requests != 1 {
            lock(&table).insert(from, link.clone());
        }
        let start = Start {
            first: data.to_vec(),
            client: from,
            local,
            listen: listen.clone(),
            sock: sock.clone(),
            table: table.clone(),
        };
        let (shared2, phase2) = (shared.clone(), phase.clone());
        // Made in its box, as a TCP session's (`super::accept_loop`): the
        // task then holds a pointer, not a future tokio copies whole.
        tokio::spawn(crate::net::boxed::boxed(|| {
            session(start, link, server, shared2, phase2, permit)
        }));
    }
}

/// Passes a datagram to its client's session: sent on to the peer when it
/// is connected and nothing waits before it, else queued. False when the
/// client has no session. The `proxy_requests`th datagram unbinds the
/// session from the client.
fn deliver(table: &Table, from: SocketAddr, data: &[u8], requests: u32) -> bool {
    let mut t = lock(table);
    let Some(link) = t.get(&from).cloned() else {
        return false;
    };
    let mut st = link.lock();
    if st.closed {
        t.remove(&from);
        return false;
    }
    st.requests += 1;
    st.received += data.len() as u64;
    st.last = Some(Instant::now());
    if requests > 0 && st.requests >= u64::from(requests) {
        t.remove(&from);
    }
    drop(t);
    let sent = match (&st.up, st.queued.is_empty()) {
        (Some(up), true) => match up.try_send(data) {
            Ok(n) => {
                st.sent += n as u64;
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(e) => {
                st.send_error = Some(e);
                true
            }
        },
        _ => false,
    };
    if !sent && st.queued.len() < QUEUED_MAX {
        st.queued.push_back(data.to_vec());
    }
    drop(st);
    link.wake.notify_one();
    true
}

/// What a session starts with.
struct Start {
    first: Vec<u8>,
    client: SocketAddr,
    local: Option<SocketAddr>,
    listen: String,
    /// The listening socket: replies leave from it.
    sock: Arc<UdpSocket>,
    table: Arc<Table>,
}

async fn session(
    start: Start,
    link: Arc<Link>,
    server: usize,
    shared: Arc<Shared>,
    phase: watch::Receiver<Phase>,
    _permit: crate::net::slots::Slot,
) {
    let _guard = (shared.conns.enter(), Counted::new(&shared.stats));
    let Some(conf) = shared
        .cfg
        .stream
        .as_ref()
        .and_then(|st| st.servers.get(server))
    else {
        return;
    };
    let mut s = Session::new(
        &shared,
        Some(start.client),
        start.local,
        start.listen.clone(),
        true,
    );
    run(&start, &link, &mut s, conf, &shared, phase).await;
    // The client's next datagram starts a new session.
    {
        let mut t = lock(&start.table);
        link.lock().closed = true;
        if t.get(&start.client).is_some_and(|l| Arc::ptr_eq(l, &link)) {
            t.remove(&start.client);
        }
    }
    s.copied.ab = link.lock().received;
    super::end(&mut s, conf);
}

/// nginx's phases for a datagram session (no PROXY protocol, TLS or
/// preread on UDP): limit_conn, access, then `return` or the proxy.
async fn run(
    start: &Start,
    link: &Link,
    s: &mut Session,
    conf: &StreamServer,
    shared: &Shared,
    phase: watch::Receiver<Phase>,
) {
    if !super::preaccess(s, conf, shared) {
        s.status = 503;
        return;
    }
    if crate::conf::allow::allowed(&conf.access, s.remote.map(|a| a.ip())) == Some(false) {
        crate::log_conn!(
            Level::Error,
            s.number,
            "access forbidden by rule while initializing session{}",
            s.short_context()
        );
        s.status = 403;
        return;
    }
    let ups = match &conf.target {
        StreamTarget::Return(t) => {
            let text = s.eval(t);
            if start
                .sock
                .send_to(text.as_bytes(), start.client)
                .await
                .is_ok()
            {
                s.copied.ba = text.len() as u64;
            }
            return;
        }
        StreamTarget::Upstream(i) => shared.upstreams.get(*i).cloned(),
        StreamTarget::Dynamic(t) => super::dynamic(s, t, conf, shared).await,
    };
    if let Some(ups) = ups {
        proxy(start, link, s, conf, &ups, phase).await;
    }
}

/// Connected UDP sockets to peers for the attempt engine.
struct Connect;

impl Connector for Connect {
    type Conn = UdpSocket;

    fn cached(&self, _: &PeerAddr) -> Option<UdpSocket> {
        None
    }

    // Not an `async fn`: the future must not borrow `self` (the trait's
    // `'static`, for races run in tasks of their own).
    #[allow(clippy::manual_async_fn)]
    fn open(
        &self,
        addr: PeerAddr,
    ) -> impl std::future::Future<Output = Result<UdpSocket, Failure>> + Send + 'static {
        async move {
            let PeerAddr::Inet(to) = addr else {
                return Err(Failure::upstream(
                    Kind::Error,
                    format!("connect() to {addr} failed (UDP to a unix socket is not supported)"),
                ));
            };
            let any: SocketAddr = if to.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let failed = |e| Failure::connect(&addr, crate::net::stream::ConnectError::Failed(e));
            let s = UdpSocket::bind(any).await.map_err(failed)?;
            s.connect(to).await.map_err(failed)?;
            Ok(s)
        }
    }
}

/// How a relay with one peer ended.
enum Relayed {
    /// The session is over (status set, logged).
    Done,
    /// The peer refused (ICMP port unreachable) before it answered: a
    /// failed attempt. The error log's words.
    Refused(String),
}

/// Picks a peer, relays, and on a refusal before any answer goes on to the
/// next peer (as `proxy_next_upstream` allows) with the first datagram.
async fn proxy(
    start: &Start,
    link: &Link,
    s: &mut Session,
    conf: &StreamServer,
    ups: &Arc<UpstreamRt>,
    mut phase: watch::Receiver<Phase>,
) {
    let policy = Policy {
        mask: NextUpstream(if conf.proxy_next_upstream {
            NextUpstream::ERROR | NextUpstream::TIMEOUT
        } else {
            0
        }),
        tries: conf.proxy_next_upstream_tries,
        timeout: conf.proxy_next_upstream_timeout,
        race: None,
        non_idempotent: false,
    };
    let mut attempts = Attempts::new(ups, policy, s).await;
    loop {
        let c = match attempts.connect(&Connect, s).await {
            Ok(c) => c,
            Err(status) => {
                s.status = status;
                return;
            }
        };
        let took = c.began.elapsed();
        s.attempts.push(super::Try {
            peer: c.name.to_string(),
            connect: Some(took),
            took,
        });
        s.connected_at = Some(Instant::now());
        let up = Arc::new(c.conn);
        let sent_before = s.copied.ab;
        let r = relay(start, link, s, conf, &up, &c.name, &mut phase).await;
        link.lock().up = None;
        let mut held = c.held;
        match r {
            Relayed::Done => {
                held.account(s.copied.ab - sent_before, s.copied.ba);
                held.finish(Outcome::Ok);
                return;
            }
            Relayed::Refused(text) => {
                let ctx = context(s, link, &c.name);
                crate::log_conn!(Level::Error, s.number, "{}{}", text, ctx);
                held.done();
                attempts.release(c.id, Outcome::Failed, || ctx.clone());
                if !attempts.retry(NextUpstream::ERROR, false) {
                    s.status = 502;
                    return;
                }
            }
        }
    }
}

/// nginx's context of a proxied UDP session's error lines.
fn context(s: &Session, link: &Link, upstream: &str) -> String {
    format!(
        ", udp client: {}, server: {}, upstream: \"{}\", {}",
        s.client(),
        s.listen,
        upstream,
        counts(s, link)
    )
}

/// nginx's byte counts of a UDP session: from/to client, from/to upstream.
fn counts(s: &Session, link: &Link) -> String {
    let st = link.lock();
    format!(
        "bytes from/to client:{}/{}, bytes from/to upstream:{}/{}",
        st.received,
        s.copied.ba,
        s.copied.ba,
        s.copied.ab + st.sent
    )
}

/// Sends the first datagram and what is queued, then relays until the
/// session is done. `s.copied.ab` counts bytes sent to the peer (by this
/// task; the listener's direct sends are counted in `received`), `ba` the
/// bytes of its answers, all passed to the client.
async fn relay(
    start: &Start,
    link: &Link,
    s: &mut Session,
    conf: &StreamServer,
    up: &Arc<UdpSocket>,
    name: &str,
    phase: &mut watch::Receiver<Phase>,
) -> Relayed {
    let refused = |e: &std::io::Error, what: &str, answered: bool| {
        (e.kind() == std::io::ErrorKind::ConnectionRefused && !answered).then(|| {
            format!(
                "{what}() failed ({}) while proxying and {} upstream",
                crate::log::errno_text(e),
                if what == "recv" {
                    "reading from"
                } else {
                    "sending to"
                }
            )
        })
    };
    match up.send(&start.first).await {
        Ok(n) => s.copied.ab += n as u64,
        Err(e) => {
            if let Some(t) = refused(&e, "send", false) {
                return Relayed::Refused(t);
            }
            return fail(s, link, name, &e, "send", "sending to");
        }
    }
    link.lock().up = Some(up.clone());
    let mut responses: u64 = 0;
    let mut answered = false;
    // Gracefully stopping: the session ends once its answers came.
    let mut stopping = false;
    loop {
        // What waited for the peer goes first, in order.
        loop {
            let Some(d) = link.lock().queued.pop_front() else {
                break;
            };
            match up.send(&d).await {
                Ok(n) => s.copied.ab += n as u64,
                Err(e) => {
                    if let Some(t) = refused(&e, "send", answered) {
                        return Relayed::Refused(t);
                    }
                    return fail(s, link, name, &e, "send", "sending to");
                }
            }
        }
        let (requests, last, error) = {
            let mut st = link.lock();
            (st.requests, st.last, st.send_error.take())
        };
        if let Some(e) = error {
            if let Some(t) = refused(&e, "send", answered) {
                return Relayed::Refused(t);
            }
            return fail(s, link, name, &e, "send", "sending to");
        }
        if done(conf, requests, responses) || (stopping && waited_enough(conf, requests, responses))
        {
            crate::log_conn!(
                Level::Info,
                s.number,
                "udp done, packets from/to client:{}/{}, {}",
                requests,
                responses,
                counts(s, link)
            );
            return Relayed::Done;
        }
        let deadline = last.unwrap_or_else(Instant::now) + conf.proxy_timeout;
        tokio::select! {
            // A connected socket's ICMP port unreachable is an error
            // readiness (SO_ERROR), not a readable one.
            r = up.ready(Interest::READABLE | Interest::ERROR) => {
                let ready = match r {
                    Ok(r) => r,
                    Err(e) => return fail(s, link, name, &e, "recv", "reading from"),
                };
                if ready.is_error() {
                    let pending = up.take_error().ok().flatten();
                    // Cleared, so that the next wait sleeps.
                    let _ = up.try_io(Interest::ERROR, || {
                        Err::<(), _>(std::io::Error::from(std::io::ErrorKind::WouldBlock))
                    });
                    if let Some(e) = pending {
                        if let Some(t) = refused(&e, "recv", answered) {
                            return Relayed::Refused(t);
                        }
                        return fail(s, link, name, &e, "recv", "reading from");
                    }
                }
                if ready.is_readable() {
                    match pass_back(up, &start.sock, start.client).await {
                        Ok(Some(n)) => {
                            responses += 1;
                            answered = true;
                            s.copied.ba += n as u64;
                            s.copied.first_ba.get_or_insert_with(Instant::now);
                            link.lock().last = Some(Instant::now());
                        }
                        Ok(None) => {}
                        Err(e) => {
                            if let Some(t) = refused(&e, "recv", answered) {
                                return Relayed::Refused(t);
                            }
                            return fail(s, link, name, &e, "recv", "reading from");
                        }
                    }
                }
            }
            () = link.wake.notified() => {}
            () = tokio::time::sleep_until(deadline.into()) => {
                let last = link.lock().last.unwrap_or_else(Instant::now);
                if last + conf.proxy_timeout <= Instant::now() {
                    timed_out(s, link, conf, name, requests, responses);
                    return Relayed::Done;
                }
            }
            r = phase.changed(), if !stopping => {
                let now = if r.is_err() { Phase::Fast } else { *phase.borrow() };
                // A graceful stop lets a session that still expects answers
                // have them (bounded by proxy_timeout and
                // worker_shutdown_timeout), so that a reload loses no
                // question in flight; the others end now, as nginx's.
                let waiting = conf
                    .proxy_responses
                    .is_some_and(|r| responses < u64::from(r) * requests);
                match now {
                    Phase::Running => {}
                    Phase::Graceful if waiting => stopping = true,
                    _ => {
                        crate::log_conn!(Level::Info, s.number, "disconnected on shutdown");
                        return Relayed::Done;
                    }
                }
            }
        }
    }
}

/// nginx's end of a UDP session by counts: `proxy_requests` datagrams came
/// (when set) and `proxy_responses` answers per datagram went back.
fn done(conf: &StreamServer, requests: u64, responses: u64) -> bool {
    if conf.proxy_requests > 0 && requests < u64::from(conf.proxy_requests) {
        return false;
    }
    conf.proxy_responses
        .is_some_and(|r| responses >= u64::from(r) * requests)
}

/// The answers expected so far came (a graceful stop's end).
fn waited_enough(conf: &StreamServer, requests: u64, responses: u64) -> bool {
    conf.proxy_responses
        .is_none_or(|r| responses >= u64::from(r) * requests)
}

/// `proxy_timeout` passed with nothing moving: a session that got the
/// answers it expected (or expected no count) ends well, as nginx's
/// "udp timed out"; one still waiting ends with 502.
fn timed_out(
    s: &mut Session,
    link: &Link,
    conf: &StreamServer,
    name: &str,
    requests: u64,
    responses: u64,
) {
    let expected = conf
        .proxy_responses
        .is_none_or(|r| responses >= u64::from(r) * requests);
    if expected {
        crate::log_conn!(
            Level::Info,
            s.number,
            "udp timed out, packets from/to client:{}/{}, {}",
            requests,
            responses,
            counts(s, link)
        );
    } else {
        crate::log_conn!(
            Level::Error,
            s.number,
            "upstream timed out (110: Connection timed out) while proxying connection{}",
            context(s, link, name)
        );
        s.status = 502;
    }
}

/// An error on the peer's socket after it answered: logged, 502.
fn fail(
    s: &mut Session,
    link: &Link,
    name: &str,
    e: &std::io::Error,
    call: &str,
    action: &str,
) -> Relayed {
    crate::log_conn!(
        Level::Error,
        s.number,
        "{}() failed ({}) while proxying and {} upstream{}",
        call,
        crate::log::errno_text(e),
        action,
        context(s, link, name)
    );
    s.status = 502;
    Relayed::Done
}

/// Reads one datagram of the peer (into the worker's shared buffer) and
/// sends it to the client from the listening socket: its size, None when
/// nothing was there after all. A full socket makes a copy to wait with.
async fn pass_back(
    up: &UdpSocket,
    sock: &UdpSocket,
    client: SocketAddr,
) -> std::io::Result<Option<usize>> {
    let waiting = REPLY.with(|b| {
        let mut b = b.borrow_mut();
        let n = match up.try_recv(&mut b) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        match sock.try_send_to(&b[..n], client) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                Ok(Some((n, Some(b[..n].to_vec()))))
            }
            // A client that cannot be sent to loses the datagram, as UDP.
            _ => Ok(Some((n, None))),
        }
    })?;
    match waiting {
        None => Ok(None),
        Some((n, None)) => Ok(Some(n)),
        Some((n, Some(copy))) => {
            let _ = sock.send_to(&copy, client).await;
            Ok(Some(n))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(from: SocketAddr) -> (Table, Arc<Link>) {
        let link = Arc::new(Link {
            state: Mutex::new(LinkState {
                requests: 1,
                ..Default::default()
            }),
            wake: Notify::new(),
        });
        let t: Table = Mutex::default();
        lock(&t).insert(from, link.clone());
        (t, link)
    }

    #[test]
    fn datagrams_find_their_session_and_unbind_at_proxy_requests() {
        let a: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        let (t, link) = table_with(a);
        assert!(!deliver(&t, b, b"x", 0), "another port is another session");
        assert!(deliver(&t, a, b"hello", 3));
        assert_eq!(link.lock().queued.len(), 1, "queued until a peer is chosen");
        let st = link.lock();
        assert_eq!((st.requests, st.received), (2, 5));
        drop(st);
        assert!(deliver(&t, a, b"", 3), "an empty datagram is one too");
        assert!(!deliver(&t, a, b"x", 3), "the third unbound the session");
        assert_eq!(link.lock().requests, 3);
    }

    #[test]
    fn a_closed_session_is_left_and_the_queue_is_bounded() {
        let a: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let (t, link) = table_with(a);
        for _ in 0..(QUEUED_MAX + 10) {
            assert!(deliver(&t, a, &[0u8; 512], 0));
        }
        assert_eq!(link.lock().queued.len(), QUEUED_MAX);
        link.lock().closed = true;
        assert!(!deliver(&t, a, b"x", 0));
        assert!(lock(&t).is_empty());
    }

    #[test]
    fn done_follows_nginx_counts() {
        let (c, _) = crate::conf::testutil::try_build(
            "events {} stream { server { listen 127.0.0.1:9000 udp; proxy_pass 127.0.0.1:1; \
             proxy_responses 1; } server { listen 127.0.0.1:9001 udp; proxy_pass 127.0.0.1:1; \
             proxy_requests 2; proxy_responses 0; } \
             server { listen 127.0.0.1:9002 udp; proxy_pass 127.0.0.1:1; } }",
        )
        .expect("config");
        let st = c.stream.expect("stream");
        let (one, two, none) = (&st.servers[0], &st.servers[1], &st.servers[2]);
        assert!(!done(one, 1, 0) && done(one, 1, 1) && !done(one, 2, 1));
        assert!(!done(two, 1, 0), "waits for the second datagram");
        assert!(done(two, 2, 0));
        assert!(!done(none, 5, 5), "no count: only the timeout ends it");
    }

    #[tokio::test]
    async fn pass_back_keeps_datagram_boundaries() {
        let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let up = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        up.connect(peer.local_addr().unwrap()).await.unwrap();
        let listener = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let big = vec![7u8; 60000];
        peer.send_to(b"one", up.local_addr().unwrap())
            .await
            .unwrap();
        peer.send_to(&big, up.local_addr().unwrap()).await.unwrap();
        let to = client.local_addr().unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            up.readable().await.unwrap();
            if let Some(n) = pass_back(&up, &listener, to).await.unwrap() {
                got.push(n);
            }
        }
        assert_eq!(got, vec![3, 60000]);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        assert_eq!(client.recv(&mut buf).await.unwrap(), 3);
        assert_eq!(client.recv(&mut buf).await.unwrap(), 60000);
    }
}
