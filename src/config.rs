//! Typed settings. Every setting comes from a command-line flag or its
//! `EPHEMERA_`-prefixed environment variable (`DATABASE_URL` keeps its common
//! name); the defaults are the embedded mode: SQLite in `./ephemera-data`,
//! listening on 127.0.0.1:8080. `ephemera --help` lists them all, in the
//! sections of [`Config`]. [`Config::default`] gives the defaults without
//! reading the environment; [`Config::validate`] checks the settings that
//! must agree with each other.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::db::Dialect;
use crate::error::{AppError, AppResult};
use crate::throttle::Rate;

/// The command line of the `ephemera` binary.
#[derive(Debug, Parser)]
#[command(
    name = "ephemera",
    version,
    about = "A GraphQL server for ephemeral social content"
)]
pub struct Cli {
    #[command(flatten)]
    pub config: Config,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What the binary does; `serve` when none is given.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Migrate the database, then serve GraphQL (the default).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print the GraphQL schema (SDL) and exit.
    Schema,
    /// Run background jobs by hand.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Manage accounts.
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
}

/// `ephemera users ...`
#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Make an account a moderator (it may page through reports, take content down, suspend accounts).
    GrantModerator {
        /// The account's username (any case).
        username: String,
    },
    /// Take the moderator role back.
    RevokeModerator {
        /// The account's username (any case).
        username: String,
    },
    /// Lift an account's suspension (a moderator's too: moderators cannot
    /// suspend moderators, but an operator can reinstate anyone).
    Reinstate {
        /// The account's username (any case).
        username: String,
    },
}

/// `ephemera jobs ...`
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Run one job once, print what it did and exit.
    Run {
        /// The job to run.
        name: JobName,
    },
}

/// The jobs that can be run by hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JobName {
    /// Delete expired statuses, their seen rows and tray entries.
    StatusPurge,
    /// Delete queued blobs from the media store and sweep uploads never attached.
    MediaGc,
    /// Soft-delete ephemeral moments whose time is up.
    MomentExpiry,
    /// Hard-delete moments soft-deleted more than the grace ago, with their likes and media.
    MomentPurge,
    /// Delete change-log events older than the retention.
    EventPrune,
}

/// Where media bytes are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MediaStoreKind {
    /// Files under the data dir, served by this server at `/media/...` with signed URLs.
    Local,
    /// An S3-compatible bucket; clients fetch through presigned URLs.
    S3,
}

/// All settings, in sections.
#[derive(Clone, Debug, Args)]
pub struct Config {
    #[command(flatten)]
    pub server: ServerConfig,
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub auth: AuthConfig,
    #[command(flatten)]
    pub statuses: StatusConfig,
    #[command(flatten)]
    pub moments: MomentConfig,
    #[command(flatten)]
    pub media: MediaConfig,
    #[command(flatten)]
    pub s3: S3Config,
    #[command(flatten)]
    pub graphql: GraphqlConfig,
    #[command(flatten)]
    pub http: HttpConfig,
    #[command(flatten)]
    pub ws: WsConfig,
    #[command(flatten)]
    pub jobs: JobsConfig,
    #[command(flatten)]
    pub limits: LimitsConfig,
}

/// Limits and abuse: what one account, one address or one request may make
/// the server do. Rates are `N/DURATION` (`30/1m`: 30 at once or spread
/// over a minute, then one per 2 s), kept in the database so that they hold
/// across instances.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Limits and abuse")]
pub struct LimitsConfig {
    /// Statuses and moments one account may post.
    #[arg(long, env = "EPHEMERA_RATE_POSTS", default_value = "20/1m", value_parser = parse_rate)]
    pub rate_posts: Rate,

    /// Deletions and restores (statuses, moments) one account may make.
    #[arg(long, env = "EPHEMERA_RATE_DELETES", default_value = "30/1m", value_parser = parse_rate)]
    pub rate_deletes: Rate,

    /// Likes and unlikes one account may make.
    #[arg(long, env = "EPHEMERA_RATE_LIKES", default_value = "120/1m", value_parser = parse_rate)]
    pub rate_likes: Rate,

    /// Seen marks one account may make.
    #[arg(long, env = "EPHEMERA_RATE_SEEN", default_value = "600/1m", value_parser = parse_rate)]
    pub rate_seen: Rate,

    /// Friend requests and answers, unfriending, blocks, mutes, hidden
    /// stories and close-friend changes one account may make.
    #[arg(long, env = "EPHEMERA_RATE_SOCIAL", default_value = "60/1m", value_parser = parse_rate)]
    pub rate_social: Rate,

