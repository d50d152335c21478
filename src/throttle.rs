//! Rate limits that hold across instances: every write an account makes
//! ([`Write`]) and every password attempt, per client address and per
//! account, answered `RATE_LIMITED` with a retry hint. Each limited key
//! (`post:<account>`, `password-address:<ip>`, …) is one row of the
//! `rate_limits` table, spent in one statement (an upsert), so N instances
//! give the same N attempts as one.
//!
//! Each limit is GCRA: a key may act `burst` times at once, then once per
//! `per / n`; its row holds the theoretical arrival time (`tat`, in
//! microseconds), so a key
//! whose `tat` has passed is as good as absent, and [`prune`] deletes such
//! rows. A key the database refused is remembered here until its wait is
//! over, and refused again without a statement meanwhile: a flood costs
//! one statement per refusal window, not one per attempt.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::clock::Millis;
use crate::db::{self, Sql};
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

/// A rate: at most `n` in any `per`, up to `burst` of them at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub n: u32,
    pub per: Duration,
    pub burst: u32,
}

impl Rate {
    /// `n` a minute, a burst of `burst` at most.
    pub fn per_minute(n: u32, burst: u32) -> Self {
        Self {
            n,
            per: Duration::from_secs(60),
            burst: burst.min(n),
        }
    }

    /// Microseconds between two actions at the steady pace.
    fn interval_us(self) -> i64 {
        let per = i64::try_from(self.per.as_micros()).unwrap_or(i64::MAX);
        (per / i64::from(self.n.max(1))).max(1)
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.n, humantime::format_duration(self.per))
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `N/DURATION`, e.g. `30/1m`: `N` in any `DURATION`, all at once or
    /// spread out.
    fn from_str(s: &str) -> Result<Self, String> {
        let (n, per) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: a rate is N/DURATION, e.g. 30/1m"))?;
        let n: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: N must be a whole number from 1"))?;
        let per = humantime::parse_duration(per.trim()).map_err(|e| format!("{s:?}: {e}"))?;
        if n == 0 || per.is_zero() {
            return Err(format!("{s:?}: N and DURATION must be more than 0"));
        }
        Ok(Self { n, per, burst: n })
    }
}

/// What a write is, for its account's rate limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// `createStatus`, `createMoment`.
    Post,
    /// `deleteStatus`, `deleteMoment`, `restoreMoment`.
    Delete,
    /// `toggleMomentLike`, `setMomentLike`.
    Like,
    /// `markStatusSeen`.
    Seen,
    /// Friend requests and friendships, blocks, mutes, hidden stories, close friends.
    Social,
    /// `report`.
    Report,
    /// `uploadMedia`, `requestMediaUpload`.
    Media,
    /// A moderator's `takeDown`, `suspendUser`, `reinstateUser`, `resolveReport`.
    Moderate,
    /// `signOut`, `signOutEverywhere`, `updateProfile`.
    Account,
}

impl Write {
    /// Every kind, in the order of [`WriteRates`]' fields.
    pub const ALL: [Write; 9] = [
        Write::Post,
        Write::Delete,
        Write::Like,
        Write::Seen,
        Write::Social,
        Write::Report,
        Write::Media,
        Write::Moderate,
        Write::Account,
    ];

    /// The name in keys, messages and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Write::Post => "post",
            Write::Delete => "delete",
            Write::Like => "like",
            Write::Seen => "seen",
            Write::Social => "social",
            Write::Report => "report",
            Write::Media => "media",
            Write::Moderate => "moderate",
            Write::Account => "account",
        }
    }
}

/// The rate of each kind of write, per account.
#[derive(Clone, Copy, Debug)]
pub struct WriteRates {
    pub post: Rate,
    pub delete: Rate,
    pub like: Rate,
    pub seen: Rate,
    pub social: Rate,
    pub report: Rate,
    pub media: Rate,
    pub moderate: Rate,
    pub account: Rate,
}

impl WriteRates {
    pub fn of(&self, write: Write) -> Rate {
        match write {
            Write::Post => self.post,
            Write::Delete => self.delete,
            Write::Like => self.like,
            Write::Seen => self.seen,
            Write::Social => self.social,
            Write::Report => self.report,
            Write::Media => self.media,
            Write::Moderate => self.moderate,
            Write::Account => self.account,
        }
    }
}

