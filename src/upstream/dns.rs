//! A DNS client with nginx's resolver rules: one A and one AAAA query per
//! lookup (as `ipv4=`/`ipv6=` allow), sent together to the servers in turn,
//! resent every 5 s until `resolver_timeout`, over TCP when the UDP reply is
//! truncated; replies checked for ID, question and shape; nginx's
//! classification (NOERROR with no address in either family is NXDOMAIN; a
//! server error in either family fails the lookup); a CNAME-only answer is
//! chased (up to 50 links). No hosts file, no search list, no cache: the
//! caller schedules lookups. Messages are built and parsed by hickory-proto;
//! only the transport is ours.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conf::model::Resolver;
use crate::log::Level;

/// A finished lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Addresses (A first, then AAAA) and how long they are valid.
    Addrs { addrs: Vec<IpAddr>, valid: Duration },
    /// The name does not exist, or has no address: the peers go.
    NxDomain,
}

/// One peer an SRV lookup gives: an address of a target, with the record's
/// port and weight (0 taken as 1), backup unless of the lowest priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvPeer {
    pub addr: IpAddr,
    pub port: u16,
    pub weight: u16,
    pub backup: bool,
}

/// A finished SRV lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SrvAnswer {
    Peers {
        peers: Vec<SrvPeer>,
        valid: Duration,
    },
    NxDomain,
}

/// A failed lookup: the peers stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnsError {
    /// A server's rcode: 1 FORMERR, 2 SERVFAIL, 4 NOTIMP, 5 REFUSED.
    Server(u16),
    Timeout,
}

impl DnsError {
    /// nginx's code and text, as in "could not be resolved (2: Server failure)".
    pub fn code(self) -> u16 {
        match self {
            DnsError::Server(c) => c,
            DnsError::Timeout => 110,
        }
    }
}

/// nginx's `ngx_resolver_strerror`.
pub fn strerror(code: u16) -> &'static str {
    match code {
        1 => "Format error",
        2 => "Server failure",
        3 => "Host not found",
        4 => "Unimplemented",
        5 => "Operation refused",
        110 => "Operation timed out",
        _ => "Unknown error",
    }
}

impl std::fmt::Display for DnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), strerror(self.code()))
    }
}

/// What one family's reply says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Addresses of the asked family, the CNAME target when there are none,
    /// and the smallest TTL seen.
    Records {
        addrs: Vec<IpAddr>,
        cname: Option<Name>,
        ttl: Option<u32>,
    },
    NxDomain,
    Error(u16),
}

/// The smaller of two optional TTLs.
fn min_ttl(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// A reply's rcode as nginx sorts it: NOERROR goes on (None), NXDOMAIN, or
/// an error code.
fn rcode(msg: &Message) -> Option<Result<(), u16>> {
    match msg.response_code() {
        ResponseCode::NoError => None,
        ResponseCode::NXDomain => Some(Ok(())),
        other => Some(Err(u16::from(other))),
    }
}

/// Reads one reply for `family` (pure).
pub(crate) fn classify(msg: &Message, family: RecordType) -> Reply {
    match rcode(msg) {
        None => {}
        Some(Ok(())) => return Reply::NxDomain,
        Some(Err(c)) => return Reply::Error(c),
    }
    let mut addrs = Vec::new();
    let mut cname = None;
    let mut ttl: Option<u32> = None;
    for r in msg.answers() {
        let keep = match r.data() {
            RData::A(a) if family == RecordType::A => {
                addrs.push(IpAddr::V4(a.0));
                true
            }
            RData::AAAA(a) if family == RecordType::AAAA => {
                addrs.push(IpAddr::V6(a.0));
                true
            }
            RData::CNAME(c) => {
                cname = Some(c.0.clone());
                true
            }
            _ => false,
        };
        if keep {
            ttl = min_ttl(ttl, Some(r.ttl()));
        }
    }
    Reply::Records {
        addrs,
        cname: if cname.is_some()
            && !msg
                .answers()
                .iter()
                .any(|r| matches!(r.data(), RData::A(_) | RData::AAAA(_)))
        {
            cname
        } else {
            None
        },
        ttl,
    }
}

/// Both families' replies together, as nginx: an error in either fails
/// the lookup (the first seen wins); addresses in either succeed; a CNAME
/// with no address anywhere is chased; nothing at all is NXDOMAIN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Combined {
    Addrs(Vec<IpAddr>, Option<u32>),
    Cname(Name, Option<u32>),
    NxDomain,
    Error(u16),
}

