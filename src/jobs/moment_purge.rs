//! The moment purge: hard-deletes moments soft-deleted more than
//! `EPHEMERA_MOMENT_GRACE` ago, their likes, and their media (blobs through
//! the deletion outbox), in batches of `EPHEMERA_MOMENT_BATCH`, draining the
//! backlog in one run. Locations stay, even with no moment left.

use crate::clock::Millis;
use crate::domain::{BatchReport, moment};
use crate::error::AppResult;
use crate::state::AppState;

/// Purges everything past the grace at `now`.
pub async fn run_once(state: &AppState, now: Millis) -> AppResult<BatchReport> {
    moment::purge(
        &state.db,
        now,
        state.config.moments.grace,
        state.config.moments.batch,
    )
    .await
}
