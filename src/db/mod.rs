//! Database connection and the small helpers every query uses.
//!
//! SQL is written once with PostgreSQL's `$1` placeholders; [`stmt`] turns
//! them into SQLite's numbered `?1` form. SQLite runs in WAL mode with a busy
//! timeout; its write transactions begin with a write so that two of them
//! queue on the write lock instead of failing to upgrade a read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, FromQueryResult,
    Statement, Value,
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
        }
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
    let rows = db
        .query_all_raw(stmt(db.get_database_backend(), sql, values))
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
    let row = db
        .query_one_raw(stmt(db.get_database_backend(), sql, values))
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
