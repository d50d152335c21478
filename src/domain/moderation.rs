//! Reports and moderation.
//!
//! Any signed-in user may report a status, moment or user they can see,
//! with a reason; a report keeps who, what (with the text as the reporter
//! saw it) and when. Reporting the same thing again while the first report
//! is open returns that report.
//!
//! Moderators (`users.is_moderator`, granted by `ephemera users
//! grant-moderator NAME`) page through reports, take content down, resolve
//! reports and suspend or reinstate accounts. Every moderator action by
//! anyone else is `FORBIDDEN`. A moderator reads everything else like any
//! other user: the role widens no read path.
//!
//! - Taking down deletes the status or moment at once (no grace), its media
//!   through the deletion outbox, and tells the author why in a notice
//!   (`moderationNotices`); the open reports about it are resolved.
//! - Suspending ends every session of the account (its tokens stop
//!   working), refuses its sign-ins with the reason, and removes its content
//!   and profile from every path (`domain::visibility`) until it is
//!   reinstated; nothing is deleted.

use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

use super::location;
use super::page::{Key, Page, PageQuery};
use super::status::GoneStatus;
use crate::clock::Millis;
use crate::db::{self, Sql, insert};
use crate::entity::{moderation_notice, report};
use crate::error::{AppError, AppResult};
use crate::ids::IdGenerator;
use crate::state::Accounts;

const MAX_DETAILS: usize = 1000;
const MAX_REASON: usize = 500;

/// What a report is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectKind {
    Status,
    Moment,
    User,
}

impl SubjectKind {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::Status => "STATUS",
            SubjectKind::Moment => "MOMENT",
            SubjectKind::User => "USER",
        }
    }

    /// From the stored form.
    pub fn from_stored(s: &str) -> Self {
        match s {
            "STATUS" => SubjectKind::Status,
            "MOMENT" => SubjectKind::Moment,
            _ => SubjectKind::User,
        }
    }
}

/// A new report.
#[derive(Debug)]
pub struct NewReport {
    /// What the id names (the API's ids say it).
    pub subject_kind: SubjectKind,
    pub subject_id: i64,
    /// One of the reasons the API lists, stored as its name.
    pub reason: String,
    pub details: Option<String>,
}

/// Reports `input.subject_id`, which the reporter must be able to see
/// (`NOT_FOUND` otherwise, as for anything they cannot see). Reporting
/// oneself or one's own content is `BAD_USER_INPUT`.
pub async fn report(
    db: &DatabaseConnection,
    ids: &IdGenerator,
    reporter: i64,
    input: NewReport,
    now: Millis,
) -> AppResult<report::Model> {
    let details = super::normalize_text(input.details, "details", MAX_DETAILS)?;
    let id = input.subject_id;
    let me = Some(reporter);
    let kind = input.subject_kind;
    let found = match kind {
        SubjectKind::Status => super::status::find_readable(db, me, id, now)
            .await?
            .map(|s| (s.author_id, s.caption)),
        SubjectKind::Moment => super::moment::find_readable(db, me, id, now)
            .await?
            .map(|m| (m.author_id, m.caption)),
        SubjectKind::User => super::user::find_visible_by_ids(db, me, &[id])
            .await?
            .remove(&id)
            .map(|u| (u.id, Some(u.display_name.unwrap_or(u.username)))),
    };
    let Some((author, excerpt)) = found else {
        return Err(AppError::not_found("nothing to report with this id"));
    };
    if author == reporter {
        return Err(AppError::bad_input("you cannot report yourself"));
    }
    let open: Option<report::Model> = db::fetch_one(
        db,
        Sql::new("SELECT * FROM reports WHERE reporter_id = ")
            .bind(reporter)
            .push(" AND subject_id = ")
            .bind(id)
            .push(" AND resolved_at IS NULL"),
    )
    .await?;
    if let Some(open) = open {
        return Ok(open);
    }
    let row = report::Model {
        id: ids.next_id(),
        reporter_id: Some(reporter),
        subject_kind: kind.as_str().to_owned(),
        subject_id: id,
        subject_author_id: Some(author),
        excerpt,
        reason: input.reason,
        details,
        created_at: now,
        resolved_at: None,
        resolved_by: None,
        resolution: None,
    };
    insert::row(db, row.clone()).await?;
    Ok(row)
}

#[derive(Debug, FromQueryResult)]
struct RoleRow {
    is_moderator: bool,
}

/// `FORBIDDEN` unless `viewer` is a moderator.
pub async fn require_moderator<C: ConnectionTrait>(db: &C, viewer: i64) -> AppResult<()> {
    let row: Option<RoleRow> = db::fetch_one(
        db,
        Sql::new("SELECT is_moderator FROM users WHERE id = ").bind(viewer),
    )
    .await?;
    match row {
        Some(r) if r.is_moderator => Ok(()),
        _ => Err(AppError::forbidden("only moderators may do this")),
    }
}