/// The limits, and how often each refused.
pub struct Limiter {
    writes: WriteRates,
    catch_up: Rate,
    per_address: Rate,
    per_account: Rate,
    /// Refusals: one counter per kind of write, then password attempts,
    /// then resumes.
    refused: [AtomicU64; Write::ALL.len() + 2],
    /// Keys the database refused lately, and until when: an attempt
    /// before then is refused here without a statement (the database would
    /// refuse it too), so a flood costs the database one statement per key
    /// per refusal window, not one per attempt.
    refused_until: Mutex<HashMap<String, Millis>>,
    /// How long a refusal is held back before it is answered.
    refusal_delay: Duration,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Limiter(..)")
    }
}

impl Limiter {
    /// `writes` per account; `catch_up` resumes per address and account;
    /// `per_address` password checks a minute from one client address,
    /// `per_account` sign-in attempts a minute on one account, each in a
    /// burst of at most `burst`.
    pub fn new(
        writes: WriteRates,
        catch_up: Rate,
        per_address: u32,
        per_account: u32,
        burst: u32,
        refusal_delay: Duration,
    ) -> Self {
        Self {
            refusal_delay,
            writes,
            catch_up,
            per_address: Rate::per_minute(per_address, burst),
            per_account: Rate::per_minute(per_account, burst),
            refused: Default::default(),
            refused_until: Mutex::default(),
        }
    }

