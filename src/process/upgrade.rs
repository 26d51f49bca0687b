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
/// The memfd holding the master's session ticket key (its number).
pub const KEYS_VAR: &str = "SLUICE_TICKET_KEYS";
/// The name of that memfd.
const KEYS_MEMFD: &str = "sluice-keys";
/// How many binary upgrades led to the new master (for the metrics).
pub const UPGRADES_VAR: &str = "SLUICE_UPGRADES";

/// The binary upgrades that led to this master: its `SLUICE_UPGRADES` when
/// it was started by one (read once, at start), else 0.
pub fn upgrades() -> u64 {
    static N: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var(UPGRADES_VAR)
            .ok()
            .filter(|_| std::env::var_os(LISTENERS_VAR).is_some())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

/// What a new binary got from the old master.
pub struct Inherited {
    pub listeners: Vec<Bound>,
    pub zones: Vec<(String, OwnedFd)>,
    /// The old master's session ticket key material.
    pub ticket_keys: Option<Vec<u8>>,
    /// The old master (this process's parent at start).
    pub parent: Pid,
}

/// Reads the environment a binary upgrade left; None for a normal start: no
/// `SLUICE` variable, or nothing in it this process could adopt (a variable
/// set by someone else is a `[warn]` and is ignored, as nginx ignores a bad
/// `NGINX`). Only open listening sockets and sluice's own zone memfds are
/// adopted, each number once. Called once, at the very start of the master,
/// before it opens any socket or memfd of its own (see `adopt`).
pub fn inherited() -> Option<Inherited> {
    let list = std::env::var_os(LISTENERS_VAR)?;
    let list = list.to_string_lossy();
    let zones_var = std::env::var_os(ZONES_VAR);
    let zone_list = zones_var
        .as_ref()
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::log!(
        crate::log::Level::Notice,
        "using inherited sockets from \"{}\"",
        list
    );
    let (fds, mut warnings) = parse_listeners(&list);
    let mut seen: Vec<RawFd> = Vec::new();
    let mut listeners: Vec<Bound> = Vec::new();
    for fd in fds {
        let sock = match adopt(fd, Kind::Listener, &mut seen) {
            Ok(owned) => Socket::from(owned),
            Err(why) => {
                warnings.push(format!(
                    "inherited socket #{fd} in {LISTENERS_VAR} environment variable {why}, ignoring"
                ));
                continue;
            }
        };
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
    let (zone_fds, zone_warnings) = parse_zones(&zone_list);
    warnings.extend(zone_warnings);
    let mut zones = Vec::new();
    for (name, fd) in zone_fds {
        match adopt(fd, Kind::Zone, &mut seen) {
            Ok(owned) => zones.push((name, owned)),
            Err(why) => warnings.push(format!(
                "inherited zone \"{name}\" #{fd} in {ZONES_VAR} environment variable {why}, ignoring"
            )),
        }
    }
    let ticket_keys = std::env::var(KEYS_VAR).ok().and_then(|v| {
        let fd = fd_number(&v).or_else(|| {
            warnings.push(format!(
                "invalid number \"{v}\" in {KEYS_VAR} environment variable, ignoring"
            ));
            None
        })?;
        match adopt(fd, Kind::Keys, &mut seen) {
            Ok(owned) => read_keys(owned),
            Err(why) => {
                warnings.push(format!(
                    "inherited ticket keys #{fd} in {KEYS_VAR} environment variable {why}, ignoring"
                ));
                None
            }
        }
    });
    for w in &warnings {
        crate::log!(crate::log::Level::Warn, "{}", w);
    }
    // What an old master with nothing to hand over writes: both variables,
    // empty. Anything else that adopted nothing is a normal start.
    let empty_upgrade = list.is_empty() && zones_var.is_some_and(|z| z.is_empty());
    if listeners.is_empty() && zones.is_empty() && !empty_upgrade {
        return None;
    }
    Some(Inherited {
        listeners,
        zones,
        ticket_keys,
        parent: nix::unistd::getppid(),
    })
}

/// The key material in an inherited keys memfd (at most 80 bytes).
fn read_keys(fd: OwnedFd) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::from(fd);
    let mut buf = vec![0u8; crate::net::tls::TicketKeys::MATERIAL];
    let n = f.read_at(&mut buf, 0).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A memfd holding the master's ticket key material, for the new binary
/// (closed on exec until `exec_new_binary`'s child clears that).
pub fn keys_memfd(material: &[u8]) -> Option<OwnedFd> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use std::io::Write;
    let fd = memfd_create(KEYS_MEMFD, MFdFlags::MFD_CLOEXEC).ok()?;
    let mut f = std::fs::File::from(fd);
    f.write_all(material).ok()?;
    Some(OwnedFd::from(f))
}

/// The numbers of `SLUICE` (`fd;fd;...;`), in order, with a warning for each
/// problem. As nginx's `NGINX`: the first item that is not a number ends the
/// list; a number left without its `;` is dropped. Duplicates are left for
/// `adopt`, which sees them across both variables.
fn parse_listeners(list: &str) -> (Vec<RawFd>, Vec<String>) {
    let mut fds = Vec::new();
    let mut warnings = Vec::new();
    let mut rest = list;
    while let Some((item, after)) = rest.split_once(';') {
        match fd_number(item) {
            Some(fd) => fds.push(fd),
            None => {
                warnings.push(format!(
                    "invalid socket number \"{rest}\" in {LISTENERS_VAR} environment variable, ignoring the rest of the variable"
                ));
                return (fds, warnings);
            }
        }
        rest = after;
    }
    if !rest.is_empty() {
        warnings.push(format!(
            "invalid socket number \"{rest}\" in {LISTENERS_VAR} environment variable, ignoring"
        ));
    }
    (fds, warnings)
}

/// The zones of `SLUICE_ZONES` (`name:fd;...;`), parsed as `SLUICE` is.
fn parse_zones(list: &str) -> (Vec<(String, RawFd)>, Vec<String>) {
    let mut zones = Vec::new();
    let mut warnings = Vec::new();
    let mut rest = list;
    while let Some((item, after)) = rest.split_once(';') {
        let zone = item
            .rsplit_once(':')
            .filter(|(name, _)| !name.is_empty())
            .and_then(|(name, fd)| Some((name.to_string(), fd_number(fd)?)));
        match zone {
            Some(z) => zones.push(z),
            None => {
                warnings.push(format!(
                    "invalid zone \"{rest}\" in {ZONES_VAR} environment variable, ignoring the rest of the variable"
                ));
                return (zones, warnings);
            }
        }
        rest = after;
    }
    if !rest.is_empty() {
        warnings.push(format!(
            "invalid zone \"{rest}\" in {ZONES_VAR} environment variable, ignoring"
        ));
    }
    (zones, warnings)
}

/// A descriptor number as an old master writes it: decimal digits only.
fn fd_number(s: &str) -> Option<RawFd> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// What an inherited number must be.
#[derive(Clone, Copy)]
enum Kind {
    /// A listening socket.
    Listener,
    /// The memfd of a zone a sluice master made (`sluice:NAME`).
    Zone,
    /// The memfd of the master's ticket keys.
    Keys,
}

/// Takes ownership of an inherited descriptor once it is shown to be what
/// the old master said; otherwise why not (a warning's end), leaving the
/// number as it was. `seen` holds the numbers already adopted.
#[allow(unsafe_code)]
fn adopt(fd: RawFd, kind: Kind, seen: &mut Vec<RawFd>) -> Result<OwnedFd, &'static str> {
    if fd <= 2 {
        return Err("is a standard stream");
    }
    if seen.contains(&fd) {
        return Err("is named twice");
    }
    let Some(target) = sys::fd_target(fd) else {
        return Err("is not open");
    };
    match kind {
        Kind::Listener if !target.starts_with("socket:") => return Err("is not a socket"),
        Kind::Zone if !target.starts_with("/memfd:sluice:") => {
            return Err("is not a zone's shared memory");
        }
        Kind::Keys if !target.starts_with(&format!("/memfd:{KEYS_MEMFD} ")) => {
            return Err("is not a sluice ticket keys memfd");
        }
        _ => {}
    }
    // SAFETY: `own_fd` needs an open number that nothing else in this
    // process owns. /proc just showed it open, and the master is single-
    // threaded (checked before this runs), so nothing closes it meanwhile.
    // `inherited` runs before the master binds a socket or creates a zone, so
    // the only sockets and sluice memfds it can hold are inherited ones; the
    // logs and stdio it has opened are neither (and numbers 0-2 were refused
    // above). Each number is adopted once (`seen`). A socket that turns out
    // not to listen is given back unclosed below, so the only sockets kept
    // are listening ones and bound datagram ones (stream `listen ... udp`),
    // which no library of this process opens.
    let owned = unsafe { sys::own_fd(fd) };
    if let Kind::Listener = kind {
        let sock = Socket::from(owned);
        if !sock.is_listener().unwrap_or(false) && !bound_datagram(&sock) {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(sock);
            return Err("is not a listening socket");
        }
        seen.push(fd);
        return Ok(set_cloexec(OwnedFd::from(sock)));
    }
    seen.push(fd);
    Ok(set_cloexec(owned))
}

