//! The change-log prune: deletes events older than `EPHEMERA_EVENT_RETENTION`
//! in batches, moving the pruning mark with them, so a cursor from before
//! the mark is refused (`CURSOR_EXPIRED`) instead of resumed with a gap.
//! Safe on several instances at once. The same run forgets what the limits
//! no longer need: rate-limit rows whose time has passed, and upload
//! charges older than the quota's day.

use crate::clock::{Millis, duration_millis};
use crate::error::AppResult;
use crate::events::log;
use crate::state::AppState;

/// Events deleted per transaction.
const BATCH: u32 = 5_000;

/// Prunes what is older than the retention at `now`; returns the count.
pub async fn run_once(state: &AppState, now: Millis) -> AppResult<u64> {
    let before = now - duration_millis(state.config.ws.event_retention);
    let pruned = log::prune(&state.db, before, BATCH).await?;
    crate::throttle::prune(&state.db, now).await?;
    crate::domain::media::prune_charges(&state.db, now).await?;
    Ok(pruned)
}