    /// Reports one account may file.
    #[arg(long, env = "EPHEMERA_RATE_REPORTS", default_value = "20/1h", value_parser = parse_rate)]
    pub rate_reports: Rate,

    /// Uploads and upload tickets one account may take.
    #[arg(long, env = "EPHEMERA_RATE_MEDIA", default_value = "30/1m", value_parser = parse_rate)]
    pub rate_media: Rate,

    /// Moderator actions (take-downs, suspensions, reinstatements, resolved
    /// reports) one moderator may take.
    #[arg(long, env = "EPHEMERA_RATE_MODERATION", default_value = "600/1m", value_parser = parse_rate)]
    pub rate_moderation: Rate,

    /// Sign-outs and profile changes one account may make.
    #[arg(long, env = "EPHEMERA_RATE_ACCOUNT", default_value = "30/1m", value_parser = parse_rate)]
    pub rate_account: Rate,

    /// Resumes of the `events` subscription from a cursor (each reads the
    /// log from there) one client address, and one account, may start.
    #[arg(long, env = "EPHEMERA_RATE_CATCHUP", default_value = "30/1m", value_parser = parse_rate)]
    pub rate_catchup: Rate,

    /// Registrations of persisted queries (APQ) one client address may make.
    #[arg(long, env = "EPHEMERA_RATE_PERSISTED_QUERIES", default_value = "60/1m", value_parser = parse_rate)]
    pub rate_persisted_queries: Rate,

    /// Work time one client (account, else address) may use a second on one
    /// instance (the time its operations spent being parsed, executed and
    /// waiting on the database), after a burst of `EPHEMERA_WORK_TIME_BURST`;
    /// past it, its requests are `RATE_LIMITED` until its share catches up.
    #[arg(long, env = "EPHEMERA_WORK_TIME_PER_CLIENT", default_value = "100ms", value_parser = parse_duration)]
    pub work_time_per_client: Duration,

    /// Work time one client may use at once before its share applies.
    #[arg(long, env = "EPHEMERA_WORK_TIME_BURST", default_value = "500ms", value_parser = parse_duration)]
    pub work_time_burst: Duration,

    /// How long a rate-limit refusal is held back before it is answered
    /// (at most the wait it names): a client flooding in a loop is slowed
    /// to a few attempts a second per connection.
    #[arg(long, env = "EPHEMERA_REFUSAL_DELAY", default_value = "250ms", value_parser = parse_duration)]
    pub refusal_delay: Duration,

    /// Most people on each of one account's lists: blocked, muted, stories
    /// hidden from, close friends. Past it, adding is `BAD_USER_INPUT`.
    #[arg(long, env = "EPHEMERA_MAX_RELATIONS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_relations: u32,

    /// Most database statements one GraphQL request (or one websocket
    /// operation's event) may run; past it the request ends with
    /// `RATE_LIMITED`. The backstop behind the complexity limit.
    #[arg(long, env = "EPHEMERA_REQUEST_MAX_STATEMENTS", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub request_max_statements: u32,

    /// Most database time (summed over its statements) one GraphQL request
    /// may take; past it the request ends with `RATE_LIMITED`.
    #[arg(long, env = "EPHEMERA_REQUEST_MAX_DB_TIME", default_value = "2s", value_parser = parse_duration)]
    pub request_max_db_time: Duration,
}

/// Where this instance listens and keeps its files, and how it logs.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Where this instance listens and keeps its files, and how it logs")]
pub struct ServerConfig {
    /// Address to listen on.
    #[arg(long, env = "EPHEMERA_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Directory for the embedded database, the generated JWT secret and local media.
    #[arg(long, env = "EPHEMERA_DATA_DIR", default_value = "./ephemera-data")]
    pub data_dir: PathBuf,

    /// Base URL clients reach this server at (e.g. `https://api.example.com`), put in
    /// front of local media URLs. Unset: URLs are paths (`/media/...`).
    #[arg(long, env = "EPHEMERA_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Serve the GraphiQL playground at `/`. Production: usually `false`.
    #[arg(long, env = "EPHEMERA_GRAPHIQL", default_value_t = true, action = clap::ArgAction::Set)]
    pub graphiql: bool,

    /// Answer introspection (`__schema`, `__type`). Production: `false`
    /// unless clients or tools need it (GraphiQL does).
    #[arg(long, env = "EPHEMERA_INTROSPECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub introspection: bool,

