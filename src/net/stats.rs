//! The connection counters every worker of a generation adds to, in a small
//! shared region: `stub_status`'s (HTTP connections and requests) and the
//! stream sessions'. Counted by the HTTP and stream servers, read by
//! `stub_status`, the API, the metrics and `$connections_*`.

use std::sync::Arc;

use crate::shm::records::StatusCounters;
use crate::shm::{Region, ShmError};

/// The counters shared by the workers of a generation.
pub struct Stats {
    region: Region,
}

impl Stats {
    pub fn create() -> Result<Stats, ShmError> {
        let region = Region::create("stub_status", 4096)?;
        region.get::<StatusCounters>(0)?;
        Ok(Stats { region })
    }

    pub(crate) fn counters(&self) -> Option<&StatusCounters> {
        self.region.get::<StatusCounters>(0).ok()
    }
}

/// This worker's counters, for the `$connections_*` variables.
static CURRENT: std::sync::OnceLock<Arc<Stats>> = std::sync::OnceLock::new();

/// Makes `stats` this worker's counters (once per worker).
pub fn publish(stats: Option<&Arc<Stats>>) {
    if let Some(s) = stats {
        let _ = CURRENT.set(s.clone());
    }
}

/// This worker's counters, once published.
pub(crate) fn current() -> Option<&'static StatusCounters> {
    CURRENT.get().and_then(|s| s.counters())
}
