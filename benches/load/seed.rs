//! The benchmark's database: created fresh, migrated by the real binary, and
//! filled with SQL (`generate_series` on PostgreSQL, a recursive CTE on
//! SQLite), never one mutation at a time.
//!
//! The data is deterministic. Row `i` takes its attributes from
//! `h = i * 2654435761 mod 1000003`, a spread of the numbers 0..1e6:
//! - accounts `1..=users`, each with `friends` accepted friends (50 unless
//!   told: `i ± k * users/(friends + 1)`);
//! - live statuses created over the last 23 hours by `1 + i * 7919 mod users`,
//!   one in four with media; a tray summary row per author;
//! - moments: 10 % around Paris, the rest around 99 other cities, each within
//!   a 5 x 5 block of 0.1-degree map cells; half PUBLIC; a third attached to one
//!   of 1,000 locations (10 per city); one in ten journaled; every one with media.
//!
//! Growing to a larger size adds rows `previous + 1 ..= size`, spread over the
//! same hours and places, so a size is denser, not different.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ephemera::auth::TokenKeys;
use ephemera::db::{DbStats, Dialect, Sql, insert};
use ephemera::entity::{location, media, moment, session, status, user};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend};

use crate::Opts;

/// The secret the benchmark's servers sign tokens with.
/// Every seeded account's password.
pub const BENCH_PASSWORD: &str = "benchmark-password";

pub const SECRET: &str = "benchmark-secret-benchmark-secret-0123456789";
/// The server binary under test: `EPHEMERA_BENCH_BIN` if set (another
/// build, to compare two builds in alternating runs of one harness), else
/// the one cargo built with the harness.
pub fn bin() -> std::ffi::OsString {
    std::env::var_os("EPHEMERA_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_ephemera").into())
}

const HOUR_MS: i64 = 3_600_000;
/// Id offsets, so the seeded kinds of rows never collide.
const STATUS_MEDIA: i64 = 10_000_000_000;
const STATUS: i64 = 20_000_000_000;
const MOMENT_MEDIA: i64 = 30_000_000_000;
const MOMENT: i64 = 40_000_000_000;
const LOCATION: i64 = 50_000_000_000;
const EXPIRED: i64 = 60_000_000_000;
const EXPIRED_MEDIA: i64 = 70_000_000_000;
/// Locations seeded: 10 in each of 100 cities.
const LOCATIONS: i64 = 1_000;
/// SQL spreading row `i` over 0..1e6 (see the module doc).
const SPREAD: &str = "((i * 2654435761) % 1000003)";
/// Paris, in 0.1-degree units: the city the map benchmark looks at.
pub const PARIS: (i64, i64) = (488, 23);

/// A database the harness runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Db {
    Sqlite,
    Postgres,
}

impl fmt::Display for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Db::Sqlite => "SQLite",
            Db::Postgres => "PostgreSQL",
        })
    }
}

/// How long seeding one size took.
#[derive(Clone, Copy, Debug)]
pub struct Seeded {
    pub seconds: f64,
}

/// One database being benchmarked, and what is in it.
pub struct Bench {
    pub db: Db,
    pub url: String,
    pub conn: DatabaseConnection,
    pub dir: PathBuf,
    /// The clock the seeded rows are relative to (ms since the epoch).
    pub now: i64,
    pub users: u64,
    /// Accepted friends of each account.
    pub friends: u64,
    pub size: u64,
    admin: Option<(DatabaseConnection, String)>,
    tokens: TokenKeys,
}

