//! Statuses (stories): create, read, delete, seen state, the story tray and
//! the purge of expired rows.
//!
//! Who may see a status is its audience (`PUBLIC`, `FRIENDS`,
//! `CLOSE_FRIENDS`) and the rules of `domain::visibility`; every read here
//! goes through [`readable`].
//!
//! The tray reads `status_tray`, summary rows per author and audience level
//! (`PUBLIC` < `FRIENDS` < `CLOSE_FRIENDS`): the row of level L holds the
//! newest `created_at` and the latest `expires_at` of the author's statuses
//! whose audience ranks at or below L: every status a viewer admitted to L
//! sees (close friends are friends, so whoever is admitted to L is admitted
//! to every level below it). A viewer reads exactly one
//! row per author, the one of the widest level the viewer is admitted to
//! (`visibility::widest_level`), so an author's place in the tray is
//! their newest status the viewer may see, and an author whose live
//! statuses the viewer may not see has no entry. It
//! is written in the same transaction as every status insert and delete, so a
//! tray page is an index walk over `(latest_created_at, author_id)` that stops
//! after the page, whatever the number of statuses or authors stored; the
//! per-entry counts then come from one batched query over the page's authors.
//! The purge never needs to recompute a summary: deleting expired statuses
//! leaves the latest expiry unchanged, and a summary whose latest expiry has
//! passed is deleted with them.
//!
//! With one TTL the newest status is also the last to expire, so an entry's
//! `latest_created_at` is a live status's. Right after `EPHEMERA_STATUS_TTL`
//! is shortened, an author's newest status can expire before an older one;
//! until that older one expires too, the entry keeps its place and
//! `latestCreatedAt` by the newest, while `storyCount` counts live ones only.
//!
//! Every change subscribers hear of (a status created, deleted by its author,
//! a moderator or the purge, a new seen mark) writes its change-log event in
//! the same transaction (see `events`).
//!
//! Locks, on PostgreSQL: an insert takes the author's summary row first (the
//! upsert) and then adds a new status; a delete and the purge take status rows
//! first and summary rows after. No path waits for a status row while holding
//! a summary row, so they cannot deadlock.

use std::collections::{HashMap, HashSet};

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, FromQueryResult, QueryResult};

use super::expiry::{expired_status, live_status, live_status_walked, status_expires_at};
use super::page::{Key, Page, PageQuery};
use super::user::{KeyedProfile, PROFILE_COLUMNS, Profile, keyed_page};
use super::visibility::{Reach, Who};
use super::{BatchReport, Scope, visibility};
use crate::clock::Millis;
use crate::db::{self, Columns, Dialect, Sql};
use crate::entity::status;
use crate::error::{AppError, AppResult};
use crate::events::Kind;
use crate::events::log::{self, Change};
use crate::ids::IdGenerator;
use crate::state::Media;

const MAX_CAPTION: usize = 500;

/// Who may see a status, widest first (the order of the tray's levels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Audience {
    /// Anyone, signed in or not.
    Public,
    /// The author's accepted friends (the default).
    #[default]
    Friends,
    /// Those on the author's close-friends list.
    CloseFriends,
}

impl Audience {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Audience::Public => "PUBLIC",
            Audience::Friends => "FRIENDS",
            Audience::CloseFriends => "CLOSE_FRIENDS",
        }
    }

    /// The tray levels whose summaries a status for this audience is in:
    /// its own and the narrower ones (see the module doc).
    pub fn levels_seeing(self) -> impl Iterator<Item = Audience> {
        [Audience::Public, Audience::Friends, Audience::CloseFriends]
            .into_iter()
            .filter(move |level| *level >= self)
    }

    /// SQL for the rank (0, 1, 2: public to close friends) of the stored
    /// audience in column `col`.
    pub fn rank_sql(col: &str) -> String {
        format!("(CASE {col} WHEN 'PUBLIC' THEN 0 WHEN 'FRIENDS' THEN 1 ELSE 2 END)")
    }

    /// From the stored form (anything unknown is the narrowest).
    pub fn from_stored(s: &str) -> Self {
        match s {
            "PUBLIC" => Audience::Public,
            "FRIENDS" => Audience::Friends,
            _ => Audience::CloseFriends,
        }
    }
}

