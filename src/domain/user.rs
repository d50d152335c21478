//! Accounts: sign-up rules, sign-in, and reading public profiles.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, FromQueryResult, QueryResult};

use super::page::{Key, Page, PageQuery};
use super::session::NotStarted;
use super::visibility::{Who, visible_person};
use crate::clock::Millis;
use crate::db::{self, Columns, Dialect, Sql, is_unique_violation};
use crate::entity::user;
use crate::error::{AppError, AppResult};
use crate::events::Kind;
use crate::events::log;
use crate::ids::IdGenerator;
use crate::state::Accounts;
use crate::throttle::ClientAddr;

/// What anyone may read about a user ([`PROFILE_COLUMNS`], decoded by
/// position).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub id: i64,
    pub username: String,
    pub display_name: Option<String>,
    pub created_at: i64,
    pub bio: Option<String>,
    pub avatar_media_id: Option<i64>,
}

/// The columns of [`Profile`] for table alias `u`, in the order
/// [`Profile::read`] reads them.
pub const PROFILE_COLUMNS: &str =
    "u.id, u.username, u.display_name, u.created_at, u.bio, u.avatar_media_id";

impl Profile {
    /// The profile at the row's next [`PROFILE_COLUMNS`].
    pub fn read(c: &mut Columns<'_>) -> Result<Self, DbErr> {
        Ok(Self {
            id: c.take()?,
            username: c.take()?,
            display_name: c.take()?,
            created_at: c.take()?,
            bio: c.take()?,
            avatar_media_id: c.take()?,
        })
    }
}

/// A row of [`PROFILE_COLUMNS`] alone.
impl FromQueryResult for Profile {
    fn from_query_result(res: &QueryResult, _: &str) -> Result<Self, DbErr> {
        Self::read(&mut Columns::of(res))
    }
}

const MAX_PASSWORD: usize = 1024;
/// The longest display name, at sign-up and in `updateProfile` alike.
const MAX_DISPLAY_NAME: usize = 50;

/// Usernames: 3 to 30 characters, ASCII letters, digits and underscore.
pub fn validate_username(username: &str) -> AppResult<()> {
    let len = username.chars().count();
    if !(3..=30).contains(&len) {
        return Err(AppError::bad_input("username must be 3 to 30 characters"));
    }
    if !username
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(AppError::bad_input(
            "username may contain only letters, digits and underscore",
        ));
    }
    Ok(())
}

/// Passwords: at least 8 characters (and at most 1,024, to bound hashing).
pub fn validate_password(password: &str) -> AppResult<()> {
    let len = password.chars().count();
    if len < 8 {
        return Err(AppError::bad_input(
            "password must be at least 8 characters",
        ));
    }
    if len > MAX_PASSWORD {
        return Err(AppError::bad_input(
            "password must be at most 1024 characters",
        ));
    }
    Ok(())
}

/// Display names are trimmed; blank means none; at most
/// [`MAX_DISPLAY_NAME`] characters, as `updateProfile` takes them.
pub fn normalize_display_name(name: Option<String>) -> AppResult<Option<String>> {
    Ok(name
        .map(|n| profile_text(n, "displayName", MAX_DISPLAY_NAME, false))
        .transpose()?
        .flatten())
}

/// Input of [`sign_up`].
#[derive(Debug)]
pub struct SignUp {
    pub username: String,
    pub password: String,
    pub display_name: Option<String>,
}

/// A signed-in user and their token.
#[derive(Debug)]
pub struct Session {
    pub token: String,
    pub user: Profile,
}

/// Creates an account. A taken username (whatever its case) is `BAD_USER_INPUT`.
/// Counts as a password attempt from `client`.
pub async fn sign_up(
    db: &DatabaseConnection,
    accounts: &Accounts,
    ids: &IdGenerator,
    input: SignUp,
    client: Option<ClientAddr>,
    now: Millis,
) -> AppResult<Session> {
    validate_username(&input.username)?;
    validate_password(&input.password)?;
    let display_name = normalize_display_name(input.display_name)?;
    accounts.limits.password(db, client, None, now).await?;
    let key = input.username.to_ascii_lowercase();
    if find_by_username(db, None, &key).await?.is_some() {
        return Err(taken());
    }
    let password_hash = accounts.passwords.hash(input.password).await?;
    let user = user::Model {
        id: ids.next_id(),
        username: input.username,
        username_key: key,
        display_name,
        password_hash,
        created_at: now,
        is_moderator: false,
        suspended_at: None,
        suspension_reason: None,
        bio: None,
        avatar_media_id: None,
        words_indexed_at: Some(now),
    };
    // The account and its words in the search index, at once.
    let txn = db::begin(db).await?;
    db::insert::row(&txn, user.clone()).await.map_err(|e| {
        if is_unique_violation(&e) {
            taken()
        } else {
            AppError::from(e)
        }
    })?;
    super::search::index_user(
        &txn,
        user.id,
        &user.username,
        user.display_name.as_deref(),
        now,
    )
    .await?;
    txn.commit().await?;
    let tokens = &accounts.tokens;
    let session = super::session::start(db, user.id, now, tokens.ttl_ms()).await?;
    let token = tokens.issue(user.id, session, now)?;
    Ok(Session {
        token,
        user: profile(user),
    })
}