    /// A token `/metrics` requires (`Authorization: Bearer <token>`); unset,
    /// `/metrics` is open to anyone who reaches the port (node id, counts
    /// of activity): set it, or keep the port private, in production.
    #[arg(long, env = "EPHEMERA_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// Origins allowed to call the API from a browser (comma-separated). None by default.
    #[arg(long, env = "EPHEMERA_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,

    /// This instance's id (0 to 1023) in the ids it makes. Unset (the default),
    /// the instance leases a free one from the database at start, renews the
    /// lease while it lives and releases it on shutdown; set, it must be
    /// distinct per instance.
    #[arg(long, env = "EPHEMERA_NODE_ID",
          value_parser = clap::value_parser!(u16).range(0..=1023))]
    pub node_id: Option<u16>,

    /// How long a leased node id stays taken without renewal (renewed every
    /// third of it): after an instance dies, its id is free again this long
    /// after its last renewal.
    #[arg(id = "node_lease", long = "node-lease", env = "EPHEMERA_NODE_LEASE", default_value = "30s", value_parser = parse_duration)]
    pub node_lease: Duration,

    /// Log filter (`info`, `ephemera=debug,sqlx=warn`, ...).
    #[arg(long, env = "EPHEMERA_LOG", default_value = "info")]
    pub log: String,
}

/// The database.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "The database")]
pub struct DatabaseConfig {
    /// Database URL: `postgres://...` for PostgreSQL or `sqlite://path?mode=rwc`.
    /// Unset means SQLite in the data dir.
    #[arg(id = "database_url", long = "database-url", env = "DATABASE_URL")]
    pub url: Option<String>,

    /// Database connections in the pool (mutations, subscriptions, jobs);
    /// GraphQL queries hold at most as many again, kept apart.
    #[arg(
        id = "db_pool",
        long = "db-pool",
        env = "EPHEMERA_DB_POOL",
        default_value_t = 10
    )]
    pub pool: u32,
}

/// Sign-in: tokens, password hashing and attempt limits.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Sign-in")]
pub struct AuthConfig {
    /// Secret that signs tokens and cursors (at least 32 characters). Generated and
    /// kept in the data dir in embedded mode; required with PostgreSQL, and the same
    /// on every instance.
    #[arg(long, env = "EPHEMERA_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// How long a sign-in token is valid, e.g. `30d`.
    #[arg(long, env = "EPHEMERA_TOKEN_TTL", default_value = "30d", value_parser = parse_duration)]
    pub token_ttl: Duration,

    /// Passwords hashed or checked at once (argon2id: ~19 MiB and a core
    /// each for a while); 0 means half the cores (at least one), so that a
    /// flood of them leaves the rest to everything else. More wait their turn.
    #[arg(long, env = "EPHEMERA_PASSWORD_HASHERS", default_value_t = 0)]
    pub password_hashers: usize,

    /// Password checks that may wait for a hasher; past that, sign-ins and
    /// sign-ups are refused `RATE_LIMITED` at once.
    #[arg(long, env = "EPHEMERA_PASSWORD_QUEUE", default_value_t = 64)]
    pub password_queue: usize,

    /// Password attempts (sign-in, sign-up, password change, account
    /// deletion) a minute from one client address, in a burst or spread out.
    #[arg(id = "auth_attempts_per_address", long = "auth-attempts-per-address", env = "EPHEMERA_AUTH_ATTEMPTS_PER_ADDRESS", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts_per_address: u32,

    /// Password attempts one address, or one account, may make at once
    /// before the per-minute pace applies: a person mistyping a password a
    /// few times is not slowed, while a flood from many addresses starts
    /// with few password checks each.
    #[arg(id = "auth_attempts_burst", long = "auth-attempts-burst", env = "EPHEMERA_AUTH_ATTEMPTS_BURST", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts_burst: u32,

    /// Sign-in attempts a minute on one account, from anywhere.
    #[arg(id = "auth_attempts_per_account", long = "auth-attempts-per-account", env = "EPHEMERA_AUTH_ATTEMPTS_PER_ACCOUNT", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts_per_account: u32,
}

/// Statuses and their purge.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Statuses and their purge")]
pub struct StatusConfig {
    /// How long a status lives, e.g. `24h`, `90s`.
    #[arg(id = "status_ttl", long = "status-ttl", env = "EPHEMERA_STATUS_TTL", default_value = "24h", value_parser = parse_duration)]
    pub ttl: Duration,

