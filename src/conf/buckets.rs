//! `metrics_buckets TIME ...` (http): the upper bounds of the buckets of the
//! zone upstreams' time histograms (connect, header, response) the
//! `metrics` location shows. Not in nginx.

use super::build::{Args, Builder, HTTP, Node, Spec, duplicate, not_here};
use super::tree::Directive;
use super::values::parse_time;
use super::{ConfError, Src};
use crate::shm::records::HIST_MAX;

pub(super) const TABLE: &[Spec] = &[Spec {
    name: "metrics_buckets",
    ctx: HTTP,
    args: Args::AtLeast(1),
    block: false,
    set: set_buckets,
}];

fn set_buckets(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Http(h) = n else {
        return Err(not_here(d));
    };
    if h.metrics_buckets.is_some() {
        return Err(duplicate(d));
    }
    h.metrics_buckets = Some(bounds(&d.args, &d.src)?);
    Ok(())
}

/// The bounds in milliseconds: times above zero, each above the one before,
/// at most `HIST_MAX`, none over `u32::MAX` ms.
fn bounds(args: &[String], src: &Src) -> Result<Vec<u32>, ConfError> {
    if args.len() > HIST_MAX {
        return Err(ConfError::at(
            format!("too many buckets in \"metrics_buckets\" directive (at most {HIST_MAX})"),
            src,
        ));
    }
    let mut out: Vec<u32> = Vec::with_capacity(args.len());
    for a in args {
        let ms = parse_time(a, true)
            .and_then(|t| u32::try_from(t.as_millis()).ok())
            .filter(|ms| *ms > 0 && out.last().is_none_or(|last| ms > last))
            .ok_or_else(|| {
                ConfError::at(
                    format!("invalid value \"{a}\" in \"metrics_buckets\" directive"),
                    src,
                )
            })?;
        out.push(ms);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(args: &[&str]) -> Result<Vec<u32>, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let src = Src {
            file: None,
            line: 1,
        };
        bounds(&args, &src).map_err(|e| e.to_string())
    }

    #[test]
    fn bounds_parse_and_refuse() {
        assert_eq!(
            b(&["5ms", "100ms", "1s", "2500ms"]),
            Ok(vec![5, 100, 1000, 2500])
        );
        assert!(b(&["10ms", "10ms"]).is_err_and(|e| e.contains("invalid value \"10ms\"")));
        assert!(b(&["1s", "500ms"]).is_err());
        assert!(b(&["0"]).is_err());
        assert!(b(&["x"]).is_err());
        let many: Vec<String> = (1..=17).map(|k| format!("{k}ms")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(b(&many).is_err_and(|e| e.contains("too many buckets")));
    }
}