pub(crate) fn combine(replies: &[Reply]) -> Combined {
    if let Some(Reply::Error(c)) = replies.iter().find(|r| matches!(r, Reply::Error(_))) {
        return Combined::Error(*c);
    }
    let mut addrs = Vec::new();
    let mut ttl: Option<u32> = None;
    let mut cname = None;
    for r in replies {
        if let Reply::Records {
            addrs: a,
            cname: c,
            ttl: t,
        } = r
        {
            addrs.extend_from_slice(a);
            ttl = min_ttl(ttl, *t);
            if cname.is_none() {
                cname = c.clone();
            }
        }
    }
    if !addrs.is_empty() {
        return Combined::Addrs(addrs, ttl);
    }
    match cname {
        Some(c) => Combined::Cname(c, ttl),
        None => Combined::NxDomain,
    }
}

/// The DNS client of one worker: rotates over the servers.
pub struct Client {
    next: AtomicUsize,
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

/// How often an unanswered UDP query is sent again.
const RESEND: Duration = Duration::from_secs(5);
/// nginx follows a CNAME chain this far, then calls it NXDOMAIN.
const MAX_CNAMES: usize = 50;

impl Client {
    pub fn new() -> Client {
        Client {
            next: AtomicUsize::new(0),
        }
    }

    fn server(&self, r: &Resolver) -> Option<SocketAddr> {
        if r.servers.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % r.servers.len();
        Some(r.servers[i])
    }

    /// Resolves `host` with `r`'s servers and rules.
    pub async fn resolve(&self, host: &str, r: &Resolver) -> Result<Answer, DnsError> {
        let mut name = Name::from_ascii(host).map_err(|_| DnsError::Server(1))?;
        name.set_fqdn(true);
        let deadline = Instant::now() + r.timeout;
        let mut valid: Option<u32> = None;
        let mut families = Vec::new();
        if r.ipv4 {
            families.push(RecordType::A);
        }
        if r.ipv6 {
            families.push(RecordType::AAAA);
        }
        for _ in 0..MAX_CNAMES {
            let server = self.server(r).ok_or(DnsError::Timeout)?;
            let queries = families.iter().map(|&f| query(server, &name, f, deadline));
            let replies: Vec<Reply> = futures_join(queries).await?;
            let shorter = |t: Option<u32>| min_ttl(valid, t);
            match combine(&replies) {
                Combined::Error(c) => return Err(DnsError::Server(c)),
                Combined::NxDomain => return Ok(Answer::NxDomain),
                Combined::Addrs(addrs, ttl) => {
                    let ttl = shorter(ttl).unwrap_or(0);
                    let valid = r.valid.unwrap_or(Duration::from_secs(u64::from(ttl)));
                    return Ok(Answer::Addrs { addrs, valid });
                }
                Combined::Cname(target, ttl) => {
                    valid = shorter(ttl);
                    name = target;
                }
            }
        }
        Ok(Answer::NxDomain)
    }
}

/// One SRV record as the reply gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Srv {
    pub(crate) priority: u16,
    pub(crate) weight: u16,
    pub(crate) port: u16,
    pub(crate) target: Name,
}

/// What an SRV reply says (pure): records sorted by priority, or a CNAME
/// to follow, with the smallest TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SrvReply {
    Records(Vec<Srv>, Option<u32>),
    Cname(Name, Option<u32>),
    NxDomain,
    Error(u16),
}

pub(crate) fn classify_srv(msg: &Message) -> SrvReply {
    match rcode(msg) {
        None => {}
        Some(Ok(())) => return SrvReply::NxDomain,
        Some(Err(c)) => return SrvReply::Error(c),
    }
    let mut recs = Vec::new();
    let mut cname = None;
    let mut ttl: Option<u32> = None;
    for r in msg.answers() {
        match r.data() {
            RData::SRV(v) => recs.push(Srv {
                priority: v.priority(),
                weight: v.weight(),
                port: v.port(),
                target: v.target().clone(),
            }),
            RData::CNAME(c) => cname = Some(c.0.clone()),
            _ => continue,
        }
        ttl = min_ttl(ttl, Some(r.ttl()));
    }
    if !recs.is_empty() {
        recs.sort_by_key(|r| r.priority);
        return SrvReply::Records(recs, ttl);
    }
    match cname {
        Some(c) => SrvReply::Cname(c, ttl),
        None => SrvReply::NxDomain,
    }
}

