//! A request body on its way to an upstream: bytes in memory, or a spooled
//! temporary file for a body larger than `client_body_buffer_size`, as nginx
//! keeps it. Every attempt sends the same body again from its start, so a
//! retry needs no copy. The HTTP proxy fills it; the pool's connections send
//! it. No parsing here.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// How much of a spooled body one frame carries.
const CHUNK: usize = 64 * 1024;

/// A request body, cheap to clone for each attempt.
#[derive(Clone, Debug)]
pub enum Payload {
    Mem(Bytes),
    File(Arc<Spool>),
}

impl Default for Payload {
    fn default() -> Payload {
        Payload::Mem(Bytes::new())
    }
}

impl Payload {
    pub fn len(&self) -> u64 {
        match self {
            Payload::Mem(b) => b.len() as u64,
            Payload::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body for one attempt, from its first byte.
    pub fn body(&self) -> UpBody {
        match self {
            Payload::Mem(b) => UpBody::Mem(Some(b.clone()).filter(|b| !b.is_empty())),
            Payload::File(f) => UpBody::File {
                spool: f.clone(),
                pos: 0,
            },
        }
    }
}

/// A temporary file holding a request body. Its name is removed as soon as
/// it is created, so nothing is left behind when the request ends or the
/// worker dies; the open descriptor keeps the data.
#[derive(Debug)]
pub struct Spool {
    file: File,
    len: u64,
    /// Where it was made, for the log line.
    pub path: PathBuf,
}

/// Temp file numbers, as nginx's ten-digit names; per process, starting from
/// the pid so two workers do not race for the same names.
static NEXT: AtomicU64 = AtomicU64::new(0);

impl Spool {
    /// Creates an empty spool file in `dir` (mode 0600).
    pub fn create(dir: &Path) -> std::io::Result<Spool> {
        let _ = NEXT.compare_exchange(
            0,
            u64::from(std::process::id()) * 1_000,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let mut last = None;
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed) % 10_000_000_000;
            let path = dir.join(format!("{n:010}"));
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(file) => {
                    let _ = std::fs::remove_file(&path);
                    return Ok(Spool { file, len: 0, path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free temp file name")))
    }

    /// Appends to the file (a blocking write of a local file, as nginx's).
    pub fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.file.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }
}

/// One attempt's request body as hyper sends it.
pub enum UpBody {
    Mem(Option<Bytes>),
    File { spool: Arc<Spool>, pos: u64 },
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            UpBody::Mem(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            UpBody::File { spool, pos } => {
                let left = spool.len.saturating_sub(*pos);
                if left == 0 {
                    return Poll::Ready(None);
                }
                let mut buf = vec![0u8; left.min(CHUNK as u64) as usize];
                // pread: each attempt reads at its own offset.
                match spool.file.read_at(&mut buf, *pos) {
                    Ok(0) => Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "temporary file shorter than the body",
                    )))),
                    Ok(n) => {
                        buf.truncate(n);
                        *pos += n as u64;
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
                    }
                    Err(e) => Poll::Ready(Some(Err(e))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpBody::Mem(b) => b.is_none(),
            UpBody::File { spool, pos } => *pos >= spool.len,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpBody::Mem(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            UpBody::File { spool, pos } => SizeHint::with_exact(spool.len.saturating_sub(*pos)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_spooled_body_reads_back_whole_for_every_attempt() {
        let dir = std::env::temp_dir().join(format!("sluice-spool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Spool::create(&dir).unwrap();
        // The name is gone at once; the data stays.
        assert!(!s.path.exists());
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for part in data.chunks(7_000) {
            s.write(part).unwrap();
        }
        let p = Payload::File(Arc::new(s));
        assert_eq!(p.len(), 200_000);
        for _ in 0..2 {
            let got = p.body().collect().await.unwrap().to_bytes();
            assert_eq!(got.as_ref(), data.as_slice());
        }
        let _ = std::fs::remove_dir(&dir);
    }

    #[tokio::test]
    async fn a_memory_body_and_an_empty_one() {
        let p = Payload::Mem(Bytes::from_static(b"abc"));
        assert_eq!(p.body().size_hint().exact(), Some(3));
        assert_eq!(p.body().collect().await.unwrap().to_bytes(), "abc");
        let e = Payload::default();
        assert!(e.body().is_end_stream());
        assert!(e.is_empty());
    }
}
