//! Media: uploads, direct-upload tickets, attaching a media to what shows it,
//! and deleting media without ever orphaning a blob or deleting one early.
//!
//! The invariants:
//! - A media row exists before its blob is written (an upload inserts the row,
//!   then puts the bytes; a ticket inserts a *pending* row, then the client
//!   puts the bytes). A row is the record that a blob may exist.
//! - A media row is deleted only together with queueing its key in the
//!   `media_deletions` outbox, in one transaction ([`delete_rows`],
//!   [`queue_owner_blobs`]). The media job deletes queued blobs until the store
//!   confirms, so no blob outlives its row for long, and no blob is deleted
//!   while a row still names it.
//! - A direct upload's bytes are checked and copied to a new key the first
//!   time the media is attached, so a second PUT with the same ticket cannot
//!   replace what was checked; the upload key is queued for deletion, held
//!   until the ticket can no longer write it (so a late PUT cannot leave a
//!   blob behind after its deletion ran).
//! - A media is attached at most once: [`attach`] is a conditional update of
//!   the row inside the transaction that inserts the status or moment, and the
//!   sweep of unattached uploads deletes only rows still unattached, under the
//!   same row lock.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use sea_orm::{
    ActiveModelTrait, ConnectionTrait, DatabaseConnection, EntityTrait, FromQueryResult,
    IntoActiveModel,
};

use super::image::{self, ACCEPTED_TYPES, Judged};
use crate::clock::{Millis, duration_millis};
use crate::db::{self, Dialect, Sql, insert};
use crate::entity::media;
use crate::error::{AppError, AppResult};
use crate::ids::IdGenerator;
use crate::state::Media;
use crate::storage::{self, UploadTarget};

/// Waits for one of the `EPHEMERA_MAX_CONCURRENT_UPLOADS` slots that bound
/// the memory uploads take while they are read and judged.
pub async fn upload_slot(media: &Media) -> AppResult<tokio::sync::OwnedSemaphorePermit> {
    media
        .slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| AppError::internal("waiting for an upload slot", e))
}

/// Media by id (the media loader's query).
pub async fn find_by_ids<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
) -> AppResult<HashMap<i64, media::Model>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<media::Model> = db::fetch_all(
        db,
        Sql::new("SELECT * FROM media WHERE id IN (")
            .list(ids.iter().copied())
            .push(")"),
    )
    .await?;
    Ok(rows.into_iter().map(|m| (m.id, m)).collect())
}

/// Those of `ids` that `owner` uploaded and that are ready: a media is
/// visible by id to its uploader only (others see it through what it is
/// attached to).
pub async fn find_owned_by_ids<C: ConnectionTrait>(
    db: &C,
    owner: i64,
    ids: &[i64],
) -> AppResult<HashMap<i64, media::Model>> {
    let mut found = find_by_ids(db, ids).await?;
    found.retain(|_, m| m.owner_id == owner && m.ready_at.is_some());
    Ok(found)
}

async fn find<C: ConnectionTrait>(db: &C, id: i64) -> AppResult<Option<media::Model>> {
    Ok(find_by_ids(db, &[id]).await?.remove(&id))
}

fn too_large(max: u64) -> AppError {
    AppError::payload_too_large(format!("a media file is at most {max} bytes"))
}

/// The last 24 hours, over which an account's upload bytes are counted.
const QUOTA_WINDOW_MS: Millis = 24 * 3600 * 1000;