    /// Holds a refusal back a little (at most the wait, at most
    /// [`Self::refusal_delay`]) before it is answered: a client that floods
    /// in a loop, waiting for each answer, then sends a few attempts a
    /// second per connection instead of thousands, and the CPU its
    /// refusals cost the server stays small. Waiting costs a timer, not a
    /// thread.
    async fn hold_refusal(&self, wait: Duration) {
        let delay = wait.min(self.refusal_delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }

    /// Spends one action of `key` at `rate`: refused at once if the
    /// database refused it lately and the wait is not over, else asked.
    async fn take<C: ConnectionTrait>(
        &self,
        db: &C,
        key: &str,
        rate: Rate,
        now: Millis,
    ) -> AppResult<Option<Duration>> {
        let per = i64::try_from(rate.per.as_millis()).unwrap_or(i64::MAX);
        let known = self
            .refused_until
            .lock()
            .ok()
            .and_then(|m| m.get(key).copied())
            // A wait longer than the whole period is a clock set back.
            .filter(|&until| until > now && until - now <= per);
        if let Some(until) = known {
            let wait = Duration::from_millis(u64::try_from(until - now).unwrap_or(1));
            self.hold_refusal(wait).await;
            return Ok(Some(wait));
        }
        let wait = take_in_db(db, key, rate, now).await?;
        if let Some(wait) = wait {
            if let Ok(mut memo) = self.refused_until.lock() {
                if memo.len() >= 10_000 {
                    memo.retain(|_, &mut until| until > now);
                }
                let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                memo.insert(key.to_owned(), now.saturating_add(ms));
            }
            self.hold_refusal(wait).await;
        }
        Ok(wait)
    }

    /// Spends one `write` of `account`'s, or refuses it with `RATE_LIMITED`
    /// and the seconds until the next is allowed.
    pub async fn write<C: ConnectionTrait>(
        &self,
        db: &C,
        write: Write,
        account: i64,
        now: Millis,
    ) -> AppResult<()> {
        let key = format!("{}:{account}", write.as_str());
        if let Some(wait) = self.take(db, &key, self.writes.of(write), now).await? {
            self.refused[write as usize].fetch_add(1, Ordering::Relaxed);
            tracing::info!(account, write = write.as_str(), "write refused: rate limit");
            return Err(AppError::rate_limited(
                format!(
                    "too many {} writes from this account; the limit is {}",
                    write.as_str(),
                    self.writes.of(write)
                ),
                wait,
            ));
        }
        Ok(())
    }

    /// Counts a password attempt from `client` (if known) on `account` (a
    /// username key, if the attempt names one). The address is counted
    /// first, so a client cycling through usernames spends its own budget.
    pub async fn password<C: ConnectionTrait>(
        &self,
        db: &C,
        client: Option<ClientAddr>,
        account: Option<&str>,
        now: Millis,
    ) -> AppResult<()> {
        let refuse = |what: &str, wait| {
            self.refused[Write::ALL.len()].fetch_add(1, Ordering::Relaxed);
            tracing::info!(what, "password attempt refused: rate limit");
            Err(AppError::rate_limited(
                format!("too many password attempts {what}; try again later"),
                wait,
            ))
        };
        if let Some(ClientAddr(ip)) = client
            && let Some(wait) = self
                .take(db, &format!("password-address:{ip}"), self.per_address, now)
                .await?
        {
            return refuse("from this address", wait);
        }
        if let Some(account) = account
            && let Some(wait) = self
                .take(
                    db,
                    // Escaped: a name may hold what a key may not (NUL).
                    &format!("password-account:{}", account.escape_default()),
                    self.per_account,
                    now,
                )
                .await?
        {
            return refuse("on this account", wait);
        }
        Ok(())
    }

    /// Counts a resume of the `events` subscription from a cursor by
    /// `client` (if known) and `account` (if signed in).
    pub async fn catch_up<C: ConnectionTrait>(
        &self,
        db: &C,
        client: Option<ClientAddr>,
        account: Option<i64>,
        now: Millis,
    ) -> AppResult<()> {
        let keys = [
            client.map(|ClientAddr(ip)| format!("catch-up-address:{ip}")),
            account.map(|a| format!("catch-up-account:{a}")),
        ];
        for key in keys.into_iter().flatten() {
            if let Some(wait) = self.take(db, &key, self.catch_up, now).await? {
                self.refused[Write::ALL.len() + 1].fetch_add(1, Ordering::Relaxed);
                tracing::info!(key, "resume refused: rate limit");
                return Err(AppError::rate_limited(
                    format!(
                        "too many resumes from a cursor; the limit is {}",
                        self.catch_up
                    ),
                    wait,
                ));
            }
        }
        Ok(())
    }

    /// How many writes of each kind were refused, then password attempts
    /// and resumes, for `/metrics`.
    pub fn refused(&self) -> Vec<(&'static str, u64)> {
        Write::ALL
            .iter()
            .map(|w| {
                (
                    w.as_str(),
                    self.refused[*w as usize].load(Ordering::Relaxed),
                )
            })
            .chain([
                (
                    "password",
                    self.refused[Write::ALL.len()].load(Ordering::Relaxed),
                ),
                (
                    "catch-up",
                    self.refused[Write::ALL.len() + 1].load(Ordering::Relaxed),
                ),
            ])
            .collect()
    }
}

/// The work time each client (account, else address) may use on this
/// instance: `share` of it a second, after a burst of `burst`. A request's
/// work is the time it spent being parsed and validated, executed (the
/// time its futures were polled) and waiting on the database: what it made
/// the server do, whatever it declared. What a request spent is charged
/// when it ends; a client past its burst is
/// refused (`RATE_LIMITED`, held back like every refusal) until its share
/// has caught up. In memory: work is done, and metered, where it runs.
pub struct WorkMeter {
    share: Duration,
    burst: Duration,
    refusal_delay: Duration,
    due: Mutex<HashMap<String, std::time::Instant>>,
    refused: AtomicU64,
}

impl std::fmt::Debug for WorkMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkMeter(..)")
    }
}

impl WorkMeter {
    pub fn new(share: Duration, burst: Duration, refusal_delay: Duration) -> Self {
        Self {
            share,
            burst,
            refusal_delay,
            due: Mutex::default(),
            refused: AtomicU64::new(0),
        }
    }

