//! nginx's `geo` and `split_clients` (http and stream): variables whose
//! value depends on an address (networks, longest prefix first, or `ranges`
//! of IPv4 addresses) or on a hash of a text (MurmurHash2, as nginx). They
//! are `map` variables of another kind (`map::Map` holds a [`Special`]), so
//! they are evaluated, cached and declared as maps are. No I/O.

use std::collections::HashMap;
use std::net::IpAddr;

use super::build::{Args, Builder, HTTP, Node, STREAM, Spec, not_here};
use super::map::Map;
use super::tree::Directive;
use super::vars::{self, Segment, Template};
use super::{ConfError, Src};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "geo",
        ctx: HTTP | STREAM,
        args: Args::Range(1, 2),
        block: true,
        set: set_geo,
    },
    Spec {
        name: "split_clients",
        ctx: HTTP | STREAM,
        args: Args::Exactly(2),
        block: true,
        set: set_split,
    },
];

/// What a `geo` or `split_clients` variable looks its value up in.
#[derive(Debug)]
pub enum Special {
    Geo(Geo),
    Split(Split),
}

impl Special {
    /// The value for `source` (the address, or the text to hash); for
    /// `geo` with `proxy`, `forwarded` is `X-Forwarded-For`.
    pub fn find(&self, source: &str, forwarded: Option<&str>) -> Option<&Template> {
        match self {
            Special::Geo(g) => g.find(source, forwarded),
            Special::Split(s) => s.find(source),
        }
    }

    /// The text geo's `proxy` needs besides the address.
    pub fn forwarded(&self) -> Option<&Template> {
        match self {
            Special::Geo(g) if !g.proxies.is_empty() => g.xff.as_ref(),
            _ => None,
        }
    }
}

fn lit(s: &str) -> Template {
    Template {
        segments: vec![Segment::Lit(s.to_string())],
    }
}

/// nginx's MurmurHash2 (seed 0), as `ngx_murmur_hash2`.
pub fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1e995;
    let mut h: u32 = data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        if rest.len() >= 3 {
            h ^= u32::from(rest[2]) << 16;
        }
        if rest.len() >= 2 {
            h ^= u32::from(rest[1]) << 8;
        }
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// `split_clients`: parts with their upper bound on the hash (0: `*`).
#[derive(Debug)]
pub struct Split {
    parts: Vec<(u32, Template)>,
}

impl Split {
    pub fn find(&self, source: &str) -> Option<&Template> {
        let h = murmur2(source.as_bytes());
        self.parts
            .iter()
            .find(|(bound, _)| h < *bound || *bound == 0)
            .map(|(_, v)| v)
    }
}

/// nginx's `ngx_atofp(s, 2)`: a percentage with at most two decimals, in
/// hundredths.
fn hundredths(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() || frac.len() > 2 {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let i: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut f: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    if frac.len() == 1 {
        f *= 10;
    }
    i.checked_mul(100)?.checked_add(f)
}

fn at(msg: impl Into<String>, src: &Src) -> ConfError {
    ConfError::at(msg, src)
}

fn variable(
    b: &mut Builder,
    arg: &str,
    src: &Src,
) -> Result<std::sync::Arc<vars::MapVar>, ConfError> {
    let _ = b;
    let Some(name) = arg.strip_prefix('$') else {
        return Err(at(format!("invalid variable name \"{arg}\""), src));
    };
    if vars::is_builtin(name) {
        return Err(at(format!("the duplicate \"{name}\" variable"), src));
    }
    vars::map_var(name).ok_or_else(|| at(format!("invalid variable name \"{arg}\""), src))
}

fn set_split(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    if !matches!(n, Node::Http(_) | Node::Stream(_)) {
        return Err(not_here(d));
    }
    let slot = variable(b, &d.args[1], &d.src)?;
    let source = vars::compile(&d.args[0]).map_err(|m| at(m, &d.src))?;
    let mut parts = Vec::new();
    let mut sum = 0u64;
    let mut last = 0u64;
    for e in d.block.as_deref().unwrap_or_default() {
        if e.block.is_some() || e.args.len() != 1 {
            return Err(at("invalid number of arguments", &e.src));
        }
        let bound = if e.name == "*" {
            sum = 10000;
            0
        } else {
            let p = e
                .name
                .strip_suffix('%')
                .and_then(hundredths)
                .filter(|p| *p > 0)
                .ok_or_else(|| at(format!("invalid percent value \"{}\"", e.name), &e.src))?;
            sum += p;
            last += p * 0xffff_ffff / 10000;
            last as u32
        };
        if sum > 10000 {
            return Err(at("percent total is greater than 100%", &e.src));
        }
        parts.push((bound, lit(&e.args[0])));
    }
    b.maps
        .push((slot, Map::special(source, Special::Split(Split { parts }))));
    Ok(())
}

/// `geo`: networks (longest prefix wins) or, with `ranges`, IPv4 ranges.
#[derive(Debug, Default)]
pub struct Geo {
    values: Vec<Template>,
    default: Option<usize>,
    /// Per prefix length, network → value.
    v4: Vec<HashMap<u32, usize>>,
    v6: Vec<HashMap<u128, usize>>,
    ranges: Option<Ranges>,
    /// `proxy`: addresses trusted to name the client in X-Forwarded-For.
    proxies: Vec<(IpAddr, u8)>,
    recursive: bool,
    xff: Option<Template>,
}

fn mask4(a: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        a & (u32::MAX << (32 - u32::from(len)))
    }
}

