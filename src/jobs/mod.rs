//! Background jobs and their scheduler. Each job has a `run_once(&state,
//! now)` that the scheduler, `ephemera jobs run <name>` and tests all call. A
//! failed run is logged with its cause and tried again at the next tick; it
//! never stops the scheduler. A run still going when its next tick comes is
//! not started twice in one instance; across instances the jobs' own locking
//! (`SKIP LOCKED`) keeps them apart.

pub mod event_prune;
pub mod media_gc;
pub mod moment_expiry;
pub mod moment_purge;
pub mod status_purge;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_cron_scheduler::{Job, JobScheduler};

use crate::config::JobName;
use crate::error::{AppError, AppResult};
use crate::state::AppState;

/// Runs one job once, now, and describes what it did.
pub async fn run_by_name(state: &AppState, name: JobName) -> AppResult<String> {
    Ok(run(state, name).await?.1)
}

/// Runs one job once at the clock's time: whether it did anything, and what.
async fn run(state: &AppState, name: JobName) -> AppResult<(bool, String)> {
    let now = state.clock.now();
    Ok(match name {
        JobName::StatusPurge => {
            let r = status_purge::run_once(state, now).await?;
            (
                r.rows > 0,
                format!(
                    "status-purge: deleted {} expired statuses in {} batches",
                    r.rows, r.batches
                ),
            )
        }
        JobName::MediaGc => {
            let r = media_gc::run_once(state, now).await?;
            (
                r != media_gc::MediaGcReport::default(),
                format!(
                    "media-gc: swept {} unattached uploads, deleted {} blobs, {} deletions failed (queued for retry)",
                    r.swept, r.deleted, r.failed
                ),
            )
        }
        JobName::MomentExpiry => {
            let r = moment_expiry::run_once(state, now).await?;
            (
                r.rows > 0,
                format!(
                    "moment-expiry: soft-deleted {} expired moments in {} batches",
                    r.rows, r.batches
                ),
            )
        }
        JobName::EventPrune => {
            let n = event_prune::run_once(state, now).await?;
            (
                n > 0,
                format!("event-prune: deleted {n} events older than the retention"),
            )
        }
        JobName::MomentPurge => {
            let r = moment_purge::run_once(state, now).await?;
            (
                r.rows > 0,
                format!(
                    "moment-purge: deleted {} moments past the grace in {} batches",
                    r.rows, r.batches
                ),
            )
        }
    })
}

/// The running scheduler.
pub struct Scheduler {
    inner: JobScheduler,
}

impl Scheduler {
    /// Starts every job on its configured schedule.
    pub async fn start(state: AppState) -> AppResult<Self> {
        let inner = JobScheduler::new()
            .await
            .map_err(|e| AppError::internal("creating the job scheduler", e))?;
        let c = &state.config;
        let jobs = [
            (
                JobName::StatusPurge,
                "status-purge",
                c.statuses.purge_cron.clone(),
            ),
            (JobName::MediaGc, "media-gc", c.media.gc_cron.clone()),
            (
                JobName::MomentExpiry,
                "moment-expiry",
                c.moments.expiry_cron.clone(),
            ),
            (
                JobName::MomentPurge,
                "moment-purge",
                c.moments.moment_purge_cron.clone(),
            ),
            (
                JobName::EventPrune,
                "event-prune",
                c.ws.event_prune_cron.clone(),
            ),
        ];
        for (job, label, cron) in jobs {
            add(&inner, label, &cron, state.clone(), move |s| async move {
                let (did, what) = run(&s, job).await?;
                if did {
                    tracing::info!(job = label, "{what}");
                }
                Ok(())
            })
            .await?;
        }
        inner
            .start()
            .await
            .map_err(|e| AppError::internal("starting the job scheduler", e))?;
        Ok(Self { inner })
    }

    /// Stops scheduling (a run in progress finishes on its own).
    pub async fn stop(mut self) {
        if let Err(e) = self.inner.shutdown().await {
            tracing::warn!(error = ?e, "stopping the job scheduler");
        }
    }
}

async fn add<F, Fut>(
    scheduler: &JobScheduler,
    name: &'static str,
    cron: &str,
    state: AppState,
    run: F,
) -> AppResult<()>
where
    F: Fn(AppState) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = AppResult<()>> + Send + 'static,
{
    let running = Arc::new(AtomicBool::new(false));
    let run = Arc::new(run);
    let job = Job::new_async(cron, move |_, _| {
        let state = state.clone();
        let running = running.clone();
        let run = run.clone();
        Box::pin(async move {
            if running.swap(true, Ordering::SeqCst) {
                tracing::debug!(job = name, "previous run still going; skipping this tick");
                return;
            }
            if let Err(e) = run(state).await {
                e.log();
                tracing::error!(
                    job = name,
                    error = e.message(),
                    "job run failed; retrying at the next tick"
                );
            }
            running.store(false, Ordering::SeqCst);
        })
    })
    .map_err(|e| AppError::bad_input(format!("{name}: invalid cron expression {cron:?}: {e:?}")))?;
    scheduler
        .add(job)
        .await
        .map_err(|e| AppError::internal("scheduling a job", e))?;
    Ok(())
}
