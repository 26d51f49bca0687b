//! Reading a DNS reply as nginx does, before anything in it is used: the
//! bytes parse (else why not, in nginx's words: "short DNS response",
//! "compression pointers loop", ...), the reply answers our question and ID,
//! and its answer section holds nothing nginx rejects. Pure functions; the
//! transport in `dns` logs what they return and ignores such replies.

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

/// The host of a name, as logs show it.
pub(crate) fn host(name: &Name) -> String {
    name.to_ascii().trim_end_matches('.').to_string()
}

/// A reply's bytes, read and checked as nginx does (pure): the message and
/// the types of the records skipped in its answer, or why it is ignored, in
/// nginx's words. A truncated reply is not screened: it is asked again over
/// TCP.
pub(crate) fn read_reply(
    buf: &[u8],
    id: u16,
    name: &Name,
    family: RecordType,
) -> Result<(Message, Vec<u16>), String> {
    let msg = Message::from_vec(buf).map_err(|_| malformed(buf).to_string())?;
    if let Some(why) = mismatch(&msg, id, name, family) {
        return Err(why);
    }
    if msg.truncated() {
        return Ok((msg, Vec::new()));
    }
    let skipped = screen(&msg, family).map_err(|why| format!("{why} for {}", host(name)))?;
    Ok((msg, skipped))
}

/// Is it a reply to our question (pure)? nginx ignores any other.
fn mismatch(msg: &Message, id: u16, name: &Name, family: RecordType) -> Option<String> {
    if msg.message_type() != MessageType::Response {
        return Some("invalid DNS response".into());
    }
    let [q] = msg.queries() else {
        return Some("invalid number of questions in DNS response".into());
    };
    if q.query_type() != family || q.query_class() != DNSClass::IN || q.name() != name {
        return Some(format!("unexpected response for {}", host(q.name())));
    }
    if msg.id() != id {
        return Some(format!(
            "wrong ident {} response for {}, expect {}",
            msg.id(),
            host(name),
            id
        ));
    }
    None
}

/// The answer section of a NOERROR reply for `family` (pure), as nginx's
/// checks: a record of another class, an address of the other family or a
/// record of our types without data makes the reply ignored; CNAME and DNAME
/// are expected; other types are skipped (and returned, to be logged).
fn screen(msg: &Message, family: RecordType) -> Result<Vec<u16>, String> {
    if msg.response_code() != ResponseCode::NoError {
        return Ok(Vec::new());
    }
    let mut skipped = Vec::new();
    let mut usable = false;
    for r in msg.answers() {
        if r.dns_class() != DNSClass::IN {
            return Err(format!("unexpected RR class {}", u16::from(r.dns_class())));
        }
        let t = r.record_type();
        match r.data() {
            RData::A(_) if family == RecordType::A => usable = true,
            RData::AAAA(_) if family == RecordType::AAAA => usable = true,
            RData::SRV(_) if family == RecordType::SRV => usable = true,
            RData::CNAME(_) => usable = true,
            RData::A(_) if family == RecordType::AAAA => {
                return Err("unexpected A record in DNS response".into());
            }
            RData::AAAA(_) if family == RecordType::A => {
                return Err("unexpected AAAA record in DNS response".into());
            }
            _ if matches!(
                t,
                RecordType::A | RecordType::AAAA | RecordType::CNAME | RecordType::SRV
            ) =>
            {
                return Err(format!("invalid {t} record in DNS response"));
            }
            // DNAME (39) comes with the CNAME that is followed.
            _ if u16::from(t) == 39 => {}
            _ => skipped.push(u16::from(t)),
        }
    }
    // An SRV reply is alone: nothing usable in it is no reply. (An A or
    // AAAA reply is weighed with the other family's: `Reply::Unusable`.)
    if family == RecordType::SRV && !usable && !msg.answers().is_empty() {
        return Err("no SRV or CNAME types in DNS response".into());
    }
    Ok(skipped)
}

/// Why bytes hickory could not read are no DNS message (pure), in nginx's
/// words: a walk over the header, names and records.
fn malformed(buf: &[u8]) -> &'static str {
    const SHORT: &str = "short DNS response";
    if buf.len() < 12 {
        return SHORT;
    }
    let count = |i: usize| usize::from(u16::from_be_bytes([buf[i], buf[i + 1]]));
    let walk = || -> Result<(), &'static str> {
        let mut pos = 12;
        for _ in 0..count(4) {
            pos = skip_name(buf, pos)? + 4;
        }
        for _ in 0..count(6) + count(8) + count(10) {
            pos = skip_name(buf, pos)?;
            let fixed = buf.get(pos..pos + 10).ok_or(SHORT)?;
            let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
            let len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
            let (data, end) = (pos + 10, pos + 10 + len);
            if end > buf.len() {
                return Err(SHORT);
            }
            match (rtype, len) {
                (1, l) if l != 4 => return Err("invalid A record in DNS response"),
                (28, l) if l != 16 => return Err("invalid AAAA record in DNS response"),
                (5 | 39, _) => {
                    skip_name(buf, data)?;
                }
                (33, l) if l < 7 => return Err("invalid SRV record in DNS response"),
                (33, _) => {
                    skip_name(buf, data + 6)?;
                }
                _ => {}
            }
            pos = end;
        }
        if pos > buf.len() {
            return Err(SHORT);
        }
        Err("invalid DNS response")
    };
    walk().err().unwrap_or("invalid DNS response")
}

