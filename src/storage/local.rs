//! The local media store: one file per key under the media dir, written
//! through a temporary file and a rename so a reader never sees half a file.
//!
//! Files are served by this server (see `http::media`). A URL carries its
//! expiry and a signature over the key and the expiry; an upload URL signs the
//! key, the expiry, and the `Content-Type` and `Content-Length` the PUT must
//! carry, as an S3 presigned PUT does.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;

use super::{StoreFailure, StoreResult, UploadTarget, is_valid_key};
use crate::clock::Millis;
use crate::error::{AppError, AppResult};
use crate::signing::Signer;

const SIG_LEN: usize = 16;

/// Files under a directory.
#[derive(Clone, Debug)]
pub struct LocalStore {
    root: PathBuf,
    public_url: String,
    get_signer: Signer,
    put_signer: Signer,
}

fn failure(what: &str, key: &str, e: std::io::Error) -> StoreFailure {
    StoreFailure(format!("{what} {key}: {e}"))
}

impl LocalStore {
    /// Opens (creating) the directory `root`.
    pub async fn open(root: PathBuf, public_url: Option<String>, secret: &[u8]) -> AppResult<Self> {
        tokio::fs::create_dir_all(root.join(".tmp"))
            .await
            .map_err(|e| AppError::internal("creating the media dir", e))?;
        remove_stale_temp_files(&root.join(".tmp")).await;
        Ok(Self {
            root,
            public_url: public_url
                .map(|u| u.trim_end_matches('/').to_owned())
                .unwrap_or_default(),
            get_signer: Signer::new("media get v1", secret, SIG_LEN),
            put_signer: Signer::new("media put v1", secret, SIG_LEN),
        })
    }

    fn path(&self, key: &str) -> StoreResult<PathBuf> {
        if !is_valid_key(key) {
            return Err(StoreFailure(format!("not a media key: {key:?}")));
        }
        Ok(self.root.join(key))
    }

    /// A fresh temporary path in the media dir (same file system as the
    /// final place, so the rename is atomic).
    pub fn temp_path(&self) -> PathBuf {
        self.root
            .join(".tmp")
            .join(super::new_key().replace('/', "-"))
    }

    /// Moves a finished temporary file to `key`.
    pub async fn commit_temp(&self, temp: &Path, key: &str) -> StoreResult<()> {
        let path = self.path(key)?;
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| failure("creating the directory of", key, e))?;
        }
        tokio::fs::rename(temp, &path)
            .await
            .map_err(|e| failure("moving into place", key, e))
    }

    pub async fn put(&self, key: &str, bytes: Bytes) -> StoreResult<()> {
        let temp = self.temp_path();
        let written = async {
            use tokio::io::AsyncWriteExt;
            let mut file = create_private(&temp).await?;
            file.write_all(&bytes).await?;
            file.flush().await
        };
        if let Err(e) = written.await {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(failure("writing", key, e));
        }
        let committed = self.commit_temp(&temp, key).await;
        if committed.is_err() {
            let _ = tokio::fs::remove_file(&temp).await;
        }
        committed
    }

    pub async fn size(&self, key: &str) -> StoreResult<Option<u64>> {
        match tokio::fs::metadata(self.path(key)?).await {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(failure("reading the size of", key, e)),
        }
    }

    pub async fn get(&self, key: &str) -> StoreResult<Option<Bytes>> {
        match tokio::fs::read(self.path(key)?).await {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(failure("reading", key, e)),
        }
    }

    /// The file of `key`, for serving (`None` if absent or not a key).
    pub fn file_path(&self, key: &str) -> Option<PathBuf> {
        self.path(key).ok()
    }

    pub async fn delete(&self, key: &str) -> StoreResult<()> {
        match tokio::fs::remove_file(self.path(key)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(failure("deleting", key, e)),
        }
    }

    pub async fn keys(&self) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut dirs = tokio::fs::read_dir(&self.root)
            .await
            .map_err(|e| failure("listing", "the media dir", e))?;
        while let Some(dir) = dirs
            .next_entry()
            .await
            .map_err(|e| failure("listing", "the media dir", e))?
        {
            let dir_name = dir.file_name().to_string_lossy().into_owned();
            if dir_name.starts_with('.') || !dir.path().is_dir() {
                continue;
            }
            let mut files = tokio::fs::read_dir(dir.path())
                .await
                .map_err(|e| failure("listing", &dir_name, e))?;
            while let Some(file) = files
                .next_entry()
                .await
                .map_err(|e| failure("listing", &dir_name, e))?
            {
                let key = format!("{dir_name}/{}", file.file_name().to_string_lossy());
                if is_valid_key(&key) {
                    keys.push(key);
                }
            }
        }
        keys.sort();
        Ok(keys)
    }

    fn get_message(key: &str, expires: i64) -> Vec<u8> {
        format!("{key}\n{expires}").into_bytes()
    }

    fn put_message(key: &str, expires: i64, content_type: &str, len: u64) -> Vec<u8> {
        format!("{key}\n{expires}\n{content_type}\n{len}").into_bytes()
    }

    fn encode(tag: Vec<u8>) -> String {
        URL_SAFE_NO_PAD.encode(tag)
    }

    fn decode(sig: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(sig).unwrap_or_default()
    }

    /// `<public url>/media/<key>?exp=<unix seconds>&sig=<signature>`.
    pub fn url(&self, key: &str, expires_at: Millis) -> String {
        let exp = expires_at.div_euclid(1000);
        let sig = Self::encode(self.get_signer.tag(&Self::get_message(key, exp)));
        format!("{}/media/{key}?exp={exp}&sig={sig}", self.public_url)
    }

    /// Whether a GET of `key` with these query values is allowed at `now`.
    pub fn check_get(&self, key: &str, exp: i64, sig: &str, now: Millis) -> bool {
        exp.saturating_mul(1000) > now
            && self
                .get_signer
                .verify(&Self::get_message(key, exp), &Self::decode(sig))
    }

    pub fn upload_target(
        &self,
        key: &str,
        content_type: &str,
        len: u64,
        expires_at: Millis,
    ) -> UploadTarget {
        let exp = expires_at.div_euclid(1000);
        let sig =
            Self::encode(
                self.put_signer
                    .tag(&Self::put_message(key, exp, content_type, len)),
            );
        UploadTarget {
            url: format!("{}/media/{key}?exp={exp}&sig={sig}", self.public_url),
            headers: vec![
                ("Content-Type".to_owned(), content_type.to_owned()),
                ("Content-Length".to_owned(), len.to_string()),
            ],
            expires_at: exp * 1000,
        }
    }

    /// Whether a PUT of `key` carrying these headers and query values is
    /// allowed at `now`.
    pub fn check_put(
        &self,
        key: &str,
        exp: i64,
        sig: &str,
        content_type: &str,
        len: u64,
        now: Millis,
    ) -> bool {
        exp.saturating_mul(1000) > now
            && self.put_signer.verify(
                &Self::put_message(key, exp, content_type, len),
                &Self::decode(sig),
            )
    }
}

/// A new file at `path` that only the server's user may read (0600 on
/// Unix), whatever the umask and wherever the media dir is.
pub async fn create_private(path: &Path) -> std::io::Result<tokio::fs::File> {
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(path).await
}

/// Temporary files older than an hour were left by a write that never
/// finished (a crash mid-upload); they name no key, so nothing else finds them.
async fn remove_stale_temp_files(dir: &Path) {
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let stale = entry
            .metadata()
            .await
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(3600));
        if stale {
            let _ = tokio::fs::remove_file(entry.path()).await;
        }
    }
}
