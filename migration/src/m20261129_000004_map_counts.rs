//! What keeps the map's cost following the markers it returns:
//! - the standalone-moment index gains the feed order, `(map_cell,
//!   created_at, id)`, so a city-sized box reads each cell newest first and
//!   merges the cells, stopping after the markers it returns;
//! - `locations.public_moments` counts the location's PUBLIC moments that are
//!   not deleted (expired or not), kept by every write of a moment in the same
//!   transaction, so a badge is a counter less the few expiries the expiry job
//!   has not reached yet, plus the viewer's friends' moments, instead of a
//!   count of every moment at the place;
//! - the viewer's friends' FRIENDS_ONLY located moments, the other part of a
//!   badge, are read from their own small index, without visiting rows.

use sea_orm_migration::prelude::*;

sql_migration!("m20261129_000004_map_counts");

const UP: &str = r#"
DROP INDEX moments_map;
CREATE INDEX moments_map ON moments (map_cell, created_at, id) WHERE location_id IS NULL AND deleted_at IS NULL;
ALTER TABLE locations ADD COLUMN public_moments BIGINT NOT NULL DEFAULT 0;
UPDATE locations SET public_moments = (
    SELECT COUNT(*) FROM moments m
    WHERE m.location_id = locations.id AND m.visibility = 'PUBLIC' AND m.deleted_at IS NULL
);
CREATE INDEX moments_friends_located ON moments (author_id, location_id, expires_at, created_at)
    WHERE location_id IS NOT NULL AND visibility = 'FRIENDS_ONLY' AND deleted_at IS NULL
"#;

const DOWN: &str = r#"
DROP INDEX moments_friends_located;
ALTER TABLE locations DROP COLUMN public_moments;
DROP INDEX moments_map;
CREATE INDEX moments_map ON moments (map_cell) WHERE location_id IS NULL AND deleted_at IS NULL
"#;
