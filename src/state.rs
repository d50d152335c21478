//! What the layers below the wiring share: [`AppState`] (database, clock,
//! ids, media, events, keys, settings) and the two bundles domain paths
//! take whole, [`Media`] and [`Accounts`]. It sits below the domain, so the
//! domain, the jobs, GraphQL and HTTP all reach the same state, and it
//! imports nothing above it. `app.rs` only assembles it ([`AppState::connect`])
//! and serves.

use std::path::Path;
use std::sync::Arc;

use rand::RngCore;
use sea_orm::DatabaseConnection;
use tokio::sync::Semaphore;

use crate::auth::{AliveSessions, Passwords, TokenKeys};
use crate::clock::{Clock, duration_millis};
use crate::config::{Config, MediaConfig};
use crate::cursor::Cursors;
use crate::db::{self, DbStats, QueryConnections};
use crate::error::{AppError, AppResult};
use crate::events::EventBus;
use crate::ids::{IdGenerator, NodeLease};
use crate::storage::{MediaStats, MediaStore};
use crate::throttle::{Limiter, WorkMeter, WriteRates};

/// Connections of the change log's pool: one for the reader, the rest for
/// subscribers catching up (a thousand reconnecting at once queue here,
/// not in front of every other request).
const LOG_POOL: u32 = 4;

/// What every request, job and resolver shares. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub config: Arc<Config>,
    pub clock: Clock,
    pub ids: Arc<IdGenerator>,
    /// The lease on the node id in `ids`, unless `EPHEMERA_NODE_ID` set it.
    pub node_lease: Option<Arc<NodeLease>>,
    pub events: EventBus,
    pub cursors: Arc<Cursors>,
    pub db_stats: Arc<DbStats>,
    /// The change log's own small pool: the reader's polls and subscribers'
    /// catch-ups, apart from (and bounded apart from) everything else, with
    /// statements counted apart (`ephemera_event_log_statements_total`).
    pub log_db: DatabaseConnection,
    pub log_stats: Arc<DbStats>,
    /// The change-log reader's own connection, on which it decides its
    /// pages (`app::decide`; statements counted with the main pool's).
    /// PostgreSQL plans a prepared statement anew for its first five runs
    /// on a connection: spread over the main pool, the reader's statements
    /// were planned on most pages of a run; here they are planned once.
    pub reader_db: DatabaseConnection,
    /// The connections GraphQL queries hold, apart from the pool (see
    /// [`db::RequestDb`]).
    pub query_conns: Arc<QueryConnections>,
    pub media: Media,
    pub accounts: Accounts,
    /// Each client's share of work time on this instance.
    pub work: Arc<WorkMeter>,
}

/// The media store and what bounds its use: what the domain's media paths
/// take.
#[derive(Clone, Debug)]
pub struct Media {
    pub store: MediaStore,
    /// Bounds the uploads judged at once (`EPHEMERA_MAX_CONCURRENT_UPLOADS`).
    pub slots: Arc<Semaphore>,
    pub stats: Arc<MediaStats>,
    pub config: Arc<MediaConfig>,
}

/// Accounts and sign-in: what the domain's user and session paths take.
#[derive(Clone, Debug)]
pub struct Accounts {
    /// Password hashing, bounded (see [`Passwords`]).
    pub passwords: Arc<Passwords>,
    /// Rate limits: every write per account, password attempts per client
    /// address and account (kept in the database).
    pub limits: Arc<Limiter>,
    /// Sessions this instance found alive lately.
    pub sessions: Arc<AliveSessions>,
    pub tokens: Arc<TokenKeys>,
    /// Where ended sessions are announced (their websockets close).
    pub events: EventBus,
}