impl Bench {
    /// A fresh, migrated database with the accounts, friendships and
    /// locations in it.
    pub async fn create(db: Db, opts: &Opts) -> Self {
        let dir = absolute(opts.work_dir.join(db.to_string().to_lowercase()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("bench dir");
        let (url, admin) = match db {
            Db::Sqlite => (
                format!("sqlite://{}?mode=rwc", dir.join("ephemera.db").display()),
                None,
            ),
            Db::Postgres => {
                let admin = Database::connect(opts.pg_url.as_str())
                    .await
                    .expect("connect to PostgreSQL (is it running? scripts/bench starts it)");
                let name = "ephemera_bench".to_owned();
                admin
                    .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .expect("drop bench database");
                admin
                    .execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("create bench database");
                (with_database(&opts.pg_url, &name), Some((admin, name)))
            }
        };
        let status = std::process::Command::new(bin())
            .arg("migrate")
            .env("DATABASE_URL", &url)
            .env("EPHEMERA_DATA_DIR", dir.join("data"))
            .env("EPHEMERA_JWT_SECRET", SECRET)
            .env("EPHEMERA_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run ephemera migrate");
        assert!(status.success(), "ephemera migrate failed");
        let conn = ephemera::db::connect(&url, 4, Arc::new(DbStats::default()))
            .await
            .expect("connect to the bench database");
        let now = chrono::Utc::now().timestamp_millis();
        let bench = Self {
            db,
            url,
            conn,
            dir,
            now,
            users: opts.users,
            friends: opts.friends,
            size: 0,
            admin,
            tokens: TokenKeys::new(SECRET.as_bytes(), 30 * 24 * HOUR_MS),
        };
        eprintln!("[{db}] seeding {} accounts", opts.users);
        bench.seed_accounts().await;
        bench
    }

    /// The backend as SeaORM names it.
    pub fn backend(&self) -> DbBackend {
        self.conn.get_database_backend()
    }

    /// A sign-in token for account `user`.
    pub fn token(&self, user: i64) -> String {
        self.tokens
            .issue(user, user, chrono::Utc::now().timestamp_millis())
            .expect("token")
    }

    /// Adds `n` status-created events to the change log, before every
    /// event there is (positions 1..=n), about the seeded statuses.
    pub async fn seed_events(&self, n: u64) {
        let (with, from) = self.series(1, i64::try_from(n).unwrap_or(0));
        let author = self.author_sql();
        self.insert::<ephemera::entity::event::Entity>(format!(
            "{with}SELECT i, 0, 'STATUS_CREATED', i, {author}, 'PUBLIC', NULL, 0 FROM {from}"
        ))
        .await;
    }

    /// A cursor of the `events` subscription at position `(tx, seq)`.
    pub fn event_cursor(&self, tx: i64, seq: i64) -> String {
        use ephemera::cursor::{CursorKind, Cursors, Key, List};
        Cursors::new(SECRET.as_bytes()).encode(List(CursorKind::Event, 0), Key { ts: tx, id: seq })
    }

    /// The ids of up to `n` seeded statuses.
    pub async fn status_ids(&self, n: i64) -> Vec<i64> {
        use sea_orm::ConnectionTrait;
        let rows = self
            .conn
            .query_all_raw(sea_orm::Statement::from_string(
                self.backend(),
                format!("SELECT id FROM statuses ORDER BY id LIMIT {n}"),
            ))
            .await
            .expect("status ids");
        rows.iter()
            .filter_map(|r| r.try_get::<i64>("", "id").ok())
            .collect()
    }

    /// Runs an insert built by `ephemera::db::insert` (the server's own
    /// column lists), failing loudly.
    async fn insert<E: sea_orm::EntityTrait>(&self, rows: String) {
        let sql = insert::select_into::<E>(Sql::new(&rows));
        self.exec(&sql.build(self.dialect()).sql).await;
    }

    /// The database's dialect, as the server's code names it.
    pub fn dialect(&self) -> Dialect {
        Dialect::of(&self.conn)
    }

    /// Runs one statement of the seeding, failing loudly.
    pub async fn exec(&self, sql: &str) -> u64 {
        match self.conn.execute_unprepared(sql).await {
            Ok(r) => r.rows_affected(),
            Err(e) => panic!("seeding failed: {e}\n{sql}"),
        }
    }

    /// A count from a `SELECT COUNT(*) ...`.
    pub async fn count(&self, sql: &str) -> i64 {
        let row = self
            .conn
            .query_one_raw(sea_orm::Statement::from_string(self.backend(), sql))
            .await
            .expect("count")
            .expect("a row");
        row.try_get_by_index::<i64>(0).expect("count column")
    }

    /// `FROM` source and `WITH` prefix of the integers `from..=to` as `g(i)`.
    fn series(&self, from: i64, to: i64) -> (String, String) {
        let (cte, from) = self.dialect().integers("g", "i", from, to);
        (with_recursive(&[cte]), from)
    }

    async fn seed_accounts(&self) {
        let users = i64::try_from(self.users).expect("users");
        let now = self.now;
        let (with, from) = self.series(1, users);
        let (cte_g, _) = self.dialect().integers("g", "i", 1, users);
        // One real argon2id hash (as the server makes them) for every
        // account, so that a wrong password costs what it costs.
        let hash = {
            use argon2::password_hash::{PasswordHasher, SaltString};
            let salt = SaltString::generate(&mut rand::rngs::OsRng);
            argon2::Argon2::default()
                .hash_password(BENCH_PASSWORD.as_bytes(), &salt)
                .expect("a password hash")
                .to_string()
        };
        self.insert::<user::Entity>(format!(
            "{with}SELECT i, 'user' || i, 'user' || i, 'User ' || i, '{hash}', {now}, FALSE, NULL, NULL, NULL, NULL, {now} FROM {from}"
        ))
        .await;
        // Their words in the search index, as the server writes them:
        // `user<i>` (the username), `user` and `<i>` (the display name).
        for word in ["'user' || i", "'user'", "CAST(i AS TEXT)"] {
            self.exec(&format!(
                "INSERT INTO user_words (word, user_id) {with}SELECT {word}, i FROM {from}"
            ))
            .await;
        }
        // One sign-in session per account, numbered as the account, so
        // that `token(user)` can name it.
        let expires = now + 30 * 24 * HOUR_MS;
        self.insert::<session::Entity>(format!("SELECT id, id, {now}, {expires} FROM users"))
            .await;
        // Friends at i ± k * step for k = 1..=friends/2, so everyone has
        // `friends`.
        let half = i64::try_from(self.friends / 2).expect("friends");
        let step = (users / (2 * half + 1)).max(1);
        assert!(
            half >= 1 && half * step * 2 < users,
            "--friends: at least 2 and fewer than --users"
        );
        let (cte_k, from_k) = self.dialect().integers("f", "k", 1, half);
        let with = with_recursive(&[cte_g, cte_k]);
        self.exec(
            &format!(
                "INSERT INTO friendships (low_id, high_id, requester_id, created_at, accepted_at) \
             {with}SELECT MIN(a, b), MAX(a, b), MIN(a, b), {now}, {now} FROM \
             (SELECT i AS a, ((i - 1 + k * {step}) % {users}) + 1 AS b FROM {from}, {from_k}) p \
             WHERE a <> b",
            )
            .replace("MIN(a, b)", &self.dialect().least("a", "b"))
            .replace("MAX(a, b)", &self.dialect().greatest("a", "b")),
        )
        .await;
        let (with, from) = self.series(0, LOCATIONS - 1);
        let (lat, lon) = city_sql("(i % 100)", "((i * 2654435761) % 1000003)");
        self.insert::<location::Entity>(format!(
            "{with}SELECT {LOCATION} + i, 'Place ' || i, 'place ' || i, {}, {}, {}, {now}, 0 FROM {from}",
            coordinate(&lat, "i * 31"),
            coordinate(&lon, "i * 17"),
            cell(&lat, &lon),
        ))
        .await;
    }

    /// Adds statuses and moments up to `size` of each, then refreshes the
    /// planner's statistics.
    pub async fn grow(&mut self, size: u64) -> Seeded {
        let started = Instant::now();
        let (from_i, to_i) = (
            i64::try_from(self.size).expect("size") + 1,
            i64::try_from(size).expect("size"),
        );
        if to_i >= from_i {
            self.seed_statuses(from_i, to_i).await;
            self.seed_moments(from_i, to_i).await;
        }
        self.size = size;
        self.analyze().await;
        Seeded {
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// Media rows `base + i`, made at `created`, for the rows of `from`
    /// that `filter` keeps, owned by row `i`'s author, keyed
    /// `bench/<prefix><i>.jpg`.
    async fn seed_media(
        &self,
        rows: (&str, &str),
        base: i64,
        prefix: &str,
        filter: &str,
        created: &str,
    ) {
        let (with, from) = rows;
        let author = self.author_sql();
        self.insert::<media::Entity>(format!(
            "{with}SELECT {base} + i, {author}, 'bench/{prefix}' || i || '.jpg', 'image/jpeg', \
               150000, 1080, 1920, {created}, {created}, {created}, NULL, NULL FROM {from} WHERE {filter}"
        ))
        .await;
    }

    /// SQL for row `i`'s status audience: PUBLIC (how every status stored
    /// before audiences reads, so runs compare with older builds), or with
    /// `BENCH_AUDIENCES=mixed` half PUBLIC, a quarter FRIENDS, a quarter
    /// CLOSE_FRIENDS.
    fn audience_sql(&self) -> String {
        if std::env::var("BENCH_AUDIENCES").is_ok_and(|v| v == "mixed") {
            format!(
                "(CASE ({SPREAD} / 5) % 4 WHEN 0 THEN 'FRIENDS' WHEN 1 THEN 'CLOSE_FRIENDS' ELSE 'PUBLIC' END)"
            )
        } else {
            "'PUBLIC'".to_owned()
        }
    }

    /// SQL for row `i`'s author.
    fn author_sql(&self) -> String {
        format!("(1 + (i * 7919) % {})", self.users)
    }

    /// SQL for row `i`'s creation time: within the last 23 hours.
    fn created_sql(&self) -> String {
        format!("({} - 60000 - {SPREAD} * 82)", self.now)
    }

    async fn seed_statuses(&self, from_i: i64, to_i: i64) {
        let (with, from) = self.series(from_i, to_i);
        let (h, author, created) = (SPREAD, self.author_sql(), self.created_sql());
        self.seed_media(
            (&with, &from),
            STATUS_MEDIA,
            "s",
            &format!("{h} % 4 = 0"),
            &created,
        )
        .await;
        self.insert::<status::Entity>(format!(
            "{with}SELECT {STATUS} + i, {author}, \
               CASE WHEN {h} % 4 = 0 THEN {STATUS_MEDIA} + i END, \
               'status ' || i, '#336699', {created}, {created} + {day}, {audience} FROM {from}",
            audience = self.audience_sql(),
            day = 24 * HOUR_MS
        ))
        .await;
        self.exec("DELETE FROM status_tray").await;
        // The tray as `domain::status` keeps it, rebuilt from the statuses.
        for (level, admitted) in [
            ("PUBLIC", "audience = 'PUBLIC'"),
            ("FRIENDS", "audience IN ('PUBLIC', 'FRIENDS')"),
            ("CLOSE_FRIENDS", "1 = 1"),
        ] {
            self.exec(&format!(
                "INSERT INTO status_tray (author_id, audience, latest_created_at, max_expires_at) \
                 SELECT author_id, '{level}', MAX(created_at), MAX(expires_at) FROM statuses \
                 WHERE {admitted} GROUP BY author_id"
            ))
            .await;
        }
    }

    async fn seed_moments(&self, from_i: i64, to_i: i64) {
        let (with, from) = self.series(from_i, to_i);
        let (h, author, created) = (SPREAD, self.author_sql(), self.created_sql());
        self.seed_media((&with, &from), MOMENT_MEDIA, "m", "1 = 1", &created)
            .await;
        // 10 % in Paris, the rest in cities 1..99.
        let city = format!("(CASE WHEN {h} % 10 = 0 THEN 0 ELSE 1 + ({h} / 10) % 99 END)");
        let (lat, lon) = city_sql(&city, h);
        let journaled = format!("(({h} / 13) % 10 = 0)");
        self.insert::<moment::Entity>(format!(
            "{with}SELECT {MOMENT} + i, {author}, {MOMENT_MEDIA} + i, 'moment ' || i, {}, {}, {}, \
               CASE WHEN ({h} / 3) % 3 = 0 THEN {LOCATION} + {city} + 100 * (({h} / 11) % 10) END, \
               CASE WHEN ({h} / 7) % 2 = 0 THEN 'PUBLIC' ELSE 'FRIENDS_ONLY' END, \
               {journaled}, CASE WHEN {journaled} THEN 0 ELSE 24 END, \
               CASE WHEN {journaled} THEN NULL ELSE {created} + {day} END, {created}, NULL, 0 \
             FROM {from}",
            coordinate(&lat, "i * 31"),
            coordinate(&lon, "i * 17"),
            cell(&lat, &lon),
            day = 24 * HOUR_MS
        ))
        .await;
    }

    /// Adds `rows` statuses that expired an hour ago, each with a media row.
    pub async fn seed_expired(&self, rows: u64) {
        let now = self.now;
        let (with, from) = self.series(1, i64::try_from(rows).expect("rows"));
        let author = self.author_sql();
        let created = format!("({now} - {} - i % 1000)", 25 * HOUR_MS);
        self.seed_media((&with, &from), EXPIRED_MEDIA, "x", "1 = 1", &created)
            .await;
        self.insert::<status::Entity>(format!(
            "{with}SELECT {EXPIRED} + i, {author}, {EXPIRED_MEDIA} + i, 'expired ' || i, NULL, \
               {created}, {created} + {day}, 'PUBLIC' FROM {from}",
            day = 24 * HOUR_MS
        ))
        .await;
        self.analyze().await;
    }

    /// Removes what the purge runs left: the media rows of the plainly
    /// deleted statuses and the outbox entries of the purged ones.
    pub async fn clear_expired(&self) {
        self.exec(&format!(
            "DELETE FROM media WHERE id > {EXPIRED_MEDIA} AND id <= {EXPIRED_MEDIA} + 10000000000"
        ))
        .await;
        self.exec("DELETE FROM media_deletions WHERE storage_key LIKE 'bench/x%'")
            .await;
    }

    /// Fresh planner statistics (and, on PostgreSQL, a vacuumed visibility
    /// map, so index-only scans stay index-only).
    pub async fn analyze(&self) {
        self.exec(self.dialect().analyze()).await;
    }

    /// The authors of the first `n` seeded statuses (each has live ones).
    pub fn status_authors(&self, n: i64) -> Vec<i64> {
        let users = i64::try_from(self.users).expect("users");
        (1..=n).map(|i| 1 + (i * 7919) % users).collect()
    }

    /// Drops the PostgreSQL database unless `keep` (SQLite's file stays
    /// for inspection).
    pub async fn finish(self, keep: bool) {
        let _ = self.conn.close().await;
        if let Some((admin, name)) = self.admin {
            if keep {
                eprintln!("  kept database {name}");
                return;
            }
            let _ = admin
                .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
    }
}

/// SQL for the latitude and longitude (in 0.1-degree units) of a moment or
/// location in city `city`, moved within a 5 x 5 block of cells by `h`.
fn city_sql(city: &str, h: &str) -> (String, String) {
    let (plat, plon) = PARIS;
    (
        format!(
            "(CASE WHEN {city} = 0 THEN {plat} ELSE -400 + ({city} * 130) % 800 END + ({h} / 1000) % 5 - 2)"
        ),
        format!(
            "(CASE WHEN {city} = 0 THEN {plon} ELSE -1700 + ({city} * 370) % 3400 END + ({h} / 5000) % 5 - 2)"
        ),
    )
}

/// A coordinate inside its 0.1-degree cell, never on an edge, so the cell
/// computed here in integers is the one the server computes in floats.
fn coordinate(units: &str, spread: &str) -> String {
    format!("({units} / 10.0 + (5 + ({spread}) % 90) / 1000.0)")
}

/// The map cell of a point given in 0.1-degree units (see `domain::geo`).
fn cell(lat: &str, lon: &str) -> String {
    format!("(({lat} + 900) * 3600 + {lon} + 1800)")
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let base = base.rsplit_once('/').map_or(base, |(b, _)| b);
    format!("{base}/{name}{query}")
}

/// An absolute path: the server runs with its own working directory.
fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        path
    } else {
        std::env::current_dir().expect("cwd").join(path)
    }
}

/// `WITH RECURSIVE a, b ` for the entries that are there (none: nothing).
fn with_recursive(ctes: &[Option<String>]) -> String {
    let ctes: Vec<&str> = ctes.iter().flatten().map(String::as_str).collect();
    if ctes.is_empty() {
        String::new()
    } else {
        format!("WITH RECURSIVE {} ", ctes.join(", "))
    }
}
