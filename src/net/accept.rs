//! What the HTTP server and the stream proxy share to take connections: the
//! listening sockets a worker is given, the worker's phase (running, stopping
//! gracefully, stopping now), accepting with a back-off when the host is
//! short of descriptors, and the graceful drain. No protocol.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use super::slots::{Slot, Slots};
use super::stream::Stream;
use super::track::Tracker;
use crate::conf::model::ListenAddr;
use crate::log::Level;

/// A listening socket given to this worker, with the address it was bound for.
pub struct Listener {
    pub addr: ListenAddr,
    pub fd: OwnedFd,
    /// Every worker accepts on this socket (not a `reuseport` one of its
    /// own): `accept_balance` may take this worker out of it.
    pub shared: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// QUIT: finish what is in flight, then stop.
    Graceful,
    /// TERM/INT: stop now.
    Fast,
}

/// Waits while the worker runs (the phase is `Running`).
pub async fn running(phase: &mut watch::Receiver<Phase>) {
    while *phase.borrow_and_update() == Phase::Running {
        if phase.changed().await.is_err() {
            break;
        }
    }
}

/// Once the worker stops: stops accepting (the listeners close with their
/// tasks) and, on a graceful stop, waits for the connections (`drain`).
pub async fn wind_down(
    accepts: &mut tokio::task::JoinSet<()>,
    conns: &Tracker,
    phase: &mut watch::Receiver<Phase>,
    limit: Option<Duration>,
) {
    accepts.shutdown().await;
    if *phase.borrow() == Phase::Fast {
        return;
    }
    drain(conns, phase, limit).await;
}

/// A graceful stop: waits until no connection is `active` (each end
/// notifies `drained`), a fast stop, or `limit` (worker_shutdown_timeout),
/// which is logged. Shared by the HTTP server and the stream proxy.
async fn drain(conns: &Tracker, phase: &mut watch::Receiver<Phase>, limit: Option<Duration>) {
    let wait = async {
        loop {
            tokio::select! {
                () = conns.drained() => return,
                _ = phase.changed() => {
                    if *phase.borrow() == Phase::Fast {
                        return;
                    }
                }
            }
        }
    };
    match limit {
        Some(t) => {
            if tokio::time::timeout(t, wait).await.is_err() {
                crate::log!(
                    Level::Notice,
                    "worker_shutdown_timeout: closing {} connection(s)",
                    conns.active()
                );
            }
        }
        None => wait.await,
    }
}

/// An accepted connection: the stream, the peer (TCP) and the local address.
pub type Accepted = (
    Stream,
    Option<std::net::SocketAddr>,
    Option<std::net::SocketAddr>,
);

/// Connections taken per report of a listening socket when `multi_accept`
/// is not set (HAProxy's `tune.maxaccept` default). A turn of the event
/// loop for each (nginx's default) made about a seventh fewer new stream
/// sessions a second on two cores (`wrk -c32`, a connection a request).
const BATCH: u32 = 4;

/// A listening socket in the worker's runtime, accepting as nginx's: it is
/// registered exclusive and level-triggered (`exclusive`), so a new
/// connection wakes one waiting worker, and a worker takes up to `BATCH`
/// connections each time its event loop reports the socket (one with
/// nginx's `multi_accept off`, its default), not all that are queued: while
/// it serves the ones it took, the next arrivals wake another worker. With
/// `multi_accept on` it takes every queued one first. Under light load
/// connections gather on one worker; under a burst they spread, as nginx's
/// do.
///
/// A level-triggered socket with connections queued would wake the worker
/// on every turn while it does not accept (waiting for a
/// `worker_connections` slot, or backing off after a failed accept), so it
/// leaves the epoll set for that time (two `epoll_ctl` calls, `exclusive`);
/// the other workers take the arrivals. A worker over its share of the
/// connections leaves a shared listener's set the same way
/// (`accept_balance`, `keep_share`).
pub struct Sock {
    io: AsyncFd<socket2::Socket>,
    /// The exclusive, level-triggered registration: one accept per report.
    /// None if it could not be made: the runtime's own (edge-triggered)
    /// stays, and the queue is taken until it is empty, or connections
    /// would wait for the next arrival's edge.
    excl: Option<super::exclusive::Exclusive>,
    /// Out of the epoll set (`excl` only).
    paused: bool,
    /// It could not be put back in the runtime: this worker stops
    /// accepting on it.
    dead: bool,
    /// How many connections to take per report (`multi_accept`): 1 when
    /// off, all that are queued when on, `BATCH` when not set.
    batch: u32,
    /// Taken since the last report.
    taken: u32,
    /// Every worker's socket (not `reuseport`): `accept_balance` applies.
    shared: bool,
    kind: Kind,
    addr: ListenAddr,
}

/// A TCP listener bound to a specific address has it: its connections'
/// local address, known without asking the system (nginx does the same).
#[derive(Clone, Copy)]
enum Kind {
    Tcp(Option<std::net::SocketAddr>),
    Unix,
}

