//! `proxy_buffering on` for a response larger than the buffers: a task reads
//! the rest of it from the upstream as fast as the upstream sends, into the
//! memory buffers and past them into a temporary file in `proxy_temp_path`
//! (up to `proxy_max_temp_file_size`), while the client takes it at its own
//! pace. So a slow client does not hold the upstream connection, and the
//! worker holds the buffers, not the response. Called by `proxy::respond`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::Notify;

use super::proxy_body::ProxyBody;
use super::response::BoxError;
use crate::log::Level;
use crate::upstream::body::Spool;

/// How much of the file one piece to the client carries.
const PIECE: usize = 64 * 1024;

/// What the relay needs from the location and the request.
pub(crate) struct TempConf {
    /// The memory buffers: `proxy_buffer_size` + `proxy_buffers`.
    pub room: u64,
    pub max_file: u64,
    pub dir: PathBuf,
    pub conn: u64,
    /// The request's log context, upstream included.
    pub ctx: String,
}

/// A part of the response, in the order it came.
enum Seg {
    Mem(Bytes),
    /// `len` bytes of the file from `pos`.
    File {
        pos: u64,
        len: u64,
    },
}

/// What the upstream side filled and the client side takes.
struct Store {
    queue: VecDeque<Seg>,
    /// Bytes in `Seg::Mem` parts: bounded by `room` (and one read).
    mem: u64,
    file: Option<Spool>,
    /// The upstream's body ended cleanly.
    done: bool,
    /// Its trailer fields, sent after the last data.
    trailers: Option<http::HeaderMap>,
    error: Option<BoxError>,
    /// The client side, waiting for more.
    reader: Option<Waker>,
}

impl Store {
    fn push(&mut self, seg: Seg) {
        if let Seg::Mem(b) = &seg {
            self.mem += b.len() as u64;
        }
        // Consecutive file parts are one.
        if let (Seg::File { len: add, .. }, Some(Seg::File { len, .. })) =
            (&seg, self.queue.back_mut())
        {
            *len += add;
        } else {
            self.queue.push_back(seg);
        }
        self.wake();
    }

    fn wake(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }
}

fn lock(s: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// The response body the client gets: what was read ahead, then what the
/// task keeps filling.
pub(crate) struct Relay {
    store: Arc<Mutex<Store>>,
    room: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
    conn: u64,
}

/// Starts the task that reads the rest of `body` (whose read-ahead is in
/// `body.ahead`) and returns the client's side.
pub(crate) fn relay(mut body: ProxyBody, conf: TempConf) -> Relay {
    let mut store = Store {
        queue: VecDeque::new(),
        mem: 0,
        file: None,
        done: false,
        trailers: None,
        error: None,
        reader: None,
    };
    for b in body.ahead.drain() {
        store.push(Seg::Mem(b));
    }
    let store = Arc::new(Mutex::new(store));
    let room = Arc::new(Notify::new());
    let conn = conf.conn;
    let task = tokio::spawn(fill(body, store.clone(), room.clone(), conf));
    Relay {
        store,
        room,
        task,
        conn,
    }
}

/// Whether the upstream may be read again: room in memory, or in the file.
fn has_room(s: &Store, c: &TempConf) -> bool {
    s.mem < c.room || (c.max_file > 0 && s.file.as_ref().map_or(0, Spool::len) < c.max_file)
}

/// The upstream side: reads until the body ends, waiting only when the
/// memory buffers are full and the file may not grow.
async fn fill(mut body: ProxyBody, store: Arc<Mutex<Store>>, room: Arc<Notify>, c: TempConf) {
    loop {
        while !has_room(&lock(&store), &c) {
            room.notified().await;
        }
        let d = match body.frame().await {
            None => {
                let mut s = lock(&store);
                s.done = true;
                s.wake();
                return;
            }
            Some(Err(e)) => {
                let mut s = lock(&store);
                s.error = Some(e);
                s.wake();
                return;
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) if !d.is_empty() => d,
                Ok(_) => continue,
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        lock(&store).trailers = Some(t);
                    }
                    continue;
                }
            },
        };
        let mut s = lock(&store);
        let file_len = s.file.as_ref().map_or(0, Spool::len);
        let to_file = c.max_file > 0 && s.mem + d.len() as u64 > c.room && file_len < c.max_file;
        if !to_file {
            s.push(Seg::Mem(d));
            continue;
        }
        if s.file.is_none() {
            match Spool::create(&c.dir) {
                Ok(f) => {
                    crate::log_conn!(
                        Level::Warn,
                        c.conn,
                        "an upstream response is buffered to a temporary file {} while reading upstream{}",
                        f.path.display(),
                        c.ctx
                    );
                    s.file = Some(f);
                }
                Err(e) => {
                    // nginx gives up on the request: the client gets what
                    // was read so far, then the connection closes.
                    crate::log_conn!(
                        Level::Crit,
                        c.conn,
                        "open() \"{}\" failed ({}) while reading upstream{}",
                        c.dir.display(),
                        crate::log::errno_text(&e),
                        c.ctx
                    );
                    s.error = Some(Box::new(e));
                    s.wake();
                    return;
                }
            }
        }
        let Some(f) = s.file.as_mut() else {
            return;
        };
        let pos = f.len();
        if let Err(e) = f.write(&d) {
            crate::log_conn!(
                Level::Crit,
                c.conn,
                "write() \"{}\" failed ({}) while reading upstream{}",
                f.path.display(),
                crate::log::errno_text(&e),
                c.ctx
            );
            s.error = Some(Box::new(e));
            s.wake();
            return;
        }
        s.push(Seg::File {
            pos,
            len: d.len() as u64,
        });
    }
}