    /// Live statuses one account may have at once; past it `createStatus` is
    /// `RATE_LIMITED` until the oldest expires. It bounds what one author's
    /// tray entry costs every reader (counted per read).
    #[arg(id = "status_max_live", long = "status-max-live", env = "EPHEMERA_STATUS_MAX_LIVE", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_live: u32,

    /// When the status purge runs: 6-field cron (seconds first), UTC.
    #[arg(
        id = "status_purge_cron",
        long = "status-purge-cron",
        env = "EPHEMERA_STATUS_PURGE_CRON",
        default_value = "0 * * * * *"
    )]
    pub purge_cron: String,

    /// Rows the status purge deletes per transaction.
    #[arg(id = "status_purge_batch", long = "status-purge-batch", env = "EPHEMERA_STATUS_PURGE_BATCH", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub purge_batch: u32,

    /// Batches one status purge run works on at once (PostgreSQL; SQLite has one writer and runs one).
    #[arg(id = "status_purge_workers", long = "status-purge-workers", env = "EPHEMERA_STATUS_PURGE_WORKERS", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub purge_workers: u32,
}

/// Moments and their two jobs.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Moments and their two jobs")]
pub struct MomentConfig {
    /// How long a deleted moment can be restored; deleted and expired moments are kept this long before the purge.
    #[arg(id = "moment_grace", long = "moment-grace", env = "EPHEMERA_MOMENT_GRACE", default_value = "7d", value_parser = parse_duration)]
    pub grace: Duration,

    /// When the moment expiry job runs (soft-deletes expired moments): 6-field cron.
    #[arg(
        id = "moment_expiry_cron",
        long = "moment-expiry-cron",
        env = "EPHEMERA_MOMENT_EXPIRY_CRON",
        default_value = "0 */5 * * * *"
    )]
    pub expiry_cron: String,

    /// When the moment purge runs (hard-deletes moments past the grace): 6-field cron.
    #[arg(
        long,
        env = "EPHEMERA_MOMENT_PURGE_CRON",
        default_value = "0 17 3 * * *"
    )]
    pub moment_purge_cron: String,

    /// Rows the moment jobs handle per transaction.
    #[arg(id = "moment_batch", long = "moment-batch", env = "EPHEMERA_MOMENT_BATCH", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,
}

