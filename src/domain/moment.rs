//! Moments: create, read, delete and restore, and the two lifecycle jobs.
//!
//! A moment is ephemeral (`durationHours` 1..168 stamps `expires_at`) or
//! journaled (`durationHours` 0: no `expires_at`, never expires). Deleting
//! soft-deletes (`deleted_at`); the author can restore within the grace
//! (`EPHEMERA_MOMENT_GRACE`, 7 days). The expiry job soft-deletes expired
//! ephemeral moments; the purge hard-deletes moments soft-deleted more than
//! the grace ago, with their likes (cascade) and media (deletion outbox).
//!
//! Creating, deleting (by hand or by expiry) and restoring each write
//! their change-log event in the same transaction (see `events`).
//!
//! Every read goes through [`readable`]: live and visible to the viewer,
//! in SQL, so no page is filtered after fetching and no read waits for a job.

use std::collections::HashMap;

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

use super::expiry::{expired_moment, live_moment, moment_expires_at, purgeable_moment};
use super::geo::{map_cell, validate_point};
use super::location::{self, Placed};
use super::page::{Key, Page, PageQuery};
use super::visibility::{Reach, Who};
use super::{BatchReport, Scope, visibility};
use crate::clock::{Millis, duration_millis};
use crate::db::{self, Dialect, Sql};
use crate::entity::moment;
use crate::error::{AppError, AppResult};
use crate::events::Kind;
use crate::events::log::{self, Change};
use crate::ids::IdGenerator;
use crate::state::Media;

const MAX_CAPTION: usize = 2200;
const MAX_HOURS: i32 = 168;

/// Who may see a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Anyone, signed in or not.
    Public,
    /// The author and the author's accepted friends.
    FriendsOnly,
}

impl Visibility {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "PUBLIC",
            Visibility::FriendsOnly => "FRIENDS_ONLY",
        }
    }

    /// From the stored form (anything unknown is the stricter one).
    pub fn from_stored(s: &str) -> Self {
        if s == "PUBLIC" {
            Visibility::Public
        } else {
            Visibility::FriendsOnly
        }
    }
}

/// Input of [`create`].
#[derive(Debug)]
pub struct NewMoment {
    pub media_id: i64,
    pub caption: Option<String>,
    pub latitude: f64,
    pub longitude: f64,
    pub duration_hours: i32,
    pub visibility: Visibility,
    pub location_id: Option<i64>,
    pub place_name: Option<String>,
}

/// SQL that keeps the moments of alias `m` that are live at `now` and
/// visible to `viewer` (0 when anonymous) read this way. Every read path,
/// count and like builds on this one rule.
pub fn readable<'a>(m: &str, now: Millis, viewer: impl Into<Who<'a>>, reach: Reach) -> Sql {
    live_moment(m, now)
        .push(" AND ")
        .append(visibility::visible_moment(m, viewer.into(), reach))
}

/// The select list of a moment of alias `m` as `viewer` reads it: every
/// column, with `likes_count` less the likes of people the viewer may not
/// see (blocked either way, suspended), counted from those few people.
pub fn columns(m: &str, viewer: i64) -> Sql {
    use sea_orm::{Iden, Iterable};
    let plain: Vec<String> = moment::Column::iter()
        .map(|c| c.to_string())
        .filter(|c| c != "likes_count")
        .map(|c| format!("{m}.{c}"))
        .collect();
    Sql::new(&plain.join(", "))
        .push(&format!(
            ", CAST({m}.likes_count - (SELECT COUNT(*) FROM ("
        ))
        .append(visibility::excluded(
            Who::User(viewer),
            visibility::Content::Person,
            Reach::Direct,
        ))
        .push(&format!(
            ") hx JOIN moment_likes hl ON hl.user_id = hx.id WHERE hl.moment_id = {m}.id) AS INTEGER) AS likes_count"
        ))
}

/// 0 (journaled) or 1..168 hours.
pub fn validate_duration(hours: i32) -> AppResult<()> {
    if hours == 0 || (1..=MAX_HOURS).contains(&hours) {
        Ok(())
    } else {
        Err(AppError::bad_input(
            "durationHours must be 0 (journaled) or 1 to 168",
        ))
    }
}