/// The targets' results put together, as nginx: the addresses of the
/// targets that answered (each failed target is logged); if none did,
/// NXDOMAIN when one was NXDOMAIN, else the first error.
pub(crate) fn srv_peers(
    recs: &[Srv],
    results: &[Result<Answer, DnsError>],
    srv_ttl: Option<u32>,
    r: &Resolver,
) -> Result<SrvAnswer, DnsError> {
    let lowest = recs.first().map(|s| s.priority).unwrap_or(0);
    let mut peers = Vec::new();
    let mut valid = r
        .valid
        .unwrap_or(Duration::from_secs(u64::from(srv_ttl.unwrap_or(0))));
    let (mut nx, mut first_err) = (false, None);
    for (rec, res) in recs.iter().zip(results) {
        match res {
            Ok(Answer::Addrs { addrs, valid: v }) => {
                valid = valid.min(*v);
                peers.extend(addrs.iter().map(|a| SrvPeer {
                    addr: *a,
                    port: rec.port,
                    weight: rec.weight.max(1),
                    backup: rec.priority != lowest,
                }));
            }
            Ok(Answer::NxDomain) => nx = true,
            Err(e) => {
                first_err.get_or_insert(*e);
            }
        }
    }
    if !peers.is_empty() {
        return Ok(SrvAnswer::Peers { peers, valid });
    }
    match (nx, first_err) {
        (false, Some(e)) => Err(e),
        _ => Ok(SrvAnswer::NxDomain),
    }
}

impl Client {
    /// Resolves an SRV name (`_service._tcp.host`), then each target.
    pub async fn resolve_srv(&self, srv_name: &str, r: &Resolver) -> Result<SrvAnswer, DnsError> {
        let mut name = Name::from_ascii(srv_name).map_err(|_| DnsError::Server(1))?;
        name.set_fqdn(true);
        let deadline = Instant::now() + r.timeout;
        let mut ttl: Option<u32> = None;
        for _ in 0..MAX_CNAMES {
            let server = self.server(r).ok_or(DnsError::Timeout)?;
            let msg = exchange(server, &name, RecordType::SRV, deadline).await?;
            let shorter = |t: Option<u32>| min_ttl(ttl, t);
            match classify_srv(&msg) {
                SrvReply::Error(c) => return Err(DnsError::Server(c)),
                SrvReply::NxDomain => return Ok(SrvAnswer::NxDomain),
                SrvReply::Cname(target, t) => {
                    ttl = shorter(t);
                    name = target;
                }
                SrvReply::Records(recs, t) => {
                    let mut results = Vec::with_capacity(recs.len());
                    for rec in &recs {
                        let target = rec.target.to_ascii();
                        let res = self.resolve(target.trim_end_matches('.'), r).await;
                        if let Err(e) = &res {
                            crate::log!(
                                Level::Error,
                                "{} could not be resolved ({})",
                                target.trim_end_matches('.'),
                                e
                            );
                        }
                        results.push(res);
                    }
                    return srv_peers(&recs, &results, shorter(t), r);
                }
            }
        }
        Ok(SrvAnswer::NxDomain)
    }
}

/// Runs the queries together; the first transport failure fails them all.
async fn futures_join<F>(qs: impl Iterator<Item = F>) -> Result<Vec<Reply>, DnsError>
where
    F: std::future::Future<Output = Result<Reply, DnsError>>,
{
    let mut set: Vec<std::pin::Pin<Box<F>>> = qs.map(Box::pin).collect();
    let mut out: Vec<Option<Result<Reply, DnsError>>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_some() {
                continue;
            }
            match f.as_mut().poll(cx) {
                std::task::Poll::Ready(r) => out[i] = Some(r),
                std::task::Poll::Pending => pending = true,
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|r| r.unwrap_or(Err(DnsError::Timeout)))
        .collect()
}

