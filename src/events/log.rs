//! The change log's table: writing changes in the transaction that makes
//! them, reading what is final after a position, remembering how far it has
//! been pruned, and pruning.
//!
//! Positions are `(tx, seq)`. A reader reads only events whose `tx` is below
//! the dialect's horizon ([`Dialect::event_horizon`]): on PostgreSQL the
//! oldest transaction still running. A transaction that wrote an event at a
//! smaller position but has not committed yet keeps the horizon at or below
//! its own `tx`, so nothing after it is read until it ends: events that
//! commit out of order are delivered late, never skipped, and every
//! instance sees the same order.

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::{Kind, LogEvent, Pos};
use crate::clock::Millis;
use crate::db::{self, Dialect, Sql};
use crate::entity::event;
use crate::error::AppResult;

/// A change to write into the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: Kind,
    /// The status or moment.
    pub subject: i64,
    pub author: i64,
    /// The status's audience or the moment's visibility.
    pub audience: String,
    /// For [`Kind::StatusSeen`]: who saw it; for the kinds that are one
    /// viewer's alone, that viewer.
    pub viewer: Option<i64>,
}

impl Change {
    /// Its place in its transaction: the subject, unique there for every
    /// kind but [`Kind::TrayChanged`], whose subject is an author that a
    /// `FriendshipChanged` of the same transaction may name too; it takes
    /// the negated viewer instead.
    fn seq(&self) -> i64 {
        match (self.kind, self.viewer) {
            (Kind::TrayChanged, Some(viewer)) => -viewer,
            _ => self.subject,
        }
    }
}

const COLUMNS: &str = "(tx, seq, kind, subject_id, author_id, audience, viewer_id, created_at)";

/// Writes `changes` in the caller's transaction (`txn` must be one: the
/// event is part of the change).
pub async fn record<C: ConnectionTrait>(txn: &C, changes: &[Change], now: Millis) -> AppResult<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let tx = Dialect::of(txn).event_tx();
    let rows = changes.iter().map(|c| {
        Sql::new(&format!("({tx}, "))
            .bind(c.seq())
            .push(", ")
            .bind(c.kind.as_str())
            .push(", ")
            .list([c.subject, c.author])
            .push(", ")
            .bind(c.audience.clone())
            .push(", ")
            .bind(c.viewer)
            .push(", ")
            .bind(now)
            .push(")")
    });
    db::execute(
        txn,
        Sql::new(&format!("INSERT INTO events {COLUMNS} VALUES ")).append(Sql::join(rows, ", ")),
    )
    .await?;
    Ok(())
}

/// The statement body (for a `WITH` clause) that writes one `kind` event
/// per row of `source` (an SQL source, such as a `WITH` name, with columns
/// `id`, `author_id` and `audience_col`): a whole batch in the statement
/// that changes it.
pub fn record_rows(
    dialect: Dialect,
    kind: Kind,
    source: Sql,
    audience_col: &str,
    now: Millis,
) -> Sql {
    Sql::new(&format!(
        "INSERT INTO events {COLUMNS} SELECT {}, id, ",
        dialect.event_tx()
    ))
    .bind(kind.as_str())
    .push(&format!(", id, author_id, {audience_col}, NULL, "))
    .bind(now)
    .push(" FROM ")
    .append(source)
}

/// The statement that writes one `kind` event about `author` for each
/// viewer id that `viewers` (a subquery body of one column) selects, each
/// that viewer's alone (the viewer's id is its `seq`).
pub fn record_for_each(
    dialect: Dialect,
    kind: Kind,
    author: i64,
    viewers: Sql,
    now: Millis,
) -> Sql {
    Sql::new(&format!(
        "INSERT INTO events {COLUMNS} SELECT {}, v.id, ",
        dialect.event_tx()
    ))
    .bind(kind.as_str())
    .push(", ")
    .list([author, author])
    .push(", 'FRIENDS', v.id, ")
    .bind(now)
    .push(" FROM users v WHERE v.id IN (")
    .append(viewers)
    .push(")")
}

