//! The story tray kept live: one author's entry in many viewers' trays,
//! read for many (viewer, author) pairs at once exactly as `storyTray` reads
//! it (`status::tray_page` for the entry, `status::tray_counts` for its
//! counts), and the changes of who may see whom that change entries without
//! a status changing.
//!
//! A change between two people (a friendship accepted or ended, a block, a
//! close friend, a hidden story, a mute) can add or take away statuses one
//! of them sees of the other. [`Watch`] counts, in the change's own
//! transaction, the live statuses each side may see of the other before and
//! after it, and logs a [`Kind::TrayChanged`] event for a side only where
//! the count moved (or where the two became or ceased to be friends, which
//! moves an entry in or out of a `FRIENDS` tray, and both sides are told of
//! anyway): someone blocked, hidden from or taken off a close-friends list
//! hears nothing unless their tray really changed, which a refetch would
//! show them anyway.

use std::collections::{BTreeSet, HashMap};

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::expiry::live_status;
use super::visibility::{self, Reach, Who};
use super::{Scope, status};
use crate::clock::Millis;
use crate::db::{self, Column, Dialect, Sql};
use crate::error::AppResult;
use crate::events::log::{self, Change};
use crate::events::{Kind, TrayEntry};

/// Viewers asked about in one statement at most.
const CHUNK: usize = 1000;

/// A tray entry as one viewer would read it now, and whether its author is
/// the viewer or a friend (what a `FRIENDS` scope keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub entry: TrayEntry,
    pub in_friends: bool,
}

#[derive(Debug, FromQueryResult)]
struct EntryRow {
    viewer: i64,
    author_id: i64,
    latest_created_at: i64,
    in_friends: bool,
}

#[derive(Debug, FromQueryResult)]
struct CountRow {
    viewer: i64,
    author_id: i64,
    live: i64,
    unseen: i64,
}

/// For each (viewer, author) of `pairs` (viewer 0: anonymous) whose tray
/// has an entry of the author at `now`: that entry. A pair missing from the
/// answer has none. Two statements per thousand pairs, whatever their
/// number of authors, each of the same text whatever its number of pairs
/// (bound whole: [`Dialect::bound_rows`]), so that it is planned once.
pub async fn entries<C: ConnectionTrait>(
    db: &C,
    pairs: &[(i64, i64)],
    now: Millis,
) -> AppResult<HashMap<(i64, i64), Seen>> {
    let dialect = Dialect::of(db);
    let mut out = HashMap::new();
    let (anonymous, signed_in) = split(pairs);
    let statements = anonymous
        .chunks(CHUNK)
        .map(|authors| anonymous_entries(dialect, authors, now))
        .chain(
            signed_in
                .chunks(CHUNK)
                .map(|chunk| pair_entries(dialect, chunk, now)),
        );
    for sql in statements {
        let rows: Vec<EntryRow> = db::fetch_all(db, sql).await?;
        for r in rows {
            let entry = TrayEntry {
                author: r.author_id,
                latest_created_at: r.latest_created_at,
                live: 0,
                unseen: 0,
            };
            out.insert(
                (r.viewer, r.author_id),
                Seen {
                    entry,
                    in_friends: r.in_friends,
                },
            );
        }
    }
    let present: Vec<(i64, i64)> = out.keys().copied().collect();
    let (anonymous, signed_in) = split(&present);
    let statements = anonymous
        .chunks(CHUNK)
        .map(|authors| anonymous_counts(dialect, authors, now))
        .chain(
            signed_in
                .chunks(CHUNK)
                .map(|chunk| pair_counts(dialect, chunk, now)),
        );
    for sql in statements {
        let rows: Vec<CountRow> = db::fetch_all(db, sql).await?;
        for r in rows {
            if let Some(seen) = out.get_mut(&(r.viewer, r.author_id)) {
                seen.entry.live = r.live;
                seen.entry.unseen = r.unseen;
            }
        }
    }
    Ok(out)
}

/// `pairs` split into the authors the anonymous viewer asks about and the
/// signed-in (viewer, author) pairs, each once, in order.
fn split(pairs: &[(i64, i64)]) -> (Vec<i64>, Vec<(i64, i64)>) {
    let anonymous: BTreeSet<i64> = pairs
        .iter()
        .filter(|(viewer, _)| *viewer == 0)
        .map(|&(_, author)| author)
        .collect();
    let signed_in: BTreeSet<(i64, i64)> = pairs
        .iter()
        .copied()
        .filter(|(viewer, _)| *viewer != 0)
        .collect();
    (
        anonymous.into_iter().collect(),
        signed_in.into_iter().collect(),
    )
}

