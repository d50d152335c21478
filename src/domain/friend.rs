//! The friend graph. One row per pair (smaller id first) holds who asked and
//! whether it was accepted, so every change is a single atomic statement: two
//! people asking each other at once meet on the same primary key and end as
//! friends.

use std::collections::{HashMap, HashSet};

use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

use super::page::{Page, PageQuery};
use super::user::{self, PROFILE_COLUMNS, Profile, keyed_page};
use super::visibility;
use crate::clock::Millis;
use crate::db::{self, Sql};
use crate::error::{AppError, AppResult};
use crate::events::Kind;
use crate::events::log::{self, Change};

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
    created_at: i64,
    accepted_at: Option<i64>,
}

/// How a viewer stands with another user, and when a request between them
/// that waits for an answer was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    pub state: FriendshipState,
    pub requested_at: Option<Millis>,
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

/// Checks the other side of a friend mutation: not yourself, and a user the
/// viewer may see (one who blocked the viewer, or whom the viewer blocked,
/// or a suspended account, is not found).
async fn check_other(db: &DatabaseConnection, viewer: i64, other: i64) -> AppResult<()> {
    if viewer == other {
        return Err(AppError::bad_input("you cannot befriend yourself"));
    }
    if !user::is_visible(db, viewer, other).await? {
        return Err(AppError::not_found("user not found"));
    }
    Ok(())
}

/// Asks `other` to be friends; if they already asked the viewer, both become friends.
pub async fn send_request(
    db: &DatabaseConnection,
    viewer: i64,
    other: i64,
    now: Millis,
) -> AppResult<FriendshipState> {
    check_other(db, viewer, other).await?;
    let (low, high) = pair(viewer, other);
    let txn = db::begin(db).await?;
    // A request the other had sent makes them friends.
    let watch = super::tray::Watch::before(&txn, viewer, other, now).await?;
    let row: Option<PairRow> = db::fetch_one(
        &txn,
        Sql::new(
            "INSERT INTO friendships (low_id, high_id, requester_id, created_at, accepted_at) \
             VALUES (",
        )
        .list([low, high, viewer, now])
        .push(
            ", NULL) ON CONFLICT (low_id, high_id) DO UPDATE SET accepted_at = CASE \
               WHEN friendships.accepted_at IS NULL AND friendships.requester_id <> excluded.requester_id \
               THEN excluded.created_at ELSE friendships.accepted_at END \
             RETURNING low_id, high_id, requester_id, created_at, accepted_at",
        ),
    )
    .await?;
    let state = row
        .map(|r| r.state_for(viewer))
        .ok_or_else(|| AppError::internal("friend request", "upsert returned no row"))?;
    announce(&txn, viewer, other, Sides::Both, now).await?;
    watch.after(&txn).await?;
    txn.commit().await?;
    Ok(state)
}

/// Accepts `other`'s request. Accepting again is harmless; with no request
/// from them it is `BAD_USER_INPUT`.
pub async fn accept_request(
    db: &DatabaseConnection,
    viewer: i64,
    other: i64,
    now: Millis,
) -> AppResult<FriendshipState> {
    check_other(db, viewer, other).await?;
    let (low, high) = pair(viewer, other);
    let txn = db::begin(db).await?;
    let watch = super::tray::Watch::before(&txn, viewer, other, now).await?;
    let accepted = db::execute(
        &txn,
        Sql::new("UPDATE friendships SET accepted_at = ")
            .bind(now)
            .push(" WHERE low_id = ")
            .bind(low)
            .push(" AND high_id = ")
            .bind(high)
            .push(" AND requester_id = ")
            .bind(other)
            .push(" AND accepted_at IS NULL"),
    )
    .await?;
    let now_state = state(&txn, viewer, other).await?;
    if now_state != FriendshipState::Friends {
        return Err(AppError::bad_input(
            "there is no friend request from this user",
        ));
    }
    if accepted == 1 {
        announce(&txn, viewer, other, Sides::Both, now).await?;
        watch.after(&txn).await?;
    }
    txn.commit().await?;
    Ok(FriendshipState::Friends)
}

