//! Responses wait for the end of the event loop's turn, as HAProxy's
//! writes do.
//!
//! One `epoll_wait` wakes many connections at once. Were each to read and
//! then write at once, the writes would go out one by one, a connection's
//! work apart, and the client would be woken by the first and then find one
//! response at a time: a sleep and a wake-up each. A response that first
//! lets every other woken connection do its reading (`later`) goes out with
//! the others in a burst, and the client finds them all at its next wake-up.
//!
//! Requests to an upstream do not wait: held back, the backend sat idle
//! while the worker read, and with two CPUs for the client, the worker and
//! the backend the machine was idle more (7% against 2% at 64 connections)
//! and made fewer requests (`scripts/ab`, paired rounds, two runs each:
//! sending at once made x1.005 and x1.033 at 8 connections, x1.050 and
//! x1.061 at 64, one worker). The wait had paid (x1.11 at 64) while the
//! keep-alive cache closed its surplus at once, mostly by needing fewer
//! upstream connections at a time, so that fewer were opened and closed;
//! with the cache's grace (`upstream::pool`) none are.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Ready once the tasks woken before this one have run: the task wakes
/// itself and goes to the back of the worker's run queue. tokio's
/// current-thread scheduler runs it in the same turn, after the others,
/// without waiting on the driver (it polls the driver without waiting
/// every 61 task polls, its `event_interval`, which may queue connections
/// woken since ahead of it). Costs one more poll of the task (some 500
/// instructions of a proxied request's, `scripts/cost`).
pub fn later() -> Later {
    Later { waited: false }
}

pub struct Later {
    waited: bool,
}

impl Future for Later {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.waited {
            return Poll::Ready(());
        }
        self.waited = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::later;

    /// Three connections woken in one turn of a worker's runtime: each
    /// "reads", then waits for the turn's end to "write". Every read comes
    /// before every write, and the writes keep the reads' order.
    #[test]
    fn writes_go_after_every_read_of_the_turn() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let note = |seen: &Mutex<Vec<String>>, what: String| {
            if let Ok(mut s) = seen.lock() {
                s.push(what);
            }
        };
        rt.block_on(async {
            let tasks: Vec<_> = (0..3)
                .map(|i| {
                    let seen = seen.clone();
                    tokio::spawn(async move {
                        note(&seen, format!("read {i}"));
                        later().await;
                        note(&seen, format!("write {i}"));
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
        });
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(
            seen,
            [
                "read 0", "read 1", "read 2", "write 0", "write 1", "write 2"
            ]
        );
    }

    /// Alone in its turn, a task still goes on: it woke itself, so it does
    /// not wait for an event (this runtime has no driver that could send
    /// one). Were the wake-up missing it would wait for ever: the test
    /// gives it 10 seconds.
    #[test]
    fn alone_it_goes_on_without_an_event() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            rt.block_on(async {
                tokio::spawn(async {
                    later().await;
                    later().await;
                })
                .await
                .expect("task");
            });
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "a task alone never went on after later()"
        );
    }
}