impl Sock {
    /// The runtime's socket for an inherited listener (`[alert]` if
    /// unusable), accepting as the events block says (`multi_accept`).
    pub fn adopt(l: Listener, events: &crate::conf::model::Events) -> Option<Sock> {
        let kind = match &l.addr {
            ListenAddr::Inet(a) => Ok(Kind::Tcp(
                (!a.ip().is_unspecified() && a.port() != 0).then_some(*a),
            )),
            ListenAddr::Unix(_) => Ok(Kind::Unix),
            // Datagram sockets are `stream::udp`'s, never accepted on.
            ListenAddr::Udp(_) => Err(std::io::Error::from(std::io::ErrorKind::Unsupported)),
        };
        let sock = socket2::Socket::from(l.fd);
        let registered = kind.and_then(|kind| {
            sock.set_nonblocking(true)?;
            let (io, excl) = exclusive(register(sock)?, &l.addr)?;
            Ok(Sock {
                io,
                excl,
                paused: false,
                dead: false,
                batch: match events.multi_accept {
                    None => BATCH,
                    Some(false) => 1,
                    Some(true) => u32::MAX,
                },
                taken: 0,
                shared: l.shared,
                kind,
                addr: l.addr.clone(),
            })
        });
        registered.map_err(|e| unusable(&l.addr, &e)).ok()
    }

    /// Out of the epoll set while this worker does not accept. Nothing to
    /// do for an edge-triggered registration: it reports no more edges
    /// than arrivals.
    fn pause(&mut self) {
        let Some(x) = &self.excl else {
            return;
        };
        if self.paused {
            return;
        }
        match x.pause(self.io.as_fd()) {
            Ok(()) => self.paused = true,
            Err(e) => crate::log!(
                Level::Alert,
                "epoll_ctl(EPOLL_CTL_DEL) on listening socket {} failed ({})",
                self.addr,
                e
            ),
        }
    }

