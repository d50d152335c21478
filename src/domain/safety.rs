//! What one user keeps towards another: close friends, hiding one's stories
//! from someone, muting, blocking. One table, `user_relations`, one row per
//! (subject, object, kind); what each kind means for reads is
//! `domain::visibility`'s.
//!
//! - A close friend must be an accepted friend; ending the friendship (or a
//!   block) takes them off the list. The list is its owner's alone.
//! - Blocking ends the friendship and any pending request between the two,
//!   and takes each off the other's close-friends list, in one transaction.
//!   Only the blocker can undo it; the blocked person reads the blocker as
//!   not found, like anyone they cannot see.
//! - Every list is paged, most recent first.

use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::page::{Page, PageQuery};
use super::user::{self, KeyedProfile, PROFILE_COLUMNS, Profile, keyed_page};
use super::visibility::kind;
use crate::clock::Millis;
use crate::db::{self, Sql};
use crate::error::{AppError, AppResult};

/// A list one user keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// People who see the user's `CLOSE_FRIENDS` statuses.
    CloseFriend,
    /// People who never see the user's statuses.
    Hide,
    /// People whose content the user does not see in lists.
    Mute,
    /// People the user blocked.
    Block,
}

impl Relation {
    fn kind(self) -> &'static str {
        match self {
            Relation::CloseFriend => kind::CLOSE_FRIEND,
            Relation::Hide => kind::HIDE,
            Relation::Mute => kind::MUTE,
            Relation::Block => kind::BLOCK,
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Relation::CloseFriend => "add yourself to your close friends",
            Relation::Hide => "hide your stories from yourself",
            Relation::Mute => "mute yourself",
            Relation::Block => "block yourself",
        }
    }
}

/// Puts `other` on the viewer's `list` (idempotent). Yourself is
/// `BAD_USER_INPUT`; an unknown user, and (but for a block) one the viewer
/// cannot see (suspended, blocked either way), is `NOT_FOUND`; a close
/// friend who is not an accepted friend is `BAD_USER_INPUT`.
pub async fn add(
    db: &DatabaseConnection,
    viewer: i64,
    other: i64,
    list: Relation,
    now: Millis,
) -> AppResult<()> {
    if viewer == other {
        return Err(AppError::bad_input(format!("you cannot {}", list.verb())));
    }
    // Anyone who exists may be blocked, one who blocked the viewer too (and
    // blocking again is idempotent); the other lists need someone visible.
    let found = if list == Relation::Block {
        user::find_by_id(db, other).await?.is_some()
    } else {
        user::is_visible(db, viewer, other).await?
    };
    if !found {
        return Err(AppError::not_found("user not found"));
    }
    let txn = db::begin(db).await?;
    let insert =
        Sql::new("INSERT INTO user_relations (subject_id, object_id, kind, created_at) SELECT ")
            .bind(viewer)
            .push(", ")
            .bind(other)
            .push(", ")
            .bind(list.kind())
            .push(", ")
            .bind(now);
    let insert = if list == Relation::CloseFriend {
        // Only an accepted friend, checked in the statement that adds them.
        insert
            .push(" WHERE ")
            .bind(other)
            .push(" IN (")
            .append(super::visibility::friend_ids(viewer))
            .push(")")
    } else {
        insert.push(" WHERE 1 = 1")
    };
    let added = db::execute(
        &txn,
        insert.push(" ON CONFLICT (subject_id, object_id, kind) DO NOTHING"),
    )
    .await?;
    if list == Relation::CloseFriend && added == 0 && !has(&txn, viewer, other, list).await? {
        return Err(AppError::bad_input(
            "only accepted friends can be close friends",
        ));
    }
    if list == Relation::Block {
        super::friend::end_between(&txn, viewer, other).await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Takes `other` off the viewer's `list` (idempotent; `NOT_FOUND` for an
/// unknown user). Unblocking is the blocker's: it removes the viewer's own
/// block only.
pub async fn remove(
    db: &DatabaseConnection,
    viewer: i64,
    other: i64,
    list: Relation,
) -> AppResult<()> {
    if viewer == other {
        return Err(AppError::bad_input(format!("you cannot {}", list.verb())));
    }
    if user::find_by_id(db, other).await?.is_none() {
        return Err(AppError::not_found("user not found"));
    }
    db::execute(
        db,
        Sql::new("DELETE FROM user_relations WHERE ").append(row_of(viewer, other, list)),
    )
    .await?;
    Ok(())
}

/// SQL that keeps the one row saying `viewer` keeps `other` on `list`.
fn row_of(viewer: i64, other: i64, list: Relation) -> Sql {
    Sql::new("subject_id = ")
        .bind(viewer)
        .push(" AND object_id = ")
        .bind(other)
        .push(" AND kind = ")
        .bind(list.kind())
}

async fn has<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    other: i64,
    list: Relation,
) -> AppResult<bool> {
    #[derive(sea_orm::FromQueryResult)]
    struct Row {
        #[expect(dead_code, reason = "only whether a row exists is read")]
        object_id: i64,
    }
    let row: Option<Row> = db::fetch_one(
        db,
        Sql::new("SELECT object_id FROM user_relations WHERE ").append(row_of(viewer, other, list)),
    )
    .await?;
    Ok(row.is_some())
}

/// Takes each of the two off the other's close-friends list (when their
/// friendship ends).
pub async fn forget_close<C: ConnectionTrait>(db: &C, a: i64, b: i64) -> AppResult<()> {
    db::execute(
        db,
        Sql::new("DELETE FROM user_relations WHERE kind = ")
            .bind(kind::CLOSE_FRIEND)
            .push(" AND ((subject_id = ")
            .bind(a)
            .push(" AND object_id = ")
            .bind(b)
            .push(") OR (subject_id = ")
            .bind(b)
            .push(" AND object_id = ")
            .bind(a)
            .push("))"),
    )
    .await?;
    Ok(())
}

/// A page of the viewer's `list`, most recently added first. People the
/// viewer cannot see any more (suspended accounts; a block the other way)
/// are left out, except on the block list, which must let them unblock.
pub async fn page<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    list: Relation,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let mut sql = Sql::new(&format!(
        "SELECT {PROFILE_COLUMNS}, r.created_at AS k_ts FROM user_relations r \
         JOIN users u ON u.id = r.object_id WHERE r.subject_id = "
    ))
    .bind(viewer)
    .push(" AND r.kind = ")
    .bind(list.kind());
    if list != Relation::Block {
        sql = sql.push(" AND ").append(super::visibility::visible_person(
            "u.id",
            super::visibility::Who::User(viewer),
        ));
    }
    let rows: Vec<KeyedProfile> =
        db::fetch_all(db, sql.append(q.bounds("r.created_at", "u.id"))).await?;
    Ok(keyed_page(q, rows))
}
