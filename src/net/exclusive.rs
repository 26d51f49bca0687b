//! A listening socket woken in one worker, not in all: nginx registers its
//! listeners with `EPOLLEXCLUSIVE` (Linux 4.5+, with `accept_mutex off`, its
//! default), so a new connection wakes one worker that waits in
//! `epoll_wait`, the first registered, and a busy worker is woken only when
//! none waits. Without it every worker wakes for every connection and all
//! but one find nothing (eight workers on two cores: three times the
//! wake-ups, and a fifth fewer new connections per second).
//!
//! The runtime registers a listener without the flag and offers no way to
//! pass it (mio's interests are read, write and priority), so the
//! registration is made again by hand: the runtime's epoll set and the
//! token it gave the listener are read from `/proc/self/fdinfo` (the kernel
//! lists each epoll set's descriptors with their events and data there), and
//! the listener is deleted from that set and added back with the same token,
//! read interest and exclusive, level-triggered as nginx's (the caller then
//! accepts one connection per report, `accept::Sock`). With the set's descriptor and the token kept, the
//! listener can leave the set and come back (`pause`, `resume`), the
//! runtime none the wiser. The runtime never modifies a listener's
//! registration; it deletes it when the listener closes (and ignores the
//! error if it is not there). A connection that arrives between a delete
//! and an add is not lost: adding a ready socket queues its event.
//!
//! Anything unexpected (no `/proc`, no entry, a kernel without the flag)
//! leaves the runtime's registration as it was: the listener works, as
//! without this.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};

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
    /// The listener could not be deleted or put back: it may no longer be
    /// in the set (the caller registers it afresh).
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
            Unchanged::Lost(e) => write!(f, "epoll_ctl() failed ({e})"),
        }
    }
}

/// A listener's exclusive registration in the runtime's epoll set: it can
/// leave the set and come back (`pause`, `resume`) with two `epoll_ctl`
/// calls, the runtime none the wiser (it sees no events meanwhile).
pub struct Exclusive {
    set: Arc<Epoll>,
    data: u64,
}

/// The registration made: read interest, exclusive, level-triggered.
const FLAGS: EpollFlags = EpollFlags::EPOLLIN.union(EpollFlags::EPOLLEXCLUSIVE);

thread_local! {
    /// The runtime's epoll set, once found (a descriptor of its own): the
    /// next listener is looked up in its `fdinfo` alone.
    static RUNTIME_SET: RefCell<Option<Arc<Epoll>>> = const { RefCell::new(None) };
}

impl Exclusive {
    /// Makes `listener`'s registration in the runtime's epoll set
    /// exclusive and level-triggered (see the module). Call it once the
    /// runtime has registered the listener, from the runtime's thread.
    pub fn make(listener: BorrowedFd<'_>) -> Result<Exclusive, Unchanged> {
        let fd = listener.as_raw_fd();
        let ino = nix::sys::stat::fstat(listener)
            .map_err(|_| Unchanged::NotFound)?
            .st_ino;
        let cached = RUNTIME_SET.with(|c| c.borrow().clone());
        let found = cached
            .and_then(|set| {
                let info = read_fdinfo(set.0.as_raw_fd())?;
                entry_of(&info, fd)
                    .filter(|e| e.ino == ino)
                    .map(|e| (set, e))
            })
            .or_else(|| find(fd, ino));
        let Some((set, e)) = found else {
            return Err(Unchanged::NotFound);
        };
        reregister(&set, listener, &e)?;
        RUNTIME_SET.with(|c| *c.borrow_mut() = Some(set.clone()));
        Ok(Exclusive { set, data: e.data })
    }

    /// Out of the set: no event for it until `resume`.
    pub fn pause(&self, listener: BorrowedFd<'_>) -> nix::Result<()> {
        self.set.delete(listener)
    }

    /// Back in the set, as `make` registered it.
    pub fn resume(&self, listener: BorrowedFd<'_>) -> nix::Result<()> {
        self.set.add(listener, EpollEvent::new(FLAGS, self.data))
    }
}

fn read_fdinfo(fd: RawFd) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()
}

/// The epoll set of this process that holds `fd` (the file `ino`), with a
/// descriptor of its own, and the registration. The first found: the
/// runtime keeps two descriptors for its one set.
fn find(fd: RawFd, ino: u64) -> Option<(Arc<Epoll>, Entry)> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
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
        let Some(e) = read_fdinfo(epfd).and_then(|info| entry_of(&info, fd)) else {
            continue;
        };
        if e.ino != ino {
            continue;
        }
        let set = Arc::new(Epoll(dup_epoll(epfd).ok()?));
        return Some((set, e));
    }
    None
}