fn request(name: &Name, family: RecordType) -> (u16, Vec<u8>) {
    let id: u16 = rand_id();
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(name.clone(), family));
    (id, m.to_vec().unwrap_or_default())
}

fn rand_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish() as u16
}

/// A reply for our query? nginx logs and ignores any other.
fn matches(msg: &Message, id: u16, name: &Name, family: RecordType, server: SocketAddr) -> bool {
    let ok = msg.id() == id
        && msg.message_type() == MessageType::Response
        && msg
            .queries()
            .first()
            .is_some_and(|q| q.query_type() == family && q.name() == name);
    if !ok {
        crate::log!(
            Level::Error,
            "unexpected DNS response for {} from {}, ignored",
            name.to_ascii().trim_end_matches('.'),
            server
        );
    }
    ok
}

/// One A or AAAA question.
async fn query(
    server: SocketAddr,
    name: &Name,
    family: RecordType,
    deadline: Instant,
) -> Result<Reply, DnsError> {
    let msg = exchange(server, name, family, deadline).await?;
    Ok(classify(&msg, family))
}

/// One question over UDP (TCP when the reply is truncated): the reply.
async fn exchange(
    server: SocketAddr,
    name: &Name,
    family: RecordType,
    deadline: Instant,
) -> Result<Message, DnsError> {
    let (id, bytes) = request(name, family);
    let bind: SocketAddr = if server.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = tokio::net::UdpSocket::bind(bind)
        .await
        .map_err(|_| DnsError::Timeout)?;
    sock.connect(server).await.map_err(|_| DnsError::Timeout)?;
    let mut buf = vec![0u8; 4096];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(DnsError::Timeout);
        }
        let _ = sock.send(&bytes).await;
        let until = (now + RESEND).min(deadline);
        loop {
            let wait = until.saturating_duration_since(Instant::now());
            let n = match tokio::time::timeout(wait, sock.recv(&mut buf)).await {
                Ok(Ok(n)) => n,
                // ICMP unreachable and the like: wait for the resend.
                Ok(Err(_)) => {
                    tokio::time::sleep(wait).await;
                    break;
                }
                Err(_) => break,
            };
            let Ok(msg) = Message::from_vec(&buf[..n]) else {
                crate::log!(
                    Level::Error,
                    "invalid DNS response from {}, ignored",
                    server
                );
                continue;
            };
            if !matches(&msg, id, name, family, server) {
                continue;
            }
            if msg.truncated() {
                return exchange_tcp(server, name, family, deadline).await;
            }
            return Ok(msg);
        }
    }
}

async fn exchange_tcp(
    server: SocketAddr,
    name: &Name,
    family: RecordType,
    deadline: Instant,
) -> Result<Message, DnsError> {
    let (id, bytes) = request(name, family);
    let wait = deadline.saturating_duration_since(Instant::now());
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(server).await.ok()?;
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        framed.extend_from_slice(&bytes);
        s.write_all(&framed).await.ok()?;
        let len = s.read_u16().await.ok()?;
        let mut buf = vec![0u8; usize::from(len)];
        s.read_exact(&mut buf).await.ok()?;
        Message::from_vec(&buf).ok()
    };
    match tokio::time::timeout(wait, exchange).await {
        Ok(Some(msg)) if matches(&msg, id, name, family, server) => Ok(msg),
        _ => Err(DnsError::Timeout),
    }
}

/// A worker's cache of names looked up for `proxy_pass` with variables, as
/// nginx's: an answer is kept until it expires, errors and NXDOMAIN are not
/// kept, an entry unused for 30 s is dropped, and requests for a name being
/// looked up wait for that one lookup.
pub struct Cache {
    client: Client,
    /// Turns the order of cached addresses (nginx rotates it at random), so
    /// that requests spread over them.
    turn: AtomicUsize,
    entries: std::sync::Mutex<std::collections::HashMap<String, Entry>>,
}

type Shared = tokio::sync::watch::Receiver<Option<Result<Vec<IpAddr>, u16>>>;

enum Entry {
    Ready {
        addrs: Vec<IpAddr>,
        until: Instant,
        used: Instant,
    },
    Pending(Shared),
}

