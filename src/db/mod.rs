//! Database connection and the small helpers every query uses.
//!
//! SQL is written once with PostgreSQL's `$1` placeholders; [`stmt`] turns
//! them into SQLite's numbered `?1` form. SQLite runs in WAL mode with a busy
//! timeout; its write transactions begin with a write so that two of them
//! queue on the write lock instead of failing to upgrade a read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use sea_orm::sqlx::{
    self,
    sqlite::{SqliteJournalMode, SqliteSynchronous},
};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, FromQueryResult, RuntimeErr, Statement, TransactionTrait, Value,
};

use crate::error::{AppError, AppResult};

mod request;

pub use request::{QueryConnections, RequestDb};

/// Counts the SQL statements the server runs (exposed on `/metrics`).
#[derive(Debug, Default)]
pub struct DbStats {
    statements: AtomicU64,
    failures: AtomicU64,
    pinned: AtomicU64,
    opened: AtomicU64,
    /// When a statement last failed, as [`stamp`] counts; 0 for never.
    last_failure: AtomicU64,
}

/// `at` as milliseconds since the first call, plus one (0 means "never").
fn stamp(at: Instant) -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    u64::try_from(at.saturating_duration_since(*START).as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

impl DbStats {
    pub fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Connections a request held for all its statements (see [`RequestDb`]).
    pub fn pinned(&self) -> u64 {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Connections opened for queries to hold (see [`QueryConnections`]):
    /// one per connection, not per request, unless one failed or grew old.
    pub fn query_connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Counts a statement that ran (and whether it failed).
    pub fn record(&self, statement: &Statement, failed: bool) {
        self.statements.fetch_add(1, Ordering::Relaxed);
        // `EPHEMERA_LOG=ephemera::sql=trace` logs every statement as it ran.
        tracing::trace!(target: "ephemera::sql", "{}", inline_values(statement));
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
            self.last_failure
                .fetch_max(stamp(Instant::now()), Ordering::Relaxed);
        }
    }

    /// Whether a statement failed at or after `since`. A connection idle
    /// since then is pinged before it is used again: the failure may have
    /// been the database ending every session (a restart), and a read that
    /// found its connection dead is run again (see [`fetch_all`]).
    pub fn failed_since(&self, since: Instant) -> bool {
        let last = self.last_failure.load(Ordering::Relaxed);
        last != 0 && last >= stamp(since)
    }
}

/// How much of an SQLite database file is read through a memory map.
const SQLITE_MMAP_BYTES: u64 = 1 << 30;

/// How long a connection may sit idle before it is pinged when next handed
/// out.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(30);

/// How long a request waits for a connection at most.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// How old a connection may grow before it is closed and replaced.
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// Opens a pool to `url`, counting statements into `stats`.
pub async fn connect(url: &str, pool: u32, stats: Arc<DbStats>) -> AppResult<DatabaseConnection> {
    let mut opts = ConnectOptions::new(url.to_owned());
    opts.max_connections(pool.max(1))
        .min_connections(1)
        .connect_timeout(Duration::from_secs(10))
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .max_lifetime(MAX_LIFETIME)
        // sqlx pings every connection it hands out by default: one more
        // round trip (on SQLite, one more hand-off to the connection's
        // thread) for every statement. Only a connection that sat idle long
        // enough to have been dropped by a server, proxy or firewall is
        // pinged now.
        .test_before_acquire_if_idle_for(IDLE_BEFORE_PING)
        // And one idle since before a statement failed: after a restart of
        // the database every pooled connection is dead, and this finds them
        // at the cost of a ping each, instead of a failed statement each.
        .map_sqlx_postgres_before_acquire({
            let stats = stats.clone();
            move |conn, meta| {
                let suspect = Instant::now()
                    .checked_sub(meta.idle_for)
                    .is_some_and(|since| stats.failed_since(since));
                Box::pin(async move {
                    if suspect {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            }
        })
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| {
            o.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true)
                .create_if_missing(true)
                // Reads go through one shared memory map instead of copies
                // into each connection's small page cache (the benchmarks
                // showed reads slowing once the file outgrew that cache).
                .pragma("mmap_size", SQLITE_MMAP_BYTES.to_string())
        });
    let mut db = Database::connect(opts)
        .await
        .map_err(|e| AppError::internal("connecting to the database", e))?;
    db.set_metric_callback(move |info| stats.record(info.statement, info.failed));
    Ok(db)
}

/// A statement for `backend` from SQL written with `$n` placeholders.
pub fn stmt(backend: DbBackend, sql: &str, values: Vec<Value>) -> Statement {
    let sql = match backend {
        DbBackend::Sqlite => sql.replace('$', "?"),
        _ => sql.to_owned(),
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// The statement's SQL with its values written in as literals (`$n` and
/// `?n` placeholders alike, outside quoted text), so that a logged statement
/// can be run again by hand, by `psql` or by `pgbench`.
pub fn inline_values(stmt: &Statement) -> String {
    use sea_orm::sea_query::{PostgresQueryBuilder, QueryBuilder, SqliteQueryBuilder};
    let values = stmt.values.as_ref().map(|v| v.0.as_slice()).unwrap_or(&[]);
    let mut out = String::with_capacity(stmt.sql.len() + 16 * values.len());
    let mut chars = stmt.sql.char_indices().peekable();
    let mut quoted = false;
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if !quoted && (c == '$' || c == '?') {
            let digits: String = stmt.sql[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let value = digits
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|n| values.get(n));
            if let Some(value) = value {
                out.push_str(&match stmt.db_backend {
                    DbBackend::Postgres => PostgresQueryBuilder.value_to_string(value),
                    _ => SqliteQueryBuilder.value_to_string(value),
                });
                for _ in 0..digits.len() {
                    chars.next();
                }
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// `FOR UPDATE` on PostgreSQL; nothing on SQLite, whose single writer serialises.
pub fn for_update(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => " FOR UPDATE",
        _ => "",
    }
}

/// `FOR UPDATE SKIP LOCKED` on PostgreSQL, so that jobs on several instances
/// claim different rows; nothing on SQLite.
pub fn skip_locked(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => " FOR UPDATE SKIP LOCKED",
        _ => "",
    }
}

/// SQL for the ids of at most `$limit_param` rows of `table` (alias `p`)
/// that match `filter`, smallest `order_col` first: the batch a job claims.
/// On PostgreSQL the rows are locked with `SKIP LOCKED`, so jobs on several
/// instances claim different rows and never wait on each other.
pub fn claim_batch_sql(
    backend: DbBackend,
    table: &str,
    filter: &str,
    order_col: &str,
    limit_param: usize,
) -> String {
    format!(
        "SELECT p.id FROM {table} p WHERE {filter} ORDER BY p.{order_col} LIMIT ${limit_param}{}",
        skip_locked(backend)
    )
}

/// The condition that a row's id is among those `claim` (from
/// [`claim_batch_sql`]) selects. On PostgreSQL `= ANY(ARRAY(...))`: the claim
/// runs once and each row is then found by its key, where `IN (...)` can be
/// planned as a scan of the whole table per batch (the purge benchmark
/// showed one, growing with the rows stored).
pub fn claimed(backend: DbBackend, claim: &str) -> String {
    match backend {
        DbBackend::Postgres => format!("= ANY(ARRAY({claim}))"),
        _ => format!("IN ({claim})"),
    }
}

/// Runs a query and maps every row.
pub async fn fetch_all<T: FromQueryResult, C: ConnectionTrait>(
    db: &C,
    sql: &str,
    values: Vec<Value>,
) -> AppResult<Vec<T>> {
    let backend = db.get_database_backend();
    let rows = read_again_if_dead(
        || stmt(backend, sql, values.clone()),
        |s| db.query_all_raw(s),
    )
    .await?;
    rows.iter()
        .map(|r| T::from_query_result(r, "").map_err(AppError::from))
        .collect()
}

/// Runs a query and maps its first row, if any.
pub async fn fetch_one<T: FromQueryResult, C: ConnectionTrait>(
    db: &C,
    sql: &str,
    values: Vec<Value>,
) -> AppResult<Option<T>> {
    let backend = db.get_database_backend();
    let row = read_again_if_dead(
        || stmt(backend, sql, values.clone()),
        |s| db.query_one_raw(s),
    )
    .await?;
    row.map(|r| T::from_query_result(&r, "").map_err(AppError::from))
        .transpose()
}

/// Runs a statement and returns the rows it affected.
pub async fn execute<C: ConnectionTrait>(db: &C, sql: &str, values: Vec<Value>) -> AppResult<u64> {
    let res = db
        .execute_raw(stmt(db.get_database_backend(), sql, values))
        .await?;
    Ok(res.rows_affected())
}

/// `$first, $first+1, ...` for an IN list of `n` values.
pub fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `err` says the connection is gone (the database restarted or
/// ended the session, or the network dropped it) rather than that the
/// statement failed: the statement did not run, and may on a new connection.
pub fn is_disconnect(err: &DbErr) -> bool {
    match err {
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => is_sqlx_disconnect(e),
        _ => false,
    }
}

/// [`is_disconnect`] for sqlx's own error: an I/O error, SQLite's worker
/// thread gone, or PostgreSQL's connection-exception class (08) and its
/// shutdown codes (57P01 admin, 57P02 crash, 57P03 not yet accepting).
fn is_sqlx_disconnect(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(e) => e
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// Whether `stmt` only reads (a plain `SELECT`), so that running it again
/// after its connection was found dead cannot change anything twice.
fn is_read(stmt: &Statement) -> bool {
    stmt.sql
        .trim_start()
        .get(..6)
        .is_some_and(|w| w.eq_ignore_ascii_case("select"))
}

/// How many connections `db`'s pool may hold: how many dead ones it could
/// hand out one after another.
fn pool_size(db: &DatabaseConnection) -> u32 {
    match db.get_database_backend() {
        DbBackend::Postgres => db
            .get_postgres_connection_pool()
            .options()
            .get_max_connections(),
        _ => db
            .get_sqlite_connection_pool()
            .options()
            .get_max_connections(),
    }
}

/// Runs the statement `make` builds with `run`; a read that found its
/// connection dead runs once more. That failure was recorded
/// ([`DbStats::record`]), so every connection idle since is pinged before
/// it is used again, and the second try gets a live or a new one.
async fn read_again_if_dead<T, F>(
    make: impl Fn() -> Statement,
    run: impl Fn(Statement) -> F,
) -> Result<T, DbErr>
where
    F: Future<Output = Result<T, DbErr>>,
{
    let stmt = make();
    if !is_read(&stmt) {
        return run(stmt).await;
    }
    match run(stmt).await {
        Err(e) if is_disconnect(&e) => {
            tracing::warn!(error = %e, "a connection was gone; running the read again");
            run(make()).await
        }
        result => result,
    }
}

/// Begins a transaction on `db`. After a restart of the database the pool
/// may hand out connections it has not yet seen die (it only pings one that
/// sat idle a while); `BEGIN` on one fails without doing anything, that
/// connection is closed as it goes back, and the next one is tried.
pub async fn begin(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    let mut left = pool_size(db);
    loop {
        match db.begin().await {
            Err(e) if left > 0 && is_disconnect(&e) => {
                left -= 1;
                tracing::warn!(error = %e, "a pooled connection was gone; beginning on another");
            }
            result => return result,
        }
    }
}

/// Whether a database error is a unique-constraint violation.
pub fn is_unique_violation(err: &sea_orm::DbErr) -> bool {
    matches!(
        err.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_placeholders_are_numbered() {
        let s = stmt(DbBackend::Sqlite, "SELECT $1, $2, $1", vec![]);
        assert_eq!(s.sql, "SELECT ?1, ?2, ?1");
        let p = stmt(DbBackend::Postgres, "SELECT $1", vec![]);
        assert_eq!(p.sql, "SELECT $1");
        assert_eq!(placeholders(3, 3), "$3, $4, $5");
    }

    #[test]
    fn only_plain_selects_are_run_again() {
        let read = |sql: &str| is_read(&stmt(DbBackend::Postgres, sql, vec![]));
        assert!(read("SELECT 1"));
        assert!(read("  select * FROM users"));
        assert!(!read(
            "WITH gone AS (DELETE FROM statuses RETURNING id) SELECT COUNT(*) FROM gone"
        ));
        assert!(!read("INSERT INTO users (id) VALUES (1) RETURNING id"));
        assert!(!read("SEL"));
        assert!(!is_disconnect(&DbErr::RecordNotFound("x".into())));
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(is_disconnect(&DbErr::Query(RuntimeErr::SqlxError(
            Arc::new(io)
        ))));
        let decode = sqlx::Error::ColumnNotFound("n".into());
        assert!(!is_disconnect(&DbErr::Query(RuntimeErr::SqlxError(
            Arc::new(decode)
        ))));
    }

    #[test]
    fn values_are_written_in() {
        let values = || vec![7i64.into(), "it's".into(), 1.5f64.into(), true.into()];
        let sql = "SELECT '$1?', $1, $2, $3, $4, $10 FROM t WHERE a = $1";
        let want = "SELECT '$1?', 7, E'it\\'s', 1.5, TRUE, $10 FROM t WHERE a = 7";
        assert_eq!(
            inline_values(&stmt(DbBackend::Postgres, sql, values())),
            want
        );
        let lite = inline_values(&stmt(DbBackend::Sqlite, "SELECT $2, $1", values()));
        assert_eq!(lite, "SELECT 'it''s', 7");
    }
}
