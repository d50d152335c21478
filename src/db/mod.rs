//! Database connection and the small helpers every query uses.
//!
//! Statements are [`Sql`] values whose binds are numbered when built
//! (`sql.rs`); whatever differs between SQLite and PostgreSQL is a method of
//! [`Dialect`] (`dialect.rs`). SQLite runs in WAL mode with a busy timeout;
//! its write transactions begin with a write so that two of them queue on the
//! write lock instead of failing to upgrade a read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use sea_orm::sqlx::{
    self,
    sqlite::{SqliteJournalMode, SqliteSynchronous},
};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbErr,
    FromQueryResult, RuntimeErr, Statement, TransactionTrait,
};

use crate::error::{AppError, AppResult};

mod columns;
mod dialect;
pub mod insert;
mod request;
mod sql;

pub use columns::Columns;
pub use dialect::{Column, Dialect};
pub use request::{Budget, QueryConnections, RequestDb};
pub use sql::Sql;

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
        // No JIT compilation: PostgreSQL compiles a statement whose plan
        // costs past `jit_above_cost`, which the live tray's decision for a
        // page of a busy minute does, and spent more compiling it (156
        // functions) than running it. Nothing here runs long enough to win it
        // back.
        .map_sqlx_postgres_opts(|o| o.options([("jit", "off")]))
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

/// The statement's SQL with its values written in as literals (`$n` and
/// `?n` placeholders alike, outside quoted text), so that a logged statement
/// can be run again by hand, by `psql` or by `pgbench`.
pub fn inline_values(stmt: &Statement) -> String {
    let dialect = Dialect::from_backend(stmt.db_backend);
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
                out.push_str(&dialect.value_literal(value));
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

/// The ids of at most `limit` rows of `table` (alias `p`) that match
/// `filter`, smallest `order_col` first: the batch a job claims. On
/// PostgreSQL the rows are locked with `SKIP LOCKED`, so jobs on several
/// instances claim different rows and never wait on each other.
pub fn claim_batch(dialect: Dialect, table: &str, filter: Sql, order_col: &str, limit: i64) -> Sql {
    Sql::new(&format!("SELECT p.id FROM {table} p WHERE "))
        .append(filter)
        .push(&format!(" ORDER BY p.{order_col} LIMIT "))
        .bind(limit)
        .push(dialect.skip_locked())
}

/// Runs a query and maps every row.
pub async fn fetch_all<T: FromQueryResult, C: ConnectionTrait>(
    db: &C,
    sql: Sql,
) -> AppResult<Vec<T>> {
    let dialect = Dialect::of(db);
    let rows = read_again_if_dead(|| sql.build(dialect), |s| db.query_all_raw(s)).await?;
    rows.iter()
        .map(|r| T::from_query_result(r, "").map_err(AppError::from))
        .collect()
}

/// Runs a query and maps its first row, if any.
pub async fn fetch_one<T: FromQueryResult, C: ConnectionTrait>(
    db: &C,
    sql: Sql,
) -> AppResult<Option<T>> {
    let dialect = Dialect::of(db);
    let row = read_again_if_dead(|| sql.build(dialect), |s| db.query_one_raw(s)).await?;
    row.map(|r| T::from_query_result(&r, "").map_err(AppError::from))
        .transpose()
}

/// [`fetch_one`] for a write that may run twice without harm (a rate
/// limit's count, whose second run after a dead connection at worst counts
/// one attempt more): run again, like a read, if its connection was dead.
pub async fn fetch_one_retried<T: FromQueryResult, C: ConnectionTrait>(
    db: &C,
    sql: Sql,
) -> AppResult<Option<T>> {
    let dialect = Dialect::of(db);
    let stmt = sql.build(dialect);
    let row = match db.query_one_raw(stmt.clone()).await {
        Err(e) if is_disconnect(&e) => {
            tracing::warn!(error = %e, "a connection was gone; running the statement again");
            db.query_one_raw(stmt).await
        }
        result => result,
    }?;
    row.map(|r| T::from_query_result(&r, "").map_err(AppError::from))
        .transpose()
}

/// Runs a statement and returns the rows it affected.
pub async fn execute<C: ConnectionTrait>(db: &C, sql: Sql) -> AppResult<u64> {
    let done = db.execute_raw(sql.build(Dialect::of(db))).await?;
    Ok(done.rows_affected())
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
    // The pool could hand out as many dead connections as it holds.
    let mut left = Dialect::of(db).pool_size(db);
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

/// Applies pending migrations.
pub async fn migrate(db: &DatabaseConnection) -> AppResult<()> {
    use migration::MigratorTrait;
    migration::Migrator::up(db, None)
        .await
        .map_err(|e| AppError::internal("migrating the database", e))
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
    fn claims_are_built() {
        let filter = Sql::new("p.expires_at <= ").bind(5i64);
        let claim = claim_batch(Dialect::Postgres, "statuses", filter, "expires_at", 10);
        assert_eq!(
            claim.build(Dialect::Postgres).sql,
            "SELECT p.id FROM statuses p WHERE p.expires_at <= $1 ORDER BY p.expires_at \
             LIMIT $2 FOR UPDATE SKIP LOCKED"
        );
    }

    #[test]
    fn only_plain_selects_are_run_again() {
        let read = |sql: &str| is_read(&Sql::new(sql).build(Dialect::Postgres));
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
        let sql = Sql::new("SELECT '$1?', ")
            .bind(7i64)
            .push(", ")
            .bind("it's")
            .push(", ")
            .bind(1.5f64)
            .push(", ")
            .bind(true)
            .push(", $10 FROM t");
        let want = "SELECT '$1?', 7, E'it\\'s', 1.5, TRUE, $10 FROM t";
        assert_eq!(inline_values(&sql.build(Dialect::Postgres)), want);
        let lite = inline_values(&Sql::new("SELECT ").bind("it's").build(Dialect::Sqlite));
        assert_eq!(lite, "SELECT 'it''s'");
    }
}
