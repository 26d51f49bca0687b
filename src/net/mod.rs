//! Listening sockets: bound by the master (non-blocking, `SO_REUSEADDR`, IPv6
//! sockets `IPV6_V6ONLY`), inherited by workers across `fork`. With `reuseport`
//! one socket per worker slot. Where a wildcard address shares a port with
//! specific ones, only the wildcard is bound and servers are told apart by
//! the connection's local address, as nginx does.

pub mod accept;
pub mod balance;
pub mod boxed;
pub mod clock;
pub mod copy;
pub mod exclusive;
pub mod idle;
pub mod limit;
pub mod park;
pub mod preread;
pub mod proxy_protocol;
pub mod rate;
pub mod slots;
pub mod stats;
pub mod stream;
pub mod tls;
pub mod tls_cache;
pub mod tls_client;
pub mod tls_crypto;
pub mod tls_tickets;
pub mod tls_verify;
pub mod track;
pub mod turn;
pub mod vars;

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use socket2::{Domain, SockAddr, Socket, Type};

use crate::conf::model::{Listen, ListenAddr};

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("socket() {addr} failed ({errno})")]
    Socket { addr: String, errno: String },
    #[error("bind() to {addr} failed ({errno})")]
    Bind {
        addr: String,
        errno: String,
        /// The address is in use (worth trying again shortly, as nginx does).
        busy: bool,
    },
    #[error("still could not bind()")]
    StillBusy,
    #[error("listen() to {addr}, backlog {backlog} failed ({errno})")]
    Listen {
        addr: String,
        backlog: i32,
        errno: String,
    },
    #[error("setsockopt({opt}) {addr} failed ({errno})")]
    Option {
        opt: &'static str,
        addr: String,
        errno: String,
    },
}

fn errno(e: &std::io::Error) -> String {
    crate::log::errno_text(e)
}

/// One bound address: one socket, or one per worker slot with `reuseport`.
#[derive(Debug)]
pub struct Bound {
    pub addr: ListenAddr,
    pub reuseport: bool,
    pub backlog: i32,
    pub sockets: Vec<Socket>,
}

impl Bound {
    /// The socket worker `slot` accepts on.
    pub fn socket_for(&self, slot: usize) -> &Socket {
        if self.reuseport {
            &self.sockets[slot % self.sockets.len()]
        } else {
            &self.sockets[0]
        }
    }

    pub fn try_clone(&self) -> std::io::Result<Bound> {
        Ok(Bound {
            addr: self.addr.clone(),
            reuseport: self.reuseport,
            backlog: self.backlog,
            sockets: self
                .sockets
                .iter()
                .map(|s| s.try_clone())
                .collect::<Result<_, _>>()?,
        })
    }
}

/// A listening socket's options besides `reuseport`: `backlog=`, `rcvbuf=`,
/// `sndbuf=` (the first `listen` of an address gives them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockOpts {
    pub backlog: i32,
    pub sock: crate::conf::listen_opts::SockParams,
}

/// What to bind: the distinct addresses of all `listen` directives, with an
/// address covered by a wildcard on its port left to the wildcard.
pub fn plan(listens: &[&Listen]) -> Vec<(ListenAddr, bool, SockOpts)> {
    let mut out: Vec<(ListenAddr, bool, SockOpts)> = Vec::new();
    for l in listens {
        if out.iter().any(|(a, ..)| *a == l.addr) {
            if l.reuseport {
                if let Some(e) = out.iter_mut().find(|(a, ..)| *a == l.addr) {
                    e.1 = true;
                }
            }
            continue;
        }
        let opts = SockOpts {
            backlog: l.backlog,
            sock: l.sock,
        };
        out.push((l.addr.clone(), l.reuseport, opts));
    }
    let wildcard_covers = |a: &SocketAddr, all: &[(ListenAddr, bool, SockOpts)]| {
        !a.ip().is_unspecified()
            && all.iter().any(|(w, ..)| match w {
                ListenAddr::Inet(w) => {
                    w.ip().is_unspecified() && w.port() == a.port() && w.is_ipv4() == a.is_ipv4()
                }
                ListenAddr::Unix(_) | ListenAddr::Udp(_) => false,
            })
    };
    let snapshot = out.clone();
    out.retain(|(a, ..)| match a {
        ListenAddr::Inet(s) => !wildcard_covers(s, &snapshot),
        // A datagram socket on a wildcard does not tell which address a
        // datagram came to (no IP_PKTINFO here), so each UDP address gets
        // its own socket: replies then leave from the address asked.
        ListenAddr::Unix(_) | ListenAddr::Udp(_) => true,
    });
    out
}

/// The address a server answering on `local` was configured with: the exact
/// address when bound, else the wildcard of its port.
pub fn wildcard_of(local: &SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, local.port())
}

