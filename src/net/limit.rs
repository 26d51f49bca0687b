//! The state of `limit_req_zone` and `limit_conn_zone`: one keyed table in
//! a shared zone that every worker uses, so a request on one worker counts
//! against the same key on another. The zone is made by the master before
//! it forks, and kept across a reload when its name and size stay (as
//! nginx keeps its zones). Called by `http::limit` and the stream proxy.
//!
//! Layout (`shm::records`): a header, buckets of chains, fixed slots of one
//! key each (up to 64 key bytes kept; a longer key is known by its 64-bit
//! hash, its length and those bytes), linked in least-recently-used order.
//! `limit_req` follows nginx's leaky bucket in thousandths of a request
//! ([`leak`]) and evicts as nginx does: up to two idle, drained keys before
//! each new one, and the least recently used one when the zone is full.
//!
//! `limit_conn` counts per holder (a column per process), so that the master
//! can take back what a worker that died held (nginx leaks those counts
//! until the zone is made again). Every access holds the zone's pid-owned
//! lock for a few microseconds; a process that finds it held by a dead one
//! clears the table, and so does the master when it reaps such a worker.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::time::Duration;

use crate::shm::records::{
    LIMIT_HOLDERS, LIMIT_KEY_WORDS, LIMIT_LAYOUT, LIMIT_MAGIC, LimitHeader, LimitSlot,
};
use crate::shm::{Guard, Region, ShmError};

const HEADER: usize = 192;
const KEY_BYTES: usize = LIMIT_KEY_WORDS * 8;
/// How long an access waits for the lock before it gives up.
const LOCK_WAIT: Duration = Duration::from_millis(50);
/// The column shared by processes that found no column of their own.
const SHARED_COLUMN: usize = LIMIT_HOLDERS - 1;

/// Milliseconds on CLOCK_MONOTONIC: one clock for every process.
pub use crate::net::clock::mono_ms as now_ms;

/// nginx's leak of a bucket: the excess (thousandths of a request) after
/// `now - last` milliseconds at `rate` (thousandths of a request per
/// second), with this request added; and whether time moved (nginx keeps
/// `last` when it did not). A clock that went back a little counts as no
/// time, a lot as one millisecond, as in nginx.
pub fn leak(excess: u64, last: u64, now: u64, rate: u64) -> (u64, bool) {
    let ms = now.wrapping_sub(last) as i64;
    let ms = if ms < -60000 { 1 } else { ms.max(0) };
    let drained = (rate as i128) * (ms as i128) / 1000;
    let e = excess as i128 - drained + 1000;
    (e.clamp(0, i64::MAX as i128) as u64, ms != 0)
}

/// What a `limit_req` lookup found (nginx's return codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Over the burst: refuse; the excess it would have had.
    Busy(u64),
    /// Accounted (the last limit); the excess.
    Ok(u64),
    /// Within the burst, to be accounted later (`account`): the slot and
    /// its hash.
    Again(u32, u64),
    /// No room for the key.
    NoMemory,
    /// The zone could not be locked in time: not limited.
    Skipped,
}

/// What a `limit_conn` acquisition found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// Counted: release with this.
    Held(Held),
    /// At the limit.
    Busy,
    /// No room for the key.
    NoMemory,
    /// The zone could not be locked in time: not limited.
    Skipped,
}

/// One counted connection: the slot, its key's hash and the column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    slot: u32,
    hash: u64,
    column: u16,
}

pub struct LimitZone {
    pub name: String,
    /// Its key as written (a reload may not change it, as in nginx).
    pub key: String,
    region: Region,
    slots: usize,
    buckets: usize,
    slots_off: usize,
    /// This process's `limit_conn` column, once it took one.
    column: OnceLock<usize>,
}

impl std::fmt::Debug for LimitZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LimitZone({}, {} slots)", self.name, self.slots)
    }
}

/// The key's hash, the same in every process.
fn hash(key: &[u8]) -> u64 {
    crate::shm::records::fnv1a(key)
}

