//! nginx's preaccess limits for one request: `limit_req` (refuse or delay
//! by the leaky bucket of each zone the location names) and `limit_conn`
//! (refuse beyond N requests in progress per key). The zones are the
//! generation's shared ones (`net::limit`); this is nginx's handler logic,
//! its log lines and `$limit_req_status` / `$limit_conn_status`. Called by
//! the pipeline once per request.

use std::sync::Arc;

use crate::conf::limit::{ZoneKind, delay_level};
use crate::log::Level;
use crate::net::limit::{Acquire, Held, LimitZone, Lookup, now_ms};

use super::Shared;
use super::vars::Req;

/// The request's limit outcomes and the connections it holds.
#[derive(Default)]
pub struct State {
    /// `$limit_req_status`: PASSED, DELAYED, REJECTED, DELAYED_DRY_RUN,
    /// REJECTED_DRY_RUN; None before (or without) `limit_req`.
    pub req_status: Option<&'static str>,
    /// `$limit_conn_status`: PASSED, REJECTED, REJECTED_DRY_RUN.
    pub conn_status: Option<&'static str>,
    holds: Holds,
}

/// Counted connections, given back when the request ends.
#[derive(Default)]
pub struct Holds(Vec<(Arc<LimitZone>, Held)>);

impl Holds {
    pub fn push(&mut self, zone: Arc<LimitZone>, held: Held) {
        self.0.push((zone, held));
    }

    pub fn release(&mut self) {
        for (z, h) in self.0.drain(..) {
            z.conn_release(h);
        }
    }
}

impl Drop for Holds {
    fn drop(&mut self) {
        self.release();
    }
}

/// The rate of `zone` in this configuration (a zone kept across a reload
/// takes the new rate, as nginx's).
fn rate(shared: &Shared, zone: &str) -> u64 {
    shared
        .cfg
        .limit_zones
        .iter()
        .find_map(|z| match z.kind {
            ZoneKind::Req { rate } if z.name == zone => Some(rate),
            _ => None,
        })
        .unwrap_or(1000)
        .max(1)
}

fn key_of(shared: &Shared, zone: &str, r: &Req) -> Option<(String, String)> {
    let spec = shared.cfg.limit_zones.iter().find(|z| z.name == zone)?;
    Some((r.eval(&spec.key), spec.key_text.clone()))
}

fn dry(on: bool, comma: bool) -> &'static str {
    match (on, comma) {
        (false, _) => "",
        (true, false) => ", dry run",
        (true, true) => ", dry run,",
    }
}

