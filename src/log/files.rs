//! Files that processes append lines to (access logs). The master opens them
//! (as root, before forking) and the workers inherit the descriptors through
//! this process-wide table; USR1 re-opens each by path. One `write` per line on
//! an `O_APPEND` descriptor keeps lines from several processes whole.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// An open log file, re-openable in place.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: RwLock<File>,
}

impl LogFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line (the caller includes the newline).
    pub fn write_line(&self, line: &[u8]) {
        let f = self.file.read().unwrap_or_else(|e| e.into_inner());
        // A full disk must not take the worker down; the line is lost.
        let _ = (&*f).write_all(line);
    }

    fn reopen(&self) -> std::io::Result<()> {
        let f = super::open_append(&self.path)?;
        *self.file.write().unwrap_or_else(|e| e.into_inner()) = f;
        Ok(())
    }
}

fn table() -> &'static Mutex<HashMap<PathBuf, Arc<LogFile>>> {
    static T: OnceLock<Mutex<HashMap<PathBuf, Arc<LogFile>>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Opens every path (creating files as needed) and makes them the table. A file
/// that cannot be opened fails the whole set and changes nothing.
pub fn open_all(paths: &[PathBuf]) -> Result<(), (PathBuf, std::io::Error)> {
    let mut new = HashMap::with_capacity(paths.len());
    for p in paths {
        let f = super::open_append(p).map_err(|e| (p.clone(), e))?;
        new.insert(
            p.clone(),
            Arc::new(LogFile {
                path: p.clone(),
                file: RwLock::new(f),
            }),
        );
    }
    *table().lock().unwrap_or_else(|e| e.into_inner()) = new;
    Ok(())
}

/// The open file for a path, if the master opened it.
pub fn get(path: &Path) -> Option<Arc<LogFile>> {
    table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(path)
        .cloned()
}

/// Re-opens every file by path; failures are returned and keep the old file.
pub fn reopen_all() -> Vec<(PathBuf, std::io::Error)> {
    let files: Vec<Arc<LogFile>> = table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    files
        .iter()
        .filter_map(|f| f.reopen().err().map(|e| (f.path.clone(), e)))
        .collect()
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
