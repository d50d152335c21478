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
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult, Value};

use super::image::{self, ACCEPTED_TYPES, Judged};
use crate::app::AppState;
use crate::clock::{Millis, duration_millis};
use crate::db::{self, placeholders, skip_locked};
use crate::entity::media;
use crate::error::{AppError, AppResult};
use crate::storage::{self, UploadTarget};

/// Counters of the media paths, for `/metrics`.
#[derive(Debug, Default)]
pub struct MediaStats {
    uploads: AtomicU64,
    deleted: AtomicU64,
    failed: AtomicU64,
    waiting: AtomicU64,
}

impl MediaStats {
    /// Media stored (uploads and checked direct uploads).
    pub fn uploads(&self) -> u64 {
        self.uploads.load(Ordering::Relaxed)
    }

    /// Blobs deleted by the media job.
    pub fn deleted(&self) -> u64 {
        self.deleted.load(Ordering::Relaxed)
    }

    /// Blob deletions that failed (each is retried).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Blobs queued for deletion after the media job's last run.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// Waits for one of the `EPHEMERA_MAX_CONCURRENT_UPLOADS` slots that bound
/// the memory uploads take while they are read and judged.
pub async fn upload_slot(app: &AppState) -> AppResult<tokio::sync::OwnedSemaphorePermit> {
    app.media_work
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
        &format!(
            "SELECT * FROM media WHERE id IN ({})",
            placeholders(1, ids.len())
        ),
        ids.iter().map(|&i| i.into()).collect(),
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
/// the account's quotas: bytes uploaded or ticketed in the last 24 hours
/// (`EPHEMERA_UPLOAD_BYTES_PER_DAY`), and, for a new ticket, unused
/// tickets held (`EPHEMERA_UPLOAD_PENDING_MAX`). Media deleted since no
/// longer count. Concurrent uploads of one account may each pass the check
/// (at most `EPHEMERA_MAX_CONCURRENT_UPLOADS` of them).
async fn check_quota(app: &AppState, owner: i64, bytes: i64, ticket: bool) -> AppResult<()> {
    #[derive(FromQueryResult)]
    struct Used {
        bytes: Option<i64>,
        pending: Option<i64>,
    }
    let now = app.clock.now();
    let used: Option<Used> = db::fetch_one(
        &app.db,
        "SELECT CAST(SUM(byte_size) AS BIGINT) AS bytes, \
           CAST(SUM(CASE WHEN ready_at IS NULL AND upload_expires_at > $3 THEN 1 ELSE 0 END) \
             AS BIGINT) AS pending \
         FROM media WHERE owner_id = $1 AND created_at > $2",
        vec![owner.into(), (now - QUOTA_WINDOW_MS).into(), now.into()],
    )
    .await?;
    let (used_bytes, pending) =
        used.map_or((0, 0), |u| (u.bytes.unwrap_or(0), u.pending.unwrap_or(0)));
    let config = &app.config;
    if ticket && pending >= config.upload_pending_max {
        return Err(AppError::rate_limited(
            format!(
                "at most {} unused upload tickets at once; use or let one expire",
                config.upload_pending_max
            ),
            config.upload_ticket_ttl,
        ));
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

/// Stores an uploaded file for `owner`: judged by its bytes, metadata
/// removed, the row first and then the blob.
pub async fn upload(app: &AppState, owner: i64, bytes: Bytes) -> AppResult<media::Model> {
    let max = app.config.max_upload_bytes;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    check_quota(app, owner, bytes.len() as i64, false).await?;
    let judged = judge(bytes, app.config.max_image_pixels).await?;
    let now = app.clock.now();
    let row = media::Model {
        id: app.ids.next_id(),
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
    };
    insert(&app.db, &row).await?;
    if let Err(failure) = app
        .media
        .put(&row.storage_key, judged.bytes, judged.content_type)
        .await
    {
        // The put may have left part of a blob: queue it with the row.
        discard(app, row.id).await?;
        return Err(failure.into());
    }
    app.media_stats.uploads.fetch_add(1, Ordering::Relaxed);
    Ok(row)
}

/// Judges on the blocking pool (stripping copies up to the size limit).
async fn judge(bytes: Bytes, max_pixels: u64) -> AppResult<Judged> {
    tokio::task::spawn_blocking(move || image::judge(bytes, max_pixels))
        .await
        .map_err(|e| AppError::internal("judging an image", e))?
}

async fn insert(db: &DatabaseConnection, row: &media::Model) -> AppResult<()> {
    db::execute(
        db,
        "INSERT INTO media (id, owner_id, storage_key, content_type, byte_size, width, height, \
         created_at, ready_at, attached_at, upload_expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        vec![
            row.id.into(),
            row.owner_id.into(),
            row.storage_key.clone().into(),
            row.content_type.clone().into(),
            row.byte_size.into(),
            row.width.into(),
            row.height.into(),
            row.created_at.into(),
            row.ready_at.into(),
            row.attached_at.into(),
            row.upload_expires_at.into(),
        ],
    )
    .await?;
    Ok(())
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
    app: &AppState,
    owner: i64,
    content_type: &str,
    byte_size: i64,
) -> AppResult<Ticket> {
    let content_type = content_type.trim().to_ascii_lowercase();
    if !ACCEPTED_TYPES.contains(&content_type.as_str()) {
        return Err(AppError::unsupported_media_type(format!(
            "contentType must be one of {}",
            ACCEPTED_TYPES.join(", ")
        )));
    }
    let max = app.config.max_upload_bytes;
    if byte_size < 1 {
        return Err(AppError::bad_input("byteSize must be at least 1"));
    }
    let len = byte_size as u64;
    if len > max {
        return Err(too_large(max));
    }
    check_quota(app, owner, byte_size, true).await?;
    let now = app.clock.now();
    let key = storage::new_key();
    let target = app
        .media
        .upload_target(&key, &content_type, len, now, app.config.upload_ticket_ttl)
        .await?;
    let row = media::Model {
        id: app.ids.next_id(),
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
    };
    insert(&app.db, &row).await?;
    Ok(Ticket {
        media_id: row.id,
        target,
    })
}

/// Whether a local direct upload may write `key`: a pending row names it.
pub async fn is_pending(db: &DatabaseConnection, key: &str) -> AppResult<bool> {
    #[derive(FromQueryResult)]
    struct Row {
        #[allow(dead_code)]
        id: i64,
    }
    let row: Option<Row> = db::fetch_one(
        db,
        "SELECT id FROM media WHERE storage_key = $1 AND ready_at IS NULL",
        vec![key.into()],
    )
    .await?;
    Ok(row.is_some())
}

/// Checks, before a transaction attaches it, that `owner` may attach media
/// `id`; a direct upload is judged here the first time (and rejected, with
/// its blob queued for deletion, if its bytes fail).
pub async fn prepare(app: &AppState, owner: i64, id: i64) -> AppResult<()> {
    let media = find(&app.db, id)
        .await?
        .ok_or_else(|| AppError::not_found("media not found"))?;
    check_attachable(&media, owner)?;
    if media.ready_at.is_none() {
        let _slot = upload_slot(app).await?;
        verify_upload(app, &media).await?;
        app.media_stats.uploads.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

fn check_attachable(media: &media::Model, owner: i64) -> AppResult<()> {
    if media.owner_id != owner {
        return Err(AppError::forbidden("this media belongs to someone else"));
    }
    if media.attached_at.is_some() {
        return Err(AppError::bad_input("this media is already attached"));
    }
    Ok(())
}

/// Judges a direct upload's bytes: size, type, metadata. On success the row
/// becomes ready with the measured type and size.
async fn verify_upload(app: &AppState, media: &media::Model) -> AppResult<()> {
    let not_arrived =
        || AppError::bad_input("the upload has not arrived: PUT the bytes to the uploadUrl first");
    let key = &media.storage_key;
    let max = app.config.max_upload_bytes;
    let size = app.media.size(key).await?.ok_or_else(not_arrived)?;
    if size > max {
        return reject(app, media.id, too_large(max)).await;
    }
    if size != media.byte_size as u64 {
        return reject(
            app,
            media.id,
            AppError::bad_input(format!(
                "the upload has {size} bytes; the ticket was for {}",
                media.byte_size
            )),
        )
        .await;
    }
    let bytes = app.media.get(key).await?.ok_or_else(not_arrived)?;
    let judged = match judge(bytes.clone(), app.config.max_image_pixels).await {
        Ok(j) => j,
        Err(e) => return reject(app, media.id, e).await,
    };
    // The bytes move to a key no ticket can write, so a second PUT with the
    // same ticket cannot replace what was checked. A reservation in the
    // outbox deletes the new blob if we stop before the row points at it.
    let final_key = storage::new_key();
    let now = app.clock.now();
    db::execute(
        &app.db,
        "INSERT INTO media_deletions (storage_key, enqueued_at, attempts, next_attempt_at) \
         VALUES ($1, $2, 0, $3)",
        vec![
            final_key.clone().into(),
            now.into(),
            (now + RESERVATION_MS).into(),
        ],
    )
    .await?;
    let size = judged.bytes.len() as i64;
    app.media
        .put(&final_key, judged.bytes, judged.content_type)
        .await?;
    let txn = db::begin(&app.db).await?;
    let moved = db::execute(
        &txn,
        "UPDATE media SET storage_key = $1, upload_expires_at = NULL, ready_at = $2, \
         content_type = $3, byte_size = $4, width = $5, height = $6 \
         WHERE id = $7 AND ready_at IS NULL",
        vec![
            final_key.clone().into(),
            now.into(),
            judged.content_type.into(),
            size.into(),
            judged.width.into(),
            judged.height.into(),
            media.id.into(),
        ],
    )
    .await?;
    if moved == 1 {
        // The upload key goes once its ticket can no longer write it.
        db::execute(
            &txn,
            "UPDATE media_deletions SET storage_key = $1, next_attempt_at = $2 WHERE storage_key = $3",
            vec![
                key.clone().into(),
                hold_until(media.upload_expires_at, now).into(),
                final_key.into(),
            ],
        )
        .await?;
    } else {
        // Checked at the same time by another request, which won: ours goes now.
        db::execute(
            &txn,
            "UPDATE media_deletions SET next_attempt_at = $1 WHERE storage_key = $2",
            vec![now.into(), final_key.into()],
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
fn hold_sql(now_param: usize) -> String {
    format!(
        "CASE WHEN upload_expires_at IS NOT NULL AND upload_expires_at + {TICKET_HOLD_MS} > ${now_param} \
         THEN upload_expires_at + {TICKET_HOLD_MS} ELSE ${now_param} END"
    )
}

/// Deletes a pending media whose bytes failed, queueing its blob; returns `err`.
async fn reject(app: &AppState, id: i64, err: AppError) -> AppResult<()> {
    let txn = db::begin(&app.db).await?;
    delete_rows(
        &txn,
        "id = $1 AND ready_at IS NULL",
        vec![id.into()],
        app.clock.now(),
    )
    .await?;
    txn.commit().await?;
    Err(err)
}

/// Deletes an unattached media row after a failed put, queueing its blob.
async fn discard(app: &AppState, id: i64) -> AppResult<()> {
    let txn = db::begin(&app.db).await?;
    delete_rows(
        &txn,
        "id = $1 AND attached_at IS NULL",
        vec![id.into()],
        app.clock.now(),
    )
    .await?;
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
        "UPDATE media SET attached_at = $1 \
         WHERE id = $2 AND owner_id = $3 AND attached_at IS NULL AND ready_at IS NOT NULL",
        vec![now.into(), id.into(), owner.into()],
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

/// Runs `sql`, the insert of a status or moment that takes a media (in the
/// transaction that [`attach`]ed it). The unique key on `media_id` catches an
/// attach elsewhere since the check: `BAD_USER_INPUT`.
pub async fn insert_holder<C: ConnectionTrait>(
    txn: &C,
    sql: &str,
    values: Vec<Value>,
) -> AppResult<()> {
    let inserted = txn
        .execute_raw(db::stmt(txn.get_database_backend(), sql, values))
        .await;
    match inserted {
        Err(e) if db::is_unique_violation(&e) => {
            Err(AppError::bad_input("this media is already attached"))
        }
        Err(e) => Err(e.into()),
        Ok(_) => Ok(()),
    }
}

/// Queues the blobs of the media rows matching `filter` and deletes the rows,
/// in the caller's transaction. `filter` is SQL over `media` with
/// placeholders `$1..` for `values`. Returns the rows deleted.
pub async fn delete_rows<C: ConnectionTrait>(
    txn: &C,
    filter: &str,
    values: Vec<Value>,
    now: Millis,
) -> AppResult<u64> {
    let now_param = values.len() + 1;
    let mut with_now = values.clone();
    with_now.push(now.into());
    db::execute(
        txn,
        &format!(
            "INSERT INTO media_deletions (storage_key, enqueued_at, attempts, next_attempt_at) \
             SELECT storage_key, ${now_param}, 0, {} FROM media WHERE {filter} \
             ON CONFLICT (storage_key) DO NOTHING",
            hold_sql(now_param)
        ),
        with_now,
    )
    .await?;
    db::execute(txn, &format!("DELETE FROM media WHERE {filter}"), values).await
}

/// PostgreSQL only: the `WITH` clauses (named `queued` and `media_gone`)
/// that do what [`delete_rows`] does for the media rows whose ids the SQL
/// `ids_sql` selects, so a purge can delete a whole batch in one statement.
pub fn delete_rows_ctes(ids_sql: &str, now_param: usize) -> String {
    format!(
        "queued AS (INSERT INTO media_deletions (storage_key, enqueued_at, attempts, next_attempt_at) \
           SELECT storage_key, ${now_param}, 0, {} FROM media WHERE id IN ({ids_sql}) \
           ON CONFLICT (storage_key) DO NOTHING), \
         media_gone AS (DELETE FROM media WHERE id IN ({ids_sql}))",
        hold_sql(now_param)
    )
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
    delete_rows(
        txn,
        &format!("id IN ({})", placeholders(1, ids.len())),
        ids.iter().map(|&i| i.into()).collect(),
        now,
    )
    .await
}

/// Queues every blob `owner` uploaded, before their account is deleted (the
/// rows then go by cascade in the same transaction).
pub async fn queue_owner_blobs<C: ConnectionTrait>(
    txn: &C,
    owner: i64,
    now: Millis,
) -> AppResult<()> {
    db::execute(
        txn,
        &format!(
            "INSERT INTO media_deletions (storage_key, enqueued_at, attempts, next_attempt_at) \
             SELECT storage_key, $1, 0, {} FROM media WHERE owner_id = $2 \
             ON CONFLICT (storage_key) DO NOTHING",
            hold_sql(1)
        ),
        vec![now.into(), owner.into()],
    )
    .await?;
    Ok(())
}

/// Deletes uploads never attached within `EPHEMERA_MEDIA_UNATTACHED_TTL`,
/// queueing their blobs; batches until none is left. Returns the count.
pub async fn sweep_unattached(app: &AppState, now: Millis) -> AppResult<u64> {
    let cutoff = now - duration_millis(app.config.media_unattached_ttl);
    let batch = i64::from(app.config.media_gc_batch);
    let mut total = 0;
    loop {
        let txn = db::begin(&app.db).await?;
        #[derive(FromQueryResult)]
        struct Row {
            id: i64,
        }
        let rows: Vec<Row> = db::fetch_all(
            &txn,
            &db::claim_batch_sql(
                txn.get_database_backend(),
                "media",
                "p.attached_at IS NULL AND p.created_at <= $1",
                "created_at",
                2,
            ),
            vec![cutoff.into(), batch.into()],
        )
        .await?;
        if rows.is_empty() {
            return Ok(total);
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let mut values: Vec<Value> = ids.iter().map(|&i| i.into()).collect();
        values.push(cutoff.into());
        total += delete_rows(
            &txn,
            &format!(
                "id IN ({}) AND attached_at IS NULL AND created_at <= ${}",
                placeholders(1, ids.len()),
                ids.len() + 1
            ),
            values,
            now,
        )
        .await?;
        txn.commit().await?;
    }
}

/// What one drain of the outbox did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    pub deleted: u64,
    pub failed: u64,
}

/// How long a claimed outbox row is left to the instance that claimed it
/// before another may try (if the first died mid-round).
const CLAIM_LEASE_MS: Millis = 10 * 60 * 1000;
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
pub async fn drain_deletions(app: &AppState, now: Millis) -> AppResult<Drained> {
    use futures_util::StreamExt;
    let mut drained = Drained::default();
    loop {
        let claimed = claim_deletions(app, now).await?;
        if claimed.is_empty() {
            record_waiting(app).await?;
            return Ok(drained);
        }
        let results: Vec<(Queued, Result<(), storage::StoreFailure>)> =
            futures_util::stream::iter(claimed)
                .map(|q| async move {
                    let r = app.media.delete(&q.storage_key).await;
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
                    app.media_stats.failed.fetch_add(1, Ordering::Relaxed);
                    record_failure(app, now, &queued, &failure.0).await?;
                }
            }
        }
        if !done.is_empty() {
            let n = done.len() as u64;
            app.media_stats.deleted.fetch_add(n, Ordering::Relaxed);
            drained.deleted += db::execute(
                &app.db,
                &format!(
                    "DELETE FROM media_deletions WHERE storage_key IN ({})",
                    placeholders(1, done.len())
                ),
                done.into_iter().map(Into::into).collect(),
            )
            .await?;
        }
    }
}

async fn record_waiting(app: &AppState) -> AppResult<()> {
    #[derive(FromQueryResult)]
    struct Count {
        n: i64,
    }
    let count: Option<Count> =
        db::fetch_one(&app.db, "SELECT COUNT(*) AS n FROM media_deletions", vec![]).await?;
    let n = count.map_or(0, |c| u64::try_from(c.n).unwrap_or(0));
    app.media_stats.waiting.store(n, Ordering::Relaxed);
    Ok(())
}

async fn claim_deletions(app: &AppState, now: Millis) -> AppResult<Vec<Queued>> {
    let txn = db::begin(&app.db).await?;
    let rows: Vec<Queued> = db::fetch_all(
        &txn,
        &format!(
            "UPDATE media_deletions SET next_attempt_at = $1 WHERE storage_key IN ( \
               SELECT storage_key FROM media_deletions WHERE next_attempt_at <= $2 \
               ORDER BY next_attempt_at LIMIT $3{} \
             ) RETURNING storage_key, attempts",
            skip_locked(txn.get_database_backend())
        ),
        vec![
            (now + CLAIM_LEASE_MS).into(),
            now.into(),
            i64::from(app.config.media_gc_batch).into(),
        ],
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
    app: &AppState,
    now: Millis,
    queued: &Queued,
    error: &str,
) -> AppResult<()> {
    let attempts = queued.attempts.saturating_add(1);
    let wait = backoff(
        duration_millis(app.config.media_retry_base),
        duration_millis(app.config.media_retry_max),
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
        &app.db,
        "UPDATE media_deletions SET attempts = $1, next_attempt_at = $2, last_error = $3 \
         WHERE storage_key = $4",
        vec![
            attempts.into(),
            (now + wait).into(),
            error.into(),
            queued.storage_key.clone().into(),
        ],
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
