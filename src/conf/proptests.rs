//! Property tests of the whole configuration path (lexer, tree, directive
//! table): arbitrary text and token-level mutations of a valid configuration
//! never panic, and every error that names a place names a line inside the
//! text. There is no printer to round-trip through, so these check only
//! that. Texts that could make the build ask the system resolver (a host
//! name where an address goes) are parsed but not built, to keep the tests
//! hermetic.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

use super::build::build_with_warnings;
use super::testutil::paths;
use super::tree::{Directive, Files, TreeParser};
use super::{ConfError, Config};

/// A valid configuration, one piece per whitespace-separated word; the
/// mutations move, drop, double and replace these pieces.
const SEED: &str = r#"
worker_processes 2 ;
worker_shutdown_timeout 10s ;
events { worker_connections 64 ; }
http {
    log_format w "$remote_addr\t$status" ;
    access_log off ;
    keepalive_timeout 30s 10 ;
    keepalive_requests 100 ;
    client_max_body_size 1g ;
    large_client_header_buffers 4 8k ;
    proxy_buffers 8 4k ;
    proxy_read_timeout 1h30m ;
    resolver 127.0.0.1 valid=30s ;
    upstream u {
        zone z 64k ;
        server 127.0.0.1:9 weight=2 max_fails=3 fail_timeout=10s ;
        server unix:/nonexistent/sluice-prop.sock backup ;
        keepalive 4 ;
    }
    server {
        listen 127.0.0.1:8080 ;
        server_name a.example '*.b.example' ;
        location / { proxy_pass http://u ; }
        location = /x { return 200 "x\n" ; }
        location ~ ^/r/(\d+)$ {
            if ( $arg_a = 1 ) { return 404 ; }
            rewrite ^/r/(\d+)$ /n/$1 last ;
        }
        location /n/ { return 301 http://127.0.0.1:8080/ ; }
    }
}
stream {
    server { listen 127.0.0.1:9000 ; proxy_pass 127.0.0.1:9 ; proxy_timeout 1m ; }
}
"#;

/// Pieces the mutations insert: syntax, limits and junk.
const DICT: &[&str] = &[
    "{",
    "}",
    ";",
    "\"",
    "'",
    "\\",
    "#",
    "$",
    "${",
    "\0",
    "\u{ff}",
    "\n",
    "0",
    "-1",
    "1g",
    "68y",
    "25d",
    "500ms",
    "9223372036854775807",
    "99999999999999999999999",
    "http",
    "server",
    "location",
    "upstream",
    "events",
    "include",
    "zone",
    "if",
    "(",
    ")",
];

/// Args that the build may take to the system resolver: a host name in a
/// `listen`, `server`, `proxy_pass` or `resolver`. Anything without a
/// letter is an address literal at worst (inet_aton reads `99999`).
fn may_look_up(dirs: &[Directive]) -> bool {
    const KNOWN: &[&str] = &[
        "127.0.0.1",
        "127.0.0.1:8080",
        "127.0.0.1:9",
        "127.0.0.1:9000",
        "http://u",
        "unix:/nonexistent/sluice-prop.sock",
        "valid=30s",
        "weight=2",
        "max_fails=3",
        "fail_timeout=10s",
        "backup",
    ];
    dirs.iter().any(|d| {
        let risky = matches!(
            d.name.as_str(),
            "listen" | "server" | "proxy_pass" | "resolver" | "include"
        ) && d
            .args
            .iter()
            .any(|a| !KNOWN.contains(&a.as_str()) && a.bytes().any(|b| b.is_ascii_alphabetic()));
        risky || d.block.as_deref().is_some_and(may_look_up)
    })
}

/// Parses (and, when hermetic, builds) the text; panics if an error names a
/// line outside it.
fn check(text: &str) {
    let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
    let in_text = |e: &ConfError| {
        if let Some(src) = &e.src {
            assert!(src.file.is_some(), "{e}");
            assert!(src.line >= 1 && src.line <= lines, "{e} (of {lines} lines)");
        }
    };
    let mut files = Files::default();
    let mut tp = TreeParser::new(Path::new("/nonexistent"), &mut files);
    let (dirs, err) = tp.parse_text(text, Some(Arc::new(PathBuf::from("/t.conf"))));
    if let Some(e) = &err {
        in_text(e);
    }
    if may_look_up(&dirs) {
        return;
    }
    let built: Result<(Config, Vec<ConfError>), ConfError> =
        build_with_warnings(&paths(), dirs, files, err);
    match built {
        Ok((_, warnings)) => warnings.iter().for_each(in_text),
        Err(e) => in_text(&e),
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(prop::sample::Index),
    Double(prop::sample::Index),
    Swap(prop::sample::Index, prop::sample::Index),
    Replace(prop::sample::Index, prop::sample::Index),
    Insert(prop::sample::Index, prop::sample::Index),
    Cut(prop::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let i = any::<prop::sample::Index>;
    prop_oneof![
        i().prop_map(Edit::Delete),
        i().prop_map(Edit::Double),
        (i(), i()).prop_map(|(a, b)| Edit::Swap(a, b)),
        (i(), i()).prop_map(|(a, b)| Edit::Replace(a, b)),
        (i(), i()).prop_map(|(a, b)| Edit::Insert(a, b)),
        i().prop_map(Edit::Cut),
    ]
}

/// The seed with the edits applied, its pieces joined by a space or, after
/// `;`, `{` and `}`, a newline.
fn mutate(edits: &[Edit]) -> String {
    let mut p: Vec<String> = SEED.split_ascii_whitespace().map(String::from).collect();
    let dict = |k: &prop::sample::Index| DICT[k.index(DICT.len())].to_string();
    for e in edits {
        if p.is_empty() {
            break;
        }
        let n = p.len();
        match e {
            Edit::Delete(a) => {
                p.remove(a.index(n));
            }
            Edit::Double(a) => {
                let i = a.index(n);
                p.insert(i, p[i].clone());
            }
            Edit::Swap(a, b) => p.swap(a.index(n), b.index(n)),
            Edit::Replace(a, k) => p[a.index(n)] = dict(k),
            Edit::Insert(a, k) => p.insert(a.index(n + 1), dict(k)),
            Edit::Cut(a) => p.truncate(a.index(n + 1)),
        }
    }
    let mut out = String::new();
    for w in &p {
        out.push_str(w);
        out.push(if matches!(w.as_str(), ";" | "{" | "}") {
            '\n'
        } else {
            ' '
        });
    }
    out
}

#[test]
fn the_seed_is_valid() {
    assert!(!may_look_up(
        &TreeParser::new(Path::new("/"), &mut Files::default())
            .parse_text(SEED, None)
            .0
    ));
    let text = mutate(&[]);
    super::testutil::try_build(&text).expect("the seed builds");
}

#[test]
fn errors_of_the_lexer_name_lines_inside() {
    check("a \"b;\n\n\n");
    check("a {\n b;\n");
    check("x;\n\0");
    check(&"a {\n".repeat(500));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::proptest_cases(1000)))]

    #[test]
    fn mutated_configs_never_panic(edits in prop::collection::vec(edit(), 1..8)) {
        check(&mutate(&edits));
    }

    #[test]
    fn config_like_text_never_panics(text in "[a-z_ {};\"'\\\\#$\n0-9.:/=~^()*-]{0,300}") {
        check(&text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_lexer(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = super::lexer::tokenize(&text) {
            let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
            prop_assert!(e.line >= 1 && e.line <= lines);
        }
    }
}
