//! The few system calls that need `unsafe`: `fork`, and taking ownership of
//! descriptors inherited across a binary upgrade. Kept apart so that every
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

/// True when `fd` is an open descriptor of this process.
pub fn fd_is_open(fd: std::os::fd::RawFd) -> bool {
    // SAFETY: F_GETFD on a number only reads its flags; a closed number
    // fails with EBADF. The borrow does not outlive this call.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    nix::fcntl::fcntl(borrowed, nix::fcntl::FcntlArg::F_GETFD).is_ok()
}

/// Owns a descriptor a binary upgrade handed over by number.
pub fn own_fd(fd: std::os::fd::RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: the caller checked the descriptor is open (`fd_is_open`); it
    // was left open for this process by the old master (named in the
    // upgrade's environment) and nothing else in this process owns it, so it
    // is closed exactly once, when the OwnedFd drops.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}
