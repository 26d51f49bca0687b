//! Files that processes append lines to (access logs). The master opens them
//! (as root, before forking) and the workers inherit the descriptors through
//! this process-wide table; USR1 re-opens each by path. One `write` per line on
//! an `O_APPEND` descriptor keeps lines from several processes whole.
//!
//! A file with `buffer=` (or `gzip`) keeps its lines in this process's buffer
//! and writes them with one `write` when the next line would not fit, when the
//! oldest buffered line is `flush=` old (a timer on the worker's runtime), on
//! USR1 before re-opening, and when the worker ends (`flush_all`). With `gzip`
//! each write is one gzip member, so the file reads as one stream.
//!
//! A `syslog:...` access log (never buffered) is made on first use in each
//! process: each line goes as one datagram (`log::syslog`).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// `access_log ... buffer=SIZE [gzip[=LEVEL]] [flush=TIME]`: how one file's
/// lines are buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffering {
    /// Bytes kept before a write (of the lines, before compression).
    pub size: usize,
    /// The longest a line waits in the buffer.
    pub flush: Option<Duration>,
    /// The gzip level (1-9) each write is compressed at.
    pub gzip: Option<u32>,
}

/// The lines waiting to be written.
#[derive(Debug, Default)]
struct Pending {
    data: Vec<u8>,
    /// When the oldest waiting line came.
    since: Option<Instant>,
    /// A flush timer is running for this file.
    timer: bool,
}

/// An open log file, re-openable in place.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    /// None for a syslog target.
    file: RwLock<Option<File>>,
    syslog: Option<super::syslog::Peer>,
    buffering: Option<Buffering>,
    pending: Mutex<Pending>,
}

impl LogFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line (the caller includes the newline): at once, or
    /// through the buffer.
    pub fn write_line(self: &Arc<Self>, line: &[u8]) {
        if let Some(p) = &self.syslog {
            p.send(None, line);
            return;
        }
        let Some(b) = self.buffering else {
            self.write_out(line, None);
            return;
        };
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if line.len() > b.size.saturating_sub(p.data.len()) {
            self.flush_locked(&mut p);
        }
        if line.len() > b.size {
            // A line larger than the buffer goes out on its own.
            self.write_out(line, b.gzip);
            return;
        }
        if p.data.is_empty() {
            p.since = Some(Instant::now());
        }
        p.data.extend_from_slice(line);
        if let Some(t) = b.flush {
            if !p.timer {
                p.timer = self.arm(t);
            }
        }
    }

    /// Starts the flush timer on the current runtime (none outside one: the
    /// lines then wait for the next write, USR1 or the end).
    fn arm(self: &Arc<Self>, first: Duration) -> bool {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let me = Arc::clone(self);
        rt.spawn(async move {
            let mut wait = first;
            loop {
                tokio::time::sleep(wait).await;
                let mut p = me.pending.lock().unwrap_or_else(|e| e.into_inner());
                let flush = me.buffering.and_then(|b| b.flush).unwrap_or(first);
                match p.since {
                    // Written out since: stop; the next line starts a timer.
                    None => {
                        p.timer = false;
                        return;
                    }
                    Some(since) => {
                        let age = since.elapsed();
                        if age >= flush {
                            me.flush_locked(&mut p);
                            p.timer = false;
                            return;
                        }
                        wait = flush - age;
                    }
                }
            }
        });
        true
    }

    /// Writes the buffered lines, if any.
    pub fn flush(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        self.flush_locked(&mut p);
    }

    fn flush_locked(&self, p: &mut Pending) {
        if p.data.is_empty() {
            return;
        }
        self.write_out(&p.data, self.buffering.and_then(|b| b.gzip));
        p.data.clear();
        p.since = None;
    }

    /// One `write` of the bytes, compressed into one gzip member when asked.
    fn write_out(&self, data: &[u8], gzip: Option<u32>) {
        let f = self.file.read().unwrap_or_else(|e| e.into_inner());
        let Some(f) = f.as_ref() else {
            return;
        };
        // A full disk must not take the worker down; the lines are lost.
        let _ = match gzip {
            None => (&*f).write_all(data),
            Some(level) => match gzip_member(data, level) {
                Ok(z) => (&*f).write_all(&z),
                Err(e) => Err(e),
            },
        };
    }

    fn reopen(&self) -> std::io::Result<()> {
        if self.syslog.is_some() {
            return Ok(());
        }
        // What was buffered belongs to the old file.
        self.flush();
        let f = super::open_append(&self.path)?;
        *self.file.write().unwrap_or_else(|e| e.into_inner()) = Some(f);
        Ok(())
    }
}

