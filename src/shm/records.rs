//! The records of an upstream zone, as they lie in shared memory:
//! `#[repr(C)]`, atomics only, linked by `u32` index, sizes fixed at compile
//! time. Here because implementing [`Shared`] is the unsafe promise this
//! module keeps; the logic over them is `upstream::zone`.

use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU16, AtomicU32, AtomicU64};

use super::{Lease, PidLock, SeqLock, Shared};

pub const MAGIC: u64 = u64::from_le_bytes(*b"SLUICEZN");
/// Bumped whenever a record here changes shape.
pub const LAYOUT: u32 = 4;
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
    /// The health-check lease: the one worker that checks this zone's peers.
    pub(crate) hc_lease: Lease,
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
    /// Lookups of the line's name, and how each ended (see
    /// `upstream::zone::LookupEnd`).
    pub(crate) lookups: AtomicU64,
    pub(crate) ends: [AtomicU64; LOOKUP_ENDS],
}

/// How a lookup can end: NOERROR, NXDOMAIN, SERVFAIL, REFUSED, another
/// rcode, no answer in time.
pub(crate) const LOOKUP_ENDS: usize = 6;

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
    /// `metrics_buckets`: the upper bounds (ms) of the time histograms'
    /// buckets, how many, and per histogram (connect, header, response) the
    /// observations in each bucket (the last: above every bound) and their
    /// sum in microseconds.
    pub(crate) bounds_ms: [AtomicU32; HIST_MAX],
    pub(crate) bounds: AtomicU32,
    pub(crate) _hpad: AtomicU32,
    pub(crate) hist: [[AtomicU64; HIST_MAX + 1]; 3],
    pub(crate) hist_sum_us: [AtomicU64; 3],
    /// `queue`: requests waiting now (every worker's) and those turned
    /// away because their worker's queue was full.
    pub(crate) queue_size: AtomicU32,
    pub(crate) _qpad: AtomicU32,
    pub(crate) queue_overflows: AtomicU64,
}

/// The most buckets `metrics_buckets` may set.
pub const HIST_MAX: usize = 16;

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
    /// Active health checks' verdict: 0 not checked yet, 1 healthy,
    /// 2 unhealthy (see `upstream::health`).
    pub health: AtomicU32,
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
    /// Active health checks' counters and runs.
    pub hc: HealthLive,
    /// What the API (`api write=on`) set: 0 nothing (the `server` line's
    /// `down` holds), else `upstream::admin`'s up, down or draining.
    pub admin: AtomicU32,
    _pad: AtomicU32,
}

/// A peer's active health-check record: written by the checking worker,
/// read by every worker and the API.
#[repr(C)]
#[derive(Default, Debug)]
pub struct HealthLive {
    pub checks: AtomicU64,
    pub fails: AtomicU64,
    /// Times it became unhealthy.
    pub unhealthy: AtomicU64,
    /// Since when it is unhealthy (monotonic ms, 0: it is not), and the
    /// total milliseconds of earlier stretches.
    pub downstart: AtomicU64,
    pub downtime: AtomicU64,
    /// Consecutive failed and passed checks.
    pub fail_run: AtomicU32,
    pub pass_run: AtomicU32,
    /// 1 when the last check passed, 0 when it failed or none ran.
    pub last_passed: AtomicU32,
    _pad: AtomicU32,
    /// When it last came back (healthy again, or available again after
    /// `max_fails`), for `slow_start` (monotonic ms, 0: never).
    pub recovered: AtomicU64,
}

// SAFETY: repr(C), atomics only.
#[allow(unsafe_code)]
unsafe impl Shared for PeerLive {}

const _: () = assert!(std::mem::size_of::<HealthLive>() == 64);
const _: () = assert!(std::mem::size_of::<PeerLive>() == 248);

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

const _: () = assert!(size_of::<Header>() == 120);
const _: () = assert!(size_of::<Ack>() == 16);
const _: () = assert!(size_of::<UpstreamRec>() == 632);
const _: () = assert!(size_of::<ServerRec>() == 432);
const _: () = assert!(size_of::<PeerSlot>() == 312);

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
    /// Stream sessions accepted, and open now.
    pub stream_sessions: AtomicU64,
    pub stream_active: AtomicU64,
    /// HTTP/2 streams a client reset before their response ended.
    pub h2_client_resets: AtomicU64,
}

