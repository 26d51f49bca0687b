//! The configuration's settings as a list (every location's and server's).

use std::sync::Arc;

use crate::conf::model::{Http, LocConf, Location, ProxyPass};

fn location_confs<'a>(l: &'a Location, out: &mut Vec<&'a Arc<LocConf>>) {
    out.push(&l.conf);
    for n in &l.locations {
        location_confs(n, out);
    }
}

/// Every location's (and server's) settings.
pub fn all_confs(http: &Http) -> Vec<&Arc<LocConf>> {
    let mut out = Vec::new();
    for s in &http.servers {
        out.push(&s.conf);
        for l in &s.locations {
            location_confs(l, &mut out);
        }
    }
    out
}

fn location_passes<'a>(l: &'a Location, out: &mut Vec<(&'a Arc<LocConf>, &'a ProxyPass)>) {
    if let Some(p) = &l.proxy_pass {
        out.push((&l.conf, p));
    }
    for n in &l.locations {
        location_passes(n, out);
    }
}

/// Every location's `proxy_pass` without variables, with its settings.
pub fn all_passes(http: &Http) -> Vec<(&Arc<LocConf>, &ProxyPass)> {
    let mut out = Vec::new();
    for s in &http.servers {
        for l in &s.locations {
            location_passes(l, &mut out);
        }
    }
    out
}