/// Media: the store, upload limits and quotas, the media job.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Media")]
pub struct MediaConfig {
    /// Where media bytes are kept: `local` (files in the data dir) or `s3`.
    #[arg(
        id = "media_store",
        long = "media-store",
        env = "EPHEMERA_MEDIA_STORE",
        value_enum,
        default_value = "local"
    )]
    pub store: MediaStoreKind,

    /// Directory of the local media store. Default: `media` in the data dir.
    #[arg(id = "media_dir", long = "media-dir", env = "EPHEMERA_MEDIA_DIR")]
    pub dir: Option<PathBuf>,

    /// Largest media file in bytes (uploads and direct uploads).
    #[arg(long, env = "EPHEMERA_MAX_UPLOAD_BYTES", default_value_t = 15 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=5 * 1024 * 1024 * 1024))]
    pub max_upload_bytes: u64,

    /// Most pixels (width × height, as the image's header says) an uploaded
    /// image may have.
    #[arg(long, env = "EPHEMERA_MAX_IMAGE_PIXELS", default_value_t = 100_000_000)]
    pub max_image_pixels: u64,

    /// Direct-upload tickets (`requestMediaUpload`) one account may hold
    /// unused at once; one more is `RATE_LIMITED`.
    #[arg(long, env = "EPHEMERA_UPLOAD_PENDING_MAX", default_value_t = 10)]
    pub upload_pending_max: i64,

    /// Bytes one account may upload in 24 hours (uploads and tickets, at
    /// their declared size); more is `RATE_LIMITED`.
    #[arg(long, env = "EPHEMERA_UPLOAD_BYTES_PER_DAY", default_value_t = 512 * 1024 * 1024)]
    pub upload_bytes_per_day: i64,

    /// Uploads judged at once (each holds up to twice the upload limit in
    /// memory while it is checked); more wait their turn.
    #[arg(long, env = "EPHEMERA_MAX_CONCURRENT_UPLOADS", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_concurrent_uploads: u32,

    /// How long a media URL stays valid (at least this, at most twice this, so that
    /// URLs stay the same for a while and clients can cache them).
    #[arg(id = "media_url_ttl", long = "media-url-ttl", env = "EPHEMERA_MEDIA_URL_TTL", default_value = "1h", value_parser = parse_duration)]
    pub url_ttl: Duration,

    /// How long a direct-upload ticket (`requestMediaUpload`) accepts the bytes.
    #[arg(long, env = "EPHEMERA_UPLOAD_TICKET_TTL", default_value = "15m", value_parser = parse_duration)]
    pub upload_ticket_ttl: Duration,

    /// Uploads not attached to a status or moment within this time are deleted.
    #[arg(id = "media_unattached_ttl", long = "media-unattached-ttl", env = "EPHEMERA_MEDIA_UNATTACHED_TTL", default_value = "24h", value_parser = parse_duration)]
    pub unattached_ttl: Duration,

    /// When the media job runs (blob deletions, sweep of unattached uploads): 6-field cron.
    #[arg(
        id = "media_gc_cron",
        long = "media-gc-cron",
        env = "EPHEMERA_MEDIA_GC_CRON",
        default_value = "30 * * * * *"
    )]
    pub gc_cron: String,

    /// Blobs the media job claims per round.
    #[arg(id = "media_gc_batch", long = "media-gc-batch", env = "EPHEMERA_MEDIA_GC_BATCH", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub gc_batch: u32,

    /// How long blobs claimed by one instance's media round are left to it:
    /// if that instance dies mid-round, another takes them over after this.
    /// Longer than a round of `EPHEMERA_MEDIA_GC_BATCH` deletions takes.
    #[arg(id = "media_claim_lease", long = "media-claim-lease", env = "EPHEMERA_MEDIA_CLAIM_LEASE", default_value = "10m", value_parser = parse_duration)]
    pub claim_lease: Duration,

    /// Wait before retrying a failed blob deletion; doubles per failure up to
    /// `EPHEMERA_MEDIA_RETRY_MAX`.
    #[arg(id = "media_retry_base", long = "media-retry-base", env = "EPHEMERA_MEDIA_RETRY_BASE", default_value = "30s", value_parser = parse_duration)]
    pub retry_base: Duration,

    /// Longest wait between retries of a blob deletion.
    #[arg(id = "media_retry_max", long = "media-retry-max", env = "EPHEMERA_MEDIA_RETRY_MAX", default_value = "6h", value_parser = parse_duration)]
    pub retry_max: Duration,
}

/// The S3 store (with `EPHEMERA_MEDIA_STORE=s3`).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "The S3 store (with `EPHEMERA_MEDIA_STORE=s3`)")]
pub struct S3Config {
    /// S3 bucket (with `EPHEMERA_MEDIA_STORE=s3`).
    #[arg(id = "s3_bucket", long = "s3-bucket", env = "EPHEMERA_S3_BUCKET")]
    pub bucket: Option<String>,

    /// S3 endpoint URL for S3-compatible servers (MinIO, R2, ...). Unset: AWS.
    #[arg(id = "s3_endpoint", long = "s3-endpoint", env = "EPHEMERA_S3_ENDPOINT")]
    pub endpoint: Option<String>,

    /// S3 region. Unset: the standard AWS environment, else `us-east-1`.
    #[arg(id = "s3_region", long = "s3-region", env = "EPHEMERA_S3_REGION")]
    pub region: Option<String>,

    /// Path-style bucket addressing (`endpoint/bucket/key`), which most
    /// S3-compatible servers need.
    #[arg(id = "s3_path_style", long = "s3-path-style", env = "EPHEMERA_S3_PATH_STYLE", default_value_t = false, action = clap::ArgAction::Set)]
    pub path_style: bool,

    /// S3 access key id. Unset: the standard AWS credential chain
    /// (`AWS_ACCESS_KEY_ID`, profiles, web identity, instance roles).
    #[arg(
        id = "s3_access_key_id",
        long = "s3-access-key-id",
        env = "EPHEMERA_S3_ACCESS_KEY_ID"
    )]
    pub access_key_id: Option<String>,

    /// S3 secret access key, with `EPHEMERA_S3_ACCESS_KEY_ID`.
    #[arg(
        id = "s3_secret_access_key",
        long = "s3-secret-access-key",
        env = "EPHEMERA_S3_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub secret_access_key: Option<String>,
}

/// What one GraphQL request may ask.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "What one GraphQL request may ask")]
pub struct GraphqlConfig {
    /// Largest page a connection returns; larger `first`/`last` are clamped to it.
    #[arg(long, env = "EPHEMERA_MAX_PAGE_SIZE", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_page_size: u32,

