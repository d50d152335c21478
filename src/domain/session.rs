//! Sign-in sessions. A token is good only while the session it names
//! exists: `signOut` ends one, `signOutEverywhere` and `changePassword` end
//! all of an account's, deleting the account ends them by cascade. Each
//! instance remembers sessions it found alive for [`ALIVE_FOR`] (so an
//! authenticated request costs no statement most of the time) and forgets
//! those it ends at once; a session ended on another instance is refused
//! here within [`ALIVE_FOR`]. Open websockets of an ended session are closed
//! (through [`crate::events::EventBus::end`], and re-checked at every
//! keepalive).

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;
use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::app::AppState;
use crate::auth::{Bearer, Viewer};
use crate::clock::Millis;
use crate::db;
use crate::error::{AppError, AppResult};
use crate::events::Ended;

/// How long a session found alive is trusted without asking the database.
pub const ALIVE_FOR: Duration = Duration::from_secs(5);

/// Sessions this instance found alive lately.
#[derive(Debug)]
pub struct AliveSessions {
    seen: Mutex<LruCache<i64, Instant>>,
}

impl Default for AliveSessions {
    fn default() -> Self {
        let size = NonZeroUsize::new(10_000).unwrap_or(NonZeroUsize::MIN);
        Self {
            seen: Mutex::new(LruCache::new(size)),
        }
    }
}

impl AliveSessions {
    fn fresh(&self, session: i64) -> bool {
        self.seen
            .lock()
            .ok()
            .and_then(|mut s| s.get(&session).copied())
            .is_some_and(|at| at.elapsed() < ALIVE_FOR)
    }

    fn remember(&self, session: i64) {
        if let Ok(mut s) = self.seen.lock() {
            s.put(session, Instant::now());
        }
    }

    fn forget(&self, sessions: &[i64]) {
        if let Ok(mut s) = self.seen.lock() {
            for id in sessions {
                s.pop(id);
            }
        }
    }
}

/// Starts a session for `user`; returns its id (random: it is in tokens).
pub async fn start<C: ConnectionTrait>(
    db: &C,
    user: i64,
    now: Millis,
    ttl: Millis,
) -> AppResult<i64> {
    let id = crate::ids::random_id();
    db::execute(
        db,
        "INSERT INTO sessions (id, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
        vec![
            id.into(),
            user.into(),
            now.into(),
            now.saturating_add(ttl).into(),
        ],
    )
    .await?;
    Ok(id)
}

/// The viewer a bearer stands for: its user while its session lasts;
/// `UNAUTHENTICATED` once it has ended.
pub async fn viewer(app: &AppState, bearer: Option<Bearer>) -> AppResult<Viewer> {
    let Some(bearer) = bearer else {
        return Ok(Viewer::Anonymous);
    };
    if app.sessions.fresh(bearer.session) || alive(app, bearer).await? {
        return Ok(Viewer::User(bearer.user));
    }
    Err(AppError::unauthenticated(
        "this sign-in has ended (signed out, password changed or account deleted)",
    ))
}

/// Whether `bearer`'s session still exists, asking the database.
pub async fn alive(app: &AppState, bearer: Bearer) -> AppResult<bool> {
    #[derive(FromQueryResult)]
    struct Found {
        id: i64,
    }
    let found: Option<Found> = db::fetch_one(
        &app.db,
        "SELECT id FROM sessions WHERE id = $1 AND user_id = $2 AND expires_at > $3",
        vec![
            bearer.session.into(),
            bearer.user.into(),
            app.clock.now().into(),
        ],
    )
    .await?;
    let alive = found.is_some_and(|f| f.id == bearer.session);
    if alive {
        app.sessions.remember(bearer.session);
    }
    Ok(alive)
}

/// Ends one session (signing out one device).
pub async fn end(app: &AppState, bearer: Bearer) -> AppResult<()> {
    db::execute(
        &app.db,
        "DELETE FROM sessions WHERE id = $1 AND user_id = $2",
        vec![bearer.session.into(), bearer.user.into()],
    )
    .await?;
    app.sessions.forget(&[bearer.session]);
    app.events.end(Ended::Session(bearer.session));
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
        "DELETE FROM sessions WHERE user_id = $1 RETURNING id",
        vec![user.into()],
    )
    .await?;
    Ok(ids.into_iter().map(|i| i.id).collect())
}

/// After [`end_all`] committed: this instance forgets the sessions and
/// closes their websockets.
pub fn forget_all(app: &AppState, user: i64, sessions: &[i64]) {
    app.sessions.forget(sessions);
    app.events.end(Ended::User(user));
}