impl LimitZone {
    /// A new zone of `size` bytes, as a memfd mapped shared.
    pub fn create(name: &str, size: usize) -> Result<LimitZone, ShmError> {
        let region = Region::create(&format!("limit:{name}"), size)?;
        LimitZone::init(name, region)
    }

    /// The same over process-private memory (tests).
    pub fn heap(name: &str, size: usize) -> Result<LimitZone, ShmError> {
        LimitZone::init(name, Region::heap(size))
    }

    fn init(name: &str, region: Region) -> Result<LimitZone, ShmError> {
        let (slots, buckets, slots_off) =
            crate::shm::records::table_geometry(region.len(), HEADER, size_of::<LimitSlot>());
        let z = LimitZone {
            name: name.to_string(),
            key: String::new(),
            region,
            slots,
            buckets,
            slots_off,
            column: OnceLock::new(),
        };
        // Bounds checked once here; the accessors below cannot fail after.
        let h = z.region.get::<LimitHeader>(0)?;
        z.region.slice::<AtomicU32>(HEADER, buckets)?;
        z.region.slice::<LimitSlot>(slots_off, slots)?;
        h.slots.store(slots as u32, Relaxed);
        h.buckets.store(buckets as u32, Relaxed);
        h.fresh.store(slots as u32, Relaxed);
        h.layout.store(LIMIT_LAYOUT, Relaxed);
        h.magic.store(LIMIT_MAGIC, Release);
        Ok(z)
    }

    /// The same zone, known by its key as written.
    pub fn with_key(mut self, key: &str) -> LimitZone {
        self.key = key.to_string();
        self
    }

    /// The zone's size in bytes.
    pub fn size(&self) -> usize {
        self.region.len()
    }

    /// Keys it can hold at most.
    pub fn capacity(&self) -> usize {
        self.slots
    }

    /// Keys it holds now.
    pub fn used(&self) -> u32 {
        self.header().map_or(0, |h| h.used.load(Relaxed))
    }

    fn header(&self) -> Option<&LimitHeader> {
        self.region.get::<LimitHeader>(0).ok()
    }

    fn buckets(&self) -> &[AtomicU32] {
        self.region.slice(HEADER, self.buckets).unwrap_or_default()
    }

    fn slot_list(&self) -> &[LimitSlot] {
        self.region
            .slice(self.slots_off, self.slots)
            .unwrap_or_default()
    }

    fn slot(&self, i: usize) -> Option<&LimitSlot> {
        self.slot_list().get(i)
    }

