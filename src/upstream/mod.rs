//! Upstreams at run time, per worker: each configured upstream's peers (with
//! nginx's balancing state) and its keep-alive connection cache. The HTTP proxy
//! asks for a peer, connects or reuses, and releases the peer with the outcome.

pub mod balancer;
mod crc32;
pub mod peers;
pub mod pool;

use std::sync::{Arc, Mutex, MutexGuard};

use crate::conf::model::{Http, Upstream};
pub use peers::{Outcome, PeerId, Peers, Released, Tried};
pub use pool::{Pool, Pooled};

/// One upstream in one worker.
pub struct UpstreamRt {
    pub cfg: Arc<Upstream>,
    // Process-local locks: this state is per worker (the zone issue moves it).
    peers: Mutex<Peers>,
    pool: Mutex<Pool>,
}

impl UpstreamRt {
    pub fn new(cfg: Arc<Upstream>) -> UpstreamRt {
        let peers = Peers::from_config(&cfg);
        let pool = Pool::new(cfg.keepalive.clone());
        UpstreamRt {
            cfg,
            peers: Mutex::new(peers),
            pool: Mutex::new(pool),
        }
    }

    pub fn peers(&self) -> MutexGuard<'_, Peers> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Every upstream of the configuration, indexed as `Http::upstreams`.
pub struct Upstreams(Vec<Arc<UpstreamRt>>);

impl Upstreams {
    pub fn new(http: Option<&Http>) -> Upstreams {
        Upstreams(
            http.map(|h| {
                h.upstreams
                    .iter()
                    .map(|u| Arc::new(UpstreamRt::new(u.clone())))
                    .collect()
            })
            .unwrap_or_default(),
        )
    }

    pub fn get(&self, i: usize) -> Option<&Arc<UpstreamRt>> {
        self.0.get(i)
    }
}
