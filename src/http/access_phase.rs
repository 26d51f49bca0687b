//! nginx's access phase for a request: `allow`/`deny` first, then
//! `auth_basic`, combined by `satisfy all` (each must pass) or `satisfy
//! any` (one passing is enough). Run by the pipeline's `dispatch` once the
//! location is chosen (again after an internal redirect), before the
//! handler.

use super::auth_basic::{self, Auth};
use super::vars::Req;
use crate::conf::allow::{Satisfy, allowed};
use crate::log::Level;

/// None when the request may go on, else the status that refuses it.
pub async fn check(r: &mut Req) -> Option<u16> {
    let any = r.conf.satisfy == Satisfy::Any;
    let mut refused = None;
    match allowed(&r.conf.access_rules, r.client_ip()) {
        Some(true) if any => return None,
        Some(false) => {
            if !any {
                crate::log_conn!(
                    Level::Error,
                    r.conn.number,
                    "access forbidden by rule{}",
                    r.log_context(None)
                );
                return Some(403);
            }
            refused = Some(403);
        }
        _ => {}
    }
    match auth_basic::check(r).await {
        Auth::Declined => {}
        Auth::Allowed if any => return None,
        Auth::Allowed => {}
        Auth::Refused(code @ (401 | 403)) if any => {
            // A 401 stands over a 403, as nginx's access_code.
            if refused != Some(401) {
                refused = Some(code);
            }
        }
        Auth::Refused(code) => return Some(code),
    }
    refused
}