/// The pairs as the table `alias(viewer, author)`.
fn pair_table(dialect: Dialect, alias: &str, pairs: &[(i64, i64)]) -> Sql {
    let viewers: Vec<i64> = pairs.iter().map(|p| p.0).collect();
    let authors: Vec<i64> = pairs.iter().map(|p| p.1).collect();
    dialect.bound_rows(
        alias,
        &[
            ("viewer", Column::BigInt(&viewers)),
            ("author", Column::BigInt(&authors)),
        ],
    )
}

/// The anonymous viewer's tray rows of `authors`: `status::tray_page`'s
/// conditions.
fn anonymous_entries(dialect: Dialect, authors: &[i64], now: Millis) -> Sql {
    Sql::new(
        "SELECT CAST(0 AS BIGINT) AS viewer, t.author_id, t.latest_created_at, 1 = 0 AS in_friends \
         FROM status_tray t WHERE t.author_id",
    )
    .append(dialect.in_bound(authors))
    .push(" AND ")
    .append(status::tray_rows(dialect, Who::User(0), now))
}

/// The tray rows of signed-in (viewer, author) pairs: `status::tray_page`'s
/// conditions, with the viewer a column, and the rules that depend on the
/// pair alone asked once per pair. Whether the author is the viewer or a
/// friend (`in_friends`, what a `FRIENDS` scope keeps) and then the widest
/// level the viewer reaches ([`visibility::widest_level_of`]) are columns
/// of a fenced subquery ([`Dialect::fence`]); the author's one summary of
/// that level is looked up by it ([`Dialect::rows_for_each`]: joined as
/// tables, PostgreSQL hashed the whole tray, 250 ms a statement at 140,000
/// tray rows). Asked per summary row instead, the friendship was probed up
/// to three times a pair and each of the author's rows read: 13 against
/// 7.5 ms a thousand pairs on PostgreSQL, measured.
fn pair_entries(dialect: Dialect, pairs: &[(i64, i64)], now: Millis) -> Sql {
    let fence = dialect.fence();
    let pair = Sql::new("SELECT q.viewer, q.author, ")
        .append(visibility::scope(
            Scope::Friends,
            "q.author",
            Who::Column("q.viewer"),
        ))
        .push(" AS in_friends FROM ")
        .append(pair_table(dialect, "q", pairs))
        .push(fence);
    let level = Sql::new("SELECT f.viewer, f.author, f.in_friends, ")
        .append(visibility::widest_level_of(
            "f.author",
            Who::Column("f.viewer"),
            "f.in_friends",
        ))
        .push(" AS level FROM (")
        .append(pair)
        .push(") f")
        .push(fence);
    Sql::new("SELECT p.viewer, t.author_id, t.latest_created_at, p.in_friends FROM (")
        .append(level)
        .push(&format!(
            ") p {} WHERE ",
            dialect.rows_for_each(
                "status_tray",
                "t",
                &[("author_id", "p.author"), ("audience", "p.level")]
            )
        ))
        .append(status::tray_rows_of_level(
            dialect,
            Who::Column("p.viewer"),
            now,
        ))
}

/// The anonymous viewer's counts of `authors`: `status::tray_counts`.
fn anonymous_counts(dialect: Dialect, authors: &[i64], now: Millis) -> Sql {
    Sql::new(
        "SELECT CAST(0 AS BIGINT) AS viewer, s.author_id, CAST(COUNT(*) AS BIGINT) AS live, \
           CAST(COUNT(*) AS BIGINT) AS unseen FROM statuses s WHERE s.author_id",
    )
    .append(dialect.in_bound(authors))
    .push(" AND ")
    .append(live_status("s", now))
    .push(" AND ")
    .append(visibility::status_audience(
        "s.audience",
        "s.author_id",
        Who::User(0),
    ))
    .push(" GROUP BY s.author_id")
}

/// The counts of signed-in (viewer, author) pairs: `status::tray_counts`,
/// with the viewer a column. Each author's live statuses are counted once
/// per audience, and each viewer's seen marks of them per audience; the
/// audience rule is then asked of each (viewer, audience) row instead of
/// each (viewer, status): the cost grows with an author's statuses once,
/// not once per viewer told.
fn pair_counts(dialect: Dialect, pairs: &[(i64, i64)], now: Millis) -> Sql {
    Sql::new("WITH p AS (SELECT q.viewer, q.author FROM ")
        .append(pair_table(dialect, "q", pairs))
        .push(
            ") SELECT p.viewer, a.author_id, CAST(SUM(a.n) AS BIGINT) AS live, \
               CAST(SUM(a.n - COALESCE(v.n, 0)) AS BIGINT) AS unseen \
             FROM p JOIN (SELECT s.author_id, s.audience, COUNT(*) AS n FROM statuses s \
             WHERE s.author_id IN (SELECT author FROM p) AND ",
        )
        .append(live_status("s", now))
        .push(
            " GROUP BY s.author_id, s.audience) a ON a.author_id = p.author \
             LEFT JOIN (SELECT sv.viewer_id, s.author_id, s.audience, COUNT(*) AS n FROM p \
             JOIN status_views sv ON sv.viewer_id = p.viewer \
             JOIN statuses s ON s.id = sv.status_id AND s.author_id = p.author WHERE ",
        )
        .append(live_status("s", now))
        .push(
            " GROUP BY sv.viewer_id, s.author_id, s.audience) v \
             ON v.viewer_id = p.viewer AND v.author_id = a.author_id AND v.audience = a.audience \
             WHERE ",
        )
        .append(visibility::status_audience(
            "a.audience",
            "a.author_id",
            Who::Column("p.viewer"),
        ))
        .push(" GROUP BY p.viewer, a.author_id")
}

