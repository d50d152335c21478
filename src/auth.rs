//! Password hashing (argon2id, on low-priority threads of its own), bearer tokens (JWT,
//! HS256, expiry checked against the server's clock) and the [`Viewer`]: who
//! is asking. No token means anonymous; a bad or expired token is an error.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lru::LruCache;
use tokio::sync::Semaphore;

use crate::clock::{Clock, Millis};
use crate::error::{AppError, AppResult};

/// Who is making a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Viewer {
    Anonymous,
    User(i64),
}

impl Viewer {
    /// The signed-in user's id, if any.
    pub fn id(self) -> Option<i64> {
        match self {
            Viewer::Anonymous => None,
            Viewer::User(id) => Some(id),
        }
    }

    /// The signed-in user's id, or `UNAUTHENTICATED`.
    pub fn require(self) -> AppResult<i64> {
        self.id().ok_or_else(AppError::sign_in_required)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    iat: i64,
    exp: i64,
    /// The session the token belongs to (see `domain::session`); tokens
    /// issued before sessions existed have none and are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sid: Option<String>,
}

/// What a valid token says: whose it is and which session it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bearer {
    pub user: i64,
    pub session: i64,
}

/// Issues and checks tokens.
#[derive(Clone)]
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    ttl_ms: Millis,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKeys(..)")
    }
}

impl TokenKeys {
    pub fn new(secret: &[u8], ttl_ms: Millis) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            ttl_ms,
        }
    }

    /// How long a token (and its session) lives.
    pub fn ttl_ms(&self) -> Millis {
        self.ttl_ms
    }

    /// A token for `user_id`'s session `session`, valid for the configured
    /// lifetime from `now` (and while the session lasts).
    pub fn issue(&self, user_id: i64, session: i64, now: Millis) -> AppResult<String> {
        let claims = Claims {
            sub: user_id.to_string(),
            iat: now / 1000,
            exp: (now.saturating_add(self.ttl_ms)) / 1000,
            sid: Some(session.to_string()),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AppError::internal("signing a token", e))
    }

    /// The user and session a token names, if it is ours and has not
    /// expired at `now` (whether the session still exists is the caller's
    /// to check).
    pub fn verify(&self, token: &str, now: Millis) -> AppResult<Bearer> {
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked below against the server's clock, not the system's.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map_err(|_| AppError::unauthenticated("invalid token"))?;
        if data.claims.exp * 1000 <= now {
            return Err(AppError::unauthenticated("token expired"));
        }
        let user = data
            .claims
            .sub
            .parse()
            .map_err(|_| AppError::unauthenticated("invalid token"))?;
        let session = data
            .claims
            .sid
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                AppError::unauthenticated("token from before sessions: sign in again")
            })?;
        Ok(Bearer { user, session })
    }

    /// The bearer an `Authorization` header value names (`None` = anonymous).
    pub fn bearer_from_header(
        &self,
        header: Option<&str>,
        clock: &Clock,
    ) -> AppResult<Option<Bearer>> {
        let Some(value) = header.map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                AppError::unauthenticated("expected \"Authorization: Bearer <token>\"")
            })?;
        self.verify(token, clock.now()).map(Some)
    }
}

/// Password hashing and checking: argon2id on threads of its own, `hashers`
/// of them, each at a lower CPU priority (nice 10) than the threads that
/// serve requests, so that a flood of password checks takes the cores only
/// when nothing else wants them (each check still takes ~19 MiB). Past the
/// hashers, callers wait their turn; past `max_waiting` waiting, a caller is
/// refused `RATE_LIMITED` at once instead of queueing, so a flood of
/// sign-ins holds neither memory nor threads.
#[derive(Debug)]
pub struct Passwords {
    hashers: Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
    jobs: std::sync::mpsc::SyncSender<Job>,
}

/// Work for a hashing thread.
type Job = Box<dyn FnOnce() + Send>;

/// The niceness-mapped priority of the hashing threads (0–100 maps to
/// nice 20 to -20: 25 is nice 10, a tenth of a normal thread's CPU share
/// when the cores are contended).
const HASHER_PRIORITY: u8 = 25;

