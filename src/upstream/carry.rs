//! What a new generation takes over from the one before, at a reload or a
//! binary upgrade: each `resolve` line's peers and its answer's expiry
//! (nginx's preresolve), `pick_first`'s choice, the active health
//! checks' verdicts, the API's `down`/`drain` (`admin`), the peers'
//! counters and the upstreams' time histograms. The master calls it
//! after building the new zones and before the state files seed what is
//! left (`state.rs`).

use std::sync::atomic::Ordering::*;

use super::peer_list::{Resolved, peer_list};
use super::zone::Zones;
use crate::conf::model::{UpstreamBlocks, zone_upstream};

/// Reload (nginx's preresolve): for each zone upstream of the new
/// configuration whose old counterpart has the same zone and upstream name,
/// every `resolve` line starts with the peers the old line with the same
/// host and `service=` has now (address from the old peer; port and
/// parameters from the new line, except an SRV peer's port and weight), and
/// with the old answer's expiry, so the first lookup comes when it expires.
/// Returns the (zone, upstream) names it carried peers or API changes for
/// (their state files are not read).
pub fn preresolve(
    new: &Zones,
    nb: &[&UpstreamBlocks],
    old: &Zones,
    ob: &[&UpstreamBlocks],
) -> Vec<(String, String)> {
    let mut carried = Vec::new();
    for (name, z) in new {
        let Some(oz) = old.get(name) else { continue };
        for (i, up_name) in z.upstream_names().iter().enumerate() {
            let Some(nu) = zone_upstream(nb, name, up_name) else {
                continue;
            };
            if !nu.servers.iter().any(|s| s.resolve) {
                continue;
            }
            let (Some(j), Some(ou)) = (oz.upstream(up_name), zone_upstream(ob, name, up_name))
            else {
                continue;
            };
            let Some(current) = oz.snapshot(j, ou) else {
                continue;
            };
            // A resolve line's counterpart: the old line with its host and
            // service.
            let old_line = |line: &crate::conf::model::UpstreamServer| {
                ou.servers
                    .iter()
                    .position(|o| o.resolve && o.host == line.host && o.service == line.service)
            };
            let list = peer_list(nu, |_, line| {
                old_line(line)
                    .map(|ok| Resolved::of_line(&current, ok))
                    .unwrap_or_default()
            });
            for (k, line) in nu.servers.iter().enumerate() {
                let Some(ok) = old_line(line).filter(|_| line.resolve) else {
                    continue;
                };
                // No later than the new resolver could make it.
                let (expires, answered, error) = oz.resolved(j, ok);
                let valid = nu.resolver.as_ref().and_then(|r| r.valid);
                let expires = super::dns::clamp_expiry(expires, super::peers::now_ms(), valid);
                z.set_resolved(i, k, expires, answered, error);
                z.carry_lookups(i, k, oz, j, ok);
            }
            if let Err(e) = z.publish(i, std::process::id(), &list) {
                crate::log!(crate::log::Level::Error, "{}", e);
            }
            carried.push((name.clone(), up_name.clone()));
        }
    }
    carry_choices(new, nb, old, ob);
    carry_health(new, nb, old, ob);
    carry_counters(new, nb, old, ob);
    carry_admin(new, nb, old, ob);
    for (name, z) in new {
        let Some(oz) = old.get(name) else { continue };
        for (i, up_name) in z.upstream_names().iter().enumerate() {
            let Some(j) = oz.upstream(up_name) else {
                continue;
            };
            z.carry_histograms(i, oz, j);
            // Its peers' API changes came over: no state file.
            let kept = (name.clone(), up_name.clone());
            if zone_upstream(nb, name, up_name).is_some()
                && zone_upstream(ob, name, up_name).is_some()
                && !carried.contains(&kept)
            {
                carried.push(kept);
            }
        }
    }
    carried
}