/// SQL that keeps the statuses of alias `s` that are live at `now` and that
/// `viewer` (0 when anonymous) may see read this way. Every read path, count,
/// seen mark and subscription builds on this one rule.
pub fn readable(s: &str, now: Millis, viewer: Who<'_>, reach: Reach) -> Sql {
    live_status(s, now)
        .push(" AND ")
        .append(visibility::visible_status(s, viewer, reach))
}

/// Input of [`create`].
#[derive(Debug, Default)]
pub struct NewStatus {
    pub media_id: Option<i64>,
    pub caption: Option<String>,
    pub bg_color: Option<String>,
    /// How long it lives (`EPHEMERA_STATUS_TTL`).
    pub lives: Duration,
    /// Live statuses the author may have at once, this one included
    /// (`EPHEMERA_STATUS_MAX_LIVE`).
    pub max_live: u32,
    /// Who may see it.
    pub audience: Audience,
}

/// `#RRGGBB`, hexadecimal digits of either case.
pub fn validate_bg_color(color: &str) -> AppResult<()> {
    let ok = color.len() == 7
        && color.starts_with('#')
        && color[1..].chars().all(|c| c.is_ascii_hexdigit());
    if ok {
        Ok(())
    } else {
        Err(AppError::bad_input("bgColor must be #RRGGBB"))
    }
}

/// A caption is at most 500 characters; a blank one counts as none.
pub fn normalize_caption(caption: Option<String>) -> AppResult<Option<String>> {
    super::normalize_text(caption, "caption", MAX_CAPTION)
}

/// Posts a status that lives for the configured TTL.
pub async fn create(
    db: &DatabaseConnection,
    media: &Media,
    ids: &IdGenerator,
    author: i64,
    input: NewStatus,
    now: Millis,
) -> AppResult<status::Model> {
    let caption = normalize_caption(input.caption)?;
    if let Some(color) = &input.bg_color {
        validate_bg_color(color)?;
    }
    if input.media_id.is_none() && caption.is_none() {
        return Err(AppError::bad_input("a status needs a mediaId or a caption"));
    }
    if let Some(media_id) = input.media_id {
        // Before judging the upload's bytes; again below under the lock.
        check_live_cap(db, author, input.max_live, now).await?;
        super::media::prepare(db, media, author, media_id, now).await?;
    }
    let row = status::Model {
        id: ids.next_id(),
        author_id: author,
        media_id: input.media_id,
        caption,
        bg_color: input.bg_color,
        created_at: now,
        expires_at: status_expires_at(now, input.lives),
        audience: input.audience.as_str().to_owned(),
    };
    let txn = db::begin(db).await?;
    // The summary first: it takes the author's row lock (see the module doc).
    db::execute(
        &txn,
        Sql::new("INSERT INTO status_tray (author_id, audience, latest_created_at, max_expires_at) VALUES ")
            .append(Sql::join(
                input.audience.levels_seeing().map(|level| {
                    Sql::new("(")
                        .bind(author)
                        .push(", ")
                        .bind(level.as_str())
                        .push(", ")
                        .list([row.created_at, row.expires_at])
                        .push(")")
                }),
                ", ",
            ))
        .push(
            " ON CONFLICT (author_id, audience) DO UPDATE SET \
                 latest_created_at = CASE WHEN excluded.latest_created_at > status_tray.latest_created_at \
                   THEN excluded.latest_created_at ELSE status_tray.latest_created_at END, \
                 max_expires_at = CASE WHEN excluded.max_expires_at > status_tray.max_expires_at \
                   THEN excluded.max_expires_at ELSE status_tray.max_expires_at END",
        ),
    )
    .await?;
    check_live_cap(&txn, author, input.max_live, now).await?;
    if let Some(media_id) = row.media_id {
        super::media::attach(&txn, author, media_id, now).await?;
    }
    super::media::insert_holder(&txn, row.clone()).await?;
    log::record(&txn, &[change(Kind::StatusCreated, &row)], now).await?;
    txn.commit().await?;
    Ok(row)
}

