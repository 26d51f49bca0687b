//! An upstream zone (`zone NAME [SIZE]`): the peers of one or more upstreams
//! and their live state in one shared region, laid out as `#[repr(C)]`
//! records of atomics linked by `u32` index. The master builds it before
//! forking; workers read peer lists through a per-upstream seqlock into
//! snapshots and update the live state in place. Peer lists change only
//! under the zone's pid-owned writer lock ([`Zone::publish`]); a removed
//! peer's slot is reused only after every live worker has acknowledged a
//! publication that no longer lists it ([`Zone::ack`]). The master repairs
//! the zone when it reaps a worker that died abnormally ([`Zone::repair`]).
//! No I/O besides creating the region.
//!
//! The parts: `layout` places the records and writes a new zone's
//! configuration (or reads another binary's back), `read` takes snapshots
//! and the resolver's records, `publish` changes peer lists (allocator,
//! reclaim, acknowledgements, repair). The carry-over at reload and
//! upgrade is `upstream::carry`.

mod hist;
mod layout;
mod publish;
mod read;

use std::sync::Arc;

use super::peer_list::NewPeer;
use crate::conf::model::{Upstream, UpstreamBlocks, ZoneSpec};
use crate::shm::{Region, ShmError};

pub use crate::shm::records::{LAYOUT, MAGIC};
pub use hist::{DEFAULT_BOUNDS_MS, Hist, Timing};
pub use layout::size_needed;

/// How a lookup of a `resolve` line ended, as the zone counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupEnd {
    NoError = 0,
    NxDomain = 1,
    ServFail = 2,
    Refused = 3,
    /// FORMERR, NOTIMP or another rcode.
    OtherRcode = 4,
    Timeout = 5,
}

impl LookupEnd {
    /// Every end with the label the metrics give it.
    pub const ALL: [(LookupEnd, &'static str); crate::shm::records::LOOKUP_ENDS] = [
        (LookupEnd::NoError, "NOERROR"),
        (LookupEnd::NxDomain, "NXDOMAIN"),
        (LookupEnd::ServFail, "SERVFAIL"),
        (LookupEnd::Refused, "REFUSED"),
        (LookupEnd::OtherRcode, "other"),
        (LookupEnd::Timeout, "timeout"),
    ];

    /// A failed lookup's end.
    pub fn of(e: super::dns::DnsError) -> LookupEnd {
        match e {
            super::dns::DnsError::Server(2) => LookupEnd::ServFail,
            super::dns::DnsError::Server(5) => LookupEnd::Refused,
            super::dns::DnsError::Server(_) => LookupEnd::OtherRcode,
            super::dns::DnsError::Timeout => LookupEnd::Timeout,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("{0}")]
    Shm(#[from] ShmError),
    #[error("could not create shared memory zone \"{zone}\" of {size} bytes: {source} in {at}")]
    Create {
        zone: String,
        size: u64,
        source: ShmError,
        at: crate::conf::Src,
    },
    #[error(
        "zone \"{zone}\" of {size} bytes is too small for its upstreams: {needed} bytes needed"
    )]
    TooSmall {
        zone: String,
        size: u64,
        needed: u64,
    },
    #[error("zone \"{zone}\" is busy: its writer lock is held by process {pid}")]
    Busy { zone: String, pid: u32 },
    #[error("zone \"{zone}\" was made by another layout ({found}, this binary uses {LAYOUT})")]
    Layout { zone: String, found: u32 },
}

/// What a publication did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub kept: usize,
    pub added: usize,
    pub removed: usize,
    /// Peers that did not fit; `needed` is the zone size that would hold all.
    pub refused: usize,
    pub needed: u64,
}

/// Usage figures for the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub size: u64,
    pub used: u64,
    pub slots: u32,
    pub in_use: u32,
    pub generation: u64,
}

pub struct Zone {
    pub name: String,
    region: Arc<Region>,
    upstreams: Vec<String>,
    servers: usize,
    slots: usize,
    acks_off: usize,
    ups_off: usize,
    servers_off: usize,
    lists_off: usize,
    slots_off: usize,
}

/// A generation's zones by name.
pub type Zones = std::collections::HashMap<String, Arc<Zone>>;

/// Builds the zones the upstream blocks name (in the master, before
/// forking) and publishes each zone upstream's configured peers. Peers a
/// zone has no room for are refused with an `[error]` that says the size
/// needed.
pub fn create_all(
    blocks: &[&UpstreamBlocks],
    generation: u64,
    workers: usize,
) -> Result<Zones, ZoneError> {
    let mut zones = Zones::new();
    for (b, spec) in blocks
        .iter()
        .flat_map(|b| b.zones.iter().map(move |z| (b, z)))
    {
        let ups: Vec<&Upstream> = b.of_zone(spec).map(|u| u.as_ref()).collect();
        let size = spec.size.unwrap_or(ZoneSpec::MIN_SIZE);
        let zone =
            Zone::create(&spec.name, size, generation, &ups, workers).map_err(|e| match e {
                ZoneError::Shm(source) => ZoneError::Create {
                    zone: spec.name.clone(),
                    size,
                    source,
                    at: spec.src.clone(),
                },
                other => other,
            })?;
        zone.set_buckets(&b.time_buckets);
        for (i, u) in ups.iter().enumerate() {
            let name = &u.name;
            let r = zone.publish(i, std::process::id(), &NewPeer::from_config(u))?;
            if r.refused > 0 {
                crate::log!(
                    crate::log::Level::Error,
                    "zone \"{}\" is too small for the peers of upstream \"{}\": {} of them not added, {} bytes needed",
                    spec.name,
                    name,
                    r.refused,
                    r.needed
                );
            }
        }
        zones.insert(spec.name.clone(), Arc::new(zone));
    }
    Ok(zones)
}

#[cfg(test)]
mod test_util {
    use crate::conf::model::{Balancer, Upstream};
    use crate::upstream::peers::{Peers, test_upstream};

    pub(super) fn up(addrs: &[&str]) -> Upstream {
        let servers: Vec<(&str, u32, bool)> = addrs.iter().map(|a| (*a, 1, false)).collect();
        test_upstream(&servers, Balancer::RoundRobin)
    }

    pub(super) fn names(p: &Peers) -> Vec<String> {
        p.primary.iter().map(|p| p.name.to_string()).collect()
    }
}