/// `limit_req`: Some(status) to refuse the request; a delayed request has
/// waited when this returns None.
pub(super) async fn limit_req(shared: &Shared, r: &mut Req) -> Option<u16> {
    let conf = r.conf.clone();
    let limits = &conf.limit_req;
    if limits.is_empty() || r.limits.req_status.is_some() {
        return None;
    }
    #[derive(PartialEq)]
    enum Rc {
        Declined,
        Again,
        Ok,
        Busy,
        Error,
    }
    let mut rc = Rc::Declined;
    let mut excess = 0u64;
    let mut limit = 0usize;
    // Limits looked up but not yet accounted: (limit, zone, slot, hash).
    let mut pending: Vec<(usize, Arc<LimitZone>, u32, u64)> = Vec::new();
    let now = now_ms();
    for (n, l) in limits.iter().enumerate() {
        limit = n;
        let Some(zone) = shared.limits.get(&l.zone) else {
            continue;
        };
        let Some((key, key_text)) = key_of(shared, &l.zone, r) else {
            continue;
        };
        if key.is_empty() {
            continue;
        }
        if key.len() > 65535 {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "the value of the \"{}\" key is more than 65535 bytes: \"{}\"{}",
                key_text,
                key,
                r.log_context(None)
            );
            continue;
        }
        let account = n == limits.len() - 1;
        match zone.req_lookup(key.as_bytes(), rate(shared, &l.zone), l.burst, account, now) {
            Lookup::Again(slot, h) => {
                pending.push((n, zone.clone(), slot, h));
                rc = Rc::Again;
            }
            Lookup::Ok(e) => {
                excess = e;
                rc = Rc::Ok;
                break;
            }
            Lookup::Busy(e) => {
                excess = e;
                rc = Rc::Busy;
                break;
            }
            Lookup::NoMemory => {
                crate::log!(
                    Level::Alert,
                    "could not allocate node in limit_req zone \"{}\"",
                    l.zone
                );
                rc = Rc::Error;
                break;
            }
            // The zone stayed locked: not limited by it this time.
            Lookup::Skipped => continue,
        }
    }
    if rc == Rc::Declined {
        return None;
    }
    let dry_run = conf.limit_req_dry_run;
    if rc == Rc::Busy || rc == Rc::Error {
        if rc == Rc::Busy {
            crate::log_conn!(
                conf.limit_req_log_level,
                r.conn.number,
                "limiting requests{}, excess: {}.{:03} by zone \"{}\"{}",
                dry(dry_run, false),
                excess / 1000,
                excess % 1000,
                limits[limit].zone,
                r.log_context(None)
            );
        }
        for (_, z, slot, h) in &pending {
            z.req_unlock(*slot, *h);
        }
        if dry_run {
            r.limits.req_status = Some("REJECTED_DRY_RUN");
            return None;
        }
        r.limits.req_status = Some("REJECTED");
        return Some(conf.limit_req_status);
    }
    if rc == Rc::Again {
        excess = 0;
    }
    // nginx's account: the longest delay any limit asks for.
    let delay_of = |excess: u64, n: usize| -> u64 {
        let l = &limits[n];
        if excess <= l.delay {
            0
        } else {
            (excess - l.delay) * 1000 / rate(shared, &l.zone)
        }
    };
    let mut max_delay = delay_of(excess, limit);
    for (n, z, slot, h) in pending.iter().rev() {
        let e = z.req_account(*slot, *h, rate(shared, &limits[*n].zone), now_ms());
        let d = delay_of(e, *n);
        if d > max_delay {
            max_delay = d;
            excess = e;
            limit = *n;
        }
    }
    if max_delay == 0 {
        r.limits.req_status = Some("PASSED");
        return None;
    }
    crate::log_conn!(
        delay_level(conf.limit_req_log_level),
        r.conn.number,
        "delaying request{}, excess: {}.{:03}, by zone \"{}\"{}",
        dry(dry_run, false),
        excess / 1000,
        excess % 1000,
        limits[limit].zone,
        r.log_context(None)
    );
    if dry_run {
        r.limits.req_status = Some("DELAYED_DRY_RUN");
        return None;
    }
    r.limits.req_status = Some("DELAYED");
    tokio::time::sleep(std::time::Duration::from_millis(max_delay)).await;
    None
}

/// `limit_conn`: Some(status) to refuse the request; else the request holds
/// one connection in each zone until it ends.
pub(super) fn limit_conn(shared: &Shared, r: &mut Req) -> Option<u16> {
    let conf = r.conf.clone();
    if conf.limit_conn.is_empty() || r.limits.conn_status.is_some() {
        return None;
    }
    for l in &conf.limit_conn {
        let Some(zone) = shared.limits.get(&l.zone) else {
            continue;
        };
        let Some((key, key_text)) = key_of(shared, &l.zone, r) else {
            continue;
        };
        if key.is_empty() {
            continue;
        }
        if key.len() > 255 {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "the value of the \"{}\" key is more than 255 bytes: \"{}\"{}",
                key_text,
                key,
                r.log_context(None)
            );
            continue;
        }
        r.limits.conn_status = Some("PASSED");
        let busy = match zone.conn_acquire(key.as_bytes(), l.conn) {
            Acquire::Held(h) => {
                r.limits.holds.push(zone.clone(), h);
                continue;
            }
            Acquire::Skipped => continue,
            Acquire::Busy => true,
            Acquire::NoMemory => false,
        };
        if busy {
            crate::log_conn!(
                conf.limit_conn_log_level,
                r.conn.number,
                "limiting connections{} by zone \"{}\"{}",
                dry(conf.limit_conn_dry_run, true),
                l.zone,
                r.log_context(None)
            );
        } else {
            crate::log!(
                Level::Crit,
                "ngx_slab_alloc() failed: no memory in limit_conn zone \"{}\"",
                l.zone
            );
        }
        r.limits.holds.release();
        if conf.limit_conn_dry_run {
            r.limits.conn_status = Some("REJECTED_DRY_RUN");
            return None;
        }
        r.limits.conn_status = Some("REJECTED");
        return Some(conf.limit_conn_status);
    }
    None
}
