//! Fetches GraphiQL and its runtime from the npm registry (pinned by
//! `web/package-lock.json`) when they are not there yet, so `src/http.rs` can
//! embed them in the binary. Nothing third-party is kept in the repository.

use std::path::Path;
use std::process::{Command, exit};

fn main() {
    println!("cargo:rerun-if-changed=web/package.json");
    println!("cargo:rerun-if-changed=web/package-lock.json");
    println!("cargo:rerun-if-changed=web/node_modules/graphiql/package.json");
    let web =
        Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into())).join("web");
    let needed = [
        "graphiql/graphiql.min.js",
        "graphiql/graphiql.min.css",
        "react/umd/react.production.min.js",
        "react-dom/umd/react-dom.production.min.js",
        "graphql-ws/umd/graphql-ws.min.js",
    ];
    if needed
        .iter()
        .all(|f| web.join("node_modules").join(f).exists())
    {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
        .current_dir(&web)
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => {
            eprintln!(
                "`npm ci` in web/ failed ({other:?}): GraphiQL's assets come from the npm registry at build time"
            );
            exit(1);
        }
    }
}
