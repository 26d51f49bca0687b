//! A worker's cache of names looked up for `proxy_pass` with variables, on
//! the DNS client of `dns`. Called by the HTTP server.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Answer, Client};
use crate::conf::model::Resolver;

/// A worker's cache of names looked up for `proxy_pass` with variables, as
/// nginx's: an answer is kept until it expires, errors and NXDOMAIN are not
/// kept, an entry unused for 30 s is dropped, and requests for a name being
/// looked up wait for that one lookup.
pub struct Cache {
    client: Client,
    /// Turns the order of cached addresses (nginx rotates it at random), so
    /// that requests spread over them.
    turn: AtomicUsize,
    entries: std::sync::Mutex<std::collections::HashMap<String, Entry>>,
}

type Shared = tokio::sync::watch::Receiver<Option<Result<Vec<IpAddr>, u16>>>;

enum Entry {
    Ready {
        addrs: Vec<IpAddr>,
        until: Instant,
        used: Instant,
    },
    Pending(Shared),
}

/// Entries unused this long are dropped.
const UNUSED: Duration = Duration::from_secs(30);

impl Default for Cache {
    fn default() -> Self {
        Cache::new()
    }
}

impl Cache {
    pub fn new() -> Cache {
        Cache {
            client: Client::new(),
            turn: AtomicUsize::new(0),
            entries: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The addresses of `host`, or the nginx error code (3 for NXDOMAIN).
    pub async fn lookup(&self, host: &str, r: &Resolver) -> Result<Vec<IpAddr>, u16> {
        let host = host.to_ascii_lowercase();
        // Resolvers that ask for other families keep apart.
        let key = format!("{host}/{}{}", u8::from(r.ipv4), u8::from(r.ipv6));
        loop {
            let mut wait: Option<Shared> = None;
            let mine = {
                let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                map.retain(|_, e| match e {
                    Entry::Ready { until, used, .. } => *until > now && now - *used < UNUSED,
                    // A lookup whose request went away is forgotten.
                    Entry::Pending(rx) => rx.has_changed().is_ok(),
                });
                match map.get_mut(&key) {
                    Some(Entry::Ready { addrs, used, .. }) => {
                        *used = now;
                        let mut out = addrs.clone();
                        if out.len() > 1 {
                            let k = self.turn.fetch_add(1, Ordering::Relaxed) % out.len();
                            out.rotate_left(k);
                        }
                        return Ok(out);
                    }
                    Some(Entry::Pending(rx)) => {
                        wait = Some(rx.clone());
                        None
                    }
                    None => {
                        let (tx, rx) = tokio::sync::watch::channel(None);
                        map.insert(key.clone(), Entry::Pending(rx));
                        Some(tx)
                    }
                }
            };
            if let Some(mut rx) = wait {
                // Another request is looking it up; a dropped sender (that
                // request went away) means: look again.
                let done = rx
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|v| v.clone());
                match done {
                    Some(result) => return result,
                    None => continue,
                }
            }
            let Some(tx) = mine else { continue };
            let result = match self.client.resolve(&host, r).await {
                Ok(Answer::Addrs { addrs, valid }) => Ok((addrs, valid)),
                Ok(Answer::NxDomain) => Err(3),
                Err(e) => Err(e.code()),
            };
            let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            let out = match result {
                Ok((addrs, valid)) => {
                    let now = Instant::now();
                    map.insert(
                        key.clone(),
                        Entry::Ready {
                            addrs: addrs.clone(),
                            until: now + valid,
                            used: now,
                        },
                    );
                    Ok(addrs)
                }
                Err(code) => {
                    map.remove(&key);
                    Err(code)
                }
            };
            let _ = tx.send(Some(out.clone()));
            return out;
        }
    }
}
