//! Configuration: nginx's syntax (`lexer`, `tree`), a directive table that gives
//! it meaning (`build`), and the typed, immutable result (`model`). Loading reads
//! files; everything else here is pure. Every error names `FILE:LINE` (or
//! `command line` for `-g`), worded as nginx words it.

pub mod allow;
pub mod auth_request;
pub mod autoindex;
pub mod buckets;
pub mod build;
pub mod charset;
pub mod ciphers;
pub mod expires;
pub mod fastcgi;
mod files;
pub mod geo;
pub mod gzip;
pub mod health;
pub mod http;
mod http2;
pub mod lexer;
pub mod limit;
pub mod limit_except;
pub mod listen_opts;
pub mod loc;
mod loc_table;
mod logs;
pub mod map;
pub mod model;
#[cfg(test)]
mod proptests;
mod proxy;
pub mod proxy_more;
pub mod proxy_ssl;
pub mod rate;
mod resolver;
mod rewrite;
pub mod ssl;
mod status;
pub mod sticky;
mod stream;
pub mod stream_more;
mod stream_udp;
pub mod sub_mirror;
mod switches;
#[cfg(test)]
pub(crate) mod testutil;
pub mod tree;
pub mod try_files;
mod tuning;
pub mod values;
pub mod vars;
pub mod worker_setup;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use model::Config;
pub use tree::{Directive, Files};

/// Where a directive was written: a file and the line it ends on, or the
/// command line (`-g`) when `file` is None.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Src {
    pub file: Option<Arc<PathBuf>>,
    pub line: usize,
}

impl fmt::Display for Src {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(p) => write!(f, "{}:{}", p.display(), self.line),
            None => f.write_str("command line"),
        }
    }
}

/// A configuration error: nginx's message plus where it happened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfError {
    pub message: String,
    pub src: Option<Src>,
}

impl ConfError {
    pub fn at(message: impl Into<String>, src: &Src) -> Self {
        ConfError {
            message: message.into(),
            src: Some(src.clone()),
        }
    }
    pub fn bare(message: impl Into<String>) -> Self {
        ConfError {
            message: message.into(),
            src: None,
        }
    }
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.src {
            Some(s) => write!(f, "{} in {}", self.message, s),
            None => f.write_str(&self.message),
        }
    }
}

/// What the command line decides about where things are.
#[derive(Clone, Debug)]
pub struct Paths {
    /// `-p`, always ending in `/`.
    pub prefix: PathBuf,
    /// `-c`, made absolute against the prefix.
    pub conf_file: PathBuf,
    /// `-g` directives, parsed before the file, in the main context.
    pub globals: Option<String>,
    /// `-e`: where messages go before the config's `error_log` takes effect,
    /// and the default `error_log` when the config names none.
    pub error_log: crate::log::Target,
}

impl Paths {
    /// Relative includes start at the directory of the configuration file.
    pub fn conf_prefix(&self) -> PathBuf {
        self.conf_file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.prefix.clone())
    }
}

/// Reads and checks the whole configuration.
pub fn load(paths: &Paths) -> Result<Config, ConfError> {
    load_with_warnings(paths).map(|(c, _)| c)
}

/// Like `load`, also returning warnings (ignored directives) for the caller to log.
pub fn load_with_warnings(paths: &Paths) -> Result<(Config, Vec<ConfError>), ConfError> {
    let mut files = Files::default();
    let conf_prefix = paths.conf_prefix();
    let mut tp = tree::TreeParser::new(&conf_prefix, &mut files);
    let mut dirs = Vec::new();
    let mut syntax_err = None;
    if let Some(g) = &paths.globals {
        let (d, e) = tp.parse_text(g, None);
        dirs.extend(d);
        syntax_err = e;
    }
    if syntax_err.is_none() {
        let (d, e) = tp.parse_file(&paths.conf_file, None);
        dirs.extend(d);
        syntax_err = e;
    }
    build::build_with_warnings(paths, dirs, files, syntax_err)
}