fn taken() -> AppError {
    AppError::bad_input("username is taken")
}

/// Signs in. A wrong password and an unknown user give the same error.
/// Attempts are limited per client address and per account name.
pub async fn sign_in(
    db: &DatabaseConnection,
    accounts: &Accounts,
    username: &str,
    password: String,
    client: Option<ClientAddr>,
    now: Millis,
) -> AppResult<Session> {
    let key = username.trim().to_ascii_lowercase();
    let key = key.chars().take(64).collect::<String>();
    accounts
        .limits
        .password(db, client, Some(&key), now)
        .await?;
    let found = if password.chars().count() > MAX_PASSWORD || !super::may_match_stored(&key) {
        None
    } else {
        db::fetch_one::<user::Model, _>(
            db,
            Sql::new("SELECT * FROM users WHERE username_key = ").bind(key),
        )
        .await?
    };
    let ok = accounts
        .passwords
        .verify(password, found.as_ref().map(|u| u.password_hash.clone()))
        .await?;
    let wrong = || AppError::unauthenticated("wrong username or password");
    let suspended = |reason: Option<&str>| {
        AppError::forbidden(format!(
            "this account is suspended: {}",
            reason.unwrap_or("no reason given")
        ))
    };
    match found {
        Some(user) if ok && user.suspended_at.is_some() => {
            Err(suspended(user.suspension_reason.as_deref()))
        }
        Some(user) if ok => {
            let tokens = &accounts.tokens;
            let checked = super::session::Checked {
                user: user.id,
                password_hash: &user.password_hash,
            };
            match super::session::start_checked(db, checked, now, tokens.ttl_ms()).await? {
                Ok(session) => Ok(Session {
                    token: tokens.issue(user.id, session, now)?,
                    user: profile(user),
                }),
                Err(NotStarted::Suspended(reason)) => Err(suspended(reason.as_deref())),
                Err(NotStarted::Changed) => Err(wrong()),
            }
        }
        _ => Err(wrong()),
    }
}

/// Deletes `id`'s account and everything it owns, after checking its
/// password (`FORBIDDEN` if wrong, and nothing is deleted). In one
/// transaction: every blob the user uploaded is queued for deletion, the
/// moments they liked lose that like, then the user row goes and its
/// statuses, moments, likes, media, tray entry, seen rows and friendships go
/// with it by cascade. Tokens of the account stop working.
pub async fn delete_account(
    db: &DatabaseConnection,
    accounts: &Accounts,
    id: i64,
    password: String,
    client: Option<ClientAddr>,
    now: Millis,
) -> AppResult<()> {
    check_password(db, accounts, id, password, client, now).await?;
    let txn = db::begin(db).await?;
    // Lock the account first: an upload or like of this user that has not
    // committed yet then waits, and fails, instead of being dropped by the
    // cascade without its blob queued or its count corrected. (SQLite's
    // single writer gives the same with the first write below.)
    let account = Sql::new("SELECT id FROM users WHERE id = ").bind(id);
    if let Some(lock) = Dialect::of(&txn).lock_first(account) {
        db::execute(&txn, lock).await?;
    }
    super::media::queue_owner_blobs(&txn, id, now).await?;
    log_author_gone(&txn, id, now).await?;
    super::like::forget_user(&txn, id).await?;
    let places = super::location::forget_author(&txn, id).await?;
    let deleted = db::execute(&txn, Sql::new("DELETE FROM users WHERE id = ").bind(id)).await?;
    if deleted == 0 {
        return Err(gone());
    }
    super::location::drop_unused(&txn, &places).await?;
    txn.commit().await?;
    accounts.events.end(crate::events::Ended::User(id));
    Ok(())
}

