//! Domain rules: what users, friends, statuses, moments, locations and likes
//! may do, and the SQL that enforces it. Nothing here knows about GraphQL or HTTP; resolvers and jobs
//! both call these functions.

pub mod expiry;
pub mod friend;
pub mod geo;
pub mod image;
pub mod like;
pub mod location;
pub mod map;
pub mod media;
pub mod moment;
pub mod page;
pub mod status;
pub mod user;
pub mod visibility;

/// Whose content a list shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything the viewer may see.
    Everyone,
    /// The viewer's own and their accepted friends' (needs a signed-in viewer).
    Friends,
}

/// What a batched job run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Rows handled.
    pub rows: u64,
    /// Transactions (batches) that handled at least one row.
    pub batches: u64,
}

/// Runs `batch` (one transaction, returning the rows it handled) until a
/// batch finds nothing: a job drains its whole backlog in one run.
pub async fn drain_batches<F, Fut>(mut batch: F) -> crate::error::AppResult<BatchReport>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::error::AppResult<u64>>,
{
    let mut report = BatchReport::default();
    loop {
        let n = batch().await?;
        if n == 0 {
            return Ok(report);
        }
        report.rows += n;
        report.batches += 1;
    }
}
