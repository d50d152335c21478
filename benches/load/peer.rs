//! The peer: PostGraphile 5, what a team would otherwise put in front of
//! this database, measured side by side with ephemera on PostgreSQL.
//!
//! It comes from the npm registry, pinned by `bench/postgraphile`'s
//! lockfile (with Node 22, which it needs, as a package of its own), and is
//! installed with `npm ci` on first use. It serves the very database the
//! harness seeded, through the `ephemera_peer` role, which may read every
//! table and nothing else (`scripts/postgres.sh` makes the role; each run
//! grants it the seeded database). The two servers never run at once: each
//! query is measured in alternating rounds (ephemera, the peer, the peer,
//! ephemera, …), so that a slower phase of the machine falls on both, then
//! at one fixed open-loop rate for both. CPU is each server's process and
//! every PostgreSQL backend while it runs; RSS is each process's afterwards.
//!
//! The pages are the same rows and fields on both sides: the per-author
//! page (ten statuses, newest first, with their media), a status by id,
//! and the page with each status's author. ephemera is asked as the apps
//! ask it, signed in (so it also checks the viewer's blocks, the author's
//! audience and the statuses' expiry, which the peer does not); the peer
//! anonymously, by its own names (`allStatuses(condition:, orderBy:)`,
//! `statusByRowId`, `userByAuthorId`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ephemera::graphql::types::{IdKind, id as global};
use hdrhistogram::Histogram;
use hyper::header::HeaderValue;
use serde_json::json;
use tokio::process::{Child, Command};

use crate::Opts;
use crate::cpu;
use crate::load::{self, Client, Query, Request};
use crate::seed::Bench;
use crate::server::{Server, free_port, status_kib};

/// Where the peer's package, lockfile and start-up script are.
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/postgraphile");
/// The read-only role the peer connects as.
const ROLE: &str = "ephemera_peer";
/// Closed-loop rounds each server gets per query.
const ROUNDS: usize = 3;
/// Pages asked for, rotated through (different authors and statuses).
const VARIANTS: i64 = 8;