impl HttpBody for Relay {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &*self;
        let mut s = lock(&this.store);
        let out = match s.queue.front_mut() {
            Some(Seg::Mem(_)) => match s.queue.pop_front() {
                Some(Seg::Mem(b)) => {
                    s.mem -= b.len() as u64;
                    Ok(b)
                }
                _ => return Poll::Pending,
            },
            Some(Seg::File { pos, len }) => {
                let (at, left) = (*pos, *len);
                let Some(f) = s.file.as_ref() else {
                    return Poll::Ready(Some(Err("temporary file missing".into())));
                };
                match f.read_at(at, PIECE.min(usize::try_from(left).unwrap_or(PIECE))) {
                    Ok(b) => {
                        let n = b.len() as u64;
                        if n >= left {
                            s.queue.pop_front();
                        } else if let Some(Seg::File { pos, len }) = s.queue.front_mut() {
                            *pos += n;
                            *len -= n;
                        }
                        Ok(b)
                    }
                    Err(e) => {
                        crate::log_conn!(
                            Level::Crit,
                            this.conn,
                            "pread() \"{}\" failed ({})",
                            f.path.display(),
                            crate::log::errno_text(&e)
                        );
                        Err(e)
                    }
                }
            }
            None => {
                if let Some(e) = s.error.take() {
                    return Poll::Ready(Some(Err(e)));
                }
                if s.done {
                    return Poll::Ready(s.trailers.take().map(|t| Ok(Frame::trailers(t))));
                }
                s.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
        };
        drop(s);
        match out {
            Ok(b) => {
                // Memory freed: the upstream side may read again.
                this.room.notify_one();
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Err(e) => Poll::Ready(Some(Err(Box::new(e)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        let s = lock(&self.store);
        s.queue.is_empty() && s.done && s.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The client went away: the upstream side stops, and its body
        // releases the peer (a connection read halfway is not kept).
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(room: u64, max_file: u64) -> TempConf {
        TempConf {
            room,
            max_file,
            dir: std::env::temp_dir(),
            conn: 0,
            ctx: String::new(),
        }
    }

    fn store() -> Store {
        Store {
            queue: VecDeque::new(),
            mem: 0,
            file: None,
            done: false,
            trailers: None,
            error: None,
            reader: None,
        }
    }

    #[test]
    fn room_in_memory_or_in_the_file() {
        let mut s = store();
        assert!(has_room(&s, &conf(10, 0)));
        s.push(Seg::Mem(Bytes::from_static(b"0123456789")));
        assert!(!has_room(&s, &conf(10, 0)), "full memory, no file");
        assert!(has_room(&s, &conf(10, 100)), "full memory, a file allowed");
    }

    #[test]
    fn file_parts_in_a_row_are_one() {
        let mut s = store();
        s.push(Seg::File { pos: 0, len: 5 });
        s.push(Seg::File { pos: 5, len: 7 });
        s.push(Seg::Mem(Bytes::from_static(b"x")));
        assert_eq!(s.queue.len(), 2);
        assert!(matches!(
            s.queue.front(),
            Some(Seg::File { pos: 0, len: 12 })
        ));
        assert_eq!(s.mem, 1);
    }
}
