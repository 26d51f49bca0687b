//! A worker process: limits and privileges first, then a tokio current-thread
//! runtime (built after `fork`, never before) that serves the inherited
//! listeners. Signals: QUIT graceful stop, TERM/INT fast stop, USR1 reopen logs.
//! Readiness is reported to the master over the control socket.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use nix::unistd::{Gid, Uid};
use tokio::io::AsyncReadExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::conf::Config;
use crate::http::{self, Listener, Phase};
use crate::log::Level;

/// The user workers run as, resolved by the master (which checks it exists).
#[derive(Clone, Debug)]
pub struct Creds {
    pub name: CString,
    pub uid: Uid,
    pub gid: Gid,
}

/// Exit code for a worker that cannot run at all: the master does not respawn it.
pub const FATAL: i32 = 2;

/// The worker's limits, priority, CPUs, directory and environment, as
/// nginx sets them up in a new worker; each failure is logged at
/// `[alert]` and the worker goes on, as nginx's does.
fn set_up(cfg: &Config, slot: usize) {
    use nix::sys::resource::{Resource, setrlimit};
    let err = |what: String, e: nix::Error| {
        crate::log!(Level::Alert, "{what} failed ({}: {})", e as i32, e.desc());
    };
    let s = &cfg.main.worker_setup;
    if let Some(n) = cfg.main.worker_rlimit_nofile {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, n, n) {
            err(format!("setrlimit(RLIMIT_NOFILE, {n})"), e);
        }
    }
    if let Some(n) = s.rlimit_core {
        if let Err(e) = setrlimit(Resource::RLIMIT_CORE, n, n) {
            err(format!("setrlimit(RLIMIT_CORE, {n})"), e);
        }
    }
    if let Some(p) = s.priority {
        if let Err(e) = super::sys::set_priority(p) {
            err(format!("setpriority({p})"), e);
        }
    }
    if let Some(a) = &s.affinity {
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = a.cpus_for(slot, online);
        let mut set = nix::sched::CpuSet::new();
        for &c in &cpus {
            crate::log!(Level::Notice, "sched_setaffinity(): using cpu #{c}");
            if let Err(e) = set.set(c) {
                err(format!("CPU #{c}"), e);
            }
        }
        if !cpus.is_empty() {
            if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
                err("sched_setaffinity()".into(), e);
            }
        }
    }
    if let Some(dir) = &s.working_directory {
        if let Err(e) = nix::unistd::chdir(dir.as_path()) {
            err(format!("chdir(\"{}\")", dir.display()), e);
        }
    }
    set_environment(&s.env);
}

/// What a worker keeps of the environment: `TZ` and the `env` names, with
/// the values `env NAME=VALUE` gives, as nginx's workers.
fn set_environment(env: &[(String, Option<String>)]) {
    super::sys::set_environment(
        |k| k == "TZ" || env.iter().any(|(n, _)| k == n.as_str()),
        env.iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (k.as_str(), v))),
    );
}

fn drop_privileges(creds: &Creds) -> Result<(), String> {
    let err = |what: &str, e: nix::Error| format!("{what} failed ({}: {})", e as i32, e.desc());
    nix::unistd::setgid(creds.gid).map_err(|e| err(&format!("setgid({})", creds.gid), e))?;
    nix::unistd::initgroups(&creds.name, creds.gid)
        .map_err(|e| err(&format!("initgroups({:?}, {})", creds.name, creds.gid), e))?;
    nix::unistd::setuid(creds.uid).map_err(|e| err(&format!("setuid({})", creds.uid), e))?;
    Ok(())
}

/// Runs a worker to its end and returns its exit code. `channel` is None in
/// single-process mode (`master_process off`).
pub fn run(
    cfg: Arc<Config>,
    listeners: Vec<Listener>,
    channel: Option<UnixStream>,
    creds: Option<Creds>,
    shm: crate::http::status::Shm,
    slot: usize,
) -> i32 {
    set_up(&cfg, slot);
    // Before privileges go: the title's writes need /proc/self/mem open.
    if channel.is_some() {
        super::title::worker();
    }
    if let Some(c) = &creds {
        if let Err(e) = drop_privileges(c) {
            crate::log!(Level::Emerg, "{}", e);
            return FATAL;
        }
    }
    // A panic is a bug: say so in the error log (the task that panicked ends,
    // the worker goes on).
    std::panic::set_hook(Box::new(|info| {
        crate::log!(Level::Alert, "panic: {}", info);
    }));
    // Each wait for events begins a turn whose clocked polls share a
    // reading (`net::clock`).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_unpark(crate::net::clock::turn_began)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            crate::log!(Level::Emerg, "cannot start the worker's runtime: {}", e);
            return FATAL;
        }
    };
    rt.block_on(serve(cfg, listeners, channel, shm, slot));
    // Tasks still running log their requests as they are dropped; then what
    // the access logs buffered is written.
    drop(rt);
    crate::log::files::flush_all();
    crate::log!(Level::Notice, "exiting");
    0
}

