//! Moments, the locations they attach to, and their likes.
//!
//! A moment is live while `deleted_at` is NULL and it is journaled or its
//! `expires_at` is in the future. The three forms of "journaled" are tied
//! together by a CHECK, so no code path can store one without the others.
//! `map_cell` is a cell of a fixed 0.1-degree grid (row-major), so the map
//! query walks the cells of its box instead of every moment stored.

use sea_orm_migration::prelude::*;

sql_migration!("m20261129_000003_moments");

const UP: &str = r#"
CREATE TABLE locations (
    id BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    -- the name lower-cased with whitespace runs collapsed: the dedupe key
    name_key TEXT NOT NULL,
    latitude DOUBLE PRECISION NOT NULL,
    longitude DOUBLE PRECISION NOT NULL,
    map_cell BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    CHECK (latitude BETWEEN -90 AND 90 AND longitude BETWEEN -180 AND 180)
);
-- finding the same place by name near some coordinates
CREATE INDEX locations_name ON locations (name_key, latitude);
CREATE INDEX locations_map ON locations (map_cell);

-- One row per place name ever resolved. Resolving a name first writes its row
-- (a row lock on PostgreSQL, the write lock on SQLite), so two creates of the
-- same new place queue and the second finds the location the first made.
CREATE TABLE place_names (
    name_key TEXT PRIMARY KEY
);

CREATE TABLE moments (
    id BIGINT PRIMARY KEY,
    author_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- a media belongs to one moment (or status) at most
    media_id BIGINT NOT NULL UNIQUE REFERENCES media (id),
    caption TEXT,
    latitude DOUBLE PRECISION NOT NULL,
    longitude DOUBLE PRECISION NOT NULL,
    map_cell BIGINT NOT NULL,
    location_id BIGINT REFERENCES locations (id),
    visibility TEXT NOT NULL,
    is_journaled BOOLEAN NOT NULL,
    duration_hours INTEGER NOT NULL,
    expires_at BIGINT,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT,
    likes_count INTEGER NOT NULL DEFAULT 0,
    CHECK (visibility IN ('PUBLIC', 'FRIENDS_ONLY')),
    CHECK (
        (duration_hours = 0 AND is_journaled = TRUE AND expires_at IS NULL)
        OR (duration_hours BETWEEN 1 AND 168 AND is_journaled = FALSE
            AND expires_at IS NOT NULL AND expires_at > created_at)
    ),
    CHECK (latitude BETWEEN -90 AND 90 AND longitude BETWEEN -180 AND 180),
    CHECK (likes_count >= 0)
);
-- the feed, newest first
CREATE INDEX moments_feed ON moments (created_at, id) WHERE deleted_at IS NULL;
-- a user's moments and diary
CREATE INDEX moments_author ON moments (author_id, created_at, id);
-- a location's moments and counts
CREATE INDEX moments_location ON moments (location_id, created_at, id) WHERE location_id IS NOT NULL;
-- standalone pins on the map
CREATE INDEX moments_map ON moments (map_cell) WHERE location_id IS NULL AND deleted_at IS NULL;
-- the expiry job
CREATE INDEX moments_expiry ON moments (expires_at) WHERE deleted_at IS NULL AND expires_at IS NOT NULL;
-- the purge job
CREATE INDEX moments_deleted ON moments (deleted_at) WHERE deleted_at IS NOT NULL;

CREATE TABLE moment_likes (
    moment_id BIGINT NOT NULL REFERENCES moments (id) ON DELETE CASCADE,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (moment_id, user_id)
);
-- likers, most recent first
CREATE INDEX moment_likes_recent ON moment_likes (moment_id, created_at, user_id);
-- what a user liked (account deletion corrects the counts)
CREATE INDEX moment_likes_user ON moment_likes (user_id)
"#;

const DOWN: &str = r#"
DROP TABLE moment_likes;
DROP TABLE moments;
DROP TABLE place_names;
DROP TABLE locations
"#;