/// How one server did on one query.
#[derive(Clone, Debug, Default)]
pub struct Side {
    /// Answers per second with the requests in flight, over all rounds.
    pub throughput: f64,
    pub closed_p50_ms: f64,
    pub closed_p99_ms: f64,
    /// At the open-loop rate both share.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// CPU per answered request in µs: in all, the server's process, and
    /// PostgreSQL's backends.
    pub cpu_us: f64,
    pub server_cpu_us: f64,
    pub db_cpu_us: f64,
    /// The server's RSS after its rounds, in KiB.
    pub rss_kib: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// One query on both servers.
#[derive(Clone, Debug)]
pub struct PeerResult {
    pub size: u64,
    pub query: &'static str,
    /// The open-loop rate used for both.
    pub rate: f64,
    pub ours: Side,
    pub peer: Side,
}

/// The peer's process.
struct Peer {
    child: Child,
    addr: String,
    pid: u32,
    log: PathBuf,
}

/// The same page asked of each server.
struct Pair {
    name: &'static str,
    ours: Query,
    peer: Query,
}

const OUR_PAGE: &str = "query($u: ID!) { statuses(userId: $u, first: 10) { edges { cursor node { \
    id caption bgColor createdAt expiresAt media { id width height } } } \
    pageInfo { hasNextPage endCursor } } }";

const PEER_PAGE: &str = "query($u: BigInt!) { allStatuses(condition: { authorId: $u }, \
    orderBy: [CREATED_AT_DESC, ROW_ID_DESC], first: 10) { edges { cursor node { \
    rowId caption bgColor createdAt expiresAt mediaByMediaId { rowId width height } } } \
    pageInfo { hasNextPage endCursor } } }";

const OUR_STATUS: &str = "query($s: ID!) { status(id: $s) { \
    id caption bgColor createdAt expiresAt media { id width height } } }";

const PEER_STATUS: &str = "query($s: BigInt!) { statusByRowId(rowId: $s) { \
    rowId caption bgColor createdAt expiresAt mediaByMediaId { rowId width height } } }";

const OUR_NESTED: &str = "query($u: ID!) { statuses(userId: $u, first: 10) { edges { cursor node { \
    id caption bgColor createdAt expiresAt media { id width height } \
    author { id username displayName } } } pageInfo { hasNextPage endCursor } } }";

const PEER_NESTED: &str = "query($u: BigInt!) { allStatuses(condition: { authorId: $u }, \
    orderBy: [CREATED_AT_DESC, ROW_ID_DESC], first: 10) { edges { cursor node { \
    rowId caption bgColor createdAt expiresAt mediaByMediaId { rowId width height } \
    userByAuthorId { rowId username displayName } } } pageInfo { hasNextPage endCursor } } }";

/// The three pages, with the same authors and statuses on both sides.
async fn pairs(bench: &Bench) -> Vec<Pair> {
    let body = |query: &str, vars: serde_json::Value| {
        Bytes::from(json!({ "query": query, "variables": vars }).to_string())
    };
    let ours = |query: &str, vars: serde_json::Value, viewer: i64| Request {
        body: body(query, vars),
        auth: Some(
            HeaderValue::from_str(&format!("Bearer {}", bench.token(viewer)))
                .expect("token header"),
        ),
    };
    let peer = |query: &str, vars: serde_json::Value| Request {
        body: body(query, vars),
        auth: None,
    };
    let authors = bench.status_authors(VARIANTS);
    let statuses = bench.status_ids(VARIANTS).await;
    let by_author = |name, our: &str, their: &str| Pair {
        name,
        ours: Query {
            name,
            bodies: authors
                .iter()
                .zip(1..)
                .map(|(a, v)| ours(our, json!({ "u": global(IdKind::User, *a).0 }), v))
                .collect(),
        },
        peer: Query {
            name,
            bodies: authors
                .iter()
                .map(|a| peer(their, json!({ "u": a.to_string() })))
                .collect(),
        },
    };
    vec![
        by_author(load::STATUSES_NAME, OUR_PAGE, PEER_PAGE),
        Pair {
            name: "status(id)",
            ours: Query {
                name: "status(id)",
                bodies: statuses
                    .iter()
                    .zip(1..)
                    .map(|(s, v)| ours(OUR_STATUS, json!({ "s": global(IdKind::Status, *s).0 }), v))
                    .collect(),
            },
            peer: Query {
                name: "status(id)",
                bodies: statuses
                    .iter()
                    .map(|s| peer(PEER_STATUS, json!({ "s": s.to_string() })))
                    .collect(),
            },
        },
        by_author(
            "statuses(userId, first: 10) { author }",
            OUR_NESTED,
            PEER_NESTED,
        ),
    ]
}

/// Installs the peer from its lockfile unless it is there already.
fn install() {
    if Path::new(DIR).join("node_modules/.bin/node").exists() {
        return;
    }
    eprintln!("  installing PostGraphile (npm ci in {DIR})");
    let status = std::process::Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(DIR)
        .stdout(Stdio::null())
        .status()
        .expect("run npm (Node's package manager) to install the peer");
    assert!(status.success(), "npm ci in {DIR} failed");
}

/// The seeded database's URL for the read-only role.
fn peer_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a database URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{ROLE}:{ROLE}@{host}")
}