/// A page of reports, newest first; open ones only unless `all`. For
/// moderators.
pub async fn reports_page<C: ConnectionTrait>(
    db: &C,
    moderator: i64,
    all: bool,
    q: &PageQuery,
) -> AppResult<Page<report::Model>> {
    require_moderator(db, moderator).await?;
    let open = if all {
        "1 = 1"
    } else {
        "r.resolved_at IS NULL"
    };
    let sql = Sql::new(&format!("SELECT r.* FROM reports r WHERE {open}"))
        .append(q.bounds("r.created_at", "r.id"));
    let rows: Vec<report::Model> = db::fetch_all(db, sql).await?;
    Ok(q.page(rows, |r| Key {
        ts: r.created_at,
        id: r.id,
    }))
}

/// A report by id (the caller checked the moderator).
async fn find_report<C: ConnectionTrait>(db: &C, id: i64) -> AppResult<report::Model> {
    db::fetch_one(db, Sql::new("SELECT * FROM reports WHERE id = ").bind(id))
        .await?
        .ok_or_else(|| AppError::not_found("report not found"))
}

/// Resolves a report with a note (its outcome). Resolving a resolved report
/// again keeps the first resolution.
pub async fn resolve(
    db: &DatabaseConnection,
    moderator: i64,
    id: i64,
    resolution: String,
    now: Millis,
) -> AppResult<report::Model> {
    let resolution = checked_reason(resolution, "resolution")?;
    require_moderator(db, moderator).await?;
    db::execute(
        db,
        resolving(moderator, &resolution, now)
            .push(" WHERE id = ")
            .bind(id)
            .push(" AND resolved_at IS NULL"),
    )
    .await?;
    find_report(db, id).await
}

fn checked_reason(reason: String, field: &str) -> AppResult<String> {
    super::normalize_text(Some(reason), field, MAX_REASON)?
        .ok_or_else(|| AppError::bad_input(format!("{field} must not be blank")))
}

/// `UPDATE reports SET` the resolution of `moderator` at `now` (a `WHERE`
/// follows).
fn resolving(moderator: i64, resolution: &str, now: Millis) -> Sql {
    Sql::new("UPDATE reports SET resolved_at = ")
        .bind(now)
        .push(", resolved_by = ")
        .bind(moderator)
        .push(", resolution = ")
        .bind(resolution)
}

/// Resolves the open reports about `subject` (in the caller's transaction).
async fn resolve_about<C: ConnectionTrait>(
    txn: &C,
    moderator: i64,
    subject: i64,
    resolution: &str,
    now: Millis,
) -> AppResult<()> {
    db::execute(
        txn,
        resolving(moderator, resolution, now)
            .push(" WHERE subject_id = ")
            .bind(subject)
            .push(" AND resolved_at IS NULL"),
    )
    .await?;
    Ok(())
}

async fn notify<C: ConnectionTrait>(
    txn: &C,
    ids: &IdGenerator,
    user: i64,
    kind: SubjectKind,
    subject: i64,
    reason: &str,
    now: Millis,
) -> AppResult<()> {
    let row = moderation_notice::Model {
        id: ids.next_id(),
        user_id: user,
        subject_kind: kind.as_str().to_owned(),
        subject_id: subject,
        reason: reason.to_owned(),
        created_at: now,
    };
    insert::row(txn, row).await?;
    Ok(())
}

#[derive(Debug, FromQueryResult)]
struct GoneMoment {
    author_id: i64,
    media_id: i64,
    location_id: Option<i64>,
    visibility: String,
    deleted_at: Option<i64>,
}

/// Takes a status or moment down (see the module doc). `NOT_FOUND` if no
/// `kind` has this id; a user is suspended instead (`BAD_USER_INPUT`).
pub async fn take_down(
    db: &DatabaseConnection,
    ids: &IdGenerator,
    moderator: i64,
    (kind, subject): (SubjectKind, i64),
    reason: String,
    now: Millis,
) -> AppResult<()> {
    let reason = checked_reason(reason, "reason")?;
    require_moderator(db, moderator).await?;
    let none = || AppError::not_found("no status or moment with this id");
    let txn = db::begin(db).await?;
    let author = match kind {
        SubjectKind::User => {
            if super::user::find_by_id(&txn, subject).await?.is_some() {
                return Err(AppError::bad_input("a user is suspended, not taken down"));
            }
            return Err(none());
        }
        SubjectKind::Status => {
            let status: Option<GoneStatus> = db::fetch_one(
                &txn,
                Sql::new("DELETE FROM statuses WHERE id = ")
                    .bind(subject)
                    .push(GoneStatus::RETURNING),
            )
            .await?;
            let Some(s) = status else { return Err(none()) };
            super::status::gone(&txn, std::slice::from_ref(&s), now).await?;
            super::status::refresh_tray(&txn, s.author_id).await?;
            s.author_id
        }
        SubjectKind::Moment => {
            let moment: Option<GoneMoment> = db::fetch_one(
                &txn,
                Sql::new("DELETE FROM moments WHERE id = ")
                    .bind(subject)
                    .push(" RETURNING author_id, media_id, location_id, visibility, deleted_at"),
            )
            .await?;
            let Some(m) = moment else { return Err(none()) };
            if m.deleted_at.is_none() {
                // It was live: counted out of its place, and its going logged.
                let gone = super::moment::Gone {
                    id: subject,
                    author_id: m.author_id,
                    location_id: m.location_id,
                    visibility: m.visibility,
                };
                super::moment::gone(&txn, &[gone], now).await?;
            }
            super::media::delete_by_ids(&txn, &[m.media_id], now).await?;
            location::drop_unused(&txn, &m.location_id.into_iter().collect::<Vec<_>>()).await?;
            m.author_id
        }
    };
    notify(&txn, ids, author, kind, subject, &reason, now).await?;
    resolve_about(
        &txn,
        moderator,
        subject,
        &format!("taken down: {reason}"),
        now,
    )
    .await?;
    txn.commit().await?;
    tracing::info!(moderator, subject, author, ?kind, "taken down");
    Ok(())
}