/// Checks everything about a new moment that needs no database.
pub fn validate(input: &mut NewMoment) -> AppResult<()> {
    validate_point(input.latitude, input.longitude)?;
    validate_duration(input.duration_hours)?;
    input.caption = super::normalize_text(input.caption.take(), "caption", MAX_CAPTION)?;
    if input.location_id.is_some() && input.place_name.is_some() {
        return Err(AppError::bad_input(
            "pass locationId or placeName, not both",
        ));
    }
    if let Some(name) = &input.place_name {
        super::location::normalize_name(name)?;
    }
    Ok(())
}

/// Posts a moment. Its media must be an upload of the author's not attached
/// elsewhere; `locationId` must name a location; `placeName` resolves to a
/// location (see `domain::location`).
pub async fn create(
    db: &DatabaseConnection,
    media: &Media,
    ids: &IdGenerator,
    author: i64,
    mut input: NewMoment,
    now: Millis,
) -> AppResult<moment::Model> {
    validate(&mut input)?;
    // Only a location the author may see (one with a live moment they may
    // see): another's private place is not found.
    if let Some(id) = input.location_id
        && super::location::find_visible(db, Some(author), id, now)
            .await?
            .is_none()
    {
        return Err(AppError::not_found("location not found"));
    }
    super::media::prepare(db, media, author, input.media_id, now).await?;
    let journaled = input.duration_hours == 0;
    let mut row = moment::Model {
        id: ids.next_id(),
        author_id: author,
        media_id: input.media_id,
        caption: input.caption,
        latitude: input.latitude,
        longitude: input.longitude,
        map_cell: map_cell(input.latitude, input.longitude),
        location_id: input.location_id,
        visibility: input.visibility.as_str().to_owned(),
        is_journaled: journaled,
        duration_hours: input.duration_hours,
        expires_at: moment_expires_at(now, input.duration_hours),
        created_at: now,
        deleted_at: None,
        likes_count: 0,
    };
    let txn = db::begin(db).await?;
    // Each branch starts with a write (see `db`): the place name's row, or the media.
    if let Some(name) = &input.place_name {
        let id =
            super::location::resolve(&txn, name, row.latitude, row.longitude, now, author).await?;
        row.location_id = Some(id);
    }
    super::media::attach(&txn, author, row.media_id, now).await?;
    super::media::insert_holder(&txn, row.clone()).await?;
    let placed = Placed {
        location_id: row.location_id,
        visibility: row.visibility.clone(),
    };
    location::count_public(&txn, &[placed], 1).await?;
    log::record(&txn, &[change(Kind::MomentCreated, &row)], now).await?;
    txn.commit().await?;
    Ok(row)
}

/// The change-log entry of `kind` about moment `m`.
fn change(kind: Kind, m: &moment::Model) -> Change {
    Change {
        kind,
        subject: m.id,
        author: m.author_id,
        audience: m.visibility.clone(),
        viewer: None,
    }
}

/// A moment that just left the live ones, as the change log tells it.
#[derive(Debug, FromQueryResult)]
pub struct Gone {
    pub id: i64,
    pub author_id: i64,
    pub location_id: Option<i64>,
    pub visibility: String,
}

impl Gone {
    fn placed(&self) -> Placed {
        Placed {
            location_id: self.location_id,
            visibility: self.visibility.clone(),
        }
    }

    fn change(&self) -> Change {
        Change {
            kind: Kind::MomentDeleted,
            subject: self.id,
            author: self.author_id,
            audience: self.visibility.clone(),
            viewer: None,
        }
    }
}

/// Counts `gone` out of their locations and logs their deletion.
pub async fn gone<C: ConnectionTrait>(txn: &C, gone: &[Gone], now: Millis) -> AppResult<()> {
    let placed: Vec<Placed> = gone.iter().map(Gone::placed).collect();
    location::count_public(txn, &placed, -1).await?;
    let changes: Vec<Change> = gone.iter().map(Gone::change).collect();
    log::record(txn, &changes, now).await
}

/// Moments by id that are live and that `viewer` may see.
pub async fn find_readable_by_ids<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    ids: &[i64],
    now: Millis,
) -> AppResult<HashMap<i64, moment::Model>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<moment::Model> = db::fetch_all(
        db,
        Sql::new("SELECT ")
            .append(columns("m", viewer.unwrap_or(0)))
            .push(" FROM moments m WHERE m.id IN (")
            .list(ids.iter().copied())
            .push(") AND ")
            .append(readable("m", now, viewer.unwrap_or(0), Reach::Direct)),
    )
    .await?;
    Ok(rows.into_iter().map(|m| (m.id, m)).collect())
}

