//! API tests: each runs against the real server over HTTP and websockets, on
//! SQLite and on PostgreSQL.

// Tests may unwrap: a failure is the test failing.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test or benchmark that cannot go on should stop at once"
)]

mod support;

mod audiences;
mod auth;
mod bounded;
mod friends;
mod hostile;
mod http;
mod ids;
mod instances;
mod layers;
mod likes;
mod limits;
mod live;
mod live_tray;
mod map;
mod media;
mod media_store;
mod migrations;
mod moderation;
mod moment_jobs;
mod moments;
mod people;
mod plans;
mod purge;
mod safety;
mod schema;
mod statuses;
mod subscriptions;
mod tray;
mod visibility;
