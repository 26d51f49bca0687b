//! Idle connections parked outside the runtime. A keep-alive connection
//! that has waited a while for its next request gives up its task, its
//! runtime registration and its buffers: its socket goes into a private
//! epoll set (one-shot, read or hang-up), with what the connection needs to
//! go on, until the client sends (the connection is resumed in a new task),
//! its keep-alive time passes or the worker stops (it is closed). What an
//! idle connection then costs is its socket and that record, as nginx's
//! idle connections cost their `ngx_connection_t`. One parker per worker; its
//! epoll set is itself registered with the runtime.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use super::stream::Stream;

/// Connections parked before the heap is trimmed again, and the least time
/// between two trims.
const TRIM_AFTER: usize = 512;
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// No connection parked for this long after some were: their burst ended.
pub const TRIM_QUIET: std::time::Duration = std::time::Duration::from_millis(250);

/// A socket out of the runtime.
pub enum Parked {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
    /// A TLS connection parks with its rustls state. It is parked only
    /// when no plaintext waits in rustls (the socket's readiness would not
    /// say so): one that has some is refused here.
    Tls(std::net::TcpStream, Box<super::tls::Session>),
}

impl Parked {
    /// Takes a stream out of the runtime (it stays non-blocking).
    pub fn from_stream(s: Stream) -> std::io::Result<Parked> {
        Ok(match s {
            Stream::Tcp(t) => Parked::Tcp(t.into_std()?),
            Stream::Unix(u) => Parked::Unix(u.into_std()?),
            Stream::Tls(t) => {
                if t.has_buffered() {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                let (tcp, st) = t.into_parts();
                Parked::Tls(tcp.into_std()?, st)
            }
        })
    }

    /// Puts it back (must be called within the runtime).
    pub fn into_stream(self) -> std::io::Result<Stream> {
        Ok(match self {
            Parked::Tcp(t) => Stream::Tcp(tokio::net::TcpStream::from_std(t)?),
            Parked::Unix(u) => Stream::Unix(tokio::net::UnixStream::from_std(u)?),
            Parked::Tls(t, st) => Stream::Tls(Box::new(super::tls::TlsStream::from_parts(
                tokio::net::TcpStream::from_std(t)?,
                st,
            ))),
        })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Parked::Tcp(t) => t.as_fd(),
            Parked::Unix(u) => u.as_fd(),
            Parked::Tls(t, _) => t.as_fd(),
        }
    }
}

struct EpollFd(Epoll);

impl AsRawFd for EpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.0.as_raw_fd()
    }
}

struct Entry<T> {
    sock: Parked,
    what: T,
    until: Instant,
}

/// The parked entries, inline in one vector, each known by its index and
/// the generation of its slot (a key no longer valid once the slot is
/// reused): no allocation and no hashing per park, where a map of boxed
/// entries had both. Its memory goes back when the last entry leaves.
struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// The first empty slot, then each empty slot's next.
    free: Option<u32>,
    len: usize,
}

struct Slot<T> {
    generation: u32,
    /// Filled, or the next empty slot.
    entry: Result<Entry<T>, Option<u32>>,
}

impl<T> Slab<T> {
    fn new() -> Slab<T> {
        Slab {
            slots: Vec::new(),
            free: None,
            len: 0,
        }
    }

    fn key(index: u32, generation: u32) -> u64 {
        (u64::from(generation) << 32) | u64::from(index)
    }