/// A moment by id, if live and visible to `viewer`.
pub async fn find_readable<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    id: i64,
    now: Millis,
) -> AppResult<Option<moment::Model>> {
    Ok(find_readable_by_ids(db, viewer, &[id], now)
        .await?
        .remove(&id))
}

/// Which list of moments a page is taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MomentList {
    /// Everything the viewer may see, or only their own and friends'.
    Feed(Scope),
    /// One author's; `Some(true)` is the diary, `Some(false)` the ephemeral ones.
    Author {
        author: i64,
        journaled: Option<bool>,
    },
    /// Those attached to a location.
    Location(i64),
}

/// A page of live moments `viewer` may see, newest first.
pub async fn page<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    list: MomentList,
    now: Millis,
    q: &PageQuery,
) -> AppResult<Page<moment::Model>> {
    if list == MomentList::Feed(Scope::Friends) && viewer.is_none() {
        return Err(AppError::sign_in_required());
    }
    let viewer = viewer.unwrap_or(0);
    let reach = match list {
        MomentList::Author { .. } => Reach::Direct,
        MomentList::Feed(_) | MomentList::Location(_) => Reach::List,
    };
    let sql = Sql::new("SELECT ")
        .append(columns("m", viewer))
        .push(" FROM moments m WHERE ")
        .append(readable("m", now, viewer, reach));
    let sql = match list {
        MomentList::Feed(scope) => {
            sql.push(" AND ")
                .append(visibility::scope(scope, "m.author_id", viewer))
        }
        MomentList::Author { author, journaled } => {
            let sql = sql.push(" AND m.author_id = ").bind(author);
            match journaled {
                Some(j) => sql.push(" AND m.is_journaled = ").bind(j),
                None => sql,
            }
        }
        MomentList::Location(location) => sql.push(" AND m.location_id = ").bind(location),
    };
    let sql = sql.append(q.bounds("m.created_at", "m.id"));
    let rows: Vec<moment::Model> = db::fetch_all(db, sql).await?;
    Ok(q.page(rows, |m| Key {
        ts: m.created_at,
        id: m.id,
    }))
}

/// Soft-deletes the viewer's live moment at once. `NOT_FOUND` if the viewer
/// cannot see a live moment with this id, `FORBIDDEN` if it is someone
/// else's that they can see.
pub async fn delete(db: &DatabaseConnection, viewer: i64, id: i64, now: Millis) -> AppResult<i64> {
    let txn = db::begin(db).await?;
    let deleted: Vec<Gone> = db::fetch_all(
        &txn,
        Sql::new("UPDATE moments SET deleted_at = ")
            .bind(now)
            .push(" WHERE id = ")
            .bind(id)
            .push(" AND author_id = ")
            .bind(viewer)
            .push(" AND ")
            .append(live_moment("moments", now))
            .push(" RETURNING id, author_id, location_id, visibility"),
    )
    .await?;
    if !deleted.is_empty() {
        gone(&txn, &deleted, now).await?;
        txn.commit().await?;
        return Ok(id);
    }
    drop(txn);
    Err(match find_readable(db, Some(viewer), id, now).await? {
        Some(_) => AppError::forbidden("only the author may delete a moment"),
        None => AppError::not_found("moment not found"),
    })
}

/// Undoes [`delete`] within the grace, for the author only. A live moment is
/// returned as it is; one deleted more than the grace ago, or someone
/// else's, is `NOT_FOUND`; one that expired meanwhile cannot come back
/// (`BAD_USER_INPUT`).
pub async fn restore(
    db: &DatabaseConnection,
    viewer: i64,
    id: i64,
    now: Millis,
    grace: Duration,
) -> AppResult<moment::Model> {
    let cutoff = now - duration_millis(grace);
    let txn = db::begin(db).await?;
    let restored: Vec<moment::Model> = db::fetch_all(
        &txn,
        Sql::new("UPDATE moments SET deleted_at = NULL WHERE id = ")
            .bind(id)
            .push(" AND author_id = ")
            .bind(viewer)
            .push(" AND deleted_at IS NOT NULL AND deleted_at > ")
            .bind(cutoff)
            .push(" AND (expires_at IS NULL OR expires_at > ")
            .bind(now)
            .push(") RETURNING *"),
    )
    .await?;
    if let Some(m) = restored.into_iter().next() {
        let placed = Placed {
            location_id: m.location_id,
            visibility: m.visibility.clone(),
        };
        location::count_public(&txn, &[placed], 1).await?;
        log::record(&txn, &[change(Kind::MomentRestored, &m)], now).await?;
        txn.commit().await?;
        return Ok(m);
    }
    drop(txn);
    let own: Option<moment::Model> = db::fetch_one(
        db,
        Sql::new("SELECT * FROM moments WHERE id = ")
            .bind(id)
            .push(" AND author_id = ")
            .bind(viewer),
    )
    .await?;
    let not_found = || AppError::not_found("moment not found");
    let Some(m) = own else {
        return Err(not_found());
    };
    match m.deleted_at {
        None if m.expires_at.is_none_or(|e| e > now) => Ok(m),
        Some(at) if at <= cutoff => Err(not_found()),
        _ => Err(AppError::bad_input(
            "this moment has expired and cannot be restored",
        )),
    }
}

