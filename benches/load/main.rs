//! The benchmark harness: seeds realistic data at several sizes straight
//! through SQL, starts the real `ephemera` binary against SQLite and
//! PostgreSQL, drives it over HTTP and websockets, and prints tables that can
//! be compared across runs and machines (the README keeps the latest).
//!
//! `scripts/bench [options]` runs it (`cargo bench --bench load -- [options]`,
//! after starting PostgreSQL). Under `cargo test` (no `--bench` argument) it
//! runs once at a tiny size so CI keeps it working; nothing here asserts a time.
//!
//! What each part measures:
//! - [`load`]: requests per second at a fixed concurrency (closed loop) and
//!   latency percentiles at a fixed request rate (open loop, measured from
//!   when each request was due, so queueing shows).
//! - [`plain`]: the same SQL statements the server ran for those requests
//!   (captured from its `ephemera::sql` trace log), replayed straight against
//!   the database at the same concurrency, and through pgbench on PostgreSQL.
//! - [`subs`]: graphql-transport-ws subscribers, RSS per idle subscriber and
//!   the time from `createStatus` to delivery.
//! - [`events`]: the change log across instances (three on PostgreSQL):
//!   its statements per instance idle and under a posting rate, delivery
//!   latency from one instance to subscribers on all, and posting
//!   throughput with subscribers attached against without.
//! - [`purge`]: the status purge job against a plain batched `DELETE`.
//! - [`attack`]: the per-author page's throughput while slow-body
//!   connections and a sign-in flood run, as a ratio to the same without.
//! - [`peer`]: PostGraphile 5 on the same PostgreSQL database, side by side
//!   with ephemera in alternating rounds on the per-author page, a status by
//!   id and the page with its authors: throughput, latency at one rate, CPU
//!   per request (server and database) and RSS of each.
//! - [`floor`]: async-graphql alone on the tray's and the per-author page's
//!   queries, with their values in memory: the least a page costs on this stack.

#![expect(
    clippy::expect_used,
    reason = "a benchmark that cannot go on should stop at once"
)]

mod attack;
mod cpu;
mod events;
mod floor;
mod load;
mod peer;
mod plain;
mod purge;
mod report;
mod seed;
mod server;
mod subs;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use report::Report;
use seed::Db;

