//! A peer's administrative state as the API sets it (`api write=on`): the
//! `PeerLive::admin` word of its zone slot, read by every worker's balancer
//! (`Peer::is_down`), copied to the next generation at a reload or an
//! upgrade for the peers that stay (`carry`), and kept in the state file for
//! a cold start (`state`). Nothing set (0) leaves the `server` line's `down`
//! in force; the API's `down: false` on a peer configured `down` is kept as
//! an explicit "up".

use std::sync::atomic::Ordering::Relaxed;

use super::peers::Peer;

/// Nothing set: the configuration's `down` holds.
pub const NONE: u32 = 0;
/// Up, although its `server` line says `down`.
pub const UP: u32 = 1;
pub const DOWN: u32 = 2;
/// No new requests; those in flight finish.
pub const DRAIN: u32 = 3;

/// What the API asks a peer to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Up,
    Down,
    Drain,
}

impl Target {
    /// The word that says it on a state file's `server` line (none: up).
    pub fn word(self) -> Option<&'static str> {
        match self {
            Target::Up => None,
            Target::Down => Some("down"),
            Target::Drain => Some("drain"),
        }
    }
}

/// The value to store for `target` on a peer whose `server` line has
/// `config_down`: nothing when the configuration already says so.
pub fn value(target: Target, config_down: bool) -> u32 {
    match (target, config_down) {
        (Target::Up, false) | (Target::Down, true) => NONE,
        (Target::Up, true) => UP,
        (Target::Down, false) => DOWN,
        (Target::Drain, _) => DRAIN,
    }
}

/// What the peer is now, configuration and API together.
pub fn target(p: &Peer) -> Target {
    match p.live.admin.load(Relaxed) {
        DRAIN => Target::Drain,
        DOWN => Target::Down,
        UP => Target::Up,
        _ if p.down => Target::Down,
        _ => Target::Up,
    }
}

/// Whether the API changed the peer from what its `server` line says.
pub fn overridden(p: &Peer) -> bool {
    p.live.admin.load(Relaxed) != NONE
}

/// Sets the peer to `target`, in its zone for every worker.
pub fn set(p: &Peer, target: Target) {
    p.live.admin.store(value(target, p.down), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_is_relative_to_the_config() {
        assert_eq!(value(Target::Up, false), NONE);
        assert_eq!(value(Target::Up, true), UP);
        assert_eq!(value(Target::Down, false), DOWN);
        assert_eq!(value(Target::Down, true), NONE);
        assert_eq!(value(Target::Drain, false), DRAIN);
        assert_eq!(value(Target::Drain, true), DRAIN);
    }

    /// The balancer follows the API: down and draining peers are passed
    /// over, an API "up" brings back a peer configured `down`.
    #[test]
    fn balancer_follows_the_override() {
        use crate::conf::model::Balancer;
        use crate::upstream::peers::{Peers, Tried, test_upstream};
        let mut u = test_upstream(
            &[("127.0.0.1:1", 1, false), ("127.0.0.1:2", 1, false)],
            Balancer::RoundRobin,
        );
        u.servers[1].down = true;
        let p = Peers::from_config(&u);
        let now = 1_000_000;
        let pick = || p.pick_round_robin(&Tried::new(&p), now).map(|id| id.index);
        assert_eq!(pick(), Some(0));
        set(&p.primary[0], Target::Drain);
        assert_eq!(target(&p.primary[0]), Target::Drain);
        assert_eq!(pick(), None);
        set(&p.primary[1], Target::Up);
        assert!(overridden(&p.primary[1]));
        assert_eq!(pick(), Some(1));
        set(&p.primary[1], Target::Down);
        assert!(!overridden(&p.primary[1]));
        assert_eq!(target(&p.primary[1]), Target::Down);
        set(&p.primary[0], Target::Up);
        assert!(!overridden(&p.primary[0]));
        assert_eq!(pick(), Some(0));
        set(&p.primary[0], Target::Down);
        assert_eq!(pick(), None);
    }
}
