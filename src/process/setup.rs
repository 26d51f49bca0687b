//! What a generation needs before its workers fork, made by the master:
//! its shared-memory zones (new, or adopted from a binary upgrade), its
//! listening sockets, the workers' credentials and log ownership, and each
//! worker's copy of the listeners. Called by `master`.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;

use super::worker::Creds;
use crate::conf::Config;
use crate::http::Listener;
use crate::http::status::Shm;
use crate::log::{self, Level};
use crate::net::stats::Stats;
use crate::net::tls::{SessionZone, TicketKeys, TlsShared};
use crate::net::{self, Bound};

/// Maps the zones a binary upgrade handed over and copies their resolved
/// peers into ours, as a reload does. Returns the (zone, upstream) names
/// served that way; a zone of another layout is a `[warn]` (the state file
/// is used instead).
pub(super) fn adopt_zones(
    shm: &Shm,
    cfg: &Config,
    inherited: &super::upgrade::Inherited,
) -> Vec<(String, String)> {
    let mut old = crate::upstream::Zones::new();
    // The old binary's upstreams as its zones record them (their context
    // does not matter: a zone upstream is known by its zone and its name).
    let mut old_blocks = crate::conf::model::UpstreamBlocks::default();
    for (name, fd) in &inherited.zones {
        // `sticky learn` zones were taken over by `make_shm`.
        if name.starts_with(&format!("{}:", crate::upstream::sticky::KIND)) {
            continue;
        }
        let Ok(fd) = fd.try_clone() else { continue };
        match crate::upstream::Zone::attach(name, fd) {
            Ok(z) => {
                for i in 0..z.upstream_names().len() {
                    if let Some(u) = z.upstream_config(i) {
                        old_blocks.list.push(Arc::new(u));
                    }
                }
                old.insert(name.clone(), Arc::new(z));
            }
            Err(e) => crate::log!(
                Level::Warn,
                "{}; using the state file instead of the old binary's zone",
                e
            ),
        }
    }
    crate::upstream::carry::preresolve(&shm.zones, &cfg.upstream_blocks(), &old, &[&old_blocks])
}

/// `-t`: builds the configuration's zones once and drops them, as nginx
/// creates its shared memory while testing; false (after `[emerg]`) when one
/// cannot be made.
pub(super) fn check_shm(cfg: &Config) -> bool {
    make_shm(cfg, 1, None, None, None).is_ok()
}

/// The `ssl_session_cache shared:` zones: those of `prev` (the running
/// generation) whose name and size stay are kept, with their sessions, as
/// nginx keeps a zone across a reload; the others are made.
fn ssl_caches(
    cfg: &Config,
    prev: Option<&Shm>,
) -> Result<HashMap<String, Arc<SessionZone>>, String> {
    let mut caches = HashMap::new();
    let http = cfg
        .http
        .iter()
        .flat_map(|h| h.servers.iter())
        .map(|s| &*s.ssl);
    let stream = cfg
        .stream
        .iter()
        .flat_map(|st| st.servers.iter())
        .map(|s| &*s.ssl);
    let shared = http
        .chain(stream)
        .filter_map(|s| s.session_cache.shared.as_ref());
    for (name, size) in shared {
        if caches.contains_key(name) {
            continue;
        }
        let size = usize::try_from(*size).map_err(|_| format!("zone \"{name}\" is too large"))?;
        let kept = prev
            .and_then(|p| p.tls.caches.get(name))
            .filter(|z| z.size() == size);
        let zone = match kept {
            Some(z) => z.clone(),
            None => Arc::new(
                SessionZone::create(name, size)
                    .map_err(|e| format!("shared memory zone \"{name}\": {e}"))?,
            ),
        };
        caches.insert(name.clone(), zone);
    }
    Ok(caches)
}