    /// Whether `client` may start a request now: refused while it is
    /// ahead of its share by more than the burst.
    pub async fn admit(&self, client: &str) -> AppResult<()> {
        let now = std::time::Instant::now();
        let ahead = self
            .due
            .lock()
            .ok()
            .and_then(|d| d.get(client).copied())
            .and_then(|due| due.checked_duration_since(now))
            .unwrap_or_default();
        // A burst of database time takes burst / share to earn.
        let allowed = self.burst.mul_f64(1.0 / self.share.as_secs_f64().max(1e-6));
        if ahead <= allowed {
            return Ok(());
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        let wait = ahead - allowed;
        tokio::time::sleep(wait.min(self.refusal_delay)).await;
        Err(AppError::rate_limited(
            format!(
                "this client used its share of the server's time ({} a second); ask for less",
                humantime::format_duration(self.share)
            ),
            wait,
        ))
    }

    /// Charges `spent` work time to `client`.
    pub fn charge(&self, client: &str, spent: Duration) {
        if spent.is_zero() || self.share.is_zero() {
            return;
        }
        let now = std::time::Instant::now();
        // At `share` a second, `spent` takes spent / share seconds to earn.
        let earn = spent.mul_f64(1.0 / self.share.as_secs_f64().max(1e-6));
        if let Ok(mut due) = self.due.lock() {
            if due.len() >= 10_000 {
                due.retain(|_, d| *d > now);
            }
            let d = due.entry(client.to_owned()).or_insert(now);
            *d = (*d).max(now) + earn;
        }
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[derive(FromQueryResult)]
struct Spent {
    tat: i64,
    allowed: bool,
}

/// Spends one action of `key` at `rate` at `now`, in one statement: the
/// wait until the next one is allowed if this one is not. The row is
/// updated only when the action is allowed (a refused one costs nothing).
async fn take_in_db<C: ConnectionTrait>(
    db: &C,
    key: &str,
    rate: Rate,
    now: Millis,
) -> AppResult<Option<Duration>> {
    // In microseconds: a rate of many a second still paces.
    let now = now.saturating_mul(1000);
    let t = rate.interval_us();
    let limit = now.saturating_add(t.saturating_mul(i64::from(rate.burst.max(1))));
    // The key's arrival time, or now if that has passed. One past the
    // limit was stored by a clock ahead of this one (another instance's,
    // or this one's before it was set back): counted from now instead.
    let start = || {
        Sql::new("(CASE WHEN rate_limits.tat > ")
            .bind(now)
            .push(" AND rate_limits.tat <= ")
            .bind(limit)
            .push(" THEN rate_limits.tat ELSE ")
            .bind(now)
            .push(" END)")
    };
    let fits = || start().push(" + ").bind(t).push(" <= ").bind(limit);
    let spent: Option<Spent> = db::fetch_one_retried(
        db,
        Sql::new("INSERT INTO rate_limits (scope, tat, allowed) VALUES (")
            .bind(key.to_owned())
            .push(", ")
            .bind(now.saturating_add(t))
            .push(", ")
            .bind(true)
            .push(") ON CONFLICT (scope) DO UPDATE SET allowed = ")
            .append(fits())
            .push(", tat = CASE WHEN ")
            .append(fits())
            .push(" THEN ")
            .append(start())
            .push(" + ")
            .bind(t)
            .push(" ELSE rate_limits.tat END RETURNING tat, allowed"),
    )
    .await?;
    Ok(match spent {
        Some(Spent {
            allowed: false,
            tat,
        }) => {
            let wait = tat.saturating_add(t).saturating_sub(limit).max(1);
            Some(Duration::from_micros(u64::try_from(wait).unwrap_or(1)))
        }
        _ => None,
    })
}

/// Deletes the rows of keys whose arrival time has passed (they allow as
/// much as an absent row); returns how many.
pub async fn prune<C: ConnectionTrait>(db: &C, now: Millis) -> AppResult<u64> {
    db::execute(
        db,
        Sql::new("DELETE FROM rate_limits WHERE tat < ").bind(now.saturating_mul(1000)),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        let r: Rate = "30/1m".parse().unwrap();
        assert_eq!(
            r,
            Rate {
                n: 30,
                per: Duration::from_secs(60),
                burst: 30
            }
        );
        assert_eq!(r.interval_us(), 2_000_000);
        assert_eq!(r.to_string(), "30/1m");
        for bad in ["30", "0/1m", "5/0s", "x/1m", "5/soon"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        assert_eq!(Rate::per_minute(30, 5).burst, 5);
        assert_eq!(Rate::per_minute(3, 5).burst, 3);
    }
}