/// Refuses (`RATE_LIMITED`) an upload of `bytes` by `owner` that would pass
/// the account's quotas: bytes charged in the last 24 hours
/// (`EPHEMERA_UPLOAD_BYTES_PER_DAY`: uploads and tickets charge what they
/// may receive, whatever became of the media since), and, for a new
/// ticket, unused tickets held (`EPHEMERA_UPLOAD_PENDING_MAX`). Run inside
/// [`reserve`]'s transaction, after the account's lock, it is atomic with
/// the charge it checks; run alone, it only saves judging an upload that
/// would be refused anyway.
async fn check_quota<C: ConnectionTrait>(
    db: &C,
    media: &Media,
    owner: i64,
    bytes: i64,
    ticket: bool,
    now: Millis,
) -> AppResult<()> {
    #[derive(FromQueryResult)]
    struct Used {
        n: Option<i64>,
    }
    let charged: Option<Used> = db::fetch_one(
        db,
        Sql::new("SELECT CAST(SUM(bytes) AS BIGINT) AS n FROM upload_charges WHERE owner_id = ")
            .bind(owner)
            .push(" AND charged_at > ")
            .bind(now - QUOTA_WINDOW_MS),
    )
    .await?;
    let used_bytes = charged.and_then(|u| u.n).unwrap_or(0);
    let config = &media.config;
    if ticket {
        let pending: Option<Used> = db::fetch_one(
            db,
            Sql::new("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM media WHERE owner_id = ")
                .bind(owner)
                .push(" AND ready_at IS NULL AND upload_expires_at > ")
                .bind(now),
        )
        .await?;
        if pending.and_then(|u| u.n).unwrap_or(0) >= config.upload_pending_max {
            return Err(AppError::rate_limited(
                format!(
                    "at most {} unused upload tickets at once; use or let one expire",
                    config.upload_pending_max
                ),
                config.upload_ticket_ttl,
            ));
        }
    }
    if used_bytes.saturating_add(bytes) > config.upload_bytes_per_day {
        return Err(AppError::rate_limited(
            format!(
                "at most {} bytes of uploads a day per account",
                config.upload_bytes_per_day
            ),
            std::time::Duration::from_secs(3600),
        ));
    }
    Ok(())
}

/// Inserts `row` (a new upload's or ticket's media row) with its charge of
/// `charged` bytes, if the account's quotas allow it: in one transaction
/// that first locks the account, so uploads of one account at once are counted one after the
/// other and none slips past the quota.
async fn reserve(
    db: &DatabaseConnection,
    media: &Media,
    row: &media::Model,
    charged: i64,
    now: Millis,
) -> AppResult<()> {
    let ticket = row.ready_at.is_none();
    let txn = db::begin(db).await?;
    super::user::lock_for_write(&txn, row.owner_id).await?;
    check_quota(&txn, media, row.owner_id, charged, ticket, now).await?;
    insert::row(&txn, row.clone()).await?;
    db::execute(
        &txn,
        Sql::new("INSERT INTO upload_charges (owner_id, charged_at, media_id, bytes) VALUES (")
            .list([row.owner_id, now, row.id, charged])
            .push(")"),
    )
    .await?;
    txn.commit().await?;
    Ok(())
}

/// Forgets upload charges older than the quota's day; returns how many.
pub async fn prune_charges<C: ConnectionTrait>(db: &C, now: Millis) -> AppResult<u64> {
    db::execute(
        db,
        Sql::new("DELETE FROM upload_charges WHERE charged_at <= ").bind(now - QUOTA_WINDOW_MS),
    )
    .await
}

/// Stores an uploaded file for `owner`: judged by its bytes, metadata
/// removed, the row first and then the blob.
pub async fn upload(
    db: &DatabaseConnection,
    media: &Media,
    ids: &IdGenerator,
    owner: i64,
    bytes: Bytes,
    now: Millis,
) -> AppResult<media::Model> {
    let max = media.config.max_upload_bytes;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    let received = bytes.len() as i64;
    check_quota(db, media, owner, received, false, now).await?;
    let judged = judge(bytes, media.config.max_image_pixels).await?;
    let row = media::Model {
        id: ids.next_id(),
        owner_id: owner,
        storage_key: storage::new_key(),
        content_type: judged.content_type.to_owned(),
        byte_size: judged.bytes.len() as i64,
        width: judged.width,
        height: judged.height,
        created_at: now,
        ready_at: Some(now),
        attached_at: None,
        upload_expires_at: None,
        upload_received_at: None,
    };
    reserve(db, media, &row, received, now).await?;
    if let Err(failure) = media
        .store
        .put(&row.storage_key, judged.bytes, judged.content_type)
        .await
    {
        // The put may have left part of a blob: queue it with the row.
        discard(db, row.id, now).await?;
        return Err(failure.into());
    }
    media.stats.uploads.fetch_add(1, Ordering::Relaxed);
    Ok(row)
}

/// Judges on the blocking pool (stripping copies up to the size limit).
async fn judge(bytes: Bytes, max_pixels: u64) -> AppResult<Judged> {
    tokio::task::spawn_blocking(move || image::judge(bytes, max_pixels))
        .await
        .map_err(|e| AppError::internal("judging an image", e))?
}

