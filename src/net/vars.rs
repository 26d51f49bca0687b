//! Variables that need no request or session, for http and stream alike:
//! `$hostname`, `$msec`, `$time_local`, `$time_iso8601` and
//! `$nginx_version` (the nginx version sluice follows, as `-v` prints it).

/// `$hostname`, `$msec`, `$time_local`, `$time_iso8601`, `$nginx_version`
/// (else empty).
pub fn value(v: &crate::conf::vars::Var) -> String {
    use crate::conf::vars::Var;
    match v {
        Var::Hostname => nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        Var::Msec => {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            format!("{}.{:03}", d.as_secs(), d.subsec_millis())
        }
        Var::TimeLocal => chrono::Local::now()
            .format("%d/%b/%Y:%H:%M:%S %z")
            .to_string(),
        Var::TimeIso8601 => chrono::Local::now()
            .format("%Y-%m-%dT%H:%M:%S%:z")
            .to_string(),
        Var::NginxVersion => crate::NGINX_VERSION.to_string(),
        _ => String::new(),
    }
}

/// `$binary_remote_addr`: the address's 4 or 16 bytes as they are (kept in
/// the text as `octets` does, given back as bytes where it goes out).
pub fn binary_addr(ip: Option<std::net::IpAddr>) -> String {
    match ip {
        Some(std::net::IpAddr::V4(ip)) => crate::octets::text(&ip.octets()).into_owned(),
        Some(std::net::IpAddr::V6(ip)) => crate::octets::text(&ip.octets()).into_owned(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::vars::Var;

    #[test]
    fn shapes() {
        assert_eq!(value(&Var::NginxVersion), crate::NGINX_VERSION);
        let msec = value(&Var::Msec);
        let (s, ms) = msec.split_once('.').unwrap();
        assert!(s.parse::<u64>().unwrap() > 1_600_000_000 && ms.len() == 3);
        assert_eq!(
            value(&Var::TimeLocal).len(),
            "01/Dec/2026:10:00:00 +0000".len()
        );
        assert!(!value(&Var::Hostname).is_empty());
        assert_eq!(value(&Var::Uri), "");
    }
}
