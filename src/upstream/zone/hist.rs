//! A zone upstream's figures for the metrics beyond its peers': its
//! `queue` and its time histograms.
//!
//! The time histograms of a zone upstream (`metrics_buckets`): how long its
//! attempts took to connect, to get the response header and to get the whole
//! response, counted by every worker into buckets whose bounds the zone
//! records, for the metrics' `_bucket`, `_sum` and `_count`.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::Zone;
use crate::shm::records::HIST_MAX;

/// Which time a histogram counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    Connect = 0,
    Header = 1,
    Response = 2,
}

/// A histogram as read: bucket bounds (ms), the count in each bucket (the
/// last: above every bound), the sum of the times in microseconds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hist {
    pub bounds_ms: Vec<u32>,
    pub counts: Vec<u64>,
    pub sum_us: u64,
}

/// nginx's time syntax cannot write fractions of a millisecond: the
/// default bounds are Prometheus's default buckets from 5 ms to 10 s.
pub const DEFAULT_BOUNDS_MS: &[u32] = &[5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

impl Zone {
    /// `queue`: a request of upstream `u` starts waiting (`true`), stops
    /// (`false`).
    pub fn queue_wait(&self, u: usize, waiting: bool) {
        let Ok(rec) = self.rec(u) else { return };
        if waiting {
            rec.queue_size.fetch_add(1, Relaxed);
        } else {
            let _ = rec
                .queue_size
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        }
    }

    /// `queue`: a request of upstream `u` found its worker's queue full.
    pub fn queue_overflow(&self, u: usize) {
        if let Ok(rec) = self.rec(u) {
            rec.queue_overflows.fetch_add(1, Relaxed);
        }
    }

    /// `queue`: upstream `u`'s waiting requests and overflows.
    pub fn queue(&self, u: usize) -> (u32, u64) {
        self.rec(u)
            .map(|r| (r.queue_size.load(Relaxed), r.queue_overflows.load(Relaxed)))
            .unwrap_or_default()
    }

    /// Records the bucket bounds of every upstream of the zone (at most
    /// `HIST_MAX`; the configuration checks it).
    pub fn set_buckets(&self, bounds_ms: &[u32]) {
        let n = bounds_ms.len().min(HIST_MAX);
        for u in 0..self.upstreams.len() {
            let Ok(rec) = self.rec(u) else { continue };
            for (slot, b) in rec.bounds_ms.iter().zip(&bounds_ms[..n]) {
                slot.store(*b, Relaxed);
            }
            rec.bounds.store(n as u32, Relaxed);
        }
    }

    /// Counts one attempt's time in upstream `u`'s histogram.
    pub fn observe(&self, u: usize, t: Timing, d: Duration) {
        let Ok(rec) = self.rec(u) else { return };
        let n = (rec.bounds.load(Relaxed) as usize).min(HIST_MAX);
        let ms = d.as_secs_f64() * 1000.0;
        let bucket = (0..n)
            .find(|&k| ms <= f64::from(rec.bounds_ms[k].load(Relaxed)))
            .unwrap_or(n);
        let h = &rec.hist[t as usize];
        h[bucket].fetch_add(1, Relaxed);
        rec.hist_sum_us[t as usize].fetch_add(d.as_micros() as u64, Relaxed);
    }

    /// Upstream `u`'s histogram of `t`.
    pub fn histogram(&self, u: usize, t: Timing) -> Hist {
        let Ok(rec) = self.rec(u) else {
            return Hist::default();
        };
        let n = (rec.bounds.load(Relaxed) as usize).min(HIST_MAX);
        Hist {
            bounds_ms: (0..n).map(|k| rec.bounds_ms[k].load(Relaxed)).collect(),
            counts: (0..=n)
                .map(|k| rec.hist[t as usize][k].load(Relaxed))
                .collect(),
            sum_us: rec.hist_sum_us[t as usize].load(Relaxed),
        }
    }

    /// Takes over upstream `fu`'s histograms of zone `from` when their
    /// bounds are this upstream's (a reload or an upgrade that kept them).
    pub fn carry_histograms(&self, u: usize, from: &Zone, fu: usize) {
        let (Ok(to), Ok(was)) = (self.rec(u), from.rec(fu)) else {
            return;
        };
        let timings = [Timing::Connect, Timing::Header, Timing::Response];
        if self.histogram(u, Timing::Connect).bounds_ms
            != from.histogram(fu, Timing::Connect).bounds_ms
        {
            return;
        }
        for t in timings {
            let k = t as usize;
            for (a, b) in to.hist[k].iter().zip(was.hist[k].iter()) {
                a.store(b.load(Relaxed), Relaxed);
            }
            to.hist_sum_us[k].store(was.hist_sum_us[k].load(Relaxed), Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::peers::test_upstream;

    #[test]
    fn buckets_sums_and_carry() {
        let up = test_upstream(
            &[("127.0.0.1:1", 1, false)],
            crate::conf::model::Balancer::RoundRobin,
        );
        let z = Zone::heap("z", 64 * 1024, &[&up], 1).expect("zone");
        z.set_buckets(&[10, 100]);
        for ms in [1, 10, 11, 100, 5000] {
            z.observe(0, Timing::Header, Duration::from_millis(ms));
        }
        let h = z.histogram(0, Timing::Header);
        assert_eq!(h.bounds_ms, vec![10, 100]);
        assert_eq!(h.counts, vec![2, 2, 1]);
        assert_eq!(h.sum_us, 5_122_000);
        assert_eq!(z.histogram(0, Timing::Connect).counts, vec![0, 0, 0]);
        // Out of range: nothing, no panic.
        z.observe(7, Timing::Header, Duration::from_millis(1));
        assert_eq!(z.histogram(7, Timing::Header), Hist::default());
        // Carried with the same bounds, not with others.
        let same = Zone::heap("z", 64 * 1024, &[&up], 1).expect("zone");
        same.set_buckets(&[10, 100]);
        same.carry_histograms(0, &z, 0);
        assert_eq!(same.histogram(0, Timing::Header), h);
        let other = Zone::heap("z", 64 * 1024, &[&up], 1).expect("zone");
        other.set_buckets(&[10, 200]);
        other.carry_histograms(0, &z, 0);
        assert_eq!(other.histogram(0, Timing::Header).counts, vec![0, 0, 0]);
    }
}