/// Entries unused this long are dropped.
const UNUSED: Duration = Duration::from_secs(30);

impl Default for Cache {
    fn default() -> Self {
        Cache::new()
    }
}

impl Cache {
    pub fn new() -> Cache {
        Cache {
            client: Client::new(),
            turn: AtomicUsize::new(0),
            entries: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The addresses of `host`, or the nginx error code (3 for NXDOMAIN).
    pub async fn lookup(&self, host: &str, r: &Resolver) -> Result<Vec<IpAddr>, u16> {
        let key = host.to_ascii_lowercase();
        loop {
            let mut wait: Option<Shared> = None;
            let mine = {
                let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                map.retain(|_, e| match e {
                    Entry::Ready { until, used, .. } => *until > now && now - *used < UNUSED,
                    // A lookup whose request went away is forgotten.
                    Entry::Pending(rx) => rx.has_changed().is_ok(),
                });
                match map.get_mut(&key) {
                    Some(Entry::Ready { addrs, used, .. }) => {
                        *used = now;
                        let mut out = addrs.clone();
                        if out.len() > 1 {
                            let k = self.turn.fetch_add(1, Ordering::Relaxed) % out.len();
                            out.rotate_left(k);
                        }
                        return Ok(out);
                    }
                    Some(Entry::Pending(rx)) => {
                        wait = Some(rx.clone());
                        None
                    }
                    None => {
                        let (tx, rx) = tokio::sync::watch::channel(None);
                        map.insert(key.clone(), Entry::Pending(rx));
                        Some(tx)
                    }
                }
            };
            if let Some(mut rx) = wait {
                // Another request is looking it up; a dropped sender (that
                // request went away) means: look again.
                let done = rx
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|v| v.clone());
                match done {
                    Some(result) => return result,
                    None => continue,
                }
            }
            let Some(tx) = mine else { continue };
            let result = match self.client.resolve(&key, r).await {
                Ok(Answer::Addrs { addrs, valid }) => Ok((addrs, valid)),
                Ok(Answer::NxDomain) => Err(3),
                Err(e) => Err(e.code()),
            };
            let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            let out = match result {
                Ok((addrs, valid)) => {
                    let now = Instant::now();
                    map.insert(
                        key.clone(),
                        Entry::Ready {
                            addrs: addrs.clone(),
                            until: now + valid,
                            used: now,
                        },
                    );
                    Ok(addrs)
                }
                Err(code) => {
                    map.remove(&key);
                    Err(code)
                }
            };
            let _ = tx.send(Some(out.clone()));
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Record;
    use hickory_proto::rr::rdata::{A, AAAA, CNAME};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).expect("name")
    }

    fn reply(code: ResponseCode, records: Vec<Record>) -> Message {
        let mut m = Message::new();
        m.set_message_type(MessageType::Response)
            .set_response_code(code);
        for r in records {
            m.add_answer(r);
        }
        m
    }

    fn a(ip: &str, ttl: u32) -> Record {
        Record::from_rdata(name("x.test."), ttl, RData::A(A(ip.parse().expect("ip"))))
    }

    fn aaaa(ip: &str, ttl: u32) -> Record {
        Record::from_rdata(
            name("x.test."),
            ttl,
            RData::AAAA(AAAA(ip.parse().expect("ip"))),
        )
    }

    fn cname(to: &str, ttl: u32) -> Record {
        Record::from_rdata(name("x.test."), ttl, RData::CNAME(CNAME(name(to))))
    }

    #[test]
    fn nginx_classification() {
        let four = classify(
            &reply(
                ResponseCode::NoError,
                vec![a("10.0.0.1", 30), a("10.0.0.2", 10)],
            ),
            RecordType::A,
        );
        let six = classify(
            &reply(ResponseCode::NoError, vec![aaaa("::1", 5)]),
            RecordType::AAAA,
        );
        let empty = classify(&reply(ResponseCode::NoError, vec![]), RecordType::AAAA);
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        // A first, then AAAA; the smallest TTL.
        assert_eq!(
            combine(&[four.clone(), six.clone()]),
            Combined::Addrs(vec![ip("10.0.0.1"), ip("10.0.0.2"), ip("::1")], Some(5))
        );
        // One family empty: the other's addresses.
        assert_eq!(
            combine(&[four.clone(), empty.clone()]),
            Combined::Addrs(vec![ip("10.0.0.1"), ip("10.0.0.2")], Some(10))
        );
        // NOERROR with nothing in both: NXDOMAIN.
        assert_eq!(combine(&[empty.clone(), empty.clone()]), Combined::NxDomain);
        // An error in either family fails the lookup, even with addresses.
        let fail = classify(&reply(ResponseCode::ServFail, vec![]), RecordType::AAAA);
        assert_eq!(combine(&[four.clone(), fail]), Combined::Error(2));
        let refused = classify(&reply(ResponseCode::Refused, vec![]), RecordType::A);
        assert_eq!(combine(&[refused, empty.clone()]), Combined::Error(5));
        assert_eq!(
            combine(&[
                classify(&reply(ResponseCode::NXDomain, vec![]), RecordType::A),
                empty
            ]),
            Combined::NxDomain
        );
        // CNAME with addresses: the addresses; CNAME alone: chase it.
        let with = classify(
            &reply(
                ResponseCode::NoError,
                vec![cname("y.test.", 60), a("10.0.0.9", 60)],
            ),
            RecordType::A,
        );
        assert_eq!(
            combine(&[with]),
            Combined::Addrs(vec![ip("10.0.0.9")], Some(60))
        );
        let only = classify(
            &reply(ResponseCode::NoError, vec![cname("y.test.", 7)]),
            RecordType::A,
        );
        assert_eq!(combine(&[only]), Combined::Cname(name("y.test."), Some(7)));
        assert_eq!(DnsError::Server(3).to_string(), "3: Host not found");
        // SRV: sorted by priority; the lowest gives primaries, weight 0 is 1.
        use hickory_proto::rr::rdata::SRV;
        let srv = |p, w, port, t: &str| {
            Record::from_rdata(
                name("_http._tcp.x.test."),
                30,
                RData::SRV(SRV::new(p, w, port, name(t))),
            )
        };
        let SrvReply::Records(recs, ttl) = classify_srv(&reply(
            ResponseCode::NoError,
            vec![srv(20, 5, 81, "b.test."), srv(10, 0, 80, "a.test.")],
        )) else {
            panic!("records");
        };
        assert_eq!(ttl, Some(30));
        assert_eq!(recs[0].target, name("a.test."));
        let r = Resolver {
            servers: Vec::new(),
            valid: None,
            ipv4: true,
            ipv6: true,
            timeout: Duration::from_secs(1),
        };
        let ok = |a: &str| {
            Ok(Answer::Addrs {
                addrs: vec![ip(a)],
                valid: Duration::from_secs(5),
            })
        };
        assert_eq!(
            srv_peers(&recs, &[ok("10.0.0.1"), ok("10.0.0.2")], ttl, &r),
            Ok(SrvAnswer::Peers {
                peers: vec![
                    SrvPeer {
                        addr: ip("10.0.0.1"),
                        port: 80,
                        weight: 1,
                        backup: false
                    },
                    SrvPeer {
                        addr: ip("10.0.0.2"),
                        port: 81,
                        weight: 5,
                        backup: true
                    },
                ],
                valid: Duration::from_secs(5),
            })
        );
        // Some targets failed: the others' addresses.
        assert!(matches!(
            srv_peers(&recs, &[Err(DnsError::Timeout), ok("10.0.0.2")], ttl, &r),
            Ok(SrvAnswer::Peers { .. })
        ));
        // None answered: NXDOMAIN if one was, else the first error.
        assert_eq!(
            srv_peers(
                &recs,
                &[Err(DnsError::Server(2)), Ok(Answer::NxDomain)],
                ttl,
                &r
            ),
            Ok(SrvAnswer::NxDomain)
        );
        assert_eq!(
            srv_peers(
                &recs,
                &[Err(DnsError::Server(2)), Err(DnsError::Timeout)],
                ttl,
                &r
            ),
            Err(DnsError::Server(2))
        );
        assert_eq!(
            classify_srv(&reply(ResponseCode::NoError, vec![])),
            SrvReply::NxDomain
        );
        assert_eq!(DnsError::Timeout.to_string(), "110: Operation timed out");
    }
}
