//! Process titles as nginx shows them in `ps`: `sluice: master process
//! ARGV...`, `sluice: worker process`, `sluice: worker process is shutting
//! down`. As nginx does, the title is written over the memory of the
//! process's original argument strings and, when they follow directly, its
//! environment strings (which the master first copies elsewhere: see
//! `sys::relocate_environment`); the kernel shows that memory as
//! `/proc/PID/cmdline`. The writes go through `/proc/self/mem`, so no Rust
//! pointer to that memory is made.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// Where the original argument (and environment) strings are, and how long.
#[derive(Clone, Copy)]
struct Area {
    start: u64,
    len: usize,
}

static AREA: OnceLock<Option<Area>> = OnceLock::new();
static ARGS: OnceLock<Vec<OsString>> = OnceLock::new();
/// This process's `/proc/self/mem`, with the pid that opened it (a forked
/// worker inherits its master's, which writes the master's memory).
static IS_WORKER: AtomicBool = AtomicBool::new(false);
static MEM: Mutex<Option<(u32, File)>> = Mutex::new(None);

/// Takes the title area: saves the command line and moves the environment
/// out of the way. Called by the master while it is single-threaded.
pub fn init() {
    ARGS.get_or_init(|| std::env::args_os().collect());
    AREA.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let area = area(&stat)?;
        super::sys::relocate_environment();
        Some(area)
    });
}

/// The command line as the process was started (the title overwrites the
/// strings `std::env::args` reads).
pub fn original_args() -> Vec<OsString> {
    ARGS.get()
        .cloned()
        .unwrap_or_else(|| std::env::args_os().collect())
}

/// The master's title: nginx's "master process" and the command line.
pub fn master() {
    let mut t = String::from("sluice: master process");
    for a in original_args() {
        t.push(' ');
        t.push_str(&a.to_string_lossy());
    }
    set(&t);
}

/// A worker's title (not in single-process mode, which keeps its command
/// line as nginx does).
pub fn worker() {
    IS_WORKER.store(true, Relaxed);
    set("sluice: worker process");
}

/// A worker's title once it stops gracefully.
pub fn worker_shutting_down() {
    if IS_WORKER.load(Relaxed) {
        set("sluice: worker process is shutting down");
    }
}

/// Shows `title` (cut to the area's length) as this process's command
/// line. Does nothing before `init` or where the area is unknown. A worker
/// calls it first before it drops privileges: `/proc/self/mem` can then no
/// longer be opened, but stays writable once open.
fn set(title: &str) {
    let Some(Some(area)) = AREA.get().copied() else {
        return;
    };
    let mut mem = MEM.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    if mem.as_ref().is_none_or(|(pid, _)| *pid != me) {
        *mem = std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/self/mem")
            .ok()
            .map(|f| (me, f));
    }
    if let Some((_, f)) = mem.as_ref() {
        let _ = f.write_all_at(&padded(title, area.len), area.start);
    }
}

/// `title` cut to `len - 1` bytes and padded with NULs to `len`.
fn padded(title: &str, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = title.len().min(len.saturating_sub(1));
    buf[..n].copy_from_slice(&title.as_bytes()[..n]);
    buf
}

/// The area from `/proc/self/stat`'s `arg_start`, `arg_end`, `env_start`
/// and `env_end` (fields 48 to 51): the argument strings, and the
/// environment strings too when they follow directly.
fn area(stat: &str) -> Option<Area> {
    // The command name (field 2) may hold spaces and parentheses.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let (arg_start, arg_end) = (field(48)?, field(49)?);
    let (env_start, env_end) = (field(50)?, field(51)?);
    let end = if env_start == arg_end && env_end > env_start {
        env_end
    } else {
        arg_end
    };
    let len = usize::try_from(end.checked_sub(arg_start)?).ok()?;
    (len > 1).then_some(Area {
        start: arg_start,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(comm: &str, args: [u64; 4]) -> String {
        let mut s = format!("1234 ({comm}) S");
        for i in 4..48 {
            s.push_str(&format!(" {i}"));
        }
        for a in args {
            s.push_str(&format!(" {a}"));
        }
        s.push_str(" 0\n");
        s
    }

    #[test]
    fn area_from_stat() {
        let a = area(&stat("sluice", [1000, 1040, 1040, 1500])).expect("area");
        assert_eq!((a.start, a.len), (1000, 500));
        // A command name with spaces and a parenthesis.
        let a = area(&stat("a) b (c", [1000, 1040, 1040, 1500])).expect("area");
        assert_eq!(a.len, 500);
        // The environment elsewhere: only the arguments.
        let a = area(&stat("x", [1000, 1040, 2000, 2500])).expect("area");
        assert_eq!(a.len, 40);
        // Hostile or short lines: none.
        assert!(area(&stat("x", [2000, 1040, 1040, 1500])).is_none());
        assert!(area("1234 (x) S 1 2 3").is_none());
        assert!(area("no parenthesis").is_none());
    }

    #[test]
    fn padding() {
        assert_eq!(padded("abc", 6), b"abc\0\0\0");
        assert_eq!(padded("abcdef", 4), b"abc\0");
        assert!(padded("abc", 0).is_empty());
    }
}