    /// The lock, pushing out a dead holder; then the table is cleared
    /// (what the dead one was changing may be half written).
    fn lock(&self) -> Option<Guard<'_>> {
        self.header()?
            .lock
            .lock_repairing(std::process::id(), LOCK_WAIT, || self.clear())
    }

    /// The master, reaping `pid`: opens the lock if it held it (the table
    /// is then cleared; true), and takes back the `limit_conn` counts it
    /// held.
    pub fn repair(&self, pid: u32) -> bool {
        let Some(h) = self.header() else {
            return false;
        };
        let mut held = false;
        if h.lock.owner() == pid && h.lock.force_unlock(pid) {
            held = true;
            if let Some(_g) = h.lock.try_lock(std::process::id()) {
                self.clear();
            }
        }
        if let Some(_g) = self.lock() {
            if let Some(c) = h.holders.iter().position(|p| p.load(Relaxed) == pid) {
                self.clear_column(c);
                h.holders[c].store(0, Relaxed);
            }
        }
        held
    }

    fn clear(&self) {
        for b in self.buckets() {
            b.store(0, Relaxed);
        }
        for s in self.slot_list() {
            s.used.store(0, Relaxed);
        }
        if let Some(h) = self.header() {
            h.oldest.store(0, Relaxed);
            h.newest.store(0, Relaxed);
            h.free.store(0, Relaxed);
            h.fresh.store(self.slots as u32, Relaxed);
            h.used.store(0, Relaxed);
        }
    }

    /// Zeroes one holder's counts; keys nobody counts any more go.
    fn clear_column(&self, c: usize) {
        let h = match self.header() {
            Some(h) => h,
            None => return,
        };
        let touched = self.slots.saturating_sub(h.fresh.load(Relaxed) as usize);
        for i in 0..touched {
            let Some(s) = self.slot(i) else { continue };
            if s.used.load(Relaxed) == 0 || s.conns[c].load(Relaxed) == 0 {
                continue;
            }
            s.conns[c].store(0, Relaxed);
            if conns(s) == 0 {
                self.remove(i);
            }
        }
    }

    fn key_matches(&self, s: &LimitSlot, key: &[u8], h: u64) -> bool {
        if s.hash.load(Relaxed) != h || s.key_len.load(Relaxed) as usize != key.len() {
            return false;
        }
        let mut buf = [0u8; KEY_BYTES];
        for (w, chunk) in s.key.iter().zip(buf.chunks_mut(8)) {
            chunk.copy_from_slice(&w.load(Relaxed).to_le_bytes());
        }
        let n = key.len().min(KEY_BYTES);
        buf[..n] == key[..n]
    }

    /// The slot holding `key`, its chain walked at most once round the
    /// zone, each link checked.
    fn find(&self, key: &[u8], h: u64) -> Option<usize> {
        let mut link = self.buckets()[(h % self.buckets as u64) as usize].load(Relaxed) as usize;
        for _ in 0..self.slots {
            let i = link.checked_sub(1)?;
            let s = self.slot(i)?;
            if s.used.load(Relaxed) == 0 {
                return None;
            }
            if self.key_matches(s, key, h) {
                return Some(i);
            }
            link = s.chain.load(Relaxed) as usize;
        }
        None
    }

    /// Unlinks slot `i` from the recency list.
    fn unlink_lru(&self, i: usize) {
        let (Some(h), Some(s)) = (self.header(), self.slot(i)) else {
            return;
        };
        let (older, newer) = (s.older.load(Relaxed), s.newer.load(Relaxed));
        match (older as usize).checked_sub(1).and_then(|o| self.slot(o)) {
            Some(o) => o.newer.store(newer, Relaxed),
            None => h.oldest.store(newer, Relaxed),
        }
        match (newer as usize).checked_sub(1).and_then(|n| self.slot(n)) {
            Some(n) => n.older.store(older, Relaxed),
            None => h.newest.store(older, Relaxed),
        }
        s.older.store(0, Relaxed);
        s.newer.store(0, Relaxed);
    }

    /// Makes slot `i` the most recently used.
    fn push_newest(&self, i: usize) {
        let (Some(h), Some(s)) = (self.header(), self.slot(i)) else {
            return;
        };
        let newest = h.newest.load(Relaxed);
        s.older.store(newest, Relaxed);
        s.newer.store(0, Relaxed);
        match (newest as usize).checked_sub(1).and_then(|n| self.slot(n)) {
            Some(n) => n.newer.store(i as u32 + 1, Relaxed),
            None => h.oldest.store(i as u32 + 1, Relaxed),
        }
        h.newest.store(i as u32 + 1, Relaxed);
    }

    fn touch(&self, i: usize) {
        self.unlink_lru(i);
        self.push_newest(i);
    }

    /// Frees slot `i`: out of its chain and the recency list.
    fn remove(&self, i: usize) {
        let Some(s) = self.slot(i) else { return };
        if s.used.load(Relaxed) == 0 {
            return;
        }
        let h = s.hash.load(Relaxed);
        let b = &self.buckets()[(h % self.buckets as u64) as usize];
        let next = s.chain.load(Relaxed);
        if b.load(Relaxed) as usize == i + 1 {
            b.store(next, Relaxed);
        } else {
            let mut link = b.load(Relaxed) as usize;
            for _ in 0..self.slots {
                let Some(p) = link.checked_sub(1).and_then(|p| self.slot(p)) else {
                    break;
                };
                let pn = p.chain.load(Relaxed);
                if pn as usize == i + 1 {
                    p.chain.store(next, Relaxed);
                    break;
                }
                link = pn as usize;
            }
        }
        self.unlink_lru(i);
        s.used.store(0, Relaxed);
        if let Some(hd) = self.header() {
            s.chain.store(hd.free.load(Relaxed), Relaxed);
            hd.free.store(i as u32 + 1, Relaxed);
            hd.used.fetch_sub(1, Relaxed);
        }
    }

    /// A free slot, if there is one.
    fn alloc(&self) -> Option<usize> {
        let h = self.header()?;
        if let Some(i) = (h.free.load(Relaxed) as usize).checked_sub(1) {
            let s = self.slot(i)?;
            h.free.store(s.chain.load(Relaxed), Relaxed);
            return Some(i);
        }
        // Never-used slots are handed out from the start.
        let fresh = h.fresh.load(Relaxed) as usize;
        let left = fresh.checked_sub(1)?;
        h.fresh.store(left as u32, Relaxed);
        self.slots.checked_sub(fresh)
    }

    /// Takes a slot for `key` (the caller checked it is not there).
    fn insert(&self, key: &[u8], h: u64) -> Option<usize> {
        let i = self.alloc()?;
        let s = self.slot(i)?;
        s.hash.store(h, Relaxed);
        s.key_len.store(key.len() as u32, Relaxed);
        let mut buf = [0u8; KEY_BYTES];
        let n = key.len().min(KEY_BYTES);
        buf[..n].copy_from_slice(&key[..n]);
        for (w, chunk) in s.key.iter().zip(buf.chunks(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            w.store(u64::from_le_bytes(b), Relaxed);
        }
        s.last.store(0, Relaxed);
        s.excess.store(0, Relaxed);
        s.count.store(0, Relaxed);
        for c in &s.conns {
            c.store(0, Relaxed);
        }
        s.used.store(1, Relaxed);
        let b = &self.buckets()[(h % self.buckets as u64) as usize];
        s.chain.store(b.load(Relaxed), Relaxed);
        b.store(i as u32 + 1, Relaxed);
        self.push_newest(i);
        if let Some(hd) = self.header() {
            hd.used.fetch_add(1, Relaxed);
        }
        Some(i)
    }

    /// nginx's `expire`: with `force`, the least recently used key goes if
    /// no request is between lookup and accounting on it; then up to two
    /// more that are idle for a minute and drained.
    fn expire(&self, force: bool, rate: u64, now: u64) {
        let mut n = usize::from(!force);
        while n < 3 {
            let Some(h) = self.header() else { return };
            let Some(i) = (h.oldest.load(Relaxed) as usize).checked_sub(1) else {
                return;
            };
            let Some(s) = self.slot(i) else { return };
            if s.count.load(Relaxed) != 0 {
                return;
            }
            if n != 0 {
                let ms = (now.wrapping_sub(s.last.load(Relaxed)) as i64).unsigned_abs();
                if ms < 60000 {
                    return;
                }
                let drained = (rate as i128) * (ms as i128) / 1000;
                if s.excess.load(Relaxed) as i128 - drained > 0 {
                    return;
                }
            }
            n += 1;
            self.remove(i);
        }
    }

    /// nginx's `limit_req` lookup of `key` at `now`: `rate` and `burst` in
    /// thousandths; `account`: this is the request's last limit, so the
    /// excess is stored at once.
    pub fn req_lookup(&self, key: &[u8], rate: u64, burst: u64, account: bool, now: u64) -> Lookup {
        let Some(_g) = self.lock() else {
            return Lookup::Skipped;
        };
        let h = hash(key);
        if let Some(i) = self.find(key, h) {
            self.touch(i);
            let Some(s) = self.slot(i) else {
                return Lookup::NoMemory;
            };
            let (excess, moved) = leak(s.excess.load(Relaxed), s.last.load(Relaxed), now, rate);
            if excess > burst {
                return Lookup::Busy(excess);
            }
            if account {
                s.excess.store(excess, Relaxed);
                if moved {
                    s.last.store(now, Relaxed);
                }
                return Lookup::Ok(excess);
            }
            s.count.fetch_add(1, Relaxed);
            return Lookup::Again(i as u32, h);
        }
        self.expire(false, rate, now);
        let i = match self.insert(key, h) {
            Some(i) => i,
            None => {
                self.expire(true, rate, now);
                match self.insert(key, h) {
                    Some(i) => i,
                    None => return Lookup::NoMemory,
                }
            }
        };
        let Some(s) = self.slot(i) else {
            return Lookup::NoMemory;
        };
        if account {
            s.last.store(now, Relaxed);
            return Lookup::Ok(0);
        }
        s.count.store(1, Relaxed);
        Lookup::Again(i as u32, h)
    }

    /// nginx's `account` for one earlier limit that answered `Again`: its
    /// excess after this request (0 if the key went meanwhile).
    pub fn req_account(&self, slot: u32, h: u64, rate: u64, now: u64) -> u64 {
        let Some(_g) = self.lock() else { return 0 };
        let Some(s) = self.slot(slot as usize) else {
            return 0;
        };
        if s.used.load(Relaxed) == 0 || s.hash.load(Relaxed) != h {
            return 0;
        }
        let (excess, moved) = leak(s.excess.load(Relaxed), s.last.load(Relaxed), now, rate);
        if moved {
            s.last.store(now, Relaxed);
        }
        s.excess.store(excess, Relaxed);
        s.count
            .fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_sub(1)))
            .ok();
        excess
    }

    /// An earlier `Again` that will not be accounted (a later limit
    /// refused the request).
    pub fn req_unlock(&self, slot: u32, h: u64) {
        let Some(_g) = self.lock() else { return };
        if let Some(s) = self.slot(slot as usize) {
            if s.used.load(Relaxed) == 1 && s.hash.load(Relaxed) == h {
                s.count
                    .fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_sub(1)))
                    .ok();
            }
        }
    }

    /// This process's column, taken under the lock: its own, a free one,
    /// one whose process is gone (cleared first), or the shared last one.
    fn my_column(&self) -> usize {
        if let Some(c) = self.column.get() {
            return *c;
        }
        let Some(h) = self.header() else {
            return SHARED_COLUMN;
        };
        let pid = std::process::id();
        let c = if let Some(c) = h.holders[..SHARED_COLUMN]
            .iter()
            .position(|p| p.load(Relaxed) == pid)
        {
            c
        } else if let Some(c) = h.holders[..SHARED_COLUMN]
            .iter()
            .position(|p| p.load(Relaxed) == 0)
        {
            h.holders[c].store(pid, Relaxed);
            c
        } else if let Some(c) = h.holders[..SHARED_COLUMN]
            .iter()
            .position(|p| !crate::shm::lock::alive(p.load(Relaxed)))
        {
            self.clear_column(c);
            h.holders[c].store(pid, Relaxed);
            c
        } else {
            SHARED_COLUMN
        };
        let _ = self.column.set(c);
        c
    }

    /// nginx's `limit_conn` for `key`: counted unless `limit` connections
    /// already are.
    pub fn conn_acquire(&self, key: &[u8], limit: u32) -> Acquire {
        let Some(_g) = self.lock() else {
            return Acquire::Skipped;
        };
        let column = self.my_column();
        let h = hash(key);
        let i = match self.find(key, h) {
            Some(i) => {
                let Some(s) = self.slot(i) else {
                    return Acquire::NoMemory;
                };
                if conns(s) >= limit {
                    return Acquire::Busy;
                }
                i
            }
            None => match self.insert(key, h) {
                Some(i) => i,
                None => return Acquire::NoMemory,
            },
        };
        let Some(s) = self.slot(i) else {
            return Acquire::NoMemory;
        };
        s.conns[column]
            .fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_add(1)))
            .ok();
        Acquire::Held(Held {
            slot: i as u32,
            hash: h,
            column: column as u16,
        })
    }

    /// Ends one counted connection; the key goes when none is left.
    pub fn conn_release(&self, held: Held) {
        let Some(_g) = self.lock() else { return };
        let i = held.slot as usize;
        let Some(s) = self.slot(i) else { return };
        if s.used.load(Relaxed) == 0 || s.hash.load(Relaxed) != held.hash {
            return;
        }
        if let Some(c) = s.conns.get(usize::from(held.column)) {
            c.fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_sub(1)))
                .ok();
        }
        if conns(s) == 0 {
            self.remove(i);
        }
    }

    /// Connections counted for `key` now (tests and the status API).
    pub fn conn_count(&self, key: &[u8]) -> u32 {
        let Some(_g) = self.lock() else { return 0 };
        self.find(key, hash(key))
            .and_then(|i| self.slot(i))
            .map_or(0, conns)
    }
}

