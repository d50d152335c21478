//! The map: what a viewer sees inside a box.
//!
//! Standalone moments (no location) are pins at their own coordinates; each
//! location with at least one live moment the viewer may see is one pin whose
//! badge counts only those moments, so a badge never reveals a moment the
//! viewer may not see. A location-attached moment is never pinned on its own.
//!
//! Both walk the grid cells of the box (`domain::geo`) through an index.
//! Standalone moments of a city-sized box are read cell by cell, newest
//! first, and merged, so what is read follows the markers returned; a larger
//! box reads the moments in it. Location badges come from per-location
//! counters (`domain::location::visible_counts`), so they cost the same
//! whether a place holds ten moments or ten thousand. A box larger than a
//! city reads at most [`MAP_SCAN`] standalone moments (the newest, along
//! an index) and [`MAP_SCAN`] locations, whatever it holds: the answer is
//! then `truncated`.
//! Markers are ordered by their newest moment, newest first; when more than
//! `limit` are in the box the newest `limit` are kept and `truncated` is set.

use sea_orm::ConnectionTrait;

use super::geo::BoundingBox;
use super::location::visible_counts;
use super::moment::readable;
use super::visibility::Reach;
use crate::clock::Millis;
use crate::db::{self, Dialect, Sql};
use crate::entity::{location, moment};
use crate::error::{AppError, AppResult};

/// The most markers one answer holds.
pub const MAX_MARKERS: u32 = 1000;

/// One marker.
#[derive(Clone, Debug)]
pub enum Marker {
    /// A standalone moment.
    Moment(moment::Model),
    /// A location and how many of its live moments the viewer may see (never 0).
    Location(location::Model, i64),
}

/// What the map shows in a box.
#[derive(Clone, Debug, Default)]
pub struct Markers {
    pub markers: Vec<Marker>,
    pub truncated: bool,
}

/// The SQL that puts rows of table `table` (alias `a`) inside `bbox`: the
/// `FROM` source and the `WHERE` condition. The box's cell ranges are walked
/// through the cell index the way each planner walks them best
/// ([`Dialect::cell_ranges`]); the condition then keeps the box's exact
/// edges.
fn in_box(dialect: Dialect, table: &str, a: &str, bbox: &BoundingBox) -> (Sql, Sql) {
    let (from, cells) = dialect.cell_ranges(table, a, &bbox.cell_ranges());
    (from, cells.push(" AND ").append(edges(a, bbox)))
}

/// SQL that keeps the rows of alias `a` inside the box's exact edges.
fn edges(a: &str, bbox: &BoundingBox) -> Sql {
    let lon = if bbox.crosses_antimeridian() {
        Sql::new(&format!("({a}.longitude >= "))
            .bind(bbox.west)
            .push(&format!(" OR {a}.longitude <= "))
            .bind(bbox.east)
            .push(")")
    } else {
        Sql::new(&format!("{a}.longitude BETWEEN "))
            .bind(bbox.west)
            .push(" AND ")
            .bind(bbox.east)
    };
    Sql::new(&format!("{a}.latitude BETWEEN "))
        .bind(bbox.south)
        .push(" AND ")
        .bind(bbox.north)
        .push(" AND ")
        .append(lon)
}

/// Boxes of at most this many cells (a city) read their standalone moments
/// cell by cell, newest first, merged (see [`standalone_by_cell`]).
const MERGE_CELLS: usize = 64;

/// The standalone moments of a box of few cells: one index walk per cell
/// along `moments_map (map_cell, created_at, id)`, newest first, merged by
/// the database so that it stops after `fetch` rows
/// ([`Dialect::merge_newest`]). What it reads follows the markers returned,
/// not how many moments the box holds.
fn standalone_by_cell(
    dialect: Dialect,
    cells: &[i64],
    bbox: &BoundingBox,
    viewer: i64,
    fetch: i64,
    now: Millis,
) -> Sql {
    // Every arm but its cell is the same: built once, copied into each.
    let rest = Sql::new(" AND m.location_id IS NULL AND m.deleted_at IS NULL AND ")
        .append(edges("m", bbox))
        .push(" AND ")
        .append(readable("m", now, viewer, Reach::List));
    let arms = cells
        .iter()
        .map(|&cell| {
            Sql::new("SELECT m.* FROM moments m WHERE m.map_cell = ")
                .bind(cell)
                .append(rest.clone())
        })
        .collect();
    // The viewer's like counts only for the rows the merge keeps (the
    // markers are sorted again after).
    Sql::new("SELECT ")
        .append(super::moment::columns("w", viewer))
        .push(" FROM (")
        .append(dialect.merge_newest(arms, "m", fetch))
        .push(") w")
}

/// Checks a requested marker limit: not negative; above 1,000 is clamped.
pub fn clamp_limit(limit: i32) -> AppResult<u32> {
    let limit =
        u32::try_from(limit).map_err(|_| AppError::bad_input("limit must not be negative"))?;
    Ok(limit.min(MAX_MARKERS))
}

/// The map's standalone-moment query for `dialect`, fetching at most
/// `fetch` rows. (Public so a test can check its plan uses the cell index.)
pub fn standalone_query(
    dialect: Dialect,
    viewer: Option<i64>,
    bbox: &BoundingBox,
    fetch: i64,
    now: Millis,
) -> Sql {
    let viewer = viewer.unwrap_or(0);
    match bbox.cells(MERGE_CELLS) {
        Some(cells) => standalone_by_cell(dialect, &cells, bbox, viewer, fetch, now),
        None => Sql::new("SELECT ")
            .append(super::moment::columns("m", viewer))
            .push(" FROM (")
            .append(newest_standalone(dialect, "m.*"))
            .push(") m WHERE ")
            .append(edges("m", bbox))
            .push(" AND ")
            .append(readable("m", now, viewer, Reach::List))
            .push(" ORDER BY m.created_at DESC, m.id DESC LIMIT ")
            .bind(fetch),
    }
}