fn to_event(row: event::Model) -> LogEvent {
    LogEvent {
        pos: Pos {
            tx: row.tx,
            seq: row.seq,
            part: Pos::EVENT,
        },
        kind: Kind::from_stored(&row.kind),
        subject: row.subject_id,
        author: row.author_id,
        audience: row.audience,
        viewer: row.viewer_id,
    }
}

/// Up to `limit` final events after `after`, in order: from the event
/// `after` is a part of, unless it is past all of it ([`Pos::ALL`]).
pub async fn read_after<C: ConnectionTrait>(
    db: &C,
    after: Pos,
    limit: u32,
) -> AppResult<Vec<LogEvent>> {
    let horizon = Dialect::of(db).event_horizon();
    let from = if after.part == Pos::ALL { ">" } else { ">=" };
    let rows: Vec<event::Model> = db::fetch_all(
        db,
        Sql::new(&format!("SELECT * FROM events WHERE (tx, seq) {from} ("))
            .list([after.tx, after.seq])
            .push(&format!(") AND tx < {horizon} ORDER BY tx, seq LIMIT "))
            .bind(i64::from(limit)),
    )
    .await?;
    Ok(rows.into_iter().map(to_event).collect())
}

#[derive(Debug, FromQueryResult)]
struct PosRow {
    tx: i64,
    seq: i64,
}

/// The position of the last final event (or of the pruning mark, when the
/// log is empty): where a reader that starts now starts.
pub async fn end<C: ConnectionTrait>(db: &C) -> AppResult<Pos> {
    let horizon = Dialect::of(db).event_horizon();
    let last: Option<PosRow> = db::fetch_one(
        db,
        Sql::new(&format!(
            "SELECT tx, seq FROM events WHERE tx < {horizon} ORDER BY tx DESC, seq DESC LIMIT 1"
        )),
    )
    .await?;
    match last {
        Some(r) => Ok(Pos::after_all(r.tx, r.seq)),
        None => pruned(db).await,
    }
}

/// How far the log has been pruned: every event at or before this position
/// is gone, so a cursor before it cannot be resumed.
pub async fn pruned<C: ConnectionTrait>(db: &C) -> AppResult<Pos> {
    let row: Option<PosRow> = db::fetch_one(
        db,
        Sql::new("SELECT pruned_tx AS tx, pruned_seq AS seq FROM event_log WHERE id = 1"),
    )
    .await?;
    Ok(row.map_or_else(Pos::default, |r| Pos::after_all(r.tx, r.seq)))
}

/// Deletes the final events written before `before`, at most `batch` per
/// transaction, oldest position first, and moves the pruning mark past
/// them in the same transaction. Safe on several instances at once (the
/// mark only moves forward). Returns how many were deleted.
pub async fn prune(db: &sea_orm::DatabaseConnection, before: Millis, batch: u32) -> AppResult<u64> {
    let mut total = 0;
    loop {
        let txn = db::begin(db).await?;
        let horizon = Dialect::of(&txn).event_horizon();
        // The last position of this batch: the events before it go.
        let last: Option<PosRow> = db::fetch_one(
            &txn,
            Sql::new(&format!(
                "SELECT tx, seq FROM (SELECT tx, seq FROM events WHERE tx < {horizon} AND created_at < "
            ))
            .bind(before)
            .push(" ORDER BY tx, seq LIMIT ")
            .bind(i64::from(batch.max(1)))
            .push(") b ORDER BY tx DESC, seq DESC LIMIT 1"),
        )
        .await?;
        let Some(last) = last else {
            return Ok(total);
        };
        let upto = || Sql::new("(").list([last.tx, last.seq]).push(")");
        db::execute(
            &txn,
            Sql::new("UPDATE event_log SET pruned_tx = ")
                .bind(last.tx)
                .push(", pruned_seq = ")
                .bind(last.seq)
                .push(" WHERE id = 1 AND (pruned_tx, pruned_seq) < ")
                .append(upto()),
        )
        .await?;
        let n = db::execute(
            &txn,
            Sql::new("DELETE FROM events WHERE (tx, seq) <= ").append(upto()),
        )
        .await?;
        txn.commit().await?;
        total += n;
    }
}