/// What each side of a change between two people may see of the other,
/// counted before it (see the module doc).
#[derive(Debug)]
pub struct Watch {
    /// (viewer, author) and how many of the author's live statuses the
    /// viewer may see in lists.
    pairs: Vec<((i64, i64), i64)>,
    /// Whether the two were friends: an author becoming or ceasing to be a
    /// friend enters or leaves the viewer's `FRIENDS` tray with the same
    /// statuses.
    friends: bool,
    now: Millis,
}

impl Watch {
    /// Counts, in `txn` before a change between `a` and `b`, what each may
    /// see of the other. Takes `a`'s account lock first (a write): on
    /// SQLite a transaction that read first could not write later.
    pub async fn before<C: ConnectionTrait>(
        txn: &C,
        a: i64,
        b: i64,
        now: Millis,
    ) -> AppResult<Self> {
        super::user::lock_for_write(txn, a).await?;
        let mut pairs = Vec::with_capacity(2);
        for pair in [(a, b), (b, a)] {
            pairs.push((pair, readable_count(txn, pair, now).await?));
        }
        let friends = are_friends(txn, a, b).await?;
        Ok(Self {
            pairs,
            friends,
            now,
        })
    }

    /// Counts again, in the same transaction after the change, and logs a
    /// tray change for each side whose count moved.
    pub async fn after<C: ConnectionTrait>(self, txn: &C) -> AppResult<()> {
        let mut changes = Vec::new();
        let (a, b) = self.pairs[0].0;
        let befriended = are_friends(txn, a, b).await? != self.friends;
        for (pair, before) in self.pairs {
            let after = readable_count(txn, pair, self.now).await?;
            if after != before || (befriended && after.max(before) > 0) {
                let (viewer, author) = pair;
                changes.push(Change {
                    kind: Kind::TrayChanged,
                    subject: author,
                    author,
                    audience: String::new(),
                    viewer: Some(viewer),
                });
            }
        }
        log::record(txn, &changes, self.now).await
    }
}

#[derive(Debug, FromQueryResult)]
struct Count {
    n: i64,
}

/// Whether `a` and `b` are accepted friends.
async fn are_friends<C: ConnectionTrait>(db: &C, a: i64, b: i64) -> AppResult<bool> {
    Ok(super::friend::state(db, a, b).await? == super::friend::FriendshipState::Friends)
}

/// How many of `author`'s live statuses `viewer` may see in lists.
async fn readable_count<C: ConnectionTrait>(
    db: &C,
    (viewer, author): (i64, i64),
    now: Millis,
) -> AppResult<i64> {
    let row: Option<Count> = db::fetch_one(
        db,
        Sql::new("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM statuses s WHERE s.author_id = ")
            .bind(author)
            .push(" AND ")
            .append(status::readable("s", now, Who::User(viewer), Reach::List)),
    )
    .await?;
    Ok(row.map_or(0, |c| c.n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_split_into_the_anonymous_authors_and_the_signed_in_pairs_each_once() {
        let pairs = [(0, 7), (3, 8), (0, 8), (3, 8), (0, 7), (2, 7)];
        let (anonymous, signed_in) = split(&pairs);
        assert_eq!(anonymous, [7, 8]);
        assert_eq!(signed_in, [(2, 7), (3, 8)]);
    }

    #[test]
    fn on_postgresql_a_statement_has_one_text_whatever_its_number_of_pairs() {
        // (SQLite binds a placeholder per value: see `Dialect::bound_rows`.)
        let dialect = Dialect::Postgres;
        let text = |pairs: &[(i64, i64)]| {
            let authors: Vec<i64> = pairs.iter().map(|p| p.1).collect();
            [
                pair_entries(dialect, pairs, 5).build(dialect).sql,
                pair_counts(dialect, pairs, 5).build(dialect).sql,
                anonymous_entries(dialect, &authors, 5).build(dialect).sql,
                anonymous_counts(dialect, &authors, 5).build(dialect).sql,
            ]
        };
        assert_eq!(text(&[(1, 2)]), text(&[(1, 2), (3, 4), (5, 6)]));
    }
}
