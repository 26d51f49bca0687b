//! The error log in nginx's format: `YYYY/MM/DD HH:MM:SS [level] PID#0: *CONN message`.
//! One process-wide set of sinks, set by the master from the config and inherited by
//! workers across `fork`; `reopen` re-opens every file by path (USR1). No I/O happens
//! here besides writing and opening the sinks; callers decide what to log.

pub mod escape;
pub mod files;
pub mod syslog;

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// nginx's eight levels, low to high. `error_log FILE LEVEL` logs LEVEL and above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Notice,
    Warn,
    Error,
    Crit,
    Alert,
    Emerg,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "debug" => Level::Debug,
            "info" => Level::Info,
            "notice" => Level::Notice,
            "warn" => Level::Warn,
            "error" => Level::Error,
            "crit" => Level::Crit,
            "alert" => Level::Alert,
            "emerg" => Level::Emerg,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Notice => "notice",
            Level::Warn => "warn",
            Level::Error => "error",
            Level::Crit => "crit",
            Level::Alert => "alert",
            Level::Emerg => "emerg",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a sink writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Stderr,
    File(PathBuf),
    /// `syslog:server=...` as written (checked by `syslog::Spec::parse`).
    Syslog(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Stderr => f.write_str("stderr"),
            Target::File(p) => write!(f, "{}", p.display()),
            Target::Syslog(t) => f.write_str(t),
        }
    }
}

/// One `error_log` destination with its minimum level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSpec {
    pub target: Target,
    pub level: Level,
}

struct Sink {
    spec: LogSpec,
    file: Option<File>,
    syslog: Option<syslog::Peer>,
}

#[derive(Default)]
struct Sinks {
    /// During start-up and `-t`, warnings and worse are also shown on stderr as
    /// `sluice: [level] message`, as nginx shows them.
    echo_stderr: bool,
    sinks: Vec<Sink>,
    /// The lowest level any sink accepts, so that most calls return at once.
    min: Option<Level>,
}

fn global() -> &'static Arc<RwLock<Sinks>> {
    static GLOBAL: std::sync::OnceLock<Arc<RwLock<Sinks>>> = std::sync::OnceLock::new();
    GLOBAL.get_or_init(|| {
        Arc::new(RwLock::new(Sinks {
            sinks: vec![Sink {
                spec: LogSpec {
                    target: Target::Stderr,
                    level: Level::Notice,
                },
                file: None,
                syslog: None,
            }],
            min: Some(Level::Notice),
            echo_stderr: false,
        }))
    })
}

/// Opens a log file for appending, creating it (mode 0644) when missing.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
}

/// Replaces the sinks. Files that cannot be opened are reported back and left out;
/// the caller decides whether that is fatal (start-up) or not (reload).
pub fn configure(specs: &[LogSpec]) -> Result<(), (PathBuf, std::io::Error)> {
    let mut sinks = Vec::with_capacity(specs.len());
    for spec in specs {
        let (file, syslog) = match &spec.target {
            Target::Stderr => (None, None),
            Target::File(p) => (Some(open_append(p).map_err(|e| (p.clone(), e))?), None),
            // The config checked it; a target that does not parse logs nothing.
            Target::Syslog(t) => (None, syslog::Spec::parse(t).ok().map(syslog::Peer::new)),
        };
        sinks.push(Sink {
            spec: spec.clone(),
            file,
            syslog,
        });
    }
    let min = sinks.iter().map(|s| s.spec.level).min();
    let mut g = global().write().unwrap_or_else(|e| e.into_inner());
    g.sinks = sinks;
    g.min = min;
    Ok(())
}

/// Re-opens every file sink by path (after a rename by logrotate). A file that
/// cannot be re-opened keeps its old descriptor, and the failure is returned.
pub fn reopen() -> Vec<(PathBuf, std::io::Error)> {
    let mut failed = Vec::new();
    let mut g = global().write().unwrap_or_else(|e| e.into_inner());
    for sink in &mut g.sinks {
        if let Target::File(p) = &sink.spec.target {
            match open_append(p) {
                Ok(f) => sink.file = Some(f),
                Err(e) => failed.push((p.clone(), e)),
            }
        }
    }
    failed
}

/// The file paths of the current sinks (the master chowns them for the workers' user).
pub fn file_paths() -> Vec<PathBuf> {
    let g = global().read().unwrap_or_else(|e| e.into_inner());
    g.sinks
        .iter()
        .filter_map(|s| match &s.spec.target {
            Target::File(p) => Some(p.clone()),
            Target::Stderr | Target::Syslog(_) => None,
        })
        .collect()
}