/// `SO_RCVBUF`, `SO_SNDBUF` and `so_keepalive=` as `listen` asks (set
/// before `listen()`, so that the window scale offered to clients follows
/// the receive buffer; accepted connections inherit them).
fn set_sock_params(sock: &Socket, addr: &ListenAddr, opts: &SockOpts) -> Result<(), NetError> {
    let opt_err = |opt: &'static str, e: std::io::Error| NetError::Option {
        opt,
        addr: addr.to_string(),
        errno: errno(&e),
    };
    if let Some(n) = opts.sock.rcvbuf {
        sock.set_recv_buffer_size(n)
            .map_err(|e| opt_err("SO_RCVBUF", e))?;
    }
    if let Some(n) = opts.sock.sndbuf {
        sock.set_send_buffer_size(n)
            .map_err(|e| opt_err("SO_SNDBUF", e))?;
    }
    if let (Some(k), ListenAddr::Inet(_)) = (opts.sock.keepalive, addr) {
        sock.set_keepalive(k.on)
            .map_err(|e| opt_err("SO_KEEPALIVE", e))?;
        let mut params = socket2::TcpKeepalive::new();
        if let Some(t) = k.idle {
            params = params.with_time(t);
        }
        if let Some(t) = k.interval {
            params = params.with_interval(t);
        }
        if let Some(n) = k.count {
            params = params.with_retries(n);
        }
        if k.idle.is_some() || k.interval.is_some() || k.count.is_some() {
            sock.set_tcp_keepalive(&params)
                .map_err(|e| opt_err("TCP_KEEPIDLE", e))?;
        }
    }
    Ok(())
}

fn bind_one(addr: &ListenAddr, reuseport: bool, opts: &SockOpts) -> Result<Socket, NetError> {
    let backlog = opts.backlog;
    let name = addr.to_string();
    let opt_err = |opt: &'static str, e: std::io::Error| NetError::Option {
        opt,
        addr: name.clone(),
        errno: errno(&e),
    };
    let (sock, sa) = match addr {
        ListenAddr::Inet(sa) | ListenAddr::Udp(sa) => {
            let domain = if sa.is_ipv4() {
                Domain::IPV4
            } else {
                Domain::IPV6
            };
            let kind = match addr {
                ListenAddr::Udp(_) => Type::DGRAM,
                _ => Type::STREAM,
            };
            let s = Socket::new(domain, kind, None).map_err(|e| NetError::Socket {
                addr: name.clone(),
                errno: errno(&e),
            })?;
            s.set_reuse_address(true)
                .map_err(|e| opt_err("SO_REUSEADDR", e))?;
            if sa.is_ipv6() {
                s.set_only_v6(opts.sock.ipv6only.unwrap_or(true))
                    .map_err(|e| opt_err("IPV6_V6ONLY", e))?;
            }
            if reuseport {
                s.set_reuse_port(true)
                    .map_err(|e| opt_err("SO_REUSEPORT", e))?;
            }
            (s, SockAddr::from(*sa))
        }
        ListenAddr::Unix(p) => {
            let s =
                Socket::new(Domain::UNIX, Type::STREAM, None).map_err(|e| NetError::Socket {
                    addr: name.clone(),
                    errno: errno(&e),
                })?;
            let sa = SockAddr::unix(p).map_err(|e| NetError::Bind {
                addr: name.clone(),
                errno: errno(&e),
                busy: false,
            })?;
            (s, sa)
        }
    };
    sock.bind(&sa).map_err(|e| NetError::Bind {
        addr: name.clone(),
        errno: errno(&e),
        busy: e.kind() == std::io::ErrorKind::AddrInUse,
    })?;
    if let ListenAddr::Unix(p) = addr {
        // As nginx: anyone may connect; access is the directory's business.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666));
    }
    set_sock_params(&sock, addr, opts)?;
    // A datagram socket takes datagrams once bound.
    if !matches!(addr, ListenAddr::Udp(_)) {
        sock.listen(backlog).map_err(|e| NetError::Listen {
            addr: name.clone(),
            backlog,
            errno: errno(&e),
        })?;
    }
    sock.set_nonblocking(true)
        .map_err(|e| opt_err("O_NONBLOCK", e))?;
    Ok(sock)
}

