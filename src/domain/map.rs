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
//! whether a place holds ten moments or ten thousand.
//! Markers are ordered by their newest moment, newest first; when more than
//! `limit` are in the box the newest `limit` are kept and `truncated` is set.

use sea_orm::{ConnectionTrait, DbBackend, Value};

use super::geo::BoundingBox;
use super::location::visible_counts;
use super::moment::readable_sql;
use crate::clock::Millis;
use crate::db;
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

/// The SQL that puts rows of table `table` (alias `a`) inside `bbox`, with
/// parameters appended to `values`: the `FROM` source and the `WHERE`
/// condition. The box's cell ranges are written the way each planner walks
/// the cell index range by range (checked with `EXPLAIN` on both): on
/// PostgreSQL an `OR` of ranges (a `BitmapOr` of index scans); on SQLite a
/// join with a `VALUES` list of ranges (an `OR` there scans the whole index).
/// The condition then keeps the box's exact edges.
fn in_box_sql(
    backend: DbBackend,
    table: &str,
    a: &str,
    bbox: &BoundingBox,
    values: &mut Vec<Value>,
) -> (String, String) {
    let mut ranges = Vec::new();
    for (lo, hi) in bbox.cell_ranges() {
        values.push(lo.into());
        values.push(hi.into());
        ranges.push((values.len() - 1, values.len()));
    }
    let (from, cells) = if backend == DbBackend::Postgres {
        let or: Vec<String> = ranges
            .iter()
            .map(|(lo, hi)| format!("{a}.map_cell BETWEEN ${lo} AND ${hi}"))
            .collect();
        (
            format!("{table} {a}"),
            format!("({}) AND ", or.join(" OR ")),
        )
    } else {
        let list: Vec<String> = ranges
            .iter()
            .map(|(lo, hi)| format!("(${lo}, ${hi})"))
            .collect();
        (
            format!(
                "(VALUES {}) cells CROSS JOIN {table} {a} ON {a}.map_cell BETWEEN cells.column1 AND cells.column2",
                list.join(", ")
            ),
            String::new(),
        )
    };
    let edges = format!("{cells}{}", edges_sql(a, bbox, values));
    (from, edges)
}

/// SQL that keeps the rows of alias `a` inside the box's exact edges.
fn edges_sql(a: &str, bbox: &BoundingBox, values: &mut Vec<Value>) -> String {
    let param = |v: f64, values: &mut Vec<Value>| {
        values.push(v.into());
        format!("${}", values.len())
    };
    let south = param(bbox.south, values);
    let north = param(bbox.north, values);
    let west = param(bbox.west, values);
    let east = param(bbox.east, values);
    let lon = if bbox.crosses_antimeridian() {
        format!("({a}.longitude >= {west} OR {a}.longitude <= {east})")
    } else {
        format!("{a}.longitude BETWEEN {west} AND {east}")
    };
    format!("{a}.latitude BETWEEN {south} AND {north} AND {lon}")
}

/// Boxes of at most this many cells (a city) read their standalone moments
/// cell by cell, newest first, merged (see [`standalone_by_cell`]).
const MERGE_CELLS: usize = 64;

/// The standalone moments of a box of few cells: one index walk per cell
/// along `moments_map (map_cell, created_at, id)`, newest first, merged by
/// the database so that it stops after `fetch` rows. What it reads follows
/// the markers returned, not how many moments the box holds. PostgreSQL
/// merges a `UNION ALL` in a subquery (`Merge Append`); SQLite merges a
/// compound `SELECT`'s arms when the `ORDER BY` is on the compound itself.
fn standalone_by_cell(
    backend: DbBackend,
    cells: &[i64],
    bbox: &BoundingBox,
    mut values: Vec<Value>,
    fetch: i64,
) -> Query {
    let edges = edges_sql("m", bbox, &mut values);
    let readable = readable_sql("m", 1, 2);
    values.push(fetch.into());
    let limit = values.len();
    // PostgreSQL's estimate for one cell's filtered rows is too low for it
    // to choose the merge by itself (on 1M moments it sorted the whole box),
    // so each arm walks its cell in order and stops after `fetch` rows.
    let per_cell = if backend == DbBackend::Postgres {
        format!(" ORDER BY m.created_at DESC, m.id DESC LIMIT ${limit}")
    } else {
        String::new()
    };
    let arms: Vec<String> = cells
        .iter()
        .map(|&cell| {
            values.push(cell.into());
            format!(
                "SELECT m.* FROM moments m WHERE m.map_cell = ${} AND m.location_id IS NULL \
                 AND m.deleted_at IS NULL AND {edges} AND {readable}{per_cell}",
                values.len()
            )
        })
        .collect();
    let sql = if backend == DbBackend::Postgres {
        let arms: Vec<String> = arms.iter().map(|a| format!("({a})")).collect();
        format!(
            "SELECT * FROM ({}) u ORDER BY u.created_at DESC, u.id DESC LIMIT ${limit}",
            arms.join(" UNION ALL ")
        )
    } else {
        format!(
            "{} ORDER BY created_at DESC, id DESC LIMIT ${limit}",
            arms.join(" UNION ALL ")
        )
    };
    (sql, values)
}

