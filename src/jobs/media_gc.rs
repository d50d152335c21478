//! The media job: first sweeps uploads never attached within
//! `EPHEMERA_MEDIA_UNATTACHED_TTL` (their rows go, their blobs into the
//! outbox), then drains the deletion outbox against the store. A blob that
//! cannot be deleted stays queued and is retried with exponential backoff;
//! none is ever dropped. "Not found" counts as deleted.

use crate::clock::Millis;
use crate::domain::media;
use crate::error::AppResult;
use crate::state::AppState;

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MediaGcReport {
    /// Unattached uploads swept.
    pub swept: u64,
    /// Blobs deleted from the store.
    pub deleted: u64,
    /// Deletions that failed and wait for a retry.
    pub failed: u64,
}

/// Sweeps, then drains whatever is due at `now`.
pub async fn run_once(state: &AppState, now: Millis) -> AppResult<MediaGcReport> {
    let swept = media::sweep_unattached(&state.db, &state.media, now).await?;
    let drained = media::drain_deletions(&state.db, &state.media, now).await?;
    Ok(MediaGcReport {
        swept,
        deleted: drained.deleted,
        failed: drained.failed,
    })
}