/// A direct-upload ticket.
#[derive(Debug)]
pub struct Ticket {
    pub media_id: i64,
    pub target: UploadTarget,
}

/// Starts a direct upload of `byte_size` bytes of `content_type`: a pending
/// media row and a signed PUT target. The bytes are judged when the media is
/// first attached ([`prepare`]).
pub async fn request_upload(
    db: &DatabaseConnection,
    media: &Media,
    ids: &IdGenerator,
    owner: i64,
    content_type: &str,
    byte_size: i64,
    now: Millis,
) -> AppResult<Ticket> {
    let content_type = content_type.trim().to_ascii_lowercase();
    if !ACCEPTED_TYPES.contains(&content_type.as_str()) {
        return Err(AppError::unsupported_media_type(format!(
            "contentType must be one of {}",
            ACCEPTED_TYPES.join(", ")
        )));
    }
    let max = media.config.max_upload_bytes;
    if byte_size < 1 {
        return Err(AppError::bad_input("byteSize must be at least 1"));
    }
    let len = byte_size as u64;
    if len > max {
        return Err(too_large(max));
    }
    let key = storage::new_key();
    let target = media
        .store
        .upload_target(
            &key,
            &content_type,
            len,
            now,
            media.config.upload_ticket_ttl,
        )
        .await?;
    let row = media::Model {
        id: ids.next_id(),
        owner_id: owner,
        storage_key: key,
        content_type,
        byte_size,
        width: None,
        height: None,
        created_at: now,
        ready_at: None,
        attached_at: None,
        upload_expires_at: Some(target.expires_at),
        upload_received_at: None,
    };
    reserve(db, media, &row, byte_size, now).await?;
    Ok(Ticket {
        media_id: row.id,
        target,
    })
}

/// Why a local direct upload's PUT may not write its key.
#[derive(Debug, PartialEq, Eq)]
pub enum Unclaimed {
    /// No pending ticket names the key (complete, withdrawn, expired away).
    NoTicket,
    /// The PUT would carry other than the ticket's bytes.
    WrongSize { ticket: i64 },
    /// An earlier PUT claimed the ticket: a ticket takes bytes once.
    Claimed,
}

/// Claims the pending ticket of `key` for one PUT of `len` bytes: a ticket
/// is claimed once (one conditional update, so of PUTs at once exactly one
/// wins), whether or not its bytes then arrive whole; a client whose PUT
/// failed asks for a new ticket. The bytes a PUT can write are at most the
/// ticket's, which its ticket was charged for.
pub async fn claim_upload(
    db: &DatabaseConnection,
    key: &str,
    len: u64,
    now: Millis,
) -> AppResult<Result<(), Unclaimed>> {
    #[derive(FromQueryResult)]
    struct Pending {
        id: i64,
        byte_size: i64,
        upload_received_at: Option<i64>,
    }
    let pending: Option<Pending> = db::fetch_one(
        db,
        Sql::new("SELECT id, byte_size, upload_received_at FROM media WHERE storage_key = ")
            .bind(key)
            .push(" AND ready_at IS NULL"),
    )
    .await?;
    let Some(pending) = pending else {
        return Ok(Err(Unclaimed::NoTicket));
    };
    if u64::try_from(pending.byte_size).ok() != Some(len) {
        return Ok(Err(Unclaimed::WrongSize {
            ticket: pending.byte_size,
        }));
    }
    if pending.upload_received_at.is_some() {
        return Ok(Err(Unclaimed::Claimed));
    }
    let claimed = db::execute(
        db,
        Sql::new("UPDATE media SET upload_received_at = ")
            .bind(now)
            .push(" WHERE id = ")
            .bind(pending.id)
            .push(" AND ready_at IS NULL AND upload_received_at IS NULL"),
    )
    .await?;
    Ok(if claimed == 1 {
        Ok(())
    } else {
        Err(Unclaimed::Claimed)
    })
}

/// Whether a local direct upload may write `key`: a pending row names it.
pub async fn is_pending(db: &DatabaseConnection, key: &str) -> AppResult<bool> {
    #[derive(FromQueryResult)]
    struct Row {
        #[expect(dead_code, reason = "read only to learn that a row exists")]
        id: i64,
    }
    let row: Option<Row> = db::fetch_one(
        db,
        Sql::new("SELECT id FROM media WHERE storage_key = ")
            .bind(key)
            .push(" AND ready_at IS NULL"),
    )
    .await?;
    Ok(row.is_some())
}

