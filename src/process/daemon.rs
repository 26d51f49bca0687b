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

/// Writes `PID\n`, replacing any previous content.
pub fn write_pid(path: &Path, pid: u32) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(format!("{pid}\n").as_bytes())
}