/// The most rows a map answer reads of standalone moments, and of
/// locations, in a box of more than [`MERGE_CELLS`] cells: what one
/// request for a country or the world may make the database read, however
/// many moments and places the box holds. Past it the answer is
/// `truncated` (zoom in to see more).
pub const MAP_SCAN: i64 = 5_000;

/// The newest [`MAP_SCAN`] standalone moments not deleted, anywhere: a
/// walk of `moments_standalone` that stops after that many rows.
fn newest_standalone(dialect: Dialect, columns: &str) -> Sql {
    Sql::new(&format!(
        "SELECT {columns} FROM moments m{} WHERE m.location_id IS NULL AND m.deleted_at IS NULL \
         ORDER BY m.created_at DESC, m.id DESC LIMIT ",
        dialect.index_hint("moments_standalone")
    ))
    .bind(MAP_SCAN)
}

/// The locations of a large box, at most [`MAP_SCAN`] of them.
fn capped_locations(dialect: Dialect, bbox: &BoundingBox) -> (Sql, Sql) {
    let (from, cond) = in_box(dialect, "locations", "l", bbox);
    (
        Sql::new("(SELECT l.* FROM ")
            .append(from)
            .push(" WHERE ")
            .append(cond)
            .push(" LIMIT ")
            .bind(MAP_SCAN)
            .push(") l"),
        Sql::new("1 = 1"),
    )
}

/// The ids of the locations in `bbox`, selected the way the badge query
/// selects them. (Public so a test can check its plan uses the cell index.)
pub fn locations_query(dialect: Dialect, bbox: &BoundingBox) -> Sql {
    let (from, in_box) = in_box(dialect, "locations", "l", bbox);
    Sql::new("SELECT l.id FROM ")
        .append(from)
        .push(" WHERE ")
        .append(in_box)
}

/// The markers `viewer` sees inside `bbox`, at most `limit` (see the module doc).
pub async fn markers<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    bbox: &BoundingBox,
    limit: u32,
    now: Millis,
) -> AppResult<Markers> {
    bbox.validate()?;
    let fetch = i64::from(limit) + 1;
    let dialect = Dialect::of(db);
    let standalone = standalone_query(dialect, viewer, bbox, fetch, now);
    let moments: Vec<moment::Model> = db::fetch_all(db, standalone).await?;
    let large = bbox.cells(MERGE_CELLS).is_none();
    let (locations, mut capped) = if large {
        let found = visible_counts(db, viewer, now, || capped_locations(dialect, bbox)).await?;
        let capped = i64::try_from(found.len()).unwrap_or(i64::MAX) >= MAP_SCAN;
        (found, capped)
    } else {
        let found =
            visible_counts(db, viewer, now, || in_box(dialect, "locations", "l", bbox)).await?;
        (found, false)
    };
    if large && i64::try_from(moments.len()).unwrap_or(i64::MAX) < fetch {
        // Fewer than asked: the box may hold more beyond the rows read.
        #[derive(sea_orm::FromQueryResult)]
        struct Scanned {
            n: i64,
        }
        let scanned: Option<Scanned> = db::fetch_one(
            db,
            Sql::new("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM (")
                .append(newest_standalone(dialect, "m.id"))
                .push(") s"),
        )
        .await?;
        capped |= scanned.is_some_and(|s| s.n >= MAP_SCAN);
    }

    // Merge by newest moment; a location pin sorts by its newest moment too.
    let mut all: Vec<((i64, i64), Marker)> = moments
        .into_iter()
        .map(|m| ((m.created_at, m.id), Marker::Moment(m)))
        .chain(locations.into_iter().filter_map(|c| {
            let latest = c.latest.filter(|_| c.count > 0)?;
            Some((
                (latest, c.location.id),
                Marker::Location(c.location, c.count),
            ))
        }))
        .collect();
    all.sort_by_key(|m| std::cmp::Reverse(m.0));
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let truncated = all.len() > limit || capped;
    all.truncate(limit);
    Ok(Markers {
        markers: all.into_iter().map(|(_, m)| m).collect(),
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(clamp_limit(5000).unwrap(), MAX_MARKERS);
        assert_eq!(clamp_limit(0).unwrap(), 0);
        assert!(clamp_limit(-1).is_err());
    }

    #[test]
    fn box_sql_uses_cells_and_edges() {
        let bbox = BoundingBox {
            south: -1.0,
            west: 179.0,
            north: 1.0,
            east: -179.0,
        };
        let (from, edges) = in_box(Dialect::Sqlite, "moments", "m", &bbox);
        let (from, edges) = (
            from.build(Dialect::Sqlite).sql,
            edges.build(Dialect::Sqlite).sql,
        );
        assert!(from.starts_with("(VALUES (?1, ?2)"), "{from}");
        assert!(
            from.ends_with("JOIN moments m ON m.map_cell BETWEEN cells.column1 AND cells.column2")
        );
        assert!(edges.contains("(m.longitude >= ?"), "{edges}");
        let (from, edges) = in_box(Dialect::Postgres, "moments", "m", &bbox);
        assert_eq!(from.build(Dialect::Postgres).sql, "moments m");
        let edges = edges.build(Dialect::Postgres).sql;
        assert!(
            edges.starts_with("(m.map_cell BETWEEN $1 AND $2 OR "),
            "{edges}"
        );
    }
}
