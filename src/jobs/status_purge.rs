//! The status purge: deletes expired statuses, their seen rows and tray
//! summaries in batches of `EPHEMERA_STATUS_PURGE_BATCH`, draining the whole
//! backlog in one run.

use crate::app::AppState;
use crate::clock::Millis;
use crate::domain::BatchReport;
use crate::domain::status;
use crate::error::AppResult;

/// Purges everything expired at `now`.
pub async fn run_once(state: &AppState, now: Millis) -> AppResult<BatchReport> {
    status::purge_expired(&state.db, now, state.config.status_purge_batch).await
}