/// The API's `down`, `drain` and `up` (`api write=on`) across a reload or
/// an upgrade: a peer still listed (same address) keeps them, unless its
/// `server` line's own `down` changed (the new configuration is the newer
/// word).
fn carry_admin(new: &Zones, nb: &[&UpstreamBlocks], old: &Zones, ob: &[&UpstreamBlocks]) {
    each_carried_peer(
        new,
        nb,
        old,
        ob,
        |_| true,
        |was, p| {
            if was.down == p.down {
                p.live.admin.store(was.live.admin.load(Relaxed), Relaxed);
            }
        },
    );
}

/// Calls `f` with each peer of each zone upstream of the new generation
/// that `want` accepts and its counterpart in the old one (same zone and
/// upstream names): the old peer of the same address, the k-th of that
/// address for the k-th, primary peers before backups.
fn each_carried_peer(
    new: &Zones,
    nb: &[&UpstreamBlocks],
    old: &Zones,
    ob: &[&UpstreamBlocks],
    want: impl Fn(&crate::conf::model::Upstream) -> bool,
    mut f: impl FnMut(&super::peers::Peer, &super::peers::Peer),
) {
    for (name, z) in new {
        let Some(oz) = old.get(name) else { continue };
        for (i, up_name) in z.upstream_names().iter().enumerate() {
            let (Some(nu), Some(ou), Some(j)) = (
                zone_upstream(nb, name, up_name),
                zone_upstream(ob, name, up_name),
                oz.upstream(up_name),
            ) else {
                continue;
            };
            if !want(nu) {
                continue;
            }
            let (Some(before), Some(now)) = (oz.snapshot(j, ou), z.snapshot(i, nu)) else {
                continue;
            };
            let olds: Vec<&super::peers::Peer> =
                before.primary.iter().chain(before.backup.iter()).collect();
            let mut taken = vec![false; olds.len()];
            for p in now.primary.iter().chain(now.backup.iter()) {
                let Some(k) = (0..olds.len()).find(|&k| !taken[k] && olds[k].addr == p.addr) else {
                    continue;
                };
                taken[k] = true;
                f(olds[k], p);
            }
        }
    }
}

/// Active health checks across a reload or an upgrade: a peer of a
/// checked upstream that the old generation had checked keeps its verdict
/// and counters, except under `mandatory` without `persistent`, where
/// every peer starts in `checking` again (NGINX Plus's rule).
fn carry_health(new: &Zones, nb: &[&UpstreamBlocks], old: &Zones, ob: &[&UpstreamBlocks]) {
    let checked = |u: &crate::conf::model::Upstream| {
        u.health
            .as_ref()
            .is_some_and(|hc| !hc.mandatory || hc.persistent)
    };
    each_carried_peer(new, nb, old, ob, checked, |was, p| {
        let o = &was.live;
        let state = o.health.load(Relaxed);
        if state == super::health::UNCHECKED {
            return;
        }
        let (a, b) = (&o.hc, &p.live.hc);
        for (from, to) in [
            (&a.checks, &b.checks),
            (&a.fails, &b.fails),
            (&a.unhealthy, &b.unhealthy),
            (&a.downstart, &b.downstart),
            (&a.downtime, &b.downtime),
        ] {
            to.store(from.load(Relaxed), Relaxed);
        }
        for (from, to) in [
            (&a.fail_run, &b.fail_run),
            (&a.pass_run, &b.pass_run),
            (&a.last_passed, &b.last_passed),
        ] {
            to.store(from.load(Relaxed), Relaxed);
        }
        p.live.health.store(state, Relaxed);
    });
}

/// The counters the API and the metrics show, across a reload or an
/// upgrade: a peer that stays (same address in the upstream of the same
/// name and zone) keeps its requests, responses, bytes, `unavail` count,
/// total downtime and recycled connections, as counted when the new zone is
/// built. What the old generation's workers count after that is not
/// carried.
fn carry_counters(new: &Zones, nb: &[&UpstreamBlocks], old: &Zones, ob: &[&UpstreamBlocks]) {
    each_carried_peer(
        new,
        nb,
        old,
        ob,
        |_| true,
        |was, p| {
            let (a, b) = (&was.live, &p.live);
            let mut pairs = vec![
                (&a.requests, &b.requests),
                (&a.sent, &b.sent),
                (&a.received, &b.received),
                (&a.recycled, &b.recycled),
            ];
            pairs.extend(a.responses.iter().zip(b.responses.iter()));
            for (from, to) in pairs {
                to.store(from.load(Relaxed), Relaxed);
            }
            b.unavail.store(a.unavail.load(Relaxed), Relaxed);
            // Downtime so far, closing an unavailable stretch at the reload.
            let since = a.down_since.load(Relaxed);
            let open = if since == 0 {
                0
            } else {
                super::peers::now_ms().saturating_sub(since)
            };
            b.downtime
                .store(a.downtime.load(Relaxed).saturating_add(open), Relaxed);
        },
    );
}