/// The `limit_req_zone` and `limit_conn_zone` zones: those of `prev` whose
/// name and size stay are kept with their state, as nginx keeps a zone
/// across a reload (a changed size makes a new, empty one, as in nginx); a
/// kept zone whose key changed is nginx's `[emerg]`.
fn limit_zones(cfg: &Config, prev: Option<&Shm>) -> Result<crate::net::limit::LimitZones, String> {
    use crate::conf::limit::ZoneKind;
    use crate::net::limit::LimitZone;
    let mut out = crate::net::limit::LimitZones::new();
    for z in &cfg.limit_zones {
        let size =
            usize::try_from(z.size).map_err(|_| format!("zone \"{}\" is too large", z.name))?;
        let kept = prev
            .and_then(|p| p.limits.get(&z.name))
            .filter(|old| old.size() == size);
        let zone = match kept {
            Some(old) => {
                if old.key != z.key_text {
                    let what = match z.kind {
                        ZoneKind::Req { .. } => "limit_req",
                        _ => "limit_conn_zone",
                    };
                    return Err(format!(
                        "{what} \"{}\" uses the \"{}\" key while previously it used the \"{}\" key",
                        z.name, z.key_text, old.key
                    ));
                }
                old.clone()
            }
            None => Arc::new(
                LimitZone::create(&z.name, size)
                    .map_err(|e| format!("shared memory zone \"{}\": {e}", z.name))?
                    .with_key(&z.key_text),
            ),
        };
        out.insert(z.name.clone(), zone);
    }
    Ok(out)
}

/// The `sticky learn` zones: those of `prev` whose name and size stay are
/// kept with their sessions (a reload), then those a binary upgrade handed
/// over (`inherited`, named `sticky:NAME`) whose size and layout fit; the
/// others are made empty. A zone that moved to another upstream is
/// nginx's `[emerg]`.
fn sticky_zones(
    cfg: &Config,
    prev: Option<&Shm>,
    inherited: Option<&super::upgrade::Inherited>,
) -> Result<crate::upstream::sticky::LearnZones, String> {
    use crate::conf::sticky::Sticky;
    use crate::upstream::sticky::KIND;
    let mut out = crate::upstream::sticky::LearnZones::new();
    let learn = cfg
        .http
        .iter()
        .flat_map(|h| h.upstreams.list.iter())
        .filter_map(|u| match &u.sticky {
            Some(Sticky::Learn(l)) => Some((l, &u.name)),
            _ => None,
        });
    for (l, upstream) in learn {
        let size =
            usize::try_from(l.size).map_err(|_| format!("zone \"{}\" is too large", l.zone))?;
        let kept = prev
            .and_then(|p| p.sticky.get(&l.zone))
            .filter(|(_, old)| old.size() == size);
        if let Some((owner, old)) = kept {
            if owner != upstream {
                return Err(format!(
                    "sticky zone \"{}\" is used in upstream \"{upstream}\" while previously it was used in upstream \"{}\"",
                    l.zone, owner
                ));
            }
            out.insert(l.zone.clone(), (owner.clone(), old.clone()));
            continue;
        }
        let handed = inherited
            .into_iter()
            .flat_map(|i| i.zones.iter())
            .find(|(n, _)| {
                n.strip_prefix(KIND).and_then(|n| n.strip_prefix(':')) == Some(l.zone.as_str())
            })
            .and_then(|(_, fd)| fd.try_clone().ok())
            .and_then(|fd| SessionZone::attach(&l.zone, fd).ok())
            .filter(|z| z.size() == size);
        let zone = match handed {
            Some(z) => z,
            None => SessionZone::create_for(KIND, &l.zone, size)
                .map_err(|e| format!("shared memory zone \"{}\": {e}", l.zone))?,
        };
        out.insert(l.zone.clone(), (upstream.clone(), Arc::new(zone)));
    }
    Ok(out)
}