fn mask6(a: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        a & (u128::MAX << (128 - u32::from(len)))
    }
}

fn in_net(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => mask4(a.into(), len) == mask4(n.into(), len),
        (IpAddr::V6(a), IpAddr::V6(n)) => mask6(a.into(), len) == mask6(n.into(), len),
        _ => false,
    }
}

/// nginx's `ngx_parse_addr` failing: 255.255.255.255 (INADDR_NONE).
fn parse_ip(s: &str) -> IpAddr {
    s.trim()
        .parse::<IpAddr>()
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::BROADCAST))
}

impl Geo {
    fn find(&self, source: &str, forwarded: Option<&str>) -> Option<&Template> {
        let mut ip = parse_ip(source);
        if let Some(xff) = forwarded {
            if self.proxies.iter().any(|p| in_net(ip, *p)) {
                ip = self.forwarded_client(ip, xff);
            }
        }
        let i = match &self.ranges {
            Some(r) => match ip {
                IpAddr::V4(a) => r.find(a.into()),
                IpAddr::V6(_) => None,
            },
            None => self.find_net(ip),
        };
        i.or(self.default).and_then(|i| self.values.get(i))
    }

    /// The client named by X-Forwarded-For: its last address, or (with
    /// `proxy_recursive`) the last one that is not a trusted proxy.
    fn forwarded_client(&self, peer: IpAddr, xff: &str) -> IpAddr {
        let mut found = peer;
        for part in xff.rsplit(',') {
            let Ok(ip) = part.trim().parse::<IpAddr>() else {
                return found;
            };
            found = ip;
            if !self.recursive || !self.proxies.iter().any(|p| in_net(ip, *p)) {
                return ip;
            }
        }
        found
    }

    fn find_net(&self, ip: IpAddr) -> Option<usize> {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                (0..=32u8)
                    .rev()
                    .find_map(|l| self.v4.get(usize::from(l))?.get(&mask4(a, l)).copied())
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                (0..=128u8)
                    .rev()
                    .find_map(|l| self.v6.get(usize::from(l))?.get(&mask6(a, l)).copied())
            }
        }
    }

    fn value(&mut self, v: &str) -> usize {
        self.values.push(lit(v));
        self.values.len() - 1
    }
}

/// IPv4 ranges, sorted and apart: a later range replaces what it covers of
/// earlier ones.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ranges {
    list: Vec<(u32, u32, usize)>,
}

impl Ranges {
    /// Deletes the range `[start, end]` if it is one of the table's (as
    /// nginx, which deletes no part of a range); false if it is not.
    pub fn delete(&mut self, start: u32, end: u32) -> bool {
        let before = self.list.len();
        self.list.retain(|r| !(r.0 == start && r.1 == end));
        self.list.len() != before
    }