/// A generation's zones by name.
pub type LimitZones = std::collections::HashMap<String, std::sync::Arc<LimitZone>>;

fn conns(s: &LimitSlot) -> u32 {
    s.conns.iter().map(|c| u32::from(c.load(Relaxed))).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RATE_1S: u64 = 1000;

    #[test]
    fn bucket_as_nginx() {
        let z = LimitZone::heap("t", 64 * 1024).unwrap();
        // 1r/s, no burst: the first passes, the next within a second not.
        assert_eq!(z.req_lookup(b"a", RATE_1S, 0, true, 10_000), Lookup::Ok(0));
        assert_eq!(
            z.req_lookup(b"a", RATE_1S, 0, true, 10_500),
            Lookup::Busy(500)
        );
        assert_eq!(z.req_lookup(b"a", RATE_1S, 0, true, 11_000), Lookup::Ok(0));
        // burst=2: two more are taken, excess 1.000 then 2.000.
        assert_eq!(
            z.req_lookup(b"b", RATE_1S, 2000, true, 10_000),
            Lookup::Ok(0)
        );
        assert_eq!(
            z.req_lookup(b"b", RATE_1S, 2000, true, 10_000),
            Lookup::Ok(1000)
        );
        assert_eq!(
            z.req_lookup(b"b", RATE_1S, 2000, true, 10_000),
            Lookup::Ok(2000)
        );
        assert_eq!(
            z.req_lookup(b"b", RATE_1S, 2000, true, 10_000),
            Lookup::Busy(3000)
        );
        // Keys are apart.
        assert_eq!(z.req_lookup(b"c", RATE_1S, 0, true, 10_000), Lookup::Ok(0));
    }

    #[test]
    fn again_then_account() {
        let z = LimitZone::heap("t", 64 * 1024).unwrap();
        let Lookup::Again(s, h) = z.req_lookup(b"k", RATE_1S, 5000, false, 5000) else {
            panic!("again");
        };
        assert_eq!(z.req_account(s, h, RATE_1S, 5000), 0);
        let Lookup::Again(s, h) = z.req_lookup(b"k", RATE_1S, 5000, false, 5000) else {
            panic!("again");
        };
        assert_eq!(z.req_account(s, h, RATE_1S, 5000), 1000);
    }

    #[test]
    fn full_zone_evicts_oldest_unless_busy() {
        // Smallest table: a handful of slots.
        let z = LimitZone::heap("t", 4096).unwrap();
        let n = z.capacity();
        assert!(n > 3);
        for k in 0..n {
            let key = format!("k{k}");
            assert_eq!(
                z.req_lookup(key.as_bytes(), RATE_1S, 0, true, 1000),
                Lookup::Ok(0)
            );
        }
        // One more: the least recently used (k0) goes.
        assert_eq!(z.req_lookup(b"new", RATE_1S, 0, true, 1000), Lookup::Ok(0));
        assert_eq!(z.used() as usize, n);
        // k1 is still limited, k0 starts afresh.
        assert!(matches!(
            z.req_lookup(b"k1", RATE_1S, 0, true, 1000),
            Lookup::Busy(_)
        ));
        assert_eq!(z.req_lookup(b"k0", RATE_1S, 0, true, 1000), Lookup::Ok(0));
        // With every slot in use between lookup and accounting, no room.
        let z = LimitZone::heap("t", 4096).unwrap();
        for k in 0..n {
            let key = format!("k{k}");
            assert!(matches!(
                z.req_lookup(key.as_bytes(), RATE_1S, 0, false, 1000),
                Lookup::Again(..)
            ));
        }
        assert_eq!(
            z.req_lookup(b"new", RATE_1S, 0, true, 1000),
            Lookup::NoMemory
        );
    }

    #[test]
    fn idle_drained_keys_expire_first() {
        let z = LimitZone::heap("t", 64 * 1024).unwrap();
        z.req_lookup(b"old", RATE_1S, 0, true, 1000);
        z.req_lookup(b"new", RATE_1S, 0, true, 70_000);
        assert_eq!(z.used(), 1);
    }

    #[test]
    fn long_keys() {
        let z = LimitZone::heap("t", 64 * 1024).unwrap();
        let a = vec![b'x'; 200];
        let mut b = a.clone();
        b[150] = b'y';
        assert_eq!(z.req_lookup(&a, RATE_1S, 0, true, 1000), Lookup::Ok(0));
        assert_eq!(z.req_lookup(&b, RATE_1S, 0, true, 1000), Lookup::Ok(0));
        assert!(matches!(
            z.req_lookup(&a, RATE_1S, 0, true, 1000),
            Lookup::Busy(_)
        ));
    }

    #[test]
    fn conn_counts_and_releases() {
        let z = LimitZone::heap("t", 64 * 1024).unwrap();
        let Acquire::Held(a) = z.conn_acquire(b"ip", 2) else {
            panic!()
        };
        let Acquire::Held(b) = z.conn_acquire(b"ip", 2) else {
            panic!()
        };
        assert_eq!(z.conn_acquire(b"ip", 2), Acquire::Busy);
        assert_eq!(z.conn_count(b"ip"), 2);
        z.conn_release(a);
        assert_eq!(z.conn_count(b"ip"), 1);
        z.conn_release(b);
        assert_eq!(z.used(), 0);
    }

    #[test]
    fn a_dead_holder_is_taken_back() {
        let z = LimitZone::heap("t", 64 * 1024).unwrap();
        let Acquire::Held(_a) = z.conn_acquire(b"ip", 1) else {
            panic!()
        };
        assert_eq!(z.conn_acquire(b"ip", 1), Acquire::Busy);
        // The master reaping this process (as if it had died).
        z.repair(std::process::id());
        assert_eq!(z.conn_count(b"ip"), 0);
        assert_eq!(z.used(), 0);
    }

    proptest! {
        /// Over any run of requests at non-decreasing times, the requests
        /// let through never beat the rate by more than the burst, and the
        /// excess stays within [0, burst].
        #[test]
        fn leaky_bucket_bounds(
            rate_rps in 1u64..50,
            burst in 0u64..5,
            gaps in proptest::collection::vec(0u64..400, 1..200),
        ) {
            let z = LimitZone::heap("p", 64 * 1024).unwrap();
            let rate = rate_rps * 1000;
            let mut now = 100_000u64;
            let start = now;
            let mut passed = 0u64;
            for g in gaps {
                now += g;
                match z.req_lookup(b"k", rate, burst * 1000, true, now) {
                    Lookup::Ok(e) => {
                        prop_assert!(e <= burst * 1000);
                        passed += 1;
                    }
                    Lookup::Busy(e) => prop_assert!(e > burst * 1000),
                    other => prop_assert!(false, "{:?}", other),
                }
                let elapsed = now - start;
                // One at once, `burst` more, then `rate` per second (nginx
                // rounds the drain down, so never more than this).
                prop_assert!(passed <= 1 + burst + rate_rps * elapsed / 1000 + 1);
            }
        }

        /// Requests exactly one period apart always pass.
        #[test]
        fn at_the_rate_nothing_is_refused(rate_rps in prop::sample::select(vec![1u64, 2, 4, 5, 10, 20, 50]), n in 1usize..100) {
            let z = LimitZone::heap("p", 64 * 1024).unwrap();
            let mut now = 5_000u64;
            for _ in 0..n {
                prop_assert_eq!(z.req_lookup(b"k", rate_rps * 1000, 0, true, now), Lookup::Ok(0));
                now += 1000 / rate_rps;
            }
        }

        #[test]
        fn leak_never_negative(excess in 0u64..1_000_000, last in 0u64..1_000_000, now in 0u64..1_000_000, rate in 1u64..1_000_000) {
            let (e, _) = leak(excess, last, now, rate);
            prop_assert!(e <= excess + 1000);
        }
    }
}