impl AppState {
    /// Checks the settings, connects to the database and migrates it; does
    /// not bind or start jobs.
    pub async fn connect(config: Config, clock: Clock) -> AppResult<Self> {
        config.validate()?;
        let secret = jwt_secret(&config).await?;
        let db_stats = Arc::new(DbStats::default());
        if config.dialect().is_embedded() {
            let dir = &config.server.data_dir;
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| AppError::internal("creating the data dir", e))?;
            // The database holds password hashes, the dir the secret and
            // media: readable by the owner only.
            restrict_permissions(dir, 0o700).await;
            if let Some(file) = sqlite_file(&config.effective_database_url()) {
                create_private(&file).await?;
            }
        }
        let db = db::connect(
            &config.effective_database_url(),
            config.database.pool,
            db_stats.clone(),
        )
        .await?;
        db::migrate(&db).await?;
        let log_stats = Arc::new(DbStats::default());
        let log_db = db::connect(
            &config.effective_database_url(),
            LOG_POOL,
            log_stats.clone(),
        )
        .await?;
        let reader_db = db::connect(&config.effective_database_url(), 1, db_stats.clone()).await?;
        let (ids, node_lease) = match config.server.node_id {
            Some(node) => (IdGenerator::new(node), None),
            None => {
                let lease = NodeLease::new(config.server.node_lease);
                let node = lease.acquire(&db).await?;
                tracing::info!(node, "leased a node id");
                (IdGenerator::new(node), Some(Arc::new(lease)))
            }
        };
        let events = EventBus::new(config.ws.event_buffer);
        let media = Media {
            store: MediaStore::open(&config, secret.as_bytes()).await?,
            slots: Arc::new(Semaphore::new(config.media.max_concurrent_uploads as usize)),
            stats: Arc::new(MediaStats::default()),
            config: Arc::new(config.media.clone()),
        };
        let hashers = match config.auth.password_hashers {
            // Half the cores: a flood of password checks from many
            // addresses leaves the other half to everything else.
            0 => (std::thread::available_parallelism().map_or(2, usize::from) / 2).max(1),
            n => n,
        };
        let accounts = Accounts {
            passwords: Arc::new(Passwords::new(hashers, config.auth.password_queue)),
            limits: Arc::new(Limiter::new(
                write_rates(&config),
                config.limits.rate_catchup,
                config.auth.attempts_per_address,
                config.auth.attempts_per_account,
                config.auth.attempts_burst,
                config.limits.refusal_delay,
            )),
            sessions: Arc::new(AliveSessions::default()),
            tokens: Arc::new(TokenKeys::new(
                secret.as_bytes(),
                duration_millis(config.auth.token_ttl),
            )),
            events: events.clone(),
        };
        Ok(Self {
            work: Arc::new(WorkMeter::new(
                config.limits.work_time_per_client,
                config.limits.work_time_burst,
                config.limits.refusal_delay,
            )),
            media,
            accounts,
            db,
            cursors: Arc::new(Cursors::new(secret.as_bytes())),
            query_conns: Arc::new(QueryConnections::new(config.database.pool)),
            ids: Arc::new(ids),
            node_lease,
            events,
            config: Arc::new(config),
            clock,
            db_stats,
            log_db,
            log_stats,
            reader_db,
        })
    }
}

/// The per-account rate of each kind of write, from the settings.
fn write_rates(config: &Config) -> WriteRates {
    let l = &config.limits;
    WriteRates {
        post: l.rate_posts,
        delete: l.rate_deletes,
        like: l.rate_likes,
        seen: l.rate_seen,
        social: l.rate_social,
        report: l.rate_reports,
        media: l.rate_media,
        moderate: l.rate_moderation,
        account: l.rate_account,
    }
}

impl AppState {
    /// Keeps the node id leased while `stop` is false: renews every third
    /// of the lease; if the lease was lost (this instance could not renew
    /// it in time and another took the id), leases another and makes ids
    /// with that from then on. Releases the id when stopped.
    pub async fn keep_node(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Some(lease) = self.node_lease.clone() else {
            return;
        };
        while !*stop.borrow() {
            tokio::select! {
                () = tokio::time::sleep(lease.renew_every()) => {}
                _ = stop.changed() => continue,
            }
            let node = self.ids.node();
            match lease.renew(&self.db, node).await {
                Ok(true) => {}
                Ok(false) => match lease.acquire(&self.db).await {
                    Ok(new) => {
                        tracing::warn!(old = node, new, "node id lease lost; leased another");
                        self.ids.set_node(new);
                    }
                    Err(e) => e.log(),
                },
                Err(e) => {
                    e.log();
                    tracing::warn!(node, "renewing the node id lease failed; trying again");
                }
            }
        }
        self.release_node().await;
    }

    /// Gives the leased node id back (a CLI command that is done, a server
    /// that stops).
    pub async fn release_node(&self) {
        if let Some(lease) = &self.node_lease
            && let Err(e) = lease.release(&self.db, self.ids.node()).await
        {
            e.log();
        }
    }
}

/// The configured JWT secret, or in embedded mode the one kept in the data
/// dir (generated on first start). A server database needs it configured,
/// the same on every instance ([`Config::validate`] says so).
async fn jwt_secret(config: &Config) -> AppResult<String> {
    if let Some(secret) = &config.auth.jwt_secret {
        return Ok(secret.clone());
    }
    let dir = &config.server.data_dir;
    let path = dir.join("jwt-secret");
    match tokio::fs::read_to_string(&path).await {
        Ok(s) if s.trim().len() >= 32 => Ok(s.trim().to_owned()),
        _ => generate_secret(dir, &path).await,
    }
}

async fn generate_secret(dir: &Path, path: &Path) -> AppResult<String> {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| AppError::internal("creating the data dir", e))?;
    tokio::fs::write(path, &secret)
        .await
        .map_err(|e| AppError::internal("writing the JWT secret", e))?;
    restrict_permissions(path, 0o600).await;
    Ok(secret)
}

/// The file of an SQLite URL (`sqlite://path?...`), unless in memory.
fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next()?;
    (!path.is_empty() && !path.contains(":memory:")).then(|| path.into())
}

/// Creates `file` empty and readable by its owner only, if it does not
/// exist (SQLite gives its journal and WAL files the database file's mode);
/// an existing file is made owner-only too.
async fn create_private(file: &Path) -> AppResult<()> {
    if tokio::fs::metadata(file).await.is_err() {
        tokio::fs::File::create(file)
            .await
            .map_err(|e| AppError::internal("creating the database file", e))?;
    }
    restrict_permissions(file, 0o600).await;
    Ok(())
}

#[cfg(unix)]
async fn restrict_permissions(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).await;
}

#[cfg(not(unix))]
async fn restrict_permissions(_path: &Path, _mode: u32) {}