/// Where the name at `start` ends, or what is wrong with it: nginx follows at
/// most 128 labels and pointers.
fn skip_name(buf: &[u8], start: usize) -> Result<usize, &'static str> {
    let (mut p, mut end) = (start, None);
    for _ in 0..128 {
        let Some(&n) = buf.get(p) else {
            return Err(if end.is_some() {
                "name is out of response"
            } else {
                "short DNS response"
            });
        };
        match n & 0xc0 {
            0 if n == 0 => return Ok(end.unwrap_or(p + 1)),
            0 => p += 1 + usize::from(n),
            0xc0 => {
                let lo = *buf.get(p + 1).ok_or("short DNS response")?;
                end.get_or_insert(p + 2);
                p = usize::from(n & 0x3f) << 8 | usize::from(lo);
                if p >= buf.len() {
                    return Err("name is out of response");
                }
            }
            _ => return Err("invalid name in DNS response"),
        }
    }
    Err("compression pointers loop")
}

#[cfg(test)]
mod tests {
    use super::super::tests::{a, aaaa, cname, name, reply};
    use super::super::{
        Combined, MAX_TTL, Reply, classify, classify_srv, combine, sane_ttl, validity,
    };
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Record;
    use hickory_proto::rr::rdata::{A, AAAA};
    use std::net::IpAddr;
    use std::time::Duration;

    /// The bytes of a reply to (id, x.test., family) with these answers.
    fn wire(id: u16, q: &str, family: RecordType, code: ResponseCode, rs: Vec<Record>) -> Vec<u8> {
        let mut m = reply(code, rs);
        m.set_id(id).add_query(Query::query(name(q), family));
        m.to_vec().expect("encode")
    }

    fn read(buf: &[u8], family: RecordType) -> Result<(Message, Vec<u16>), String> {
        read_reply(buf, 7, &name("x.test."), family)
    }

    fn why(buf: &[u8], family: RecordType) -> String {
        read(buf, family).err().unwrap_or_default()
    }

    #[test]
    fn replies_nginx_ignores() {
        use hickory_proto::rr::rdata::TXT;
        let (v4, v6, ok) = (RecordType::A, RecordType::AAAA, ResponseCode::NoError);
        let good = wire(7, "x.test.", v4, ok, vec![a("10.0.0.1", 5)]);
        assert_eq!(read(&good, v4).map(|r| r.1), Ok(vec![]));
        // Another ID, question, type or section count.
        let other = wire(8, "x.test.", v4, ok, vec![a("10.0.0.1", 5)]);
        assert_eq!(
            why(&other, v4),
            "wrong ident 8 response for x.test, expect 7"
        );
        let other = wire(7, "y.test.", v4, ok, vec![a("10.0.0.1", 5)]);
        assert_eq!(why(&other, v4), "unexpected response for y.test");
        assert_eq!(why(&good, v6), "unexpected response for x.test");
        // A record of the other family: the reply is ignored.
        let mixed = wire(7, "x.test.", v4, ok, vec![a("10.0.0.1", 5), aaaa("::1", 5)]);
        assert_eq!(
            why(&mixed, v4),
            "unexpected AAAA record in DNS response for x.test"
        );
        let mixed = wire(7, "x.test.", v6, ok, vec![a("10.0.0.1", 5)]);
        assert_eq!(
            why(&mixed, v6),
            "unexpected A record in DNS response for x.test"
        );
        // Other types are skipped; with nothing else, the reply is ignored.
        let txt = Record::from_rdata(name("x.test."), 5, RData::TXT(TXT::new(vec!["t".into()])));
        let both = wire(7, "x.test.", v4, ok, vec![txt.clone(), a("10.0.0.1", 5)]);
        assert_eq!(read(&both, v4).map(|r| r.1), Ok(vec![16]));
        let only = wire(7, "x.test.", v4, ok, vec![txt.clone()]);
        let (msg, skipped) = read(&only, v4).expect("read");
        assert_eq!(skipped, vec![16]);
        // Not an empty answer: with no address in the other family either,
        // no answer at all (not NXDOMAIN); with one, that one.
        let only = classify(&msg, v4);
        assert_eq!(only, Reply::Unusable);
        let empty6 = classify(&reply(ok, vec![]), v6);
        assert_eq!(combine(&[only.clone(), empty6]), Combined::Unusable);
        let six = classify(&reply(ok, vec![aaaa("::1", 5)]), v6);
        assert!(matches!(combine(&[only, six]), Combined::Addrs(..)));
        let srv = wire(7, "x.test.", RecordType::SRV, ok, vec![txt]);
        assert_eq!(
            why(&srv, RecordType::SRV),
            "no SRV or CNAME types in DNS response for x.test"
        );
        let mut chaos = a("10.0.0.1", 5);
        chaos.set_dns_class(DNSClass::CH);
        let chaos = wire(7, "x.test.", v4, ok, vec![chaos]);
        assert_eq!(why(&chaos, v4), "unexpected RR class 3 for x.test");
        // An error rcode decides before the records.
        let nx = wire(
            7,
            "x.test.",
            v4,
            ResponseCode::NXDomain,
            vec![aaaa("::1", 5)],
        );
        assert!(read(&nx, v4).is_ok());
        // An A record without data.
        let mut empty = good.clone();
        let n = empty.len();
        empty[n - 6..n - 4].copy_from_slice(&[0, 0]);
        empty.truncate(n - 4);
        assert_eq!(
            why(&empty, v4),
            "invalid A record in DNS response for x.test"
        );
        // Malformed bytes, in nginx's words.
        assert_eq!(why(&good[..8], v4), "short DNS response");
        assert_eq!(why(&good[..good.len() - 2], v4), "short DNS response");
        assert_eq!(why(&good[..30], v4), "short DNS response");
        let mut long = good.clone();
        long[n - 5] = 5;
        long.push(0);
        assert_eq!(why(&long, v4), "invalid A record in DNS response");
        // The answer's name: a pointer to itself, and one past the end.
        let at = 12 + 8 + 4;
        let mut looped = good.clone();
        looped[at..at + 2].copy_from_slice(&[0xc0, at as u8]);
        assert_eq!(why(&looped, v4), "compression pointers loop");
        let mut past = good.clone();
        past[at..at + 2].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(why(&past, v4), "name is out of response");
    }