/// Removes a friend, declines their request or cancels the viewer's own.
pub async fn remove(
    db: &DatabaseConnection,
    viewer: i64,
    other: i64,
    now: Millis,
) -> AppResult<FriendshipState> {
    check_other(db, viewer, other).await?;
    let txn = db::begin(db).await?;
    let watch = super::tray::Watch::before(&txn, viewer, other, now).await?;
    if end_between(&txn, viewer, other).await? {
        announce(&txn, viewer, other, Sides::Both, now).await?;
        watch.after(&txn).await?;
    }
    txn.commit().await?;
    Ok(FriendshipState::None)
}

/// Who hears of a change between two users.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sides {
    Both,
    /// The viewer alone (what they did must not reach the other: a block
    /// of someone they had nothing with).
    ViewerOnly,
}

/// Tells the subscribers of `viewer` (and, with [`Sides::Both`], of
/// `other`) that how they stand with each other changed: one
/// `FriendshipChanged` event per side, in the caller's transaction.
pub async fn announce<C: ConnectionTrait>(
    txn: &C,
    viewer: i64,
    other: i64,
    sides: Sides,
    now: Millis,
) -> AppResult<()> {
    let change = |side: i64, about: i64| Change {
        kind: Kind::FriendshipChanged,
        subject: about,
        author: about,
        audience: String::new(),
        viewer: Some(side),
    };
    let mut changes = vec![change(viewer, other)];
    if sides == Sides::Both {
        changes.push(change(other, viewer));
    }
    log::record(txn, &changes, now).await
}

/// Ends whatever stands between two users in the friend graph: the
/// friendship or a pending request, and each one's place on the other's
/// close-friends list. Whether there was a friendship or request.
pub async fn end_between<C: ConnectionTrait>(txn: &C, a: i64, b: i64) -> AppResult<bool> {
    let (low, high) = pair(a, b);
    let ended = db::execute(
        txn,
        Sql::new("DELETE FROM friendships WHERE low_id = ")
            .bind(low)
            .push(" AND high_id = ")
            .bind(high),
    )
    .await?;
    super::safety::forget_close(txn, a, b).await?;
    Ok(ended > 0)
}

/// How `viewer` stands with each of `others` (the friendship loader's query).
pub async fn states<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    others: &[i64],
) -> AppResult<HashMap<i64, Standing>> {
    let mut out: HashMap<i64, Standing> = others
        .iter()
        .map(|&o| {
            let state = if o == viewer {
                FriendshipState::Myself
            } else {
                FriendshipState::None
            };
            (
                o,
                Standing {
                    state,
                    requested_at: None,
                },
            )
        })
        .collect();
    let ids: Vec<i64> = others.iter().copied().filter(|&o| o != viewer).collect();
    if ids.is_empty() {
        return Ok(out);
    }
    let rows: Vec<PairRow> = db::fetch_all(
        db,
        Sql::new(
            "SELECT low_id, high_id, requester_id, created_at, accepted_at FROM friendships WHERE (low_id = ",
        )
        .bind(viewer)
        .push(" AND high_id IN (")
        .list(ids.iter().copied())
        .push(")) OR (high_id = ")
        .bind(viewer)
        .push(" AND low_id IN (")
        .list(ids.iter().copied())
        .push("))"),
    )
    .await?;
    for r in rows {
        let standing = Standing {
            state: r.state_for(viewer),
            requested_at: r.accepted_at.is_none().then_some(r.created_at),
        };
        out.insert(r.other(viewer), standing);
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
        .map_or(FriendshipState::None, |s| s.state))
}

