//! The peer list a zone publishes ([`NewPeer`]) and the one builder that
//! makes it for an upstream from its `server` lines: static lines give
//! their own addresses, each `resolve` line the addresses some source
//! resolved it to — the old zone (reload and upgrade carry-over), a DNS
//! answer (the resolver task) or the state file (a cold start). Pure: no
//! zone, no I/O; the callers publish what it returns.

use std::net::SocketAddr;
use std::time::Duration;

use super::peers::Peers;
use crate::conf::model::{PeerAddr, Upstream, UpstreamServer};

/// One peer to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPeer {
    pub addr: PeerAddr,
    pub server: u32,
    pub weight: u32,
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub max_conns: u32,
    pub backup: bool,
    pub down: bool,
}

impl NewPeer {
    /// A peer of `server` line number `server`, with the line's parameters.
    pub fn for_line(line: &UpstreamServer, server: usize, addr: PeerAddr) -> NewPeer {
        NewPeer {
            addr,
            server: server as u32,
            weight: line.weight,
            max_fails: line.max_fails,
            fail_timeout: line.fail_timeout,
            max_conns: line.max_conns,
            backup: line.backup,
            down: line.down,
        }
    }

    /// Every address of every `server` line, in order.
    pub fn from_config(u: &Upstream) -> Vec<NewPeer> {
        u.servers
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.addrs
                    .iter()
                    .map(move |a| NewPeer::for_line(s, i, a.clone()))
            })
            .collect()
    }
}

/// An address a `resolve` line resolved to, with the weight and backup
/// flag its source gives (an SRV record's, as the resolver computed them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub addr: SocketAddr,
    pub weight: u32,
    pub backup: bool,
}

impl Resolved {
    /// What the peers of `server` line `line` in a snapshot resolved to, in
    /// the snapshot's order (primary, then backup).
    pub fn of_line(peers: &Peers, line: usize) -> Vec<Resolved> {
        peers
            .primary
            .iter()
            .chain(peers.backup.iter())
            .filter(|p| p.server == line)
            .filter_map(|p| match &p.addr {
                PeerAddr::Inet(addr) => Some(Resolved {
                    addr: *addr,
                    weight: u32::try_from(p.weight).unwrap_or(1),
                    backup: p.backup,
                }),
                PeerAddr::Unix(_) => None,
            })
            .collect()
    }
}

/// The peer list of `u`, line by line: a static line's own addresses; a
/// `resolve` line (number `k`) the addresses `resolved(k, line)` gives
/// (none: the line has no peers). A name's addresses take the line's port
/// and parameters; an SRV line's (`service=`) keep their own port, weight
/// and backup flag.
pub fn peer_list(
    u: &Upstream,
    mut resolved: impl FnMut(usize, &UpstreamServer) -> Vec<Resolved>,
) -> Vec<NewPeer> {
    let mut list = Vec::new();
    for (k, line) in u.servers.iter().enumerate() {
        if !line.resolve {
            list.extend(
                line.addrs
                    .iter()
                    .map(|a| NewPeer::for_line(line, k, a.clone())),
            );
            continue;
        }
        for r in resolved(k, line) {
            list.push(if line.service.is_some() {
                NewPeer {
                    weight: r.weight,
                    backup: r.backup,
                    ..NewPeer::for_line(line, k, PeerAddr::Inet(r.addr))
                }
            } else {
                let addr = SocketAddr::new(r.addr.ip(), line.port);
                NewPeer::for_line(line, k, PeerAddr::Inet(addr))
            });
        }
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::model::Balancer;
    use crate::upstream::peers::test_upstream;
    use crate::upstream::zone::Zone;

    /// `static 127.0.0.1:1`, `app.test:8080 resolve weight=3 backup`,
    /// `static 127.0.0.1:2`, `_http._tcp.srv.test resolve`.
    fn upstream() -> Upstream {
        let mut u = test_upstream(
            &[
                ("127.0.0.1:1", 1, false),
                ("app.test:8080", 3, true),
                ("127.0.0.1:2", 2, false),
                ("srv.test", 1, false),
            ],
            Balancer::RoundRobin,
        );
        for (k, host, port, service) in [
            (1, "app.test", 8080, None),
            (3, "srv.test", 0, Some("http")),
        ] {
            let l = &mut u.servers[k];
            (l.resolve, l.host, l.port) = (true, host.into(), port);
            l.service = service.map(String::from);
            l.addrs.clear();
        }
        u
    }

    fn r(addr: &str, weight: u32, backup: bool) -> Resolved {
        Resolved {
            addr: addr.parse().expect("addr"),
            weight,
            backup,
        }
    }

    fn addrs(list: &[NewPeer]) -> Vec<(u32, String, u32, bool)> {
        list.iter()
            .map(|p| (p.server, p.addr.to_string(), p.weight, p.backup))
            .collect()
    }

    #[test]
    fn lines_in_order_names_take_the_line_srv_keeps_its_own() {
        let u = upstream();
        let list = peer_list(&u, |k, _| match k {
            1 => vec![r("10.0.0.1:9", 7, false), r("10.0.0.2:9", 7, false)],
            3 => vec![r("10.0.0.3:81", 5, true)],
            _ => panic!("static line {k} asked"),
        });
        assert_eq!(
            addrs(&list),
            [
                (0, "127.0.0.1:1".into(), 1, false),
                (1, "10.0.0.1:8080".into(), 3, true),
                (1, "10.0.0.2:8080".into(), 3, true),
                (2, "127.0.0.1:2".into(), 2, false),
                (3, "10.0.0.3:81".into(), 5, true),
            ]
        );
        // The line's other parameters go with every peer of it.
        assert!(list.iter().all(|p| p.max_fails == 1 && !p.down));
    }

    #[test]
    fn a_line_without_addresses_has_no_peers() {
        let u = upstream();
        let list = peer_list(&u, |_, _| Vec::new());
        assert_eq!(
            addrs(&list),
            [
                (0, "127.0.0.1:1".into(), 1, false),
                (2, "127.0.0.1:2".into(), 2, false),
            ]
        );
    }

    /// Rebuilding a list from what a zone published gives the same list:
    /// a reload, a DNS answer for another line and the state file all start
    /// from a zone's peers or the same addresses.
    #[test]
    fn a_published_list_rebuilds_to_itself() {
        let u = upstream();
        let first = peer_list(&u, |k, _| match k {
            1 => vec![r("10.0.0.1:8080", 3, true)],
            _ => vec![r("10.0.0.3:81", 5, true), r("[::1]:82", 4, false)],
        });
        let z = Zone::heap("z", 64 * 1024, &[&u], 1).expect("zone");
        z.publish(0, 1, &first).expect("publish");
        let snap = z.snapshot(0, &u).expect("snapshot");
        let again = peer_list(&u, |k, _| Resolved::of_line(&snap, k));
        let sorted = |mut l: Vec<NewPeer>| {
            l.sort_by_key(|p| (p.server, p.addr.to_string()));
            l
        };
        assert_eq!(sorted(again), sorted(first));
    }
}
