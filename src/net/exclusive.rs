//! A listening socket woken in one worker, not in all: nginx registers its
//! listeners with `EPOLLEXCLUSIVE` (Linux 4.5+, with `accept_mutex off`, its
//! default), so a new connection wakes one worker that waits in
//! `epoll_wait`, the first registered, and a busy worker is woken only when
//! none waits. Without it every worker wakes for every connection and they
//! race for it: connections land at random, so two workers on a small host
//! split a handful of connections and take turns on one CPU where one worker
//! would have served them all (a p99 in milliseconds), and on a large host
//! each connection wakes every worker for nothing.
//!
//! The runtime registers a listener without the flag and offers no way to
//! pass it (mio's interests are read, write and priority), so the
//! registration is made again by hand: the runtime's epoll set and the
//! token it gave the listener are read from `/proc/self/fdinfo` (the kernel
//! lists each epoll set's descriptors with their events and data there), and
//! the listener is deleted from that set and added back with the same token,
//! read interest and exclusive, level-triggered as nginx's (the caller then
//! accepts one connection per report, `accept::Sock`) or edge-triggered as
//! the runtime's. The
//! runtime never modifies a listener's registration afterwards; it deletes
//! it when the listener closes, which works whatever the flags. A connection
//! that arrives between the delete and the add is not lost: adding a ready
//! socket queues its event.
//!
//! Anything unexpected (no `/proc`, no entry, a kernel without the flag)
//! leaves the runtime's registration as it was: the listener works, as
//! without this.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};

/// `EPOLLEXCLUSIVE`, as the kernel prints it in `fdinfo`.
const EXCLUSIVE_BIT: u32 = 1 << 28;

/// One descriptor's registration in an epoll set, from its `fdinfo` line.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub events: u32,
    pub data: u64,
    pub ino: u64,
}

/// The registration of descriptor `fd` in an epoll set's `fdinfo` text
/// (`tfd: FD events: HEX data: HEX pos:N ino:HEX sdev:HEX`, one line per
/// descriptor). None when it is not there or its line does not read.
pub fn entry_of(fdinfo: &str, fd: RawFd) -> Option<Entry> {
    fdinfo.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "tfd:" || words.next()?.parse::<RawFd>().ok()? != fd {
            return None;
        }
        let mut events = None;
        let mut data = None;
        let mut ino = None;
        while let Some(w) = words.next() {
            match w {
                "events:" => events = u32::from_str_radix(words.next()?, 16).ok(),
                "data:" => data = u64::from_str_radix(words.next()?, 16).ok(),
                _ => {
                    if let Some(h) = w.strip_prefix("ino:") {
                        ino = u64::from_str_radix(h, 16).ok();
                    }
                }
            }
        }
        Some(Entry {
            events: events?,
            data: data?,
            ino: ino?,
        })
    })
}

/// Why a listener's registration stayed the runtime's.
#[derive(Debug)]
pub enum Unchanged {
    /// No epoll set of this process holds the listener (or `/proc` could
    /// not be read).
    NotFound,
    /// The kernel refused the exclusive registration; the runtime's was
    /// put back.
    Refused(nix::Error),
    /// The listener could not be deleted or put back: it may no longer
    /// wake this worker.
    Lost(nix::Error),
}

impl std::fmt::Display for Unchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unchanged::NotFound => {
                f.write_str("its epoll registration was not found, it wakes every worker")
            }
            Unchanged::Refused(e) => {
                write!(f, "EPOLLEXCLUSIVE refused ({e}), it wakes every worker")
            }
            Unchanged::Lost(e) => write!(
                f,
                "epoll_ctl() failed ({e}), it may no longer wake this worker"
            ),
        }
    }
}

/// Makes `listener`'s registration in this process's epoll sets exclusive,
/// level-triggered if `level` (see the module). Call it once the runtime
/// has registered the listener, from the runtime's thread.
pub fn make_exclusive(listener: BorrowedFd<'_>, level: bool) -> Result<(), Unchanged> {
    let fd = listener.as_raw_fd();
    let ino = nix::sys::stat::fstat(listener)
        .map_err(|_| Unchanged::NotFound)?
        .st_ino;
    let dir = std::fs::read_dir("/proc/self/fd").map_err(|_| Unchanged::NotFound)?;
    let mut done = false;
    for ent in dir.flatten() {
        let Some(epfd) = ent
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        let is_epoll =
            std::fs::read_link(ent.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:[eventpoll]");
        if !is_epoll {
            continue;
        }
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{epfd}")) else {
            continue;
        };
        let Some(e) = entry_of(&info, fd) else {
            continue;
        };
        // The runtime keeps two descriptors for its one set: the second
        // shows the registration already made exclusive.
        if e.ino != ino || e.events & EXCLUSIVE_BIT != 0 {
            done |= e.ino == ino;
            continue;
        }
        let set = Epoll(dup_epoll(epfd).map_err(|_| Unchanged::NotFound)?);
        reregister(&set, listener, e, level)?;
        done = true;
    }
    if done {
        Ok(())
    } else {
        Err(Unchanged::NotFound)
    }
}

