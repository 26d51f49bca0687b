//! Process control: the actions behind the command line (`-v`, `-t`, `-s`, run),
//! the master loop, worker start-up and shutdown, daemonizing and the pid file.
//! Only `main.rs` calls into here (and the HTTP parker, for `trim_heap`);
//! everything else is wired from here.

mod daemon;
mod master;
mod setup;
mod sys;
mod title;
mod upgrade;
mod worker;

use std::io::Write;

use crate::cli::{Action, Cli, SignalName, configure_text, usage, version_line};
use crate::conf::{self, ConfError, Config, Paths};
use crate::log::{self, Level, LogSpec, Target};

/// Gives the heap's free pages back to the system (see `sys::trim_heap`).
pub fn trim_heap() -> bool {
    sys::trim_heap()
}

/// The binary upgrades (`USR2`) that led to this master process.
pub fn upgrades() -> u64 {
    upgrade::upgrades()
}

/// Runs what the command line asks and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.action {
        Action::Help => {
            eprint!("{}{}", version_line(), usage());
            0
        }
        Action::Version => {
            eprint!("{}", version_line());
            0
        }
        Action::Configure => {
            eprint!("{}", configure_text());
            0
        }
        Action::Test { dump } => test_config(&cli, dump),
        Action::Signal(s) => send_signal(&cli, s),
        Action::Run => master::start(&cli),
    }
}

fn paths(cli: &Cli) -> Paths {
    Paths {
        prefix: cli.prefix.clone(),
        conf_file: cli.conf_file.clone(),
        globals: cli.globals.clone(),
        error_log: cli.error_log.clone(),
    }
}

/// Logs to the `-e` file until the config's logs are open. A `-e` file that
/// cannot be opened leaves stderr, with nginx's alert.
fn startup_log(cli: &Cli) {
    let spec = LogSpec {
        target: cli.error_log.clone(),
        level: Level::Notice,
    };
    if let Err((p, e)) = log::configure(&[spec]) {
        eprintln!(
            "sluice: [alert] could not open error log file: open() \"{}\" failed ({})",
            p.display(),
            crate::log::errno_text(&e)
        );
        let _ = log::configure(&[LogSpec {
            target: Target::Stderr,
            level: Level::Notice,
        }]);
    }
    log::set_echo_stderr(true);
}

/// Loads the configuration and logs its warnings. Errors are logged `[emerg]`.
fn load_config(cli: &Cli) -> Result<Config, ConfError> {
    let p = paths(cli);
    let r = conf::load_with_warnings(&p);
    match r {
        Ok((cfg, warnings)) => {
            for w in warnings {
                crate::log!(Level::Warn, "{}", w);
            }
            Ok(cfg)
        }
        Err(e) => {
            crate::log!(Level::Emerg, "{}", e);
            Err(e)
        }
    }
}

/// Opens the config's error and access logs so that a bad path fails now,
/// with `[emerg]`; nothing changes unless every file opens.
fn open_logs(cfg: &Config) -> Result<(), ()> {
    let emerg = |(p, e): (std::path::PathBuf, std::io::Error)| {
        crate::log!(
            Level::Emerg,
            "open() \"{}\" failed ({})",
            p.display(),
            crate::log::errno_text(&e)
        );
    };
    let access_paths = cfg.access_log_paths();
    let access: &[std::path::PathBuf] = &access_paths;
    // Check the access logs first: a failure there must leave the error log as it was.
    for p in access {
        log::open_append(p).map_err(|e| emerg((p.clone(), e)))?;
    }
    log::configure(&cfg.main.error_log).map_err(emerg)?;
    log::files::open_all(access, &cfg.access_log_buffers).map_err(emerg)
}

/// Creates the temp directories the config names (mode 0700, owned by the
/// workers' user when the master is root), as nginx does at start-up.
fn create_temp_paths(cfg: &Config, owner: Option<nix::unistd::Uid>) -> Result<(), ()> {
    use std::os::unix::fs::DirBuilderExt;
    for p in cfg.http.iter().flat_map(|h| h.temp_paths.iter()) {
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(p)
        {
            crate::log!(
                Level::Emerg,
                "mkdir() \"{}\" failed ({})",
                p.display(),
                crate::log::errno_text(&e)
            );
            return Err(());
        }
        if let Some(uid) = owner {
            let _ = nix::unistd::chown(p, Some(uid), None);
        }
    }
    Ok(())
}

fn test_config(cli: &Cli, dump: bool) -> i32 {
    startup_log(cli);
    let name = cli.conf_file.display();
    let ok = match load_config(cli) {
        Ok(cfg) => {
            // As root, the workers' user must exist, as it must at start-up.
            let user_ok = match setup::resolve_creds(&cfg) {
                Ok(_) => true,
                Err(e) => {
                    crate::log!(Level::Emerg, "{}", e);
                    false
                }
            };
            // nginx opens (and so creates) the log files while testing.
            let access_paths = cfg.access_log_paths();
            let files = cfg
                .main
                .error_log
                .iter()
                .filter_map(|s| match &s.target {
                    Target::File(p) => Some(p),
                    Target::Stderr | Target::Syslog(_) => None,
                })
                .chain(access_paths.iter());
            let mut logs_ok = user_ok && setup::check_shm(&cfg);
            for p in files {
                if let Err(e) = log::open_append(p) {
                    crate::log!(
                        Level::Emerg,
                        "open() \"{}\" failed ({})",
                        p.display(),
                        crate::log::errno_text(&e)
                    );
                    logs_ok = false;
                    break;
                }
            }
            if logs_ok {
                if !cli.quiet {
                    eprintln!("sluice: the configuration file {name} syntax is ok");
                    eprintln!("sluice: configuration file {name} test is successful");
                }
                if dump {
                    let mut out = std::io::stdout().lock();
                    for (path, text) in &cfg.files.list {
                        let _ = writeln!(out, "# configuration file {}:", path.display());
                        let _ = writeln!(out, "{text}");
                    }
                    let _ = out.flush();
                }
            }
            logs_ok
        }
        Err(_) => false,
    };
    if ok {
        0
    } else {
        eprintln!("sluice: configuration file {name} test failed");
        1
    }
}

/// `-s SIGNAL`: reads the pid file the config names and signals that process.
fn send_signal(cli: &Cli, s: SignalName) -> i32 {
    startup_log(cli);
    let Ok(cfg) = load_config(cli) else {
        return 1;
    };
    let path = &cfg.main.pid;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            crate::log!(
                Level::Error,
                "open() \"{}\" failed ({})",
                path.display(),
                crate::log::errno_text(&e)
            );
            return 1;
        }
    };
    let trimmed = text.trim_end_matches('\n');
    let Some(pid) = trimmed.parse::<i32>().ok().filter(|p| *p > 0) else {
        crate::log!(
            Level::Error,
            "invalid PID number \"{}\" in \"{}\"",
            trimmed,
            path.display()
        );
        return 1;
    };
    let sig = s.signal();
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig) {
        Ok(()) => 0,
        Err(e) => {
            crate::log!(
                Level::Error,
                "kill({}, {}) failed ({}: {})",
                pid,
                sig as i32,
                e as i32,
                e.desc()
            );
            1
        }
    }
}
