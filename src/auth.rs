//! Password hashing (argon2id, off the async runtime), bearer tokens (JWT,
//! HS256, expiry checked against the server's clock) and the [`Viewer`]: who
//! is asking. No token means anonymous; a bad or expired token is an error.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

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

    /// A token for `user_id`, valid for the configured lifetime from `now`.
    pub fn issue(&self, user_id: i64, now: Millis) -> AppResult<String> {
        let claims = Claims {
            sub: user_id.to_string(),
            iat: now / 1000,
            exp: (now.saturating_add(self.ttl_ms)) / 1000,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AppError::internal("signing a token", e))
    }

    /// The user a token names, if it is ours and has not expired at `now`.
    pub fn verify(&self, token: &str, now: Millis) -> AppResult<i64> {
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked below against the server's clock, not the system's.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map_err(|_| AppError::unauthenticated("invalid token"))?;
        if data.claims.exp * 1000 <= now {
            return Err(AppError::unauthenticated("token expired"));
        }
        data.claims
            .sub
            .parse()
            .map_err(|_| AppError::unauthenticated("invalid token"))
    }

    /// The viewer an `Authorization` header value names (`None` = anonymous).
    pub fn viewer_from_header(&self, header: Option<&str>, clock: &Clock) -> AppResult<Viewer> {
        let Some(value) = header.map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(Viewer::Anonymous);
        };
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                AppError::unauthenticated("expected \"Authorization: Bearer <token>\"")
            })?;
        self.verify(token, clock.now()).map(Viewer::User)
    }
}

/// Hashes a password with argon2id on the blocking thread pool.
pub async fn hash_password(password: String) -> AppResult<String> {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut rand::rngs::OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| AppError::internal("hashing a password", e))
    })
    .await
    .map_err(|e| AppError::internal("password hashing task", e))?
}

/// Checks a password against a stored hash on the blocking thread pool. With
/// no stored hash (unknown user) it still does the same work, so the answer
/// takes as long either way.
pub async fn verify_password(password: String, stored: Option<String>) -> AppResult<bool> {
    tokio::task::spawn_blocking(move || {
        let dummy;
        let hash = match &stored {
            Some(h) => h.as_str(),
            None => {
                dummy = dummy_hash();
                dummy.as_str()
            }
        };
        let parsed = PasswordHash::new(hash).map_err(|e| AppError::internal("stored hash", e))?;
        let ok = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        Ok(ok && stored.is_some())
    })
    .await
    .map_err(|e| AppError::internal("password check task", e))?
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_by_the_server_clock() {
        let keys = TokenKeys::new(b"0123456789abcdef0123456789abcdef", 60_000);
        let now = 1_800_000_000_000;
        let token = keys.issue(42, now).unwrap();
        assert_eq!(keys.verify(&token, now + 1_000).unwrap(), 42);
        assert!(keys.verify(&token, now + 61_000).is_err());
        let other = TokenKeys::new(b"another secret another secret 00", 60_000);
        assert!(other.verify(&token, now).is_err());
    }

    #[tokio::test]
    async fn passwords_verify() {
        let hash = hash_password("correct horse".into()).await.unwrap();
        assert!(
            verify_password("correct horse".into(), Some(hash.clone()))
                .await
                .unwrap()
        );
        assert!(
            !verify_password("wrong horse".into(), Some(hash))
                .await
                .unwrap()
        );
        assert!(!verify_password("anything".into(), None).await.unwrap());
    }
}