/// Logs that `author`'s account is gone, in the transaction that deletes
/// it: one event for everyone if the account had live public content (a
/// status or moment anyone could see), else, if it had live content at all,
/// one event for each of its friends (who could see it); else none. Live
/// trays and feeds drop the author on it. A deletion costs the log (and
/// every subscriber) one event, not one per status and moment.
async fn log_author_gone<C: ConnectionTrait>(txn: &C, author: i64, now: Millis) -> AppResult<()> {
    #[derive(sea_orm::FromQueryResult)]
    struct Live {
        public: i64,
        any: i64,
    }
    let count = |table: &str, alias: &str, column: &str, live: Sql| {
        Sql::new(&format!(
            "SELECT CASE WHEN {alias}.{column} = 'PUBLIC' THEN 1 ELSE 0 END AS public FROM {table} {alias} WHERE {alias}.author_id = "
        ))
        .bind(author)
        .push(" AND ")
        .append(live)
    };
    let live: Option<Live> = db::fetch_one(
        txn,
        Sql::new("SELECT CAST(COALESCE(MAX(public), 0) AS BIGINT) AS public, CAST(COUNT(*) AS BIGINT) AS any FROM (")
            .append(count(
                "statuses",
                "s",
                "audience",
                super::expiry::live_status("s", now),
            ))
            .push(" UNION ALL ")
            .append(count(
                "moments",
                "m",
                "visibility",
                super::expiry::live_moment("m", now),
            ))
            .push(") c"),
    )
    .await?;
    let Some(live) = live.filter(|l| l.any > 0) else {
        return Ok(());
    };
    if live.public > 0 {
        return log::record(
            txn,
            &[log::Change {
                kind: Kind::AuthorGone,
                subject: author,
                author,
                audience: "PUBLIC".into(),
                viewer: None,
            }],
            now,
        )
        .await;
    }
    db::execute(
        txn,
        log::record_for_each(
            Dialect::of(txn),
            Kind::AuthorGone,
            author,
            super::visibility::friend_ids(author),
            now,
        ),
    )
    .await?;
    Ok(())
}

/// `id`'s account, if `password` is its password: `FORBIDDEN` if not, and
/// a gone account if it was deleted. A password attempt on the account,
/// counted as such.
async fn check_password(
    db: &DatabaseConnection,
    accounts: &Accounts,
    id: i64,
    password: String,
    client: Option<ClientAddr>,
    now: Millis,
) -> AppResult<user::Model> {
    let found: Option<user::Model> =
        db::fetch_one(db, Sql::new("SELECT * FROM users WHERE id = ").bind(id)).await?;
    let Some(found) = found else {
        return Err(gone());
    };
    accounts
        .limits
        .password(db, client, Some(&found.username_key), now)
        .await?;
    let ok = password.chars().count() <= MAX_PASSWORD
        && accounts
            .passwords
            .verify(password, Some(found.password_hash.clone()))
            .await?;
    if !ok {
        return Err(AppError::forbidden("wrong password"));
    }
    Ok(found)
}

/// Changes `id`'s password after checking the current one (`FORBIDDEN` if
/// wrong, and nothing changes): every session of the account ends (all its
/// tokens stop working, its websockets close) and a new one is started for
/// the caller.
pub async fn change_password(
    db: &DatabaseConnection,
    accounts: &Accounts,
    id: i64,
    passwords: PasswordChange,
    client: Option<ClientAddr>,
    now: Millis,
) -> AppResult<Session> {
    let PasswordChange { current, new } = passwords;
    validate_password(&new)?;
    let found = check_password(db, accounts, id, current, client, now).await?;
    let hash = accounts.passwords.hash(new).await?;
    let txn = db::begin(db).await?;
    // Only over the password that was checked: two changes at once, or a
    // change racing this one, leave one winner and the other refused.
    let changed = db::execute(
        &txn,
        Sql::new("UPDATE users SET password_hash = ")
            .bind(hash)
            .push(" WHERE id = ")
            .bind(id)
            .push(" AND password_hash = ")
            .bind(found.password_hash.clone()),
    )
    .await?;
    if changed == 0 {
        return Err(AppError::forbidden("wrong password"));
    }
    let tokens = &accounts.tokens;
    let ended = super::session::end_all(&txn, id).await?;
    let session = super::session::start(&txn, id, now, tokens.ttl_ms()).await?;
    txn.commit().await?;
    super::session::forget_all(accounts, id, &ended);
    Ok(Session {
        token: tokens.issue(id, session, now)?,
        user: profile(found),
    })
}

