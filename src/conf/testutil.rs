//! Test helpers shared by the configuration modules' unit tests: build a
//! configuration from text, or get its error as nginx would print it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::build::build_with_warnings;
use super::tree::{Files, TreeParser};
use super::{ConfError, Config, Paths};
use crate::log::Target;

pub fn paths() -> Paths {
    Paths {
        prefix: PathBuf::from("/pfx/"),
        conf_file: PathBuf::from("/pfx/conf/t.conf"),
        globals: None,
        error_log: Target::File(PathBuf::from("/pfx/logs/error.log")),
    }
}

/// An http block with `body` at its level and one server with a plain
/// location.
pub fn http_with(body: &str) -> String {
    format!("events {{}}\nhttp {{\n{body}\nserver {{ listen 127.0.0.1:8080; location / {{ }} }} }}")
}

pub fn try_build(text: &str) -> Result<(Config, Vec<ConfError>), ConfError> {
    let mut files = Files::default();
    let mut tp = TreeParser::new(Path::new("/pfx/conf"), &mut files);
    let (d, e) = tp.parse_text(text, Some(Arc::new(PathBuf::from("/t.conf"))));
    build_with_warnings(&paths(), d, files, e)
}

pub fn err(text: &str) -> String {
    try_build(text).map(|_| ()).unwrap_err().to_string()
}
