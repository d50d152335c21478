//! Locations: persisted places that moments attach to.
//!
//! A `placeName` resolves to the nearest location with the same name (case
//! and whitespace runs ignored) within [`SAME_PLACE_M`] of the coordinates, or
//! to a new one. Resolution happens in the transaction that inserts the
//! moment, after writing the name's row in `place_names`: that write is a row
//! lock on PostgreSQL and the write lock on SQLite, so two creates of the same
//! new place queue and the second finds what the first made.
//!
//! A location is private to those who may see a live moment there: it is
//! shown (by `location`, `node`, `nodes`, the map) only to them
//! ([`find_visible_by_ids`]), a `placeName` resolves only among the
//! locations its author may see, a `locationId` must name one, and a new
//! location's id is random, not the snowflake next to its moment's. When an
//! account is deleted, the locations its moments leave without any moment
//! are deleted with it ([`forget_author`]).

use std::collections::{BTreeMap, HashMap};

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::expiry::live_moment;
use super::geo::{distance_m, latitude_span, map_cell, validate_point};
use super::visibility::{Content, Reach, Who, friend_ids, not_excluded};
use crate::clock::Millis;
use crate::db::{self, Dialect, Sql, insert};
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
    super::check_stored_text(&name, "placeName", false)?;
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
    author: i64,
) -> AppResult<i64> {
    validate_point(latitude, longitude)?;
    let (name, key) = normalize_name(name)?;
    db::execute(
        txn,
        Sql::new("INSERT INTO place_names (name_key) VALUES (")
            .bind(key.clone())
            .push(") ON CONFLICT (name_key) DO UPDATE SET name_key = excluded.name_key"),
    )
    .await?;
    let band = latitude_span(SAME_PLACE_M) * 1.01;
    let candidates: Vec<Candidate> = db::fetch_all(
        txn,
        Sql::new("SELECT l.id, l.latitude, l.longitude FROM locations l WHERE l.name_key = ")
            .bind(key.clone())
            .push(" AND l.latitude BETWEEN ")
            .bind(latitude - band)
            .push(" AND ")
            .bind(latitude + band)
            .push(" AND ")
            .append(seen_by("l", now, author)),
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
    let new_id = crate::ids::random_id();
    let place = location::Model {
        id: new_id,
        name,
        name_key: key,
        latitude,
        longitude,
        map_cell: map_cell(latitude, longitude),
        created_at: now,
        public_moments: 0,
    };
    insert::row(txn, place).await?;
    Ok(new_id)
}

/// SQL that keeps the locations of alias `l` where `viewer` may see a live
/// moment at `now`: the rule that makes a location visible at all.
fn seen_by(l: &str, now: Millis, viewer: i64) -> Sql {
    Sql::new(&format!(
        "EXISTS (SELECT 1 FROM moments v WHERE v.location_id = {l}.id AND "
    ))
    .append(super::moment::readable("v", now, viewer, Reach::Direct))
    .push(")")
}

/// Locations by id that `viewer` may see (see [`seen_by`]).
pub async fn find_visible_by_ids<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    ids: &[i64],
    now: Millis,
) -> AppResult<HashMap<i64, location::Model>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<location::Model> = db::fetch_all(
        db,
        Sql::new("SELECT l.* FROM locations l WHERE l.id IN (")
            .list(ids.iter().copied())
            .push(") AND ")
            .append(seen_by("l", now, viewer.unwrap_or(0))),
    )
    .await?;
    Ok(rows.into_iter().map(|l| (l.id, l)).collect())
}

/// A location by id, if `viewer` may see it.
pub async fn find_visible<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    id: i64,
    now: Millis,
) -> AppResult<Option<location::Model>> {
    Ok(find_visible_by_ids(db, viewer, &[id], now)
        .await?
        .remove(&id))
}

/// Locations by id, whoever may see them (for the location of a moment the
/// viewer may read, which makes its location visible).
pub async fn find_by_ids<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
) -> AppResult<HashMap<i64, location::Model>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<location::Model> = db::fetch_all(
        db,
        Sql::new("SELECT * FROM locations WHERE id IN (")
            .list(ids.iter().copied())
            .push(")"),
    )
    .await?;
    Ok(rows.into_iter().map(|l| (l.id, l)).collect())
}

