//! Purge throughput: `ephemera jobs run status-purge` (the real job, as the
//! scheduler runs it: batches claimed with `SKIP LOCKED` on PostgreSQL, media
//! rows deleted and their blobs queued in the outbox in the same transaction)
//! against a plain batched `DELETE` of the same rows, on the same data.

use std::time::Instant;

use crate::seed::{Bench, bin};

/// Both ways of draining the expired statuses.
#[derive(Clone, Debug, Default)]
pub struct PurgeResult {
    pub rows: u64,
    pub batch: u64,
    /// Batches the job worked on at once (`EPHEMERA_STATUS_PURGE_WORKERS`;
    /// SQLite runs one whatever it is told).
    pub workers: u32,
    pub job_rows_per_s: f64,
    /// Outbox entries the job queued (one per media row).
    pub outbox: i64,
    pub plain_rows_per_s: f64,
    /// Expired statuses left after each (should be 0 and 0).
    pub left: (i64, i64),
}

const EXPIRED: &str = "SELECT COUNT(*) FROM statuses WHERE caption LIKE 'expired %'";

/// Drains `rows` expired statuses `batch` at a time, both ways (the job with
/// `workers` batches at once; the plain `DELETE` one at a time).
pub async fn measure(bench: &mut Bench, rows: u64, batch: u64, workers: u32) -> PurgeResult {
    bench.seed_expired(rows).await;
    let started = Instant::now();
    let out = std::process::Command::new(bin())
        .args(["jobs", "run", "status-purge"])
        .envs(bench.server_env())
        .env("EPHEMERA_STATUS_PURGE_BATCH", batch.to_string())
        .env("EPHEMERA_STATUS_PURGE_WORKERS", workers.to_string())
        .output()
        .expect("run the purge job");
    let job_secs = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "purge job failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left_job = bench.count(EXPIRED).await;
    let outbox = bench
        .count("SELECT COUNT(*) FROM media_deletions WHERE storage_key LIKE 'bench/x%'")
        .await;
    bench.clear_expired().await;

    bench.seed_expired(rows).await;
    let claim = bench.dialect().skip_locked();
    let now = chrono::Utc::now().timestamp_millis();
    let delete = format!(
        "DELETE FROM statuses WHERE id IN (SELECT id FROM statuses WHERE expires_at <= {now} \
         ORDER BY expires_at LIMIT {batch}{claim})"
    );
    let started = Instant::now();
    while bench.exec(&delete).await > 0 {}
    let plain_secs = started.elapsed().as_secs_f64();
    let left_plain = bench.count(EXPIRED).await;
    bench.clear_expired().await;

    let per_s = |secs: f64| rows as f64 / secs;
    PurgeResult {
        rows,
        batch,
        workers,
        job_rows_per_s: per_s(job_secs),
        outbox,
        plain_rows_per_s: per_s(plain_secs),
        left: (left_job, left_plain),
    }
}