/// The condition that a moment is in the batch a job claims: those matching
/// `filter` (alias `p`), smallest `order_col` first, `batch` of them.
fn claimed(dialect: Dialect, filter: Sql, order_col: &str, batch: u32) -> Sql {
    dialect.in_claimed(db::claim_batch(
        dialect,
        "moments",
        filter,
        order_col,
        i64::from(batch),
    ))
}

/// Soft-deletes ephemeral moments expired at `now`, `batch` per transaction,
/// until none is left. Journaled moments never match.
pub async fn expire(db: &DatabaseConnection, now: Millis, batch: u32) -> AppResult<BatchReport> {
    super::drain_batches(|| async move {
        let txn = db::begin(db).await?;
        let claim = claimed(
            Dialect::of(&txn),
            expired_moment("p", now),
            "expires_at",
            batch,
        );
        let expired: Vec<Gone> = db::fetch_all(
            &txn,
            Sql::new("UPDATE moments SET deleted_at = ")
                .bind(now)
                .push(" WHERE id ")
                .append(claim)
                .push(" RETURNING id, author_id, location_id, visibility"),
        )
        .await?;
        gone(&txn, &expired, now).await?;
        txn.commit().await?;
        Ok(expired.len() as u64)
    })
    .await
}

#[derive(Debug, FromQueryResult)]
struct MediaRow {
    media_id: i64,
}

/// Hard-deletes moments soft-deleted more than `grace` before `now`, `batch`
/// per transaction, until none is left; their likes go by cascade and their
/// media rows go in the same transaction with the blobs queued for deletion.
pub async fn purge(
    db: &DatabaseConnection,
    now: Millis,
    grace: Duration,
    batch: u32,
) -> AppResult<BatchReport> {
    let cutoff = now - duration_millis(grace);
    super::drain_batches(|| async move {
        let txn = db::begin(db).await?;
        let claim = claimed(
            Dialect::of(&txn),
            purgeable_moment("p", cutoff),
            "deleted_at",
            batch,
        );
        let rows: Vec<MediaRow> = db::fetch_all(
            &txn,
            Sql::new("DELETE FROM moments WHERE id ")
                .append(claim)
                .push(" RETURNING media_id"),
        )
        .await?;
        let media: Vec<i64> = rows.iter().map(|r| r.media_id).collect();
        super::media::delete_by_ids(&txn, &media, now).await?;
        txn.commit().await?;
        Ok(rows.len() as u64)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert!(validate_duration(0).is_ok());
        assert!(validate_duration(1).is_ok());
        assert!(validate_duration(168).is_ok());
        assert!(validate_duration(169).is_err());
        assert!(validate_duration(-1).is_err());
    }

    #[test]
    fn inputs_are_checked() {
        let mut m = NewMoment {
            media_id: 1,
            caption: Some("é".repeat(2200)),
            latitude: 48.85,
            longitude: 2.35,
            duration_hours: 24,
            visibility: Visibility::FriendsOnly,
            location_id: None,
            place_name: None,
        };
        assert!(validate(&mut m).is_ok());
        m.caption = Some("é".repeat(2201));
        assert!(validate(&mut m).is_err());
        m.caption = None;
        m.location_id = Some(1);
        m.place_name = Some("Somewhere".into());
        assert!(validate(&mut m).is_err());
        assert_eq!(Visibility::from_stored("PUBLIC"), Visibility::Public);
        assert_eq!(Visibility::from_stored("?"), Visibility::FriendsOnly);
    }
}