/// The ids of `user`'s accepted friends.
pub async fn friend_ids<C: ConnectionTrait>(db: &C, user: i64) -> AppResult<HashSet<i64>> {
    let sql = Sql::new("SELECT f.high_id AS id FROM (")
        .append(visibility::friend_ids(user))
        .push(") f");
    let rows: Vec<IdRow> = db::fetch_all(db, sql).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

#[derive(Debug, FromQueryResult)]
struct IdRow {
    id: i64,
}

#[derive(Debug, FromQueryResult)]
struct CountRow {
    id: i64,
    n: i64,
}

/// How many accepted friends each of `users` has that `viewer` may see
/// (the count of what their friends list shows the viewer); one statement.
pub async fn counts<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    users: &[i64],
) -> AppResult<HashMap<i64, i64>> {
    if users.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = Sql::new(
        "SELECT f.uid AS id, COUNT(*) AS n FROM (\
         SELECT low_id AS uid, high_id AS fid FROM friendships WHERE low_id IN (",
    )
    .list(users.iter().copied())
    .push(
        ") AND accepted_at IS NOT NULL UNION ALL \
         SELECT high_id AS uid, low_id AS fid FROM friendships WHERE high_id IN (",
    )
    .list(users.iter().copied())
    .push(") AND accepted_at IS NOT NULL) f WHERE ")
    .append(visibility::visible_person(
        "f.fid",
        visibility::Who::User(viewer),
    ))
    .push(" GROUP BY f.uid");
    let rows: Vec<CountRow> = db::fetch_all(db, sql).await?;
    let mut out: HashMap<i64, i64> = users.iter().map(|&u| (u, 0)).collect();
    out.extend(rows.into_iter().map(|r| (r.id, r.n)));
    Ok(out)
}

/// A page of `user`'s accepted friends whom `viewer` may see, most recent
/// friendship first.
pub async fn friends_page<C: ConnectionTrait>(
    db: &C,
    user: i64,
    viewer: i64,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let sql = Sql::new(&format!(
        "SELECT {PROFILE_COLUMNS}, f.accepted_at AS k_ts FROM ( \
           SELECT high_id AS friend_id, accepted_at FROM friendships WHERE low_id = "
    ))
    .bind(user)
    .push(
        " AND accepted_at IS NOT NULL UNION ALL \
         SELECT low_id AS friend_id, accepted_at FROM friendships WHERE high_id = ",
    )
    .bind(user)
    .push(" AND accepted_at IS NOT NULL) f JOIN users u ON u.id = f.friend_id WHERE ")
    .append(visibility::visible_person(
        "u.id",
        visibility::Who::User(viewer),
    ))
    .append(q.bounds("f.accepted_at", "u.id"));
    Ok(keyed_page(q, db::fetch_all(db, sql).await?))
}

/// A page of users who asked `viewer` and wait for an answer, newest first.
pub async fn incoming_page<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    pending_page(db, viewer, false, q).await
}

/// A page of the users `viewer` asked to be friends who have not answered,
/// newest request first.
pub async fn outgoing_page<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    pending_page(db, viewer, true, q).await
}

/// A page of the other sides of `viewer`'s requests that wait for an
/// answer: those the viewer `sent`, or else those they received.
async fn pending_page<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    sent: bool,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let sql = Sql::new(&format!(
        "SELECT {PROFILE_COLUMNS}, f.created_at AS k_ts FROM friendships f \
         JOIN users u ON u.id = CASE WHEN f.low_id = "
    ))
    .bind(viewer)
    .push(" THEN f.high_id ELSE f.low_id END WHERE (f.low_id = ")
    .bind(viewer)
    .push(" OR f.high_id = ")
    .bind(viewer)
    .push(if sent {
        ") AND f.requester_id = "
    } else {
        ") AND f.requester_id <> "
    })
    .bind(viewer)
    .push(" AND f.accepted_at IS NULL AND ")
    .append(visibility::visible_person(
        "u.id",
        visibility::Who::User(viewer),
    ))
    .append(q.bounds("f.created_at", "u.id"));
    Ok(keyed_page(q, db::fetch_all(db, sql).await?))
}
