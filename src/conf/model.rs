//! The typed, immutable configuration that `build` produces and every other layer
//! reads. Field names follow nginx's directive names so one grep finds a setting
//! in `man/`, `conf/`, `src/` and `t/`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;

use super::vars::Template;
use super::{Files, Src};
use crate::log::LogSpec;

#[derive(Debug, Clone)]
pub struct Config {
    pub prefix: PathBuf,
    pub conf_file: PathBuf,
    /// Every file read, in order, for `-T`.
    pub files: Files,
    pub main: Main,
    pub events: Events,
    pub http: Option<Http>,
}

#[derive(Debug, Clone)]
pub struct Main {
    /// `worker_processes N|auto`, default 1.
    pub worker_processes: usize,
    /// `pid FILE`, default `logs/nginx.pid` under the prefix.
    pub pid: PathBuf,
    /// `error_log FILE|stderr [LEVEL]`, default `logs/error.log error`.
    pub error_log: Vec<LogSpec>,
    pub daemon: bool,
    pub master_process: bool,
    /// `user USER [GROUP]`; applies only when the master runs as root.
    pub user: User,
    pub worker_rlimit_nofile: Option<u64>,
    pub worker_shutdown_timeout: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub user: String,
    /// None: the group named like the user, else the user's primary group.
    pub group: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Events {
    /// `worker_connections N`, default 512.
    pub worker_connections: usize,
}

#[derive(Debug, Clone)]
pub struct Http {
    pub servers: Vec<Server>,
    pub error_log: Vec<LogSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    Inet(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Inet(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: ListenAddr,
    pub default_server: bool,
    pub reuseport: bool,
    /// `backlog=N`, default 511 as nginx.
    pub backlog: i32,
    pub src: Src,
}

#[derive(Debug, Clone)]
pub enum ServerName {
    /// `example.com`, lowercased.
    Exact(String),
    /// `*.example.com` or `.example.com`: stored as the suffix `.example.com`;
    /// `.example.com` also matches `example.com` itself.
    Front { suffix: String, bare_too: bool },
    /// `www.example.*`: stored as the prefix `www.example.`.
    Back(String),
    /// `~regex`.
    Regex(Regex),
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: Vec<Listen>,
    pub server_name: Vec<ServerName>,
    /// The first name, for `$server_name`.
    pub primary_name: String,
    /// `return` at server level runs before any location is chosen.
    pub ret: Option<Return>,
    pub locations: Vec<Location>,
    pub error_log: Vec<LogSpec>,
    pub src: Src,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modifier {
    /// `location = /uri`
    Exact,
    /// `location /uri`
    Prefix,
    /// `location ^~ /uri`: a longest prefix match that stops the regex search.
    PrefixNoRegex,
    /// `location ~ re`
    Regex,
    /// `location ~* re`
    RegexCaseless,
    /// `location @name`
    Named,
}

#[derive(Debug, Clone)]
pub struct Location {
    pub modifier: Modifier,
    pub uri: String,
    pub regex: Option<Regex>,
    pub ret: Option<Return>,
    pub locations: Vec<Location>,
    pub error_log: Vec<LogSpec>,
    pub src: Src,
}

/// `return CODE [TEXT|URL]` or `return URL`.
#[derive(Debug, Clone)]
pub struct Return {
    pub code: u16,
    pub text: Option<Template>,
}
