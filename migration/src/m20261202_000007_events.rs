//! Several instances as one: the change log behind subscriptions, and the
//! leases by which instances take their node ids.
//!
//! `events` is written in the transaction that makes each change. Its key
//! is `(tx, seq)`: `tx` orders transactions as they become final (on
//! PostgreSQL the writing transaction's id, read only once every older
//! transaction has ended; on SQLite, whose writers take turns, a counter),
//! `seq` orders the events of one transaction. `event_log` remembers up to
//! where the log has been pruned, so a cursor from before that is refused.
//! `node_leases` holds, per node id, which instance has it and until when.

use sea_orm_migration::prelude::*;

sql_migration!("m20261202_000007_events");

const UP: &str = r#"
CREATE TABLE events (
    tx BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    subject_id BIGINT NOT NULL,
    author_id BIGINT NOT NULL,
    audience TEXT NOT NULL,
    viewer_id BIGINT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tx, seq)
);
CREATE INDEX events_created ON events (created_at);

CREATE TABLE event_log (
    id INTEGER PRIMARY KEY,
    pruned_tx BIGINT NOT NULL,
    pruned_seq BIGINT NOT NULL
);
INSERT INTO event_log (id, pruned_tx, pruned_seq) VALUES (1, 0, 0);

CREATE TABLE node_leases (
    node_id INTEGER PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
)
"#;

const DOWN: &str = r#"
DROP TABLE node_leases;
DROP TABLE event_log;
DROP INDEX events_created;
DROP TABLE events
"#;