/// For each of `ids`, how many live moments `viewer` may see there (0 for
/// none).
pub async fn moment_counts<C: ConnectionTrait>(
    db: &C,
    viewer: Option<i64>,
    ids: &[i64],
    now: Millis,
) -> AppResult<HashMap<i64, i64>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let filter = || {
        (
            Sql::new("locations l"),
            Sql::new("l.id IN (").list(ids.iter().copied()).push(")"),
        )
    };
    let mut out: HashMap<i64, i64> = ids.iter().map(|&i| (i, 0)).collect();
    for c in visible_counts(db, viewer, now, filter).await? {
        out.insert(c.location.id, c.count);
    }
    Ok(out)
}

/// A location with what one viewer may see there.
#[derive(Clone, Debug)]
pub struct Counted {
    pub location: location::Model,
    /// Live moments the viewer may see there.
    pub count: i64,
    /// When the newest of them was posted (`None` when there are none).
    pub latest: Option<Millis>,
}

#[derive(Debug, FromQueryResult)]
struct PublicRow {
    id: i64,
    name: String,
    name_key: String,
    latitude: f64,
    longitude: f64,
    map_cell: i64,
    created_at: i64,
    public_moments: i64,
    n: i64,
    latest: Option<i64>,
}

#[derive(Debug, FromQueryResult)]
struct FriendRow {
    location_id: i64,
    n: i64,
    latest: Option<i64>,
}

/// Counts, for the locations `filter` picks, the live moments `viewer` may
/// see, in two statements whose cost follows the locations picked and the
/// viewer's friends' moments, never the moments stored at those places:
/// - PUBLIC ones from the `public_moments` counter (not-deleted PUBLIC
///   moments, kept by every write in the same transaction) less those that
///   have expired but that the expiry job has not soft-deleted yet (a walk of
///   the expiry index over at most a few minutes of expiries) and less those
///   of authors the viewer may not see (`visibility::excluded`: walked from
///   those few authors' moments);
/// - FRIENDS_ONLY ones of the viewer and their friends, walked from those
///   authors' moments.
///
/// `filter` gives the `FROM` source (alias `l`) and the condition on the
/// locations.
pub async fn visible_counts<C, F>(
    db: &C,
    viewer: Option<i64>,
    now: Millis,
    filter: F,
) -> AppResult<Vec<Counted>>
where
    C: ConnectionTrait,
    F: Fn() -> (Sql, Sql),
{
    let dialect = Dialect::of(db);
    let (from, cond) = filter();
    let who = Who::User(viewer.unwrap_or(0));
    let shown = |col: &str| not_excluded(col, who, Content::Moment, Reach::List);
    let public: Vec<PublicRow> = db::fetch_all(
        db,
        Sql::new(
            "SELECT l.id, l.name, l.name_key, l.latitude, l.longitude, l.map_cell, l.created_at, \
               l.public_moments, COALESCE(e.n, 0) + COALESCE(h.n, 0) AS n, \
               (SELECT y.created_at FROM moments y WHERE y.location_id = l.id \
                  AND y.visibility = 'PUBLIC' AND ",
        )
        .append(live_moment("y", now))
        .push(" AND ")
        .append(shown("y.author_id"))
        .push(" ORDER BY y.created_at DESC LIMIT 1) AS latest FROM ")
        .append(from)
        // Without range statistics SQLite cannot tell that few moments have
        // expired unnoticed, and walked every located moment instead.
        .push(&format!(
            " LEFT JOIN (SELECT x.location_id, COUNT(*) AS n FROM moments x{} \
             WHERE x.deleted_at IS NULL AND x.expires_at IS NOT NULL AND x.expires_at <= ",
            dialect.index_hint("moments_expiry")
        ))
        .bind(now)
        .push(" AND x.location_id IS NOT NULL AND x.visibility = 'PUBLIC' AND ")
        .append(shown("x.author_id"))
        // The counted moments of authors the viewer may not see, read from
        // those authors' moments (suspended accounts, blocks, mutes).
        .push(" GROUP BY x.location_id) e ON e.location_id = l.id LEFT JOIN (SELECT z.location_id, COUNT(*) AS n FROM moments z WHERE z.author_id IN (")
        .append(super::visibility::excluded(who, Content::Moment, Reach::List))
        .push(
            ") AND z.deleted_at IS NULL AND z.location_id IS NOT NULL AND z.visibility = 'PUBLIC' \
             GROUP BY z.location_id) h ON h.location_id = l.id WHERE ",
        )
        .append(cond),
    )
    .await?;
    let mut friends: HashMap<i64, FriendRow> = HashMap::new();
    if let (Some(viewer), false) = (viewer, public.is_empty()) {
        let (_, cond) = filter();
        // Drive from the authors.
        let join = dialect.join_in_written_order();
        let rows: Vec<FriendRow> = db::fetch_all(
            db,
            Sql::new("SELECT m.location_id, COUNT(*) AS n, MAX(m.created_at) AS latest FROM (SELECT ")
                .bind(viewer)
                .push(" AS id UNION ALL ")
                .append(friend_ids(viewer))
                .push(&format!(
                    ") f {join} moments m ON m.author_id = f.id {join} locations l ON l.id = m.location_id \
                     WHERE m.location_id IS NOT NULL AND m.visibility = 'FRIENDS_ONLY' AND "
                ))
                .append(live_moment("m", now))
                .push(" AND ")
                .append(shown("m.author_id"))
                .push(" AND ")
                .append(cond)
                .push(" GROUP BY m.location_id"),
        )
        .await?;
        friends.extend(rows.into_iter().map(|r| (r.location_id, r)));
    }
    Ok(public
        .into_iter()
        .map(|r| {
            let f = friends.get(&r.id);
            let count = r.public_moments - r.n + f.map_or(0, |f| f.n);
            let latest = r.latest.max(f.and_then(|f| f.latest));
            Counted {
                location: location::Model {
                    id: r.id,
                    name: r.name,
                    name_key: r.name_key,
                    latitude: r.latitude,
                    longitude: r.longitude,
                    map_cell: r.map_cell,
                    created_at: r.created_at,
                    public_moments: r.public_moments,
                },
                count,
                latest,
            }
        })
        .collect())
}

