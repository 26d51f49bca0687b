//! The master process: start-up (config, listeners, daemon, pid file), then a
//! single-threaded loop over `poll` that handles signals (HUP reload, QUIT, TERM,
//! INT, USR1, WINCH, CHLD), worker readiness on the control sockets, and reaped
//! children (logged as nginx logs them, respawned in the same slot). A reload
//! retires the old generation only once every new worker has reported ready.

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};
use signal_hook::consts::signal::*;
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::WithOrigin;

use super::setup::{adopt_zones, bind, chown_logs, listeners_for, make_shm, resolve_creds};
use super::worker::{self, Creds};
use super::{create_temp_paths, daemon, load_config, open_logs, startup_log, sys};
use crate::cli::Cli;
use crate::conf::Config;
use crate::http::status::Shm;
use crate::log::{self, Level, Target};
use crate::net::tls::TicketKeys;
use crate::net::{self, Bound};

/// One configuration with its listening sockets.
struct Generation {
    id: u64,
    cfg: Arc<Config>,
    bound: Vec<Bound>,
    creds: Option<Creds>,
    /// Its shared memory (zones, counters), mapped before its workers are forked.
    shm: Shm,
}

struct Worker {
    slot: usize,
    generation: u64,
    pid: Pid,
    /// The master's end of the control socket; None once the worker closed it.
    channel: Option<UnixStream>,
    ready: bool,
    /// Told to stop (QUIT or TERM): not respawned when it exits.
    retiring: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Running,
    /// WINCH: workers stopped, the master stays.
    NoWorkers,
    Quitting,
    Terminating {
        since: Instant,
        killed: bool,
    },
}

struct Master {
    cli: Cli,
    generations: Vec<Generation>,
    workers: Vec<Worker>,
    signals: Option<SignalDelivery<UnixStream, WithOrigin>>,
    state: State,
    pid_path: PathBuf,
    next_generation: u64,
    /// After USR2: the new binary's master, and the pid file's own name
    /// (this master's is then `NAME.oldbin`).
    new_binary: Option<(Pid, PathBuf)>,
    /// Started by a binary upgrade: the old master.
    old_master: Option<Pid>,
    /// Session ticket keys, made once (or handed over by the old binary)
    /// and used by every generation, so that tickets outlive reloads.
    tickets: Option<Arc<TicketKeys>>,
}