/// Refuses (`RATE_LIMITED`, until the oldest expires) a new status of
/// `author`, who already has `max` live ones. Reads at most `max` index
/// entries. Inside [`create`]'s transaction, after the summary's upsert
/// has taken the author's row lock, it is atomic with the insert: posts of
/// one author at once are counted one after the other.
async fn check_live_cap<C: ConnectionTrait>(
    db: &C,
    author: i64,
    max: u32,
    now: Millis,
) -> AppResult<()> {
    #[derive(FromQueryResult)]
    struct Live {
        n: i64,
        first: Option<i64>,
    }
    let live: Option<Live> = db::fetch_one(
        db,
        Sql::new(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n, MIN(x.expires_at) AS first FROM \
             (SELECT s.expires_at FROM statuses s WHERE s.author_id = ",
        )
        .bind(author)
        .push(" AND ")
        .append(live_status("s", now))
        .push(" ORDER BY s.expires_at LIMIT ")
        .bind(i64::from(max))
        .push(") x"),
    )
    .await?;
    match live {
        Some(Live {
            n,
            first: Some(first),
        }) if n >= i64::from(max) => Err(AppError::rate_limited(
            format!("at most {max} live statuses at once; the oldest expires first"),
            Duration::from_millis(u64::try_from(first - now).unwrap_or(0)),
        )),
        _ => Ok(()),
    }
}

/// The change-log entry of `kind` about status `s`.
fn change(kind: Kind, s: &status::Model) -> Change {
    Change {
        kind,
        subject: s.id,
        author: s.author_id,
        audience: s.audience.clone(),
        viewer: None,
    }
}

/// A status that was just deleted, as the change log tells it.
#[derive(Debug, FromQueryResult)]
pub struct GoneStatus {
    pub id: i64,
    pub author_id: i64,
    pub media_id: Option<i64>,
    pub audience: String,
}

impl GoneStatus {
    /// The `RETURNING` list that reads one.
    pub const RETURNING: &'static str = " RETURNING id, author_id, media_id, audience";

    fn change(&self) -> Change {
        Change {
            kind: Kind::StatusDeleted,
            subject: self.id,
            author: self.author_id,
            audience: self.audience.clone(),
            viewer: None,
        }
    }
}

/// After statuses were deleted in `txn`: their media go (blobs queued)
/// and their deletion is logged. The tray is the caller's.
pub async fn gone<C: ConnectionTrait>(txn: &C, gone: &[GoneStatus], now: Millis) -> AppResult<()> {
    let media: Vec<i64> = gone.iter().filter_map(|r| r.media_id).collect();
    super::media::delete_by_ids(txn, &media, now).await?;
    let changes: Vec<Change> = gone.iter().map(GoneStatus::change).collect();
    log::record(txn, &changes, now).await
}

#[derive(Debug, FromQueryResult)]
struct AuthorRow {
    #[expect(dead_code, reason = "read only to take the rows' locks")]
    author_id: i64,
}

/// Deletes the viewer's status. `NOT_FOUND` if there is no live status with
/// this id, `FORBIDDEN` if it is someone else's. The delete itself carries the
/// owner check, so nothing can change between check and act.
pub async fn delete(db: &DatabaseConnection, viewer: i64, id: i64, now: Millis) -> AppResult<i64> {
    let txn = db::begin(db).await?;
    let deleted: Vec<GoneStatus> = db::fetch_all(
        &txn,
        Sql::new("DELETE FROM statuses WHERE id = ")
            .bind(id)
            .push(" AND author_id = ")
            .bind(viewer)
            .push(" AND ")
            .append(live_status("statuses", now))
            .push(GoneStatus::RETURNING),
    )
    .await?;
    if deleted.is_empty() {
        // Someone else's status is FORBIDDEN only to a viewer who may read
        // it; one they may not see does not exist for them.
        txn.rollback().await?;
        return Err(match find_readable(db, Some(viewer), id, now).await? {
            Some(_) => AppError::forbidden("only the author may delete a status"),
            None => AppError::not_found("status not found"),
        });
    }
    gone(&txn, &deleted, now).await?;
    refresh_tray(&txn, viewer).await?;
    txn.commit().await?;
    Ok(id)
}

/// Recomputes an author's tray summaries from their remaining statuses (or
/// removes them), after taking their row locks so that a concurrent insert
/// is seen.
pub async fn refresh_tray<C: ConnectionTrait>(txn: &C, author: i64) -> AppResult<()> {
    let _: Option<AuthorRow> = db::fetch_one(
        txn,
        Sql::new("SELECT author_id FROM status_tray WHERE author_id = ")
            .bind(author)
            .push(Dialect::of(txn).for_update()),
    )
    .await?;
    let same = || {
        Sql::new("FROM statuses s WHERE s.author_id = ")
            .bind(author)
            .push(&format!(
                " AND {} <= {}",
                Audience::rank_sql("s.audience"),
                Audience::rank_sql("status_tray.audience")
            ))
    };
    db::execute(
        txn,
        Sql::new("UPDATE status_tray SET latest_created_at = (SELECT MAX(s.created_at) ")
            .append(same())
            .push("), max_expires_at = (SELECT MAX(s.expires_at) ")
            .append(same())
            .push(") WHERE author_id = ")
            .bind(author)
            .push(" AND EXISTS (SELECT 1 ")
            .append(same())
            .push(")"),
    )
    .await?;
    db::execute(
        txn,
        Sql::new("DELETE FROM status_tray WHERE author_id = ")
            .bind(author)
            .push(" AND NOT EXISTS (SELECT 1 ")
            .append(same())
            .push(")"),
    )
    .await?;
    Ok(())
}

/// A live status by id, if `viewer` may see it.
pub async fn find_readable<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    id: i64,
    now: Millis,
) -> AppResult<Option<status::Model>> {
    Ok(find_readable_by_ids(db, viewer, &[id], now)
        .await?
        .remove(&id))
}

