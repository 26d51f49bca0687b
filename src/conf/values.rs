//! nginx's value syntaxes: sizes (`512`, `8k`, `1m`), offsets (sizes that may
//! also be `2g`), times (`500ms`, `30s`, `1h 30m`, bare numbers are seconds),
//! flags (`on`/`off`), addresses (`host:port`, `[v6]:port`, `unix:path`). Each refuses what nginx's parser refuses
//! (`ngx_parse_size`, `ngx_parse_offset`, `ngx_parse_time`), overflow
//! included. Pure functions.

use std::time::Duration;

/// The largest size or offset nginx accepts (`NGX_MAX_SIZE_T_VALUE` and
/// `NGX_MAX_OFF_T_VALUE` on a 64-bit system).
const MAX_SIZE: u64 = i64::MAX as u64;

/// Digits only (no sign, no spaces), as `ngx_atosz` reads them.
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok()
}

fn scaled(s: &str, units: &[(u8, u64)]) -> Option<u64> {
    let last = *s.as_bytes().last()?;
    let (num, scale) = match units.iter().find(|(u, _)| last.to_ascii_lowercase() == *u) {
        Some((_, scale)) => (&s[..s.len() - 1], *scale),
        None => (s, 1),
    };
    let n = digits(num)?;
    if n > MAX_SIZE / scale {
        return None;
    }
    Some(n * scale)
}

/// A size (`ngx_parse_size`): a number with an optional `k`/`K` or `m`/`M`
/// suffix. Like nginx, `g` is not a size unit (see [`parse_offset`]).
pub fn parse_size(s: &str) -> Option<u64> {
    scaled(s, &[(b'k', 1 << 10), (b'm', 1 << 20)])
}

/// An offset (`ngx_parse_offset`): a size that may also end in `g`/`G`.
pub fn parse_offset(s: &str) -> Option<u64> {
    scaled(s, &[(b'k', 1 << 10), (b'm', 1 << 20), (b'g', 1 << 30)])
}

/// A time (`ngx_parse_time`): parts `NUMBER UNIT`, optionally separated by
/// spaces, with units in strictly decreasing order: `y` (365 d), `M` (30 d),
/// `w`, `d`, `h`, `m`, `s`, `ms`; a last number without a unit counts as
/// seconds. `allow_ms` says the directive keeps milliseconds (nginx's
/// `is_sec` off): then `ms` is allowed, `y` and `M` are not, and the total
/// must stay within 2^31-1 ms (about 24.8 days). Otherwise the value is in
/// whole seconds: `ms` is refused and the total must stay within 2^31-1 s.
pub fn parse_time(s: &str, allow_ms: bool) -> Option<Duration> {
    const MAX: u64 = i32::MAX as u64;
    // Steps in nginx's order; a unit must come after every unit used so far.
    const START: u8 = 0;
    const MONTH: u8 = 2;
    const SEC: u8 = 7;
    const MSEC: u8 = 8;
    const LAST: u8 = 9;
    // The unit everything is counted in: ms, or s for whole-second values.
    let base: u64 = if allow_ms { 1000 } else { 1 };
    let mut step = if allow_ms { MONTH } else { START };
    let b = s.as_bytes();
    let mut i = 0;
    let mut value: u64 = 0;
    let mut valid = false;
    let mut total: u64 = 0;
    while i < b.len() {
        let c = b[i];
        i += 1;
        if c.is_ascii_digit() {
            value = value.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            valid = true;
            continue;
        }
        // (step, seconds per unit); ms is handled apart.
        let (next, secs) = match c {
            b'y' => (1, 365 * 86_400),
            b'M' => (MONTH, 30 * 86_400),
            b'w' => (3, 7 * 86_400),
            b'd' => (4, 86_400),
            b'h' => (5, 3_600),
            b'm' if b.get(i) == Some(&b's') => {
                i += 1;
                (MSEC, 0)
            }
            b'm' => (6, 60),
            b's' => (SEC, 1),
            b' ' => (LAST, 1),
            _ => return None,
        };
        // `y` may only come first; a space may only follow a unit above `s`.
        let refused = match next {
            1 => step > START,
            LAST => step >= SEC,
            MSEC => !allow_ms || step >= MSEC,
            _ => step >= next,
        };
        if refused {
            return None;
        }
        step = next;
        let (scale, max) = if next == MSEC {
            (1, MAX)
        } else {
            (secs * base, MAX / secs / base)
        };
        if value > max {
            return None;
        }
        total = total.checked_add(value * scale)?;
        if total > MAX {
            return None;
        }
        value = 0;
        while b.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    if !valid {
        return None;
    }
    // A trailing bare number is seconds; nginx does not bound it, we do.
    total = total.checked_add(value.checked_mul(base)?)?;
    if total > MAX {
        return None;
    }
    Some(if allow_ms {
        Duration::from_millis(total)
    } else {
        Duration::from_secs(total)
    })
}

/// `on` or `off`.
pub fn parse_flag(s: &str) -> Option<bool> {
    match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// A `host[:port]` split as nginx splits a URL's address part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPort<'a> {
    /// The host as written: an IPv6 literal keeps its brackets (`[::1]`).
    pub written: &'a str,
    /// The host without the brackets of an IPv6 literal (`::1`).
    pub host: &'a str,
    /// None when the text has no port.
    pub port: Option<u16>,
}

/// Why a `host:port` was refused; each caller words its own message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPortError {
    /// Not digits, or outside 1..65535 (nginx's "invalid port").
    InvalidPort,
    /// `[` without `]`, or something other than `:port` after the `]`.
    InvalidIpv6,
}

