//! What is live, as functions of `now`. Every read path and job builds its
//! liveness test from here, so the rule is written once.

use std::time::Duration;

use crate::clock::{Millis, duration_millis};

/// When a status created at `created_at` stops being live.
pub fn status_expires_at(created_at: Millis, ttl: Duration) -> Millis {
    created_at.saturating_add(duration_millis(ttl).max(1))
}

/// Whether a status that expires at `expires_at` is live at `now`.
pub fn status_is_live(expires_at: Millis, now: Millis) -> bool {
    expires_at > now
}

/// SQL that keeps live statuses of table alias `alias`, given the server's
/// `now` as parameter `$now_param`. The same comparison as [`status_is_live`].
pub fn live_status_sql(alias: &str, now_param: usize) -> String {
    format!("{alias}.expires_at > ${now_param}")
}

/// SQL that keeps statuses the purge may delete: the complement of
/// [`live_status_sql`].
pub fn expired_status_sql(alias: &str, now_param: usize) -> String {
    format!("{alias}.expires_at <= ${now_param}")
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
        assert_eq!(live_status_sql("s", 2), "s.expires_at > $2");
    }
}