impl Passwords {
    pub fn new(hashers: usize, max_waiting: usize) -> Self {
        let hashers = hashers.max(1);
        // Room for a job per permit, and for jobs whose callers went away
        // (their permits are back, their work still queued).
        let (jobs, queue) = std::sync::mpsc::sync_channel::<Job>(hashers + max_waiting);
        let queue = std::sync::Arc::new(std::sync::Mutex::new(queue));
        for i in 0..hashers {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("password-{i}"))
                .spawn(move || {
                    let low = thread_priority::ThreadPriorityValue::try_from(HASHER_PRIORITY)
                        .map(thread_priority::ThreadPriority::Crossplatform);
                    if let Ok(p) = low
                        && let Err(e) = thread_priority::set_current_thread_priority(p)
                    {
                        tracing::warn!("password thread keeps its priority: {e:?}");
                    }
                    loop {
                        // The lock is held only while waiting for the next job.
                        let job = match queue.lock() {
                            Ok(q) => q.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return, // Passwords dropped
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::error!("starting a password thread: {e}");
            }
        }
        Self {
            hashers: Semaphore::new(hashers),
            waiting: AtomicUsize::new(0),
            max_waiting,
            jobs,
        }
    }

    /// Runs `work` on a hashing thread once one is free.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> AppResult<T> + Send + 'static,
    ) -> AppResult<T> {
        let permit = match self.hashers.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                let waiting = self.waiting.fetch_add(1, Ordering::SeqCst);
                let permit = if waiting >= self.max_waiting {
                    None
                } else {
                    self.hashers.acquire().await.ok()
                };
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                permit.ok_or_else(|| {
                    AppError::rate_limited(
                        "the server is checking too many passwords; try again shortly",
                        std::time::Duration::from_secs(1),
                    )
                })?
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A permit is held, so a thread is free or about to be; the channel
        // is full only if many callers left before their checks ran.
        self.jobs
            .try_send(Box::new(move || {
                let _ = tx.send(work());
            }))
            .map_err(|_| {
                AppError::rate_limited(
                    "the server is checking too many passwords; try again shortly",
                    std::time::Duration::from_secs(1),
                )
            })?;
        let result = rx
            .await
            .map_err(|e| AppError::internal("password hashing thread", e))?;
        drop(permit);
        result
    }

    /// Hashes a password with argon2id.
    pub async fn hash(&self, password: String) -> AppResult<String> {
        self.run(move || {
            let salt = SaltString::generate(&mut rand::rngs::OsRng);
            Argon2::default()
                .hash_password(password.as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| AppError::internal("hashing a password", e))
        })
        .await
    }

    /// Checks a password against a stored hash. With no stored hash
    /// (unknown user) it still does the same work, so the answer takes as
    /// long either way.
    pub async fn verify(&self, password: String, stored: Option<String>) -> AppResult<bool> {
        self.run(move || {
            let dummy;
            let hash = match &stored {
                Some(h) => h.as_str(),
                None => {
                    dummy = dummy_hash();
                    dummy.as_str()
                }
            };
            let parsed =
                PasswordHash::new(hash).map_err(|e| AppError::internal("stored hash", e))?;
            let ok = Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok();
            Ok(ok && stored.is_some())
        })
        .await
    }
}

fn dummy_hash() -> String {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY
        .get_or_init(|| {
            let salt = SaltString::generate(&mut rand::rngs::OsRng);
            Argon2::default()
                .hash_password(b"not a real password", &salt)
                .map(|h| h.to_string())
                .unwrap_or_default()
        })
        .clone()
}

/// How long a session found alive is trusted without asking the database.
pub const ALIVE_FOR: Duration = Duration::from_secs(5);

/// Sessions this instance found alive lately.
#[derive(Debug)]
pub struct AliveSessions {
    seen: Mutex<LruCache<i64, Instant>>,
}

impl Default for AliveSessions {
    fn default() -> Self {
        let size = NonZeroUsize::new(10_000).unwrap_or(NonZeroUsize::MIN);
        Self {
            seen: Mutex::new(LruCache::new(size)),
        }
    }
}

impl AliveSessions {
    pub fn fresh(&self, session: i64) -> bool {
        self.seen
            .lock()
            .ok()
            .and_then(|mut s| s.get(&session).copied())
            .is_some_and(|at| at.elapsed() < ALIVE_FOR)
    }

    pub fn remember(&self, session: i64) {
        if let Ok(mut s) = self.seen.lock() {
            s.put(session, Instant::now());
        }
    }

    pub fn forget(&self, sessions: &[i64]) {
        if let Ok(mut s) = self.seen.lock() {
            for id in sessions {
                s.pop(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_by_the_server_clock() {
        let keys = TokenKeys::new(b"0123456789abcdef0123456789abcdef", 60_000);
        let now = 1_800_000_000_000;
        let token = keys.issue(42, 7, now).unwrap();
        assert_eq!(
            keys.verify(&token, now + 1_000).unwrap(),
            Bearer {
                user: 42,
                session: 7
            }
        );
        assert!(keys.verify(&token, now + 61_000).is_err());
        let other = TokenKeys::new(b"another secret another secret 00", 60_000);
        assert!(other.verify(&token, now).is_err());
    }

    #[tokio::test]
    async fn passwords_verify() {
        let p = Passwords::new(1, 4);
        let hash = p.hash("correct horse".into()).await.unwrap();
        assert!(
            p.verify("correct horse".into(), Some(hash.clone()))
                .await
                .unwrap()
        );
        assert!(!p.verify("wrong horse".into(), Some(hash)).await.unwrap());
        assert!(!p.verify("anything".into(), None).await.unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn password_work_beyond_the_queue_is_refused() {
        let p = std::sync::Arc::new(Passwords::new(1, 2));
        let tasks: Vec<_> = (0..12)
            .map(|_| {
                let p = p.clone();
                tokio::spawn(async move { p.verify("x".into(), None).await })
            })
            .collect();
        let mut refused = 0;
        for t in tasks {
            if let Err(e) = t.await.unwrap() {
                assert_eq!(e.code(), crate::error::Code::RateLimited);
                refused += 1;
            }
        }
        // One hashing, two waiting: the rest are refused.
        assert!(refused >= 12 - 3, "{refused}");
    }
}