    /// Sets `[start, end]` to `value` (None: nothing there).
    pub fn set(&mut self, start: u32, end: u32, value: Option<usize>) {
        let mut out = Vec::with_capacity(self.list.len() + 2);
        for &(s, e, v) in &self.list {
            if e < start || s > end {
                out.push((s, e, v));
                continue;
            }
            if s < start {
                out.push((s, start - 1, v));
            }
            if e > end {
                out.push((end + 1, e, v));
            }
        }
        if let Some(v) = value {
            out.push((start, end, v));
        }
        out.sort_unstable_by_key(|r| r.0);
        self.list = out;
    }

    pub fn find(&self, a: u32) -> Option<usize> {
        let i = self.list.partition_point(|r| r.0 <= a);
        let (s, e, v) = *self.list.get(i.checked_sub(1)?)?;
        (s <= a && a <= e).then_some(v)
    }
}

/// `ADDR` or `ADDR/LEN`: the network (low bits cleared) and its length.
fn cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = a.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max)?,
        None => max,
    };
    let net = match ip {
        IpAddr::V4(a) => IpAddr::V4(mask4(a.into(), len).into()),
        IpAddr::V6(a) => IpAddr::V6(mask6(a.into(), len).into()),
    };
    Some((net, len))
}

fn set_geo(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let stream = match n {
        Node::Http(_) => false,
        Node::Stream(_) => true,
        _ => return Err(not_here(d)),
    };
    let (source, var) = match d.args.as_slice() {
        [v] => ("$remote_addr", v),
        [s, v] => (s.as_str(), v),
        _ => return Err(not_here(d)),
    };
    let slot = variable(b, var, &d.src)?;
    let source = vars::compile(source).map_err(|m| at(m, &d.src))?;
    let mut g = Geo {
        v4: vec![HashMap::new(); 33],
        v6: vec![HashMap::new(); 129],
        ..Geo::default()
    };
    if !stream {
        g.xff = vars::compile("$http_x_forwarded_for").ok();
    }
    for e in d.block.as_deref().unwrap_or_default() {
        if e.block.is_some() {
            return Err(at("unexpected \"{\"", &e.src));
        }
        match (e.name.as_str(), e.args.len()) {
            ("ranges", 0) => {
                if g.v4.iter().any(|m| !m.is_empty()) || g.v6.iter().any(|m| !m.is_empty()) {
                    return Err(at("\"ranges\" must be the first parameter", &e.src));
                }
                g.ranges = Some(Ranges::default());
                continue;
            }
            ("proxy_recursive", 0) if !stream => {
                g.recursive = true;
                continue;
            }
            ("proxy", 1) if !stream => {
                let p = cidr(&e.args[0])
                    .ok_or_else(|| at(format!("invalid network \"{}\"", e.args[0]), &e.src))?;
                g.proxies.push(p);
                continue;
            }
            ("default", 1) => {
                let v = g.value(&e.args[0]);
                g.default = Some(v);
                continue;
            }
            ("delete", 1) => {
                geo_entry(&mut g, &e.args[0], None, &e.src, &mut b.warnings)?;
                continue;
            }
            (_, 1) => {}
            _ => return Err(at("invalid number of the geo parameters", &e.src)),
        }
        let v = g.value(&e.args[0]);
        geo_entry(&mut g, &e.name, Some(v), &e.src, &mut b.warnings)?;
    }
    b.maps.push((slot, Map::special(source, Special::Geo(g))));
    Ok(())
}

