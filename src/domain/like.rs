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

use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

use super::moment::readable;
use super::page::{Page, PageQuery};
use super::user::{KeyedProfile, PROFILE_COLUMNS, Profile, keyed_page};
use super::visibility::{Reach, Who, visible_person};
use crate::clock::Millis;
use crate::db::{self, Sql};
use crate::entity::{moment, moment_like};
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
    db: &DatabaseConnection,
    viewer: i64,
    id: i64,
    change: LikeChange,
    now: Millis,
) -> AppResult<moment::Model> {
    let txn = db::begin(db).await?;
    let locked: Option<moment::Model> = db::fetch_one(
        &txn,
        Sql::new("UPDATE moments SET likes_count = likes_count WHERE id = ")
            .bind(id)
            .push(" AND ")
            .append(readable("moments", now, viewer, Reach::Direct))
            .push(" RETURNING *"),
    )
    .await?;
    let Some(mut m) = locked else {
        return Err(AppError::not_found("moment not found"));
    };
    let like = || {
        Sql::new("moment_id = ")
            .bind(id)
            .push(" AND user_id = ")
            .bind(viewer)
    };
    let liked = db::fetch_one::<LikedRow, _>(
        &txn,
        Sql::new("SELECT moment_id FROM moment_likes WHERE ").append(like()),
    )
    .await?
    .is_some();
    let want = match change {
        LikeChange::Toggle => !liked,
        LikeChange::Set(v) => v,
    };
    if want != liked {
        let delta = if want {
            let row = moment_like::Model {
                moment_id: id,
                user_id: viewer,
                created_at: now,
            };
            db::insert::row(&txn, row).await?;
            1
        } else {
            db::execute(
                &txn,
                Sql::new("DELETE FROM moment_likes WHERE ").append(like()),
            )
            .await?;
            -1
        };
        db::execute(
            &txn,
            Sql::new("UPDATE moments SET likes_count = likes_count + ")
                .bind(delta)
                .push(" WHERE id = ")
                .bind(id),
        )
        .await?;
        m.likes_count += delta;
    }
    txn.commit().await?;
    // As the liker reads it (without the likes of people they may not see).
    Ok(super::moment::find_readable(db, Some(viewer), id, now)
        .await?
        .unwrap_or(m))
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
    let rows: Vec<LikedRow> = db::fetch_all(
        db,
        Sql::new("SELECT moment_id FROM moment_likes WHERE user_id = ")
            .bind(viewer)
            .push(" AND moment_id IN (")
            .list(moment_ids.iter().copied())
            .push(")"),
    )
    .await?;
    Ok(rows.into_iter().map(|r| r.moment_id).collect())
}

/// A page of the people who like a moment whom `viewer` (its author) may
/// see, most recent first.
pub async fn likers_page<C: ConnectionTrait>(
    db: &C,
    moment_id: i64,
    viewer: i64,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let sql = Sql::new(&format!(
        "SELECT {PROFILE_COLUMNS}, l.created_at AS k_ts FROM moment_likes l \
         JOIN users u ON u.id = l.user_id WHERE l.moment_id = "
    ))
    .bind(moment_id)
    .push(" AND ")
    .append(visible_person("l.user_id", Who::User(viewer)))
    .append(q.bounds("l.created_at", "u.id"));
    let rows: Vec<KeyedProfile> = db::fetch_all(db, sql).await?;
    Ok(keyed_page(q, rows))
}

/// Before an account is deleted (in its transaction): takes one like off
/// every moment the user liked, since the like rows then go by cascade.
pub async fn forget_user<C: ConnectionTrait>(txn: &C, user: i64) -> AppResult<()> {
    db::execute(
        txn,
        Sql::new(
            "UPDATE moments SET likes_count = likes_count - 1 \
             WHERE id IN (SELECT moment_id FROM moment_likes WHERE user_id = ",
        )
        .bind(user)
        .push(")"),
    )
    .await?;
    Ok(())
}