async fn serve(
    cfg: Arc<Config>,
    listeners: Vec<Listener>,
    channel: Option<UnixStream>,
    shm: crate::http::status::Shm,
    slot: usize,
) {
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
        signal(SignalKind::user_defined1()),
    );
    let (Ok(mut term), Ok(mut int), Ok(mut quit), Ok(mut usr1)) = signals else {
        crate::log!(Level::Emerg, "cannot install the worker's signal handlers");
        return;
    };
    // Without a master, HUP and USR2 reach this process; their default action
    // would kill it. In a worker they are the master's business.
    let single = channel.is_none();
    let (mut hup, mut usr2) = match (
        signal(SignalKind::hangup()).ok().filter(|_| single),
        signal(SignalKind::user_defined2()).ok().filter(|_| single),
    ) {
        (Some(h), Some(u)) => (Some(h), Some(u)),
        _ => (None, None),
    };
    let (phase_tx, phase_rx) = watch::channel(Phase::Running);
    // A timer that is always due within a second. tokio wakes its parked
    // driver (an eventfd write, and one more turn of epoll) whenever a
    // timer is set earlier than every other pending one, and a request's
    // 60 s read timeout often was (HTTP/2: 0.24 writes per request); with
    // this one pending, none is. One wake-up a second for an idle worker.
    tokio::spawn(async {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    // With a master, state files are its to write (it may write where the
    // workers' user may not): the resolver tells it when peers changed.
    let saved = Arc::new(tokio::sync::Notify::new());
    let mut shm = shm;
    if channel.is_some() {
        shm.saved = Some(saved.clone());
    }
    // Stream listeners go to the stream proxy, the others to HTTP.
    let (stream_listeners, listeners): (Vec<_>, Vec<_>) = listeners
        .into_iter()
        .partition(|l| crate::stream::is_stream_listener(&cfg, &l.addr));
    // One numbering for HTTP and stream connections, from 1.
    let next_conn = Arc::new(std::sync::atomic::AtomicU64::new(1));
    // worker_connections counts HTTP connections and stream sessions alike.
    let balance = shm.balance.as_ref().and_then(|b| b.worker(slot));
    let slots = crate::net::slots::Slots::counted(cfg.events.worker_connections, balance);
    let stream = tokio::spawn(crate::stream::serve(
        cfg.clone(),
        stream_listeners,
        phase_rx.clone(),
        shm.zones.clone(),
        shm.saved.clone(),
        slot,
        next_conn.clone(),
        slots.clone(),
        shm.tls.clone(),
        shm.limits.clone(),
        shm.stats.clone(),
    ));
    let mut server = tokio::spawn(async move {
        http::serve(cfg, listeners, phase_rx, next_conn, slots, shm, slot).await;
        let _ = stream.await;
    });

    // Ready: tell the master, then watch the channel for its end (master gone).
    let mut master = None;
    let mut to_master = None;
    if let Some(mut ch) = channel {
        if let Err(e) = ch.write_all(b"R") {
            crate::log!(Level::Alert, "cannot report readiness to the master: {}", e);
        }
        let _ = ch.set_nonblocking(true);
        if let Ok(s) = tokio::net::UnixStream::from_std(ch) {
            let (r, w) = s.into_split();
            master = Some(r);
            to_master = Some(w);
        }
    }
    let master_gone = async {
        match master.as_mut() {
            Some(m) => {
                let mut buf = [0u8; 64];
                loop {
                    match m.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(master_gone);
    let mut master_alive = true;
    loop {
        tokio::select! {
            _ = term.recv() => { let _ = phase_tx.send(Phase::Fast); break; }
            _ = int.recv() => { let _ = phase_tx.send(Phase::Fast); break; }
            _ = quit.recv() => {
                if *phase_tx.borrow() == Phase::Running {
                    crate::log!(Level::Notice, "gracefully shutting down");
                    super::title::worker_shutting_down();
                    let _ = phase_tx.send(Phase::Graceful);
                }
            }
            _ = usr1.recv() => {
                crate::log!(Level::Notice, "reopening logs");
                for (p, e) in crate::log::reopen().into_iter().chain(crate::log::files::reopen_all()) {
                    crate::log!(Level::Crit, "open() \"{}\" failed ({})", p.display(), crate::log::errno_text(&e));
                }
            }
            _ = saved.notified() => {
                if let Some(w) = &to_master {
                    let _ = w.try_write(b"S");
                }
            }
            _ = &mut master_gone, if master_alive => {
                master_alive = false;
                if *phase_tx.borrow() == Phase::Running {
                    crate::log!(Level::Notice, "the master process is gone, gracefully shutting down");
                    super::title::worker_shutting_down();
                    let _ = phase_tx.send(Phase::Graceful);
                }
            }
            Some(_) = recv_opt(&mut hup) => {
                crate::log!(Level::Warn, "reload needs \"master_process on\", ignored");
            }
            Some(_) = recv_opt(&mut usr2) => {
                crate::log!(Level::Warn, "binary upgrade needs \"master_process on\", ignored");
            }
            _ = &mut server => return,
        }
    }
    let _ = server.await;
}

/// A signal stream that may be absent (then it never fires).
async fn recv_opt(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
