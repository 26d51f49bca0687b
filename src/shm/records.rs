//! The records of an upstream zone, as they lie in shared memory:
//! `#[repr(C)]`, atomics only, linked by `u32` index, sizes fixed at compile
//! time. Here because implementing [`Shared`] is the unsafe promise this
//! module keeps; the logic over them is `upstream::zone`.

use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU32, AtomicU64};

use super::{Lease, PidLock, SeqLock, Shared};

pub const MAGIC: u64 = u64::from_le_bytes(*b"SLUICEZN");
/// Bumped whenever a record here changes shape.
pub const LAYOUT: u32 = 2;
/// Longest upstream name a zone records.
pub(crate) const NAME_MAX: usize = 64;
pub(crate) const BACKUP: u32 = 1;
pub(crate) const DOWN: u32 = 2;
/// A `server` line with `resolve` (server records only).
pub(crate) const RESOLVE: u32 = 4;

#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) layout: AtomicU32,
    pub(crate) creator: AtomicU32,
    pub(crate) size: AtomicU64,
    pub(crate) generation: AtomicU64,
    /// Publications so far in this zone (any upstream): what slots retire at.
    pub(crate) version: AtomicU64,
    pub(crate) writer: PidLock,
    pub(crate) upstreams: AtomicU32,
    pub(crate) workers: AtomicU32,
    pub(crate) slots: AtomicU32,
    /// Free slots, linked through `PeerSlot::next` (index + 1; 0 ends).
    pub(crate) free: AtomicU32,
    /// Removed slots waiting for every worker's acknowledgement.
    pub(crate) retired: AtomicU32,
    /// Slots listed or retired (not free).
    pub(crate) in_use: AtomicU32,
    /// Free slots never used, not linked in `free`: the last `unlinked` of
    /// the zone's slots. A new zone links none, so that its pages stay
    /// untouched (unmapped memory) until peers need them; 0 in a zone made
    /// before this field had a use, whose slots are all linked.
    pub(crate) unlinked: AtomicU32,
    /// The resolver lease: the one worker that resolves this zone's names.
    pub(crate) lease: Lease,
}

#[repr(C)]
pub(crate) struct Ack {
    pub(crate) pid: AtomicU32,
    pub(crate) _pad: AtomicU32,
    /// The oldest publication this worker may still hold peers of.
    pub(crate) seen: AtomicU64,
}

/// Longest host name a server record keeps (DNS names are at most 253).
pub(crate) const HOST_MAX: usize = 256;
/// Longest `service=` name.
pub(crate) const SERVICE_MAX: usize = 64;

/// One `server` line of a zone upstream: what it names and its parameters,
/// with room for its resolve state (the resolver fills it).
#[repr(C)]
pub(crate) struct ServerRec {
    pub(crate) host: [AtomicU8; HOST_MAX],
    pub(crate) host_len: AtomicU32,
    pub(crate) port: AtomicU32,
    pub(crate) service: [AtomicU8; SERVICE_MAX],
    pub(crate) service_len: AtomicU32,
    pub(crate) weight: AtomicU32,
    pub(crate) max_fails: AtomicU32,
    pub(crate) fail_timeout_ms: AtomicU32,
    pub(crate) max_conns: AtomicU32,
    pub(crate) flags: AtomicU32,
    /// Resolve state: when the answer expires, when it came (monotonic ms),
    /// and the last error (0: none).
    pub(crate) expires: AtomicU64,
    pub(crate) answered: AtomicU64,
    pub(crate) last_error: AtomicU32,
    pub(crate) _pad: AtomicU32,
}

#[repr(C)]
pub(crate) struct UpstreamRec {
    pub(crate) name: [AtomicU8; NAME_MAX],
    pub(crate) name_len: AtomicU32,
    /// Which of the two lists is published.
    pub(crate) active: AtomicU32,
    pub(crate) seq: SeqLock,
    pub(crate) count: [AtomicU32; 2],
    /// The zone version of the last publication (nginx's config counter).
    pub(crate) config: AtomicU64,
    /// Its `server` lines: how many, and the index of the first record.
    pub(crate) servers: AtomicU32,
    pub(crate) first_server: AtomicU32,
    /// `pick_first`: the chosen peer's key (see `PeerSlot::born`; 0: none
    /// yet).
    pub(crate) choice: AtomicU64,
}

/// A peer's run-time state and counters. All atomics: it may live in a zone.
#[repr(C)]
#[derive(Default, Debug)]
pub struct PeerLive {
    pub conns: AtomicU32,
    pub fails: AtomicU32,
    pub current_weight: AtomicI64,
    pub effective_weight: AtomicI64,
    /// Last failure (`accessed`) and start of the failure window (`checked`), 0: never.
    pub accessed: AtomicU64,
    pub checked: AtomicU64,
    /// When the balancer last chose it.
    pub selected: AtomicU64,
    pub requests: AtomicU64,
    /// Responses by class: 1xx to 5xx (the sixth is unused).
    pub responses: [AtomicU64; 6],
    pub sent: AtomicU64,
    pub received: AtomicU64,
    /// Times it became unavailable (`max_fails` reached).
    pub unavail: AtomicU32,
    _pad: AtomicU32,
    /// Total milliseconds unavailable so far, and since when (0: available).
    pub downtime: AtomicU64,
    pub down_since: AtomicU64,
    /// Keep-alive connections to it, every worker's: open (busy or idle),
    /// idle, the sum of their creation times (for the average age) and the
    /// oldest creation time (0: none), closed for their age so far.
    pub open: AtomicU32,
    pub idle: AtomicU32,
    pub created_sum: AtomicU64,
    pub oldest: AtomicU64,
    pub recycled: AtomicU64,
}

