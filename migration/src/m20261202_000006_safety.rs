//! Who sees what: status audiences, the relations one user keeps towards
//! another (close friends, hidden from, muted, blocked), reports, moderators,
//! suspensions and the notices that tell an author why their content was
//! taken down.
//!
//! Statuses stored before this migration keep the audience they were posted
//! with, `PUBLIC`. The tray summary gets one row per (author, audience
//! level): the level's row sums up the statuses whose audience ranks at or
//! below it (`PUBLIC` < `FRIENDS` < `CLOSE_FRIENDS`), so a viewer reads the
//! one row of the widest level they are admitted to; it is rebuilt from the
//! statuses.

use sea_orm_migration::prelude::*;

sql_migration!("m20261202_000006_safety");

const UP: &str = r#"
ALTER TABLE statuses ADD COLUMN audience TEXT NOT NULL DEFAULT 'PUBLIC';

DROP INDEX status_tray_order;
DROP TABLE status_tray;
CREATE TABLE status_tray (
    author_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    audience TEXT NOT NULL,
    latest_created_at BIGINT NOT NULL,
    max_expires_at BIGINT NOT NULL,
    PRIMARY KEY (author_id, audience)
);
CREATE INDEX status_tray_order ON status_tray (latest_created_at, author_id);
INSERT INTO status_tray (author_id, audience, latest_created_at, max_expires_at)
    SELECT author_id, 'PUBLIC', MAX(created_at), MAX(expires_at) FROM statuses WHERE audience = 'PUBLIC' GROUP BY author_id;
INSERT INTO status_tray (author_id, audience, latest_created_at, max_expires_at)
    SELECT author_id, 'FRIENDS', MAX(created_at), MAX(expires_at) FROM statuses WHERE audience IN ('PUBLIC', 'FRIENDS') GROUP BY author_id;
INSERT INTO status_tray (author_id, audience, latest_created_at, max_expires_at)
    SELECT author_id, 'CLOSE_FRIENDS', MAX(created_at), MAX(expires_at) FROM statuses WHERE 1 = 1 GROUP BY author_id;

-- What `subject` keeps towards `object`: CLOSE_FRIEND (on the subject's
-- close-friends list), HIDE (never sees the subject's statuses), MUTE (the
-- subject stops seeing the object's content in lists), BLOCK.
CREATE TABLE user_relations (
    subject_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    object_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (subject_id, object_id, kind),
    CHECK (subject_id <> object_id)
);
CREATE INDEX user_relations_object ON user_relations (object_id, kind, subject_id);
CREATE INDEX user_relations_list ON user_relations (subject_id, kind, created_at, object_id);

ALTER TABLE users ADD COLUMN is_moderator BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE users ADD COLUMN suspended_at BIGINT;
ALTER TABLE users ADD COLUMN suspension_reason TEXT;
CREATE INDEX users_suspended ON users (id) WHERE suspended_at IS NOT NULL;

CREATE TABLE reports (
    id BIGINT PRIMARY KEY,
    reporter_id BIGINT REFERENCES users (id) ON DELETE SET NULL,
    subject_kind TEXT NOT NULL,
    subject_id BIGINT NOT NULL,
    subject_author_id BIGINT,
    -- the reported text as the reporter saw it (caption, or display name)
    excerpt TEXT,
    reason TEXT NOT NULL,
    details TEXT,
    created_at BIGINT NOT NULL,
    resolved_at BIGINT,
    resolved_by BIGINT REFERENCES users (id) ON DELETE SET NULL,
    resolution TEXT
);
CREATE INDEX reports_open ON reports (created_at, id) WHERE resolved_at IS NULL;
CREATE INDEX reports_all ON reports (created_at, id);
CREATE INDEX reports_subject ON reports (subject_id);
CREATE INDEX reports_reporter ON reports (reporter_id, subject_id);

CREATE TABLE moderation_notices (
    id BIGINT PRIMARY KEY,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    subject_kind TEXT NOT NULL,
    subject_id BIGINT NOT NULL,
    reason TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX moderation_notices_user ON moderation_notices (user_id, created_at, id)
"#;

const DOWN: &str = r#"
DROP TABLE moderation_notices;
DROP TABLE reports;
DROP INDEX users_suspended;
ALTER TABLE users DROP COLUMN suspension_reason;
ALTER TABLE users DROP COLUMN suspended_at;
ALTER TABLE users DROP COLUMN is_moderator;
DROP TABLE user_relations;
DROP INDEX status_tray_order;
DROP TABLE status_tray;
CREATE TABLE status_tray (
    author_id BIGINT PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    latest_created_at BIGINT NOT NULL,
    max_expires_at BIGINT NOT NULL
);
CREATE INDEX status_tray_order ON status_tray (latest_created_at, author_id);
INSERT INTO status_tray (author_id, latest_created_at, max_expires_at)
    SELECT author_id, MAX(created_at), MAX(expires_at) FROM statuses GROUP BY author_id;
ALTER TABLE statuses DROP COLUMN audience
"#;