/// The bytes as one gzip member.
fn gzip_member(data: &[u8], level: u32) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 4 + 64),
        flate2::Compression::new(level),
    );
    z.write_all(data)?;
    z.finish()
}

fn table() -> &'static Mutex<HashMap<PathBuf, Arc<LogFile>>> {
    static T: OnceLock<Mutex<HashMap<PathBuf, Arc<LogFile>>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Opens every path (creating files as needed) and makes them the table, each
/// with its buffering from `buffers` (none for a path not there). A file that
/// cannot be opened fails the whole set and changes nothing.
pub fn open_all(
    paths: &[PathBuf],
    buffers: &[(PathBuf, Buffering)],
) -> Result<(), (PathBuf, std::io::Error)> {
    let mut new = HashMap::with_capacity(paths.len());
    for p in paths {
        let f = super::open_append(p).map_err(|e| (p.clone(), e))?;
        let buffering = buffers.iter().find(|(bp, _)| bp == p).map(|(_, b)| *b);
        new.insert(
            p.clone(),
            Arc::new(LogFile {
                path: p.clone(),
                file: RwLock::new(Some(f)),
                syslog: None,
                buffering,
                pending: Mutex::new(Pending::default()),
            }),
        );
    }
    *table().lock().unwrap_or_else(|e| e.into_inner()) = new;
    Ok(())
}

/// The open file for a path, if the master opened it; for a `syslog:`
/// target, its sender (made on first use).
pub fn get(path: &Path) -> Option<Arc<LogFile>> {
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = t.get(path) {
        return Some(f.clone());
    }
    let spec = path
        .to_str()
        .filter(|p| super::syslog::is_syslog(p))
        .and_then(|p| super::syslog::Spec::parse(p).ok())?;
    let f = Arc::new(LogFile {
        path: path.to_path_buf(),
        file: RwLock::new(None),
        syslog: Some(super::syslog::Peer::new(spec)),
        buffering: None,
        pending: Mutex::new(Pending::default()),
    });
    t.insert(path.to_path_buf(), f.clone());
    Some(f)
}

fn all() -> Vec<Arc<LogFile>> {
    table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect()
}

/// Re-opens every file by path, after writing what it buffered; failures are
/// returned and keep the old file.
pub fn reopen_all() -> Vec<(PathBuf, std::io::Error)> {
    all()
        .iter()
        .filter_map(|f| f.reopen().err().map(|e| (f.path.clone(), e)))
        .collect()
}

/// Writes every file's buffered lines (a worker that ends).
pub fn flush_all() {
    for f in all() {
        f.flush();
    }
}

/// Every path in the table (the master chowns them for the workers' user).
pub fn paths() -> Vec<PathBuf> {
    table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-alog-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn file(dir: &Path, b: Buffering) -> Arc<LogFile> {
        let path = dir.join("a.log");
        Arc::new(LogFile {
            file: RwLock::new(Some(super::super::open_append(&path).unwrap())),
            syslog: None,
            path,
            buffering: Some(b),
            pending: Mutex::new(Pending::default()),
        })
    }

    #[test]
    fn buffer_writes_when_the_next_line_does_not_fit() {
        let dir = dir("fit");
        let b = Buffering {
            size: 10,
            flush: None,
            gzip: None,
        };
        let f = file(&dir, b);
        let read = || std::fs::read_to_string(dir.join("a.log")).unwrap();
        f.write_line(b"1234\n");
        f.write_line(b"5678\n");
        assert_eq!(read(), "");
        f.write_line(b"9\n");
        assert_eq!(read(), "1234\n5678\n");
        // Larger than the buffer: the buffer, then the line, at once.
        f.write_line(b"abcdefghijkl\n");
        assert_eq!(read(), "1234\n5678\n9\nabcdefghijkl\n");
        f.write_line(b"x\n");
        f.flush();
        assert_eq!(read(), "1234\n5678\n9\nabcdefghijkl\nx\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn gzip_writes_one_member_per_flush() {
        let dir = dir("gzip");
        let b = Buffering {
            size: 64 * 1024,
            flush: None,
            gzip: Some(9),
        };
        let f = file(&dir, b);
        f.write_line(b"one\n");
        f.flush();
        f.write_line(b"two\n");
        f.write_line(b"three\n");
        f.flush();
        let z = std::fs::read(dir.join("a.log")).unwrap();
        let mut out = String::new();
        flate2::read::MultiGzDecoder::new(&z[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "one\ntwo\nthree\n");
        // Two members: the first alone decodes to the first flush.
        let mut first = String::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_string(&mut first)
            .unwrap();
        assert_eq!(first, "one\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
