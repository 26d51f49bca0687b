//! A request body on its way to an upstream: bytes in memory, or a spooled
//! temporary file for a body larger than `client_body_buffer_size`, as nginx
//! keeps it. Every attempt sends the same body again from its start, so a
//! retry needs no copy. The HTTP proxy fills it; the upstream connection
//! (`h1conn`) sends it. No parsing here.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

/// How much of a spooled body one piece carries.
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
    /// `client_body_in_file_only clean`: the file stays on disk while the
    /// request lasts and is removed when the last holder lets it go.
    remove: bool,
}

/// `client_body_in_file_only`: whether a kept body file stays after the
/// request (`on`) or is removed (`clean`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Unlinked at once: nobody sees it (a body past the buffer).
    No,
    /// Left on disk after the request.
    After,
    /// On disk while the request lasts.
    During,
}

impl Drop for Spool {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Temp file numbers, as nginx's ten-digit names; per process, starting from
/// the pid so two workers do not race for the same names.
static NEXT: AtomicU64 = AtomicU64::new(0);

impl Spool {
    /// Creates an empty spool file in `dir` (mode 0600), unlinked at once.
    pub fn create(dir: &Path) -> std::io::Result<Spool> {
        Spool::create_kept(dir, Keep::No)
    }

    /// Creates an empty spool file in `dir` (mode 0600), kept on disk as
    /// `keep` says.
    pub fn create_kept(dir: &Path, keep: Keep) -> std::io::Result<Spool> {
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
                    if keep == Keep::No {
                        let _ = std::fs::remove_file(&path);
                    }
                    return Ok(Spool {
                        file,
                        len: 0,
                        path,
                        remove: keep == Keep::During,
                    });
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

    /// The bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Up to `max` bytes from `pos` (a blocking pread of a local file, as
    /// nginx's); an error past the end of what was written.
    pub fn read_at(&self, pos: u64, max: usize) -> std::io::Result<Bytes> {
        let left = self.len.saturating_sub(pos);
        let mut buf = vec![0u8; left.min(max as u64) as usize];
        match self.file.read_at(&mut buf, pos)? {
            0 if !buf.is_empty() => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "temporary file shorter than written",
            )),
            n => {
                buf.truncate(n);
                Ok(Bytes::from(buf))
            }
        }
    }
}

/// One attempt's request body, read from its start in pieces.
pub enum UpBody {
    Mem(Option<Bytes>),
    File { spool: Arc<Spool>, pos: u64 },
}

impl UpBody {
    /// The next piece, or None at the end. A spooled body is read with
    /// pread (a blocking read of a local file, as nginx's), each attempt at
    /// its own offset.
    pub fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        match self {
            UpBody::Mem(b) => Ok(b.take()),
            UpBody::File { spool, pos } => {
                let left = spool.len.saturating_sub(*pos);
                if left == 0 {
                    return Ok(None);
                }
                let mut buf = vec![0u8; left.min(CHUNK as u64) as usize];
                match spool.file.read_at(&mut buf, *pos)? {
                    0 => Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "temporary file shorter than the body",
                    )),
                    n => {
                        buf.truncate(n);
                        *pos += n as u64;
                        Ok(Some(Bytes::from(buf)))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(mut b: UpBody) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(c) = b.next_chunk().unwrap() {
            assert!(!c.is_empty());
            out.extend_from_slice(&c);
        }
        out
    }

    #[test]
    fn a_spooled_body_reads_back_whole_for_every_attempt() {
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
            assert_eq!(whole(p.body()), data);
        }
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn a_memory_body_and_an_empty_one() {
        let p = Payload::Mem(Bytes::from_static(b"abc"));
        assert_eq!(whole(p.body()), b"abc");
        let e = Payload::default();
        assert!(whole(e.body()).is_empty());
        assert!(e.is_empty());
    }
}