/// Checks, before a transaction attaches it, that `owner` may attach media
/// `id`; a direct upload is judged here the first time (and rejected, with
/// its blob queued for deletion, if its bytes fail).
pub async fn prepare(
    db: &DatabaseConnection,
    media: &Media,
    owner: i64,
    id: i64,
    now: Millis,
) -> AppResult<()> {
    let row = find(db, id)
        .await?
        .ok_or_else(|| AppError::not_found("media not found"))?;
    check_attachable(&row, owner)?;
    if row.ready_at.is_none() {
        let _slot = upload_slot(media).await?;
        verify_upload(db, media, &row, now).await?;
        media.stats.uploads.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Someone else's media answers as media that does not exist: an upload
/// is its owner's alone until it is attached (`node` shows it to nobody
/// else), so no answer may tell that it exists.
fn check_attachable(media: &media::Model, owner: i64) -> AppResult<()> {
    if media.owner_id != owner {
        return Err(AppError::not_found("media not found"));
    }
    if media.attached_at.is_some() {
        return Err(AppError::bad_input("this media is already attached"));
    }
    Ok(())
}

/// Judges a direct upload's bytes: size, type, metadata. On success the row
/// becomes ready with the measured type and size.
async fn verify_upload(
    db: &DatabaseConnection,
    media: &Media,
    row: &media::Model,
    now: Millis,
) -> AppResult<()> {
    let not_arrived =
        || AppError::bad_input("the upload has not arrived: PUT the bytes to the uploadUrl first");
    let key = &row.storage_key;
    let max = media.config.max_upload_bytes;
    let size = media.store.size(key).await?.ok_or_else(not_arrived)?;
    if size > max {
        return reject(db, row.id, too_large(max), now).await;
    }
    if size != row.byte_size as u64 {
        let wrong = AppError::bad_input(format!(
            "the upload has {size} bytes; the ticket was for {}",
            row.byte_size
        ));
        return reject(db, row.id, wrong, now).await;
    }
    let bytes = media.store.get(key).await?.ok_or_else(not_arrived)?;
    let judged = match judge(bytes.clone(), media.config.max_image_pixels).await {
        Ok(j) => j,
        Err(e) => return reject(db, row.id, e, now).await,
    };
    // The bytes move to a key no ticket can write, so a second PUT with the
    // same ticket cannot replace what was checked. A reservation in the
    // outbox deletes the new blob if we stop before the row points at it.
    let final_key = storage::new_key();
    db::execute(
        db,
        Sql::new(
            "INSERT INTO media_deletions (storage_key, enqueued_at, attempts, next_attempt_at) \
             VALUES (",
        )
        .bind(final_key.clone())
        .push(", ")
        .bind(now)
        .push(", 0, ")
        .bind(now + RESERVATION_MS)
        .push(")"),
    )
    .await?;
    let size = judged.bytes.len() as i64;
    media
        .store
        .put(&final_key, judged.bytes, judged.content_type)
        .await?;
    let txn = db::begin(db).await?;
    let moved = db::execute(
        &txn,
        Sql::new("UPDATE media SET storage_key = ")
            .bind(final_key.clone())
            .push(", upload_expires_at = NULL, ready_at = ")
            .bind(now)
            .push(", content_type = ")
            .bind(judged.content_type)
            .push(", byte_size = ")
            .bind(size)
            .push(", width = ")
            .bind(judged.width)
            .push(", height = ")
            .bind(judged.height)
            .push(" WHERE id = ")
            .bind(row.id)
            .push(" AND ready_at IS NULL"),
    )
    .await?;
    if moved == 1 {
        // The upload key goes once its ticket can no longer write it.
        db::execute(
            &txn,
            Sql::new("UPDATE media_deletions SET storage_key = ")
                .bind(key.clone())
                .push(", next_attempt_at = ")
                .bind(hold_until(row.upload_expires_at, now))
                .push(" WHERE storage_key = ")
                .bind(final_key),
        )
        .await?;
    } else {
        // Checked at the same time by another request, which won: ours goes now.
        db::execute(
            &txn,
            Sql::new("UPDATE media_deletions SET next_attempt_at = ")
                .bind(now)
                .push(" WHERE storage_key = ")
                .bind(final_key),
        )
        .await?;
    }
    txn.commit().await?;
    Ok(())
}

/// How long a checked blob's reservation in the outbox waits before it may
/// be deleted (far longer than a put takes).
const RESERVATION_MS: Millis = 60 * 60 * 1000;
/// How long after a ticket expires its key is kept (a PUT that started just
/// before the expiry may still be streaming).
const TICKET_HOLD_MS: Millis = 60 * 60 * 1000;

/// When a key queued at `now` may be deleted: at once, unless a ticket can
/// still write it.
fn hold_until(upload_expires_at: Option<Millis>, now: Millis) -> Millis {
    upload_expires_at.map_or(now, |exp| now.max(exp + TICKET_HOLD_MS))
}

/// The same rule in SQL over a `media` row.
fn hold(now: Millis) -> Sql {
    Sql::new(&format!(
        "CASE WHEN upload_expires_at IS NOT NULL AND upload_expires_at + {TICKET_HOLD_MS} > "
    ))
    .bind(now)
    .push(&format!(" THEN upload_expires_at + {TICKET_HOLD_MS} ELSE "))
    .bind(now)
    .push(" END")
}

/// Deletes a pending media whose bytes failed, queueing its blob; returns `err`.
async fn reject(db: &DatabaseConnection, id: i64, err: AppError, now: Millis) -> AppResult<()> {
    let txn = db::begin(db).await?;
    let pending = Sql::new("id = ").bind(id).push(" AND ready_at IS NULL");
    delete_rows(&txn, pending, now).await?;
    txn.commit().await?;
    Err(err)
}

/// Deletes an unattached media row after a failed put, queueing its blob.
async fn discard(db: &DatabaseConnection, id: i64, now: Millis) -> AppResult<()> {
    let txn = db::begin(db).await?;
    let unattached = Sql::new("id = ").bind(id).push(" AND attached_at IS NULL");
    delete_rows(&txn, unattached, now).await?;
    txn.commit().await?;
    Ok(())
}

/// Attaches media `id` to a new status or moment, inside the transaction that
/// inserts it. `NOT_FOUND`, `FORBIDDEN` (someone else's) or `BAD_USER_INPUT`
/// (already attached, or not yet checked: call [`prepare`] first).
pub async fn attach<C: ConnectionTrait>(
    txn: &C,
    owner: i64,
    id: i64,
    now: Millis,
) -> AppResult<()> {
    let updated = db::execute(
        txn,
        Sql::new("UPDATE media SET attached_at = ")
            .bind(now)
            .push(" WHERE id = ")
            .bind(id)
            .push(" AND owner_id = ")
            .bind(owner)
            .push(" AND attached_at IS NULL AND ready_at IS NOT NULL"),
    )
    .await?;
    if updated == 1 {
        return Ok(());
    }
    let media = find(txn, id)
        .await?
        .ok_or_else(|| AppError::not_found("media not found"))?;
    check_attachable(&media, owner)?;
    Err(AppError::bad_input("the upload has not been checked yet"))
}

/// Inserts `row`, a status or moment that takes a media (in the
/// transaction that [`attach`]ed it). The unique key on `media_id` catches an
/// attach elsewhere since the check: `BAD_USER_INPUT`.
pub async fn insert_holder<E, A, M, C>(txn: &C, row: M) -> AppResult<()>
where
    E: EntityTrait,
    A: ActiveModelTrait<Entity = E>,
    M: IntoActiveModel<A>,
    C: ConnectionTrait,
{
    match insert::row(txn, row).await {
        Err(e) if db::is_unique_violation(&e) => {
            Err(AppError::bad_input("this media is already attached"))
        }
        Err(e) => Err(e.into()),
        Ok(()) => Ok(()),
    }
}

/// `INSERT INTO media_deletions ... SELECT` of the blobs of the `media` rows
/// that `filter` keeps, each due when [`hold`] says.
fn queue_blobs(filter: Sql, now: Millis) -> Sql {
    Sql::new(
        "INSERT INTO media_deletions (storage_key, enqueued_at, attempts, next_attempt_at) \
         SELECT storage_key, ",
    )
    .bind(now)
    .push(", 0, ")
    .append(hold(now))
    .push(" FROM media WHERE ")
    .append(filter)
    .push(" ON CONFLICT (storage_key) DO NOTHING")
}

/// Queues the blobs of the media rows matching `filter` (SQL over `media`)
/// and deletes the rows, in the caller's transaction. Returns the rows
/// deleted.
pub async fn delete_rows<C: ConnectionTrait>(txn: &C, filter: Sql, now: Millis) -> AppResult<u64> {
    db::execute(txn, queue_blobs(filter.clone(), now)).await?;
    db::execute(txn, Sql::new("DELETE FROM media WHERE ").append(filter)).await
}

/// The `WITH` clauses (named `queued` and `media_gone`) that do what
/// [`delete_rows`] does for the media rows whose ids the SQL `ids_sql`
/// selects, so a purge can delete a whole batch in one statement (where
/// the dialect has writable `WITH` clauses).
pub fn delete_rows_ctes(ids_sql: &str, now: Millis) -> Sql {
    let listed = || Sql::new(&format!("id IN ({ids_sql})"));
    Sql::new("queued AS (")
        .append(queue_blobs(listed(), now))
        .push("), media_gone AS (DELETE FROM media WHERE ")
        .append(listed())
        .push(")")
}

/// Deletes media rows by id with their blobs queued (a status or moment
/// that owned them is being deleted in the same transaction).
pub async fn delete_by_ids<C: ConnectionTrait>(
    txn: &C,
    ids: &[i64],
    now: Millis,
) -> AppResult<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let listed = Sql::new("id IN (").list(ids.iter().copied()).push(")");
    delete_rows(txn, listed, now).await
}

/// Queues every blob `owner` uploaded, before their account is deleted (the
/// rows then go by cascade in the same transaction).
pub async fn queue_owner_blobs<C: ConnectionTrait>(
    txn: &C,
    owner: i64,
    now: Millis,
) -> AppResult<()> {
    db::execute(txn, queue_blobs(Sql::new("owner_id = ").bind(owner), now)).await?;
    Ok(())
}

/// Deletes uploads never attached within `EPHEMERA_MEDIA_UNATTACHED_TTL`,
/// queueing their blobs; batches until none is left. Returns the count.
pub async fn sweep_unattached(
    db: &DatabaseConnection,
    media: &Media,
    now: Millis,
) -> AppResult<u64> {
    let cutoff = now - duration_millis(media.config.unattached_ttl);
    let batch = i64::from(media.config.gc_batch);
    let mut total = 0;
    loop {
        let txn = db::begin(db).await?;
        #[derive(FromQueryResult)]
        struct Row {
            id: i64,
        }
        let unattached = Sql::new("p.attached_at IS NULL AND p.created_at <= ").bind(cutoff);
        let rows: Vec<Row> = db::fetch_all(
            &txn,
            db::claim_batch(Dialect::of(&txn), "media", unattached, "created_at", batch),
        )
        .await?;
        if rows.is_empty() {
            return Ok(total);
        }
        let still_unattached = Sql::new("id IN (")
            .list(rows.iter().map(|r| r.id))
            .push(") AND attached_at IS NULL AND created_at <= ")
            .bind(cutoff);
        total += delete_rows(&txn, still_unattached, now).await?;
        txn.commit().await?;
    }
}

/// What one drain of the outbox did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    pub deleted: u64,
    pub failed: u64,
}

