//! `ssl_session_cache shared:NAME:SIZE`: TLS sessions in a shared zone, so
//! that a client resumes on whichever worker accepts it. The zone is made
//! by the master before it forks (and kept across a reload when its name
//! and size stay, as nginx keeps its zones); every worker maps it.
//!
//! Layout (`shm::records`): fixed slots of 224 data bytes; an entry (key,
//! then value) takes as many consecutive slots as it needs, written round
//! the zone from a cursor, so that when it is full the oldest entries are
//! the ones overwritten (nginx, too, drops its oldest sessions first). A
//! hash table of chains finds a key. Entries expire at the time their
//! server's `ssl_session_timeout` gave them.
//!
//! Every access holds the zone's pid-owned lock for a few microseconds; a
//! process that finds it held by a dead one takes it and clears the cache
//! (what the dead one was changing may be half written), and so does the
//! master when it reaps a worker that held it. Every index and length read
//! from the zone is checked, so a torn entry can only be a miss.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::Duration;

use crate::shm::records::{
    SESSION_LAYOUT, SESSION_MAGIC, SESSION_WORDS, SessionHeader, SessionSlot,
};
use crate::shm::{Guard, Region, ShmError};

/// Bytes of data in one slot.
const SLOT_DATA: usize = SESSION_WORDS * 8;
/// The longest key and value kept (nginx keeps sessions up to 4096 bytes).
pub const MAX_KEY: usize = 256;
pub const MAX_VALUE: usize = 4096;
const HEADER: usize = 64;
/// How long an access waits for the lock before it gives up (a miss).
const LOCK_WAIT: Duration = Duration::from_millis(20);

pub struct SessionZone {
    pub name: String,
    region: Region,
    slots: usize,
    buckets: usize,
    slots_off: usize,
}

impl std::fmt::Debug for SessionZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionZone({}, {} slots)", self.name, self.slots)
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The key's hash, the same in every process.
fn hash(key: &[u8]) -> u64 {
    crate::shm::records::fnv1a(key)
}

/// Slots an entry of `len` bytes takes.
fn span(len: usize) -> usize {
    len.div_ceil(SLOT_DATA).max(1)
}

impl SessionZone {
    /// A new zone of `size` bytes, as a memfd mapped shared.
    pub fn create(name: &str, size: usize) -> Result<SessionZone, ShmError> {
        SessionZone::create_for("ssl_session_cache", name, size)
    }

    /// The same table for another use (`sticky learn`), its memfd named
    /// `sluice:KIND:NAME`.
    pub fn create_for(kind: &str, name: &str, size: usize) -> Result<SessionZone, ShmError> {
        let region = Region::create(&format!("{kind}:{name}"), size)?;
        SessionZone::init(name, region)
    }

    /// A zone another binary made (a binary upgrade hands its memfd on),
    /// with its entries; Err when its layout is not this binary's.
    pub fn attach(name: &str, fd: std::os::fd::OwnedFd) -> Result<SessionZone, ShmError> {
        let region = Region::from_fd(fd)?;
        let h = region.get::<SessionHeader>(0)?;
        if h.magic.load(Acquire) != SESSION_MAGIC || h.layout.load(Relaxed) != SESSION_LAYOUT {
            return Err(ShmError::Layout);
        }
        SessionZone::init(name, region)
    }

