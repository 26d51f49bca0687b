//! `accept_balance`: the workers of a generation keep their shares of the
//! client connections close, where nginx leaves them to the wake-ups.
//!
//! A shared listener is registered exclusive (`exclusive`): a new connection
//! wakes the first worker that waits in `epoll_wait`. A worker that is quick
//! to wait again is the first to wait at the next arrival too, so
//! connections opened one after another (a client pool, a load generator's
//! start) gather on one worker and stay there as long as they are kept
//! alive, while the others idle. nginx behaves so; HAProxy and Envoy hand
//! each connection to the thread that holds the fewest.
//!
//! Here each worker counts the `worker_connections` slots it holds (client
//! connections and stream sessions) in a shared region. A worker that holds
//! more than its share (all workers' connections over the number of
//! workers) by more than a margin (4, or an eighth of the share if that is
//! more) leaves its shared listeners' epoll sets, so the next arrivals wake
//! the others, and comes back once it is within half the margin. A worker
//! that takes a connection while another is out calls that one back (a
//! datagram; a socket pair each, made before the fork) if it is now
//! within, and so does a close of one of its own connections. A worker out
//! also looks again every `TICK`, and comes back if a connection has been
//! waiting at two looks in a row (the others are not taking them). A
//! worker stays in while all the others are out and over their shares, so
//! someone always accepts.
//! `reuseport` listeners are the kernel's to spread and never left.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::shm::{Region, ShmError};

/// How often a worker out of its listeners' epoll sets looks again.
pub const TICK: Duration = Duration::from_millis(10);

/// The least margin over a worker's share, in connections.
const MARGIN: u64 = 4;

/// Where the counts start (after the mask of the workers that are out).
const COUNTS: usize = 8;

/// The workers whose paused bits fit the mask; a worker past them counts
/// its connections but never leaves its listeners.
const MASK_BITS: usize = 64;

/// The shared region: the mask of the workers that are out (`AtomicU64`),
/// then one count per worker (`AtomicU32`); and each worker's wake-up.
pub struct Balance {
    region: Region,
    workers: usize,
    /// One socket pair per worker (the ones past the mask have none): a
    /// datagram sent on the first end calls that worker back in; it reads
    /// the second.
    wakes: Vec<(UnixDatagram, UnixDatagram)>,
}

impl Balance {
    /// The region and wake-ups for `workers` workers (a generation's),
    /// made before they are forked.
    pub fn create(workers: usize) -> Result<Balance, ShmError> {
        Balance::init(
            Region::create("accept_balance", COUNTS + 4 * workers)?,
            workers,
        )
    }

    /// The same over process-private memory (tests).
    pub fn heap(workers: usize) -> Result<Balance, ShmError> {
        Balance::init(Region::heap(COUNTS + 4 * workers), workers)
    }

    fn init(region: Region, workers: usize) -> Result<Balance, ShmError> {
        // Bounds checked once here; the accessors below cannot fail after.
        region.get::<AtomicU64>(0)?;
        region.slice::<AtomicU32>(COUNTS, workers)?;
        let wakes = (0..workers.min(MASK_BITS))
            .map(|_| {
                let (tx, rx) = UnixDatagram::pair()?;
                tx.set_nonblocking(true)?;
                rx.set_nonblocking(true)?;
                Ok((tx, rx))
            })
            .collect::<std::io::Result<_>>()
            .map_err(|e| {
                ShmError::Create(nix::Error::from_raw(
                    e.raw_os_error().unwrap_or(nix::libc::EINVAL),
                ))
            })?;
        Ok(Balance {
            region,
            workers,
            wakes,
        })
    }

    fn mask(&self) -> &AtomicU64 {
        static NONE: AtomicU64 = AtomicU64::new(0);
        self.region.get::<AtomicU64>(0).unwrap_or(&NONE)
    }

    fn counts(&self) -> &[AtomicU32] {
        self.region
            .slice::<AtomicU32>(COUNTS, self.workers)
            .unwrap_or(&[])
    }