/// Live statuses by id that `viewer` may see.
pub async fn find_readable_by_ids<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    ids: &[i64],
    now: Millis,
) -> AppResult<HashMap<i64, status::Model>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let who = Who::User(viewer.unwrap_or(0));
    let rows: Vec<StatusRow> = db::fetch_all(
        db,
        Sql::new(&format!("SELECT {STATUS_COLUMNS} FROM statuses s WHERE "))
            .append(readable("s", now, who, Reach::Direct))
            .push(" AND s.id IN (")
            .list(ids.iter().copied())
            .push(")"),
    )
    .await?;
    Ok(rows.into_iter().map(|StatusRow(s)| (s.id, s)).collect())
}

/// The columns of a status for table alias `s`, in the order
/// [`read_status`] reads them.
const STATUS_COLUMNS: &str =
    "s.id, s.author_id, s.media_id, s.caption, s.bg_color, s.created_at, s.expires_at, s.audience";

/// The status at the row's next [`STATUS_COLUMNS`].
fn read_status(c: &mut Columns<'_>) -> Result<status::Model, DbErr> {
    Ok(status::Model {
        id: c.take()?,
        author_id: c.take()?,
        media_id: c.take()?,
        caption: c.take()?,
        bg_color: c.take()?,
        created_at: c.take()?,
        expires_at: c.take()?,
        audience: c.take()?,
    })
}

/// A row of [`STATUS_COLUMNS`] alone.
struct StatusRow(status::Model);

impl FromQueryResult for StatusRow {
    fn from_query_result(res: &QueryResult, _: &str) -> Result<Self, DbErr> {
        read_status(&mut Columns::of(res)).map(Self)
    }
}

/// A page of one author's live statuses that `viewer` may see, newest
/// first; with `seen_by` (the viewer), also the ids of those that viewer has
/// seen, read in the same statement (`None` without).
pub async fn page_by_author<C: ConnectionTrait>(
    db: &C,
    author: i64,
    now: Millis,
    q: &PageQuery,
    viewer: Option<i64>,
    seen_by: Option<i64>,
) -> AppResult<(Page<status::Model>, Option<HashSet<i64>>)> {
    let seen = match seen_by {
        Some(viewer) => Sql::new("EXISTS (SELECT 1 FROM status_views v WHERE v.viewer_id = ")
            .bind(viewer)
            .push(" AND v.status_id = s.id)"),
        None => Sql::new("FALSE"),
    };
    let sql = author_page_query(author, now, q, viewer, seen);
    let rows: Vec<SeenRow> = db::fetch_all(db, sql).await?;
    let page = q.page(rows, |r| Key {
        ts: r.status.created_at,
        id: r.status.id,
    });
    let seen = seen_by.map(|_| {
        page.items
            .iter()
            .filter(|(_, r)| r.seen)
            .map(|(_, r)| r.status.id)
            .collect()
    });
    Ok((page.map(|r| r.status), seen))
}