    /// Most lexical tokens in a query document (names, punctuation, values),
    /// counted on the raw text before it is parsed.
    #[arg(
        id = "max_query_tokens",
        long = "max-query-tokens",
        env = "EPHEMERA_MAX_QUERY_TOKENS",
        default_value_t = 10_000
    )]
    pub max_tokens: usize,

    /// Deepest nesting of brackets (`{`, `[`, `(`) in a query document,
    /// selections and argument values alike, checked before it is parsed.
    #[arg(
        id = "max_query_nesting",
        long = "max-query-nesting",
        env = "EPHEMERA_MAX_QUERY_NESTING",
        default_value_t = 64
    )]
    pub max_nesting: usize,

    /// Most fields a query selects with its fragments expanded (a fragment
    /// spread twice counts twice).
    #[arg(
        id = "max_query_fields",
        long = "max-query-fields",
        env = "EPHEMERA_MAX_QUERY_FIELDS",
        default_value_t = 2_000
    )]
    pub max_fields: usize,

    /// Deepest query accepted.
    #[arg(
        id = "max_query_depth",
        long = "max-query-depth",
        env = "EPHEMERA_MAX_QUERY_DEPTH",
        default_value_t = 12
    )]
    pub max_depth: usize,

    /// Highest query complexity accepted (each field counts 1, lists count per item asked).
    #[arg(
        id = "max_query_complexity",
        long = "max-query-complexity",
        env = "EPHEMERA_MAX_QUERY_COMPLEXITY",
        default_value_t = 5000
    )]
    pub max_complexity: usize,

    /// Most aliases in one query.
    #[arg(long, env = "EPHEMERA_MAX_ALIASES", default_value_t = 30)]
    pub max_aliases: usize,

    /// Most operations in one batched request.
    #[arg(long, env = "EPHEMERA_MAX_BATCH", default_value_t = 10)]
    pub max_batch: usize,
}

/// HTTP connections and request bodies.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "HTTP connections and request bodies")]
pub struct HttpConfig {
    /// Largest request body in bytes (JSON requests), and largest websocket message.
    #[arg(long, env = "EPHEMERA_MAX_BODY_BYTES", default_value_t = 1_048_576)]
    pub max_body_bytes: usize,

    /// How long a client may take to send a request's head (the first on a
    /// connection, or the next on a kept-alive one) before the connection is
    /// closed; so also how long an idle kept-alive connection stays open.
    /// Keep it longer than the idle timeout of whatever sits in front (a load
    /// balancer's, often 60 s), or that may reuse a connection just closed.
    #[arg(id = "http_header_timeout", long = "http-header-timeout", env = "EPHEMERA_HTTP_HEADER_TIMEOUT", default_value = "75s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// How long a write to a client (a response, a websocket message) may
    /// wait for the client to read before the connection is closed.
    #[arg(id = "http_write_timeout", long = "http-write-timeout", env = "EPHEMERA_HTTP_WRITE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub write_timeout: Duration,

    /// The most bytes of a request head (request line and headers) read
    /// and buffered; a larger head is refused with 431 (at least 8192).
    #[arg(id = "http_max_head_bytes", long = "http-max-head-bytes", env = "EPHEMERA_HTTP_MAX_HEAD_BYTES", default_value_t = 16_384,
          value_parser = clap::value_parser!(u32).range(8192..))]
    pub max_head_bytes: u32,

    /// How long a request body may take to arrive, from its head on (uploads
    /// included: 15 MiB in 2 minutes is 1 Mbit/s). A slower body fails and
    /// its connection closes.
    #[arg(id = "http_body_timeout", long = "http-body-timeout", env = "EPHEMERA_HTTP_BODY_TIMEOUT", default_value = "2m", value_parser = parse_duration)]
    pub body_timeout: Duration,

    /// Most open connections (HTTP and websockets); more are closed as they
    /// are accepted. Keep it under the process's file limit (`ulimit -n`).
    #[arg(long, env = "EPHEMERA_MAX_CONNECTIONS", default_value_t = 20_000)]
    pub max_connections: usize,

    /// Most open connections from one client address (behind a proxy, every
    /// client shares the proxy's address: raise it there).
    #[arg(
        long,
        env = "EPHEMERA_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 256
    )]
    pub max_connections_per_address: usize,

    /// Proxies in front of this server whose `X-Forwarded-For` is trusted:
    /// 0 (the default) ignores the header and uses the peer address; N takes
    /// the client address N entries from the right of the header (each
    /// proxy appends the address it was reached from).
    #[arg(long, env = "EPHEMERA_TRUSTED_PROXIES", default_value_t = 0)]
    pub trusted_proxies: usize,
}

