//! The plain-SQL baseline: the statements the server ran for each benchmark
//! request, captured from its `ephemera::sql` trace log (values written in),
//! then replayed straight against the database at the same concurrency,
//! each worker on a connection of its own through the server's own
//! database layer, and on PostgreSQL also through `pgbench`.
//! The server's throughput divided by this is the share HTTP, GraphQL and
//! the server's own code leave of what the database alone could do.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ephemera::db::{DbStats, QueryConnections, RequestDb};
use sea_orm::{ConnectionTrait, Statement};
use tokio::time::Instant;

use crate::Opts;
use crate::cpu;
use crate::load;
use crate::seed::{Bench, Db};

/// The server's default pool size (`EPHEMERA_DB_POOL`), used for the replay's pool too.
const POOL: u32 = 10;

/// Per query: per request variant, the statements it ran, in order.
pub type Captured = HashMap<&'static str, Vec<Vec<String>>>;

/// What the database alone does with those statements.
#[derive(Clone, Debug, Default)]
pub struct SqlResult {
    /// Statements per request.
    pub statements: usize,
    /// Requests' worth of statements per second, replayed from Rust (sqlx).
    pub throughput: f64,
    /// CPU per replayed request, in µs: the harness's (the driver, and
    /// SQLite itself) and, on PostgreSQL, the database's.
    pub cpu_us: f64,
    /// The same through pgbench (PostgreSQL only).
    pub pgbench_tps: Option<f64>,
    pub errors: u64,
}

/// Runs every benchmark request once against a server that logs its SQL and
/// returns what each ran.
pub async fn capture(bench: &Bench, _opts: &Opts) -> Captured {
    let server = bench
        .serve(&[("EPHEMERA_LOG", "warn,ephemera::sql=trace")])
        .await;
    let http = reqwest::Client::new();
    let mut captured = Captured::new();
    for query in load::queries(bench) {
        let mut sets = Vec::new();
        for req in &query.bodies {
            let before = std::fs::metadata(&server.log).map_or(0, |m| m.len());
            let mut builder = http
                .post(server.graphql_url())
                .header("content-type", "application/json")
                .body(req.body.clone());
            if let Some(auth) = &req.auth {
                builder = builder.header("authorization", auth);
            }
            let body = builder
                .send()
                .await
                .expect("capture request")
                .text()
                .await
                .expect("capture body");
            assert!(!body.contains("\"errors\""), "{}: {body}", query.name);
            let log = std::fs::read(&server.log).expect("server log");
            let new = String::from_utf8_lossy(&log[usize::try_from(before).unwrap_or(0)..]);
            let statements: Vec<String> = new
                .lines()
                .filter_map(|l| l.split_once("ephemera::sql: ").map(|(_, s)| s.to_owned()))
                .collect();
            sets.push(statements);
        }
        if sets.iter().any(|s| !s.is_empty()) {
            captured.insert(query.name, sets);
        }
    }
    server.stop().await;
    captured
}

/// Replays `sets` (rotating through them) for the run's duration.
///
/// Each worker runs its statements as the server runs a query's: through
/// [`RequestDb`] pinned to one connection, which it keeps for the whole run
/// (as each pgbench client keeps its connection).
pub async fn measure(bench: &Bench, sets: &[Vec<String>], opts: &Opts) -> SqlResult {
    let stats = Arc::new(DbStats::default());
    let conn = ephemera::db::connect(&bench.url, POOL, stats.clone())
        .await
        .expect("replay connection");
    let backend = conn.get_database_backend();
    let held = Arc::new(QueryConnections::new(
        u32::try_from(opts.concurrency).unwrap_or(u32::MAX),
    ));
    let workers: Vec<Arc<RequestDb>> = (0..opts.concurrency)
        .map(|_| {
            let db = RequestDb::new(conn.clone(), stats.clone(), held.clone(), None);
            db.pin();
            Arc::new(db)
        })
        .collect();
    let run = opts.duration();
    let go = |run: Duration| {
        let deadline = Instant::now() + run;
        let tasks: Vec<_> = (0..opts.concurrency)
            .map(|worker| {
                let conn = workers[worker].clone();
                let sets: Vec<Vec<String>> = sets.to_vec();
                let step = opts.concurrency;
                tokio::spawn(async move {
                    let (mut ok, mut errors, mut n) = (0u64, 0u64, worker);
                    while Instant::now() < deadline {
                        let mut failed = false;
                        for sql in &sets[n % sets.len()] {
                            let stmt = Statement::from_string(backend, sql.clone());
                            if let Err(e) = conn.query_all_raw(stmt).await {
                                if errors == 0 {
                                    eprintln!("replay failed: {e}\n{sql}");
                                }
                                failed = true;
                            }
                        }
                        if failed {
                            errors += 1;
                        } else {
                            ok += 1;
                        }
                        n += step;
                    }
                    (ok, errors)
                })
            })
            .collect();
        async move {
            let mut total = (0, 0);
            for t in tasks {
                let (ok, errors) = t.await.expect("replay worker");
                total.0 += ok;
                total.1 += errors;
            }
            total
        }
    };
    go(run / 4).await;
    let meter = cpu::Meter::start(vec![std::process::id()], bench.db == Db::Postgres);
    let (ok, errors) = go(run).await;
    let (cpu_us, _) = meter.micros_per(ok);
    drop(workers);
    held.close().await;
    let _ = conn.close().await;
    let throughput = ok as f64 / run.as_secs_f64();
    let pgbench_tps = if bench.db == Db::Postgres {
        pgbench(bench, sets, opts).await
    } else {
        None
    };
    SqlResult {
        statements: sets.first().map_or(0, Vec::len),
        throughput,
        cpu_us,
        pgbench_tps,
        errors,
    }
}

/// `pgbench` with one script file per request variant; `None` (and a
/// message) where pgbench is missing or fails.
async fn pgbench(bench: &Bench, sets: &[Vec<String>], opts: &Opts) -> Option<f64> {
    let dir = bench.dir.join("pgbench");
    std::fs::create_dir_all(&dir).expect("pgbench dir");
    let mut cmd = tokio::process::Command::new("pgbench");
    let seconds = opts.seconds.round().max(1.0) as u64;
    cmd.args(["-n", "-M", "prepared", "-j", "2"])
        .arg("-c")
        .arg(opts.concurrency.to_string())
        .arg("-T")
        .arg(seconds.to_string());
    for (i, set) in sets.iter().enumerate() {
        let file = dir.join(format!("script-{i}.sql"));
        let script: String = set.iter().map(|s| format!("{s};\n")).collect();
        std::fs::write(&file, script).expect("pgbench script");
        cmd.arg("-f").arg(file);
    }
    cmd.arg(&bench.url);
    let out = match cmd.output().await {
        Ok(out) => out,
        Err(e) => {
            eprintln!("pgbench did not run: {e}");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    if tps.is_none() {
        eprintln!(
            "pgbench failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    tps
}