/// The statement of [`page_by_author`]: it walks `statuses_author_created`
/// backwards from the page's bound and stops after the page, whatever the
/// author's number of statuses. The expiry test is [`live_status_walked`]:
/// a generic plan (PostgreSQL's, after five runs of a prepared statement)
/// would otherwise range-scan `(author_id, expires_at)` over every live
/// status of the author and sort them.
pub fn author_page_query(
    author: i64,
    now: Millis,
    q: &PageQuery,
    viewer: Option<i64>,
    seen: Sql,
) -> Sql {
    Sql::new(&format!("SELECT {STATUS_COLUMNS}, "))
        .append(seen)
        .push(" AS seen FROM statuses s WHERE s.author_id = ")
        .bind(author)
        .push(" AND ")
        .append(live_status_walked("s", now))
        .push(" AND ")
        .append(visibility::visible_status(
            "s",
            Who::User(viewer.unwrap_or(0)),
            Reach::Direct,
        ))
        .append(q.bounds("s.created_at", "s.id"))
}

/// A status row ([`STATUS_COLUMNS`]), and whether the viewer has seen it.
struct SeenRow {
    status: status::Model,
    seen: bool,
}

impl FromQueryResult for SeenRow {
    fn from_query_result(res: &QueryResult, _: &str) -> Result<Self, DbErr> {
        let mut c = Columns::of(res);
        Ok(Self {
            status: read_status(&mut c)?,
            seen: c.take()?,
        })
    }
}

/// The statement of [`tray_page`] for `viewer` (0: anonymous).
pub fn tray_page_query(
    dialect: Dialect,
    viewer: i64,
    scope: Scope,
    now: Millis,
    q: &PageQuery,
    with_authors: bool,
) -> Sql {
    // `CROSS JOIN` keeps SQLite walking the tray in page order and looking
    // each author up, instead of starting from the users.
    let (authors, join) = if with_authors {
        (
            format!(", {PROFILE_COLUMNS}"),
            " CROSS JOIN users u WHERE u.id = t.author_id AND",
        )
    } else {
        (String::new(), " WHERE")
    };
    let who = Who::User(viewer);
    let select = format!("SELECT t.author_id, t.latest_created_at{authors} FROM ");
    let from = match scope {
        Scope::Everyone => Sql::new(&select).push("status_tray t"),
        // The viewer's own and their friends' rows, looked up per author:
        // a walk of the tray in page order would read every author's row
        // to find a few friends'.
        Scope::Friends => Sql::new(&select)
            .push("(SELECT ")
            .append(dialect.opaque_bigint(viewer))
            .push(" AS id UNION ALL ")
            .append(visibility::friend_ids(who))
            .push(") f ")
            .push(&dialect.rows_for_each("status_tray", "t", &[("author_id", "f.id")])),
    };
    // The time goes in where the planner cannot see it (`tray_rows`):
    // nearly every tray row is live, so on PostgreSQL a plan made for the
    // actual time looks cheaper than the cached generic one (which assumes
    // a third), and the statement was planned anew for every request
    // (about 45 % of its CPU per tray page at 10k, measured). Hidden, both
    // estimates agree and the cached plan is used.
    from.push(join)
        .push(" ")
        .append(tray_rows(dialect, who, now))
        .append(q.bounds("t.latest_created_at", "t.author_id"))
}

/// One entry of the story tray (`t.author_id, t.latest_created_at`, by
/// position).
#[derive(Clone, Debug)]
pub struct TrayRow {
    pub author_id: i64,
    pub latest_created_at: i64,
}

impl TrayRow {
    fn read(c: &mut Columns<'_>) -> Result<Self, DbErr> {
        Ok(Self {
            author_id: c.take()?,
            latest_created_at: c.take()?,
        })
    }
}

