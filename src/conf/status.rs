//! `api [write=on|off]`, `stub_status` and `metrics`: a location's built-in
//! status handlers. Only parsing here; the handlers are `http::status` and
//! `http::metrics`.

use super::ConfError;
use super::build::{Args, Builder, LOC, Node, Spec, duplicate, not_here};
use super::model::Handler;
use super::tree::Directive;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "api",
        ctx: LOC,
        args: Args::Range(0, 1),
        block: false,
        set: set_handler,
    },
    Spec {
        name: "stub_status",
        ctx: LOC,
        args: Args::Range(0, 1),
        block: false,
        set: set_handler,
    },
    Spec {
        name: "metrics",
        ctx: LOC,
        args: Args::Exactly(0),
        block: false,
        set: set_handler,
    },
];

fn set_handler(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Location(l) = n else {
        return Err(not_here(d));
    };
    if l.handler.is_some() {
        return Err(duplicate(d));
    }
    let handler = match d.name.as_str() {
        "api" => {
            let write = match d.args.first().map(String::as_str) {
                None | Some("write=off") => false,
                Some("write=on") => true,
                Some(other) => {
                    return Err(ConfError::at(
                        format!("invalid parameter \"{other}\""),
                        &d.src,
                    ));
                }
            };
            Handler::Api { write }
        }
        "metrics" => Handler::Metrics,
        // nginx takes and ignores an argument (the old `stub_status on`).
        _ => Handler::StubStatus,
    };
    l.handler = Some(handler);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use crate::conf::model::Handler;

    fn handler(conf: &str) -> Option<Handler> {
        let (c, _) = try_build(conf).expect("config");
        let http = c.http.expect("http");
        http.servers[0].locations[0].handler
    }

    #[test]
    fn api_and_stub_status() {
        assert_eq!(
            handler("events {} http { server { location /api { api; } } }"),
            Some(Handler::Api { write: false })
        );
        assert_eq!(
            handler("events {} http { server { location /s { stub_status; } } }"),
            Some(Handler::StubStatus)
        );
        assert_eq!(
            handler("events {} http { server { location /api { api write=on; } } }"),
            Some(Handler::Api { write: true })
        );
        assert_eq!(
            handler("events {} http { server { location /api { api write=off; } } }"),
            Some(Handler::Api { write: false })
        );
        assert!(
            err("events {} http { server { location /api { api write=maybe; } } }")
                .contains("invalid parameter \"write=maybe\"")
        );
        assert!(
            err("events {} http { server { location /api { api; api; } } }")
                .contains("\"api\" directive is duplicate")
        );
        assert!(err("events {} http { server { stub_status; } }").contains("is not allowed here"));
    }

    #[test]
    fn metrics() {
        assert_eq!(
            handler("events {} http { server { location /m { metrics; } } }"),
            Some(Handler::Metrics)
        );
        assert!(
            err("events {} http { server { location /m { metrics on; } } }")
                .contains("invalid number of arguments in \"metrics\" directive")
        );
        assert!(
            err("events {} http { server { location /m { metrics; stub_status; } } }")
                .contains("\"stub_status\" directive is duplicate")
        );
        assert!(err("events {} http { server { metrics; } }").contains("is not allowed here"));
    }
}