/// A descriptor of its own for the epoll set `epfd` (so that nix's `Epoll`
/// can own one).
#[allow(unsafe_code)]
fn dup_epoll(epfd: RawFd) -> nix::Result<OwnedFd> {
    // SAFETY: `epfd` was just listed in /proc/self/fd as an epoll set, and
    // it is the runtime's, which this thread runs: nothing closes it during
    // this call (the worker's runtime is single-threaded and lives as long
    // as the worker). The borrow ends with the `dup`.
    let borrowed = unsafe { BorrowedFd::borrow_raw(epfd) };
    nix::unistd::dup(borrowed)
}

/// Deletes `listener` from `set` and adds it back exclusive with the same
/// token; on a refusal, adds it back as it was.
fn reregister(
    set: &Epoll,
    listener: BorrowedFd<'_>,
    was: Entry,
    level: bool,
) -> Result<(), Unchanged> {
    set.delete(listener.as_fd()).map_err(Unchanged::Lost)?;
    let mut flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE;
    if !level {
        flags |= EpollFlags::EPOLLET;
    }
    match set.add(listener.as_fd(), EpollEvent::new(flags, was.data)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let old = EpollFlags::from_bits_truncate(was.events as i32);
            set.add(listener.as_fd(), EpollEvent::new(old, was.data))
                .map_err(Unchanged::Lost)?;
            Err(Unchanged::Refused(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t1057\n\
tfd:        9 events:       19 data:     55d0c0a1b2c0  pos:0 ino:5e1f sdev:8\n\
tfd:       12 events: 90000019 data:                7  pos:0 ino:6000 sdev:8\n";

    #[test]
    fn entries_read_from_fdinfo() {
        assert_eq!(
            entry_of(INFO, 9),
            Some(Entry {
                events: 0x19,
                data: 0x55d0_c0a1_b2c0,
                ino: 0x5e1f
            })
        );
        let e = entry_of(INFO, 12).map(|e| e.events & EXCLUSIVE_BIT);
        assert_eq!(e, Some(EXCLUSIVE_BIT));
        assert_eq!(entry_of(INFO, 1), None);
        assert_eq!(entry_of(INFO, 2), None);
    }

    #[test]
    fn hostile_fdinfo_reads_as_nothing() {
        for text in [
            "",
            "tfd:",
            "tfd: 9",
            "tfd: 9 events: zz data: 1 pos:0 ino:1",
            "tfd: 9 events: 19 data: 1 pos:0",
            "tfd: 9 events: 19 data:",
            "tfd: 9 events: 1ffffffff data: 1 ino:1",
            "tfd: 9 events: 19 data: 10000000000000000 ino:1",
            "tfd: -9 events: 19 data: 1 ino:1",
            "\u{0}\u{fffd}tfd: 9",
        ] {
            assert_eq!(entry_of(text, 9), None, "{text:?}");
        }
    }

    /// A listener registered by a runtime in this test's own epoll set
    /// becomes exclusive with its token kept, and still wakes the set.
    #[test]
    fn a_registration_is_made_exclusive_with_its_token() {
        use nix::sys::epoll::{EpollCreateFlags, EpollTimeout};
        let set = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).expect("epoll");
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET;
        set.add(l.as_fd(), EpollEvent::new(flags, 4242))
            .expect("add");
        make_exclusive(l.as_fd(), true).expect("made exclusive");
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", set.0.as_raw_fd()))
            .expect("fdinfo");
        let e = entry_of(&info, l.as_raw_fd()).expect("still registered");
        assert_eq!(e.data, 4242);
        assert_ne!(e.events & EXCLUSIVE_BIT, 0);
        assert_eq!(e.events & (1 << 31), 0, "level-triggered: no EPOLLET");
        // Done already: a second call finds it so and changes nothing.
        make_exclusive(l.as_fd(), true).expect("again");
        let _c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let mut ev = [EpollEvent::empty(); 2];
        let n = set
            .wait(&mut ev, EpollTimeout::from(2000u16))
            .expect("wait");
        assert_eq!(n, 1);
        assert_eq!(ev[0].data(), 4242);
    }

    #[test]
    fn an_unregistered_listener_is_not_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        assert!(matches!(
            make_exclusive(l.as_fd(), false),
            Err(Unchanged::NotFound)
        ));
    }
}