impl FromQueryResult for TrayRow {
    fn from_query_result(res: &QueryResult, _: &str) -> Result<Self, DbErr> {
        Self::read(&mut Columns::of(res))
    }
}

/// A page of the story tray: authors with a live status, freshest first;
/// with `with_authors`, also their profiles, read in the same statement
/// (`None` without).
pub async fn tray_page<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    scope: Scope,
    now: Millis,
    q: &PageQuery,
    with_authors: bool,
) -> AppResult<(Page<TrayRow>, Option<Vec<Profile>>)> {
    let (scope, viewer) = match (scope, viewer) {
        (Scope::Friends, None) => return Err(AppError::sign_in_required()),
        (scope, viewer) => (scope, viewer.unwrap_or(0)),
    };
    let sql = tray_page_query(Dialect::of(db), viewer, scope, now, q, with_authors);
    let key = |t: &TrayRow| Key {
        ts: t.latest_created_at,
        id: t.author_id,
    };
    if !with_authors {
        let rows: Vec<TrayRow> = db::fetch_all(db, sql).await?;
        return Ok((q.page(rows, key), None));
    }
    let rows: Vec<TrayAuthorRow> = db::fetch_all(db, sql).await?;
    let page = q.page(rows, |r| key(&r.entry));
    let mut profiles = Vec::with_capacity(page.items.len());
    let page = page.map(|r| {
        profiles.push(r.author);
        r.entry
    });
    Ok((page, Some(profiles)))
}

/// A tray entry and its author's profile, from one row.
struct TrayAuthorRow {
    entry: TrayRow,
    author: Profile,
}

impl FromQueryResult for TrayAuthorRow {
    fn from_query_result(res: &QueryResult, _: &str) -> Result<Self, DbErr> {
        let mut c = Columns::of(res);
        Ok(Self {
            entry: TrayRow::read(&mut c)?,
            author: Profile::read(&mut c)?,
        })
    }
}

/// Live-status counts of a tray entry for one viewer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrayCounts {
    pub live: i64,
    pub unseen: i64,
}

#[derive(Debug, FromQueryResult)]
struct TrayCountRow {
    author_id: i64,
    live: i64,
    unseen: i64,
}

/// The tray rows (`status_tray t`) `who` sees at `now`: live, one per
/// author (the widest level that admits them), exclusions applied; what
/// `storyTray` and the live tray's entries both read.
pub fn tray_rows(dialect: Dialect, who: Who<'_>, now: Millis) -> Sql {
    live_tray_row(dialect, now)
        .push(" AND ")
        .append(visibility::widest_level("t.audience", "t.author_id", who))
        .push(" AND ")
        .append(tray_row_not_excluded(who))
}

/// [`tray_rows`] where the row read is already the one of the widest level
/// `who` reaches of its author (looked up by
/// [`visibility::widest_level_of`]): live, exclusions applied.
pub fn tray_rows_of_level(dialect: Dialect, who: Who<'_>, now: Millis) -> Sql {
    live_tray_row(dialect, now)
        .push(" AND ")
        .append(tray_row_not_excluded(who))
}

/// A tray row with a live status at `now`.
fn live_tray_row(dialect: Dialect, now: Millis) -> Sql {
    Sql::new("t.max_expires_at > ").append(dialect.opaque_bigint(now))
}

/// A tray row whose author `who` may see in lists.
fn tray_row_not_excluded(who: Who<'_>) -> Sql {
    visibility::not_excluded("t.author_id", who, visibility::Content::Status, Reach::List)
}