/// Checks a requested marker limit: not negative; above 1,000 is clamped.
pub fn clamp_limit(limit: i32) -> AppResult<u32> {
    let limit =
        u32::try_from(limit).map_err(|_| AppError::bad_input("limit must not be negative"))?;
    Ok(limit.min(MAX_MARKERS))
}

/// A query as SQL with `$n` placeholders and its values.
pub type Query = (String, Vec<Value>);

/// The map's standalone-moment query for `backend`, fetching at most
/// `fetch` rows. (Public so a test can check its plan uses the cell index.)
pub fn standalone_query(
    backend: DbBackend,
    viewer: Option<i64>,
    bbox: &BoundingBox,
    fetch: i64,
    now: Millis,
) -> Query {
    let base = || vec![now.into(), viewer.unwrap_or(0).into()];
    match bbox.cells(MERGE_CELLS) {
        Some(cells) => standalone_by_cell(backend, &cells, bbox, base(), fetch),
        None => {
            let mut values = base();
            let (from, edges) = in_box_sql(backend, "moments", "m", bbox, &mut values);
            values.push(fetch.into());
            let sql = format!(
                "SELECT m.* FROM {from} \
                 WHERE m.location_id IS NULL AND m.deleted_at IS NULL AND {edges} AND {} \
                 ORDER BY m.created_at DESC, m.id DESC LIMIT ${}",
                readable_sql("m", 1, 2),
                values.len()
            );
            (sql, values)
        }
    }
}

/// The ids of the locations in `bbox`, selected the way the badge query
/// selects them. (Public so a test can check its plan uses the cell index.)
pub fn locations_query(backend: DbBackend, bbox: &BoundingBox) -> Query {
    let mut values = Vec::new();
    let (from, edges) = in_box_sql(backend, "locations", "l", bbox, &mut values);
    (format!("SELECT l.id FROM {from} WHERE {edges}"), values)
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
    let backend = db.get_database_backend();
    let (standalone, s_values) = standalone_query(backend, viewer, bbox, fetch, now);
    let moments: Vec<moment::Model> = db::fetch_all(db, &standalone, s_values).await?;
    let locations = visible_counts(db, viewer, now, |values| {
        in_box_sql(backend, "locations", "l", bbox, values)
    })
    .await?;

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
    let truncated = all.len() > limit;
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
        let mut values = Vec::new();
        let bbox = BoundingBox {
            south: -1.0,
            west: 179.0,
            north: 1.0,
            east: -179.0,
        };
        let (from, edges) = in_box_sql(DbBackend::Sqlite, "moments", "m", &bbox, &mut values);
        assert!(from.starts_with("(VALUES ($1, $2)"));
        assert!(
            from.ends_with("JOIN moments m ON m.map_cell BETWEEN cells.column1 AND cells.column2")
        );
        assert!(edges.contains("(m.longitude >= $"));
        let mut values = Vec::new();
        let (from, edges) = in_box_sql(DbBackend::Postgres, "moments", "m", &bbox, &mut values);
        assert_eq!(from, "moments m");
        assert!(edges.starts_with("(m.map_cell BETWEEN $1 AND $2 OR "));
        assert_eq!(values.len() % 2, 0);
    }
}