/// Websockets and subscriptions.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Websockets and subscriptions")]
pub struct WsConfig {
    /// How long a new websocket may take to send `connection_init` before it is
    /// closed (code 4408, as graphql-transport-ws says).
    #[arg(id = "ws_init_timeout", long = "ws-init-timeout", env = "EPHEMERA_WS_INIT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub init_timeout: Duration,

    /// How often a websocket is pinged; one silent for three of these is closed.
    #[arg(id = "ws_keepalive", long = "ws-keepalive", env = "EPHEMERA_WS_KEEPALIVE", default_value = "20s", value_parser = parse_duration)]
    pub keepalive: Duration,

    /// Operations (subscriptions, queries) open at once on one websocket;
    /// one more is answered with an `error` message (`RATE_LIMITED`).
    #[arg(
        id = "ws_max_operations",
        long = "ws-max-operations",
        env = "EPHEMERA_WS_MAX_OPERATIONS",
        default_value_t = 100
    )]
    pub max_operations: usize,

    /// Open websockets on this instance; more are refused (503, `RATE_LIMITED`).
    #[arg(
        id = "max_websockets",
        long = "max-websockets",
        env = "EPHEMERA_MAX_WEBSOCKETS",
        default_value_t = 10_000
    )]
    pub max_sockets: usize,

    /// Open websockets from one client address.
    #[arg(
        id = "max_websockets_per_address",
        long = "max-websockets-per-address",
        env = "EPHEMERA_MAX_WEBSOCKETS_PER_ADDRESS",
        default_value_t = 64
    )]
    pub max_sockets_per_address: usize,

    /// Pages of events buffered per subscription; one whose buffer is full
    /// catches up from the change log (nothing is skipped).
    #[arg(long, env = "EPHEMERA_EVENT_BUFFER", default_value_t = 256)]
    pub event_buffer: usize,

    /// How often each instance reads the change log for events written by the
    /// others (a write on this instance wakes its reader sooner: at most one
    /// read per 100 ms, or per this if shorter).
    #[arg(id = "event_poll", long = "event-poll", env = "EPHEMERA_EVENT_POLL", default_value = "100ms", value_parser = parse_duration)]
    pub event_poll: Duration,

    /// Events read from the change log at once (by the reader, and by a
    /// subscriber catching up).
    #[arg(id = "event_page", long = "event-page", env = "EPHEMERA_EVENT_PAGE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub event_page: u32,

    /// How long events are kept: a client may resume from a cursor this old;
    /// an older one is refused with `CURSOR_EXPIRED`.
    #[arg(id = "event_retention", long = "event-retention", env = "EPHEMERA_EVENT_RETENTION", default_value = "24h", value_parser = parse_duration)]
    pub event_retention: Duration,

    /// When the change log is pruned of events older than the retention
    /// (cron, 6 fields, UTC).
    #[arg(
        id = "event_prune_cron",
        long = "event-prune-cron",
        env = "EPHEMERA_EVENT_PRUNE_CRON",
        default_value = "0 */10 * * * *"
    )]
    pub event_prune_cron: String,
}

/// The scheduled jobs.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "The scheduled jobs")]
pub struct JobsConfig {
    /// Run the scheduled jobs in this instance. Safe on several instances at once.
    #[arg(id = "jobs", long = "jobs", env = "EPHEMERA_JOBS", default_value_t = true, action = clap::ArgAction::Set)]
    pub enabled: bool,
}

impl Default for Config {
    /// Every default (the embedded mode), from the same attributes the
    /// command line is read with, but with no environment variable read:
    /// a test or a tool gets the same defaults whatever its environment.
    fn default() -> Self {
        let command =
            Config::augment_args(clap::Command::new("ephemera")).mut_args(|a| a.env(None));
        // Parsing an empty command line cannot fail (a unit test runs it);
        // if it did, clap would say why and exit, as `Cli::parse` does.
        Config::from_arg_matches(&command.get_matches_from(["ephemera"]))
            .unwrap_or_else(|e| e.exit())
    }
}

