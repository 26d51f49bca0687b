//! Binary upgrade (`USR2`), as nginx: the old master execs the binary again
//! with the listening sockets and the zones' memfds left open, and their
//! numbers in `SLUICE` (`fd;fd;...;`) and `SLUICE_ZONES` (`name:fd;...;`).
//! The new master adopts the sockets (it does not bind them again) and maps
//! the zones to copy their resolved peers. Called by the master only.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::unistd::{ForkResult, Pid};
use socket2::Socket;

use super::sys;
use crate::conf::model::ListenAddr;
use crate::net::Bound;

pub const LISTENERS_VAR: &str = "SLUICE";
pub const ZONES_VAR: &str = "SLUICE_ZONES";

/// What a new binary got from the old master.
pub struct Inherited {
    pub listeners: Vec<Bound>,
    pub zones: Vec<(String, OwnedFd)>,
    /// The old master (this process's parent at start).
    pub parent: Pid,
}

/// Reads the environment a binary upgrade left; None for a normal start.
/// Descriptors that are not open sockets are ignored.
pub fn inherited() -> Option<Inherited> {
    let list = std::env::var(LISTENERS_VAR).ok()?;
    let mut listeners: Vec<Bound> = Vec::new();
    for fd in list.split(';').filter_map(|s| s.parse::<RawFd>().ok()) {
        if !open_fd(fd) {
            continue;
        }
        // The old master left it open for us: it is ours from here on.
        let Some(owned) = own(fd) else { continue };
        let sock = Socket::from(owned);
        let Some(addr) = listen_addr(&sock) else {
            continue;
        };
        let reuseport = sock.reuse_port().unwrap_or(false);
        let _ = sock.set_nonblocking(true);
        match listeners
            .iter_mut()
            .find(|b| b.addr == addr && b.reuseport && reuseport)
        {
            Some(b) => b.sockets.push(sock),
            None => listeners.push(Bound {
                addr,
                reuseport,
                backlog: 511,
                sockets: vec![sock],
            }),
        }
    }
    let zones = std::env::var(ZONES_VAR)
        .unwrap_or_default()
        .split(';')
        .filter_map(|item| {
            let (name, fd) = item.rsplit_once(':')?;
            let fd: RawFd = fd.parse().ok()?;
            open_fd(fd)
                .then(|| own(fd))
                .flatten()
                .map(|o| (name.to_string(), o))
        })
        .collect();
    Some(Inherited {
        listeners,
        zones,
        parent: nix::unistd::getppid(),
    })
}

fn open_fd(fd: RawFd) -> bool {
    fd > 2 && sys::fd_is_open(fd)
}

fn own(fd: RawFd) -> Option<OwnedFd> {
    let owned = sys::own_fd(fd);
    // Not to be passed on again by accident: close on exec.
    let _ = fcntl(&owned, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    Some(owned)
}

fn listen_addr(sock: &Socket) -> Option<ListenAddr> {
    let local = sock.local_addr().ok()?;
    if let Some(a) = local.as_socket() {
        return Some(ListenAddr::Inet(a));
    }
    local
        .as_pathname()
        .map(|p| ListenAddr::Unix(p.to_path_buf()))
}

/// Starts the new binary: `argv[0]` with the original arguments, the
/// listeners and zones left open for it. Returns its pid.
pub fn exec_new_binary(
    listeners: &[BorrowedFd<'_>],
    zones: &[(String, BorrowedFd<'_>)],
) -> Result<Pid, String> {
    let mut fds = String::new();
    for fd in listeners {
        fds.push_str(&format!("{};", fd.as_raw_fd()));
    }
    let mut zone_list = String::new();
    for (name, fd) in zones {
        zone_list.push_str(&format!("{name}:{};", fd.as_raw_fd()));
    }
    let args: Vec<std::ffi::CString> = std::env::args_os()
        .filter_map(|a| std::ffi::CString::new(a.into_encoded_bytes()).ok())
        .collect();
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| std::ffi::CString::new(p.into_os_string().into_encoded_bytes()).ok())
        .ok_or("cannot find the executable")?;
    let mut env: Vec<std::ffi::CString> = std::env::vars_os()
        .filter(|(k, _)| k != LISTENERS_VAR && k != ZONES_VAR)
        .filter_map(|(k, v)| {
            let mut kv = k.into_encoded_bytes();
            kv.push(b'=');
            kv.extend(v.into_encoded_bytes());
            std::ffi::CString::new(kv).ok()
        })
        .collect();
    for (k, v) in [(LISTENERS_VAR, fds), (ZONES_VAR, zone_list)] {
        if let Ok(c) = std::ffi::CString::new(format!("{k}={v}")) {
            env.push(c);
        }
    }
    match sys::fork() {
        Err(e) => Err(format!("fork() failed ({}: {})", e as i32, e.desc())),
        Ok(ForkResult::Child) => {
            // In the child only: the descriptors stay open across exec.
            for fd in listeners.iter().chain(zones.iter().map(|(_, f)| f)) {
                let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()));
            }
            let e = nix::unistd::execve(&exe, &args, &env).err();
            crate::log!(
                crate::log::Level::Alert,
                "execve() failed while executing new binary process \"{}\" ({})",
                exe.to_string_lossy(),
                e.map(|e| e.desc()).unwrap_or("")
            );
            std::process::exit(super::worker::FATAL)
        }
        Ok(ForkResult::Parent { child }) => Ok(child),
    }
}