/// A port as nginx reads one: digits only (no sign), 1 to 65535.
pub fn parse_port(s: &str) -> Option<u16> {
    digits(s)
        .filter(|p| (1..=u64::from(u16::MAX)).contains(p))
        .and_then(|p| u16::try_from(p).ok())
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`. The port is after the last
/// colon of an unbracketed host. The host itself is not checked here: the
/// caller resolves it or parses it as an address. `unix:` paths are the
/// caller's (their syntax differs between `listen`, `server` and `proxy_pass`).
pub fn split_host_port(text: &str) -> Result<HostPort<'_>, HostPortError> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(HostPortError::InvalidIpv6)?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(parse_port(p).ok_or(HostPortError::InvalidPort)?),
            None if after.is_empty() => None,
            None => return Err(HostPortError::InvalidIpv6),
        };
        return Ok(HostPort {
            written: &text[..host.len() + 2],
            host,
            port,
        });
    }
    match text.rsplit_once(':') {
        Some((host, p)) => Ok(HostPort {
            written: host,
            host,
            port: Some(parse_port(p).ok_or(HostPortError::InvalidPort)?),
        }),
        None => Ok(HostPort {
            written: text,
            host: text,
            port: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("8k"), Some(8192));
        assert_eq!(parse_size("8K"), Some(8192));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("k"), None);
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("+1"), None);
        assert_eq!(parse_size(" 1"), None);
        assert_eq!(parse_size(""), None);
        // nginx's ngx_parse_size has no `g`.
        assert_eq!(parse_size("2G"), None);
        assert_eq!(parse_size("1000g"), None);
        // Bounded by NGX_MAX_SIZE_T_VALUE before scaling, as nginx bounds it.
        assert_eq!(parse_size("9223372036854775807"), Some(i64::MAX as u64));
        assert_eq!(parse_size("9223372036854775808"), None);
        assert_eq!(
            parse_size("9007199254740991k"),
            Some(9_007_199_254_740_991 << 10)
        );
        assert_eq!(parse_size("9007199254740992k"), None);
        assert_eq!(parse_size("8796093022207m"), Some(8_796_093_022_207 << 20));
        assert_eq!(parse_size("8796093022208m"), None);
        assert_eq!(parse_size("99999999999999999999999999"), None);
    }

    #[test]
    fn offsets() {
        assert_eq!(parse_offset("2G"), Some(2 << 30));
        assert_eq!(parse_offset("1m"), Some(1 << 20));
        assert_eq!(parse_offset("8589934591g"), Some(8_589_934_591 << 30));
        assert_eq!(parse_offset("8589934592g"), None);
        assert_eq!(parse_offset("1t"), None);
        assert_eq!(parse_offset("g"), None);
    }

    #[test]
    fn times() {
        let ms = |s| parse_time(s, true).map(|d| d.as_millis() as u64);
        let secs = |s| parse_time(s, false).map(|d| d.as_secs());
        assert_eq!(ms("30"), Some(30_000));
        assert_eq!(ms("30s"), Some(30_000));
        assert_eq!(ms("500ms"), Some(500));
        assert_eq!(ms("1h30m"), Some(5_400_000));
        assert_eq!(ms("1h 30m"), Some(5_400_000));
        assert_eq!(ms("1d2h3m4s5ms"), Some(93_784_005));
        assert_eq!(ms("1w"), Some(604_800_000));
        assert_eq!(ms("1m30"), Some(90_000));
        // nginx takes a trailing number after any unit as seconds.
        assert_eq!(ms("1s5"), Some(6_000));
        assert_eq!(ms("30m1h"), None);
        assert_eq!(ms("1s1s"), None);
        assert_eq!(ms("1msms"), None);
        assert_eq!(ms("abc"), None);
        assert_eq!(ms("10x"), None);
        assert_eq!(ms("-1"), None);
        assert_eq!(ms(""), None);
        assert_eq!(ms(" "), None);
        // Millisecond values: no years or months, at most 2^31-1 ms.
        assert_eq!(ms("1y"), None);
        assert_eq!(ms("68y"), None);
        assert_eq!(ms("1M"), None);
        assert_eq!(ms("24d"), Some(24 * 86_400_000));
        assert_eq!(ms("25d"), None);
        assert_eq!(ms("3w"), Some(3 * 604_800_000));
        assert_eq!(ms("4w"), None);
        assert_eq!(ms("2147483647ms"), Some(2_147_483_647));
        assert_eq!(ms("2147483648ms"), None);
        assert_eq!(ms("2147483"), Some(2_147_483_000));
        assert_eq!(ms("2147484"), None);
        assert_eq!(ms("24d23h59m59s"), None);
        assert_eq!(ms("99999999999999999999999"), None);
        // Second values: no ms, years and months allowed, at most 2^31-1 s.
        assert_eq!(parse_time("500ms", false), None);
        assert_eq!(secs("5s"), Some(5));
        assert_eq!(secs("1y"), Some(365 * 86_400));
        assert_eq!(secs("1M"), Some(30 * 86_400));
        assert_eq!(secs("1y1M"), Some(395 * 86_400));
        assert_eq!(secs("1M1y"), None);
        assert_eq!(secs("68y"), Some(68 * 365 * 86_400));
        assert_eq!(secs("69y"), None);
        assert_eq!(secs("2147483647"), Some(2_147_483_647));
        assert_eq!(secs("2147483648"), None);
    }

    #[test]
    fn flags() {
        assert_eq!(parse_flag("on"), Some(true));
        assert_eq!(parse_flag("off"), Some(false));
        assert_eq!(parse_flag("yes"), None);
    }

    #[test]
    fn ports_as_nginx_reads_them() {
        assert_eq!(parse_port("80"), Some(80));
        assert_eq!(parse_port("65535"), Some(65535));
        for bad in [
            "0",
            "65536",
            "+80",
            "-1",
            " 80",
            "",
            "8o",
            "99999999999999999999",
        ] {
            assert_eq!(parse_port(bad), None, "{bad}");
        }
    }

    #[test]
    fn host_and_port() {
        let hp = |written, host, port| {
            Ok(HostPort {
                written,
                host,
                port,
            })
        };
        assert_eq!(split_host_port("a.test"), hp("a.test", "a.test", None));
        assert_eq!(
            split_host_port("a.test:8080"),
            hp("a.test", "a.test", Some(8080))
        );
        assert_eq!(
            split_host_port("127.0.0.1:81"),
            hp("127.0.0.1", "127.0.0.1", Some(81))
        );
        assert_eq!(split_host_port("[::1]:81"), hp("[::1]", "::1", Some(81)));
        assert_eq!(split_host_port("[::1]"), hp("[::1]", "::1", None));
        assert_eq!(split_host_port("*:80"), hp("*", "*", Some(80)));
        assert_eq!(split_host_port(""), hp("", "", None));
        let port = Err(HostPortError::InvalidPort);
        assert_eq!(split_host_port("a.test:x"), port);
        assert_eq!(split_host_port("a.test:"), port);
        assert_eq!(split_host_port("a.test:0"), port);
        assert_eq!(split_host_port("a.test:65536"), port);
        assert_eq!(split_host_port("[::1]:0"), port);
        assert_eq!(split_host_port("[::1]:+80"), port);
        let v6 = Err(HostPortError::InvalidIpv6);
        assert_eq!(split_host_port("[::1"), v6);
        assert_eq!(split_host_port("[::1]80"), v6);
    }
}