impl Config {
    /// Checks what no single setting's parser can: settings that must agree
    /// with each other or with the database. `BAD_USER_INPUT` names the
    /// setting.
    pub fn validate(&self) -> AppResult<()> {
        if self.http.header_timeout.is_zero() {
            return Err(AppError::bad_input(
                "EPHEMERA_HTTP_HEADER_TIMEOUT must be longer than zero",
            ));
        }
        if self.http.write_timeout.is_zero() {
            return Err(AppError::bad_input(
                "EPHEMERA_HTTP_WRITE_TIMEOUT must be longer than zero",
            ));
        }
        if self.http.body_timeout.is_zero() {
            return Err(AppError::bad_input(
                "EPHEMERA_HTTP_BODY_TIMEOUT must be longer than zero",
            ));
        }
        if self.server.node_lease < Duration::from_secs(1) {
            return Err(AppError::bad_input(
                "EPHEMERA_NODE_LEASE must be at least 1s",
            ));
        }
        if self.ws.event_poll.is_zero() || self.media.claim_lease.is_zero() {
            return Err(AppError::bad_input(
                "EPHEMERA_EVENT_POLL and EPHEMERA_MEDIA_CLAIM_LEASE must be longer than zero",
            ));
        }
        if self.media.unattached_ttl <= self.media.upload_ticket_ttl {
            return Err(AppError::bad_input(
                "EPHEMERA_MEDIA_UNATTACHED_TTL must be longer than EPHEMERA_UPLOAD_TICKET_TTL",
            ));
        }
        match &self.auth.jwt_secret {
            Some(secret) if secret.len() < 32 => Err(AppError::bad_input(
                "EPHEMERA_JWT_SECRET must be at least 32 characters",
            )),
            None if !self.dialect().is_embedded() => Err(AppError::bad_input(
                "EPHEMERA_JWT_SECRET is required with PostgreSQL (the same value on every instance)",
            )),
            _ => Ok(()),
        }
    }

    /// The database URL in force: the configured one or SQLite in the data dir.
    pub fn effective_database_url(&self) -> String {
        match &self.database.url {
            Some(url) => url.clone(),
            None => format!(
                "sqlite://{}?mode=rwc",
                self.server.data_dir.join("ephemera.db").display()
            ),
        }
    }

    /// The directory of the local media store.
    pub fn effective_media_dir(&self) -> PathBuf {
        self.media
            .dir
            .clone()
            .unwrap_or_else(|| self.server.data_dir.join("media"))
    }

    /// The database's dialect.
    pub fn dialect(&self) -> Dialect {
        Dialect::from_url(&self.effective_database_url())
    }
}

/// Parses `24h`, `90s`, `30d`, `1h 30m`.
/// `N/DURATION`, e.g. `30/1m` (see [`Rate`]).
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    s.parse()
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("not a duration like 24h or 90s: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_embedded_mode() {
        let c = Config::default();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.statuses.ttl, Duration::from_secs(86_400));
        assert_eq!(c.auth.token_ttl, Duration::from_secs(30 * 86_400));
        assert_eq!(c.statuses.purge_batch, 500);
        assert_eq!(c.statuses.purge_workers, 2);
        assert!(c.dialect().is_embedded());
        assert!(c.effective_database_url().starts_with("sqlite://"));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn defaults_do_not_read_the_environment() {
        // Setting a variable needs `unsafe` (forbidden here): instead, the
        // command line does read the variables, and the defaults do not.
        let from_cli = Cli::parse_from(["ephemera", "--status-ttl", "90s"]).config;
        assert_eq!(from_cli.statuses.ttl, Duration::from_secs(90));
        assert_eq!(Config::default().statuses.ttl, Duration::from_secs(86_400));
        let flagged = Config::augment_args(clap::Command::new("x"));
        assert!(
            flagged
                .get_arguments()
                .any(|a| a.get_env().is_some_and(|e| e == "EPHEMERA_STATUS_TTL")),
            "the command line still reads the environment"
        );
    }

    #[test]
    fn settings_that_disagree_are_refused() {
        let mut c = Config::default();
        c.http.header_timeout = Duration::ZERO;
        assert!(c.validate().is_err());
        let mut c = Config::default();
        c.media.unattached_ttl = c.media.upload_ticket_ttl;
        assert!(c.validate().is_err());
        let mut c = Config::default();
        c.auth.jwt_secret = Some("short".into());
        assert!(c.validate().is_err());
        let mut c = Config::default();
        c.database.url = Some("postgres://u@h/db".into());
        assert!(c.validate().is_err());
        c.auth.jwt_secret = Some("x".repeat(32));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("soon").is_err());
    }
}
