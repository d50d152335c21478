//! The server's clock. Every notion of "now" (liveness, expiry, token
//! lifetimes, jobs) comes from here, so tests can move time without sleeping
//! and SQL always compares with a time the server passes in.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// A clock: the system's, or a manual one that tests move.
#[derive(Clone, Debug)]
pub struct Clock(Arc<Source>);

#[derive(Debug)]
enum Source {
    System,
    Manual(AtomicI64),
}

impl Clock {
    /// The real time.
    pub fn system() -> Self {
        Self(Arc::new(Source::System))
    }

    /// A clock that stands still at `start` until it is moved.
    pub fn manual(start: Millis) -> Self {
        Self(Arc::new(Source::Manual(AtomicI64::new(start))))
    }

    /// The current time in milliseconds since the epoch.
    pub fn now(&self) -> Millis {
        match &*self.0 {
            Source::System => chrono::Utc::now().timestamp_millis(),
            Source::Manual(at) => at.load(Ordering::SeqCst),
        }
    }

    /// Sets a manual clock to `at`; a no-op on the system clock.
    pub fn set(&self, at: Millis) {
        if let Source::Manual(now) = &*self.0 {
            now.store(at, Ordering::SeqCst);
        }
    }

    /// Moves a manual clock forward; a no-op on the system clock.
    pub fn advance(&self, by: Duration) {
        if let Source::Manual(at) = &*self.0 {
            at.fetch_add(duration_millis(by), Ordering::SeqCst);
        }
    }
}

/// A duration in whole milliseconds, saturating.
pub fn duration_millis(d: Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// A millisecond timestamp as a UTC date-time.
pub fn to_datetime(ms: Millis) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}