    use proptest::prelude::*;

    /// What a reply of these bytes gives, every way it can be read; only
    /// that it returns matters.
    fn read_all(buf: &[u8]) {
        for family in [RecordType::A, RecordType::AAAA, RecordType::SRV] {
            if let Ok((msg, _)) = read(buf, family) {
                let _ = combine(&[classify(&msg, family)]);
                let _ = classify_srv(&msg);
            }
        }
        let _ = malformed(buf);
        if let Ok(msg) = Message::from_vec(buf) {
            let _ = screen(&msg, RecordType::A);
            let _ = classify(&msg, RecordType::AAAA);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::proptest_cases(1000)))]

        #[test]
        fn any_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..600)) {
            read_all(&buf);
        }

        #[test]
        fn mutated_answers_never_panic(
            addrs in prop::collection::vec(any::<[u8; 4]>(), 1..8),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let rs = addrs
                .iter()
                .map(|o| Record::from_rdata(name("x.test."), 5, RData::A(A(std::net::Ipv4Addr::from(*o)))))
                .chain([cname("y.test.", 5)])
                .collect();
            let mut buf = wire(7, "x.test.", RecordType::A, ResponseCode::NoError, rs);
            for (at, byte) in flips {
                let i = at.index(buf.len());
                buf[i] = byte;
            }
            read_all(&buf);
            let n = cut.index(buf.len());
            read_all(&buf[..n]);
        }

        #[test]
        fn valid_answers_round_trip(
            v4 in prop::collection::vec((any::<[u8; 4]>(), any::<u32>()), 0..12),
            v6 in prop::collection::vec((any::<[u8; 16]>(), any::<u32>()), 0..12),
        ) {
            let four = v4
                .iter()
                .map(|(o, t)| Record::from_rdata(name("x.test."), *t, RData::A(A(std::net::Ipv4Addr::from(*o)))))
                .collect();
            let six = v6
                .iter()
                .map(|(o, t)| Record::from_rdata(name("x.test."), *t, RData::AAAA(AAAA(std::net::Ipv6Addr::from(*o)))))
                .collect();
            let ok = ResponseCode::NoError;
            let a_reply = wire(7, "x.test.", RecordType::A, ok, four);
            let aaaa_reply = wire(7, "x.test.", RecordType::AAAA, ok, six);
            let (m4, s4) = read(&a_reply, RecordType::A).expect("A reply");
            let (m6, s6) = read(&aaaa_reply, RecordType::AAAA).expect("AAAA reply");
            prop_assert!(s4.is_empty() && s6.is_empty());
            let got = combine(&[classify(&m4, RecordType::A), classify(&m6, RecordType::AAAA)]);
            let want: Vec<IpAddr> = v4
                .iter()
                .map(|(o, _)| IpAddr::from(*o))
                .chain(v6.iter().map(|(o, _)| IpAddr::from(*o)))
                .collect();
            let ttl = v4.iter().map(|r| r.1).chain(v6.iter().map(|r| r.1)).map(sane_ttl).min();
            if want.is_empty() {
                prop_assert_eq!(got, Combined::NxDomain);
            } else {
                prop_assert_eq!(got, Combined::Addrs(want, ttl));
                let valid = validity(ttl, None);
                prop_assert!(valid <= Duration::from_secs(u64::from(MAX_TTL)));
            }
        }
    }
}
