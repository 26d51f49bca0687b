//! `try_files`: the first of the listed paths that exists under the
//! location's `root` or `alias` (a directory when written with a final `/`,
//! else a file) becomes the request's URI in the same location; when none
//! does, an internal redirect to the last argument or its `=code`.

use std::io::ErrorKind;

use crate::conf::try_files::{TryFiles, TryLast};
use crate::log::Level;

use super::vars::Req;

pub(super) enum Tried {
    /// The URI is now the file found; the location's handler serves it.
    Found,
    /// An internal redirect to a URI or `@name`.
    Redirect(String),
    Code(u16),
}

pub(super) fn run(r: &mut Req, tf: &TryFiles) -> Tried {
    for (t, dir) in &tf.files {
        let name = r.eval(t);
        let path = r.filename_of(&name);
        match super::static_files::open(r, &path) {
            Ok((_, meta)) if meta.is_dir() == *dir => {
                // Under a regex location's `alias` a file (not a
                // directory) found is the alias and the name, as nginx.
                r.add_uri_to_alias = r.conf.root.whole && !*dir;
                r.uri = name;
                return Tried::Found;
            }
            Ok(_) => {}
            Err(e) => {
                // Not there: the next one. Anything else is logged first,
                // as nginx does.
                let quiet = matches!(e.err.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
                    || e.err.raw_os_error() == Some(nix::libc::ENAMETOOLONG);
                if !quiet {
                    crate::log_conn!(
                        Level::Crit,
                        r.conn.number,
                        "{} \"{}\" failed ({}){}",
                        e.call,
                        path.display(),
                        crate::log::errno_text(&e.err),
                        r.log_context(None)
                    );
                }
            }
        }
    }
    match &tf.last {
        TryLast::Code(code) => Tried::Code(*code),
        TryLast::Uri(t) => Tried::Redirect(r.eval(t)),
    }
}