/// Suspends an account (see the module doc). Suspending oneself is
/// `BAD_USER_INPUT`; an unknown user `NOT_FOUND`.
pub async fn suspend(
    db: &DatabaseConnection,
    accounts: &Accounts,
    ids: &IdGenerator,
    moderator: i64,
    user: i64,
    reason: String,
    now: Millis,
) -> AppResult<()> {
    let reason = checked_reason(reason, "reason")?;
    require_moderator(db, moderator).await?;
    if user == moderator {
        return Err(AppError::bad_input("you cannot suspend yourself"));
    }
    let txn = db::begin(db).await?;
    let changed = db::execute(
        &txn,
        Sql::new("UPDATE users SET suspended_at = ")
            .bind(now)
            .push(", suspension_reason = ")
            .bind(reason.clone())
            .push(" WHERE id = ")
            .bind(user)
            .push(" AND NOT is_moderator"),
    )
    .await?;
    if changed == 0 {
        #[derive(sea_orm::FromQueryResult)]
        struct Role {
            is_moderator: bool,
        }
        let role: Option<Role> = db::fetch_one(
            &txn,
            Sql::new("SELECT is_moderator FROM users WHERE id = ").bind(user),
        )
        .await?;
        return Err(match role {
            Some(Role { is_moderator: true }) => AppError::forbidden(
                "a moderator cannot be suspended; revoke the role first (ephemera users revoke-moderator)",
            ),
            _ => AppError::not_found("user not found"),
        });
    }
    let sessions = super::session::end_all(&txn, user).await?;
    notify(&txn, ids, user, SubjectKind::User, user, &reason, now).await?;
    resolve_about(&txn, moderator, user, &format!("suspended: {reason}"), now).await?;
    txn.commit().await?;
    super::session::forget_all(accounts, user, &sessions);
    tracing::info!(
        moderator,
        user,
        sessions = sessions.len(),
        "account suspended"
    );
    Ok(())
}

/// Lifts a suspension: the account can sign in again and its content is
/// back. `NOT_FOUND` for an unknown user.
pub async fn reinstate(db: &DatabaseConnection, moderator: i64, user: i64) -> AppResult<()> {
    require_moderator(db, moderator).await?;
    let changed = db::execute(
        db,
        Sql::new("UPDATE users SET suspended_at = NULL, suspension_reason = NULL WHERE id = ")
            .bind(user),
    )
    .await?;
    if changed == 0 {
        return Err(AppError::not_found("user not found"));
    }
    Ok(())
}

/// Lifts the suspension of the account named `username` (any case), for
/// the command line; `NOT_FOUND` for an unknown name.
pub async fn reinstate_by_name<C: ConnectionTrait>(db: &C, username: &str) -> AppResult<()> {
    let changed = db::execute(
        db,
        Sql::new(
            "UPDATE users SET suspended_at = NULL, suspension_reason = NULL WHERE username_key = ",
        )
        .bind(username.trim().to_ascii_lowercase()),
    )
    .await?;
    if changed == 0 {
        return Err(AppError::not_found(format!("no user named {username}")));
    }
    Ok(())
}

/// Grants (or takes back) the moderator role by username; `NOT_FOUND` for
/// an unknown name. For the command line.
pub async fn set_moderator<C: ConnectionTrait>(
    db: &C,
    username: &str,
    moderator: bool,
) -> AppResult<()> {
    let changed = db::execute(
        db,
        Sql::new("UPDATE users SET is_moderator = ")
            .bind(moderator)
            .push(" WHERE username_key = ")
            .bind(username.trim().to_ascii_lowercase()),
    )
    .await?;
    if changed == 0 {
        return Err(AppError::not_found(format!("no user named {username}")));
    }
    Ok(())
}

/// A page of what moderators told `user`, newest first.
pub async fn notices_page<C: ConnectionTrait>(
    db: &C,
    user: i64,
    q: &PageQuery,
) -> AppResult<Page<moderation_notice::Model>> {
    let sql = Sql::new("SELECT n.* FROM moderation_notices n WHERE n.user_id = ")
        .bind(user)
        .append(q.bounds("n.created_at", "n.id"));
    let rows: Vec<moderation_notice::Model> = db::fetch_all(db, sql).await?;
    Ok(q.page(rows, |n| Key {
        ts: n.created_at,
        id: n.id,
    }))
}
