//! Domain rules: what users, friends, statuses, moments, locations and likes
//! may do, and the SQL that enforces it. Nothing here knows about GraphQL or HTTP; resolvers and jobs
//! both call these functions.

pub mod expiry;
pub mod friend;
pub mod geo;
pub mod image;
pub mod like;
pub mod live;
pub mod location;
pub mod map;
pub mod media;
pub mod moderation;
pub mod moment;
pub mod page;
pub mod safety;
pub mod search;
pub mod session;
pub mod status;
pub mod tray;
pub mod user;
pub mod visibility;

use crate::error::{AppError, AppResult};

/// Whose content a list shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything the viewer may see.
    Everyone,
    /// The viewer's own and their accepted friends' (needs a signed-in viewer).
    Friends,
}

/// Free text of at most `max` characters (named `field` in the error); a
/// blank one counts as none. Line breaks and tabs are kept; what
/// [`check_stored_text`] refuses is refused.
pub fn normalize_text(text: Option<String>, field: &str, max: usize) -> AppResult<Option<String>> {
    let Some(text) = text.filter(|c| !c.trim().is_empty()) else {
        return Ok(None);
    };
    if text.chars().count() > max {
        return Err(AppError::bad_input(format!(
            "{field} must be at most {max} characters"
        )));
    }
    check_stored_text(&text, field, true)?;
    Ok(Some(text))
}

/// The one rule for what a stored string may contain, the same on both
/// databases: no NUL (PostgreSQL cannot store it), no other control
/// character (tabs and line breaks only where `multiline`), and no bidi
/// embedding, override or isolate (U+202A–U+202E, U+2066–U+2069), with which
/// a caption or name can display as something other than what it is. Plain
/// right-to-left text needs none of them (the marks U+200E/U+200F are kept).
pub fn check_stored_text(text: &str, field: &str, multiline: bool) -> AppResult<()> {
    for c in text.chars() {
        let allowed_space = multiline && matches!(c, '\n' | '\r' | '\t');
        if c.is_control() && !allowed_space {
            return Err(AppError::bad_input(format!(
                "{field} must not contain control characters"
            )));
        }
        if matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}') {
            return Err(AppError::bad_input(format!(
                "{field} must not contain bidirectional override characters"
            )));
        }
    }
    Ok(())
}

/// Whether `key` can name anything stored: a looked-up string that breaks
/// [`check_stored_text`] (a NUL, say) matches nothing, and is not sent to
/// the database (PostgreSQL refuses a NUL in any text it is given).
pub fn may_match_stored(key: &str) -> bool {
    check_stored_text(key, "key", true).is_ok()
}

/// What a batched job run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Rows handled.
    pub rows: u64,
    /// Transactions (batches) that handled at least one row.
    pub batches: u64,
}

impl std::iter::Sum for BatchReport {
    /// The report of several runs that shared one backlog.
    fn sum<I: Iterator<Item = Self>>(reports: I) -> Self {
        reports.fold(Self::default(), |a, r| Self {
            rows: a.rows + r.rows,
            batches: a.batches + r.batches,
        })
    }
}

/// Runs `batch` (one transaction, returning the rows it handled) until a
/// batch finds nothing: a job drains its whole backlog in one run.
pub async fn drain_batches<F, Fut>(mut batch: F) -> AppResult<BatchReport>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = AppResult<u64>>,
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
