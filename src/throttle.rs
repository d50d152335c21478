//! Attempt limits for what a client may try only so often: password checks
//! (sign-in, sign-up, account deletion, password change) per client address
//! and per account, answered `RATE_LIMITED` with a retry hint. Each is a
//! keyed GCRA limiter (`governor`): a burst of at most [`BURST`], then one
//! more per 1/n minute. Keys not seen for a while are forgotten now and
//! then, so memory follows the clients of the last minute or so.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};
use governor::{Quota, RateLimiter};

use crate::error::{AppError, AppResult};

/// The address of the client a request comes from (the peer, or what a
/// trusted proxy says it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// What one request (an HTTP batch, or one websocket operation) may still
/// spend on password checks: one, however the request batches or aliases
/// them.
#[derive(Clone, Debug, Default)]
pub struct PasswordBudget(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl PasswordBudget {
    /// Spends the request's one password check, or refuses a second.
    pub fn spend(&self) -> AppResult<()> {
        if self.0.swap(true, Ordering::SeqCst) {
            return Err(AppError::rate_limited(
                "one sign-in, sign-up or password check per request",
                std::time::Duration::from_secs(1),
            ));
        }
        Ok(())
    }
}

type Keyed<K> = RateLimiter<K, governor::state::keyed::DefaultKeyedStateStore<K>, DefaultClock>;

/// Attempts a key may make at once before the per-minute pace applies: a
/// person mistyping a password a few times is not slowed, while a flood from
/// many addresses starts with few password checks each.
const BURST: u32 = 5;

/// One keyed limit.
struct Limit<K: Hash + Eq + Clone> {
    limiter: Keyed<K>,
    checks: AtomicU64,
}

impl<K: Hash + Eq + Clone> Limit<K> {
    fn per_minute(n: u32) -> Self {
        let n = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(n.get().min(BURST)).unwrap_or(NonZeroU32::MIN);
        Self {
            limiter: RateLimiter::keyed(Quota::per_minute(n).allow_burst(burst)),
            checks: AtomicU64::new(0),
        }
    }

    /// Counts one attempt for `key`; the wait until the next is allowed, if
    /// this one is not.
    fn check(&self, key: &K) -> Option<std::time::Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % 1024 == 1023 {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(key)
            .err()
            .map(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

/// The password-attempt limits.
pub struct Attempts {
    per_address: Limit<IpAddr>,
    per_account: Limit<String>,
}

impl std::fmt::Debug for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Attempts(..)")
    }
}

impl Attempts {
    /// `per_address` password checks a minute from one client address,
    /// `per_account` sign-in attempts a minute on one account.
    pub fn new(per_address: u32, per_account: u32) -> Self {
        Self {
            per_address: Limit::per_minute(per_address),
            per_account: Limit::per_minute(per_account),
        }
    }

    /// Counts a password attempt from `client` (if known) on `account` (a
    /// username key, if the attempt names one). The address is counted
    /// first, so a client cycling through usernames spends its own budget.
    pub fn attempt(&self, client: Option<ClientAddr>, account: Option<&str>) -> AppResult<()> {
        if let Some(ClientAddr(ip)) = client
            && let Some(wait) = self.per_address.check(&ip)
        {
            return Err(AppError::rate_limited(
                "too many password attempts from this address; try again later",
                wait,
            ));
        }
        if let Some(account) = account
            && let Some(wait) = self.per_account.check(&account.to_owned())
        {
            return Err(AppError::rate_limited(
                "too many password attempts on this account; try again later",
                wait,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn attempts_are_limited_per_address_and_per_account() {
        let a = Attempts::new(3, 2);
        let one = Some(ClientAddr("10.0.0.1".parse().unwrap()));
        let two = Some(ClientAddr("10.0.0.2".parse().unwrap()));
        assert!(a.attempt(one, Some("alice")).is_ok());
        assert!(a.attempt(two, Some("alice")).is_ok());
        let e = a.attempt(two, Some("alice")).unwrap_err();
        assert_eq!(e.code(), Code::RateLimited);
        assert!(e.message().contains("account"));
        assert!(a.attempt(one, Some("bob")).is_ok());
        assert!(a.attempt(one, Some("carol")).is_ok());
        let e = a.attempt(one, Some("dave")).unwrap_err();
        assert!(e.message().contains("address"));
        assert!(
            e.to_graphql_json()["errors"][0]["extensions"]["retryAfter"]
                .as_u64()
                .unwrap()
                >= 1
        );
    }
}
