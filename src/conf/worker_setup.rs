//! Main-context directives that set up each worker process before it
//! serves: `worker_priority`, `worker_cpu_affinity`, `worker_rlimit_core`,
//! `working_directory` and `env`. Pure; `process::worker` applies them.

use std::path::PathBuf;

use super::ConfError;
use super::build::{Args, Builder, MAIN, Node, Spec, duplicate, invalid_value, not_here};
use super::tree::Directive;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "worker_priority",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_priority,
    },
    Spec {
        name: "worker_cpu_affinity",
        ctx: MAIN,
        args: Args::AtLeast(1),
        block: false,
        set: set_affinity,
    },
    Spec {
        name: "worker_rlimit_core",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_rlimit_core,
    },
    Spec {
        name: "working_directory",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_working_directory,
    },
    Spec {
        name: "env",
        ctx: MAIN,
        args: Args::Exactly(1),
        block: false,
        set: set_env,
    },
];

/// How each worker is set up before it serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerSetup {
    /// `worker_priority N` (-20..20): the workers' nice value.
    pub priority: Option<i32>,
    pub affinity: Option<Affinity>,
    /// `worker_rlimit_core SIZE`.
    pub rlimit_core: Option<u64>,
    /// `working_directory PATH`.
    pub working_directory: Option<PathBuf>,
    /// `env NAME[=VALUE]`: what workers keep of the environment, besides
    /// `TZ`, as nginx keeps it.
    pub env: Vec<(String, Option<String>)>,
}

/// `worker_cpu_affinity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Affinity {
    /// A CPU mask per worker (bit 0 is CPU 0); workers past the list take
    /// the last one.
    Masks(Vec<u128>),
    /// `auto [mask]`: worker N on the Nth CPU of the mask (all CPUs when
    /// none), round the mask again past its end.
    Auto(Option<u128>),
}

impl Affinity {
    /// The CPUs worker `slot` may run on; `online`: how many CPUs there are.
    pub fn cpus_for(&self, slot: usize, online: usize) -> Vec<usize> {
        let bits = |m: u128| (0..128).filter(move |b| m & (1u128 << b) != 0);
        match self {
            Affinity::Masks(masks) => match masks.get(slot).or(masks.last()) {
                Some(&m) => bits(m).collect(),
                None => Vec::new(),
            },
            Affinity::Auto(mask) => {
                let all: Vec<usize> = match mask {
                    Some(m) => bits(*m).collect(),
                    None => (0..online.min(128)).collect(),
                };
                if all.is_empty() {
                    return Vec::new();
                }
                vec![all[slot % all.len()]]
            }
        }
    }
}

fn setup<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut WorkerSetup, ConfError> {
    match n {
        Node::Main(m) => Ok(m.worker_setup()),
        _ => Err(not_here(d)),
    }
}

fn set_priority(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let s = setup(n, d)?;
    if s.priority.is_some() {
        return Err(duplicate(d));
    }
    let a = &d.args[0];
    let (neg, digits) = match a.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, a.strip_prefix('+').unwrap_or(a)),
    };
    let Some(v) = super::build::number::<i32>(digits) else {
        return Err(ConfError::at("invalid number", &d.src));
    };
    let v = if neg { -v } else { v };
    if !(-20..=20).contains(&v) {
        return Err(ConfError::at("invalid number", &d.src));
    }
    s.priority = Some(v);
    Ok(())
}

/// A mask written in binary digits, as nginx reads it.
fn mask(a: &str) -> Option<u128> {
    if a.is_empty() || a.len() > 128 || !a.bytes().all(|b| b == b'0' || b == b'1') {
        return None;
    }
    u128::from_str_radix(a, 2).ok()
}

