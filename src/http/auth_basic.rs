//! `auth_basic`: the request's Basic credentials checked against the
//! htpasswd file, read per request (so edits apply without a reload) off
//! the worker's thread, as is the hashing. 401 with `WWW-Authenticate` and
//! nginx's error lines; a missing file is 403, another failure 500. Called
//! by `access_phase`; the pure parts are `htpasswd`.

use std::path::PathBuf;

use super::htpasswd;
use super::vars::Req;
use crate::log::Level;

/// What the module says of a request.
pub enum Auth {
    /// Not configured here (or `off`).
    Declined,
    Allowed,
    /// 401 (the realm is set on the request), 403 or 500.
    Refused(u16),
}

enum Found {
    Match,
    Mismatch,
    NoUser,
}

fn unauthorized(r: &mut Req, realm: &str) -> Auth {
    r.www_authenticate = Some(format!("Basic realm=\"{realm}\""));
    Auth::Refused(401)
}

pub async fn check(r: &mut Req) -> Auth {
    let (Some(realm), Some(file)) = (&r.conf.auth_basic, &r.conf.auth_basic_user_file) else {
        return Auth::Declined;
    };
    let realm = r.eval(realm);
    if realm == "off" {
        return Auth::Declined;
    }
    let creds = r
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| htpasswd::basic_credentials(v.as_bytes()));
    let Some((user, pass)) = creds else {
        crate::log_conn!(
            Level::Info,
            r.conn.number,
            "no user/password was provided for basic authentication{}",
            r.log_context(None)
        );
        return unauthorized(r, &realm);
    };
    let name = PathBuf::from(r.eval(&file.template));
    let path = if name.is_relative() {
        file.conf_prefix.join(name)
    } else {
        name
    };
    let p = path.clone();
    let u = user.clone();
    let found = tokio::task::spawn_blocking(move || {
        let data = std::fs::read(&p)?;
        Ok::<_, std::io::Error>(match htpasswd::find(&data, &u) {
            None => Found::NoUser,
            Some(stored) if htpasswd::verify(&pass, stored) => Found::Match,
            Some(_) => Found::Mismatch,
        })
    })
    .await;
    let user = String::from_utf8_lossy(&user).into_owned();
    match found {
        Ok(Ok(Found::Match)) => Auth::Allowed,
        Ok(Ok(Found::Mismatch)) => {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "user \"{}\": password mismatch{}",
                user,
                r.log_context(None)
            );
            unauthorized(r, &realm)
        }
        Ok(Ok(Found::NoUser)) => {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "user \"{}\" was not found in \"{}\"{}",
                user,
                path.display(),
                r.log_context(None)
            );
            unauthorized(r, &realm)
        }
        Ok(Err(e)) => {
            let (level, code) = if e.kind() == std::io::ErrorKind::NotFound {
                (Level::Error, 403)
            } else {
                (Level::Crit, 500)
            };
            crate::log_conn!(
                level,
                r.conn.number,
                "open() \"{}\" failed ({}){}",
                path.display(),
                crate::log::errno_text(&e),
                r.log_context(None)
            );
            Auth::Refused(code)
        }
        Err(_) => Auth::Refused(500),
    }
}
