//! The foundation schema: users, the friend graph, media rows, statuses with
//! their per-author tray summary, and seen state.
//!
//! Times are BIGINT milliseconds since the Unix epoch (UTC), compared with a
//! time the server passes in, so SQLite, PostgreSQL and the jobs agree on what
//! is live. Ids are 64-bit snowflakes made by the server.

use sea_orm_migration::prelude::*;

sql_migration!("m20261129_000001_foundation");

const UP: &str = r#"
CREATE TABLE users (
    id BIGINT PRIMARY KEY,
    username TEXT NOT NULL,
    -- lower-cased username: names are unique whatever their case
    username_key TEXT NOT NULL UNIQUE,
    display_name TEXT,
    password_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- One row per pair of users, the smaller id first, so that two people asking
-- each other at the same moment meet on one primary key and become friends.
CREATE TABLE friendships (
    low_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    high_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    requester_id BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    -- NULL while the request waits for an answer
    accepted_at BIGINT,
    PRIMARY KEY (low_id, high_id),
    CHECK (low_id < high_id),
    CHECK (requester_id = low_id OR requester_id = high_id)
);
CREATE INDEX friendships_high ON friendships (high_id, low_id);

CREATE TABLE media (
    id BIGINT PRIMARY KEY,
    owner_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    storage_key TEXT NOT NULL UNIQUE,
    content_type TEXT NOT NULL,
    byte_size BIGINT NOT NULL,
    width INTEGER,
    height INTEGER,
    created_at BIGINT NOT NULL
);
CREATE INDEX media_owner ON media (owner_id);

CREATE TABLE statuses (
    id BIGINT PRIMARY KEY,
    author_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- a media belongs to one status at most
    media_id BIGINT UNIQUE REFERENCES media (id),
    caption TEXT,
    bg_color TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    CHECK (media_id IS NOT NULL OR caption IS NOT NULL),
    CHECK (expires_at > created_at)
);
-- per-author pages, newest first, keyset on (created_at, id)
CREATE INDEX statuses_author_created ON statuses (author_id, created_at, id);
-- live statuses of a set of authors (tray counts, unseen state)
CREATE INDEX statuses_author_expires ON statuses (author_id, expires_at);
-- the purge job's scan
CREATE INDEX statuses_expires ON statuses (expires_at);

-- The story tray summary: one row per author who has statuses, kept current
-- in the same transaction as every insert and delete of a status. A tray page
-- walks the (latest_created_at, author_id) index and stops after the page, so
-- its cost follows the page size, not the number of statuses or authors.
CREATE TABLE status_tray (
    author_id BIGINT PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    latest_created_at BIGINT NOT NULL,
    max_expires_at BIGINT NOT NULL
);
CREATE INDEX status_tray_order ON status_tray (latest_created_at, author_id);

CREATE TABLE status_views (
    status_id BIGINT NOT NULL REFERENCES statuses (id) ON DELETE CASCADE,
    viewer_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    seen_at BIGINT NOT NULL,
    PRIMARY KEY (status_id, viewer_id)
);
CREATE INDEX status_views_viewer ON status_views (viewer_id, status_id);
CREATE INDEX status_views_recent ON status_views (status_id, seen_at, viewer_id)
"#;

const DOWN: &str = r#"
DROP TABLE status_views;
DROP TABLE status_tray;
DROP TABLE statuses;
DROP TABLE media;
DROP TABLE friendships;
DROP TABLE users
"#;