    /// The memfd behind the zone (a binary upgrade hands it on).
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.region.fd()
    }

    /// The same over process-private memory (tests).
    pub fn heap(name: &str, size: usize) -> Result<SessionZone, ShmError> {
        SessionZone::init(name, Region::heap(size))
    }

    fn init(name: &str, region: Region) -> Result<SessionZone, ShmError> {
        let (slots, buckets, slots_off) =
            crate::shm::records::table_geometry(region.len(), HEADER, size_of::<SessionSlot>());
        let z = SessionZone {
            name: name.to_string(),
            region,
            slots,
            buckets,
            slots_off,
        };
        // Bounds checked once here; the accessors below cannot fail after.
        let h = z.region.get::<SessionHeader>(0)?;
        z.region
            .slice::<std::sync::atomic::AtomicU32>(HEADER, buckets)?;
        z.region.slice::<SessionSlot>(slots_off, slots)?;
        h.slots.store(slots as u32, Relaxed);
        h.buckets.store(buckets as u32, Relaxed);
        h.layout.store(SESSION_LAYOUT, Relaxed);
        h.magic.store(SESSION_MAGIC, Release);
        Ok(z)
    }

    /// The zone's size in bytes.
    pub fn size(&self) -> usize {
        self.region.len()
    }

    /// Entries it can hold at most (one slot each).
    pub fn capacity(&self) -> usize {
        self.slots
    }

    fn header(&self) -> Option<&SessionHeader> {
        self.region.get::<SessionHeader>(0).ok()
    }

    fn buckets(&self) -> &[std::sync::atomic::AtomicU32] {
        self.region.slice(HEADER, self.buckets).unwrap_or_default()
    }

    fn slot_list(&self) -> &[SessionSlot] {
        self.region
            .slice(self.slots_off, self.slots)
            .unwrap_or_default()
    }

    /// The lock, pushing out a dead holder; then the cache is cleared.
    fn lock(&self) -> Option<Guard<'_>> {
        self.header()?
            .lock
            .lock_repairing(std::process::id(), LOCK_WAIT, || self.clear())
    }

    /// The master, reaping `pid`: true when it held the lock, which is then
    /// opened and the cache cleared.
    pub fn repair(&self, pid: u32) -> bool {
        let Some(h) = self.header() else {
            return false;
        };
        if h.lock.owner() != pid || !h.lock.force_unlock(pid) {
            return false;
        }
        if let Some(_g) = h.lock.try_lock(std::process::id()) {
            self.clear();
        }
        true
    }

    fn clear(&self) {
        for b in self.buckets() {
            b.store(0, Relaxed);
        }
        for s in self.slot_list() {
            s.head.store(0, Relaxed);
        }
        if let Some(h) = self.header() {
            h.cursor.store(0, Relaxed);
            h.entries.store(0, Relaxed);
        }
    }

    /// Entries now in the cache (expired ones included until overwritten).
    pub fn entries(&self) -> u32 {
        self.header().map_or(0, |h| h.entries.load(Relaxed))
    }

    /// Stores `value` under `key` until `expires` (unix seconds); false when
    /// it is too large or the cache is busy.
    pub fn put(&self, key: &[u8], value: &[u8], expires: u64) -> bool {
        let len = key.len() + value.len();
        if key.is_empty() || key.len() > MAX_KEY || value.len() > MAX_VALUE {
            return false;
        }
        let need = span(len);
        if need > self.slots {
            return false;
        }
        let Some(_g) = self.lock() else {
            return false;
        };
        let h = hash(key);
        if let Some(old) = self.find(key, h) {
            self.remove(old);
        }
        let Some(header) = self.header() else {
            return false;
        };
        let mut at = header.cursor.load(Relaxed) as usize;
        if at + need > self.slots {
            // The tail is too short: those entries go too (oldest first).
            for i in at..self.slots {
                self.evict(i);
            }
            at = 0;
        }
        for i in at..at + need {
            self.evict(i);
        }
        let slots = self.slot_list();
        let first = &slots[at];
        first.hash.store(h, Relaxed);
        first.expires.store(expires, Relaxed);
        first.key_len.store(key.len() as u32, Relaxed);
        first.val_len.store(value.len() as u32, Relaxed);
        self.write_bytes(at, key.iter().chain(value.iter()).copied());
        for s in &slots[at..at + need] {
            s.head.store(at as u32 + 1, Relaxed);
        }
        let b = &self.buckets()[(h % self.buckets as u64) as usize];
        first.next.store(b.load(Relaxed), Relaxed);
        b.store(at as u32 + 1, Relaxed);
        header
            .cursor
            .store(((at + need) % self.slots) as u32, Relaxed);
        header.entries.fetch_add(1, Relaxed);
        true
    }

    /// The value under `key`, if it has not expired.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }

    /// The value under `key`, removed (TLS 1.3 tickets are used once).
    pub fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }

    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        if key.is_empty() || key.len() > MAX_KEY {
            return None;
        }
        let _g = self.lock()?;
        let i = self.find(key, hash(key))?;
        let s = &self.slot_list()[i];
        if s.expires.load(Relaxed) < now_secs() {
            self.remove(i);
            return None;
        }
        let (kl, vl) = (
            s.key_len.load(Relaxed) as usize,
            s.val_len.load(Relaxed) as usize,
        );
        let bytes = self.read_bytes(i, kl + vl)?;
        if remove {
            self.remove(i);
        }
        Some(bytes[kl..].to_vec())
    }

    /// The first slot of the entry under `key`: its chain walked at most
    /// once round the zone, each link checked.
    fn find(&self, key: &[u8], h: u64) -> Option<usize> {
        let slots = self.slot_list();
        let mut link = self.buckets()[(h % self.buckets as u64) as usize].load(Relaxed) as usize;
        for _ in 0..self.slots {
            let i = link.checked_sub(1)?;
            let s = slots.get(i)?;
            if s.head.load(Relaxed) as usize != i + 1 {
                return None;
            }
            if s.hash.load(Relaxed) == h && s.key_len.load(Relaxed) as usize == key.len() {
                let kl = key.len();
                if self.read_bytes(i, kl).is_some_and(|k| k == key) {
                    return Some(i);
                }
            }
            link = s.next.load(Relaxed) as usize;
        }
        None
    }

    /// Frees the entry that slot `i` belongs to, if any.
    fn evict(&self, i: usize) {
        if let Some(head) = self
            .slot_list()
            .get(i)
            .and_then(|s| (s.head.load(Relaxed) as usize).checked_sub(1))
        {
            self.remove(head);
        }
    }

    /// Unlinks the entry whose first slot is `i` and frees its slots.
    fn remove(&self, i: usize) {
        let slots = self.slot_list();
        let Some(s) = slots.get(i) else { return };
        if s.head.load(Relaxed) as usize != i + 1 {
            // Not a first slot (a torn entry): free just this one.
            s.head.store(0, Relaxed);
            return;
        }
        let h = s.hash.load(Relaxed);
        let b = &self.buckets()[(h % self.buckets as u64) as usize];
        let next = s.next.load(Relaxed);
        if b.load(Relaxed) as usize == i + 1 {
            b.store(next, Relaxed);
        } else {
            let mut link = b.load(Relaxed) as usize;
            for _ in 0..self.slots {
                let Some(p) = link.checked_sub(1).and_then(|p| slots.get(p)) else {
                    break;
                };
                let after = p.next.load(Relaxed) as usize;
                if after == i + 1 {
                    p.next.store(next, Relaxed);
                    break;
                }
                link = after;
            }
        }
        let len = s.key_len.load(Relaxed) as usize + s.val_len.load(Relaxed) as usize;
        let end = (i + span(len)).min(self.slots);
        for t in &slots[i..end] {
            if t.head.load(Relaxed) as usize == i + 1 {
                t.head.store(0, Relaxed);
            }
        }
        if let Some(h) = self.header() {
            let _ = h
                .entries
                .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        }
    }

    fn write_bytes(&self, first: usize, bytes: impl Iterator<Item = u8>) {
        let slots = self.slot_list();
        let mut word = [0u8; 8];
        let mut n = 0usize;
        let flush = |n: usize, word: &[u8; 8]| {
            let w = (n - 1) / 8;
            if let Some(s) = slots.get(first + w / SESSION_WORDS) {
                s.data[w % SESSION_WORDS].store(u64::from_le_bytes(*word), Relaxed);
            }
        };
        for b in bytes {
            word[n % 8] = b;
            n += 1;
            if n.is_multiple_of(8) {
                flush(n, &word);
                word = [0; 8];
            }
        }
        if !n.is_multiple_of(8) {
            flush(n, &word);
        }
    }

    /// `len` bytes of the entry starting at slot `first`; None if they would
    /// run past the zone.
    fn read_bytes(&self, first: usize, len: usize) -> Option<Vec<u8>> {
        if len > MAX_KEY + MAX_VALUE || first + span(len) > self.slots {
            return None;
        }
        let slots = self.slot_list();
        let mut out = Vec::with_capacity(len.div_ceil(8) * 8);
        for w in 0..len.div_ceil(8) {
            let s = slots.get(first + w / SESSION_WORDS)?;
            out.extend_from_slice(&s.data[w % SESSION_WORDS].load(Relaxed).to_le_bytes());
        }
        out.truncate(len);
        Some(out)
    }

    /// The zone is one this binary made (after `create`, always).
    pub fn valid(&self) -> bool {
        self.header().is_some_and(|h| {
            h.magic.load(Acquire) == SESSION_MAGIC && h.layout.load(Relaxed) == SESSION_LAYOUT
        })
    }
}