/// Input of [`change_password`].
#[derive(Debug)]
pub struct PasswordChange {
    pub current: String,
    pub new: String,
}

/// Locks `id`'s account for the rest of the transaction `txn`, with a
/// write on both databases (it takes the row's lock on PostgreSQL and
/// SQLite's write lock; a read first would have to upgrade its lock later,
/// which SQLite may refuse): counts read after it stay true until commit,
/// so what is checked against them is checked atomically.
pub async fn lock_for_write<C: ConnectionTrait>(txn: &C, id: i64) -> AppResult<()> {
    db::execute(
        txn,
        Sql::new("UPDATE users SET id = id WHERE id = ").bind(id),
    )
    .await?;
    Ok(())
}

/// The error for a valid token whose account was deleted.
pub fn gone() -> AppError {
    AppError::unauthenticated("this account no longer exists")
}

fn profile(u: user::Model) -> Profile {
    Profile {
        id: u.id,
        username: u.username,
        display_name: u.display_name,
        created_at: u.created_at,
        bio: u.bio,
        avatar_media_id: u.avatar_media_id,
    }
}

/// A user by username, whatever its case, if `seer` may see them (`None`:
/// whoever looks).
pub async fn find_by_username<C: ConnectionTrait>(
    db: &C,
    seer: Option<Who<'_>>,
    username: &str,
) -> AppResult<Option<Profile>> {
    if !super::may_match_stored(username) {
        return Ok(None);
    }
    db::fetch_one(
        db,
        Sql::new(&format!(
            "SELECT {PROFILE_COLUMNS} FROM users u WHERE u.username_key = "
        ))
        .bind(username.to_ascii_lowercase())
        .append(seen_by(seer)),
    )
    .await
}

/// ` AND` the rule that keeps the profiles `seer` may see; nothing for
/// `None` (whoever looks).
fn seen_by(seer: Option<Who<'_>>) -> Sql {
    match seer {
        Some(who) => Sql::new(" AND ").append(visible_person("u.id", who)),
        None => Sql::new(""),
    }
}

/// Users by id that `viewer` may see: not suspended, no block between them
/// (`user`, `node`, `nodes`).
pub async fn find_visible_by_ids<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    ids: &[i64],
) -> AppResult<HashMap<i64, Profile>> {
    find_where(db, Some(Who::User(viewer.unwrap_or(0))), ids).await
}

/// Whether `viewer` may see user `id` (who exists).
pub async fn is_visible<C: ConnectionTrait>(db: &C, viewer: i64, id: i64) -> AppResult<bool> {
    Ok(find_visible_by_ids(db, Some(viewer), &[id])
        .await?
        .contains_key(&id))
}

/// Users by id (the user loader's query: the authors of what the viewer
/// may already see).
pub async fn find_by_ids<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
) -> AppResult<HashMap<i64, Profile>> {
    find_where(db, None, ids).await
}

async fn find_where<C: ConnectionTrait>(
    db: &C,
    seer: Option<Who<'_>>,
    ids: &[i64],
) -> AppResult<HashMap<i64, Profile>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<Profile> = db::fetch_all(
        db,
        Sql::new(&format!(
            "SELECT {PROFILE_COLUMNS} FROM users u WHERE u.id IN ("
        ))
        .list(ids.iter().copied())
        .push(")")
        .append(seen_by(seer)),
    )
    .await?;
    Ok(rows.into_iter().map(|p| (p.id, p)).collect())
}

/// A user by id.
pub async fn find_by_id<C: ConnectionTrait>(db: &C, id: i64) -> AppResult<Option<Profile>> {
    Ok(find_by_ids(db, &[id]).await?.remove(&id))
}

/// What `updateProfile` changes; `None`: left as it is.
#[derive(Debug, Default)]
pub struct ProfileChange {
    /// An empty string clears it.
    pub display_name: Option<String>,
    /// An empty string clears it.
    pub bio: Option<String>,
    pub avatar_media_id: Option<i64>,
    pub remove_avatar: bool,
}

const MAX_BIO: usize = 300;

