//! The application: [`AppState`] (database, media store, clock, ids, events,
//! keys, settings) and [`App`], which connects, migrates, builds the schema and the
//! router, starts the jobs, binds, and serves until told to stop.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rand::RngCore;
use sea_orm::DatabaseConnection;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::auth::{Passwords, TokenKeys};
use crate::clock::{Clock, duration_millis};
use crate::config::Config;
use crate::db::{self, DbStats, QueryConnections};
use crate::domain::media::MediaStats;
use crate::domain::page::Cursors;
use crate::domain::session::AliveSessions;
use crate::error::{AppError, AppResult};
use crate::events::EventBus;
use crate::ids::IdGenerator;
use crate::storage::MediaStore;
use crate::throttle::Attempts;
use crate::{graphql, http, jobs};

/// What every request, job and resolver shares. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub config: Arc<Config>,
    pub clock: Clock,
    pub ids: Arc<IdGenerator>,
    pub events: EventBus,
    pub tokens: Arc<TokenKeys>,
    pub cursors: Arc<Cursors>,
    pub db_stats: Arc<DbStats>,
    /// The connections GraphQL queries hold, apart from the pool (see
    /// [`db::RequestDb`]).
    pub query_conns: Arc<QueryConnections>,
    pub media: MediaStore,
    /// Bounds the uploads judged at once (see `EPHEMERA_MAX_CONCURRENT_UPLOADS`).
    pub media_work: Arc<Semaphore>,
    pub media_stats: Arc<MediaStats>,
    /// Password hashing, bounded (see [`crate::auth::Passwords`]).
    pub passwords: Arc<Passwords>,
    /// Password-attempt limits per client address and account.
    pub attempts: Arc<Attempts>,
    /// Sessions this instance found alive lately.
    pub sessions: Arc<AliveSessions>,
}

impl AppState {
    /// Connects to the database and migrates it; does not bind or start jobs.
    pub async fn connect(config: Config, clock: Clock) -> AppResult<Self> {
        let secret = jwt_secret(&config).await?;
        let db_stats = Arc::new(DbStats::default());
        if !config.is_postgres() {
            tokio::fs::create_dir_all(&config.data_dir)
                .await
                .map_err(|e| AppError::internal("creating the data dir", e))?;
            // The database holds password hashes, the dir the secret and
            // media: readable by the owner only.
            restrict_permissions(&config.data_dir, 0o700).await;
            if let Some(file) = sqlite_file(&config.effective_database_url()) {
                create_private(&file).await?;
            }
        }
        let db = db::connect(
            &config.effective_database_url(),
            config.db_pool,
            db_stats.clone(),
        )
        .await?;
        migrate(&db).await?;
        if config.http_header_timeout.is_zero() {
            return Err(AppError::bad_input(
                "EPHEMERA_HTTP_HEADER_TIMEOUT must be longer than zero",
            ));
        }
        if config.http_body_timeout.is_zero() {
            return Err(AppError::bad_input(
                "EPHEMERA_HTTP_BODY_TIMEOUT must be longer than zero",
            ));
        }
        if config.media_unattached_ttl <= config.upload_ticket_ttl {
            return Err(AppError::bad_input(
                "EPHEMERA_MEDIA_UNATTACHED_TTL must be longer than EPHEMERA_UPLOAD_TICKET_TTL",
            ));
        }
        let media = MediaStore::open(&config, secret.as_bytes()).await?;
        Ok(Self {
            media,
            media_work: Arc::new(Semaphore::new(config.max_concurrent_uploads as usize)),
            media_stats: Arc::new(MediaStats::default()),
            passwords: Arc::new(Passwords::new(
                match config.password_hashers {
                    // Half the cores: a flood of password checks from many
                    // addresses leaves the other half to everything else.
                    0 => (std::thread::available_parallelism().map_or(2, usize::from) / 2).max(1),
                    n => n,
                },
                config.password_queue,
            )),
            attempts: Arc::new(Attempts::new(
                config.auth_attempts_per_address,
                config.auth_attempts_per_account,
            )),
            sessions: Arc::new(AliveSessions::default()),
            db,
            tokens: Arc::new(TokenKeys::new(
                secret.as_bytes(),
                duration_millis(config.token_ttl),
            )),
            cursors: Arc::new(Cursors::new(secret.as_bytes())),
            query_conns: Arc::new(QueryConnections::new(config.db_pool)),
            ids: Arc::new(IdGenerator::new(config.node_id)),
            events: EventBus::new(config.event_buffer),
            config: Arc::new(config),
            clock,
            db_stats,
        })
    }
}

/// Applies pending migrations.
pub async fn migrate(db: &DatabaseConnection) -> AppResult<()> {
    use migration::MigratorTrait;
    migration::Migrator::up(db, None)
        .await
        .map_err(|e| AppError::internal("migrating the database", e))
}

/// The configured JWT secret, or in embedded mode the one kept in the data
/// dir (generated on first start). PostgreSQL deployments must configure it,
/// the same on every instance.
async fn jwt_secret(config: &Config) -> AppResult<String> {
    if let Some(secret) = &config.jwt_secret {
        if secret.len() < 32 {
            return Err(AppError::bad_input(
                "EPHEMERA_JWT_SECRET must be at least 32 characters",
            ));
        }
        return Ok(secret.clone());
    }
    if config.is_postgres() {
        return Err(AppError::bad_input(
            "EPHEMERA_JWT_SECRET is required with PostgreSQL (the same value on every instance)",
        ));
    }
    let path = config.data_dir.join("jwt-secret");
    match tokio::fs::read_to_string(&path).await {
        Ok(s) if s.trim().len() >= 32 => Ok(s.trim().to_owned()),
        _ => generate_secret(&config.data_dir, &path).await,
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

/// A running server.
pub struct App {
    state: AppState,
    listener: TcpListener,
    router: axum::Router,
    scheduler: Option<jobs::Scheduler>,
}

impl App {
    /// Connects, migrates, builds the schema and router, binds the listen
    /// address (port 0 picks a free port) and starts the jobs if enabled.
    pub async fn build(config: Config, clock: Clock) -> AppResult<Self> {
        let listen = config.listen;
        let state = AppState::connect(config, clock).await?;
        let schema = graphql::build_schema(state.clone());
        let router = http::router(state.clone(), schema);
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| AppError::internal("binding the listen address", e))?;
        let scheduler = if state.config.jobs {
            Some(jobs::Scheduler::start(state.clone()).await?)
        } else {
            None
        };
        Ok(Self {
            state,
            listener,
            router,
            scheduler,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> AppResult<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| AppError::internal("reading the listen address", e))
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` turns true (or its sender is dropped).
    pub async fn run_until(self, mut shutdown: watch::Receiver<bool>) -> AppResult<()> {
        let signal = async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        };
        let config = &self.state.config;
        let limits = http::ServeLimits {
            header_timeout: config.http_header_timeout,
            body_timeout: config.http_body_timeout,
            max_connections: config.max_connections,
            max_connections_per_address: config.max_connections_per_address,
        };
        http::serve(self.listener, self.router, limits, signal).await;
        if let Some(scheduler) = self.scheduler {
            scheduler.stop().await;
        }
        self.state.query_conns.close().await;
        self.state.db.clone().close().await.ok();
        Ok(())
    }
}