/// Deletions run at once against the store.
const CONCURRENT_DELETES: usize = 8;

#[derive(Debug, FromQueryResult)]
struct Queued {
    storage_key: String,
    attempts: i32,
}

/// Deletes queued blobs that are due: claims a batch (skipping rows another
/// instance holds), deletes the blobs, forgets the done ones and schedules
/// failed ones with exponential backoff. Repeats until nothing is due.
pub async fn drain_deletions(
    db: &DatabaseConnection,
    media: &Media,
    now: Millis,
) -> AppResult<Drained> {
    use futures_util::StreamExt;
    let mut drained = Drained::default();
    loop {
        let lease = duration_millis(media.config.claim_lease);
        let claimed = claim_deletions(db, media.config.gc_batch, lease, now).await?;
        if claimed.is_empty() {
            record_waiting(db, media).await?;
            return Ok(drained);
        }
        let results: Vec<(Queued, Result<(), storage::StoreFailure>)> =
            futures_util::stream::iter(claimed)
                .map(|q| async move {
                    let r = media.store.delete(&q.storage_key).await;
                    (q, r)
                })
                .buffer_unordered(CONCURRENT_DELETES)
                .collect()
                .await;
        let mut done = Vec::new();
        for (queued, result) in results {
            match result {
                Ok(()) => done.push(queued.storage_key),
                Err(failure) => {
                    drained.failed += 1;
                    media.stats.failed.fetch_add(1, Ordering::Relaxed);
                    record_failure(db, media, now, &queued, &failure.0).await?;
                }
            }
        }
        if !done.is_empty() {
            let n = done.len() as u64;
            media.stats.deleted.fetch_add(n, Ordering::Relaxed);
            drained.deleted += db::execute(
                db,
                Sql::new("DELETE FROM media_deletions WHERE storage_key IN (")
                    .list(done)
                    .push(")"),
            )
            .await?;
        }
    }
}