    /// Its key, or the entry back when no index is left (2^32 parked).
    fn insert(&mut self, entry: Entry<T>) -> Result<u64, Entry<T>> {
        let index = match self.free {
            Some(i) => i,
            None => match u32::try_from(self.slots.len()) {
                Ok(i) if i < u32::MAX => {
                    self.slots.push(Slot {
                        generation: 0,
                        entry: Err(None),
                    });
                    i
                }
                _ => return Err(entry),
            },
        };
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return Err(entry);
        };
        let was = std::mem::replace(&mut slot.entry, Ok(entry));
        if let Err(next) = was {
            if self.free == Some(index) {
                self.free = next;
            }
        }
        self.len += 1;
        Ok(Self::key(index, slot.generation))
    }

    fn get(&self, key: u64) -> Option<&Entry<T>> {
        let slot = self.slots.get((key & 0xffff_ffff) as usize)?;
        if u64::from(slot.generation) != key >> 32 {
            return None;
        }
        slot.entry.as_ref().ok()
    }

    fn remove(&mut self, key: u64) -> Option<Entry<T>> {
        self.get(key)?;
        let index = (key & 0xffff_ffff) as u32;
        let slot = self.slots.get_mut(index as usize)?;
        let taken = std::mem::replace(&mut slot.entry, Err(self.free));
        slot.generation = slot.generation.wrapping_add(1);
        self.free = Some(index);
        self.len -= 1;
        taken.ok()
    }

    fn keys(&self) -> Vec<u64> {
        (0u32..)
            .zip(&self.slots)
            .filter(|(_, s)| s.entry.is_ok())
            .map(|(i, s)| Self::key(i, s.generation))
            .collect()
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Empty: its memory goes back (all its keys are stale, and none can
    /// name a slot again).
    fn release(&mut self) {
        *self = Slab::new();
    }
}

struct State<T> {
    parked: Slab<T>,
    /// Deadlines, earliest first (an entry resumed meanwhile is skipped).
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// All were taken (the worker stops): nothing more is parked.
    closed: bool,
    /// Parked since the heap was last trimmed, when that was, and when the
    /// last one was parked.
    since_trim: usize,
    trimmed: Instant,
    last_park: Instant,
}

/// What became of a parked connection.
pub enum Wake<T> {
    /// The client sent something (or closed): go on with it.
    Ready(Parked, T),
    /// Its time passed (or the worker stops): close it.
    Expired(Parked, T),
}

pub struct Parker<T> {
    epoll: AsyncFd<EpollFd>,
    state: Mutex<State<T>>,
    /// A new earliest deadline.
    changed: Notify,
}

impl<T> Parker<T> {
    /// A parker with its epoll set (within the runtime).
    #[allow(unsafe_code)]
    pub fn new() -> std::io::Result<Parker<T>> {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(std::io::Error::from)?;
        // SAFETY: `EpollFd` owns the epoll descriptor (an `OwnedFd` inside
        // nix's `Epoll`), so it stays open and the same for as long as the
        // `AsyncFd` holds it, and `as_raw_fd` always returns it.
        let epoll =
            unsafe { AsyncFd::register_with_interest(EpollFd(ep), tokio::io::Interest::READABLE) }
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Parker {
            epoll,
            state: Mutex::new(State {
                parked: Slab::new(),
                deadlines: BinaryHeap::new(),
                closed: false,
                since_trim: 0,
                trimmed: crate::net::clock::now(),
                last_park: crate::net::clock::now(),
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections parked now.
    pub fn len(&self) -> usize {
        self.lock().parked.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Parks a socket until it is readable or `until`; gives it back if it
    /// cannot be watched.
    pub fn park(&self, sock: Parked, what: T, until: Instant) -> Result<(), (Parked, T)> {
        let mut st = self.lock();
        if st.closed {
            return Err((sock, what));
        }
        let key = match st.parked.insert(Entry { sock, what, until }) {
            Ok(key) => key,
            Err(e) => return Err((e.sock, e.what)),
        };
        let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLONESHOT;
        let added = match st.parked.get(key) {
            Some(e) => self
                .epoll
                .get_ref()
                .0
                .add(e.sock.fd(), EpollEvent::new(flags, key))
                .is_ok(),
            None => false,
        };
        if !added {
            return match st.parked.remove(key) {
                Some(e) => Err((e.sock, e.what)),
                None => Ok(()),
            };
        }
        let earliest = st.deadlines.peek().is_none_or(|Reverse((t, _))| until < *t);
        st.deadlines.push(Reverse((until, key)));
        st.since_trim += 1;
        st.last_park = crate::net::clock::now();
        drop(st);
        if earliest {
            self.changed.notify_one();
        }
        Ok(())
    }

    /// Whether the heap is due a trim: many connections went idle since
    /// the last (`TRIM_AFTER` parked) and it was a while ago (at most one a
    /// second), or some did and then none for `TRIM_QUIET` (a burst of
    /// them ended; a few, at most once a second). What their requests used
    /// is then free in the heap but still counted in the worker's memory;
    /// the caller gives it back.
    pub fn trim_due(&self) -> bool {
        let mut st = self.lock();
        let now = crate::net::clock::now();
        let a_while = now.duration_since(st.trimmed) >= TRIM_EVERY;
        let burst = st.since_trim >= TRIM_AFTER && a_while;
        // A few parked now and then are trimmed for at most once a second.
        let ended = now.duration_since(st.last_park) >= TRIM_QUIET
            && (st.since_trim >= TRIM_AFTER / 8 || (st.since_trim > 0 && a_while));
        if !(burst || ended) {
            return false;
        }
        st.since_trim = 0;
        st.trimmed = now;
        true
    }

    fn take(&self, st: &mut State<T>, key: u64) -> Option<Entry<T>> {
        let e = st.parked.remove(key)?;
        let _ = self.epoll.get_ref().0.delete(e.sock.fd());
        if st.parked.len() == 0 {
            // The last one left: the deadlines still queued are all stale.
            st.parked.release();
            st.deadlines = BinaryHeap::new();
        }
        Some(e)
    }

    /// Every parked connection, taken out, and no more parked (the worker
    /// stops).
    pub fn take_all(&self) -> Vec<(Parked, T)> {
        let mut st = self.lock();
        st.closed = true;
        let keys = st.parked.keys();
        st.deadlines.clear();
        keys.into_iter()
            .filter_map(|k| self.take(&mut st, k))
            .map(|e| (e.sock, e.what))
            .collect()
    }

    /// Takes up to `n` parked connections, those closest to their deadline
    /// first (the longest idle, with one keep-alive time).
    pub fn take_oldest(&self, n: usize) -> Vec<(Parked, T)> {
        let mut st = self.lock();
        let mut out = Vec::new();
        while out.len() < n {
            let Some(Reverse((t, key))) = st.deadlines.pop() else {
                break;
            };
            if st.parked.get(key).is_some_and(|e| e.until == t) {
                if let Some(e) = self.take(&mut st, key) {
                    out.push((e.sock, e.what));
                }
            }
        }
        out
    }

    /// The next connections that woke or expired, waiting until some do.
    pub async fn next(&self) -> Vec<Wake<T>> {
        loop {
            let now = Instant::now();
            let mut out = Vec::new();
            let wait_until = {
                let mut st = self.lock();
                while let Some(Reverse((t, key))) = st.deadlines.peek().copied() {
                    if st.parked.get(key).is_none_or(|e| e.until != t) {
                        st.deadlines.pop();
                        continue;
                    }
                    if t > now {
                        break;
                    }
                    st.deadlines.pop();
                    if let Some(e) = self.take(&mut st, key) {
                        out.push(Wake::Expired(e.sock, e.what));
                    }
                }
                st.deadlines.peek().map(|Reverse((t, _))| *t)
            };
            if !out.is_empty() {
                return out;
            }
            let sleep = async {
                match wait_until {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                guard = self.epoll.readable() => {
                    let Ok(mut guard) = guard else {
                        return out;
                    };
                    let mut events = [EpollEvent::empty(); 64];
                    let n = self.epoll.get_ref().0.wait(&mut events, EpollTimeout::ZERO).unwrap_or(0);
                    if n < events.len() {
                        guard.clear_ready();
                    }
                    let mut st = self.lock();
                    for ev in &events[..n] {
                        if let Some(e) = self.take(&mut st, ev.data()) {
                            out.push(Wake::Ready(e.sock, e.what));
                        }
                    }
                    drop(st);
                    if !out.is_empty() {
                        return out;
                    }
                }
                () = sleep => {}
                () = self.changed.notified() => {}
            }
        }
    }
}

impl<T: Send> crate::net::slots::Reclaim for Parker<T> {
    fn reclaim(&self, n: usize) -> usize {
        let taken = self.take_oldest(n);
        let closed = taken.len();
        drop(taken);
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    fn entry(n: u32) -> Entry<u32> {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        Entry {
            sock: Parked::Unix(a),
            what: n,
            until: Instant::now(),
        }
    }

    #[test]
    fn a_slab_key_names_its_entry_until_the_slot_is_reused() {
        let mut slab = Slab::new();
        let k1 = slab.insert(entry(1)).ok().unwrap();
        let k2 = slab.insert(entry(2)).ok().unwrap();
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.get(k1).map(|e| e.what), Some(1));
        assert_eq!(slab.remove(k1).map(|e| e.what), Some(1));
        // Gone, and its key stays stale once the slot holds another.
        assert!(slab.get(k1).is_none() && slab.remove(k1).is_none());
        let k3 = slab.insert(entry(3)).ok().unwrap();
        assert_ne!(k3, k1);
        assert_eq!(
            k3 & 0xffff_ffff,
            k1 & 0xffff_ffff,
            "the empty slot is reused"
        );
        assert!(slab.get(k1).is_none());
        assert_eq!(slab.get(k3).map(|e| e.what), Some(3));
        let mut keys = slab.keys();
        keys.sort_unstable();
        let mut want = vec![k2, k3];
        want.sort_unstable();
        assert_eq!(keys, want);
        // Emptied in another order: every slot is free again, the list holds.
        assert_eq!(slab.remove(k2).map(|e| e.what), Some(2));
        assert_eq!(slab.remove(k3).map(|e| e.what), Some(3));
        assert_eq!(slab.len(), 0);
        let again: Vec<u64> = (10..13)
            .map(|n| slab.insert(entry(n)).ok().unwrap())
            .collect();
        assert_eq!(slab.slots.len(), 3, "two slots reused before a new one");
        for (k, n) in again.iter().zip(10..) {
            assert_eq!(slab.get(*k).map(|e| e.what), Some(n));
        }
        slab.release();
        assert_eq!((slab.len(), slab.slots.len()), (0, 0));
    }

    #[tokio::test]
    async fn the_heap_is_due_a_trim_once_parking_went_quiet() {
        let parker = Parker::new().unwrap();
        let mut keep = Vec::new();
        let mut park = |n: u32| {
            for i in 0..n {
                let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
                a.set_nonblocking(true).unwrap();
                let until = Instant::now() + Duration::from_secs(60);
                assert!(parker.park(Parked::Unix(a), i, until).is_ok());
                keep.push(b);
            }
        };
        let quiet = TRIM_QUIET + Duration::from_millis(50);
        tokio::time::sleep(TRIM_EVERY).await;
        assert!(!parker.trim_due(), "nothing parked: no trim");
        park(3);
        assert!(!parker.trim_due(), "parking goes on: not yet");
        tokio::time::sleep(quiet).await;
        assert!(parker.trim_due(), "quiet since the last one parked");
        assert!(!parker.trim_due(), "once");
        // A few more, soon after a trim: not yet; a burst's worth: yes.
        park(3);
        tokio::time::sleep(quiet).await;
        assert!(!parker.trim_due(), "a few, within the second");
        park(TRIM_AFTER as u32 / 8);
        tokio::time::sleep(quiet).await;
        assert!(parker.trim_due(), "a burst ended");
    }

    #[tokio::test]
    async fn a_parked_socket_wakes_when_its_peer_sends_or_expires() {
        let parker = Parker::new().unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (_c, d) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        d.set_nonblocking(true).unwrap();
        let far = Instant::now() + Duration::from_secs(30);
        assert!(parker.park(Parked::Unix(b), 1u32, far).is_ok());
        assert!(
            parker
                .park(
                    Parked::Unix(d),
                    2u32,
                    Instant::now() + Duration::from_millis(50)
                )
                .is_ok()
        );
        assert_eq!(parker.len(), 2);
        // The second expires first.
        let woke = parker.next().await;
        assert!(matches!(woke.as_slice(), [Wake::Expired(_, 2)]));
        a.write_all(b"x").unwrap();
        let woke = parker.next().await;
        let [Wake::Ready(sock, 1)] = woke.as_slice() else {
            panic!("the first should be ready");
        };
        let _ = sock;
        assert!(parker.is_empty());
    }

    #[tokio::test]
    async fn a_peer_that_hangs_up_wakes_and_all_are_taken_at_stop() {
        let parker = Parker::new().unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (_c, d) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        d.set_nonblocking(true).unwrap();
        let far = Instant::now() + Duration::from_secs(30);
        assert!(parker.park(Parked::Unix(b), 1u32, far).is_ok());
        assert!(parker.park(Parked::Unix(d), 2u32, far).is_ok());
        drop(a);
        let woke = parker.next().await;
        assert!(matches!(woke.as_slice(), [Wake::Ready(_, 1)]));
        let rest = parker.take_all();
        assert_eq!(rest.len(), 1);
        assert!(parker.is_empty());
        let (_e, f) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(
            parker.park(Parked::Unix(f), 3u32, far).is_err(),
            "closed: nothing more parked"
        );
    }
}
