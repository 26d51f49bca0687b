//! nginx's realip module: when the connection comes from a trusted address
//! (`set_real_ip_from`), the client address is taken from `real_ip_header`
//! (X-Real-IP by default; for X-Forwarded-For the last address, or with
//! `real_ip_recursive on` the last one that is not trusted; `proxy_protocol`:
//! the PROXY protocol header's address and port). Applied once per request:
//! with the server's settings first, else with the location's.

use std::net::{IpAddr, SocketAddr};

use super::vars::Req;

/// Replaces the request's client address if its settings say so.
pub fn apply(r: &mut Req) {
    if r.realip.is_some() {
        return;
    }
    let conf = r.conf.clone();
    if conf.set_real_ip_from.is_empty() {
        return;
    }
    let peer = r.conn.remote.map(|a| a.ip());
    let trusted = |ip: Option<IpAddr>| conf.set_real_ip_from.iter().any(|t| t.contains(ip));
    if !trusted(peer) {
        return;
    }
    if conf.real_ip_header == "proxy_protocol" {
        // The header's address when it is one (nginx parses it the same).
        if let Some(p) = r.conn.proxy.as_ref() {
            if let Ok(ip) = p.src_addr.parse::<IpAddr>() {
                r.realip = Some(SocketAddr::new(ip, p.src_port));
            }
        }
        return;
    }
    let Some(value) = r.header(&conf.real_ip_header) else {
        return;
    };
    let list: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let pick = if conf.real_ip_recursive {
        // From the right, past every trusted hop; all trusted: the leftmost.
        list.iter()
            .rev()
            .find(|a| !trusted(a.parse().ok()))
            .or(list.first())
            .copied()
    } else {
        list.last().copied()
    };
    if let Some(ip) = pick.and_then(|a| a.parse::<IpAddr>().ok()) {
        r.realip = Some(SocketAddr::new(ip, 0));
    }
}
