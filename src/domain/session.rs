//! Sign-in sessions. A token is good only while the session it names
//! exists: `signOut` ends one, `signOutEverywhere` and `changePassword` end
//! all of an account's, deleting the account ends them by cascade. Each
//! instance remembers sessions it found alive for [`ALIVE_FOR`] (so an
//! authenticated request costs no statement most of the time) and forgets
//! those it ends at once; a session ended on another instance is refused
//! here within [`ALIVE_FOR`]. Open websockets of an ended session are closed
//! (through [`crate::events::EventBus::end`], and re-checked at every
//! keepalive).

use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

use crate::auth::{AliveSessions, Bearer, Viewer};
use crate::clock::Millis;
use crate::db::{self, Sql};
use crate::entity::session;
use crate::error::{AppError, AppResult};
use crate::events::Ended;
use crate::state::Accounts;

/// Starts a session for `user`; returns its id (random: it is in tokens).
pub async fn start<C: ConnectionTrait>(
    db: &C,
    user: i64,
    now: Millis,
    ttl: Millis,
) -> AppResult<i64> {
    let id = crate::ids::random_id();
    let row = session::Model {
        id,
        user_id: user,
        created_at: now,
        expires_at: now.saturating_add(ttl),
    };
    db::insert::row(db, row).await?;
    Ok(id)
}

/// What a sign-in saw of an account when it checked the password.
pub struct Checked<'a> {
    pub user: i64,
    /// The hash the password was verified against.
    pub password_hash: &'a str,
}

/// Why [`start_checked`] started no session.
pub enum NotStarted {
    /// The account was suspended since it was read.
    Suspended(Option<String>),
    /// Its password changed (or it was deleted) since it was read.
    Changed,
}

/// Starts a session for an account whose password was just verified, if
/// the account is still as it was then: not suspended, the same password.
/// A suspension or password change that commits while the password was
/// being checked is seen here and no session starts; one that commits
/// after this has inserted the session ends it (the account row is locked
/// on PostgreSQL until the insert commits; SQLite's single writer orders
/// the two). So once a suspension or password change has committed, no
/// session authorised before it exists.
pub async fn start_checked(
    db: &DatabaseConnection,
    checked: Checked<'_>,
    now: Millis,
    ttl: Millis,
) -> AppResult<Result<i64, NotStarted>> {
    let txn = db::begin(db).await?;
    let account = Sql::new("SELECT id FROM users WHERE id = ").bind(checked.user);
    if let Some(lock) = db::Dialect::of(&txn).lock_first(account) {
        db::execute(&txn, lock).await?;
    }
    let id = crate::ids::random_id();
    let inserted = db::execute(
        &txn,
        Sql::new("INSERT INTO sessions (id, user_id, created_at, expires_at) SELECT ")
            .bind(id)
            .push(", id, ")
            .bind(now)
            .push(", ")
            .bind(now.saturating_add(ttl))
            .push(" FROM users WHERE id = ")
            .bind(checked.user)
            .push(" AND suspended_at IS NULL AND password_hash = ")
            .bind(checked.password_hash.to_owned()),
    )
    .await?;
    if inserted == 1 {
        txn.commit().await?;
        return Ok(Ok(id));
    }
    #[derive(FromQueryResult)]
    struct Now {
        suspended_at: Option<i64>,
        suspension_reason: Option<String>,
        password_hash: String,
    }
    let now_row: Option<Now> = db::fetch_one(
        &txn,
        Sql::new("SELECT suspended_at, suspension_reason, password_hash FROM users WHERE id = ")
            .bind(checked.user),
    )
    .await?;
    txn.rollback().await?;
    Ok(Err(match now_row {
        Some(row) if row.suspended_at.is_some() && row.password_hash == checked.password_hash => {
            NotStarted::Suspended(row.suspension_reason)
        }
        _ => NotStarted::Changed,
    }))
}

/// The viewer a bearer stands for: its user while its session lasts;
/// `UNAUTHENTICATED` once it has ended.
pub async fn viewer(
    db: &DatabaseConnection,
    sessions: &AliveSessions,
    bearer: Option<Bearer>,
    now: Millis,
) -> AppResult<Viewer> {
    let Some(bearer) = bearer else {
        return Ok(Viewer::Anonymous);
    };
    if sessions.fresh(bearer.session) || alive(db, sessions, bearer, now).await? {
        return Ok(Viewer::User(bearer.user));
    }
    Err(AppError::unauthenticated(
        "this sign-in has ended (signed out, password changed or account deleted)",
    ))
}

/// Whether `bearer`'s session still exists, asking the database.
pub async fn alive(
    db: &DatabaseConnection,
    sessions: &AliveSessions,
    bearer: Bearer,
    now: Millis,
) -> AppResult<bool> {
    #[derive(FromQueryResult)]
    struct Found {
        id: i64,
    }
    let found: Option<Found> = db::fetch_one(
        db,
        Sql::new("SELECT id FROM sessions WHERE id = ")
            .bind(bearer.session)
            .push(" AND user_id = ")
            .bind(bearer.user)
            .push(" AND expires_at > ")
            .bind(now),
    )
    .await?;
    let alive = found.is_some_and(|f| f.id == bearer.session);
    if alive {
        sessions.remember(bearer.session);
    }
    Ok(alive)
}

/// Ends one session (signing out one device).
pub async fn end(db: &DatabaseConnection, accounts: &Accounts, bearer: Bearer) -> AppResult<()> {
    db::execute(
        db,
        Sql::new("DELETE FROM sessions WHERE id = ")
            .bind(bearer.session)
            .push(" AND user_id = ")
            .bind(bearer.user),
    )
    .await?;
    accounts.sessions.forget(&[bearer.session]);
    accounts.events.end(Ended::Session(bearer.session));
    Ok(())
}

/// Ends every session of `user` in `db` (a transaction, or the pool);
/// returns their ids, for [`forget_all`] once committed.
pub async fn end_all<C: ConnectionTrait>(db: &C, user: i64) -> AppResult<Vec<i64>> {
    #[derive(FromQueryResult)]
    struct Id {
        id: i64,
    }
    let ids: Vec<Id> = db::fetch_all(
        db,
        Sql::new("DELETE FROM sessions WHERE user_id = ")
            .bind(user)
            .push(" RETURNING id"),
    )
    .await?;
    Ok(ids.into_iter().map(|i| i.id).collect())
}

/// After [`end_all`] committed: this instance forgets the sessions and
/// closes their websockets.
pub fn forget_all(accounts: &Accounts, user: i64, sessions: &[i64]) {
    accounts.sessions.forget(sessions);
    accounts.events.end(Ended::User(user));
}