/// For each author, how many live statuses they have that `viewer` may see
/// (by audience: the authors come from the viewer's tray) and how many of
/// those the viewer has not seen (all of them for an anonymous viewer).
pub async fn tray_counts<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    authors: &[i64],
    now: Millis,
) -> AppResult<HashMap<i64, TrayCounts>> {
    if authors.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<TrayCountRow> = db::fetch_all(
        db,
        Sql::new(
            "SELECT s.author_id, COUNT(*) AS live, \
               SUM(CASE WHEN v.viewer_id IS NULL THEN 1 ELSE 0 END) AS unseen \
             FROM statuses s \
             LEFT JOIN status_views v ON v.status_id = s.id AND v.viewer_id = ",
        )
        .bind(viewer.unwrap_or(0))
        .push(" WHERE ")
        .append(live_status("s", now))
        .push(" AND ")
        .append(visibility::status_audience(
            "s.audience",
            "s.author_id",
            Who::User(viewer.unwrap_or(0)),
        ))
        .push(" AND s.author_id IN (")
        .list(authors.iter().copied())
        .push(") GROUP BY s.author_id"),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.author_id,
                TrayCounts {
                    live: r.live,
                    unseen: r.unseen,
                },
            )
        })
        .collect())
}

/// Which of `status_ids` the viewer has marked seen.
pub async fn seen_by<C: ConnectionTrait>(
    db: &C,
    viewer: i64,
    status_ids: &[i64],
) -> AppResult<HashSet<i64>> {
    if status_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let rows: Vec<StatusIdRow> = db::fetch_all(
        db,
        Sql::new("SELECT status_id FROM status_views WHERE viewer_id = ")
            .bind(viewer)
            .push(" AND status_id IN (")
            .list(status_ids.iter().copied())
            .push(")"),
    )
    .await?;
    Ok(rows.into_iter().map(|r| r.status_id).collect())
}

#[derive(Debug, FromQueryResult)]
struct StatusIdRow {
    status_id: i64,
}

#[derive(Debug, FromQueryResult)]
struct ViewCountRow {
    status_id: i64,
    views: i64,
}

/// How many people (the author aside, and those the author may not see)
/// saw each status.
pub async fn view_counts<C: ConnectionTrait>(
    db: &C,
    status_ids: &[i64],
) -> AppResult<HashMap<i64, i64>> {
    if status_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<ViewCountRow> = db::fetch_all(
        db,
        Sql::new(
            "SELECT v.status_id, COUNT(*) AS views FROM status_views v \
             JOIN statuses s ON s.id = v.status_id WHERE v.status_id IN (",
        )
        .list(status_ids.iter().copied())
        .push(") AND v.viewer_id <> s.author_id AND ")
        .append(visibility::visible_person(
            "v.viewer_id",
            Who::Column("s.author_id"),
        ))
        .push(" GROUP BY v.status_id"),
    )
    .await?;
    let mut out: HashMap<i64, i64> = status_ids.iter().map(|&i| (i, 0)).collect();
    out.extend(rows.into_iter().map(|r| (r.status_id, r.views)));
    Ok(out)
}

/// A page of the people (the author aside, and those the author may not
/// see) who saw a status, most recent first.
pub async fn viewers_page<C: ConnectionTrait>(
    db: &C,
    status: &status::Model,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let sql = Sql::new(&format!(
        "SELECT {PROFILE_COLUMNS}, v.seen_at AS k_ts FROM status_views v \
         JOIN users u ON u.id = v.viewer_id WHERE v.status_id = "
    ))
    .bind(status.id)
    .push(" AND v.viewer_id <> ")
    .bind(status.author_id)
    .push(" AND ")
    .append(visibility::visible_person(
        "v.viewer_id",
        Who::User(status.author_id),
    ))
    .append(q.bounds("v.seen_at", "u.id"));
    let rows: Vec<KeyedProfile> = db::fetch_all(db, sql).await?;
    Ok(keyed_page(q, rows))
}

/// Records that the viewer saw a live status, and logs it (for the viewer's
/// other devices) when it is news. Idempotent; `NOT_FOUND` for a status that
/// does not exist, is no longer live or that the viewer may not see.
pub async fn mark_seen(
    db: &DatabaseConnection,
    viewer: i64,
    id: i64,
    now: Millis,
) -> AppResult<status::Model> {
    let txn = db::begin(db).await?;
    // `WHERE` before `ON CONFLICT` also keeps SQLite's parser unambiguous.
    let marked = db::execute(
        &txn,
        Sql::new("INSERT INTO status_views (status_id, viewer_id, seen_at) SELECT s.id, ")
            .list([viewer, now])
            .push(" FROM statuses s WHERE s.id = ")
            .bind(id)
            .push(" AND ")
            .append(readable("s", now, Who::User(viewer), Reach::Direct))
            .push(" ON CONFLICT (status_id, viewer_id) DO NOTHING"),
    )
    .await?;
    let status = find_readable(&txn, Some(viewer), id, now)
        .await?
        .ok_or_else(|| AppError::not_found("status not found"))?;
    if marked > 0 {
        let seen = Change {
            viewer: Some(viewer),
            ..change(Kind::StatusSeen, &status)
        };
        log::record(&txn, &[seen], now).await?;
    }
    txn.commit().await?;
    Ok(status)
}