/// A descriptor of its own for the epoll set `epfd` (so that nix's `Epoll`
/// can own one), close-on-exec.
#[allow(unsafe_code)]
fn dup_epoll(epfd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: `epfd` was just listed in /proc/self/fd as an epoll set whose
    // fdinfo holds the listener's registration: it is the set that
    // registered the listener, the runtime's, which this thread drives and
    // which stays open as long as the runtime (the worker's life); no other
    // thread closes it. The borrow ends with the copy.
    let borrowed = unsafe { BorrowedFd::borrow_raw(epfd) };
    borrowed.try_clone_to_owned()
}

/// Deletes `listener` from `set` and adds it back with `FLAGS` and the same
/// token; on a refusal, adds it back as it was.
fn reregister(set: &Epoll, listener: BorrowedFd<'_>, was: &Entry) -> Result<(), Unchanged> {
    set.delete(listener.as_fd()).map_err(Unchanged::Lost)?;
    match set.add(listener.as_fd(), EpollEvent::new(FLAGS, was.data)) {
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

    /// `EPOLLEXCLUSIVE`, as the kernel prints it in `fdinfo`.
    const EXCLUSIVE_BIT: u32 = 1 << 28;

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

    /// A listener registered (as a runtime would) in this test's own epoll
    /// set becomes exclusive and level-triggered with its token kept, wakes
    /// the set, and leaves and rejoins it with pause and resume.
    #[test]
    fn a_registration_is_made_exclusive_with_its_token() {
        use nix::sys::epoll::{EpollCreateFlags, EpollTimeout};
        let set = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).expect("epoll");
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET;
        set.add(l.as_fd(), EpollEvent::new(flags, 4242))
            .expect("add");
        let x = Exclusive::make(l.as_fd()).expect("made exclusive");
        let fd_flags = nix::fcntl::fcntl(&x.set.0, nix::fcntl::FcntlArg::F_GETFD).expect("flags");
        assert_ne!(
            fd_flags & nix::libc::FD_CLOEXEC,
            0,
            "its set's copy is close-on-exec"
        );
        let entry = || {
            let info = read_fdinfo(set.0.as_raw_fd()).expect("fdinfo");
            entry_of(&info, l.as_raw_fd())
        };
        let e = entry().expect("still registered");
        assert_eq!(e.data, 4242);
        assert_ne!(e.events & EXCLUSIVE_BIT, 0);
        assert_eq!(e.events & (1 << 31), 0, "level-triggered: no EPOLLET");
        let _c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let mut ev = [EpollEvent::empty(); 2];
        let wait =
            |ev: &mut [EpollEvent], ms: u16| set.wait(ev, EpollTimeout::from(ms)).expect("wait");
        assert_eq!(wait(&mut ev, 2000), 1);
        assert_eq!(ev[0].data(), 4242);
        // Level-triggered: reported again while the connection waits.
        assert_eq!(wait(&mut ev, 0), 1);
        x.pause(l.as_fd()).expect("pause");
        assert_eq!(entry(), None, "out of the set");
        assert_eq!(wait(&mut ev, 0), 0, "no event while paused");
        x.resume(l.as_fd()).expect("resume");
        assert_eq!(entry().map(|e| e.data), Some(4242));
        assert_eq!(
            wait(&mut ev, 0),
            1,
            "the waiting connection is reported again"
        );
        // A second listener is found through the set found for the first.
        let l2 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        set.add(l2.as_fd(), EpollEvent::new(flags, 7)).expect("add");
        let x2 = Exclusive::make(l2.as_fd()).expect("second");
        assert_eq!(x2.data, 7);
        let info = read_fdinfo(set.0.as_raw_fd()).expect("fdinfo");
        let e2 = entry_of(&info, l2.as_raw_fd()).expect("registered");
        assert_ne!(e2.events & EXCLUSIVE_BIT, 0);
        assert_eq!(e2.events & (1 << 31), 0, "level-triggered too");
    }

    #[test]
    fn an_unregistered_listener_is_not_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        assert!(matches!(
            Exclusive::make(l.as_fd()),
            Err(Unchanged::NotFound)
        ));
    }
}