async fn record_waiting(db: &DatabaseConnection, media: &Media) -> AppResult<()> {
    #[derive(FromQueryResult)]
    struct Count {
        n: i64,
    }
    let count: Option<Count> =
        db::fetch_one(db, Sql::new("SELECT COUNT(*) AS n FROM media_deletions")).await?;
    let n = count.map_or(0, |c| u64::try_from(c.n).unwrap_or(0));
    media.stats.waiting.store(n, Ordering::Relaxed);
    Ok(())
}

/// Claims up to `batch` due deletions for `lease` (`EPHEMERA_MEDIA_CLAIM_LEASE`):
/// until then no other instance takes them; after it, if this instance died
/// mid-round, another does (a blob deleted twice is "not found", done).
async fn claim_deletions(
    db: &DatabaseConnection,
    batch: u32,
    lease: Millis,
    now: Millis,
) -> AppResult<Vec<Queued>> {
    let txn = db::begin(db).await?;
    let rows: Vec<Queued> = db::fetch_all(
        &txn,
        Sql::new("UPDATE media_deletions SET next_attempt_at = ")
            .bind(now + lease)
            .push(
                " WHERE storage_key IN (SELECT storage_key FROM media_deletions \
                 WHERE next_attempt_at <= ",
            )
            .bind(now)
            .push(" ORDER BY next_attempt_at LIMIT ")
            .bind(i64::from(batch))
            .push(Dialect::of(&txn).skip_locked())
            .push(") RETURNING storage_key, attempts"),
    )
    .await?;
    txn.commit().await?;
    Ok(rows)
}

