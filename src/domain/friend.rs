//! The friend graph. One row per pair (smaller id first) holds who asked and
//! whether it was accepted, so every change is a single atomic statement: two
//! people asking each other at once meet on the same primary key and end as
//! friends.

use std::collections::{HashMap, HashSet};

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::page::{Page, PageQuery};
use super::user::{self, PROFILE_COLUMNS, Profile, keyed_page};
use super::visibility::friend_ids_sql;
use crate::app::AppState;
use crate::db;
use crate::error::{AppError, AppResult};

/// How a viewer stands with another user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FriendshipState {
    /// The user is the viewer.
    Myself,
    None,
    /// The viewer asked; the user has not answered.
    OutgoingRequest,
    /// The user asked; the viewer has not answered.
    IncomingRequest,
    Friends,
}

#[derive(Debug, FromQueryResult)]
struct PairRow {
    low_id: i64,
    high_id: i64,
    requester_id: i64,
    accepted_at: Option<i64>,
}

impl PairRow {
    fn state_for(&self, viewer: i64) -> FriendshipState {
        if self.accepted_at.is_some() {
            FriendshipState::Friends
        } else if self.requester_id == viewer {
            FriendshipState::OutgoingRequest
        } else {
            FriendshipState::IncomingRequest
        }
    }

    fn other(&self, viewer: i64) -> i64 {
        if self.low_id == viewer {
            self.high_id
        } else {
            self.low_id
        }
    }
}

fn pair(a: i64, b: i64) -> (i64, i64) {
    if a < b { (a, b) } else { (b, a) }
}

/// Checks the other side of a friend mutation: not yourself, and a user that exists.
async fn check_other(app: &AppState, viewer: i64, other: i64) -> AppResult<()> {
    if viewer == other {
        return Err(AppError::bad_input("you cannot befriend yourself"));
    }
    if user::find_by_id(&app.db, other).await?.is_none() {
        return Err(AppError::not_found("user not found"));
    }
    Ok(())
}

/// Asks `other` to be friends; if they already asked the viewer, both become friends.
pub async fn send_request(app: &AppState, viewer: i64, other: i64) -> AppResult<FriendshipState> {
    check_other(app, viewer, other).await?;
    let (low, high) = pair(viewer, other);
    let now = app.clock.now();
    let row: Option<PairRow> = db::fetch_one(
        &app.db,
        "INSERT INTO friendships (low_id, high_id, requester_id, created_at, accepted_at) \
         VALUES ($1, $2, $3, $4, NULL) \
         ON CONFLICT (low_id, high_id) DO UPDATE SET accepted_at = CASE \
           WHEN friendships.accepted_at IS NULL AND friendships.requester_id <> excluded.requester_id \
           THEN excluded.created_at ELSE friendships.accepted_at END \
         RETURNING low_id, high_id, requester_id, accepted_at",
        vec![low.into(), high.into(), viewer.into(), now.into()],
    )
    .await?;
    row.map(|r| r.state_for(viewer))
        .ok_or_else(|| AppError::internal("friend request", "upsert returned no row"))
}

/// Accepts `other`'s request. Accepting again is harmless; with no request
/// from them it is `BAD_USER_INPUT`.
pub async fn accept_request(app: &AppState, viewer: i64, other: i64) -> AppResult<FriendshipState> {
    check_other(app, viewer, other).await?;
    let (low, high) = pair(viewer, other);
    db::execute(
        &app.db,
        "UPDATE friendships SET accepted_at = $4 \
         WHERE low_id = $1 AND high_id = $2 AND requester_id = $3 AND accepted_at IS NULL",
        vec![
            low.into(),
            high.into(),
            other.into(),
            app.clock.now().into(),
        ],
    )
    .await?;
    match state(&app.db, viewer, other).await? {
        FriendshipState::Friends => Ok(FriendshipState::Friends),
        _ => Err(AppError::bad_input(
            "there is no friend request from this user",
        )),
    }
}