/// The generation's shared memory, or `[emerg]` and Err. `prev`: the
/// running generation's; `tickets`: the master's ticket keys.
pub(super) fn make_shm(
    cfg: &Config,
    generation: u64,
    prev: Option<&Shm>,
    tickets: Option<Arc<TicketKeys>>,
    inherited: Option<&super::upgrade::Inherited>,
) -> Result<Shm, ()> {
    let workers = if cfg.main.master_process {
        cfg.main.worker_processes
    } else {
        1
    };
    let zones = crate::upstream::zone::create_all(&cfg.upstream_blocks(), generation, workers)
        .map_err(|e| {
            crate::log!(Level::Emerg, "{}", e);
        })?;
    // Counted whenever there is http (as nginx, whose stub_status counters
    // also feed the `$connections_*` variables).
    let stats = if cfg.http.is_some() {
        let s = Stats::create().map_err(|e| {
            crate::log!(Level::Emerg, "stub_status: {}", e);
        })?;
        Some(Arc::new(s))
    } else {
        None
    };
    let balance = if workers > 1 && cfg.events.accept_balance != Some(false) {
        let b = crate::net::balance::Balance::create(workers).map_err(|e| {
            crate::log!(Level::Emerg, "accept_balance: {}", e);
        })?;
        Some(Arc::new(b))
    } else {
        None
    };
    let caches = ssl_caches(cfg, prev).map_err(|e| {
        crate::log!(Level::Emerg, "{}", e);
    })?;
    let limits = limit_zones(cfg, prev).map_err(|e| {
        crate::log!(Level::Emerg, "{}", e);
    })?;
    let sticky = sticky_zones(cfg, prev, inherited).map_err(|e| {
        crate::log!(Level::Emerg, "{}", e);
    })?;
    Ok(Shm {
        zones,
        stats,
        generation,
        saved: None,
        tls: TlsShared { caches, tickets },
        limits: Arc::new(limits),
        sticky: Arc::new(sticky),
        balance,
    })
}

pub(super) fn bind(cfg: &Config, existing: &[Bound]) -> Result<Vec<Bound>, net::NetError> {
    let listens: Vec<_> = cfg
        .http
        .iter()
        .flat_map(|h| h.servers.iter())
        .flat_map(|s| s.listen.iter())
        .chain(
            cfg.stream
                .iter()
                .flat_map(|st| st.servers.iter())
                .flat_map(|s| s.listen.iter()),
        )
        .collect();
    let planned = net::plan(&listens);
    // As nginx: an address in use is tried five times, 500 ms apart (a
    // process that is just letting it go frees it), each failure logged.
    for round in 1..=BIND_TRIES {
        match net::bind_all(&planned, cfg.main.worker_processes, existing) {
            Err(e @ net::NetError::Bind { busy: true, .. }) => {
                crate::log!(Level::Emerg, "{}", e);
                if round < BIND_TRIES {
                    crate::log!(Level::Notice, "try again to bind() after 500ms");
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
            }
            other => return other,
        }
    }
    Err(net::NetError::StillBusy)
}

/// nginx's number of rounds of binding an address in use.
const BIND_TRIES: u32 = 5;

/// The user workers switch to, when the master runs as root.
pub(super) fn resolve_creds(cfg: &Config) -> Result<Option<Creds>, String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let u = &cfg.main.user;
    let user = nix::unistd::User::from_name(&u.user)
        .ok()
        .flatten()
        .ok_or_else(|| format!("getpwnam(\"{}\") failed", u.user))?;
    let gid = match &u.group {
        Some(g) => {
            nix::unistd::Group::from_name(g)
                .ok()
                .flatten()
                .ok_or_else(|| format!("getgrnam(\"{g}\") failed"))?
                .gid
        }
        // nginx: the group named like the user; else that user's own group.
        None => nix::unistd::Group::from_name(&u.user)
            .ok()
            .flatten()
            .map(|g| g.gid)
            .unwrap_or(user.gid),
    };
    let name =
        CString::new(u.user.clone()).map_err(|_| format!("invalid user name \"{}\"", u.user))?;
    Ok(Some(Creds {
        name,
        uid: user.uid,
        gid,
    }))
}

/// Lets the workers' user re-open the log files the master (root) created.
pub(super) fn chown_logs(creds: &Option<Creds>) {
    if let Some(c) = creds {
        for p in log::file_paths().into_iter().chain(log::files::paths()) {
            let _ = nix::unistd::chown(&p, Some(c.uid), None);
        }
    }
}

/// Duplicates the sockets worker `slot` accepts on.
pub(super) fn listeners_for(bound: &[Bound], slot: usize) -> Vec<Listener> {
    bound
        .iter()
        .filter_map(|b| {
            let s = b.socket_for(slot).try_clone().ok()?;
            Some(Listener {
                addr: b.addr.clone(),
                fd: net::into_owned(s),
                shared: !b.reuseport,
            })
        })
        .collect()
}