#[derive(Debug, FromQueryResult)]
struct CountRow {
    n: i64,
}

/// Deletes the statuses expired at `now` (their seen rows go by cascade), in
/// transactions of at most `batch` rows, until none is left. On PostgreSQL
/// each batch is claimed with `FOR UPDATE SKIP LOCKED`, so instances running
/// it at once share the work without waiting on or double-deleting a row.
pub async fn purge_expired(
    db: &DatabaseConnection,
    now: Millis,
    batch: u32,
    workers: u32,
) -> AppResult<BatchReport> {
    // SQLite writes one transaction at a time: more workers would only wait.
    let workers = Dialect::of(db).writers(workers);
    let drains = (0..workers).map(|_| super::drain_batches(|| purge_batch(db, now, batch)));
    let reports = futures_util::future::try_join_all(drains).await?;
    Ok(reports.into_iter().sum())
}

async fn purge_batch(db: &DatabaseConnection, now: Millis, batch: u32) -> AppResult<u64> {
    let dialect = Dialect::of(db);
    let claim = || {
        dialect.in_claimed(db::claim_batch(
            dialect,
            "statuses",
            expired_status("p", now),
            "expires_at",
            i64::from(batch),
        ))
    };
    if dialect.writable_ctes() {
        // One statement per batch: no id lists travel back and forth.
        let row: Option<CountRow> = db::fetch_one(
            db,
            Sql::new("WITH gone AS (DELETE FROM statuses WHERE id ")
                .append(claim())
                .push(" RETURNING id, author_id, media_id, audience), ")
                .append(super::media::delete_rows_ctes("SELECT media_id FROM gone", now))
                .push(", logged AS (")
                .append(log::record_rows(
                    dialect,
                    Kind::StatusDeleted,
                    Sql::new("gone"),
                    "audience",
                    now,
                ))
                .push(")")
                .push(", tray_gone AS (DELETE FROM status_tray WHERE max_expires_at <= ")
                .bind(now)
                .push(" AND author_id IN (SELECT author_id FROM gone)) SELECT COUNT(*) AS n FROM gone"),
        )
        .await?;
        return Ok(row.map_or(0, |r| u64::try_from(r.n).unwrap_or(0)));
    }
    let txn = db::begin(db).await?;
    let rows: Vec<GoneStatus> = db::fetch_all(
        &txn,
        Sql::new("DELETE FROM statuses WHERE id ")
            .append(claim())
            .push(GoneStatus::RETURNING),
    )
    .await?;
    if rows.is_empty() {
        return Ok(0);
    }
    // Their media rows go too, their blobs into the outbox.
    gone(&txn, &rows, now).await?;
    let mut authors: Vec<i64> = rows.iter().map(|r| r.author_id).collect();
    authors.sort_unstable();
    authors.dedup();
    db::execute(
        &txn,
        Sql::new("DELETE FROM status_tray WHERE max_expires_at <= ")
            .bind(now)
            .push(" AND author_id IN (")
            .list(authors)
            .push(")"),
    )
    .await?;
    txn.commit().await?;
    Ok(rows.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colors_and_captions() {
        assert!(validate_bg_color("#A1b2C3").is_ok());
        for bad in ["A1B2C3", "#A1B2C", "#A1B2C3D", "#GGGGGG", "", "#ÄÄÄÄÄÄ"] {
            assert!(validate_bg_color(bad).is_err(), "{bad}");
        }
        assert_eq!(normalize_caption(Some("  ".into())).unwrap(), None);
        assert!(normalize_caption(Some("é".repeat(500))).is_ok());
        assert!(normalize_caption(Some("é".repeat(501))).is_err());
    }
}
