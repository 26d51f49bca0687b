//! nginx's value syntaxes: sizes (`512`, `8k`, `1m`, `2g`), times (`500ms`, `30s`,
//! `1h30m`, bare numbers are seconds), flags (`on`/`off`). Pure functions.

use std::time::Duration;

/// A size with an optional `k`/`K`, `m`/`M` or `g`/`G` suffix.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1024u64),
        b'm' | b'M' => (&s[..s.len() - 1], 1024 * 1024),
        b'g' | b'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// A time: one or more `NUMBER[UNIT]` parts with units in decreasing order, each
/// at most once: `y` (365 d), `M` (30 d), `w`, `d`, `h`, `m`, `s`, `ms`. A number
/// without a unit means seconds and must come last. `allow_ms` is false for
/// directives that take whole seconds, where nginx refuses `ms`.
pub fn parse_time(s: &str, allow_ms: bool) -> Option<Duration> {
    // Units with their size in ms and their rank (must strictly decrease).
    const UNITS: [(&str, u64); 8] = [
        ("y", 365 * 86_400_000),
        ("M", 30 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("ms", 1),
        ("m", 60_000),
        ("s", 1000),
    ];
    // Ranks in nginx's order: y > M > w > d > h > m > s > ms.
    fn rank(u: &str) -> u8 {
        match u {
            "y" => 8,
            "M" => 7,
            "w" => 6,
            "d" => 5,
            "h" => 4,
            "m" => 3,
            "s" => 2,
            "ms" => 1,
            _ => 0,
        }
    }
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total: u64 = 0;
    let mut last_rank = u8::MAX;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        if rest.is_empty() {
            // A bare number: seconds, only as the last part after larger units.
            if last_rank <= rank("s") {
                return None;
            }
            total = total.checked_add(n.checked_mul(1000)?)?;
            break;
        }
        let (unit, ms) = UNITS.iter().find(|(u, _)| rest.starts_with(u))?;
        if *unit == "ms" && !allow_ms {
            return None;
        }
        let r = rank(unit);
        if r >= last_rank {
            return None;
        }
        last_rank = r;
        rest = &rest[unit.len()..];
        total = total.checked_add(n.checked_mul(*ms)?)?;
    }
    Some(Duration::from_millis(total))
}

/// `on` or `off`.
pub fn parse_flag(s: &str) -> Option<bool> {
    match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
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
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("k"), None);
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn times() {
        let ms = |s| parse_time(s, true).map(|d| d.as_millis() as u64);
        assert_eq!(ms("30"), Some(30_000));
        assert_eq!(ms("30s"), Some(30_000));
        assert_eq!(ms("500ms"), Some(500));
        assert_eq!(ms("1h30m"), Some(5_400_000));
        assert_eq!(ms("1d2h3m4s5ms"), Some(93_784_005));
        assert_eq!(ms("1w"), Some(604_800_000));
        assert_eq!(ms("1M"), Some(30 * 86_400_000));
        assert_eq!(ms("1y"), Some(365 * 86_400_000));
        assert_eq!(ms("1m30"), Some(90_000));
        assert_eq!(ms("30m1h"), None);
        assert_eq!(ms("1s1s"), None);
        assert_eq!(ms("1s5"), None);
        assert_eq!(ms("abc"), None);
        assert_eq!(ms("10x"), None);
        assert_eq!(ms(""), None);
        assert_eq!(parse_time("500ms", false), None);
        assert_eq!(parse_time("5s", false), Some(Duration::from_secs(5)));
    }

    #[test]
    fn flags() {
        assert_eq!(parse_flag("on"), Some(true));
        assert_eq!(parse_flag("off"), Some(false));
        assert_eq!(parse_flag("yes"), None);
    }
}
