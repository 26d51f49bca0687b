//! sluice: a multi-process, nginx-compatible reverse proxy whose upstream peers live
//! in shared memory and follow DNS.
//!
//! Glossary:
//! - *master*: the single-threaded process that reads the config, binds listeners,
//!   forks workers and handles signals. It never starts a runtime or a thread.
//! - *worker*: a forked process running a tokio current-thread runtime that serves
//!   connections on the inherited listeners.
//! - *generation*: one parsed configuration with its workers; a reload starts a new
//!   one and retires the old one once the new workers report ready.
//! - *prefix*: `-p`; relative paths in the config start there, `include` paths at
//!   the directory of the configuration file.

#![deny(unsafe_code)]

pub mod cli;
pub mod conf;
pub mod h1;
pub mod http;
pub mod log;
pub mod net;
pub mod octets;
pub mod process;
pub mod shm;
pub mod stream;
pub mod upstream;

/// sluice's version, printed by `-v` and `-V` and in `Server:` headers.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The nginx whose behaviour sluice follows.
pub const NGINX_VERSION: &str = "1.31.5";

/// How many cases a property test runs: its own bounded default in
/// `scripts/test`, or `PROPTEST_CASES` for a longer run (see the README).
#[cfg(test)]
pub(crate) fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