/// Not to be passed on again by accident: close on exec.
fn set_cloexec(owned: OwnedFd) -> OwnedFd {
    let _ = fcntl(&owned, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    owned
}

/// A UDP socket bound to a port: what a `listen ... udp` hands over.
fn bound_datagram(sock: &Socket) -> bool {
    sock.r#type().is_ok_and(|t| t == socket2::Type::DGRAM)
        && sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .is_some_and(|a| a.port() != 0)
}

fn listen_addr(sock: &Socket) -> Option<ListenAddr> {
    let local = sock.local_addr().ok()?;
    if let Some(a) = local.as_socket() {
        if bound_datagram(sock) {
            return Some(ListenAddr::Udp(a));
        }
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
    keys: Option<BorrowedFd<'_>>,
) -> Result<Pid, String> {
    let mut fds = String::new();
    for fd in listeners {
        fds.push_str(&format!("{};", fd.as_raw_fd()));
    }
    let mut zone_list = String::new();
    for (name, fd) in zones {
        zone_list.push_str(&format!("{name}:{};", fd.as_raw_fd()));
    }
    let args: Vec<std::ffi::CString> = super::title::original_args()
        .into_iter()
        .filter_map(|a| std::ffi::CString::new(a.into_encoded_bytes()).ok())
        .collect();
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| std::ffi::CString::new(p.into_os_string().into_encoded_bytes()).ok())
        .ok_or("cannot find the executable")?;
    let mut env: Vec<std::ffi::CString> = std::env::vars_os()
        .filter(|(k, _)| k != LISTENERS_VAR && k != ZONES_VAR && k != KEYS_VAR && k != UPGRADES_VAR)
        .filter_map(|(k, v)| {
            let mut kv = k.into_encoded_bytes();
            kv.push(b'=');
            kv.extend(v.into_encoded_bytes());
            std::ffi::CString::new(kv).ok()
        })
        .collect();
    let upgrades = (upgrades() + 1).to_string();
    for (k, v) in [
        (LISTENERS_VAR, fds),
        (ZONES_VAR, zone_list),
        (UPGRADES_VAR, upgrades),
    ] {
        if let Ok(c) = std::ffi::CString::new(format!("{k}={v}")) {
            env.push(c);
        }
    }
    if let Some(fd) = keys {
        if let Ok(c) = std::ffi::CString::new(format!("{KEYS_VAR}={}", fd.as_raw_fd())) {
            env.push(c);
        }
    }
    match sys::fork() {
        Err(e) => Err(format!("fork() failed ({}: {})", e as i32, e.desc())),
        Ok(ForkResult::Child) => {
            // In the child only: the descriptors stay open across exec.
            for fd in listeners
                .iter()
                .chain(zones.iter().map(|(_, f)| f))
                .chain(keys.iter())
            {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_as_an_old_master_writes_them() {
        assert_eq!(parse_listeners(""), (vec![], vec![]));
        assert_eq!(parse_listeners("5;6;"), (vec![5, 6], vec![]));
        // Duplicates are parsed; `adopt` refuses the second.
        assert_eq!(parse_listeners("5;5;"), (vec![5, 5], vec![]));
    }

    #[test]
    fn listeners_not_ours() {
        let (fds, w) = parse_listeners("/usr/lib/sluice");
        assert!(fds.is_empty());
        assert_eq!(
            w,
            ["invalid socket number \"/usr/lib/sluice\" in SLUICE environment variable, ignoring"]
        );
        let (fds, w) = parse_listeners("7;x;8;");
        assert_eq!(fds, [7]);
        assert_eq!(
            w,
            [
                "invalid socket number \"x;8;\" in SLUICE environment variable, ignoring the rest of the variable"
            ]
        );
        for bad in ["-1;", "+3;", " 3;", "3 ;", ";", "99999999999;", "0x3;"] {
            let (fds, w) = parse_listeners(bad);
            assert!(fds.is_empty() && w.len() == 1, "{bad}");
        }
        let (fds, w) = parse_listeners("3;4");
        assert_eq!(fds, [3]);
        assert_eq!(
            w,
            ["invalid socket number \"4\" in SLUICE environment variable, ignoring"]
        );
    }

    #[test]
    fn zones() {
        assert_eq!(
            parse_zones("a:7;b:c:8;"),
            (vec![("a".into(), 7), ("b:c".into(), 8)], vec![])
        );
        let (z, w) = parse_zones("a:7;:8;b:9;");
        assert_eq!(z, [("a".to_string(), 7)]);
        assert_eq!(
            w,
            [
                "invalid zone \":8;b:9;\" in SLUICE_ZONES environment variable, ignoring the rest of the variable"
            ]
        );
        let (z, w) = parse_zones("a:x;");
        assert!(z.is_empty() && w.len() == 1);
        let (z, w) = parse_zones("a:7");
        assert!(z.is_empty());
        assert_eq!(
            w,
            ["invalid zone \"a:7\" in SLUICE_ZONES environment variable, ignoring"]
        );
    }

    #[test]
    fn adopt_refuses_before_owning() {
        // Only refusals that never reach `own_fd`: a test runs threaded.
        let mut seen = vec![];
        assert_eq!(
            adopt(1, Kind::Listener, &mut seen).err(),
            Some("is a standard stream")
        );
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let n = f.as_raw_fd();
        assert_eq!(
            adopt(n, Kind::Listener, &mut seen).err(),
            Some("is not a socket")
        );
        assert_eq!(
            adopt(n, Kind::Zone, &mut seen).err(),
            Some("is not a zone's shared memory")
        );
        let mut seen = vec![n];
        assert_eq!(
            adopt(n, Kind::Zone, &mut seen).err(),
            Some("is named twice")
        );
        assert_eq!(
            adopt(i32::MAX, Kind::Zone, &mut seen).err(),
            Some("is not open")
        );
        assert!(sys::fd_target(n).is_some());
        assert_eq!(sys::fd_target(-1), None);
    }
}