// SAFETY: repr(C), atomics only.
#[allow(unsafe_code)]
unsafe impl Shared for StatusCounters {}

const _: () = assert!(size_of::<StatusCounters>() == 72);

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

/// The records of a `limit_req_zone` or `limit_conn_zone` (the logic is
/// `net::limit`): a header, a table of buckets (`AtomicU32`, the first
/// slot of a chain + 1), then the slots, one per key.
pub const LIMIT_MAGIC: u64 = u64::from_le_bytes(*b"SLUICELZ");
pub const LIMIT_LAYOUT: u32 = 1;
/// Key bytes a slot keeps; a longer key is known by its hash, its length
/// and these first bytes.
pub const LIMIT_KEY_WORDS: usize = 8;
/// Processes that may hold `limit_conn` counts in one zone at once (the
/// workers of the running generation and of those still draining); the
/// last column is shared by any further ones.
pub const LIMIT_HOLDERS: usize = 32;

#[repr(C)]
pub struct LimitHeader {
    pub magic: AtomicU64,
    pub layout: AtomicU32,
    pub slots: AtomicU32,
    pub buckets: AtomicU32,
    /// Held by the process that reads or changes the table.
    pub lock: PidLock,
    /// Least and most recently used slots (index + 1; 0: none), linked
    /// through `LimitSlot::older`/`newer`.
    pub oldest: AtomicU32,
    pub newest: AtomicU32,
    /// Free slots, linked through `LimitSlot::chain` (index + 1).
    pub free: AtomicU32,
    /// Slots never used yet, from the end: the pages stay untouched until
    /// keys need them.
    pub fresh: AtomicU32,
    pub used: AtomicU32,
    pub _pad: AtomicU32,
    /// The pid each `limit_conn` column belongs to (0: free).
    pub holders: [AtomicU32; LIMIT_HOLDERS],
}

#[repr(C)]
pub struct LimitSlot {
    pub hash: AtomicU64,
    /// `limit_req`: when the key was last accounted (CLOCK_MONOTONIC ms,
    /// 0: not yet) and its excess in thousandths of a request.
    pub last: AtomicU64,
    pub excess: AtomicU64,
    pub key_len: AtomicU32,
    /// `limit_req`: requests between their lookup and their accounting
    /// (such a slot is not evicted).
    pub count: AtomicU32,
    pub older: AtomicU32,
    pub newer: AtomicU32,
    /// The next slot in its bucket's chain, or in the free list.
    pub chain: AtomicU32,
    /// 1: holds a key.
    pub used: AtomicU32,
    pub key: [AtomicU64; LIMIT_KEY_WORDS],
    /// `limit_conn`: connections each holder has open for the key.
    pub conns: [AtomicU16; LIMIT_HOLDERS],
    pub _pad: [AtomicU64; 2],
}

// SAFETY: repr(C), atomics only.
#[allow(unsafe_code)]
unsafe impl Shared for LimitHeader {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for LimitSlot {}

const _: () = assert!(size_of::<LimitHeader>() == 176);
const _: () = assert!(size_of::<LimitSlot>() == 192);

/// FNV-1a of `key`: the same hash in every process and binary, for the
/// hash tables in shared zones (`limit_*_zone`, `ssl_session_cache`).
pub fn fnv1a(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// How a keyed table zone (the TLS session cache, the limit zones) lays
/// out `size` bytes: a `header`, one `u32` bucket per slot, then the
/// 64-byte-aligned slots of `slot` bytes. (slots, buckets, offset of the
/// slots).
pub fn table_geometry(size: usize, header: usize, slot: usize) -> (usize, usize, usize) {
    let slots = size.saturating_sub(header + 64) / (slot + 4);
    let buckets = slots.max(1);
    let slots_off = (header + buckets * 4).div_ceil(64) * 64;
    (slots, buckets, slots_off)
}