/// A profile text as stored: trimmed, blank clears it, at most `max`
/// characters, no control characters (newlines in a multiline one).
fn profile_text(
    text: String,
    field: &str,
    max: usize,
    multiline: bool,
) -> AppResult<Option<String>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if text.chars().count() > max {
        return Err(AppError::bad_input(format!(
            "{field} must be at most {max} characters"
        )));
    }
    super::check_stored_text(text, field, multiline)?;
    Ok(Some(text.to_owned()))
}

/// Changes `viewer`'s profile: everything checked before anything is
/// written, then in one transaction under the account's lock. A new or
/// removed avatar deletes the old one's media through the outbox; a
/// display name changed rewrites the account's search words.
pub async fn update_profile(
    db: &DatabaseConnection,
    media: &crate::state::Media,
    viewer: i64,
    change: ProfileChange,
    now: Millis,
) -> AppResult<Profile> {
    if change.remove_avatar && change.avatar_media_id.is_some() {
        return Err(AppError::bad_input(
            "pass avatarMediaId or removeAvatar, not both",
        ));
    }
    let display_name = change
        .display_name
        .map(|n| profile_text(n, "displayName", MAX_DISPLAY_NAME, false))
        .transpose()?;
    let bio = change
        .bio
        .map(|b| profile_text(b, "bio", MAX_BIO, true))
        .transpose()?;
    if let Some(id) = change.avatar_media_id {
        super::media::prepare(db, media, viewer, id, now).await?;
    }
    let txn = db::begin(db).await?;
    lock_for_write(&txn, viewer).await?;
    let me = find_by_id(&txn, viewer).await?.ok_or_else(gone)?;
    let mut set = Vec::new();
    if let Some(name) = &display_name {
        set.push(Sql::new("display_name = ").bind(name.clone()));
    }
    if let Some(bio) = &bio {
        set.push(Sql::new("bio = ").bind(bio.clone()));
    }
    let replaced = if let Some(id) = change.avatar_media_id {
        super::media::attach(&txn, viewer, id, now).await?;
        set.push(Sql::new("avatar_media_id = ").bind(id));
        me.avatar_media_id
    } else if change.remove_avatar {
        set.push(Sql::new("avatar_media_id = NULL"));
        me.avatar_media_id
    } else {
        None
    };
    if !set.is_empty() {
        db::execute(
            &txn,
            Sql::new("UPDATE users SET ")
                .append(Sql::join(set, ", "))
                .push(" WHERE id = ")
                .bind(viewer),
        )
        .await?;
    }
    if let Some(old) = replaced {
        super::media::delete_by_ids(&txn, &[old], now).await?;
    }
    if let Some(name) = &display_name {
        super::search::index_user(&txn, viewer, &me.username, name.as_deref(), now).await?;
    }
    let updated = find_by_id(&txn, viewer).await?.ok_or_else(gone)?;
    txn.commit().await?;
    Ok(updated)
}

/// A profile with the timestamp a list is sorted by: [`PROFILE_COLUMNS`],
/// then `k_ts`.
#[derive(Debug)]
pub struct KeyedProfile {
    pub profile: Profile,
    pub k_ts: i64,
}

impl FromQueryResult for KeyedProfile {
    fn from_query_result(res: &QueryResult, _: &str) -> Result<Self, DbErr> {
        let mut c = Columns::of(res);
        Ok(Self {
            profile: Profile::read(&mut c)?,
            k_ts: c.take()?,
        })
    }
}

/// A page of [`KeyedProfile`] rows as profiles.
pub fn keyed_page(q: &PageQuery, rows: Vec<KeyedProfile>) -> Page<Profile> {
    q.page(rows, |r| Key {
        ts: r.k_ts,
        id: r.profile.id,
    })
    .map(|r| r.profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn username_rules() {
        assert!(validate_username("ab").is_err());
        assert!(validate_username("abc").is_ok());
        assert!(validate_username(&"a".repeat(30)).is_ok());
        assert!(validate_username(&"a".repeat(31)).is_err());
        assert!(validate_username("with space").is_err());
        assert!(validate_username("émile").is_err());
        assert!(validate_username("under_score9").is_ok());
    }

    #[test]
    fn display_names_are_trimmed() {
        assert_eq!(
            normalize_display_name(Some("  Ann ".into())).unwrap(),
            Some("Ann".into())
        );
        assert_eq!(normalize_display_name(Some("   ".into())).unwrap(), None);
        assert!(normalize_display_name(Some("x".repeat(65))).is_err());
    }
}