/// Removes a friend, declines their request or cancels the viewer's own.
pub async fn remove(app: &AppState, viewer: i64, other: i64) -> AppResult<FriendshipState> {
    check_other(app, viewer, other).await?;
    let (low, high) = pair(viewer, other);
    db::execute(
        &app.db,
        "DELETE FROM friendships WHERE low_id = $1 AND high_id = $2",
        vec![low.into(), high.into()],
    )
    .await?;
    Ok(FriendshipState::None)
}

/// How `viewer` stands with each of `others` (the friendship loader's query).
pub async fn states<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    others: &[i64],
) -> AppResult<HashMap<i64, FriendshipState>> {
    let mut out: HashMap<i64, FriendshipState> = others
        .iter()
        .map(|&o| {
            let s = if o == viewer {
                FriendshipState::Myself
            } else {
                FriendshipState::None
            };
            (o, s)
        })
        .collect();
    let ids: Vec<i64> = others.iter().copied().filter(|&o| o != viewer).collect();
    if ids.is_empty() {
        return Ok(out);
    }
    let list = db::placeholders(2, ids.len());
    let mut values = vec![viewer.into()];
    values.extend(ids.iter().map(|&i| i.into()));
    let rows: Vec<PairRow> = db::fetch_all(
        db,
        &format!(
            "SELECT low_id, high_id, requester_id, accepted_at FROM friendships \
             WHERE (low_id = $1 AND high_id IN ({list})) OR (high_id = $1 AND low_id IN ({list}))"
        ),
        values,
    )
    .await?;
    for r in rows {
        out.insert(r.other(viewer), r.state_for(viewer));
    }
    Ok(out)
}

/// How `viewer` stands with `other`.
pub async fn state<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    other: i64,
) -> AppResult<FriendshipState> {
    Ok(states(db, viewer, &[other])
        .await?
        .remove(&other)
        .unwrap_or(FriendshipState::None))
}

/// The ids of `user`'s accepted friends.
pub async fn friend_ids<C: ConnectionTrait>(db: &C, user: i64) -> AppResult<HashSet<i64>> {
    let sql = format!("SELECT f.high_id AS id FROM ({}) f", friend_ids_sql(1));
    let rows: Vec<IdRow> = db::fetch_all(db, &sql, vec![user.into()]).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

#[derive(Debug, FromQueryResult)]
struct IdRow {
    id: i64,
}

/// A page of `user`'s accepted friends, most recent friendship first.
pub async fn friends_page<C: ConnectionTrait>(
    db: &C,
    user: i64,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let mut sql = format!(
        "SELECT {PROFILE_COLUMNS}, f.accepted_at AS k_ts FROM ( \
           SELECT high_id AS friend_id, accepted_at FROM friendships WHERE low_id = $1 AND accepted_at IS NOT NULL \
           UNION ALL \
           SELECT low_id AS friend_id, accepted_at FROM friendships WHERE high_id = $1 AND accepted_at IS NOT NULL \
         ) f JOIN users u ON u.id = f.friend_id WHERE 1 = 1"
    );
    let mut values = vec![user.into()];
    q.push_sql(&mut sql, &mut values, "f.accepted_at", "u.id");
    Ok(keyed_page(q, db::fetch_all(db, &sql, values).await?))
}

/// A page of users who asked `viewer` and wait for an answer, newest first.
pub async fn incoming_page<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let mut sql = format!(
        "SELECT {PROFILE_COLUMNS}, f.created_at AS k_ts FROM friendships f \
         JOIN users u ON u.id = f.requester_id \
         WHERE (f.low_id = $1 OR f.high_id = $1) AND f.requester_id <> $1 AND f.accepted_at IS NULL"
    );
    let mut values = vec![viewer.into()];
    q.push_sql(&mut sql, &mut values, "f.created_at", "u.id");
    Ok(keyed_page(q, db::fetch_all(db, &sql, values).await?))
}