/// `pick_first` across a reload or an upgrade: a new zone upstream whose
/// old counterpart had chosen a peer that is still listed keeps that choice
/// (else it starts from the first server again).
fn carry_choices(new: &Zones, nb: &[&UpstreamBlocks], old: &Zones, ob: &[&UpstreamBlocks]) {
    for (name, z) in new {
        let Some(oz) = old.get(name) else { continue };
        for (i, up_name) in z.upstream_names().iter().enumerate() {
            let (Some(nu), Some(ou), Some(j)) = (
                zone_upstream(nb, name, up_name),
                zone_upstream(ob, name, up_name),
                oz.upstream(up_name),
            ) else {
                continue;
            };
            if !nu.balancer.is_pick_first() {
                continue;
            }
            let (Some(before), Some(now)) = (oz.snapshot(j, ou), z.snapshot(i, nu)) else {
                continue;
            };
            let key = before.choice.load(Relaxed);
            let Some(was) = before.primary.iter().find(|p| p.key == key) else {
                continue;
            };
            if let Some(p) = now.primary.iter().find(|p| p.addr == was.addr) {
                now.choice.store(p.key, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::model::{Balancer, ZoneSpec};
    use crate::upstream::admin::{self, Target};
    use crate::upstream::zone::create_all;

    fn blocks(zone: &str, down3: bool) -> UpstreamBlocks {
        let mut u = crate::upstream::peers::test_upstream(
            &[
                ("127.0.0.1:1", 1, false),
                ("127.0.0.1:2", 1, false),
                ("127.0.0.1:3", 1, false),
            ],
            Balancer::RoundRobin,
        );
        u.servers[2].down = down3;
        u.zone = Some(zone.into());
        let spec = ZoneSpec {
            name: zone.into(),
            size: Some(64 * 1024),
            upstreams: vec![u.name.clone()],
            src: u.src.clone(),
        };
        UpstreamBlocks {
            list: vec![std::sync::Arc::new(u)],
            zones: vec![spec],
            time_buckets: Vec::new(),
        }
    }

    /// The API's changes follow a peer by address into the next
    /// generation's zone, except where the `server` line's own `down`
    /// changed; the upstream counts as carried (no state file).
    #[test]
    fn admin_is_carried_by_address() {
        let ob = blocks("cz", false);
        let old = create_all(&[&ob], 1, 1).expect("old");
        let before = old["cz"].snapshot(0, &ob.list[0]).expect("snapshot");
        admin::set(&before.primary[0], Target::Drain);
        admin::set(&before.primary[2], Target::Down);
        // The reload adds `down` to the third line.
        let nb = blocks("cz", true);
        let new = create_all(&[&nb], 2, 1).expect("new");
        let carried = preresolve(&new, &[&nb], &old, &[&ob]);
        assert_eq!(carried, [("cz".to_string(), ob.list[0].name.clone())]);
        let now = new["cz"].snapshot(0, &nb.list[0]).expect("snapshot");
        let t: Vec<Target> = now.primary.iter().map(admin::target).collect();
        assert_eq!(t, [Target::Drain, Target::Up, Target::Down]);
        // Down by its line now, not by the API: a later config without
        // `down` brings it back.
        assert!(!admin::overridden(&now.primary[2]));
        // Another zone name: nothing carried.
        let other = blocks("cz2", false);
        let fresh = create_all(&[&other], 3, 1).expect("fresh");
        assert!(preresolve(&fresh, &[&other], &old, &[&ob]).is_empty());
    }
}
