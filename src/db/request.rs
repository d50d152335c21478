//! One GraphQL request's way to the database.
//!
//! SeaORM takes a connection from sqlx's pool for each statement, and sqlx
//! pings every connection as it goes back to the pool (a round trip to
//! PostgreSQL, a hand-off to the connection's thread on SQLite), so every
//! statement cost two trips. A read-only request (a GraphQL query) that is
//! allowed to [`pin`](RequestDb::pin) instead takes one connection at its
//! first statement and runs all its statements on it, one at a time.
//!
//! Those connections come from [`QueryConnections`]: connections taken out of
//! the pool once and kept apart for queries, handed back without a ping
//! (there is nothing to flush after plain reads, and a connection whose
//! statement failed or was cut off is closed instead). One that sat idle
//! for a while, or since before a statement failed anywhere, is pinged
//! before use and an old one is replaced, as the pool does. Everything else
//! (mutations, whose transactions take connections of their own, and
//! subscriptions, which live long) runs statement by statement on the pool
//! as before, so a request never holds one connection while it waits for
//! another.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sea_orm::sqlx;
use sea_orm::{
    ConnAcquireErr, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, QueryResult,
    RuntimeErr, Statement,
};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use super::dialect::{Held, acquire_error};
use super::{ACQUIRE_TIMEOUT, DbStats, IDLE_BEFORE_PING, MAX_LIFETIME};

/// An idle query connection.
struct Idle {
    conn: Held,
    opened: Instant,
    since: Instant,
}

/// A query connection out with a request, and its place among the
/// [`QueryConnections`] (given back when the request ends).
struct Lent {
    conn: Held,
    opened: Instant,
    _permit: OwnedSemaphorePermit,
}

/// The connections queries hold (see the module docs): at most `size` at
/// once, opened through the pool (with its settings) as they are first
/// needed, and kept idle between requests.
pub struct QueryConnections {
    permits: Arc<Semaphore>,
    idle: std::sync::Mutex<Vec<Idle>>,
}

impl std::fmt::Debug for QueryConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryConnections")
            .field("available", &self.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl QueryConnections {
    pub fn new(size: u32) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(size.max(1) as usize)),
            idle: std::sync::Mutex::default(),
        }
    }

    /// A connection for one request: an idle one (pinged first if it has
    /// been idle long, closed if it is old) or a new one from `db`'s pool.
    async fn lend(&self, db: &DatabaseConnection, stats: &DbStats) -> Result<Lent, DbErr> {
        let permit = tokio::time::timeout(ACQUIRE_TIMEOUT, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| DbErr::ConnectionAcquire(ConnAcquireErr::Timeout))?
            .map_err(|_| DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed))?;
        loop {
            let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            let Some(mut idle) = idle else {
                break;
            };
            if idle.opened.elapsed() >= MAX_LIFETIME {
                continue;
            }
            // Pinged if it sat idle long, or since before a statement failed
            // (the database may have ended every session: a restart).
            if (idle.since.elapsed() >= IDLE_BEFORE_PING || stats.failed_since(idle.since))
                && idle.conn.ping().await.is_err()
            {
                continue;
            }
            return Ok(Lent {
                conn: idle.conn,
                opened: idle.opened,
                _permit: permit,
            });
        }
        let conn = Held::detach(db).await.map_err(acquire_error)?;
        stats.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Lent {
            conn,
            opened: Instant::now(),
            _permit: permit,
        })
    }

    /// Takes `lent` back as idle.
    fn give_back(&self, lent: Lent) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(Idle {
                conn: lent.conn,
                opened: lent.opened,
                since: Instant::now(),
            });
        }
    }

    /// Closes the idle connections (at shutdown).
    pub async fn close(&self) {
        let idle = self
            .idle
            .lock()
            .map(|mut idle| std::mem::take(&mut *idle))
            .unwrap_or_default();
        for i in idle {
            let _ = i.conn.close().await;
        }
    }
}

/// The held connection, and whether a statement on it was cut off (its
/// future dropped) before it finished, in which case it is not used again.
#[derive(Default)]
struct Slot {
    conn: Option<Lent>,
    busy: bool,
}

/// What one request may spend on the database: statements, and time
/// spent in them (summed). The backstop behind the complexity limit, which
/// prices what a query declares: this counts what it does. Past either, the
/// statement is not run (or is cut off when it runs past the time left) and
/// fails with [`crate::error::BUDGET_SPENT`], which clients see as
/// `RATE_LIMITED`; so do the request's later statements.
#[derive(Debug)]
pub struct Budget {
    max_statements: u32,
    max_time: Duration,
    statements: AtomicU32,
    spent_us: AtomicU64,
}

impl Budget {
    pub fn new(max_statements: u32, max_time: Duration) -> Self {
        Self {
            max_statements,
            max_time,
            statements: AtomicU32::new(0),
            spent_us: AtomicU64::new(0),
        }
    }

    /// Database time spent so far.
    pub fn spent(&self) -> Duration {
        Duration::from_micros(self.spent_us.load(Ordering::Relaxed))
    }