/// The wait before attempt `attempts + 1`: the base doubled per failure, capped.
pub fn backoff(base: Millis, max: Millis, attempts: i32) -> Millis {
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(40);
    base.saturating_mul(1i64 << doublings).min(max)
}

async fn record_failure(
    db: &DatabaseConnection,
    media: &Media,
    now: Millis,
    queued: &Queued,
    error: &str,
) -> AppResult<()> {
    let attempts = queued.attempts.saturating_add(1);
    let wait = backoff(
        duration_millis(media.config.retry_base),
        duration_millis(media.config.retry_max),
        attempts,
    );
    let log = if attempts >= 10 {
        tracing::Level::ERROR
    } else {
        tracing::Level::WARN
    };
    if log == tracing::Level::ERROR {
        tracing::error!(key = %queued.storage_key, attempts, error, "media blob still not deleted; will retry");
    } else {
        tracing::warn!(key = %queued.storage_key, attempts, error, "media blob deletion failed; will retry");
    }
    let error: String = error.chars().take(1000).collect();
    db::execute(
        db,
        Sql::new("UPDATE media_deletions SET attempts = ")
            .bind(attempts)
            .push(", next_attempt_at = ")
            .bind(now + wait)
            .push(", last_error = ")
            .bind(error)
            .push(" WHERE storage_key = ")
            .bind(queued.storage_key.clone()),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1000, 60_000, 1), 1000);
        assert_eq!(backoff(1000, 60_000, 2), 2000);
        assert_eq!(backoff(1000, 60_000, 4), 8000);
        assert_eq!(backoff(1000, 60_000, 10), 60_000);
        assert_eq!(backoff(1000, 60_000, i32::MAX), 60_000);
    }
}