/// The server's allocator, so that the SQL replay and the load generator
/// are not slowed by glibc's malloc where the server is not.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Options of a benchmark run.
#[derive(Debug, Clone, Parser)]
#[command(name = "bench", about = "ephemera's benchmark harness")]
pub struct Opts {
    /// Live statuses and moments at each size, smallest first.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000u64, 1_000_000])]
    pub sizes: Vec<u64>,
    /// Accounts seeded.
    #[arg(long, default_value_t = 100_000)]
    pub users: u64,
    /// Accepted friends each account has (even; at least 2, fewer than
    /// the accounts). With `--users 1000 --sizes 10000,1000000` authors have 10
    /// and 1,000 live statuses: the per-author page is full at both sizes.
    #[arg(long, default_value_t = 50)]
    pub friends: u64,
    /// Databases to run on.
    #[arg(long, value_delimiter = ',', default_values = ["sqlite", "postgres"])]
    pub dbs: Vec<Db>,
    /// Seconds each measurement runs.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Requests in flight in the throughput runs (and pgbench clients).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Open-loop rate as a fraction of the throughput measured at the
    /// smallest size (the same rate is then used at every size).
    #[arg(long, default_value_t = 0.5)]
    pub rate_fraction: f64,
    /// Subscriber counts to step through.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000usize, 5_000, 10_000])]
    pub subscribers: Vec<usize>,
    /// Expired statuses (each with media) the purge runs drain.
    #[arg(long, default_value_t = 1_000_000)]
    pub purge_rows: u64,
    /// Rows per purge transaction, for the job and the plain `DELETE` alike;
    /// each is measured.
    #[arg(long, value_delimiter = ',', default_values_t = [500u64, 2_000])]
    pub purge_batch: Vec<u64>,
    /// Batches the purge job works on at once (PostgreSQL); each is measured
    /// with each batch size.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 2])]
    pub purge_workers: Vec<u32>,
    /// PostgreSQL URL of a role that may create databases.
    #[arg(
        long,
        env = "EPHEMERA_BENCH_PG_URL",
        default_value = "postgres://ephemera_test:ephemera_test@127.0.0.1:5432/postgres"
    )]
    pub pg_url: String,
    /// Where databases, logs and scripts go.
    #[arg(long, default_value = "target/bench")]
    pub work_dir: PathBuf,
    /// Keep each PostgreSQL database the harness seeded (named in the
    /// progress lines) instead of dropping it, to look at plans afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Slow-body connections of the attack part.
    #[arg(long, default_value_t = 200)]
    pub attack_slow: usize,
    /// Source addresses of the attack part's sign-in flood.
    #[arg(long, default_value_t = 32)]
    pub attack_flooders: u8,
    /// Sign-in attempts a second the attack part's flood sends, in all.
    #[arg(long, default_value_t = 500.0)]
    pub attack_flood_rate: f64,
    /// Leave out parts: any of floor, http, plain, peer, subs, events, purge, attack, start;
    /// `delivery` leaves out all of `events` but the live tray.
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
    /// Only the queries whose name contains one of these (e.g.
    /// `storyTray,statuses`); all when empty.
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<String>,
    /// Accepted (cargo passes it to benchmarks).
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl Opts {
    /// The tiny run `cargo test` does: every part once, in a second or two each.
    fn smoke() -> Self {
        let pg_url = std::env::var("EPHEMERA_TEST_PG_URL").unwrap_or_else(|_| {
            "postgres://ephemera_test:ephemera_test@127.0.0.1:5432/postgres".into()
        });
        Self {
            sizes: vec![300, 600],
            users: 300,
            friends: 50,
            dbs: vec![Db::Sqlite, Db::Postgres],
            seconds: 0.4,
            concurrency: 4,
            rate_fraction: 0.5,
            subscribers: vec![10, 30],
            purge_rows: 1_000,
            purge_batch: vec![100],
            purge_workers: vec![2],
            pg_url,
            work_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-smoke"),
            attack_slow: 20,
            attack_flooders: 4,
            attack_flood_rate: 200.0,
            skip: Vec::new(),
            queries: Vec::new(),
            keep: false,
            bench: false,
        }
    }

    pub fn runs(&self, part: &str) -> bool {
        !self.skip.iter().any(|s| s == part)
    }

    /// Whether the query named `name` is measured.
    pub fn measures(&self, name: &str) -> bool {
        self.queries.is_empty() || self.queries.iter().any(|q| name.contains(q.as_str()))
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let opts = if bench { Opts::parse() } else { Opts::smoke() };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = runtime.block_on(run(&opts));
    println!("{}", report.render(&opts));
    if !bench {
        // The smoke run checks the harness works, never how fast anything is.
        report.assert_complete();
    }
}

async fn run(opts: &Opts) -> Report {
    std::fs::create_dir_all(&opts.work_dir).expect("work dir");
    let mut report = Report::new();
    if opts.runs("floor") {
        eprintln!("execution floor");
        report.floor(floor::measure(opts.duration()).await);
    }
    for &db in &opts.dbs {
        let mut bench = seed::Bench::create(db, opts).await;
        let mut rates = load::Rates::default();
        for &size in &opts.sizes {
            eprintln!("[{db}] seeding to {size} statuses and moments");
            let seeded = bench.grow(size).await;
            report.seeded(db, size, seeded);
            let captured = if opts.runs("plain") {
                plain::capture(&bench, opts).await
            } else {
                Default::default()
            };
            let server = bench.serve(&[]).await;
            report.server_start(db, size, &server);
            if opts.runs("http") {
                for query in load::queries(&bench) {
                    if !opts.measures(query.name) {
                        continue;
                    }
                    eprintln!("[{db} {size}] {}", query.name);
                    let http = load::measure(&server, &query, opts, &mut rates).await;
                    let sql = match captured.get(query.name) {
                        Some(statements) => Some(plain::measure(&bench, statements, opts).await),
                        None => None,
                    };
                    report.http(db, size, query.name, http, sql);
                }
            }
            report.server_after_load(db, size, server.rss_kib(), server.anon_kib());
            if db == Db::Postgres && opts.runs("peer") {
                eprintln!("[{db} {size}] PostGraphile side by side");
                report.peer(peer::measure(&bench, &server, opts).await);
            }
            server.stop().await;
        }
        if opts.runs("attack") {
            eprintln!("[{db}] load under attack");
            let result = attack::measure(&bench, opts).await;
            report.attack(db, result);
        }
        if opts.runs("subs") {
            eprintln!("[{db}] subscribers");
            let server = bench.serve(&[]).await;
            let results = subs::measure(&server, &bench, opts).await;
            report.subs(db, results);
            server.stop().await;
        }
        if opts.runs("events") {
            eprintln!("[{db}] events across instances");
            let result = events::measure(&bench, opts).await;
            report.events(db, result);
        }
        if opts.runs("purge") {
            // SQLite has one writer: its job runs one batch at a time.
            let workers = match db {
                Db::Postgres => opts.purge_workers.clone(),
                Db::Sqlite => vec![1],
            };
            for &batch in &opts.purge_batch {
                for &w in &workers {
                    eprintln!(
                        "[{db}] purge of {} expired statuses, {batch} per batch, {w} at once",
                        opts.purge_rows
                    );
                    let result = purge::measure(&mut bench, opts.purge_rows, batch, w).await;
                    report.purge(db, result);
                }
            }
        }
        bench.finish(opts.keep).await;
    }
    report
}