// SAFETY: repr(C), atomics only.
#[allow(unsafe_code)]
unsafe impl Shared for PeerLive {}

const _: () = assert!(std::mem::size_of::<PeerLive>() == 176);

impl PeerLive {
    pub fn with_weight(weight: i64) -> PeerLive {
        let l = PeerLive::default();
        l.effective_weight
            .store(weight, std::sync::atomic::Ordering::Relaxed);
        l
    }
}

#[repr(C)]
pub(crate) struct PeerSlot {
    /// 0 free, 1 unix (the path is the `server` line's), 4 IPv4, 6 IPv6.
    pub(crate) family: AtomicU32,
    pub(crate) port: AtomicU32,
    pub(crate) addr: [AtomicU8; 16],
    /// The `server` line (index in the upstream's config).
    pub(crate) server: AtomicU32,
    pub(crate) weight: AtomicU32,
    pub(crate) max_fails: AtomicU32,
    pub(crate) fail_timeout_ms: AtomicU32,
    pub(crate) max_conns: AtomicU32,
    pub(crate) flags: AtomicU32,
    pub(crate) next: AtomicU32,
    /// The publication (its low 32 bits) that gave the slot to its peer:
    /// with the slot's index it names the peer, also after the slot is
    /// reused for another one (`pick_first`'s choice).
    pub(crate) born: AtomicU32,
    pub(crate) retired_at: AtomicU64,
    pub(crate) live: PeerLive,
}

// SAFETY: each record is repr(C) and made only of atomics.
#[allow(unsafe_code)]
unsafe impl Shared for Header {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for Ack {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for UpstreamRec {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for ServerRec {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for PeerSlot {}

const _: () = assert!(size_of::<Header>() == 96);
const _: () = assert!(size_of::<Ack>() == 16);
const _: () = assert!(size_of::<UpstreamRec>() == 112);
const _: () = assert!(size_of::<ServerRec>() == 376);
const _: () = assert!(size_of::<PeerSlot>() == 240);

/// Connection and request counters every worker adds to, for `stub_status`.
#[repr(C)]
#[derive(Default)]
pub struct StatusCounters {
    pub accepted: AtomicU64,
    pub handled: AtomicU64,
    pub active: AtomicU64,
    pub requests: AtomicU64,
    /// Requests being processed (nginx's "Writing").
    pub writing: AtomicU64,
    /// Connections reading a request head (nginx's "Reading").
    pub reading: AtomicU64,
}

// SAFETY: repr(C), atomics only.
#[allow(unsafe_code)]
unsafe impl Shared for StatusCounters {}

const _: () = assert!(size_of::<StatusCounters>() == 48);

/// The records of an `ssl_session_cache shared:NAME:SIZE` zone (the logic
/// is `net::tls_cache`): a header, a table of buckets (`AtomicU32`, the
/// first slot of a chain + 1), then the slots. An entry takes one or more
/// consecutive slots: its key then its value, in the slots' data words.
pub const SESSION_MAGIC: u64 = u64::from_le_bytes(*b"SLUICESC");
pub const SESSION_LAYOUT: u32 = 1;
/// Data words in one slot (224 bytes).
pub const SESSION_WORDS: usize = 28;

#[repr(C)]
pub struct SessionHeader {
    pub magic: AtomicU64,
    pub layout: AtomicU32,
    pub slots: AtomicU32,
    pub buckets: AtomicU32,
    /// Held by the process that reads or changes the cache.
    pub lock: PidLock,
    /// Where the next entry goes (entries are written round the slots, so
    /// the oldest are the ones overwritten).
    pub cursor: AtomicU32,
    pub entries: AtomicU32,
}

#[repr(C)]
pub struct SessionSlot {
    pub hash: AtomicU64,
    /// Unix time in seconds after which the entry is not given out.
    pub expires: AtomicU64,
    /// 0: free; else the index + 1 of its entry's first slot (its own for
    /// the first).
    pub head: AtomicU32,
    pub key_len: AtomicU32,
    pub val_len: AtomicU32,
    /// The next entry in its bucket's chain (index + 1; 0 ends).
    pub next: AtomicU32,
    pub data: [AtomicU64; SESSION_WORDS],
}

// SAFETY: repr(C), atomics only.
#[allow(unsafe_code)]
unsafe impl Shared for SessionHeader {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for SessionSlot {}

const _: () = assert!(size_of::<SessionHeader>() == 32);
const _: () = assert!(size_of::<SessionSlot>() == 256);
