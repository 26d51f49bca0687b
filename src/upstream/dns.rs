//! A DNS client with nginx's resolver rules: one A and one AAAA query per
//! lookup (as `ipv4=`/`ipv6=` allow), sent together to the servers in turn,
//! resent every 5 s until `resolver_timeout`, over TCP when the UDP reply is
//! truncated; replies checked for ID, question and shape; nginx's
//! classification (NOERROR with no address in either family is NXDOMAIN; a
//! server error in either family fails the lookup); a CNAME-only answer is
//! chased (up to 50 links). No hosts file, no search list, no cache: the
//! caller schedules lookups. A reply nginx would ignore (malformed, another
//! question or ID, a record of the other address family) is logged and
//! ignored, so the lookup ends as a timeout and the peers stay. TTLs are made
//! sane here (top bit set: 0; at most a day). Messages are built and parsed
//! by hickory-proto; the checks (`dns::reply`) and the transport are ours.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conf::model::Resolver;
use crate::log::Level;

mod cache;
mod reply;
pub use cache::Cache;
use reply::{host, read_reply};

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

/// The longest a TTL is believed, in seconds: one day. A TTL of years would
/// pin a name's peers: it would never be asked again, and reloads, binary
/// upgrades and state files would carry the expiry on.
pub const MAX_TTL: u32 = 86_400;

/// A record's TTL as it is used: 0 when its top bit is set (RFC 2181 §8;
/// nginx reads it as a signed number and takes a negative one as 0), and at
/// most `MAX_TTL`.
pub fn sane_ttl(ttl: u32) -> u32 {
    if ttl & 0x8000_0000 != 0 {
        0
    } else {
        ttl.min(MAX_TTL)
    }
}

/// How long an answer is valid: `valid=` when set, else its smallest TTL.
pub fn validity(ttl: Option<u32>, valid: Option<Duration>) -> Duration {
    valid.unwrap_or_else(|| Duration::from_secs(u64::from(sane_ttl(ttl.unwrap_or(0)))))
}

/// An expiry (monotonic ms) read from elsewhere (an older generation's or
/// binary's zone, a state file) made no later than an answer looked up at
/// `now` could give: `now` + `valid=`, or `now` + `MAX_TTL` without it.
pub fn clamp_expiry(expires: u64, now: u64, valid: Option<Duration>) -> u64 {
    let longest = valid.unwrap_or(Duration::from_secs(u64::from(MAX_TTL)));
    expires.min(now.saturating_add(u64::try_from(longest.as_millis()).unwrap_or(u64::MAX)))
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
    /// Records, but none of the asked family and no CNAME: not an empty
    /// answer, so not NXDOMAIN.
    Unusable,
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
            ttl = min_ttl(ttl, Some(sane_ttl(r.ttl())));
        }
    }
    if addrs.is_empty() && cname.is_none() && !msg.answers().is_empty() {
        return Reply::Unusable;
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
/// with no address anywhere is chased; nothing at all is NXDOMAIN, but
/// nothing usable in a reply with records is no answer (nginx answers the
/// lookup or keeps waiting, depending on which reply came first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Combined {
    Addrs(Vec<IpAddr>, Option<u32>),
    Cname(Name, Option<u32>),
    NxDomain,
    Error(u16),
    Unusable,
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
        None if replies.contains(&Reply::Unusable) => Combined::Unusable,
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

    /// The servers a lookup asks, from the next one in turn: an unanswered
    /// query goes on to the next (nginx's resend).
    fn servers<'a>(&self, r: &'a Resolver) -> Option<Servers<'a>> {
        if r.servers.is_empty() {
            return None;
        }
        let first = self.next.fetch_add(1, Ordering::Relaxed) % r.servers.len();
        Some(Servers {
            list: &r.servers,
            first,
        })
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
            let servers = self.servers(r).ok_or(DnsError::Timeout)?;
            let queries = families.iter().map(|&f| query(servers, &name, f, deadline));
            let replies: Vec<Reply> = futures_join(queries).await?;
            let shorter = |t: Option<u32>| min_ttl(valid, t);
            match combine(&replies) {
                Combined::Error(c) => return Err(DnsError::Server(c)),
                Combined::NxDomain => return Ok(Answer::NxDomain),
                // As a reply ignored: the lookup times out, the peers stay.
                Combined::Unusable => {
                    tokio::time::sleep_until(deadline.into()).await;
                    return Err(DnsError::Timeout);
                }
                Combined::Addrs(addrs, ttl) => {
                    let valid = validity(shorter(ttl), r.valid);
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
        ttl = min_ttl(ttl, Some(sane_ttl(r.ttl())));
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
    let mut valid = validity(srv_ttl, r.valid);
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
            let servers = self.servers(r).ok_or(DnsError::Timeout)?;
            let (msg, _) = exchange(servers, &name, RecordType::SRV, deadline).await?;
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
    let id = super::random::next_u64() as u16;
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(name.clone(), family));
    (id, m.to_vec().unwrap_or_default())
}

