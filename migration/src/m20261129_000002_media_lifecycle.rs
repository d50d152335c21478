//! Media lifecycle: when a media row became usable and when it was attached,
//! and the deletion outbox through which every blob is deleted.
//!
//! A media row is the record that its blob may exist. It is deleted only in the
//! same transaction that queues its blob in `media_deletions`, so a blob is
//! never orphaned (the outbox drains until the store confirms) and never
//! deleted while a row still points at it.

use sea_orm_migration::prelude::*;

sql_migration!("m20261129_000002_media_lifecycle");

const UP: &str = r#"
-- NULL while a direct upload waits to be checked (its bytes may not have
-- arrived), set once the bytes were judged and measured.
ALTER TABLE media ADD COLUMN ready_at BIGINT;
-- NULL until a status or moment takes the media (a media is attached once).
ALTER TABLE media ADD COLUMN attached_at BIGINT;
-- Until when a direct-upload ticket lets a client write the row's key. A key
-- queued for deletion is held until then (and a margin), so that a late PUT
-- cannot leave a blob behind after its deletion ran.
ALTER TABLE media ADD COLUMN upload_expires_at BIGINT;
UPDATE media SET ready_at = created_at;
UPDATE media SET attached_at = created_at WHERE id IN (SELECT media_id FROM statuses WHERE media_id IS NOT NULL);
-- the sweep of uploads never attached
CREATE INDEX media_unattached ON media (created_at) WHERE attached_at IS NULL;

-- Blobs to delete from the store, written in the same transaction as the
-- deletion of their media row. Keys are random and never reused.
CREATE TABLE media_deletions (
    storage_key TEXT PRIMARY KEY,
    enqueued_at BIGINT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    -- when the next attempt may run (a claim pushes it forward: a lease)
    next_attempt_at BIGINT NOT NULL,
    last_error TEXT
);
CREATE INDEX media_deletions_due ON media_deletions (next_attempt_at)
"#;

const DOWN: &str = r#"
DROP TABLE media_deletions;
DROP INDEX media_unattached;
ALTER TABLE media DROP COLUMN upload_expires_at;
ALTER TABLE media DROP COLUMN attached_at;
ALTER TABLE media DROP COLUMN ready_at
"#;
