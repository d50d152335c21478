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

    /// The list's name in messages.
    fn name(self) -> &'static str {
        match self {
            Relation::CloseFriend => "close-friends",
            Relation::Hide => "hidden-stories",
            Relation::Mute => "mute",
            Relation::Block => "block",
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

/// Puts `other` on the viewer's `list` (idempotent), which holds at most
/// `max` people. Yourself is `BAD_USER_INPUT`; a user the viewer cannot
/// see and has no relation to (unknown, suspended, or one who blocked the
/// viewer) is `NOT_FOUND`, the same answer for each, and nothing is stored;
/// a close friend who is not an accepted friend is `BAD_USER_INPUT`; a
/// full list is `BAD_USER_INPUT`. The count and the insert are one
/// transaction that first locks the viewer's account row, so lists filled
/// at once hold at most `max` too.
pub async fn add(
    db: &DatabaseConnection,
    viewer: i64,
    other: i64,
    list: Relation,
    max: u32,
    now: Millis,
) -> AppResult<()> {
    if viewer == other {
        return Err(AppError::bad_input(format!("you cannot {}", list.verb())));
    }
    if !knows(db, viewer, other).await? {
        return Err(AppError::not_found("user not found"));
    }
    let txn = db::begin(db).await?;
    // The count below stays true until the insert.
    user::lock_for_write(&txn, viewer).await?;
    let watch = super::tray::Watch::before(&txn, viewer, other, now).await?;
    if !has(&txn, viewer, other, list).await? && count(&txn, viewer, list).await? >= i64::from(max)
    {
        return Err(AppError::bad_input(format!(
            "at most {max} people on one {} list; take someone off first",
            list.name()
        )));
    }
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
        // The blocker hears of it; the blocked side only as the end of a
        // friendship or request they had (nothing else tells them).
        let ended = super::friend::end_between(&txn, viewer, other).await?;
        let sides = if ended {
            super::friend::Sides::Both
        } else {
            super::friend::Sides::ViewerOnly
        };
        if added > 0 || ended {
            super::friend::announce(&txn, viewer, other, sides, now).await?;
        }
    }
    watch.after(&txn).await?;
    txn.commit().await?;
    Ok(())
}

/// Takes `other` off the viewer's `list` (idempotent). A user the viewer
/// cannot see and has no relation to is `NOT_FOUND`, as an unknown one is.
/// Unblocking is the blocker's: it removes the viewer's own block only.
pub async fn remove(
    db: &DatabaseConnection,
    viewer: i64,
    other: i64,
    list: Relation,
    now: Millis,
) -> AppResult<()> {
    if viewer == other {
        return Err(AppError::bad_input(format!("you cannot {}", list.verb())));
    }
    if !knows(db, viewer, other).await? {
        return Err(AppError::not_found("user not found"));
    }
    let txn = db::begin(db).await?;
    let watch = super::tray::Watch::before(&txn, viewer, other, now).await?;
    let removed = db::execute(
        &txn,
        Sql::new("DELETE FROM user_relations WHERE ").append(row_of(viewer, other, list)),
    )
    .await?;
    // An unblock changes how the blocker stands with the user: theirs to
    // hear (the other side was never told of the block).
    if list == Relation::Block && removed > 0 {
        super::friend::announce(&txn, viewer, other, super::friend::Sides::ViewerOnly, now).await?;
    }
    watch.after(&txn).await?;
    txn.commit().await?;
    Ok(())
}

/// Whether `viewer` may act on `other`: `other` is visible to them, or is
/// on one of their own lists (a person they blocked is hidden from them,
/// but known). Anyone else is, to them, no one.
async fn knows(db: &DatabaseConnection, viewer: i64, other: i64) -> AppResult<bool> {
    #[derive(sea_orm::FromQueryResult)]
    struct Row {
        #[expect(dead_code, reason = "only whether a row exists is read")]
        object_id: i64,
    }
    if user::is_visible(db, viewer, other).await? {
        return Ok(true);
    }
    let listed: Option<Row> = db::fetch_one(
        db,
        Sql::new("SELECT object_id FROM user_relations WHERE subject_id = ")
            .bind(viewer)
            .push(" AND object_id = ")
            .bind(other)
            .push(" LIMIT 1"),
    )
    .await?;
    Ok(listed.is_some())
}

/// How many people are on the viewer's `list`.
async fn count<C: ConnectionTrait>(db: &C, viewer: i64, list: Relation) -> AppResult<i64> {
    #[derive(sea_orm::FromQueryResult)]
    struct Count {
        n: i64,
    }
    let n: Option<Count> = db::fetch_one(
        db,
        Sql::new("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM user_relations WHERE subject_id = ")
            .bind(viewer)
            .push(" AND kind = ")
            .bind(list.kind()),
    )
    .await?;
    Ok(n.map_or(0, |c| c.n))
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