/// A lookup's name servers, and the one it asks first.
#[derive(Clone, Copy)]
struct Servers<'a> {
    list: &'a [SocketAddr],
    first: usize,
}

/// One A or AAAA question.
async fn query(
    servers: Servers<'_>,
    name: &Name,
    family: RecordType,
    deadline: Instant,
) -> Result<Reply, DnsError> {
    let (msg, server) = exchange(servers, name, family, deadline).await?;
    let reply = classify(&msg, family);
    if reply == Reply::Unusable {
        crate::log!(
            Level::Error,
            "no {} or CNAME types in DNS response for {}, resolver: {}",
            family,
            host(name),
            server
        );
    }
    Ok(reply)
}

/// A reply read and checked; what is wrong with it is logged.
fn checked(
    buf: &[u8],
    id: u16,
    name: &Name,
    family: RecordType,
    server: SocketAddr,
) -> Option<Message> {
    match read_reply(buf, id, name, family) {
        Ok((msg, skipped)) => {
            for t in skipped {
                crate::log!(
                    Level::Error,
                    "unexpected RR type {} in DNS response for {}, resolver: {}",
                    t,
                    host(name),
                    server
                );
            }
            Some(msg)
        }
        Err(why) => {
            crate::log!(Level::Error, "{}, resolver: {}", why, server);
            None
        }
    }
}

/// One question over UDP (TCP when the reply is truncated): the reply and
/// the server that gave it. Each server in turn, from `first`: one that
/// does not answer within the resend time, or fails at once (ICMP
/// unreachable), gives way to the next, as nginx resends a query to its
/// next server; once every one has failed at once, the lookup waits for
/// the resend time before it goes round again.
async fn exchange(
    servers: Servers<'_>,
    name: &Name,
    family: RecordType,
    deadline: Instant,
) -> Result<(Message, SocketAddr), DnsError> {
    let n = servers.list.len();
    let mut failed_at_once = 0;
    for i in servers.first.. {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let server = servers.list[i % n];
        let until = (now + RESEND).min(deadline);
        match exchange_one(server, name, family, until, deadline).await {
            Ok(msg) => return Ok((msg, server)),
            Err(Quiet::Failed) => {
                failed_at_once += 1;
                if failed_at_once >= n {
                    failed_at_once = 0;
                    tokio::time::sleep_until(until.into()).await;
                }
            }
            Err(Quiet::Silent) => failed_at_once = 0,
            Err(Quiet::Ended(e)) => return Err(e),
        }
    }
    Err(DnsError::Timeout)
}

/// Why one server gave no reply.
enum Quiet {
    /// Failed at once (refused, unreachable).
    Failed,
    /// Nothing before the resend time.
    Silent,
    /// The lookup ends (a TCP exchange after a truncated reply failed).
    Ended(DnsError),
}

