//! Opening a static file as nginx's open-file wrapper does: with
//! `disable_symlinks off` one plain `open()`; otherwise one path component at
//! a time, each `openat()` relative to the directory opened before it, with
//! `O_NOFOLLOW` (`on`) or an owner check (`if_not_owner`), so that no link
//! can be swapped in between a check and the open. The caller reads and
//! `fstat`s the descriptor it gets: nothing is looked up by name twice.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, open, openat};
use nix::sys::stat::{Mode, fstat, fstatat};

use crate::conf::loc::Symlinks;

/// A failed open: the error and the call nginx names in its log line
/// (`open()` or `openat()`).
#[derive(Debug)]
pub struct OpenError {
    pub err: io::Error,
    pub call: &'static str,
}

fn fail(call: &'static str) -> impl FnOnce(Errno) -> OpenError {
    move |e| OpenError {
        err: io::Error::from_raw_os_error(e as i32),
        call,
    }
}

/// What `disable_symlinks ... from=PART` means for one path, as nginx works
/// it out: the mode in force and the length of the leading part that is not
/// checked (0: check from the root). A `from` naming the whole path turns
/// the check off; one that is not a prefix ending at a `/` is ignored.
pub fn checked_part(mode: Symlinks, path: &[u8], from: &[u8]) -> (Symlinks, usize) {
    if from.is_empty() || from.len() > path.len() || !path.starts_with(from) {
        return (mode, 0);
    }
    if from.len() == path.len() {
        return (Symlinks::Off, 0);
    }
    if path[from.len()] == b'/' {
        return (mode, from.len());
    }
    if path[from.len() - 1] == b'/' {
        return (mode, from.len() - 1);
    }
    (mode, 0)
}

/// Opens `path` to read it (non-blocking, so that a FIFO cannot hang the
/// worker). With `mode` other than `Off`, every component after the first
/// `from` bytes is checked for links.
pub fn open_file(path: &Path, mode: Symlinks, from: usize) -> Result<File, OpenError> {
    let read = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    if mode == Symlinks::Off {
        return open(path, read, Mode::empty())
            .map(File::from)
            .map_err(fail("open()"));
    }
    // A directory opened only to look names up in it (nginx's
    // NGX_FILE_SEARCH on Linux).
    let search = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let bytes = path.as_os_str().as_bytes();
    let mut at: Option<OwnedFd> = None;
    let mut p = 0;
    if from > 0 && from < bytes.len() {
        let prefix = OsStr::from_bytes(&bytes[..from]);
        at = Some(open(prefix, search, Mode::empty()).map_err(fail("open()"))?);
        p = from + 1;
    } else if bytes.first() == Some(&b'/') {
        at = Some(open("/", search, Mode::empty()).map_err(fail("openat()"))?);
        p = 1;
    }
    while let Some(slash) = bytes[p..].iter().position(|&b| b == b'/') {
        let name = OsStr::from_bytes(&bytes[p..p + slash]);
        p += slash + 1;
        if name.is_empty() {
            continue;
        }
        let fd = match &at {
            Some(dir) => step(dir.as_fd(), name, search, mode),
            None => step(AT_FDCWD, name, search, mode),
        };
        at = Some(fd.map_err(fail("openat()"))?);
    }
    let last = OsStr::from_bytes(&bytes[p..]);
    let fd = match (&at, last.is_empty()) {
        // A trailing slash: the directory itself, reopened to read.
        (Some(dir), true) => openat(dir.as_fd(), ".", read, Mode::empty()),
        (None, true) => openat(AT_FDCWD, ".", read, Mode::empty()),
        (Some(dir), false) => step(dir.as_fd(), last, read, mode),
        (None, false) => step(AT_FDCWD, last, read, mode),
    };
    fd.map(File::from).map_err(fail("openat()"))
}

/// One component: not following a link (`on`), or following it only when
/// the link and what it points to have one owner (`if_not_owner`; a
/// mismatch is ELOOP, as nginx makes it).
fn step<D: AsFd>(dir: D, name: &OsStr, flags: OFlag, mode: Symlinks) -> nix::Result<OwnedFd> {
    if mode != Symlinks::IfNotOwner {
        return openat(dir, name, flags | OFlag::O_NOFOLLOW, Mode::empty());
    }
    let dir = dir.as_fd();
    let fd = openat(dir, name, flags, Mode::empty())?;
    // The name may have changed between openat() and fstatat(): compare the
    // owners even when it is not a link now, as nginx does.
    let link = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    let target = fstat(&fd)?;
    if link.st_uid != target.st_uid {
        return Err(Errno::ELOOP);
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_part_as_nginx() {
        use Symlinks::*;
        let c = |p: &str, f: &str| checked_part(On, p.as_bytes(), f.as_bytes());
        assert_eq!(c("/www/a/b", "/www"), (On, 4));
        assert_eq!(c("/www/a/b", "/www/"), (On, 4));
        assert_eq!(c("/www/a/b", "/ww"), (On, 0));
        assert_eq!(c("/www/a/b", "/other"), (On, 0));
        assert_eq!(c("/www/a/b", ""), (On, 0));
        assert_eq!(c("/www/a/b", "/www/a/b"), (Off, 0));
        assert_eq!(c("/www", "/www/a"), (On, 0));
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-open-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("dir")).unwrap();
        std::fs::write(d.join("dir/file"), b"data").unwrap();
        std::os::unix::fs::symlink("file", d.join("dir/link")).unwrap();
        std::os::unix::fs::symlink("dir", d.join("dirlink")).unwrap();
        d
    }

    fn errno(r: Result<File, OpenError>) -> (i32, &'static str) {
        let e = r.unwrap_err();
        (e.err.raw_os_error().unwrap(), e.call)
    }

    #[test]
    fn links_refused_where_asked() {
        use Symlinks::*;
        let d = tmp("on");
        let read = |p: &str, m, from| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut open_file(&d.join(p), m, from).unwrap(), &mut s)
                .unwrap();
            s
        };
        assert_eq!(read("dir/link", Off, 0), "data");
        assert_eq!(read("dirlink/file", Off, 0), "data");
        assert_eq!(read("dir/file", On, 0), "data");
        assert_eq!(read("dir//./file", On, 0), "data");
        // A link as the last component: ELOOP (403); as a directory on the
        // way: ENOTDIR (404), as Linux answers nginx's openat() too.
        assert_eq!(
            errno(open_file(&d.join("dir/link"), On, 0)),
            (40, "openat()")
        );
        assert_eq!(
            errno(open_file(&d.join("dirlink/file"), On, 0)),
            (20, "openat()")
        );
        assert_eq!(
            errno(open_file(&d.join("dir/none"), On, 0)),
            (2, "openat()")
        );
        assert_eq!(errno(open_file(&d.join("none"), Off, 0)), (2, "open()"));
        // Links before `from` are followed.
        let full = d.join("dirlink/file");
        let from = d.join("dirlink").as_os_str().len();
        assert_eq!(read(full.to_str().unwrap(), On, from), "data");
        // One owner for link and file: followed.
        assert_eq!(read("dir/link", IfNotOwner, 0), "data");
        assert_eq!(read("dirlink/file", IfNotOwner, 0), "data");
        // A directory, with its slash, opens as itself.
        assert!(
            open_file(&d.join("dir/"), On, 0)
                .unwrap()
                .metadata()
                .unwrap()
                .is_dir()
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