fn set_affinity(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let s = setup(n, d)?;
    if s.affinity.is_some() {
        return Err(duplicate(d));
    }
    let bad = |a: &str| {
        ConfError::at(
            format!("invalid character \"{a}\" in \"worker_cpu_affinity\""),
            &d.src,
        )
    };
    let affinity = if d.args[0] == "auto" {
        match d.args.len() {
            1 => Affinity::Auto(None),
            2 => Affinity::Auto(Some(mask(&d.args[1]).ok_or_else(|| bad(&d.args[1]))?)),
            _ => {
                return Err(ConfError::at(
                    "invalid number of arguments in \"worker_cpu_affinity\" directive",
                    &d.src,
                ));
            }
        }
    } else {
        let mut masks = Vec::with_capacity(d.args.len());
        for a in &d.args {
            masks.push(mask(a).ok_or_else(|| bad(a))?);
        }
        Affinity::Masks(masks)
    };
    s.affinity = Some(affinity);
    Ok(())
}

fn set_rlimit_core(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let s = setup(n, d)?;
    if s.rlimit_core.is_some() {
        return Err(duplicate(d));
    }
    let v = super::values::parse_offset(&d.args[0]).ok_or_else(|| invalid_value(d))?;
    s.rlimit_core = Some(v);
    Ok(())
}

fn set_working_directory(
    b: &mut Builder,
    d: &Directive,
    n: &mut Node<'_>,
) -> Result<(), ConfError> {
    let prefix = b.paths.prefix.clone();
    let s = setup(n, d)?;
    if s.working_directory.is_some() {
        return Err(duplicate(d));
    }
    s.working_directory = Some(crate::conf::tree::full_name(&prefix, &d.args[0]));
    Ok(())
}

fn set_env(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let s = setup(n, d)?;
    let a = &d.args[0];
    let (name, value) = match a.split_once('=') {
        Some((k, v)) => (k.to_string(), Some(v.to_string())),
        None => (a.clone(), None),
    };
    if name.is_empty() || name.contains('\0') || value.as_deref().is_some_and(|v| v.contains('\0'))
    {
        return Err(invalid_value(d));
    }
    s.env.push((name, value));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    #[test]
    fn worker_setup_parsed() {
        let (c, _) = try_build(
            "worker_priority -5; worker_cpu_affinity 01 10; worker_rlimit_core 500m;
             working_directory /tmp; env TZ; env MALLOC_OPTIONS=x=y; events {}",
        )
        .unwrap();
        let s = &c.main.worker_setup;
        assert_eq!(s.priority, Some(-5));
        assert_eq!(s.affinity, Some(Affinity::Masks(vec![1, 2])));
        assert_eq!(s.rlimit_core, Some(500 << 20));
        assert_eq!(
            s.working_directory.as_deref(),
            Some(std::path::Path::new("/tmp"))
        );
        assert_eq!(
            s.env,
            vec![
                ("TZ".into(), None),
                ("MALLOC_OPTIONS".into(), Some("x=y".into()))
            ]
        );
    }

    #[test]
    fn affinity_per_worker() {
        let m = Affinity::Masks(vec![0b0101, 0b1000]);
        assert_eq!(m.cpus_for(0, 4), vec![0, 2]);
        assert_eq!(m.cpus_for(1, 4), vec![3]);
        assert_eq!(m.cpus_for(5, 4), vec![3]);
        assert_eq!(Affinity::Auto(None).cpus_for(5, 2), vec![1]);
        assert_eq!(Affinity::Auto(Some(0b1100)).cpus_for(0, 8), vec![2]);
        assert_eq!(Affinity::Auto(Some(0b1100)).cpus_for(3, 8), vec![3]);
    }

    #[test]
    fn worker_setup_errors() {
        assert_eq!(
            err("worker_priority 21; events {}"),
            "invalid number in /t.conf:1"
        );
        assert_eq!(
            err("worker_priority x; events {}"),
            "invalid number in /t.conf:1"
        );
        assert_eq!(
            err("worker_cpu_affinity 012; events {}"),
            "invalid character \"012\" in \"worker_cpu_affinity\" in /t.conf:1"
        );
        assert_eq!(
            err("worker_priority 1; worker_priority 2; events {}"),
            "\"worker_priority\" directive is duplicate in /t.conf:1"
        );
        assert_eq!(
            err("events { env X; }"),
            "\"env\" directive is not allowed here in /t.conf:1"
        );
    }
}
