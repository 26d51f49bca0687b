//! What the HTTP server and the stream proxy share to take connections: the
//! listening sockets a worker is given, the worker's phase (running, stopping
//! gracefully, stopping now), accepting with a back-off when the host is
//! short of descriptors, and the graceful drain. No protocol.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, watch};

use super::slots::Slots;
use super::stream::Stream;
use super::track::Tracker;
use crate::conf::model::ListenAddr;
use crate::log::Level;

/// A listening socket given to this worker, with the address it was bound for.
pub struct Listener {
    pub addr: ListenAddr,
    pub fd: OwnedFd,
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

/// A listening socket in the worker's runtime. A TCP one bound to a
/// specific address has it: its connections' local address, known without
/// asking the system (nginx does the same).
pub enum Sock {
    Tcp(tokio::net::TcpListener, Option<std::net::SocketAddr>),
    Unix(tokio::net::UnixListener),
}

impl Sock {
    /// The runtime's socket for an inherited listener (`[alert]` if unusable).
    pub fn adopt(l: Listener) -> Option<Sock> {
        let sock = match &l.addr {
            ListenAddr::Inet(a) => {
                let local = (!a.ip().is_unspecified() && a.port() != 0).then_some(*a);
                tokio::net::TcpListener::from_std(std::net::TcpListener::from(l.fd))
                    .map(|t| Sock::Tcp(t, local))
            }
            ListenAddr::Unix(_) => {
                tokio::net::UnixListener::from_std(std::os::unix::net::UnixListener::from(l.fd))
                    .map(Sock::Unix)
            }
            // Datagram sockets are `stream::udp`'s, never accepted on.
            ListenAddr::Udp(_) => Err(std::io::Error::from(std::io::ErrorKind::Unsupported)),
        };
        match sock {
            Ok(s) => {
                // One worker woken per new connection, as nginx's listeners.
                let fd = match &s {
                    Sock::Tcp(t, _) => t.as_fd(),
                    Sock::Unix(u) => u.as_fd(),
                };
                if let Err(e) = super::exclusive::make_exclusive(fd) {
                    // Lost: the registration was deleted and not put back.
                    let level = match e {
                        super::exclusive::Unchanged::Lost(_) => Level::Alert,
                        _ => Level::Debug,
                    };
                    crate::log!(level, "listening socket {}: {}", l.addr, e);
                }
                Some(s)
            }
            Err(e) => {
                crate::log!(
                    Level::Alert,
                    "cannot use listening socket {}: {}",
                    l.addr,
                    e
                );
                None
            }
        }
    }

    /// The next connection and its `worker_connections` slot, taken once it
    /// is accepted (a listener waiting for connections holds none). A
    /// failed accept (EMFILE and friends: the host is short of something)
    /// is logged and tried again after a back-off. None once no slot will
    /// be given.
    pub async fn accept(&self, slots: &Slots) -> Option<(Accepted, OwnedSemaphorePermit)> {
        loop {
            match self.accept_once().await {
                Ok(a) => return slots.acquire().await.map(|permit| (a, permit)),
                Err(e) => {
                    crate::log!(
                        Level::Crit,
                        "accept() failed ({})",
                        crate::log::errno_text(&e)
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    async fn accept_once(&self) -> std::io::Result<Accepted> {
        match self {
            Sock::Tcp(t, bound) => t.accept().await.map(|(s, peer)| {
                let local = bound.or_else(|| s.local_addr().ok());
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), Some(peer), local)
            }),
            Sock::Unix(u) => u.accept().await.map(|(s, _)| (Stream::Unix(s), None, None)),
        }
    }
}
