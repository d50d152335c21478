//! The moment expiry job: soft-deletes ephemeral moments whose `expiresAt`
//! has passed, in batches of `EPHEMERA_MOMENT_BATCH`, draining the backlog in
//! one run. Journaled moments are never touched. Reads do not wait for it:
//! they filter liveness themselves.

use crate::clock::Millis;
use crate::domain::{BatchReport, moment};
use crate::error::AppResult;
use crate::state::AppState;

/// Soft-deletes everything expired at `now`.
pub async fn run_once(state: &AppState, now: Millis) -> AppResult<BatchReport> {
    moment::expire(&state.db, now, state.config.moments.batch).await
}
