//! The few system calls that need `unsafe`: `fork`, and taking ownership of
//! descriptors inherited across a binary upgrade. Kept apart so that every
//! unsafe block in the process layer is in one place with its reason; the
//! checks that make adopting a descriptor sound are in `upgrade`.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::unistd::ForkResult;

/// How many threads this process has (from /proc). The master must have one
/// whenever it forks.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1)
}

/// `fork()`. Callers are the master (single-threaded, no runtime) and the
/// daemonizing start-up (single-threaded as well).
#[allow(unsafe_code)]
pub fn fork() -> nix::Result<ForkResult> {
    // SAFETY: fork is unsound only when other threads may hold locks or be
    // mid-way through allocations that the child would inherit half-done. The
    // master never starts a thread or a runtime (ARCHITECTURE.md at the top
    // of the repository, "Processes"); `start` refuses to run when /proc
    // shows more than one thread, so the child gets a consistent copy of a
    // single-threaded process.
    unsafe { nix::unistd::fork() }
}

/// What the descriptor number `fd` of this process refers to, as
/// /proc/self/fd names it (`socket:[123]`, `/memfd:sluice:z (deleted)`, a
/// path); None when the number is not open. Asking never touches the
/// descriptor, so any number may be asked about.
pub fn fd_target(fd: RawFd) -> Option<String> {
    if fd < 0 {
        return None;
    }
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Owns a descriptor a binary upgrade handed over by number.
///
/// # Safety
///
/// `fd` is open, and nothing else in this process owns it or will close it:
/// from here on it is closed exactly once, when the returned `OwnedFd` (or
/// whatever it is turned into) drops, unless it is given back with
/// `into_raw_fd`. Two calls with the same number make two owners and a
/// double close; a number the process already uses (a log file, a socket it
/// opened) would be closed under its owner.
#[allow(unsafe_code)]
pub unsafe fn own_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller's contract above is exactly `from_raw_fd`'s.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// glibc's `malloc_trim(0)`: the heap's wholly free pages go back to the
/// system, wherever they are in the heap (a `free` gives back only the
/// heap's top). Returns whether any memory was released.
#[allow(unsafe_code)]
pub fn trim_heap() -> bool {
    // SAFETY: malloc_trim takes no pointer and touches only the allocator's
    // own state, under the allocator's locks; it is safe from any thread.
    unsafe { nix::libc::malloc_trim(0) == 1 }
}

/// `setpriority(PRIO_PROCESS, 0, nice)`: this process's nice value.
#[allow(unsafe_code)]
pub fn set_priority(nice: i32) -> nix::Result<()> {
    // SAFETY: setpriority(2) takes integers only and touches no memory of
    // this process.
    let rc = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, 0, nice) };
    if rc == -1 {
        return Err(nix::Error::last());
    }
    Ok(())
}

/// Sets every environment variable again, so that the C library holds each
/// in memory of its own and none in the strings the process started with,
/// which the process title then overwrites (see `title`). Called by the
/// master while it is single-threaded.
#[allow(unsafe_code)]
pub fn relocate_environment() {
    let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    for (k, v) in vars {
        // SAFETY: changing the environment is unsound only while another
        // thread may read it; the master calls this at start, before any
        // thread exists (`start` checks `thread_count`).
        unsafe { std::env::set_var(k, v) };
    }
}

/// Keeps only the environment variables `keep` accepts, then sets `set`.
/// Called by a new worker before its runtime starts.
#[allow(unsafe_code)]
pub fn set_environment<'a>(
    keep: impl Fn(&std::ffi::OsStr) -> bool,
    set: impl Iterator<Item = (&'a str, &'a str)>,
) {
    let drop: Vec<std::ffi::OsString> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| !keep(k))
        .collect();
    for k in drop {
        // SAFETY: changing the environment is unsound only while another
        // thread may read it. A worker calls this right after fork from the
        // single-threaded master (see `fork`), before its runtime or any
        // thread starts.
        unsafe { std::env::remove_var(k) };
    }
    for (k, v) in set {
        // SAFETY: as above, no other thread exists yet.
        unsafe { std::env::set_var(k, v) };
    }
}