    /// Worker `slot`'s side, its count set to none and its bit cleared (a
    /// worker started again in a slot inherits nothing from the one that
    /// died there). None for a slot past the region. Called in the
    /// worker's runtime, which watches its wake-up.
    pub fn worker(self: &Arc<Self>, slot: usize) -> Option<Arc<Worker>> {
        let count = self.counts().get(slot)?;
        count.store(0, Ordering::Relaxed);
        let bit = (slot < MASK_BITS).then(|| 1u64 << slot);
        if let Some(b) = bit {
            self.mask().fetch_and(!b, Ordering::AcqRel);
        }
        // Without its wake-up (it could not be watched), it never goes
        // out: it would be back only at its ticks.
        let wake = self
            .wakes
            .get(slot)
            .and_then(|(_, rx)| rx.try_clone().ok())
            .and_then(|rx| tokio::net::UnixDatagram::from_std(rx).ok());
        Some(Arc::new(Worker {
            balance: self.clone(),
            slot,
            bit: bit.filter(|_| wake.is_some()),
            out: AtomicU32::new(0),
            wake,
            back: tokio::sync::Notify::new(),
        }))
    }

    fn count(&self, slot: usize) -> u64 {
        self.counts()
            .get(slot)
            .map_or(0, |c| u64::from(c.load(Ordering::Relaxed)))
    }

    /// Whether, with the workers of `mask` out, some worker other than
    /// `me` takes new connections: one is in (the workers past the mask
    /// always are), or one that is out is within its share (called back,
    /// on its way in).
    fn someone_takes(&self, mask: u64, me: u64) -> bool {
        if self.workers > MASK_BITS {
            return true;
        }
        let all = u64::MAX >> (MASK_BITS - self.workers.max(1));
        if all & !mask != 0 {
            return true;
        }
        self.within(mask & all & !me).next().is_some()
    }

    /// The workers of `mask` (out of their listeners) that are within their
    /// share: called back, or to be.
    fn within(&self, mask: u64) -> impl Iterator<Item = usize> + '_ {
        let mut left = mask;
        std::iter::from_fn(move || {
            let slot = (left != 0).then(|| left.trailing_zeros() as usize)?;
            left &= left - 1;
            Some(slot)
        })
        .filter(|&slot| self.stand_of(slot) == Stand::Within)
    }

    /// Where worker `slot` stands now.
    fn stand_of(&self, slot: usize) -> Stand {
        let counts = self.counts();
        let total = counts
            .iter()
            .map(|c| u64::from(c.load(Ordering::Relaxed)))
            .sum();
        stand(self.count(slot), total, counts.len() as u64)
    }
}

/// One worker's side of the balance, shared by its accept loops and the
/// slots of its connections.
pub struct Worker {
    balance: Arc<Balance>,
    slot: usize,
    /// Its bit in the mask; None past the mask (never out).
    bit: Option<u64>,
    /// Its listeners out of their epoll sets now (the worker's own: its
    /// runtime is one thread, so `go_out` and `come_back` never race).
    out: AtomicU32,
    /// The end of its socket pair the others' datagrams arrive at.
    wake: Option<tokio::net::UnixDatagram>,
    /// Its own closes call it back (`leave`).
    back: tokio::sync::Notify,
}

/// Where a worker stands against its share.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Stand {
    /// More than its share by more than the margin: leave the listeners.
    Over,
    /// Past half the margin but within it: stay as it is.
    Near,
    /// Within half the margin: take connections.
    Within,
}

/// Where `mine` stands among `total` connections of `workers` workers.
pub fn stand(mine: u64, total: u64, workers: u64) -> Stand {
    let workers = workers.max(1);
    let margin = MARGIN.max(total / workers / 8);
    // mine > total / workers + margin, in whole numbers.
    let mine_n = mine.saturating_mul(workers);
    if mine_n > total.saturating_add(margin.saturating_mul(workers)) {
        Stand::Over
    } else if mine_n > total.saturating_add((margin / 2).saturating_mul(workers)) {
        Stand::Near
    } else {
        Stand::Within
    }
}

impl Worker {
    /// A connection counted in (its slot taken). Any other worker that is
    /// out and now within its share is called back in.
    pub fn enter(&self) {
        let b = &self.balance;
        if let Some(c) = b.counts().get(self.slot) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let others = b.mask().load(Ordering::Acquire) & !self.bit.unwrap_or(0);
        for slot in b.within(others) {
            if let Some((tx, _)) = b.wakes.get(slot) {
                // Full (wake-ups unread): it has been called already.
                let _ = tx.send(&[1]);
            }
        }
    }