impl Peer {
    /// Grants the read-only role the seeded database and starts the peer
    /// on it, once it answers a query.
    async fn start(bench: &Bench) -> Self {
        install();
        let name = bench.url.rsplit_once('/').map_or("", |(_, n)| n);
        let name = name.split_once('?').map_or(name, |(n, _)| n);
        bench
            .exec(&format!("GRANT CONNECT ON DATABASE {name} TO {ROLE}"))
            .await;
        bench
            .exec(&format!("GRANT USAGE ON SCHEMA public TO {ROLE}"))
            .await;
        bench
            .exec(&format!(
                "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {ROLE}"
            ))
            .await;
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let log = bench.dir.join(format!("postgraphile-{port}.log"));
        let child = Command::new(Path::new(DIR).join("node_modules/.bin/node"))
            .arg("server.mjs")
            .current_dir(DIR)
            .env("DATABASE_URL", peer_url(&bench.url))
            .env("PORT", port.to_string())
            .env("GRAPHILE_ENV", "production")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("peer log"))
            .kill_on_drop(true)
            .spawn()
            .expect("start PostGraphile");
        let pid = child.id().expect("peer pid");
        let started = Instant::now();
        let client = reqwest::Client::new();
        loop {
            let answered = client
                .post(format!("http://{addr}/graphql"))
                .json(&json!({ "query": "{ __typename }" }))
                .send()
                .await;
            if let Ok(r) = answered
                && r.status().is_success()
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "PostGraphile did not become ready; see {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            child,
            addr,
            pid,
            log,
        }
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Both servers on each page at the seeded size. ephemera's `server` is
/// running; the peer is started here and stopped afterwards.
pub async fn measure(bench: &Bench, server: &Server, opts: &Opts) -> Vec<PeerResult> {
    let peer = Peer::start(bench).await;
    eprintln!("  PostGraphile ready (log: {})", peer.log.display());
    let mut results = Vec::new();
    for pair in pairs(bench).await {
        if !opts.measures(pair.name) {
            continue;
        }
        eprintln!(
            "[{} {}] {} against PostGraphile",
            bench.db, bench.size, pair.name
        );
        let result = load::on_load_thread(compare(server, &peer, &pair, opts));
        results.push(PeerResult {
            size: bench.size,
            ..result
        });
    }
    peer.stop().await;
    results
}

/// What one server did in its rounds so far.
struct Tallied {
    ok: u64,
    seconds: f64,
    cpu: Duration,
    own_cpu: Duration,
    latency: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Tallied {
    fn new() -> Self {
        Self {
            ok: 0,
            seconds: 0.0,
            cpu: Duration::ZERO,
            own_cpu: Duration::ZERO,
            latency: load::histogram(),
            errors: 0,
            first_error: None,
        }
    }

    /// One closed-loop round against the server `pid` behind `client`.
    async fn round(&mut self, client: &Client, pid: u32, query: &Query, opts: &Opts) {
        let meter = cpu::Meter::start(vec![pid], true);
        let t = load::closed_loop(client, query, opts.concurrency, opts.duration()).await;
        let (all, own) = meter.micros_per(t.ok);
        let per = |us: f64| Duration::from_secs_f64(us * t.ok as f64 / 1e6);
        self.cpu += per(all);
        self.own_cpu += per(own);
        self.ok += t.ok;
        self.seconds += opts.duration().as_secs_f64();
        self.latency
            .add(&t.latency)
            .expect("histograms of one shape");
        self.errors += t.errors;
        if self.first_error.is_none() {
            self.first_error = t.first_error;
        }
    }

    fn side(self, open: (Histogram<u64>, load::Tally), pid: u32) -> Side {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / self.ok.max(1) as f64;
        let (latency, open) = open;
        Side {
            throughput: self.ok as f64 / self.seconds.max(f64::MIN_POSITIVE),
            closed_p50_ms: load::ms(&self.latency, 0.5),
            closed_p99_ms: load::ms(&self.latency, 0.99),
            p50_ms: load::ms(&latency, 0.5),
            p99_ms: load::ms(&latency, 0.99),
            cpu_us: per(self.cpu),
            server_cpu_us: per(self.own_cpu),
            db_cpu_us: per(self.cpu.saturating_sub(self.own_cpu)),
            rss_kib: status_kib(pid, "VmRSS:"),
            errors: self.errors + open.errors,
            first_error: self.first_error.or(open.first_error),
        }
    }
}

/// Alternating closed-loop rounds, then both at one open-loop rate (the
/// rate fraction of the slower one's throughput).
async fn compare(server: &Server, peer: &Peer, pair: &Pair, opts: &Opts) -> PeerResult {
    let (our_client, peer_client) = (Client::new(server), Client::at(&peer.addr));
    let warm = opts.duration() / 4;
    load::closed_loop(&our_client, &pair.ours, opts.concurrency, warm).await;
    load::closed_loop(&peer_client, &pair.peer, opts.concurrency, warm).await;
    let (mut ours, mut theirs) = (Tallied::new(), Tallied::new());
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            ours.round(&our_client, server.pid(), &pair.ours, opts)
                .await;
            theirs.round(&peer_client, peer.pid, &pair.peer, opts).await;
        } else {
            theirs.round(&peer_client, peer.pid, &pair.peer, opts).await;
            ours.round(&our_client, server.pid(), &pair.ours, opts)
                .await;
        }
    }
    let slower = (ours.ok.min(theirs.ok) as f64) / ours.seconds.max(f64::MIN_POSITIVE);
    let rate = (slower * opts.rate_fraction).clamp(1.0, load::MAX_OPEN_RATE);
    let our_open = load::open_loop(&our_client, &pair.ours, rate, opts.duration()).await;
    let peer_open = load::open_loop(&peer_client, &pair.peer, rate, opts.duration()).await;
    PeerResult {
        size: 0,
        query: pair.name,
        rate,
        ours: ours.side(our_open, server.pid()),
        peer: theirs.side(peer_open, peer.pid),
    }
}