/// Starts sluice as configured and returns the exit code.
pub fn start(cli: &Cli) -> i32 {
    startup_log(cli);
    if sys::thread_count() > 1 {
        crate::log!(
            Level::Emerg,
            "the master must be single-threaded before it forks"
        );
        return 1;
    }
    super::title::init();
    // A binary upgrade hands over the listeners and zones. Read before
    // anything else opens a descriptor: adopting them is sound only while
    // the process has no sockets or zones of its own (`upgrade::adopt`).
    let inherited = super::upgrade::inherited();
    // Read while the environment is the one this binary was started with.
    let _ = super::upgrade::upgrades();
    let Ok(cfg) = load_config(cli) else {
        return 1;
    };
    let creds = match resolve_creds(&cfg) {
        Ok(c) => c,
        Err(e) => {
            crate::log!(Level::Emerg, "{}", e);
            return 1;
        }
    };
    let adopted: Vec<Bound> = inherited
        .as_ref()
        .map(|i| {
            i.listeners
                .iter()
                .filter_map(|b| b.try_clone().ok())
                .collect()
        })
        .unwrap_or_default();
    let bound = match bind(&cfg, &adopted) {
        Ok(b) => b,
        Err(e) => {
            crate::log!(Level::Emerg, "{}", e);
            return 1;
        }
    };
    if open_logs(&cfg).is_err() {
        return 1;
    }
    if create_temp_paths(&cfg, creds.as_ref().map(|c| c.uid)).is_err() {
        return 1;
    }
    drop(adopted);
    // The old master, our parent, has already daemonized.
    let started = if cfg.main.daemon && inherited.is_none() {
        match daemon::daemonize() {
            Ok(s) => Some(s),
            Err(e) => {
                crate::log!(Level::Emerg, "{}", e);
                return 1;
            }
        }
    } else {
        None
    };
    // The title before the pid file: whoever finds the pid sees the title.
    if cfg.main.master_process {
        super::title::master();
    }
    let pid_path = cfg.main.pid.clone();
    if let Err(e) = daemon::write_pid(&pid_path, std::process::id()) {
        crate::log!(
            Level::Emerg,
            "open() \"{}\" failed ({})",
            pid_path.display(),
            crate::log::errno_text(&e)
        );
        if let Some(s) = started {
            s.report(false);
        }
        return 1;
    }
    log::set_echo_stderr(false);
    if cfg.main.daemon {
        if let Some(Target::File(p)) = cfg
            .main
            .error_log
            .iter()
            .map(|s| &s.target)
            .find(|t| matches!(t, Target::File(_)))
        {
            daemon::stderr_to(p);
        }
    }
    // Zones before saying "started": a zone that cannot be built fails the
    // start, also for a daemon's waiting parent.
    // Ticket keys from the old binary, or new ones from the OS.
    let tickets = inherited
        .as_ref()
        .and_then(|i| i.ticket_keys.as_ref())
        .and_then(|m| TicketKeys::from_material(std::slice::from_ref(m)))
        .or_else(TicketKeys::generate)
        .map(Arc::new);
    if tickets.is_none() {
        crate::log!(Level::Alert, "cannot make session ticket keys");
    }
    let shm = match make_shm(&cfg, 1, None, tickets.clone(), inherited.as_ref()) {
        Ok(z) => z,
        Err(()) => {
            let _ = std::fs::remove_file(&pid_path);
            if let Some(s) = started {
                s.report(false);
            }
            return 1;
        }
    };
    // Resolved peers from the old binary's zones, or (a cold start, or a
    // layout this binary cannot read) from the state files.
    let carried = match &inherited {
        Some(i) => adopt_zones(&shm, &cfg, i),
        None => Vec::new(),
    };
    crate::upstream::state::seed_all(&shm.zones, &cfg.upstream_blocks(), &carried);
    let old_master = inherited.as_ref().map(|i| i.parent);
    drop(inherited);
    if let Some(s) = started {
        s.report(true);
    }
    let cfg = Arc::new(cfg);
    if !cfg.main.master_process {
        return single_process(cfg, bound, creds, shm, &pid_path);
    }
    let (sig_read, sig_write) = match UnixStream::pair() {
        Ok(p) => p,
        Err(e) => {
            crate::log!(Level::Emerg, "socketpair() failed: {}", e);
            let _ = std::fs::remove_file(&pid_path);
            return 1;
        }
    };
    let signals = match SignalDelivery::with_pipe(
        sig_read,
        sig_write,
        WithOrigin::default(),
        [
            SIGHUP, SIGQUIT, SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCHLD,
        ],
    ) {
        Ok(s) => s,
        Err(e) => {
            crate::log!(Level::Emerg, "cannot install signal handlers: {}", e);
            let _ = std::fs::remove_file(&pid_path);
            return 1;
        }
    };
    let mut m = Master {
        cli: cli.clone(),
        generations: vec![Generation {
            id: 1,
            cfg,
            bound,
            creds,
            shm,
        }],
        workers: Vec::new(),
        signals: Some(signals),
        state: State::Running,
        pid_path,
        next_generation: 2,
        new_binary: None,
        old_master,
        tickets,
    };
    m.start_workers(1);
    m.run()
}

fn single_process(
    cfg: Arc<Config>,
    bound: Vec<Bound>,
    creds: Option<Creds>,
    shm: Shm,
    pid_path: &PathBuf,
) -> i32 {
    crate::log!(
        Level::Notice,
        "running in a single process (master_process off)"
    );
    let listeners = listeners_for(&bound, 0);
    drop(bound);
    let _ = creds; // One process keeps its privileges, as nginx does without a master.
    let code = worker::run(cfg, listeners, None, None, shm, 0);
    let _ = std::fs::remove_file(pid_path);
    code
}