/// rustls's session store over a shared zone, entries good for the
/// server's `ssl_session_timeout`.
#[derive(Debug)]
pub struct SharedSessions {
    pub zone: std::sync::Arc<SessionZone>,
    pub lifetime: u64,
}

impl rustls::server::StoresServerSessions for SharedSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.zone
            .put(&key, &value, now_secs().saturating_add(self.lifetime))
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.zone.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.zone.take(key)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn zone(size: usize) -> SessionZone {
        SessionZone::heap("t", size).expect("zone")
    }

    fn later() -> u64 {
        now_secs() + 100
    }

    #[test]
    fn insert_get_take() {
        let z = zone(64 * 1024);
        assert!(z.capacity() > 200);
        assert!(z.put(b"k1", b"v1", later()));
        assert!(z.put(b"k2", &[7u8; 1000], later()));
        assert_eq!(z.get(b"k1").as_deref(), Some(&b"v1"[..]));
        assert_eq!(z.get(b"k2").map(|v| v.len()), Some(1000));
        assert_eq!(z.get(b"k3"), None);
        assert_eq!(z.take(b"k1").as_deref(), Some(&b"v1"[..]));
        assert_eq!(z.get(b"k1"), None);
        assert_eq!(z.entries(), 1);
        // A key put again replaces its value.
        assert!(z.put(b"k2", b"new", later()));
        assert_eq!(z.get(b"k2").as_deref(), Some(&b"new"[..]));
        assert_eq!(z.entries(), 1);
    }

    #[test]
    fn bounds() {
        let z = zone(64 * 1024);
        assert!(!z.put(b"", b"v", later()));
        assert!(!z.put(&[1; MAX_KEY + 1], b"v", later()));
        assert!(!z.put(b"k", &[1; MAX_VALUE + 1], later()));
        assert!(z.put(b"k", &[1; MAX_VALUE], later()));
        assert_eq!(z.get(&[1; MAX_KEY + 1]), None);
        // A zone too small for an entry refuses it.
        let tiny = zone(1024);
        assert_eq!(tiny.capacity(), 3);
        assert!(!tiny.put(b"k", &[1; MAX_VALUE], later()));
        assert!(tiny.put(b"k", b"v", later()));
    }

    #[test]
    fn expires() {
        let z = zone(16 * 1024);
        assert!(z.put(b"old", b"v", now_secs() - 1));
        assert_eq!(z.get(b"old"), None);
        assert_eq!(z.entries(), 0);
    }

    #[test]
    fn oldest_go_first_when_full() {
        let z = zone(16 * 1024);
        let n = z.capacity();
        for i in 0..n {
            assert!(z.put(format!("k{i}").as_bytes(), b"v", later()));
        }
        assert_eq!(z.entries() as usize, n);
        assert!(z.get(b"k0").is_some());
        // Two slots' worth: the two oldest go.
        assert!(z.put(b"big", &[1; SLOT_DATA + 10], later()));
        assert_eq!(z.get(b"k0"), None);
        assert_eq!(z.get(b"k1"), None);
        assert!(z.get(b"k2").is_some());
        assert!(z.get(format!("k{}", n - 1).as_bytes()).is_some());
        assert!(z.get(b"big").is_some());
    }

    #[test]
    fn a_dead_holder_is_pushed_out_and_the_cache_cleared() {
        let z = zone(16 * 1024);
        assert!(z.put(b"k", b"v", later()));
        let ghost = 4_194_305 + 11;
        std::mem::forget(z.header().and_then(|h| h.lock.try_lock(ghost)));
        assert_eq!(z.get(b"k"), None, "cleared");
        assert!(z.put(b"k", b"v", later()));
        assert_eq!(z.get(b"k").as_deref(), Some(&b"v"[..]));
        // The master's repair, for a holder it reaped.
        std::mem::forget(z.header().and_then(|h| h.lock.try_lock(ghost)));
        assert!(z.repair(ghost));
        assert!(!z.repair(ghost));
        assert_eq!(z.get(b"k"), None);
    }

    #[test]
    fn threads_share_it() {
        let z = std::sync::Arc::new(zone(256 * 1024));
        let hs: Vec<_> = (0..4u8)
            .map(|t| {
                let z = z.clone();
                std::thread::spawn(move || {
                    for i in 0..300u32 {
                        let k = [t, (i >> 8) as u8, i as u8];
                        // A put or get gives up after LOCK_WAIT without the
                        // lock: on a loaded machine a holder can be off the
                        // CPU that long. Tried again, each gets through.
                        assert!((0..200).any(|_| z.put(&k, &k.repeat(30), later())));
                        assert_eq!((0..200).find_map(|_| z.get(&k)), Some(k.repeat(30)));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().expect("thread");
        }
    }

    #[test]
    fn memfd_zone() {
        let z = SessionZone::create("t", 64 * 1024).expect("memfd");
        assert!(z.valid());
        assert!(z.put(b"k", b"v", later()));
        assert_eq!(z.get(b"k").as_deref(), Some(&b"v"[..]));
    }

    proptest! {
        /// Any sequence of puts, gets and takes with any keys and values
        /// never panics, and agrees with a model of the last value put per
        /// key whenever the key is still present.
        #[test]
        fn arbitrary_operations(ops in proptest::collection::vec(
            (0u8..3, proptest::collection::vec(any::<u8>(), 0..40),
             proptest::collection::vec(any::<u8>(), 0..1200)), 1..120)) {
            let z = zone(8 * 1024);
            let mut model = std::collections::HashMap::new();
            for (op, k, v) in ops {
                match op {
                    0 => {
                        if z.put(&k, &v, later()) {
                            model.insert(k, v);
                        }
                    }
                    1 => {
                        if let Some(got) = z.get(&k) {
                            prop_assert_eq!(Some(&got), model.get(&k));
                        }
                    }
                    _ => {
                        if let Some(got) = z.take(&k) {
                            prop_assert_eq!(Some(&got), model.get(&k));
                            model.remove(&k);
                        }
                        prop_assert_eq!(z.get(&k), None);
                    }
                }
                prop_assert!(z.entries() as usize <= z.capacity());
            }
        }

        /// Garbage in the zone (a torn write) is a miss, never a panic.
        #[test]
        fn garbage_never_panics(words in proptest::collection::vec(any::<u64>(), 256),
                                keys in proptest::collection::vec(
                                    proptest::collection::vec(any::<u8>(), 1..40), 1..20)) {
            let z = zone(4 * 1024);
            for (i, w) in words.iter().enumerate() {
                let off = HEADER + i * 8;
                if off + 8 <= z.size() {
                    if let Ok(a) = z.region.get::<std::sync::atomic::AtomicU64>(off) {
                        a.store(*w, Relaxed);
                    }
                }
            }
            for k in &keys {
                let _ = z.get(k);
                let _ = z.put(k, b"value", later());
                let _ = z.take(k);
            }
        }
    }
}