/// Binds what `plan` lists; `slots` sockets for a `reuseport` address. Sockets
/// already bound (from the running generation) are reused when they match.
pub fn bind_all(
    planned: &[(ListenAddr, bool, SockOpts)],
    slots: usize,
    existing: &[Bound],
) -> Result<Vec<Bound>, NetError> {
    let mut out = Vec::new();
    for (addr, reuseport, opts) in planned {
        let want = if *reuseport { slots.max(1) } else { 1 };
        if let Some(old) = existing
            .iter()
            .find(|b| b.addr == *addr && b.reuseport == *reuseport && b.sockets.len() == want)
        {
            if let Ok(b) = old.try_clone() {
                // A reload may change the buffer sizes of a kept socket.
                for s in &b.sockets {
                    set_sock_params(s, addr, opts)?;
                }
                out.push(b);
                continue;
            }
        }
        let mut sockets = Vec::with_capacity(want);
        for _ in 0..want {
            sockets.push(bind_one(addr, *reuseport, opts)?);
        }
        out.push(Bound {
            addr: addr.clone(),
            reuseport: *reuseport,
            backlog: opts.backlog,
            sockets,
        });
    }
    Ok(out)
}

/// Unix socket files to remove when the master exits.
pub fn unix_paths(bound: &[Bound]) -> Vec<PathBuf> {
    bound
        .iter()
        .filter_map(|b| match &b.addr {
            ListenAddr::Unix(p) => Some(p.clone()),
            ListenAddr::Inet(_) | ListenAddr::Udp(_) => None,
        })
        .collect()
}

/// A descriptor handed to the worker's runtime.
pub fn into_owned(s: Socket) -> OwnedFd {
    s.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::Src;

    fn l(a: &str) -> Listen {
        Listen {
            addr: ListenAddr::Inet(a.parse().unwrap()),
            default_server: false,
            reuseport: false,
            ssl: false,
            http2: false,
            backlog: 511,
            proxy_protocol: false,
            sock: Default::default(),
            src: Src {
                file: None,
                line: 1,
            },
        }
    }

    #[test]
    fn wildcard_covers_specific() {
        let a = l("0.0.0.0:80");
        let b = l("127.0.0.1:80");
        let c = l("127.0.0.1:81");
        let d = l("[::1]:80");
        let p = plan(&[&b, &a, &c, &d, &b]);
        let addrs: Vec<String> = p.iter().map(|x| x.0.to_string()).collect();
        assert_eq!(addrs, vec!["0.0.0.0:80", "127.0.0.1:81", "[::1]:80"]);
    }

    #[test]
    fn udp_addresses_are_their_own() {
        let tcp = l("0.0.0.0:53");
        let mut u = l("127.0.0.1:53");
        u.addr = ListenAddr::Udp("127.0.0.1:53".parse().unwrap());
        let mut w = l("0.0.0.0:53");
        w.addr = ListenAddr::Udp("0.0.0.0:53".parse().unwrap());
        let p = plan(&[&tcp, &u, &w]);
        assert_eq!(p.len(), 3, "neither wildcard covers the UDP address");
        let b = bind_all(
            &[(
                ListenAddr::Udp("127.0.0.1:0".parse().unwrap()),
                false,
                SockOpts {
                    backlog: 511,
                    sock: Default::default(),
                },
            )],
            1,
            &[],
        )
        .unwrap();
        assert_eq!(b[0].sockets[0].r#type().unwrap(), Type::DGRAM);
    }

    #[test]
    fn binds_and_reuses() {
        let opts = SockOpts {
            backlog: 16,
            sock: crate::conf::listen_opts::SockParams {
                rcvbuf: Some(65536),
                sndbuf: Some(32768),
                keepalive: Some(crate::conf::listen_opts::SoKeepalive {
                    on: true,
                    idle: Some(std::time::Duration::from_secs(600)),
                    interval: None,
                    count: Some(3),
                }),
                ipv6only: None,
            },
        };
        let planned = vec![(
            ListenAddr::Inet("127.0.0.1:0".parse().unwrap()),
            false,
            opts,
        )];
        let b = bind_all(&planned, 2, &[]).unwrap();
        assert_eq!(b[0].sockets.len(), 1);
        // Linux doubles what is asked (its bookkeeping share).
        assert_eq!(b[0].sockets[0].recv_buffer_size().unwrap(), 131072);
        assert_eq!(b[0].sockets[0].send_buffer_size().unwrap(), 65536);
        assert!(b[0].sockets[0].keepalive().unwrap());
        assert_eq!(
            b[0].sockets[0].tcp_keepalive_time().unwrap(),
            std::time::Duration::from_secs(600)
        );
        assert_eq!(b[0].sockets[0].tcp_keepalive_retries().unwrap(), 3);
        let local = b[0].sockets[0].local_addr().unwrap().as_socket().unwrap();
        assert_ne!(local.port(), 0);
        // Binding the same port again fails with nginx's message.
        let again = vec![(ListenAddr::Inet(local), false, opts)];
        let err = bind_all(&again, 1, &[]).unwrap_err();
        assert!(
            matches!(err, NetError::Bind { busy: true, .. }),
            "worth another try"
        );
        let e = err.to_string();
        assert!(
            e.starts_with(&format!("bind() to {local} failed (98: ")),
            "{e}"
        );
    }
}