fn signal_name(sig: i32) -> String {
    Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

impl Master {
    fn current(&self) -> &Generation {
        // The last generation is the newest; the vector is never empty.
        &self.generations[self.generations.len() - 1]
    }

    fn start_workers(&mut self, generation: u64) {
        crate::log!(Level::Notice, "start worker processes");
        let n = self
            .generations
            .iter()
            .find(|g| g.id == generation)
            .map(|g| g.cfg.main.worker_processes)
            .unwrap_or(0);
        for slot in 0..n {
            self.spawn(generation, slot);
        }
    }

    /// Forks one worker for `slot` of `generation`.
    fn spawn(&mut self, generation: u64, slot: usize) {
        let (mine, theirs) = match UnixStream::pair() {
            Ok(p) => p,
            Err(e) => {
                crate::log!(
                    Level::Alert,
                    "socketpair() failed while spawning \"worker process\": {}",
                    e
                );
                return;
            }
        };
        match sys::fork() {
            Err(e) => {
                crate::log!(
                    Level::Alert,
                    "fork() failed while spawning \"worker process\" ({}: {})",
                    e as i32,
                    e.desc()
                );
            }
            Ok(ForkResult::Child) => {
                drop(mine);
                let code = self.become_worker(generation, slot, theirs);
                std::process::exit(code);
            }
            Ok(ForkResult::Parent { child }) => {
                drop(theirs);
                let _ = mine.set_nonblocking(true);
                crate::log!(Level::Notice, "start worker process {}", child);
                self.workers.push(Worker {
                    slot,
                    generation,
                    pid: child,
                    channel: Some(mine),
                    ready: false,
                    retiring: false,
                });
            }
        }
    }

    /// In the forked child: keep only this worker's sockets, give up the master's
    /// signal handling, and run the worker.
    fn become_worker(&mut self, generation: u64, slot: usize, channel: UnixStream) -> i32 {
        // Unregister the master's handlers before tokio installs the worker's.
        self.signals.take();
        // Other workers' control sockets are the master's business.
        self.workers.clear();
        let Some(pos) = self.generations.iter().position(|g| g.id == generation) else {
            return worker::FATAL;
        };
        let g = self.generations.swap_remove(pos);
        let listeners = listeners_for(&g.bound, slot);
        // Every other listening socket closes here, so that no connection queues
        // on a socket this process will never accept on.
        self.generations.clear();
        let (cfg, creds, shm) = (g.cfg.clone(), g.creds.clone(), g.shm.clone());
        drop(g);
        worker::run(cfg, listeners, Some(channel), creds, shm, slot)
    }

    fn run(&mut self) -> i32 {
        loop {
            self.wait_events();
            self.reap();
            self.retire_old_generations();
            match self.state {
                State::Quitting | State::Terminating { .. } if self.workers.is_empty() => {
                    return self.exit();
                }
                State::Terminating {
                    since,
                    killed: false,
                } if since.elapsed() > Duration::from_secs(3) => {
                    for w in &self.workers {
                        crate::log!(
                            Level::Alert,
                            "worker process {} did not exit, sending SIGKILL",
                            w.pid
                        );
                        let _ = kill(w.pid, Signal::SIGKILL);
                    }
                    self.state = State::Terminating {
                        since,
                        killed: true,
                    };
                }
                _ => {}
            }
        }
    }

    /// The new binary's master is gone: this one takes its pid file back
    /// and, if WINCH had stopped its workers, starts them again.
    fn new_binary_exited(&mut self, pid: Pid, code: Option<i32>, signal: Option<Signal>) {
        match (code, signal) {
            (_, Some(sig)) => crate::log!(
                Level::Alert,
                "new binary process {} exited on signal {}",
                pid,
                sig as i32
            ),
            (c, _) => crate::log!(
                Level::Notice,
                "new binary process {} exited with code {}",
                pid,
                c.unwrap_or(0)
            ),
        }
        let Some((_, own)) = self.new_binary.take() else {
            return;
        };
        if let Err(e) = std::fs::rename(&self.pid_path, &own) {
            crate::log!(
                Level::Alert,
                "rename() {} back to {} failed ({})",
                self.pid_path.display(),
                own.display(),
                crate::log::errno_text(&e)
            );
        } else {
            self.pid_path = own;
        }
        if self.state == State::NoWorkers {
            self.state = State::Running;
            let id = self.current().id;
            self.start_workers(id);
        }
    }

    fn exit(&mut self) -> i32 {
        // nginx's rule: never unlink unix sockets the other master still uses.
        let other_alive =
            self.new_binary.is_some() || self.old_master.is_some_and(|p| kill(p, None).is_ok());
        for g in &self.generations {
            for p in net::unix_paths(&g.bound) {
                if !other_alive {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        let _ = std::fs::remove_file(&self.pid_path);
        crate::log!(Level::Notice, "exit");
        0
    }

    /// Waits for a signal or a control-socket message, then handles what came.
    fn wait_events(&mut self) {
        let Some(sigs) = self.signals.as_ref() else {
            return;
        };
        let sig_fd = sigs.get_read().as_fd();
        let mut fds = vec![PollFd::new(sig_fd, PollFlags::POLLIN)];
        let chans: Vec<usize> = (0..self.workers.len())
            .filter(|&i| self.workers[i].channel.is_some())
            .collect();
        for &i in &chans {
            if let Some(c) = &self.workers[i].channel {
                fds.push(PollFd::new(c.as_fd(), PollFlags::POLLIN));
            }
        }
        let timeout = PollTimeout::try_from(500).unwrap_or(PollTimeout::NONE);
        let _ = poll(&mut fds, timeout);
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        for (k, &i) in chans.iter().enumerate() {
            if ready[k + 1] {
                self.read_channel(i);
            }
        }
        if ready[0] {
            let pending: Vec<_> = match self.signals.as_mut() {
                Some(s) => s.pending().collect(),
                None => Vec::new(),
            };
            for origin in pending {
                let from = origin.process.map(|p| p.pid).unwrap_or(0);
                self.on_signal(origin.signal, from);
            }
        }
    }

    fn read_channel(&mut self, i: usize) {
        let w = &mut self.workers[i];
        let Some(ch) = w.channel.as_mut() else { return };
        let mut buf = [0u8; 64];
        match ch.read(&mut buf) {
            Ok(0) => w.channel = None,
            Ok(n) => {
                if buf[..n].contains(&b'R') {
                    w.ready = true;
                    // Told to stop before it could hear it (a QUIT right
                    // after a HUP): told again now that it listens.
                    if w.retiring {
                        let sig = match self.state {
                            State::Terminating { .. } => Signal::SIGTERM,
                            _ => Signal::SIGQUIT,
                        };
                        let _ = kill(w.pid, sig);
                    }
                }
                if buf[..n].contains(&b'S') {
                    let generation = w.generation;
                    if let Some(g) = self.generations.iter().find(|g| g.id == generation) {
                        crate::upstream::state::save_all(&g.shm.zones, &g.cfg.upstream_blocks());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => w.channel = None,
        }
    }

    fn on_signal(&mut self, sig: i32, from: i32) {
        let action = match sig {
            SIGHUP => ", reconfiguring",
            SIGQUIT => ", shutting down",
            SIGTERM | SIGINT => ", exiting",
            SIGUSR1 => ", reopening logs",
            SIGUSR2 => ", changing binary",
            SIGWINCH => ", stop accepting connections",
            _ => "",
        };
        crate::log!(
            Level::Notice,
            "signal {} ({}) received from {}{}",
            sig,
            signal_name(sig),
            from,
            action
        );
        match sig {
            SIGHUP => self.reload(),
            SIGQUIT if !matches!(self.state, State::Terminating { .. }) => {
                self.state = State::Quitting;
                self.signal_workers(Signal::SIGQUIT, |_| true);
                // Stop listening at once; workers hold their own copies.
                for g in &mut self.generations {
                    g.bound.clear();
                }
            }
            SIGTERM | SIGINT => {
                self.state = State::Terminating {
                    since: Instant::now(),
                    killed: false,
                };
                self.signal_workers(Signal::SIGTERM, |_| true);
            }
            SIGUSR1 => {
                crate::log!(Level::Notice, "reopening logs");
                for (p, e) in log::reopen().into_iter().chain(log::files::reopen_all()) {
                    crate::log!(
                        Level::Alert,
                        "open() \"{}\" failed ({})",
                        p.display(),
                        crate::log::errno_text(&e)
                    );
                }
                chown_logs(&self.current().creds);
                self.signal_workers(Signal::SIGUSR1, |_| true);
            }
            SIGUSR2 => self.upgrade(),
            SIGWINCH if self.state == State::Running => {
                self.state = State::NoWorkers;
                self.signal_workers(Signal::SIGQUIT, |_| true);
            }
            _ => {}
        }
    }

    /// USR2: starts the new binary with our listeners and zones; our pid
    /// file becomes `.oldbin`.
    fn upgrade(&mut self) {
        let old_alive = self.old_master.is_some_and(|p| kill(p, None).is_ok());
        if self.new_binary.is_some() || old_alive {
            crate::log!(
                Level::Alert,
                "the changing binary signal is ignored: you should shutdown or terminate before either old or new binary's process"
            );
            return;
        }
        let mut oldbin = self.pid_path.clone().into_os_string();
        oldbin.push(".oldbin");
        let oldbin = PathBuf::from(oldbin);
        if let Err(e) = std::fs::rename(&self.pid_path, &oldbin) {
            crate::log!(
                Level::Alert,
                "rename() {} to {} failed ({}) before executing new binary process",
                self.pid_path.display(),
                oldbin.display(),
                crate::log::errno_text(&e)
            );
            return;
        }
        let g = self.current();
        let listeners: Vec<std::os::fd::BorrowedFd<'_>> = g
            .bound
            .iter()
            .flat_map(|b| b.sockets.iter())
            .map(|s| s.as_fd())
            .collect();
        let zones: Vec<(String, std::os::fd::BorrowedFd<'_>)> = g
            .shm
            .zones
            .iter()
            .filter_map(|(n, z)| z.fd().map(|fd| (n.clone(), fd)))
            // `sticky learn` sessions go along too.
            .chain(g.shm.sticky.iter().filter_map(|(n, (_, z))| {
                z.fd()
                    .map(|fd| (format!("{}:{n}", crate::upstream::sticky::KIND), fd))
            }))
            .collect();
        // The ticket keys go along, so that tickets stay good.
        let keys = self
            .tickets
            .as_ref()
            .and_then(|k| super::upgrade::keys_memfd(k.material()));
        match super::upgrade::exec_new_binary(&listeners, &zones, keys.as_ref().map(|k| k.as_fd()))
        {
            Ok(pid) => {
                crate::log!(Level::Notice, "start new binary process {}", pid);
                let own = std::mem::replace(&mut self.pid_path, oldbin);
                self.new_binary = Some((pid, own));
            }
            Err(e) => {
                crate::log!(Level::Alert, "{}", e);
                let _ = std::fs::rename(&oldbin, &self.pid_path);
            }
        }
    }

    /// Sends `sig` to the live workers `which` selects; QUIT and TERM retire them.
    fn signal_workers(&mut self, sig: Signal, which: impl Fn(&Worker) -> bool) {
        let retire = matches!(sig, Signal::SIGQUIT | Signal::SIGTERM);
        for w in self.workers.iter_mut().filter(|w| which(w)) {
            if retire {
                w.retiring = true;
            }
            if let Err(e) = kill(w.pid, sig) {
                crate::log!(
                    Level::Alert,
                    "kill({}, {}) failed ({}: {})",
                    w.pid,
                    sig as i32,
                    e as i32,
                    e.desc()
                );
            }
        }
    }

    /// HUP: a new generation from the re-read config; a bad config changes nothing.
    fn reload(&mut self) {
        if matches!(self.state, State::Quitting | State::Terminating { .. }) {
            return;
        }
        let Ok(cfg) = load_config(&self.cli) else {
            return;
        };
        let creds = match resolve_creds(&cfg) {
            Ok(c) => c,
            Err(e) => {
                crate::log!(Level::Emerg, "{}", e);
                return;
            }
        };
        let existing: Vec<Bound> = self
            .generations
            .iter()
            .flat_map(|g| g.bound.iter())
            .filter_map(|b| b.try_clone().ok())
            .collect();
        let bound = match bind(&cfg, &existing) {
            Ok(b) => b,
            Err(e) => {
                crate::log!(Level::Emerg, "{}", e);
                return;
            }
        };
        drop(existing);
        if open_logs(&cfg).is_err() {
            return;
        }
        if create_temp_paths(&cfg, creds.as_ref().map(|c| c.uid)).is_err() {
            return;
        }
        chown_logs(&creds);
        if cfg.main.pid != self.pid_path {
            match daemon::write_pid(&cfg.main.pid, std::process::id()) {
                Ok(()) => {
                    let _ = std::fs::remove_file(&self.pid_path);
                    self.pid_path = cfg.main.pid.clone();
                }
                Err(e) => crate::log!(
                    Level::Alert,
                    "open() \"{}\" failed ({})",
                    cfg.main.pid.display(),
                    crate::log::errno_text(&e)
                ),
            }
        }
        let id = self.next_generation;
        let Ok(shm) = make_shm(
            &cfg,
            id,
            Some(&self.current().shm),
            self.tickets.clone(),
            None,
        ) else {
            return;
        };
        // The new zones start with the resolved peers of the current ones.
        let current = self.current();
        let carried = crate::upstream::carry::preresolve(
            &shm.zones,
            &cfg.upstream_blocks(),
            &current.shm.zones,
            &current.cfg.upstream_blocks(),
        );
        // Those with no old zone to copy from start from their state files.
        crate::upstream::state::seed_all(&shm.zones, &cfg.upstream_blocks(), &carried);
        self.next_generation += 1;
        self.generations.push(Generation {
            id,
            cfg: Arc::new(cfg),
            bound,
            creds,
            shm,
        });
        self.state = State::Running;
        self.start_workers(id);
    }

    /// Once every worker of the newest generation is ready, QUIT the older ones,
    /// and forget generations that have no workers left.
    fn retire_old_generations(&mut self) {
        let newest = self.current().id;
        let all_ready = self
            .workers
            .iter()
            .filter(|w| w.generation == newest && !w.retiring)
            .all(|w| w.ready);
        let starting = self
            .workers
            .iter()
            .any(|w| w.generation == newest && !w.retiring);
        if all_ready && starting {
            self.signal_workers(Signal::SIGQUIT, |w| w.generation != newest && !w.retiring);
        }
        let live: HashSet<u64> = self.workers.iter().map(|w| w.generation).collect();
        self.generations
            .retain(|g| g.id == newest || live.contains(&g.id));
    }

    fn reap(&mut self) {
        loop {
            let status = match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(s) => s,
            };
            let (pid, code, signal, core) = match status {
                WaitStatus::Exited(pid, code) => (pid, Some(code), None, false),
                WaitStatus::Signaled(pid, sig, core) => (pid, None, Some(sig), core),
                _ => continue,
            };
            if self.new_binary.as_ref().is_some_and(|(p, _)| *p == pid) {
                self.new_binary_exited(pid, code, signal);
                continue;
            }
            let Some(i) = self.workers.iter().position(|w| w.pid == pid) else {
                continue;
            };
            let w = self.workers.swap_remove(i);
            // Whatever it held in its generation's zones is opened again.
            if let Some(g) = self.generations.iter().find(|g| g.id == w.generation) {
                let raw = pid.as_raw() as u32;
                for z in g.shm.zones.values() {
                    if z.repair(w.slot, raw) {
                        crate::log!(
                            Level::Alert,
                            "shared memory zone \"{}\" was locked by {}",
                            z.name,
                            pid
                        );
                    }
                }
                for z in g.shm.limits.values() {
                    if z.repair(raw) {
                        crate::log!(
                            Level::Alert,
                            "shared memory zone \"{}\" was locked by {}",
                            z.name,
                            pid
                        );
                    }
                }
                let learn = g.shm.sticky.values().map(|(_, z)| z);
                for z in g.shm.tls.caches.values().chain(learn) {
                    if z.repair(raw) {
                        crate::log!(
                            Level::Alert,
                            "shared memory zone \"{}\" was locked by {}",
                            z.name,
                            pid
                        );
                    }
                }
            }
            match (code, signal) {
                (_, Some(sig)) => crate::log!(
                    Level::Alert,
                    "worker process {} exited on signal {}{}",
                    pid,
                    sig as i32,
                    if core { " (core dumped)" } else { "" }
                ),
                (Some(worker::FATAL), _) => crate::log!(
                    Level::Alert,
                    "worker process {} exited with fatal code {} and cannot be respawned",
                    pid,
                    worker::FATAL
                ),
                (Some(c), _) => crate::log!(
                    Level::Notice,
                    "worker process {} exited with code {}",
                    pid,
                    c
                ),
                _ => {}
            }
            let respawn = !w.retiring
                && self.state == State::Running
                && code != Some(worker::FATAL)
                && self.generations.iter().any(|g| g.id == w.generation);
            if respawn {
                self.spawn(w.generation, w.slot);
            }
        }
    }
}
