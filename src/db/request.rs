//! One GraphQL request's way to the database.
//!
//! sqlx pings every connection as it goes back to its pool (a round trip to
//! PostgreSQL, a hand-off to the connection's thread on SQLite), and SeaORM
//! takes a connection from the pool for each statement, so every statement
//! cost two trips. A read-only request (a GraphQL query) that is allowed to
//! [`pin`](RequestDb::pin) instead takes one connection at its first statement
//! and runs all its statements on it, one at a time; the connection goes back
//! (and is pinged once) when the request ends. Everything else (mutations,
//! whose transactions take connections of their own, and subscriptions, which
//! live long) runs statement by statement on the pool as before, so a request
//! never holds one connection while it waits for another.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{self, Postgres, Sqlite};
use sea_orm::{
    ConnAcquireErr, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, QueryResult,
    RuntimeErr, Statement,
};
use sea_query_sqlx::SqlxValues;
use tokio::sync::Mutex;

use super::DbStats;

/// A connection held for one request.
enum Held {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
}

/// The held connection, and whether a statement on it was cut off (its
/// future dropped) before it finished, in which case it is not used again.
#[derive(Default)]
struct Slot {
    conn: Option<Held>,
    busy: bool,
}

/// The database as one request sees it (see the module docs).
pub struct RequestDb {
    db: DatabaseConnection,
    stats: Arc<DbStats>,
    /// Whether this request may hold a connection (set once its operation
    /// is known to be a query; never for the subscriptions' shared loaders).
    pinned: AtomicBool,
    slot: Mutex<Slot>,
}

impl RequestDb {
    pub fn new(db: DatabaseConnection, stats: Arc<DbStats>) -> Self {
        Self {
            db,
            stats,
            pinned: AtomicBool::new(false),
            slot: Mutex::new(Slot::default()),
        }
    }

    /// From now on, runs the request's statements on one connection.
    pub fn pin(&self) {
        self.pinned.store(true, Ordering::Relaxed);
    }

    fn is_pinned(&self) -> bool {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Runs `stmt` on the held connection (taken now if there is none, or if
    /// the last statement on it was cut off), recording it as the pool's
    /// statements are recorded.
    async fn on_held<T>(&self, stmt: &Statement, run: Run<T>) -> Result<T, DbErr> {
        let mut slot = self.slot.lock().await;
        if slot.busy {
            slot.conn = None;
        }
        if slot.conn.is_none() {
            slot.conn = Some(self.acquire().await?);
            self.stats.pinned.fetch_add(1, Ordering::Relaxed);
        }
        let slot = &mut *slot;
        let Some(conn) = slot.conn.as_mut() else {
            return Err(DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed));
        };
        slot.busy = true;
        let result = run(conn, stmt).await;
        slot.busy = false;
        self.stats.record(stmt, result.is_err());
        if result.is_err() {
            // A failed statement may have left the connection in any state;
            // the pool's release check decides whether it is reused.
            slot.conn = None;
        }
        result.map_err(|e| DbErr::Query(RuntimeErr::SqlxError(Arc::new(e))))
    }

    async fn acquire(&self) -> Result<Held, DbErr> {
        let held = match self.db.get_database_backend() {
            DbBackend::Postgres => self
                .db
                .get_postgres_connection_pool()
                .acquire()
                .await
                .map(Held::Postgres),
            _ => self
                .db
                .get_sqlite_connection_pool()
                .acquire()
                .await
                .map(Held::Sqlite),
        };
        held.map_err(|e| match e {
            sqlx::Error::PoolTimedOut => DbErr::ConnectionAcquire(ConnAcquireErr::Timeout),
            sqlx::Error::PoolClosed => DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed),
            e => DbErr::Conn(RuntimeErr::SqlxError(Arc::new(e))),
        })
    }
}

type BoxFut<'a, T> = std::pin::Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;
type Run<T> = for<'a> fn(&'a mut Held, &'a Statement) -> BoxFut<'a, T>;

/// The statement's SQL and values as sqlx takes them.
fn bind(stmt: &Statement) -> (sqlx::AssertSqlSafe<&str>, SqlxValues) {
    (
        sqlx::AssertSqlSafe(stmt.sql.as_str()),
        SqlxValues(stmt.values.clone().unwrap_or(sea_orm::Values(Vec::new()))),
    )
}

/// `$body` with `$c` bound to the held connection, whichever database it is.
macro_rules! on_held {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            Held::Sqlite($c) => $body,
            Held::Postgres($c) => $body,
        }
    };
}

fn all<'a>(conn: &'a mut Held, stmt: &'a Statement) -> BoxFut<'a, Vec<QueryResult>> {
    let (sql, values) = bind(stmt);
    Box::pin(async move {
        Ok(on_held!(conn, c => sqlx::query_with(sql, values)
            .fetch_all(&mut **c)
            .await?
            .into_iter()
            .map(QueryResult::from)
            .collect()))
    })
}

fn one<'a>(conn: &'a mut Held, stmt: &'a Statement) -> BoxFut<'a, Option<QueryResult>> {
    let (sql, values) = bind(stmt);
    Box::pin(async move {
        Ok(on_held!(conn, c => sqlx::query_with(sql, values)
            .fetch_optional(&mut **c)
            .await?
            .map(QueryResult::from)))
    })
}

fn exec<'a>(conn: &'a mut Held, stmt: &'a Statement) -> BoxFut<'a, ExecResult> {
    let (sql, values) = bind(stmt);
    Box::pin(async move {
        Ok(on_held!(conn, c => sqlx::query_with(sql, values)
            .execute(&mut **c)
            .await?
            .into()))
    })
}

#[async_trait::async_trait]
impl ConnectionTrait for RequestDb {
    fn get_database_backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        if self.is_pinned() {
            self.on_held(&stmt, exec).await
        } else {
            self.db.execute_raw(stmt).await
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.db.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        if self.is_pinned() {
            self.on_held(&stmt, one).await
        } else {
            self.db.query_one_raw(stmt).await
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        if self.is_pinned() {
            self.on_held(&stmt, all).await
        } else {
            self.db.query_all_raw(stmt).await
        }
    }

    fn support_returning(&self) -> bool {
        self.db.support_returning()
    }
}
