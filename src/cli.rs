//! nginx's command line: `-?hvVtTq`, `-s signal`, `-p prefix`, `-e file`,
//! `-c file`, `-g directives`. Parsing only; `process::run` acts on the result.

use std::path::{Path, PathBuf};

use crate::conf::tree::full_name;
use crate::log::Target;

/// The prefix used when `-p` is not given.
pub const DEFAULT_PREFIX: &str = match option_env!("SLUICE_PREFIX") {
    Some(p) => p,
    None => "/usr/local/sluice/",
};
pub const DEFAULT_CONF: &str = "conf/sluice.conf";
pub const DEFAULT_ERROR_LOG: &str = "logs/error.log";

/// The nginx modules sluice does not have yet. `-V` lists each as `--without-…`,
/// so tools that read it leave their directives out. Remove a line in the commit
/// that lands its module, and not before.
pub const WITHOUT_MODULES: &[&str] = &[
    "--without-http_ssi_module",
    "--without-http_userid_module",
    "--without-http_referer_module",
    "--without-http_uwsgi_module",
    "--without-http_scgi_module",
    "--without-http_memcached_module",
    "--without-http_empty_gif_module",
    "--without-http_browser_module",
    "--without-http_upstream_least_time_module",
    "--without-http-cache",
    "--without-http_tunnel_module",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalName {
    Stop,
    Quit,
    Reopen,
    Reload,
}

impl SignalName {
    pub fn signal(self) -> nix::sys::signal::Signal {
        use nix::sys::signal::Signal;
        match self {
            SignalName::Stop => Signal::SIGTERM,
            SignalName::Quit => Signal::SIGQUIT,
            SignalName::Reopen => Signal::SIGUSR1,
            SignalName::Reload => Signal::SIGHUP,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Help,
    Version,
    Configure,
    Test { dump: bool },
    Signal(SignalName),
    Run,
}

#[derive(Clone, Debug)]
pub struct Cli {
    pub action: Action,
    pub quiet: bool,
    pub prefix: PathBuf,
    pub conf_file: PathBuf,
    pub error_log: Target,
    pub globals: Option<String>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CliError(pub String);

pub fn usage() -> String {
    format!(
        "Usage: sluice [-?hvVtTq] [-s signal] [-p prefix]\n\
         \x20             [-e filename] [-c filename] [-g directives]\n\
         \n\
         Options:\n\
         \x20 -?,-h         : this help\n\
         \x20 -v            : show version and exit\n\
         \x20 -V            : show version and configure options then exit\n\
         \x20 -t            : test configuration and exit\n\
         \x20 -T            : test configuration, dump it and exit\n\
         \x20 -q            : suppress non-error messages during configuration testing\n\
         \x20 -s signal     : send signal to a master process: stop, quit, reopen, reload\n\
         \x20 -p prefix     : set prefix path (default: {DEFAULT_PREFIX})\n\
         \x20 -e filename   : set error log file (default: {DEFAULT_ERROR_LOG})\n\
         \x20 -c filename   : set configuration file (default: {DEFAULT_CONF})\n\
         \x20 -g directives : set global directives out of configuration file\n\n"
    )
}

pub fn version_line() -> String {
    format!(
        "sluice version: sluice/{}\nnginx version: nginx/{} (behaviour followed)\n",
        crate::VERSION,
        crate::NGINX_VERSION
    )
}

pub fn configure_text() -> String {
    format!(
        "{}built with Rust\nTLS SNI support enabled\ncore directives not implemented: {}\nconfigure arguments: --with-http_ssl_module --with-http_v2_module --with-http_realip_module --with-http_sub_module --with-http_stub_status_module --with-http_api_module --with-stream --with-stream_ssl_module --with-stream_ssl_preread_module --with-stream_realip_module {}\n",
        version_line(),
        crate::conf::build::missing_core().join(" "),
        WITHOUT_MODULES.join(" ")
    )
}

/// Parses argv (without argv[0]). `cwd` makes a relative `-p` absolute.
pub fn parse(args: &[String], cwd: &Path) -> Result<Cli, CliError> {
    let mut action = Action::Run;
    let mut quiet = false;
    let mut prefix: Option<String> = None;
    let mut conf: Option<String> = None;
    let mut elog: Option<String> = None;
    let mut globals: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let Some(flags) = a.strip_prefix('-').filter(|f| !f.is_empty()) else {
            return Err(CliError(format!("invalid option: \"{a}\"")));
        };
        for (pos, c) in flags.char_indices() {
            match c {
                '?' | 'h' => action = Action::Help,
                'v' => action = Action::Version,
                'V' => action = Action::Configure,
                't' => action = Action::Test { dump: false },
                'T' => action = Action::Test { dump: true },
                'q' => quiet = true,
                'p' | 'c' | 'e' | 'g' | 's' => {
                    // The value is the rest of this word, or the next word.
                    let rest = &flags[pos + 1..];
                    let value = if !rest.is_empty() {
                        rest.to_string()
                    } else {
                        i += 1;
                        match args.get(i) {
                            Some(v) => v.clone(),
                            None => {
                                let what = match c {
                                    'p' => "directory name",
                                    'c' | 'e' => "file name",
                                    _ => "parameter",
                                };
                                return Err(CliError(format!("option \"-{c}\" requires {what}")));
                            }
                        }
                    };
                    match c {
                        'p' => prefix = Some(value),
                        'c' => conf = Some(value),
                        'e' => elog = Some(value),
                        'g' => globals = Some(value),
                        _ => {
                            let s = match value.as_str() {
                                "stop" => SignalName::Stop,
                                "quit" => SignalName::Quit,
                                "reopen" => SignalName::Reopen,
                                "reload" => SignalName::Reload,
                                _ => {
                                    return Err(CliError(format!(
                                        "invalid option: \"-s {value}\""
                                    )));
                                }
                            };
                            action = Action::Signal(s);
                        }
                    }
                    break;
                }
                _ => return Err(CliError(format!("invalid option: \"{}\"", &flags[pos..]))),
            }
        }
        i += 1;
    }
    let prefix = match prefix {
        Some(p) => {
            // Absolute, so that a reload finds the same files whatever the
            // directory; "." and "x/./y" lose their dots (`-p .` names the
            // directory, not "/cwd/./").
            let p: PathBuf = cwd.join(p).components().collect();
            let mut s = p.into_os_string();
            if !s.to_string_lossy().ends_with('/') {
                s.push("/");
            }
            PathBuf::from(s)
        }
        None => PathBuf::from(DEFAULT_PREFIX),
    };
    let conf_file = full_name(&prefix, conf.as_deref().unwrap_or(DEFAULT_CONF));
    let error_log = match elog.as_deref() {
        Some("stderr") => Target::Stderr,
        Some(e) => Target::File(full_name(&prefix, e)),
        None => Target::File(full_name(&prefix, DEFAULT_ERROR_LOG)),
    };
    Ok(Cli {
        action,
        quiet,
        prefix,
        conf_file,
        error_log,
        globals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cli, CliError> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse(&v, Path::new("/cwd"))
    }

    #[test]
    fn defaults_and_prefix() {
        let c = p(&[]).unwrap();
        assert_eq!(c.action, Action::Run);
        assert_eq!(
            c.conf_file,
            PathBuf::from(DEFAULT_PREFIX).join(DEFAULT_CONF)
        );
        let c = p(&["-p", "t", "-c", "x.conf", "-e", "stderr"]).unwrap();
        assert_eq!(c.prefix, PathBuf::from("/cwd/t/"));
        assert_eq!(c.conf_file, PathBuf::from("/cwd/t/x.conf"));
        assert_eq!(c.error_log, Target::Stderr);
        let c = p(&["-p", ".", "-c", "./x.conf"]).unwrap();
        assert_eq!(c.prefix, PathBuf::from("/cwd/"));
        assert_eq!(c.conf_file, PathBuf::from("/cwd/x.conf"));
        let c = p(&["-p/abs/", "-c/etc/s.conf", "-e", "e.log"]).unwrap();
        assert_eq!(c.conf_file, PathBuf::from("/etc/s.conf"));
        assert_eq!(c.error_log, Target::File(PathBuf::from("/abs/e.log")));
    }

    #[test]
    fn combined_flags_and_signals() {
        let c = p(&["-tq"]).unwrap();
        assert_eq!(c.action, Action::Test { dump: false });
        assert!(c.quiet);
        assert_eq!(p(&["-T"]).unwrap().action, Action::Test { dump: true });
        assert_eq!(
            p(&["-s", "reload"]).unwrap().action,
            Action::Signal(SignalName::Reload)
        );
        assert_eq!(
            p(&["-squit"]).unwrap().action,
            Action::Signal(SignalName::Quit)
        );
        assert_eq!(
            p(&["-g", "pid x;"]).unwrap().globals.as_deref(),
            Some("pid x;")
        );
        assert_eq!(p(&["-?"]).unwrap().action, Action::Help);
        assert_eq!(p(&["-V"]).unwrap().action, Action::Configure);
    }

    #[test]
    fn errors() {
        assert_eq!(p(&["-x"]).unwrap_err().0, "invalid option: \"x\"");
        assert_eq!(
            p(&["-s", "kill"]).unwrap_err().0,
            "invalid option: \"-s kill\""
        );
        assert_eq!(
            p(&["-c"]).unwrap_err().0,
            "option \"-c\" requires file name"
        );
        assert_eq!(
            p(&["-p"]).unwrap_err().0,
            "option \"-p\" requires directory name"
        );
        assert_eq!(p(&["foo"]).unwrap_err().0, "invalid option: \"foo\"");
    }
}