/// A moment's place in the PUBLIC counters: its location and visibility.
#[derive(Debug, FromQueryResult)]
pub struct Placed {
    pub location_id: Option<i64>,
    pub visibility: String,
}

/// Adds `sign` (1 or -1) to the `public_moments` counter of the location of
/// each PUBLIC moment in `moments`, locations in ascending id order (so two
/// transactions never take them in opposite orders).
pub async fn count_public<C: ConnectionTrait>(
    db: &C,
    moments: &[Placed],
    sign: i64,
) -> AppResult<()> {
    let mut deltas: BTreeMap<i64, i64> = BTreeMap::new();
    for m in moments {
        if let (Some(l), true) = (m.location_id, m.visibility == "PUBLIC") {
            *deltas.entry(l).or_default() += sign;
        }
    }
    for (id, delta) in deltas {
        db::execute(
            db,
            Sql::new("UPDATE locations SET public_moments = public_moments + ")
                .bind(delta)
                .push(" WHERE id = ")
                .bind(id),
        )
        .await?;
    }
    Ok(())
}

/// Takes an account's not-deleted PUBLIC moments off the counters, before
/// the account's deletion cascades to its moments, and deletes the
/// locations that only its moments (deleted ones included) use.
/// Returns the ids of every location the account's moments use, for
/// [`drop_unused`] once those moments are gone.
pub async fn forget_author<C: ConnectionTrait>(db: &C, author: i64) -> AppResult<Vec<i64>> {
    #[derive(FromQueryResult)]
    struct Used {
        location_id: i64,
    }
    let used: Vec<Used> = db::fetch_all(
        db,
        Sql::new("SELECT DISTINCT location_id FROM moments WHERE author_id = ")
            .bind(author)
            .push(" AND location_id IS NOT NULL"),
    )
    .await?;
    let placed: Vec<Placed> = db::fetch_all(
        db,
        Sql::new("SELECT location_id, visibility FROM moments WHERE author_id = ")
            .bind(author)
            .push(" AND deleted_at IS NULL AND location_id IS NOT NULL")
            .push(Dialect::of(db).for_update()),
    )
    .await?;
    count_public(db, &placed, -1).await?;
    Ok(used.into_iter().map(|u| u.location_id).collect())
}

/// Deletes those of `ids` that no moment uses any more.
pub async fn drop_unused<C: ConnectionTrait>(db: &C, ids: &[i64]) -> AppResult<()> {
    for chunk in ids.chunks(500) {
        db::execute(
            db,
            Sql::new("DELETE FROM locations WHERE id IN (")
                .list(chunk.iter().copied())
                .push(
                    ") AND NOT EXISTS (SELECT 1 FROM moments o WHERE o.location_id = locations.id)",
                ),
        )
        .await?;
    }
    Ok(())
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
