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

use std::collections::{BTreeMap, HashMap};

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::expiry::live_status;
use super::visibility::{self, Reach, Who};
use super::{Scope, status};
use crate::clock::Millis;
use crate::db::{self, Dialect, Sql};
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
/// number of authors.
pub async fn entries<C: ConnectionTrait>(
    db: &C,
    pairs: &[(i64, i64)],
    now: Millis,
) -> AppResult<HashMap<(i64, i64), Seen>> {
    let mut out = HashMap::new();
    for chunk in chunks(pairs) {
        let rows: Vec<EntryRow> = db::fetch_all(
            db,
            Sql::join(chunk.iter().map(|g| entry_arm(db, g, now)), " UNION ALL "),
        )
        .await?;
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
    for chunk in chunks(&present) {
        let rows: Vec<CountRow> = db::fetch_all(
            db,
            Sql::join(chunk.iter().map(|g| count_arm(g, now)), " UNION ALL "),
        )
        .await?;
        for r in rows {
            if let Some(seen) = out.get_mut(&(r.viewer, r.author_id)) {
                seen.entry.live = r.live;
                seen.entry.unseen = r.unseen;
            }
        }
    }
    Ok(out)
}

/// The viewers of one author in one statement: signed in, or anonymous.
#[derive(Debug)]
struct Group {
    author: i64,
    /// Empty for the anonymous viewer.
    viewers: Vec<i64>,
}

/// `pairs` grouped by author (the anonymous viewer on its own), then into
/// statements of at most [`CHUNK`] viewers.
fn chunks(pairs: &[(i64, i64)]) -> Vec<Vec<Group>> {
    let mut by_author: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let mut anonymous = Vec::new();
    for &(viewer, author) in pairs {
        if viewer == 0 {
            anonymous.push(author);
        } else {
            by_author.entry(author).or_default().push(viewer);
        }
    }
    anonymous.sort_unstable();
    anonymous.dedup();
    let mut out: Vec<Vec<Group>> = Vec::new();
    let mut current: Vec<Group> = Vec::new();
    let mut size = 0;
    let mut add = |group: Group, size_of: usize, current: &mut Vec<Group>, size: &mut usize| {
        if *size + size_of > CHUNK && !current.is_empty() {
            out.push(std::mem::take(current));
            *size = 0;
        }
        *size += size_of;
        current.push(group);
    };
    for author in anonymous {
        let group = Group {
            author,
            viewers: Vec::new(),
        };
        add(group, 1, &mut current, &mut size);
    }
    for (author, mut viewers) in by_author {
        viewers.sort_unstable();
        viewers.dedup();
        for part in viewers.chunks(CHUNK) {
            let group = Group {
                author,
                viewers: part.to_vec(),
            };
            add(group, part.len(), &mut current, &mut size);
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The tray rows of one group: `status::tray_page`'s conditions, with the
/// viewer a column.
fn entry_arm<C: ConnectionTrait>(db: &C, g: &Group, now: Millis) -> Sql {
    let (select, who) = if g.viewers.is_empty() {
        (
            Sql::new(
                "SELECT CAST(0 AS BIGINT) AS viewer, t.author_id, t.latest_created_at, 1 = 0 AS in_friends \
                 FROM status_tray t WHERE t.author_id = ",
            )
            .bind(g.author),
            Who::User(0),
        )
    } else {
        let who = Who::Column("w.id");
        (
            Sql::new("SELECT w.id AS viewer, t.author_id, t.latest_created_at, ")
                .append(visibility::scope(Scope::Friends, "t.author_id", who))
                .push(" AS in_friends FROM users w CROSS JOIN status_tray t WHERE t.author_id = ")
                .bind(g.author)
                .push(" AND w.id IN (")
                .list(g.viewers.iter().copied())
                .push(")"),
            who,
        )
    };
    select
        .push(" AND ")
        .append(status::tray_rows(Dialect::of(db), who, now))
}

/// The counts of one group: `status::tray_counts`, with the viewer a
/// column. For signed-in viewers the author's live statuses are counted
/// once per audience, and the viewer's seen marks of them per audience; the
/// audience rule is then asked of each (viewer, audience) row instead of
/// each (viewer, status): the cost grows with the author's statuses once,
/// not once per viewer told.
fn count_arm(g: &Group, now: Millis) -> Sql {
    if g.viewers.is_empty() {
        return Sql::new(
            "SELECT CAST(0 AS BIGINT) AS viewer, s.author_id, CAST(COUNT(*) AS BIGINT) AS live, \
               CAST(COUNT(*) AS BIGINT) AS unseen FROM statuses s WHERE s.author_id = ",
        )
        .bind(g.author)
        .push(" AND ")
        .append(live_status("s", now))
        .push(" AND ")
        .append(visibility::status_audience(
            "s.audience",
            "s.author_id",
            Who::User(0),
        ))
        .push(" GROUP BY s.author_id");
    }
    let viewers = || Sql::new("(").list(g.viewers.iter().copied()).push(")");
    Sql::new(
        "SELECT w.id AS viewer, a.author_id, CAST(SUM(a.n) AS BIGINT) AS live, \
           CAST(SUM(a.n - COALESCE(v.n, 0)) AS BIGINT) AS unseen \
         FROM users w CROSS JOIN (SELECT s.author_id, s.audience, COUNT(*) AS n FROM statuses s \
         WHERE s.author_id = ",
    )
    .bind(g.author)
    .push(" AND ")
    .append(live_status("s", now))
    .push(
        " GROUP BY s.author_id, s.audience) a \
         LEFT JOIN (SELECT sv.viewer_id, s.audience, COUNT(*) AS n FROM status_views sv \
         JOIN statuses s ON s.id = sv.status_id WHERE sv.viewer_id IN ",
    )
    .append(viewers())
    .push(" AND s.author_id = ")
    .bind(g.author)
    .push(" AND ")
    .append(live_status("s", now))
    .push(
        " GROUP BY sv.viewer_id, s.audience) v ON v.viewer_id = w.id AND v.audience = a.audience \
         WHERE w.id IN ",
    )
    .append(viewers())
    .push(" AND ")
    .append(visibility::status_audience(
        "a.audience",
        "a.author_id",
        Who::Column("w.id"),
    ))
    .push(" GROUP BY w.id, a.author_id")
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
    fn pairs_are_grouped_by_author_in_statements_of_at_most_a_thousand_viewers() {
        let mut pairs: Vec<(i64, i64)> = (1..=1500).map(|v| (v, 7)).collect();
        pairs.extend([(0, 7), (0, 8), (3, 8), (3, 8)]);
        let statements = chunks(&pairs);
        let sizes: Vec<usize> = statements
            .iter()
            .map(|s| s.iter().map(|g| g.viewers.len().max(1)).sum())
            .collect();
        assert!(sizes.iter().all(|&n| n <= CHUNK), "{sizes:?}");
        let viewers: usize = statements.iter().flatten().map(|g| g.viewers.len()).sum();
        assert_eq!(viewers, 1501, "each signed-in pair once");
        let anonymous: Vec<i64> = statements
            .iter()
            .flatten()
            .filter(|g| g.viewers.is_empty())
            .map(|g| g.author)
            .collect();
        assert_eq!(anonymous, [7, 8]);
    }
}
