//! Likes: one row per (moment, user) under a unique key, and the moment's
//! `likes_count` kept in the same transaction.
//!
//! A like change first writes the moment's row (a no-op `UPDATE` that only
//! matches a moment that is live and visible to the liker): that is the row
//! lock on PostgreSQL and the write lock on SQLite, so changes to one moment
//! queue and `likes_count` always equals the number of like rows, whatever
//! the concurrency. Liking what the viewer cannot see, or what is expired or
//! deleted, is `NOT_FOUND` exactly like a moment that does not exist.

use std::collections::HashSet;

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::moment::readable_sql;
use super::page::{Page, PageQuery};
use super::user::{KeyedProfile, PROFILE_COLUMNS, Profile, keyed_page};
use crate::app::AppState;
use crate::db::{self, placeholders};
use crate::entity::moment;
use crate::error::{AppError, AppResult};

/// What a like mutation asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LikeChange {
    /// Like if not liked, unlike if liked.
    Toggle,
    /// Like (`true`) or unlike (`false`); idempotent.
    Set(bool),
}

#[derive(Debug, FromQueryResult)]
struct LikedRow {
    moment_id: i64,
}

/// Applies `change` for `viewer` on moment `id`; returns the moment as the
/// change left it.
pub async fn change(
    app: &AppState,
    viewer: i64,
    id: i64,
    change: LikeChange,
) -> AppResult<moment::Model> {
    let now = app.clock.now();
    let txn = db::begin(&app.db).await?;
    let locked: Option<moment::Model> = db::fetch_one(
        &txn,
        &format!(
            "UPDATE moments SET likes_count = likes_count WHERE id = $3 AND {} RETURNING *",
            readable_sql("moments", 1, 2)
        ),
        vec![now.into(), viewer.into(), id.into()],
    )
    .await?;
    let Some(mut m) = locked else {
        return Err(AppError::not_found("moment not found"));
    };
    let liked = db::fetch_one::<LikedRow, _>(
        &txn,
        "SELECT moment_id FROM moment_likes WHERE moment_id = $1 AND user_id = $2",
        vec![id.into(), viewer.into()],
    )
    .await?
    .is_some();
    let want = match change {
        LikeChange::Toggle => !liked,
        LikeChange::Set(v) => v,
    };
    if want != liked {
        let delta = if want {
            db::execute(
                &txn,
                "INSERT INTO moment_likes (moment_id, user_id, created_at) VALUES ($1, $2, $3)",
                vec![id.into(), viewer.into(), now.into()],
            )
            .await?;
            1
        } else {
            db::execute(
                &txn,
                "DELETE FROM moment_likes WHERE moment_id = $1 AND user_id = $2",
                vec![id.into(), viewer.into()],
            )
            .await?;
            -1
        };
        db::execute(
            &txn,
            "UPDATE moments SET likes_count = likes_count + $1 WHERE id = $2",
            vec![delta.into(), id.into()],
        )
        .await?;
        m.likes_count += delta;
    }
    txn.commit().await?;
    Ok(m)
}

/// Which of `moment_ids` `viewer` likes.
pub async fn liked_by<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    moment_ids: &[i64],
) -> AppResult<HashSet<i64>> {
    if moment_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let mut values = vec![viewer.into()];
    values.extend(moment_ids.iter().map(|&i| i.into()));
    let rows: Vec<LikedRow> = db::fetch_all(
        db,
        &format!(
            "SELECT moment_id FROM moment_likes WHERE user_id = $1 AND moment_id IN ({})",
            placeholders(2, moment_ids.len())
        ),
        values,
    )
    .await?;
    Ok(rows.into_iter().map(|r| r.moment_id).collect())
}

/// A page of the people who like a moment, most recent first.
pub async fn likers_page<C: ConnectionTrait>(
    db: &C,
    moment_id: i64,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let mut sql = format!(
        "SELECT {PROFILE_COLUMNS}, l.created_at AS k_ts FROM moment_likes l \
         JOIN users u ON u.id = l.user_id WHERE l.moment_id = $1"
    );
    let mut values = vec![moment_id.into()];
    q.push_sql(&mut sql, &mut values, "l.created_at", "u.id");
    let rows: Vec<KeyedProfile> = db::fetch_all(db, &sql, values).await?;
    Ok(keyed_page(q, rows))
}

/// Before an account is deleted (in its transaction): takes one like off
/// every moment the user liked, since the like rows then go by cascade.
pub async fn forget_user<C: ConnectionTrait>(txn: &C, user: i64) -> AppResult<()> {
    db::execute(
        txn,
        "UPDATE moments SET likes_count = likes_count - 1 \
         WHERE id IN (SELECT moment_id FROM moment_likes WHERE user_id = $1)",
        vec![user.into()],
    )
    .await?;
    Ok(())
}