/// Turns the start-up copy of warnings and errors to stderr on or off.
pub fn set_echo_stderr(on: bool) {
    let mut g = global().write().unwrap_or_else(|e| e.into_inner());
    g.echo_stderr = on;
}

/// Formats one line in nginx's error-log format.
pub fn format_line(level: Level, conn: Option<u64>, msg: &dyn fmt::Display) -> String {
    let now = chrono::Local::now();
    let pid = std::process::id();
    match conn {
        Some(c) => format!(
            "{} [{}] {}#0: *{} {}\n",
            now.format("%Y/%m/%d %H:%M:%S"),
            level,
            pid,
            c,
            msg
        ),
        None => format!(
            "{} [{}] {}#0: {}\n",
            now.format("%Y/%m/%d %H:%M:%S"),
            level,
            pid,
            msg
        ),
    }
}

/// Whether a message at `level` goes anywhere: for a message whose making
/// costs something (a system call, a formatted text).
pub fn enabled(level: Level) -> bool {
    let g = global().read().unwrap_or_else(|e| e.into_inner());
    g.min.is_some_and(|m| level >= m) || (g.echo_stderr && level >= Level::Warn)
}

/// Writes one message to every sink whose level admits it. Each line is written
/// with a single `write` on an `O_APPEND` descriptor, so lines from several
/// processes do not interleave.
pub fn write(level: Level, conn: Option<u64>, msg: fmt::Arguments<'_>) {
    let g = global().read().unwrap_or_else(|e| e.into_inner());
    let to_stderr_sink = g
        .sinks
        .iter()
        .any(|s| s.spec.target == Target::Stderr && level >= s.spec.level);
    if g.echo_stderr && level >= Level::Warn && !to_stderr_sink {
        let _ = std::io::stderr().write_all(format!("sluice: [{level}] {msg}\n").as_bytes());
    }
    if g.min.is_none_or(|m| level < m) {
        return;
    }
    let line = format_line(level, conn, &msg);
    for sink in &g.sinks {
        if level < sink.spec.level {
            continue;
        }
        // A full disk or a closed stderr must not take the process down.
        let _ = match (&sink.file, &sink.syslog, &sink.spec.target) {
            (Some(f), ..) => (&*f).write_all(line.as_bytes()),
            // The severity is the line's level, as nginx (emerg 0 .. debug 7).
            (None, Some(p), _) => {
                p.send(Some(Level::Emerg as u8 - level as u8), line.as_bytes());
                Ok(())
            }
            (None, None, Target::Syslog(_)) => Ok(()),
            (None, None, _) => std::io::stderr().write_all(line.as_bytes()),
        };
    }
}

/// `2: No such file or directory`, as nginx prints an errno: with the C
/// library's text (std's), which differs from nix's table for some errors
/// (ELOOP is "Too many levels of symbolic links").
pub fn errno_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => {
            let text = std::io::Error::from_raw_os_error(n).to_string();
            let suffix = format!(" (os error {n})");
            format!("{n}: {}", text.strip_suffix(&suffix).unwrap_or(&text))
        }
        None => e.to_string(),
    }
}

/// `log!(Level::Notice, "start worker process {}", pid)`
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log::write($level, None, format_args!($($arg)+))
    };
}

/// `log_conn!(Level::Error, conn_number, "...")`: a line about one connection (`*N`).
#[macro_export]
macro_rules! log_conn {
    ($level:expr, $conn:expr, $($arg:tt)+) => {
        $crate::log::write($level, Some($conn), format_args!($($arg)+))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_order_and_parse() {
        assert!(Level::Debug < Level::Emerg);
        assert!(Level::Notice < Level::Warn);
        for l in [
            "debug", "info", "notice", "warn", "error", "crit", "alert", "emerg",
        ] {
            assert_eq!(Level::parse(l).map(|x| x.as_str()), Some(l));
        }
        assert_eq!(Level::parse("verbose"), None);
    }

    #[test]
    fn errno_as_the_c_library_words_it() {
        let t = |n| errno_text(&std::io::Error::from_raw_os_error(n));
        assert_eq!(t(2), "2: No such file or directory");
        assert_eq!(t(40), "40: Too many levels of symbolic links");
    }

    #[test]
    fn line_format() {
        let l = format_line(Level::Notice, None, &"start worker processes");
        // 2026/11/29 18:00:00 [notice] 1234#0: start worker processes
        let re = regex::Regex::new(
            r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[notice\] \d+#0: start worker processes\n$",
        )
        .unwrap();
        assert!(re.is_match(&l), "{l}");
        let l = format_line(Level::Error, Some(17), &"x");
        assert!(l.contains("[error] ") && l.contains("#0: *17 x"), "{l}");
    }
}
