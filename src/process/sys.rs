//! The few system calls that need `unsafe`: `fork`. Kept apart so that every
//! unsafe block in the process layer is in one place with its reason.

#![allow(unsafe_code)]

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
pub fn fork() -> nix::Result<ForkResult> {
    // SAFETY: fork is unsound only when other threads may hold locks or be
    // mid-way through allocations that the child would inherit half-done. The
    // master never starts a thread or a runtime (ARCHITECTURE.md); `start`
    // refuses to run when /proc shows more than one thread, so the child gets a
    // consistent copy of a single-threaded process.
    unsafe { nix::unistd::fork() }
}
