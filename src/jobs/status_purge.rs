//! The status purge: deletes expired statuses, their seen rows and tray
//! summaries in batches of `EPHEMERA_STATUS_PURGE_BATCH`, draining the whole
//! backlog in one run; on PostgreSQL `EPHEMERA_STATUS_PURGE_WORKERS` batches
//! at a time (they claim with `SKIP LOCKED`, as runs on other instances do).

use crate::clock::Millis;
use crate::domain::BatchReport;
use crate::domain::status;
use crate::error::AppResult;
use crate::state::AppState;

/// Purges everything expired at `now`.
pub async fn run_once(state: &AppState, now: Millis) -> AppResult<BatchReport> {
    let config = &state.config;
    status::purge_expired(
        &state.db,
        now,
        config.statuses.purge_batch,
        config.statuses.purge_workers,
    )
    .await
}