    /// Takes one statement; the time it may run, or why it may not.
    fn take(&self) -> Result<Duration, DbErr> {
        let n = self.statements.fetch_add(1, Ordering::Relaxed);
        if n >= self.max_statements {
            return Err(spent(format!(
                "this request ran its {} database statements; ask for less at once",
                self.max_statements
            )));
        }
        let left = self.max_time.saturating_sub(self.spent());
        if left.is_zero() {
            return Err(self.out_of_time());
        }
        Ok(left)
    }

    fn out_of_time(&self) -> DbErr {
        spent(format!(
            "this request used its {} of database time; ask for less at once",
            humantime::format_duration(self.max_time)
        ))
    }

    fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.spent_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Statements run (or refused) so far.
    pub fn statements(&self) -> u32 {
        self.statements.load(Ordering::Relaxed)
    }
}

fn spent(message: String) -> DbErr {
    DbErr::Custom(format!("{}{message}", crate::error::BUDGET_SPENT))
}

/// The database as one request sees it (see the module docs).
pub struct RequestDb {
    db: DatabaseConnection,
    stats: Arc<DbStats>,
    conns: Arc<QueryConnections>,
    /// Whether this request may hold a connection (set once its operation
    /// is known to be a query; never for the subscriptions' shared loaders).
    pinned: AtomicBool,
    slot: Mutex<Slot>,
    /// What the request may still spend (none for the subscriptions'
    /// shared loaders, which serve many events).
    budget: Option<Budget>,
}

impl RequestDb {
    pub fn new(
        db: DatabaseConnection,
        stats: Arc<DbStats>,
        conns: Arc<QueryConnections>,
        budget: Option<Budget>,
    ) -> Self {
        Self {
            db,
            stats,
            conns,
            pinned: AtomicBool::new(false),
            slot: Mutex::new(Slot::default()),
            budget,
        }
    }

    /// The request's budget, if it has one.
    pub fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// Runs `statement` within the request's budget: refused before it
    /// runs once the budget is spent, cut off if it runs past the time
    /// left, its time added to what was spent.
    async fn metered<T>(
        &self,
        statement: impl Future<Output = Result<T, DbErr>>,
    ) -> Result<T, DbErr> {
        let Some(budget) = &self.budget else {
            return statement.await;
        };
        let left = budget.take()?;
        let started = Instant::now();
        let result = tokio::time::timeout(left, statement).await;
        budget.record(started.elapsed());
        result.unwrap_or_else(|_| Err(budget.out_of_time()))
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
            slot.conn = Some(self.conns.lend(&self.db, &self.stats).await?);
            self.stats.pinned.fetch_add(1, Ordering::Relaxed);
        }
        let slot = &mut *slot;
        let Some(Lent { conn, .. }) = slot.conn.as_mut() else {
            return Err(DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed));
        };
        slot.busy = true;
        let result = run(conn, stmt).await;
        slot.busy = false;
        self.stats.record(stmt, result.is_err());
        if result.is_err() {
            // A failed statement may have left the connection in any state:
            // it is closed, not reused.
            slot.conn = None;
        }
        result.map_err(|e| DbErr::Query(RuntimeErr::SqlxError(Arc::new(e))))
    }
}

impl Drop for RequestDb {
    fn drop(&mut self) {
        let slot = std::mem::take(self.slot.get_mut());
        if let (Some(lent), false) = (slot.conn, slot.busy) {
            self.conns.give_back(lent);
        }
    }
}

type BoxFut<'a, T> = std::pin::Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;
type Run<T> = for<'a> fn(&'a mut Held, &'a Statement) -> BoxFut<'a, T>;

fn all<'a>(conn: &'a mut Held, stmt: &'a Statement) -> BoxFut<'a, Vec<QueryResult>> {
    Box::pin(conn.fetch_all(stmt))
}

fn one<'a>(conn: &'a mut Held, stmt: &'a Statement) -> BoxFut<'a, Option<QueryResult>> {
    Box::pin(conn.fetch_optional(stmt))
}

fn exec<'a>(conn: &'a mut Held, stmt: &'a Statement) -> BoxFut<'a, ExecResult> {
    Box::pin(conn.execute(stmt))
}

#[async_trait::async_trait]
impl ConnectionTrait for RequestDb {
    fn get_database_backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.metered(async {
            if self.is_pinned() {
                self.on_held(&stmt, exec).await
            } else {
                self.db.execute_raw(stmt).await
            }
        })
        .await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.metered(self.db.execute_unprepared(sql)).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.metered(async {
            if self.is_pinned() {
                self.on_held(&stmt, one).await
            } else {
                self.db.query_one_raw(stmt).await
            }
        })
        .await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.metered(async {
            if self.is_pinned() {
                self.on_held(&stmt, all).await
            } else {
                self.db.query_all_raw(stmt).await
            }
        })
        .await
    }

    fn support_returning(&self) -> bool {
        self.db.support_returning()
    }
}