/// One question to one server over UDP until `until` (TCP, bounded by
/// `deadline`, when the reply is truncated).
async fn exchange_one(
    server: SocketAddr,
    name: &Name,
    family: RecordType,
    until: Instant,
    deadline: Instant,
) -> Result<Message, Quiet> {
    let (id, bytes) = request(name, family);
    let bind: SocketAddr = if server.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = tokio::net::UdpSocket::bind(bind)
        .await
        .map_err(|_| Quiet::Failed)?;
    sock.connect(server).await.map_err(|_| Quiet::Failed)?;
    let mut buf = vec![0u8; 4096];
    let failed = |what: &str, e: std::io::Error| {
        crate::log!(
            Level::Error,
            "{}() failed ({}) while resolving, resolver: {}",
            what,
            crate::log::errno_text(&e),
            server
        );
        Quiet::Failed
    };
    sock.send(&bytes).await.map_err(|e| failed("send", e))?;
    loop {
        let wait = until.saturating_duration_since(Instant::now());
        let n = match tokio::time::timeout(wait, sock.recv(&mut buf)).await {
            Ok(Ok(n)) => n,
            // ICMP unreachable and the like: the next server.
            Ok(Err(e)) => return Err(failed("recv", e)),
            Err(_) => return Err(Quiet::Silent),
        };
        // Anything else is ignored: the query waits for its reply.
        let Some(msg) = checked(&buf[..n], id, name, family, server) else {
            continue;
        };
        if msg.truncated() {
            return exchange_tcp(server, name, family, deadline)
                .await
                .map_err(Quiet::Ended);
        }
        return Ok(msg);
    }
}

/// One question over TCP. A reply that is ignored ends the query as a
/// timeout: the connection gives no other.
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
        Some(buf)
    };
    match tokio::time::timeout(wait, exchange).await {
        Ok(Some(buf)) => checked(&buf, id, name, family, server).ok_or(DnsError::Timeout),
        _ => Err(DnsError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Record;
    use hickory_proto::rr::rdata::{A, AAAA, CNAME};

    pub(super) fn name(s: &str) -> Name {
        Name::from_ascii(s).expect("name")
    }

    pub(super) fn reply(code: ResponseCode, records: Vec<Record>) -> Message {
        let mut m = Message::new();
        m.set_message_type(MessageType::Response)
            .set_response_code(code);
        for r in records {
            m.add_answer(r);
        }
        m
    }

    pub(super) fn a(ip: &str, ttl: u32) -> Record {
        Record::from_rdata(name("x.test."), ttl, RData::A(A(ip.parse().expect("ip"))))
    }

    pub(super) fn aaaa(ip: &str, ttl: u32) -> Record {
        Record::from_rdata(
            name("x.test."),
            ttl,
            RData::AAAA(AAAA(ip.parse().expect("ip"))),
        )
    }

    pub(super) fn cname(to: &str, ttl: u32) -> Record {
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

    #[test]
    fn ttl_rules() {
        // RFC 2181 §8: the top bit set means 0; a day at most.
        assert_eq!(sane_ttl(0xFFFF_FFFF), 0);
        assert_eq!(sane_ttl(0x8000_0000), 0);
        assert_eq!(sane_ttl(0x7FFF_FFFF), MAX_TTL);
        assert_eq!(sane_ttl(86_401), 86_400);
        assert_eq!(sane_ttl(60), 60);
        let s = Duration::from_secs;
        assert_eq!(validity(Some(0x7FFF_FFFF), None), s(86_400));
        assert_eq!(validity(Some(0x8000_0000), None), s(0));
        assert_eq!(validity(None, None), s(0));
        // valid= replaces the TTL, whatever it is.
        assert_eq!(validity(Some(0xFFFF_FFFF), Some(s(1))), s(1));
        assert_eq!(validity(Some(30), Some(s(3600 * 48))), s(3600 * 48));
        // An expiry carried in (year 2163 in ms) comes back to a day, or valid=.
        let now = 1_000_000;
        assert_eq!(clamp_expiry(u64::MAX, now, None), now + 86_400_000);
        assert_eq!(clamp_expiry(now + 5_000, now, None), now + 5_000);
        assert_eq!(clamp_expiry(u64::MAX, now, Some(s(1))), now + 1_000);
        assert_eq!(clamp_expiry(now - 1, now, Some(s(1))), now - 1);
        // The classification uses the sane TTLs.
        let huge = classify(
            &reply(
                ResponseCode::NoError,
                vec![a("10.0.0.1", 0xFFFF_FFFF), a("10.0.0.2", 0x7FFF_FFFF)],
            ),
            RecordType::A,
        );
        assert!(matches!(huge, Reply::Records { ttl: Some(0), .. }));
        let long = classify(
            &reply(ResponseCode::NoError, vec![a("10.0.0.1", 0x7FFF_FFFF)]),
            RecordType::A,
        );
        assert!(matches!(
            long,
            Reply::Records {
                ttl: Some(86_400),
                ..
            }
        ));
    }
}