/// One network or range line (`value` None: `delete`).
fn geo_entry(
    g: &mut Geo,
    net: &str,
    value: Option<usize>,
    src: &Src,
    warnings: &mut Vec<ConfError>,
) -> Result<(), ConfError> {
    if let Some(r) = g.ranges.as_mut() {
        let bad = || at(format!("invalid range \"{net}\""), src);
        let (s, e) = net.split_once('-').ok_or_else(bad)?;
        let s: std::net::Ipv4Addr = s.parse().map_err(|_| bad())?;
        let e: std::net::Ipv4Addr = e.parse().map_err(|_| bad())?;
        let (s, e) = (u32::from(s), u32::from(e));
        if s > e {
            return Err(bad());
        }
        match value {
            Some(_) => r.set(s, e, value),
            None => {
                if !r.delete(s, e) {
                    warnings.push(at(format!("no address range \"{net}\" to delete"), src));
                }
            }
        }
        return Ok(());
    }
    let (ip, len) = cidr(net).ok_or_else(|| at(format!("invalid network \"{net}\""), src))?;
    match ip {
        IpAddr::V4(a) => {
            let m = &mut g.v4[usize::from(len)];
            match value {
                Some(v) => {
                    m.insert(a.into(), v);
                }
                None => {
                    m.remove(&u32::from(a));
                }
            }
        }
        IpAddr::V6(a) => {
            let m = &mut g.v6[usize::from(len)];
            match value {
                Some(v) => {
                    m.insert(a.into(), v);
                }
                None => {
                    m.remove(&u128::from(a));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn split_as_nginx() {
        // nginx 1.22: split_clients "${arg_k}x" $v { 0.5% a; 20% b;
        // 30.25% c; * d; } for k=k0..k9.
        let pct = |p: u64, last: &mut u64| {
            *last += p * 0xffff_ffff / 10000;
            *last as u32
        };
        let mut last = 0;
        let s = Split {
            parts: vec![
                (pct(50, &mut last), lit("a")),
                (pct(2000, &mut last), lit("b")),
                (pct(3025, &mut last), lit("c")),
                (0, lit("d")),
            ],
        };
        let got: Vec<&str> = (0..10)
            .map(|i| {
                s.find(&format!("k{i}x"))
                    .and_then(|t| t.as_literal())
                    .unwrap_or("")
            })
            .collect();
        assert_eq!(got, ["c", "d", "c", "d", "b", "d", "d", "d", "d", "c"]);
        assert_eq!(murmur2(b""), 0);
    }

    #[test]
    fn ranges_delete_whole_ones_only() {
        let mut r = Ranges::default();
        r.set(1, 9, Some(0));
        r.set(5, 6, Some(1));
        assert!(!r.delete(2, 2));
        assert!(r.delete(5, 6));
        assert_eq!((r.find(2), r.find(5), r.find(7)), (Some(0), None, Some(0)));
    }

    #[test]
    fn percents() {
        assert_eq!(hundredths("0.5"), Some(50));
        assert_eq!(hundredths("20"), Some(2000));
        assert_eq!(hundredths("33.33"), Some(3333));
        assert_eq!(hundredths("1.234"), None);
        assert_eq!(hundredths("x"), None);
    }

    #[test]
    fn networks_longest_prefix() {
        let mut g = Geo {
            v4: vec![HashMap::new(); 33],
            v6: vec![HashMap::new(); 129],
            ..Geo::default()
        };
        let src = Src {
            file: None,
            line: 1,
        };
        let d = g.value("def");
        g.default = Some(d);
        for (n, v) in [
            ("10.0.0.0/8", "ten"),
            ("10.1.0.0/16", "ten-one"),
            ("127.0.0.1", "lo"),
            ("2001:db8::/32", "doc"),
        ] {
            let i = g.value(v);
            geo_entry(&mut g, n, Some(i), &src, &mut Vec::new()).unwrap();
        }
        geo_entry(&mut g, "10.1.0.0/16", None, &src, &mut Vec::new()).unwrap();
        let get = |g: &Geo, a: &str| {
            g.find(a, None)
                .and_then(|t| t.as_literal())
                .unwrap()
                .to_string()
        };
        assert_eq!(get(&g, "10.1.2.3"), "ten");
        assert_eq!(get(&g, "127.0.0.1"), "lo");
        assert_eq!(get(&g, "127.0.0.2"), "def");
        assert_eq!(get(&g, "2001:db8::1"), "doc");
        assert_eq!(get(&g, "junk"), "def");
    }

    proptest! {
        /// The range table answers as applying every range in order to
        /// each address would.
        #[test]
        fn ranges_as_applied_in_order(ops in proptest::collection::vec((0u32..64, 0u32..64, (0usize..5).prop_map(Some)), 0..30)) {
            let mut r = Ranges::default();
            let mut model: Vec<Option<usize>> = vec![None; 64];
            for (a, b, v) in ops {
                let (s, e) = (a.min(b), a.max(b));
                r.set(s, e, v);
                for slot in &mut model[s as usize..=e as usize] {
                    *slot = v;
                }
            }
            for (a, want) in model.iter().enumerate() {
                prop_assert_eq!(r.find(a as u32), *want);
            }
            // Sorted and apart.
            for w in r.list.windows(2) {
                prop_assert!(w[0].1 < w[1].0);
            }
        }
    }
}
