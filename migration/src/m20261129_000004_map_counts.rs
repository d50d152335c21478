//! What keeps the map's cost following the markers it returns:
//! - the standalone-moment index gains the feed order, `(map_cell,
//!   created_at, id)`, so a city-sized box reads each cell newest first and
//!   merges the cells, stopping after the markers it returns;
//! - `locations.public_moments` counts the location's PUBLIC moments that are
//!   not deleted (expired or not), kept by every write of a moment in the same
//!   transaction, so a badge is a counter less the few expiries the expiry job
//!   has not reached yet, plus the viewer's friends' moments, instead of a
//!   count of every moment at the place.

use sea_orm_migration::prelude::*;

sql_migration!("m20261129_000004_map_counts");

const UP: &str = r#"
DROP INDEX moments_map;
CREATE INDEX moments_map ON moments (map_cell, created_at, id) WHERE location_id IS NULL AND deleted_at IS NULL;
ALTER TABLE locations ADD COLUMN public_moments BIGINT NOT NULL DEFAULT 0;
UPDATE locations SET public_moments = (
    SELECT COUNT(*) FROM moments m
    WHERE m.location_id = locations.id AND m.visibility = 'PUBLIC' AND m.deleted_at IS NULL
)
"#;

const DOWN: &str = r#"
ALTER TABLE locations DROP COLUMN public_moments;
DROP INDEX moments_map;
CREATE INDEX moments_map ON moments (map_cell) WHERE location_id IS NULL AND deleted_at IS NULL
"#;
