//! `expires`: the `Expires` and `Cache-Control` headers of a response whose
//! status nginx lets the headers filter touch, written as nginx's headers
//! filter writes them (an upstream's own are replaced). Called by
//! `pipeline::finish` before `add_header`, so an added `Cache-Control`
//! comes after this one, as in nginx.

use chrono::{Local, TimeZone, Utc};
use http::header::{CACHE_CONTROL, EXPIRES, HeaderValue, LAST_MODIFIED};
use http::{HeaderMap, Response};

use super::response::Body;
use super::vars::Req;
use crate::conf::expires::{self, Expires, ExpiresConf};

/// The statuses nginx's headers filter applies `expires` to.
pub const STATUSES: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// Sets the headers for `r`'s `expires`, if any applies.
pub fn apply(r: &Req, resp: &mut Response<Body>) {
    if !STATUSES.contains(&resp.status().as_u16()) {
        return;
    }
    let e = match &r.conf.expires {
        ExpiresConf::Fixed(e) => *e,
        // A value that does not parse adds nothing, as in nginx.
        ExpiresConf::Var { modified, value } => match expires::parse(&r.eval(value), *modified) {
            Ok(e) => e,
            Err(_) => return,
        },
    };
    if e == Expires::Off {
        return;
    }
    let now = Utc::now().timestamp();
    if let Some((exp, cc)) = headers(e, now, last_modified(resp.headers()), next_daily) {
        let h = resp.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&exp) {
            h.insert(EXPIRES, v);
        }
        if let Ok(v) = HeaderValue::from_str(&cc) {
            h.insert(CACHE_CONTROL, v);
        }
    }
}

fn last_modified(h: &HeaderMap) -> Option<i64> {
    let v = h.get(LAST_MODIFIED)?.to_str().ok()?;
    chrono::DateTime::parse_from_rfc2822(v)
        .ok()
        .map(|t| t.timestamp())
}

/// The next moment the local clock reads `secs` past midnight (nginx's
/// `ngx_next_time`): today's, or tomorrow's when today's has passed.
fn next_daily(now: i64, secs: i64) -> i64 {
    let Some(t) = Local.timestamp_opt(now, 0).single() else {
        return now + secs;
    };
    let midnight = t
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .and_then(|m| Local.from_local_datetime(&m).earliest())
        .map(|m| m.timestamp())
        .unwrap_or(now - now.rem_euclid(86_400));
    let today = midnight + secs;
    if today > now { today } else { today + 86_400 }
}

fn http_date(t: i64) -> String {
    Utc.timestamp_opt(t, 0)
        .single()
        .map(|d| d.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
        .unwrap_or_default()
}

/// The `Expires` and `Cache-Control` values for `e` at `now`, given the
/// response's `Last-Modified` (seconds), as nginx's `ngx_http_set_expires`
/// computes them. Pure but for `daily`, passed in for tests.
fn headers(
    e: Expires,
    now: i64,
    last_modified: Option<i64>,
    daily: fn(i64, i64) -> i64,
) -> Option<(String, String)> {
    let (configured, at, max_age) = match e {
        Expires::Off => return None,
        Expires::Epoch => {
            return Some(("Thu, 01 Jan 1970 00:00:01 GMT".into(), "no-cache".into()));
        }
        Expires::Max => {
            return Some((
                "Thu, 31 Dec 2037 23:55:55 GMT".into(),
                "max-age=315360000".into(),
            ));
        }
        Expires::Access(0) | Expires::Modified(0) => {
            return Some((http_date(now), "max-age=0".into()));
        }
        Expires::Daily(s) => {
            let at = daily(now, s);
            (s, at, at - now)
        }
        Expires::Access(s) => (s, now + s, s),
        Expires::Modified(s) => match last_modified {
            None => (s, now + s, s),
            Some(lm) => (s, lm + s, lm + s - now),
        },
    };
    let cc = if configured < 0 || max_age < 0 {
        "no-cache".to_string()
    } else {
        format!("max-age={max_age}")
    };
    Some((http_date(at), cc))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_780_000_000;

    fn h(e: Expires, lm: Option<i64>) -> Option<(String, String)> {
        headers(e, NOW, lm, |now, s| now + s)
    }

    #[test]
    fn as_nginx_writes_them() {
        assert_eq!(h(Expires::Off, None), None);
        assert_eq!(
            h(Expires::Epoch, None).unwrap(),
            ("Thu, 01 Jan 1970 00:00:01 GMT".into(), "no-cache".into())
        );
        assert_eq!(h(Expires::Max, None).unwrap().1, "max-age=315360000");
        assert_eq!(
            h(Expires::Access(3600), None).unwrap(),
            (http_date(NOW + 3600), "max-age=3600".into())
        );
        assert_eq!(
            h(Expires::Access(0), None).unwrap(),
            (http_date(NOW), "max-age=0".into())
        );
        assert_eq!(
            h(Expires::Access(-60), None).unwrap(),
            (http_date(NOW - 60), "no-cache".into())
        );
        // modified: from Last-Modified; a past result is no-cache.
        assert_eq!(
            h(Expires::Modified(100), Some(NOW - 40)).unwrap(),
            (http_date(NOW + 60), "max-age=60".into())
        );
        assert_eq!(
            h(Expires::Modified(100), Some(NOW - 400)).unwrap(),
            (http_date(NOW - 300), "no-cache".into())
        );
        assert_eq!(h(Expires::Modified(100), None).unwrap().1, "max-age=100");
        assert_eq!(h(Expires::Daily(50), None).unwrap().1, "max-age=50");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn daily_is_today_or_tomorrow() {
        let now = Utc::now().timestamp();
        for secs in [0, 3600, 55_800, 86_399] {
            let t = next_daily(now, secs);
            assert!(t > now && t <= now + 86_400 + 3600, "{secs}");
        }
    }
}
