//! The media store: where media bytes live. One contract, two backends,
//! chosen by `EPHEMERA_MEDIA_STORE`:
//!
//! - [`local::LocalStore`]: files under the data dir, served by this server at
//!   `/media/<key>` through signed, expiring URLs, and written by direct
//!   uploads through signed, expiring PUT URLs on the same path;
//! - [`s3::S3Store`]: any S3-compatible bucket, with presigned GET and PUT URLs.
//!
//! Keys are random (128 bits) and never reused, so a key names one blob for
//! its whole life. Deleting a key that is not there succeeds: the deletion
//! outbox retries until the store says the blob is gone.

pub mod local;
pub mod s3;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rand::RngCore;

use crate::clock::Millis;
use crate::config::{Config, MediaStoreKind};
use crate::error::{AppError, AppResult};

/// Why a store operation failed: the cause, for logs and the deletion outbox.
/// It reaches clients only as an internal error (see [`From`] below).
#[derive(Debug)]
pub struct StoreFailure(pub String);

impl From<StoreFailure> for AppError {
    fn from(failure: StoreFailure) -> Self {
        AppError::internal("media store", failure.0)
    }
}

pub type StoreResult<T> = Result<T, StoreFailure>;

/// Counters of the media paths, for `/metrics`.
#[derive(Debug, Default)]
pub struct MediaStats {
    pub uploads: AtomicU64,
    pub deleted: AtomicU64,
    pub failed: AtomicU64,
    pub waiting: AtomicU64,
}

impl MediaStats {
    /// Media stored (uploads and checked direct uploads).
    pub fn uploads(&self) -> u64 {
        self.uploads.load(Ordering::Relaxed)
    }

    /// Blobs deleted by the media job.
    pub fn deleted(&self) -> u64 {
        self.deleted.load(Ordering::Relaxed)
    }

    /// Blob deletions that failed (each is retried).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Blobs queued for deletion after the media job's last run.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// Where and how a client uploads bytes directly.
#[derive(Clone, Debug)]
pub struct UploadTarget {
    pub url: String,
    /// Headers the PUT must carry (they are part of the signature).
    pub headers: Vec<(String, String)>,
    pub expires_at: Millis,
}

/// The configured store.
#[derive(Clone, Debug)]
pub enum MediaStore {
    Local(local::LocalStore),
    S3(s3::S3Store),
}

impl MediaStore {
    /// Opens the store the settings name. `secret` keys the local store's URL
    /// signatures.
    pub async fn open(config: &Config, secret: &[u8]) -> AppResult<Self> {
        match config.media.store {
            MediaStoreKind::Local => Ok(Self::Local(
                local::LocalStore::open(
                    config.effective_media_dir(),
                    config.server.public_url.clone(),
                    secret,
                )
                .await?,
            )),
            MediaStoreKind::S3 => Ok(Self::S3(s3::S3Store::connect(config).await?)),
        }
    }

    /// Stores `bytes` under `key`, replacing what was there.
    pub async fn put(&self, key: &str, bytes: Bytes, content_type: &str) -> StoreResult<()> {
        match self {
            Self::Local(s) => s.put(key, bytes).await,
            Self::S3(s) => s.put(key, bytes, content_type).await,
        }
    }

    /// The blob's size, or `None` if there is none.
    pub async fn size(&self, key: &str) -> StoreResult<Option<u64>> {
        match self {
            Self::Local(s) => s.size(key).await,
            Self::S3(s) => s.size(key).await,
        }
    }

    /// The blob's bytes, or `None` if there is none.
    pub async fn get(&self, key: &str) -> StoreResult<Option<Bytes>> {
        match self {
            Self::Local(s) => s.get(key).await,
            Self::S3(s) => s.get(key).await,
        }
    }

    /// Deletes the blob; a blob that is not there counts as deleted.
    pub async fn delete(&self, key: &str) -> StoreResult<()> {
        match self {
            Self::Local(s) => s.delete(key).await,
            Self::S3(s) => s.delete(key).await,
        }
    }

    /// Every key in the store (for audits and tests; walks the whole store).
    pub async fn keys(&self) -> StoreResult<Vec<String>> {
        match self {
            Self::Local(s) => s.keys().await,
            Self::S3(s) => s.keys().await,
        }
    }

    /// A URL a client can GET the bytes from, valid for at least `ttl` from
    /// `now` and at most twice that. URLs are the same within a window of
    /// `ttl`, so clients can cache them.
    pub async fn url(&self, key: &str, now: Millis, ttl: Duration) -> StoreResult<String> {
        let (start, expires) = url_window(now, ttl);
        match self {
            Self::Local(s) => Ok(s.url(key, expires)),
            Self::S3(s) => s.presigned_get(key, start, expires).await,
        }
    }

    /// A signed PUT target for exactly `len` bytes of `content_type`, valid
    /// for `ttl` from `now`.
    pub async fn upload_target(
        &self,
        key: &str,
        content_type: &str,
        len: u64,
        now: Millis,
        ttl: Duration,
    ) -> StoreResult<UploadTarget> {
        let expires_at = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        match self {
            Self::Local(s) => Ok(s.upload_target(key, content_type, len, expires_at)),
            Self::S3(s) => {
                s.presigned_put(key, content_type, len, now, expires_at)
                    .await
            }
        }
    }
}

/// The validity window of a URL made at `now`: from the start of the current
/// `ttl`-long window to two windows later.
fn url_window(now: Millis, ttl: Duration) -> (Millis, Millis) {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1000);
    let start = now - now.rem_euclid(ttl);
    (start, start.saturating_add(2 * ttl))
}

/// A new random key: two hex digits of fan-out, then 32 hex digits.
pub fn new_key() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}/{}", &hex[..2], hex)
}

/// Whether `key` has the shape [`new_key`] makes (so it is safe as a path).
pub fn is_valid_key(key: &str) -> bool {
    let Some((dir, name)) = key.split_once('/') else {
        return false;
    };
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    dir.len() == 2 && name.len() == 32 && hex(dir) && hex(name) && name.starts_with(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_and_checked() {
        let a = new_key();
        assert!(is_valid_key(&a), "{a}");
        assert_ne!(a, new_key());
        for bad in [
            "",
            "ab",
            "../etc/passwd",
            "ab/../../x",
            "zz/zz",
            "AB/ABCDEF",
        ] {
            assert!(!is_valid_key(bad), "{bad}");
        }
        assert!(!is_valid_key(&format!("00/{}", &a[3..])) || a.starts_with("00"));
    }

    #[test]
    fn url_windows_are_stable() {
        let hour = Duration::from_secs(3600);
        let (s1, e1) = url_window(10 * 3_600_000 + 5, hour);
        let (s2, e2) = url_window(10 * 3_600_000 + 3_599_999, hour);
        assert_eq!((s1, e1), (s2, e2));
        assert_eq!(e1 - s1, 2 * 3_600_000);
        // always valid for at least one ttl
        assert!(e1 - (10 * 3_600_000 + 3_599_999) >= 3_600_000);
    }
}
