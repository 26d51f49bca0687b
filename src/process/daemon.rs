//! Detaching from the terminal (`daemon on`) and the pid file. The foreground
//! process waits, over a pipe, until the daemon has written its pid file (or
//! failed), so that whoever started it finds the file as soon as it returns.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use nix::unistd::ForkResult;

use super::sys;

/// The daemon's end of the start-up pipe: say how start-up ended.
pub struct Started(File);

impl Started {
    pub fn report(mut self, ok: bool) {
        let _ = self.0.write_all(if ok { b"0" } else { b"1" });
    }
}

/// Forks; the foreground parent waits for the child's report and exits with 0
/// or 1. Returns in the child, detached (new session, stdin and stdout on
/// /dev/null).
pub fn daemonize() -> Result<Started, String> {
    let (r, w) =
        nix::unistd::pipe().map_err(|e| format!("pipe() failed ({} : {})", e as i32, e.desc()))?;
    match sys::fork() {
        Err(e) => Err(format!("fork() failed ({}: {})", e as i32, e.desc())),
        Ok(ForkResult::Parent { .. }) => {
            drop(w);
            let mut f = File::from(r);
            let mut b = [0u8; 1];
            let code = match f.read(&mut b) {
                Ok(1) if b[0] == b'0' => 0,
                _ => 1,
            };
            std::process::exit(code);
        }
        Ok(ForkResult::Child) => {
            drop(r);
            nix::unistd::setsid()
                .map_err(|e| format!("setsid() failed ({}: {})", e as i32, e.desc()))?;
            let null = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map_err(|e| format!("open(\"/dev/null\") failed ({e})"))?;
            let _ = nix::unistd::dup2_stdin(&null);
            let _ = nix::unistd::dup2_stdout(&null);
            Ok(Started(File::from(w)))
        }
    }
}

/// Sends stderr to the error log file, as nginx does once daemonized, so that
/// nothing written there is lost.
pub fn stderr_to(path: &Path) {
    if let Ok(f) = crate::log::open_append(path) {
        let _ = nix::unistd::dup2_stderr(&f);
    }
}

/// Writes `PID\n`, replacing any previous content. The number goes to a
/// temporary file beside the pid file, which is then renamed over it, so a
/// reader (`sluice -s reload`, a service manager, a test harness) never
/// finds the file made but still empty, as it can with nginx's create then
/// write. Where the directory takes no new file but the pid file itself is
/// writable (a file made in advance in a directory the user cannot write),
/// it is written in place, as nginx writes it.
pub fn write_pid(path: &Path, pid: u32) -> std::io::Result<()> {
    let text = format!("{pid}\n");
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{pid}.tmp"));
    let tmp = std::path::PathBuf::from(tmp);
    let staged = File::create(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path));
    match staged {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            if e.kind() != std::io::ErrorKind::PermissionDenied {
                return Err(e);
            }
            File::create(path)?.write_all(text.as_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-pid-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    }

    #[test]
    fn the_pid_replaces_what_the_file_held_and_no_temporary_file_stays() {
        let dir = scratch("replace");
        let path = dir.join("sluice.pid");
        std::fs::write(&path, "123456789\nleft over\n").expect("old pid file");
        write_pid(&path, 42).expect("pid written");
        assert_eq!(std::fs::read_to_string(&path).expect("read back"), "42\n");
        write_pid(&path, 7).expect("pid written again");
        assert_eq!(std::fs::read_to_string(&path).expect("read back"), "7\n");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("sluice.pid")]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pid_file_in_a_missing_directory_is_an_error() {
        let dir = scratch("missing");
        let path = dir.join("no-such-directory").join("sluice.pid");
        let e = write_pid(&path, 42).expect_err("no directory");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(std::fs::read_dir(&dir).expect("list").count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
