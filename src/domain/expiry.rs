//! What is live, as functions of `now`. Every read path and job builds its
//! liveness test from here, so the rule is written once.

use std::time::Duration;

use crate::clock::{Millis, duration_millis};
use crate::db::Sql;

/// When a status created at `created_at` stops being live.
pub fn status_expires_at(created_at: Millis, ttl: Duration) -> Millis {
    created_at.saturating_add(duration_millis(ttl).max(1))
}

/// Whether a status that expires at `expires_at` is live at `now`.
pub fn status_is_live(expires_at: Millis, now: Millis) -> bool {
    expires_at > now
}

/// SQL that keeps live statuses of table alias `alias` at the server's
/// `now`. The same comparison as [`status_is_live`].
pub fn live_status(alias: &str, now: Millis) -> Sql {
    Sql::new(&format!("{alias}.expires_at > ")).bind(now)
}

/// [`live_status`] in a form no index serves (`expires_at + 0`), for a
/// statement that walks another index in page order and must not be
/// planned as a range scan of `(author_id, expires_at)` and a sort: the
/// test then filters the rows the walk reads. Expired rows the purge has
/// not reached yet are the oldest, so a page of the newest rarely reads one.
pub fn live_status_walked(alias: &str, now: Millis) -> Sql {
    Sql::new(&format!("{alias}.expires_at + 0 > ")).bind(now)
}

/// SQL that keeps statuses the purge may delete: the complement of
/// [`live_status`].
pub fn expired_status(alias: &str, now: Millis) -> Sql {
    Sql::new(&format!("{alias}.expires_at <= ")).bind(now)
}

/// When a moment of `hours` created at `created_at` expires: never (`None`)
/// when journaled (`hours` = 0).
pub fn moment_expires_at(created_at: Millis, hours: i32) -> Option<Millis> {
    (hours > 0).then(|| created_at.saturating_add(i64::from(hours) * 3_600_000))
}

/// SQL that keeps live moments of alias `alias` at `now`: not deleted, and
/// journaled or not yet expired.
pub fn live_moment(alias: &str, now: Millis) -> Sql {
    Sql::new(&format!(
        "({alias}.deleted_at IS NULL AND ({alias}.expires_at IS NULL OR {alias}.expires_at > "
    ))
    .bind(now)
    .push("))")
}

/// SQL that keeps moments the expiry job soft-deletes at `now`: ephemeral,
/// not deleted, expired. Journaled moments (`expires_at IS NULL`) never
/// match.
pub fn expired_moment(alias: &str, now: Millis) -> Sql {
    Sql::new(&format!(
        "{alias}.deleted_at IS NULL AND {alias}.expires_at IS NOT NULL AND {alias}.expires_at <= "
    ))
    .bind(now)
}

/// SQL that keeps moments soft-deleted at or before `cutoff` (now minus the
/// grace): the purge's, and past the reach of `restoreMoment`.
pub fn purgeable_moment(alias: &str, cutoff: Millis) -> Sql {
    Sql::new(&format!(
        "{alias}.deleted_at IS NOT NULL AND {alias}.deleted_at <= "
    ))
    .bind(cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_live_until_its_expiry() {
        let exp = status_expires_at(1_000, Duration::from_secs(90));
        assert_eq!(exp, 91_000);
        assert!(status_is_live(exp, 90_999));
        assert!(!status_is_live(exp, 91_000));
        let sql = live_status("s", 5).build(crate::db::Dialect::Postgres).sql;
        assert_eq!(sql, "s.expires_at > $1");
    }

    #[test]
    fn journaled_moments_never_expire() {
        assert_eq!(moment_expires_at(1_000, 0), None);
        assert_eq!(moment_expires_at(1_000, 2), Some(7_201_000));
    }
}
