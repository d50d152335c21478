//! The import graph: arrows point down (see the README's module map). Each
//! top-level module of `src/` has a layer; a file may name (`crate::x` in a
//! `use` line or a path) only modules of its own layer or below, and the
//! layers below GraphQL name neither the web framework nor the GraphQL
//! engine. Reads the source as text; no server needed.

use std::path::{Path, PathBuf};

/// The layers, lowest first, and the top-level modules in each.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "state",
        &[
            "state", "config", "error", "clock", "ids", "signing", "cursor", "auth", "throttle",
            "db", "entity", "storage", "events",
        ],
    ),
    ("domain", &["domain"]),
    ("jobs", &["jobs"]),
    ("graphql", &["graphql"]),
    ("http", &["http"]),
    ("wiring", &["app"]),
];

/// Crates only the GraphQL layer and above may name.
const WEB_CRATES: &[&str] = &["axum", "async_graphql", "hyper", "tower", "tower_http"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules `text` names through `crate::`.
fn named_modules(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.push(name);
            }
        } else {
            out.push(
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    out
}

/// Every arrow that points up, and every web crate named below GraphQL.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let graphql = layer_of("graphql").unwrap();
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        let Some(own) = layer_of(&top) else {
            // main.rs, lib.rs: the binary and the module list sit above all.
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for name in named_modules(&text) {
            match layer_of(&name) {
                Some(theirs) if theirs > own => found.push(format!(
                    "{} ({}) names crate::{name} ({})",
                    rel.display(),
                    LAYERS[own].0,
                    LAYERS[theirs].0
                )),
                _ => {}
            }
        }
        if own < graphql {
            for krate in WEB_CRATES {
                if text.contains(&format!("{krate}::")) {
                    found.push(format!(
                        "{} ({}) names {krate}",
                        rel.display(),
                        LAYERS[own].0
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn arrows_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "imports that point up:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_arrow_up_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let domain = dir.path().join("domain");
    std::fs::create_dir_all(&domain).unwrap();
    std::fs::write(
        domain.join("status.rs"),
        "use crate::app::AppState;\nuse crate::{db, graphql};\nfn f(_: axum::Router) {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("state.rs"),
        "use crate::domain::page::Cursors;\n",
    )
    .unwrap();
    let mut found = violations(dir.path());
    found.sort();
    assert_eq!(
        found,
        vec![
            "domain/status.rs (domain) names axum",
            "domain/status.rs (domain) names crate::app (wiring)",
            "domain/status.rs (domain) names crate::graphql (graphql)",
            "state.rs (state) names crate::domain (domain)",
        ]
    );
}
