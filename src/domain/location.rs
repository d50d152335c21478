//! Locations: persisted places that moments attach to.
//!
//! A `placeName` resolves to the nearest location with the same name (case
//! and whitespace runs ignored) within [`SAME_PLACE_M`] of the coordinates, or
//! to a new one. Resolution happens in the transaction that inserts the
//! moment, after writing the name's row in `place_names`: that write is a row
//! lock on PostgreSQL and the write lock on SQLite, so two creates of the same
//! new place queue and the second finds what the first made. Locations are
//! never deleted: a location left with no moment stays.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::geo::{distance_m, latitude_span, map_cell, validate_point};
use super::moment::readable_sql;
use crate::clock::Millis;
use crate::db::{self, placeholders};
use crate::entity::location;
use crate::error::{AppError, AppResult};

/// Two places of the same name closer than this are one location.
pub const SAME_PLACE_M: f64 = 50.0;
const MAX_NAME: usize = 200;

/// A checked place name and its dedupe key: trimmed, whitespace runs made one
/// space; the key is that, lower-cased. 1 to 200 characters.
pub fn normalize_name(name: &str) -> AppResult<(String, String)> {
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    if name.is_empty() {
        return Err(AppError::bad_input("placeName must not be blank"));
    }
    if name.chars().count() > MAX_NAME {
        return Err(AppError::bad_input(
            "placeName must be at most 200 characters",
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(AppError::bad_input(
            "placeName must not contain control characters",
        ));
    }
    let key = name.to_lowercase();
    Ok((name, key))
}

#[derive(Debug, FromQueryResult)]
struct Candidate {
    id: i64,
    latitude: f64,
    longitude: f64,
}

/// The id of the location named `name` at the coordinates: the nearest of
/// that name within 50 m, or a new one (made with `new_id`). Runs in the
/// caller's transaction, whose first write this should be on SQLite.
pub async fn resolve<C: ConnectionTrait>(
    txn: &C,
    name: &str,
    latitude: f64,
    longitude: f64,
    now: Millis,
    new_id: i64,
) -> AppResult<i64> {
    validate_point(latitude, longitude)?;
    let (name, key) = normalize_name(name)?;
    db::execute(
        txn,
        "INSERT INTO place_names (name_key) VALUES ($1) \
         ON CONFLICT (name_key) DO UPDATE SET name_key = excluded.name_key",
        vec![key.clone().into()],
    )
    .await?;
    let band = latitude_span(SAME_PLACE_M) * 1.01;
    let candidates: Vec<Candidate> = db::fetch_all(
        txn,
        "SELECT id, latitude, longitude FROM locations \
         WHERE name_key = $1 AND latitude BETWEEN $2 AND $3",
        vec![
            key.clone().into(),
            (latitude - band).into(),
            (latitude + band).into(),
        ],
    )
    .await?;
    let nearest = candidates
        .iter()
        .map(|c| {
            (
                distance_m(latitude, longitude, c.latitude, c.longitude),
                c.id,
            )
        })
        .filter(|(d, _)| *d <= SAME_PLACE_M)
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if let Some((_, id)) = nearest {
        return Ok(id);
    }
    db::execute(
        txn,
        "INSERT INTO locations (id, name, name_key, latitude, longitude, map_cell, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        vec![
            new_id.into(),
            name.into(),
            key.into(),
            latitude.into(),
            longitude.into(),
            map_cell(latitude, longitude).into(),
            now.into(),
        ],
    )
    .await?;
    Ok(new_id)
}

/// Locations by id.
pub async fn find_by_ids<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
) -> AppResult<HashMap<i64, location::Model>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<location::Model> = db::fetch_all(
        db,
        &format!(
            "SELECT * FROM locations WHERE id IN ({})",
            placeholders(1, ids.len())
        ),
        ids.iter().map(|&i| i.into()).collect(),
    )
    .await?;
    Ok(rows.into_iter().map(|l| (l.id, l)).collect())
}

/// A location by id.
pub async fn find<C: ConnectionTrait>(db: &C, id: i64) -> AppResult<Option<location::Model>> {
    Ok(find_by_ids(db, &[id]).await?.remove(&id))
}

#[derive(Debug, FromQueryResult)]
struct CountRow {
    location_id: i64,
    n: i64,
}

/// For each location, how many live moments attached to it `viewer` may see.
pub async fn moment_counts<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    ids: &[i64],
    now: Millis,
) -> AppResult<HashMap<i64, i64>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let mut values = vec![now.into(), viewer.unwrap_or(0).into()];
    values.extend(ids.iter().map(|&i| i.into()));
    let rows: Vec<CountRow> = db::fetch_all(
        db,
        &format!(
            "SELECT m.location_id, COUNT(*) AS n FROM moments m \
             WHERE m.location_id IN ({}) AND {} GROUP BY m.location_id",
            placeholders(3, ids.len()),
            readable_sql("m", 1, 2)
        ),
        values,
    )
    .await?;
    let mut out: HashMap<i64, i64> = ids.iter().map(|&i| (i, 0)).collect();
    out.extend(rows.into_iter().map(|r| (r.location_id, r.n)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ignore_case_and_whitespace_runs() {
        let (name, key) = normalize_name("  Café   de\tFlore ").unwrap();
        assert_eq!(name, "Café de Flore");
        assert_eq!(key, "café de flore");
        assert_eq!(normalize_name("CAFÉ DE FLORE").unwrap().1, key);
        assert!(normalize_name("   ").is_err());
        assert!(normalize_name(&"x".repeat(201)).is_err());
        assert!(normalize_name(&"x".repeat(200)).is_ok());
    }
}