    /// Back in the epoll set. If it cannot be put back as it was, the
    /// runtime registers it afresh (edge-triggered, every worker woken).
    fn resume(&mut self) -> std::io::Result<()> {
        if !self.paused {
            return Ok(());
        }
        let Some(x) = &self.excl else {
            return Ok(());
        };
        self.paused = false;
        if let Err(e) = x.resume(self.io.as_fd()) {
            crate::log!(
                Level::Alert,
                "epoll_ctl(EPOLL_CTL_ADD) on listening socket {} failed ({}), registered again",
                self.addr,
                e
            );
            self.excl = None;
            match self.io.get_ref().try_clone().and_then(register) {
                Ok(io) => self.io = io,
                Err(e) => {
                    self.dead = true;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The next connection and its `worker_connections` slot, taken once it
    /// is accepted (a listener waiting for connections holds none). A
    /// failed accept (EMFILE and friends: the host is short of something)
    /// is logged and tried again after a back-off. None once no slot will
    /// be given, or once the socket cannot be registered again.
    pub async fn accept(&mut self, slots: &Slots) -> Option<(Accepted, Slot)> {
        loop {
            if let Some(b) = slots.balance() {
                self.keep_share(b).await;
            }
            match self.accept_once().await {
                Ok(a) => {
                    if let Some(permit) = slots.try_acquire() {
                        return Some((a, permit));
                    }
                    self.pause();
                    return slots.acquire().await.map(|permit| (a, permit));
                }
                Err(e) if self.dead => {
                    unusable(&self.addr, &e);
                    return None;
                }
                Err(e) => {
                    crate::log!(
                        Level::Crit,
                        "accept() failed ({})",
                        crate::log::errno_text(&e)
                    );
                    self.pause();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// `accept_balance`: while this worker holds more than its share of
    /// the workers' connections, out of a shared listener's epoll set (the
    /// next arrivals wake the others), looking again when it is called back
    /// (another worker's accept, a close of its own) and every tick, until
    /// it is within half the margin, or until a connection has waited at
    /// two ticks in a row (`balance`). The caller's `accept_once` puts it
    /// back.
    async fn keep_share(&mut self, b: &super::balance::Worker) {
        use super::balance::{Stand, TICK};
        if !self.shared || self.excl.is_none() || b.stand() != Stand::Over || !b.go_out() {
            return;
        }
        /// Counts the listener back in (`come_back`) however the wait ends
        /// (the worker stopping drops it).
        struct Out<'a>(&'a super::balance::Worker);
        impl Drop for Out<'_> {
            fn drop(&mut self) {
                self.0.come_back();
            }
        }
        let _out = Out(b);
        self.pause();
        if !self.paused {
            // Still in the set (logged): waiting would only delay.
            return;
        }
        crate::log!(
            Level::Debug,
            "accept_balance: out of listening socket {} holding {} connections",
            self.addr,
            b.held()
        );
        let mut waiting = false;
        let tick = crate::net::clock::sleep(TICK);
        tokio::pin!(tick);
        let why = loop {
            let ticked = tokio::select! {
                _ = &mut tick => true,
                _ = b.called_back() => false,
            };
            if b.stand() == Stand::Within {
                break "within its share";
            }
            if ticked {
                let now = self.pending();
                if now && waiting {
                    break "connections waiting";
                }
                waiting = now;
                tick.as_mut().reset(crate::net::clock::deadline(TICK));
            }
        };
        crate::log!(
            Level::Debug,
            "accept_balance: back in listening socket {} holding {} connections ({})",
            self.addr,
            b.held(),
            why
        );
    }

    /// Whether a connection waits on the socket now (a `poll` that does not
    /// block).
    fn pending(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(self.io.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
    }

    async fn accept_once(&mut self) -> std::io::Result<Accepted> {
        self.resume()?;
        let flags = nix::libc::SOCK_NONBLOCK | nix::libc::SOCK_CLOEXEC;
        let (sock, peer) = loop {
            let mut ready = self.io.readable().await?;
            match ready.get_inner().accept4(flags) {
                Ok(got) => {
                    self.taken = self.taken.saturating_add(1);
                    if self.excl.is_some() && self.taken >= self.batch {
                        // The next waits for the event loop's next report.
                        ready.clear_ready();
                        self.taken = 0;
                    }
                    break got;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    ready.clear_ready();
                    self.taken = 0;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        match self.kind {
            Kind::Tcp(bound) => {
                let s = tokio::net::TcpStream::from_std(std::net::TcpStream::from(sock))?;
                let local = bound.or_else(|| s.local_addr().ok());
                let _ = s.set_nodelay(true);
                Ok((Stream::Tcp(s), peer.as_socket(), local))
            }
            Kind::Unix => {
                let s = std::os::unix::net::UnixStream::from(sock);
                Ok((
                    Stream::Unix(tokio::net::UnixStream::from_std(s)?),
                    None,
                    None,
                ))
            }
        }
    }
}

/// The `[alert]` for a listening socket this worker cannot accept on.
fn unusable(addr: &ListenAddr, e: &std::io::Error) {
    crate::log!(Level::Alert, "cannot use listening socket {}: {}", addr, e);
}

/// The listener in the runtime (read interest; the runtime registers it
/// edge-triggered).
#[allow(unsafe_code)]
fn register(sock: socket2::Socket) -> std::io::Result<AsyncFd<socket2::Socket>> {
    // SAFETY: the `AsyncFd` owns the socket (a `socket2::Socket` owns its
    // descriptor), so the descriptor stays open and the same while it is
    // registered, and `as_raw_fd` always returns it.
    unsafe { AsyncFd::register_with_interest(sock, tokio::io::Interest::READABLE) }
        .map_err(Into::into)
}

/// Its registration made exclusive and level-triggered, if it can be. If
/// the registration was deleted and could not be put back, the runtime
/// registers the socket afresh.
fn exclusive(
    io: AsyncFd<socket2::Socket>,
    addr: &ListenAddr,
) -> std::io::Result<(
    AsyncFd<socket2::Socket>,
    Option<super::exclusive::Exclusive>,
)> {
    use super::exclusive::{Exclusive, Unchanged};
    match Exclusive::make(io.as_fd()) {
        Ok(x) => Ok((io, Some(x))),
        Err(e @ Unchanged::Lost(_)) => {
            crate::log!(
                Level::Alert,
                "listening socket {}: {}, registered again",
                addr,
                e
            );
            Ok((register(io.into_inner())?, None))
        }
        Err(e) => {
            crate::log!(Level::Debug, "listening socket {}: {}", addr, e);
            Ok((io, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::model::Events;

    /// A listener on loopback with `queued` connections waiting, adopted
    /// as a worker adopts one with this `multi_accept`, and the clients.
    fn queued(multi_accept: Option<bool>, queued: usize) -> (Sock, Vec<std::net::TcpStream>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let clients = (0..queued)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let events = Events {
            worker_connections: 64,
            multi_accept,
            accept_balance: None,
        };
        let listener = Listener {
            addr: ListenAddr::Inet(addr),
            fd: OwnedFd::from(l),
            shared: false,
        };
        (Sock::adopt(listener, &events).unwrap(), clients)
    }

    /// How many connections each accept had taken since the last report
    /// of the socket, over `n` accepts.
    async fn taken(sock: &mut Sock, n: usize) -> Vec<u32> {
        let mut seen = Vec::new();
        for _ in 0..n {
            sock.accept_once().await.unwrap();
            seen.push(sock.taken);
        }
        seen
    }

    #[tokio::test]
    async fn unset_multi_accept_takes_four_per_report() {
        let (mut sock, _clients) = queued(None, 6);
        assert!(sock.excl.is_some(), "registered exclusive");
        // After the fourth the readiness is cleared (0): the fifth waits
        // for the event loop's next report.
        assert_eq!(taken(&mut sock, 6).await, [1, 2, 3, 0, 1, 2]);
    }

    #[tokio::test]
    async fn multi_accept_off_takes_one_per_report_and_on_all() {
        let (mut sock, _clients) = queued(Some(false), 3);
        assert_eq!(taken(&mut sock, 3).await, [0, 0, 0]);
        let (mut sock, _clients) = queued(Some(true), 5);
        assert_eq!(taken(&mut sock, 5).await, [1, 2, 3, 4, 5]);
    }
}