    /// Until another worker calls this one back in (`enter`) or a close of
    /// one of its own connections does (`leave`); forever without a
    /// wake-up (such a worker never goes out).
    pub async fn called_back(&self) {
        let Some(w) = &self.wake else {
            return std::future::pending().await;
        };
        let mut buf = [0u8; 8];
        tokio::select! {
            r = w.recv(&mut buf) => {
                if r.is_err() {
                    // Its socket failed: its own closes and the ticks are
                    // left.
                    return self.back.notified().await;
                }
                // The calls that came meanwhile are answered by this one.
                while w.try_recv(&mut buf).is_ok() {}
            }
            () = self.back.notified() => {}
        }
    }

    /// A connection counted out (its slot given back). If that brings this
    /// worker, out, within its share, it is called back at once.
    pub fn leave(&self) {
        if let Some(c) = self.balance.counts().get(self.slot) {
            // Never below zero, whatever a dead worker left.
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        if self.out.load(Ordering::Relaxed) > 0 && self.stand() == Stand::Within {
            self.back.notify_one();
        }
    }

    /// The connections counted for this worker now.
    pub fn held(&self) -> u64 {
        self.balance.count(self.slot)
    }

    /// Where this worker stands now.
    pub fn stand(&self) -> Stand {
        self.balance.stand_of(self.slot)
    }

    /// Marks one listener of this worker out, unless no other worker would
    /// take connections (someone must accept): whether it may leave. A
    /// worker takes them if it is in, or if it is out but now within its
    /// share: that one has been called back (`enter`) and is on its way in.
    pub fn go_out(&self) -> bool {
        let Some(bit) = self.bit else {
            return false;
        };
        if self.out.load(Ordering::Relaxed) == 0 {
            let b = &self.balance;
            let set = b
                .mask()
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                    b.someone_takes(m | bit, bit).then_some(m | bit)
                });
            if set.is_err() {
                return false;
            }
        }
        self.out.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// One listener of this worker back in (after a `go_out` that said yes).
    pub fn come_back(&self) {
        let Some(bit) = self.bit else {
            return;
        };
        let was = self
            .out
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if was == Ok(1) {
            self.balance.mask().fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_four_or_an_eighth_of_the_share() {
        // Two workers, 64 connections: a share of 32, a margin of 4.
        assert_eq!(stand(36, 64, 2), Stand::Near);
        assert_eq!(stand(37, 64 + 1, 2), Stand::Over);
        assert_eq!(stand(34, 64, 2), Stand::Within);
        assert_eq!(stand(35, 64, 2), Stand::Near);
        // Alone with 8: a share of 4, 8 is within 4 of it.
        assert_eq!(stand(8, 8, 2), Stand::Near);
        assert_eq!(stand(9, 9, 2), Stand::Over);
        // 8,000 over 4 workers: a share of 2,000, a margin of 250.
        assert_eq!(stand(2250, 8000, 4), Stand::Near);
        assert_eq!(stand(2251, 8001, 4), Stand::Over);
        assert_eq!(stand(2125, 8000, 4), Stand::Within);
        // One worker is never over; nothing is never over.
        assert_eq!(stand(10_000, 10_000, 1), Stand::Within);
        assert_eq!(stand(0, 0, 2), Stand::Within);
        assert_eq!(stand(0, 0, 0), Stand::Within);
        // Counts at their limits do not overflow (saturated: within).
        assert_eq!(stand(u64::MAX, u64::MAX, 3), Stand::Within);
    }

    #[tokio::test]
    async fn counts_are_per_worker_and_never_below_zero() {
        let b = Arc::new(Balance::heap(2).expect("region"));
        let (w0, w1) = (b.worker(0).expect("0"), b.worker(1).expect("1"));
        assert!(b.worker(2).is_none(), "past the region");
        for _ in 0..9 {
            w0.enter();
        }
        assert_eq!(w0.stand(), Stand::Over);
        assert_eq!(w1.stand(), Stand::Within);
        w1.enter();
        assert_eq!(w0.stand(), Stand::Near, "9 of 10: 4 over a share of 5");
        w1.leave();
        w1.leave();
        w1.leave();
        assert_eq!(b.counts()[1].load(Ordering::Relaxed), 0);
        // A worker started again in slot 0 starts from none.
        let again = b.worker(0).expect("0");
        assert_eq!(again.stand(), Stand::Within);
        assert_eq!(b.counts()[0].load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn someone_always_takes_connections() {
        let b = Arc::new(Balance::heap(3).expect("region"));
        let w: Vec<_> = (0..3).map(|i| b.worker(i).expect("worker")).collect();
        for _ in 0..20 {
            w[0].enter();
            w[1].enter();
        }
        assert_eq!((w[0].stand(), w[1].stand()), (Stand::Over, Stand::Over));
        assert!(w[0].go_out());
        assert!(w[0].go_out(), "a second listener of the same worker");
        assert!(w[1].go_out());
        assert!(
            !w[2].go_out(),
            "the last one in stays while the others are over their shares"
        );
        w[0].come_back();
        assert!(!w[2].go_out(), "worker 0 is still out on one listener");
        for _ in 0..10 {
            w[0].leave();
        }
        assert_eq!(w[0].stand(), Stand::Within);
        assert!(
            w[2].go_out(),
            "worker 0, still out but within its share, is on its way in"
        );
        w[2].come_back();
        for _ in 0..10 {
            w[0].enter();
        }
        assert!(!w[2].go_out(), "worker 0 is over again");
        w[0].come_back();
        assert!(w[2].go_out(), "worker 0 is in");
        w[2].come_back();
        // A worker that died out is in again when its slot starts again
        // (with none counted).
        let again = b.worker(1).expect("1");
        assert_eq!(again.stand(), Stand::Within);
        assert!(w[0].go_out() && again.go_out(), "worker 2 is in");
    }

    /// A worker out is called back by one that takes a connection once it
    /// is within its share, and not before.
    #[tokio::test]
    async fn a_worker_out_is_called_back_when_within() {
        let b = Arc::new(Balance::heap(2).expect("region"));
        let (w0, w1) = (b.worker(0).expect("0"), b.worker(1).expect("1"));
        for _ in 0..9 {
            w0.enter();
        }
        assert_eq!(w0.stand(), Stand::Over);
        assert!(w0.go_out());
        let back = async {
            tokio::time::timeout(Duration::from_millis(50), w0.called_back())
                .await
                .is_ok()
        };
        w1.enter();
        assert!(!back.await, "9 of 10 is not within");
        for _ in 0..4 {
            w1.enter();
        }
        // 9 of 14: within 2 of a share of 7.
        assert_eq!(w0.stand(), Stand::Within);
        let back = async {
            tokio::time::timeout(Duration::from_millis(2000), w0.called_back())
                .await
                .is_ok()
        };
        assert!(back.await, "called back");
        w0.come_back();
        // Nobody out: nobody called.
        w1.enter();
        let again = tokio::time::timeout(Duration::from_millis(50), w0.called_back()).await;
        assert!(again.is_err());
    }

    /// A worker out whose own connections close until it is within its
    /// share is called back by the last of them.
    #[tokio::test]
    async fn its_own_closes_call_a_worker_back() {
        let b = Arc::new(Balance::heap(2).expect("region"));
        let (w0, w1) = (b.worker(0).expect("0"), b.worker(1).expect("1"));
        for _ in 0..12 {
            w0.enter();
        }
        w1.enter();
        assert!(w0.go_out());
        let soon = Duration::from_millis(50);
        w0.leave();
        assert_eq!(w0.stand(), Stand::Over, "11 of 12");
        assert!(tokio::time::timeout(soon, w0.called_back()).await.is_err());
        // 5 of 6: within 2 of a share of 3 (a margin of 4).
        for _ in 0..6 {
            w0.leave();
        }
        assert_eq!(w0.stand(), Stand::Within);
        assert!(tokio::time::timeout(soon, w0.called_back()).await.is_ok());
        w0.come_back();
        // In: its closes call nothing.
        w0.leave();
        assert!(tokio::time::timeout(soon, w0.called_back()).await.is_err());
    }

    #[tokio::test]
    async fn a_worker_past_the_mask_counts_but_never_goes_out() {
        let b = Arc::new(Balance::heap(MASK_BITS + 2).expect("region"));
        let last = b.worker(MASK_BITS + 1).expect("last");
        last.enter();
        assert!(!last.go_out());
        assert_eq!(b.counts()[MASK_BITS + 1].load(Ordering::Relaxed), 1);
    }
}
