//! The keep-alive cache of idle upstream connections, per upstream and worker:
//! at most `keepalive N` idle connections, the least recently used evicted
//! first; a connection is reused most-recently-used first, never after
//! `keepalive_timeout` idle, `keepalive_time` of age (less its jitter) or
//! `keepalive_requests`.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;

use crate::conf::model::{Keepalive, PeerAddr};

/// An upstream connection ready for a request.
pub struct Pooled {
    pub sender: SendRequest<Full<Bytes>>,
    pub peer: PeerAddr,
    pub created: Instant,
    /// `keepalive_time`, with its jitter drawn for this connection.
    pub max_age: std::time::Duration,
    pub idle_since: Instant,
    /// Requests sent on it so far.
    pub requests: u64,
    /// With `keepalive N local`, the location it belongs to.
    pub location: usize,
}

pub struct Pool {
    cfg: Keepalive,
    /// Most recently used at the front.
    idle: VecDeque<Pooled>,
}

impl Pool {
    pub fn new(cfg: Keepalive) -> Pool {
        Pool {
            cfg,
            idle: VecDeque::new(),
        }
    }

    fn fresh(&self, c: &Pooled, now: Instant) -> bool {
        !c.sender.is_closed()
            && now.duration_since(c.idle_since) < self.cfg.timeout
            && now.duration_since(c.created) < c.max_age
            && c.requests < self.cfg.requests
    }

    /// An idle connection to `peer`, if one is cached and still usable.
    pub fn take(&mut self, peer: &PeerAddr, location: usize, now: Instant) -> Option<Pooled> {
        // Drop what has gone stale on the way.
        let cfg_local = self.cfg.local;
        let mut i = 0;
        while i < self.idle.len() {
            if !self.fresh(&self.idle[i], now) {
                self.idle.remove(i);
                continue;
            }
            let c = &self.idle[i];
            if c.peer == *peer && (!cfg_local || c.location == location) {
                return self.idle.remove(i);
            }
            i += 1;
        }
        None
    }

    /// Whether a connection that just finished a response may be cached.
    pub fn may_keep(&self, c: &Pooled, now: Instant) -> bool {
        self.cfg.max > 0
            && now.duration_since(c.created) < c.max_age
            && c.requests < self.cfg.requests
    }

    /// Caches an idle connection, evicting the least recently used one.
    pub fn put(&mut self, mut c: Pooled, now: Instant) {
        if !self.may_keep(&c, now) {
            return;
        }
        c.idle_since = now;
        self.idle.push_front(c);
        while self.idle.len() > self.cfg.max {
            self.idle.pop_back();
        }
    }

    pub fn idle_count(&self) -> usize {
        self.idle.len()
    }
}
