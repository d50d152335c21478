//! The test harness: the real server on 127.0.0.1:0 against SQLite (a temp
//! file) or PostgreSQL (a fresh database per test, dropped afterwards), its
//! media on local disk or in a real S3-compatible server on 127.0.0.1, with a
//! manual clock, a GraphQL-over-HTTP client (multipart uploads included) and
//! a websocket client.

#![expect(dead_code, reason = "each test module uses part of the shared helpers")]

pub mod cluster;
pub mod s3;
pub mod ws;

use std::time::Duration;

use ephemera::app::{App, AppState};
use ephemera::clock::Clock;
use ephemera::config::{Config, MediaStoreKind};
use ephemera::db::{Sql, insert};
use ephemera::entity::{media, moment};
pub use ephemera::graphql::types::IdKind;
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use tokio::sync::watch;

/// Which database a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Expands test functions `async fn name(app: &TestApp)` into one test per
/// backend: `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::support::TestApp::spawn($crate::support::Backend::Sqlite).await;
                super::$name(&app).await;
                app.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let app = $crate::support::TestApp::spawn($crate::support::Backend::Postgres).await;
                super::$name(&app).await;
                app.finish().await;
            }
        }
    )* };
}

/// Like [`both_backends_with!`], on a server with a runtime of its own whose
/// CPU time [`ServerCpu`] reads.
#[macro_export]
macro_rules! both_backends_measured {
    ($adjust:ident => $($name:ident),* $(,)?) => {
        $crate::both_backends_on!(spawn_measured, $adjust => $($name),*);
    };
}

/// Like [`both_backends!`], for test functions that need settings of their
/// own: `both_backends_with!(adjust => name, ...)` spawns each server with
/// `adjust(&mut Config)` applied.
#[macro_export]
macro_rules! both_backends_with {
    ($adjust:ident => $($name:ident),* $(,)?) => {
        $crate::both_backends_on!(spawn_with, $adjust => $($name),*);
    };
}

/// One test per backend of each `name`, on a server `TestApp::$spawn`
/// starts with `adjust` applied to its settings.
#[macro_export]
macro_rules! both_backends_on {
    ($spawn:ident, $adjust:ident => $($name:ident),* $(,)?) => { $(
        mod $name {
            async fn run(backend: $crate::support::Backend) {
                let app = $crate::support::TestApp::$spawn(backend, super::$adjust).await;
                super::$name(&app).await;
                app.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                run($crate::support::Backend::Sqlite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                run($crate::support::Backend::Postgres).await;
            }
        }
    )* };
}

/// Where media is stored in a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Local,
    S3,
}

/// Expands test functions `async fn name(app: &TestApp)` into one test per
/// backend and media store: `name::{sqlite,postgres}_{local,s3}`.
#[macro_export]
macro_rules! all_stores {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            use $crate::support::{Backend, Store, TestApp};

            async fn run(backend: Backend, store: Store) {
                let app = TestApp::spawn_full(backend, store, |_| {}).await;
                super::$name(&app).await;
                app.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite_local() {
                run(Backend::Sqlite, Store::Local).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite_s3() {
                run(Backend::Sqlite, Store::S3).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres_local() {
                run(Backend::Postgres, Store::Local).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres_s3() {
                run(Backend::Postgres, Store::S3).await;
            }
        }
    )* };
}

/// A signed-up user.
#[derive(Clone, Debug)]
pub struct TestUser {
    pub id: String,
    pub username: String,
    pub token: String,
}

impl TestUser {
    pub fn token(&self) -> Option<&str> {
        Some(&self.token)
    }
}

/// What a test needs to talk to one server over HTTP and websockets.
#[derive(Clone, Debug)]
pub struct Client {
    pub base: String,
    pub ws_url: String,
    pub http: reqwest::Client,
}

impl Client {
    /// A client of the server at `addr`.
    pub fn new(addr: std::net::SocketAddr) -> Self {
        Self {
            base: format!("http://{addr}"),
            ws_url: format!("ws://{addr}/graphql"),
            http: reqwest::Client::new(),
        }
    }

    /// POSTs a JSON body to /graphql; returns the status and the JSON answer.
    pub async fn post(&self, token: Option<&str>, body: &Value) -> (StatusCode, Value) {
        let mut req = self.http.post(format!("{}/graphql", self.base)).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        (status, resp.json().await.expect("JSON answer"))
    }

    /// GETs /graphql with `params` in the query string; returns the JSON answer.
    pub async fn get(&self, params: &[(&str, &str)]) -> Value {
        self.http
            .get(format!("{}/graphql", self.base))
            .query(params)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("JSON answer")
    }

    /// Runs a GraphQL operation; returns the whole response.
    pub async fn gql(&self, token: Option<&str>, query: &str, variables: Value) -> Value {
        self.post(token, &json!({ "query": query, "variables": variables }))
            .await
            .1
    }

    /// Runs an operation that must succeed; returns `data`.
    pub async fn ok(&self, token: Option<&str>, query: &str, variables: Value) -> Value {
        let resp = self.gql(token, query, variables).await;
        assert!(resp.get("errors").is_none(), "unexpected errors: {resp}");
        resp["data"].clone()
    }

    /// Runs an operation that must fail; returns the first error's code.
    pub async fn err(&self, token: Option<&str>, query: &str, variables: Value) -> String {
        let resp = self.gql(token, query, variables).await;
        error_code(&resp)
    }

    pub async fn sign_up(&self, username: &str) -> TestUser {
        let data = self
            .ok(
                None,
                "mutation($u: String!) { signUp(input: { username: $u, password: \"password123\" }) { token user { id username } } }",
                json!({ "u": username }),
            )
            .await;
        TestUser {
            id: data["signUp"]["user"]["id"]
                .as_str()
                .expect("id")
                .to_owned(),
            username: username.to_owned(),
            token: data["signUp"]["token"].as_str().expect("token").to_owned(),
        }
    }

    /// Makes `a` and `b` accepted friends.
    pub async fn befriend(&self, a: &TestUser, b: &TestUser) {
        let send = "mutation($u: ID!) { sendFriendRequest(userId: $u) }";
        self.ok(a.token(), send, json!({ "u": b.id })).await;
        let accept = "mutation($u: ID!) { acceptFriendRequest(userId: $u) }";
        let data = self.ok(b.token(), accept, json!({ "u": a.id })).await;
        assert_eq!(data["acceptFriendRequest"], "FRIENDS");
    }

    /// Posts a PUBLIC status with a caption (what every status was before
    /// audiences); returns its id.
    pub async fn post_status(&self, user: &TestUser, caption: &str) -> String {
        self.post_status_to(user, caption, "PUBLIC").await
    }

    /// Posts a status with a caption for `audience`; returns its id.
    pub async fn post_status_to(&self, user: &TestUser, caption: &str, audience: &str) -> String {
        let data = self
            .ok(
                user.token(),
                "mutation($c: String, $a: StatusAudience!) { createStatus(input: { caption: $c, audience: $a }) { id } }",
                json!({ "c": caption, "a": audience }),
            )
            .await;
        data["createStatus"]["id"].as_str().expect("id").to_owned()
    }

    /// Runs a `mutation(userId: ID!): ID!` about `other` as `who` (the
    /// safety lists: `blockUser`, `muteUser`...) and checks it answered
    /// `other`'s id.
    pub async fn relate(&self, who: &TestUser, mutation: &str, other: &TestUser) {
        let q = format!("mutation($u: ID!) {{ {mutation}(userId: $u) }}");
        let resp = self.gql(who.token(), &q, json!({ "u": other.id })).await;
        assert_eq!(
            resp["data"][mutation],
            other.id.as_str(),
            "{mutation}: {resp}"
        );
    }

    /// Reads a counter or gauge from /metrics.
    pub async fn metric(&self, name: &str) -> u64 {
        let text = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing"))
    }

    /// SQL statements the server ran while `f` ran.
    pub async fn statements_during<F: std::future::Future<Output = Value>>(
        &self,
        f: F,
    ) -> (u64, Value) {
        let before = self.metric("ephemera_db_statements_total").await;
        let out = f.await;
        let after = self.metric("ephemera_db_statements_total").await;
        (after - before, out)
    }

    /// Waits (bounded) until `metric` falls to `n` or below.
    pub async fn wait_for_metric_at_most(&self, name: &str, n: u64) {
        for _ in 0..500 {
            if self.metric(name).await <= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{name} never fell to {n}");
    }

    /// Waits (bounded) until `metric` reaches at least `n`.
    pub async fn wait_for_metric(&self, name: &str, n: u64) {
        for _ in 0..500 {
            if self.metric(name).await >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{name} never reached {n}");
    }

    /// Uploads `bytes` as `uploadMedia`'s file over a GraphQL multipart
    /// request (with the preflight header); returns the status and answer.
    pub async fn upload(
        &self,
        token: Option<&str>,
        bytes: Vec<u8>,
        filename: &str,
        content_type: &str,
    ) -> (StatusCode, Value) {
        let form = upload_form(bytes, filename, content_type);
        let mut req = self
            .http
            .post(format!("{}/graphql", self.base))
            .header("apollo-require-preflight", "true")
            .multipart(form);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("upload request");
        let status = resp.status();
        (status, resp.json().await.expect("JSON answer"))
    }

    /// Uploads a fixture that must be accepted; returns `uploadMedia`'s object.
    pub async fn upload_fixture(&self, user: &TestUser, name: &str) -> Value {
        let (status, resp) = self
            .upload(
                user.token(),
                fixture(name),
                name,
                "application/octet-stream",
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{resp}");
        assert!(resp.get("errors").is_none(), "upload failed: {resp}");
        resp["data"]["uploadMedia"].clone()
    }

    /// An absolute URL for a media URL (local URLs are paths on this server).
    pub fn absolute(&self, url: &str) -> String {
        if url.starts_with('/') {
            format!("{}{url}", self.base)
        } else {
            url.to_owned()
        }
    }

    /// GETs a media URL: status and bytes.
    pub async fn fetch(&self, url: &str) -> (StatusCode, Vec<u8>) {
        let resp = self
            .http
            .get(self.absolute(url))
            .send()
            .await
            .expect("GET media");
        let status = resp.status();
        (status, resp.bytes().await.expect("media bytes").to_vec())
    }

    /// Uploads a small image as `user`; returns the media id.
    pub async fn upload_id(&self, user: &TestUser) -> String {
        self.upload_fixture(user, "tiny.gif").await["id"]
            .as_str()
            .expect("media id")
            .to_owned()
    }

    /// Posts a moment: `input` over defaults (a fresh upload, central Paris);
    /// returns the moment with [`MOMENT_FIELDS`].
    pub async fn post_moment(&self, user: &TestUser, input: Value) -> Value {
        let mut full = json!({ "latitude": PARIS.0, "longitude": PARIS.1 });
        if input.get("mediaId").is_none() {
            full["mediaId"] = json!(self.upload_id(user).await);
        }
        for (k, v) in input.as_object().expect("an input object") {
            full[k] = v.clone();
        }
        let q = format!(
            "mutation($i: CreateMomentInput!) {{ createMoment(input: $i) {{ {MOMENT_FIELDS} }} }}"
        );
        self.ok(user.token(), &q, json!({ "i": full })).await["createMoment"].clone()
    }
}

/// A running server and what a test needs to talk to it (its [`Client`]'s
/// fields and helpers are the app's own, through `Deref`).
pub struct TestApp {
    pub backend: Backend,
    pub client: Client,
    pub clock: Clock,
    pub state: AppState,
    pub database_url: String,
    pub store: Store,
    /// The S3 server, with `Store::S3`.
    pub s3: Option<s3::S3Server>,
    /// The name of the server's own runtime's threads ([`Self::spawn_measured`]).
    cpu_threads: Option<String>,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
    pg_db: Option<String>,
}

impl std::ops::Deref for TestApp {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

/// Every per-account write rate of `config`.
pub fn write_rates(config: &mut Config) -> [&mut ephemera::throttle::Rate; 9] {
    let l = &mut config.limits;
    [
        &mut l.rate_posts,
        &mut l.rate_deletes,
        &mut l.rate_likes,
        &mut l.rate_seen,
        &mut l.rate_social,
        &mut l.rate_reports,
        &mut l.rate_media,
        &mut l.rate_moderation,
        &mut l.rate_account,
    ]
}

/// Sets every per-account write rate, and the catch-up and APQ rates, so
/// high that no test meets them unless it means to.
pub fn unlimited_writes(config: &mut Config) {
    let many: ephemera::throttle::Rate = "1000000/1s".parse().expect("a rate");
    for rate in write_rates(config) {
        *rate = many;
    }
    config.limits.rate_catchup = many;
    config.limits.rate_persisted_queries = many;
    config.limits.work_time_per_client = Duration::from_secs(1000);
    config.limits.work_time_burst = Duration::from_secs(1000);
}

/// The server still answers `/healthz` and a query.
pub async fn still_serving(app: &TestApp) {
    let health = app
        .http
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .expect("healthz answers");
    assert_eq!(health.status(), 200);
    let data = app.ok(None, "{ __typename }", json!({})).await;
    assert_eq!(data["__typename"], "Query");
}

/// The CPU time a server started with [`TestApp::spawn_measured`] spends
/// from [`ServerCpu::start`] on: user and system time of its runtime's
/// threads (workers and blocking pool), read from `/proc`. A blocking
/// thread that ends in between is not counted; the test harness's own
/// threads and other tests never are.
pub struct ServerCpu {
    prefix: String,
    at_start: Duration,
}

impl ServerCpu {
    pub fn start(app: &TestApp) -> Self {
        let prefix = app
            .cpu_threads
            .clone()
            .expect("the server was started with TestApp::spawn_measured");
        let at_start = Self::read(&prefix);
        Self { prefix, at_start }
    }

    /// CPU time spent since [`ServerCpu::start`].
    pub fn spent(&self) -> Duration {
        Self::read(&self.prefix).saturating_sub(self.at_start)
    }

    fn read(prefix: &str) -> Duration {
        // Clock ticks per second of /proc's times (USER_HZ, 100 on Linux).
        const TICKS: u64 = 100;
        let mut ticks = 0u64;
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return Duration::ZERO;
        };
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if !comm.starts_with(prefix) {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // Fields after the parenthesised name: state is the 3rd field,
            // utime and stime the 14th and 15th.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
            ticks += field(14).unwrap_or(0) + field(15).unwrap_or(0);
        }
        Duration::from_millis(ticks * 1000 / TICKS)
    }
}

pub const JWT_SECRET: &str = "test-secret-test-secret-test-secret-0123";

/// The admin URL of the test PostgreSQL server. Missing means the run was not
/// started through `scripts/test`: that fails the test rather than skip it.
pub fn pg_admin_url() -> String {
    std::env::var("EPHEMERA_TEST_PG_URL").unwrap_or_else(|_| {
        panic!("EPHEMERA_TEST_PG_URL is not set: run scripts/test, which starts PostgreSQL")
    })
}

fn replace_db_name(url: &str, name: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("a database URL ends in /name");
    format!("{base}/{name}")
}

/// Writes a PUBLIC status and its change-log event in `txn` (left open,
/// for a test of transactions that commit out of order).
pub async fn write_logged_status(
    txn: &sea_orm::DatabaseTransaction,
    id: i64,
    author: i64,
    now: i64,
) {
    use ephemera::events::Kind;
    use ephemera::events::log::{self, Change};
    txn.execute_unprepared(&format!(
        "INSERT INTO statuses (id, author_id, caption, created_at, expires_at, audience) \
         VALUES ({id}, {author}, 'held', {now}, {}, 'PUBLIC')",
        now + 3_600_000
    ))
    .await
    .expect("insert a status");
    let change = Change {
        kind: Kind::StatusCreated,
        subject: id,
        author,
        audience: "PUBLIC".into(),
        viewer: None,
    };
    log::record(txn, &[change], now).await.expect("log it");
}

/// A fresh PostgreSQL database for one test: its URL and name.
pub async fn create_pg_database() -> (String, String) {
    let admin = pg_admin_url();
    let name = format!("ephemera_t_{}", rand_suffix());
    let conn = Database::connect(&admin)
        .await
        .expect("connect to PostgreSQL");
    conn.execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create test database");
    conn.close().await.ok();
    (replace_db_name(&admin, &name), name)
}

/// Drops a database [`create_pg_database`] made, ending its sessions.
pub async fn drop_pg_database(name: &str) {
    let conn = Database::connect(&pg_admin_url())
        .await
        .expect("connect to PostgreSQL");
    // FORCE cannot end an autovacuum worker (not ours): retry a while.
    let mut attempt = 0;
    while let Err(e) = conn
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
    {
        attempt += 1;
        assert!(attempt < 50, "drop test database: {e:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    conn.close().await.ok();
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, |_| {}).await
    }

    /// Spawns with settings changed by `adjust` (jobs are off unless it turns them on).
    pub async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_full(backend, Store::Local, adjust).await
    }

    /// Spawns with media in `store` and settings changed by `adjust`.
    pub async fn spawn_full(
        backend: Backend,
        store: Store,
        adjust: impl FnOnce(&mut Config),
    ) -> Self {
        Self::spawn_on(backend, store, adjust, None).await
    }

    /// Spawns a server that runs on a runtime of its own, whose threads are
    /// named apart, so that [`ServerCpu`] can tell the CPU time it spends.
    pub async fn spawn_measured(backend: Backend, adjust: impl FnOnce(&mut Config)) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self::spawn_on(
            backend,
            Store::Local,
            adjust,
            Some(format!("srv{n}-{}", std::process::id() % 1000)),
        )
        .await
    }

    async fn spawn_on(
        backend: Backend,
        store: Store,
        adjust: impl FnOnce(&mut Config),
        own_runtime: Option<String>,
    ) -> Self {
        let s3 = match store {
            Store::Local => None,
            Store::S3 => Some(s3::S3Server::start().await),
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let (database_url, pg_db) = match backend {
            Backend::Sqlite => (
                format!("sqlite://{}?mode=rwc", dir.path().join("test.db").display()),
                None,
            ),
            Backend::Postgres => {
                let (url, name) = create_pg_database().await;
                (url, Some(name))
            }
        };
        let mut config = Config::default();
        config.server.listen = "127.0.0.1:0".parse().expect("addr");
        config.database.url = Some(database_url.clone());
        config.server.data_dir = dir.path().to_path_buf();
        config.auth.jwt_secret = Some(JWT_SECRET.into());
        config.jobs.enabled = false;
        config.database.pool = 5;
        // Tests sign up many users from one address; the hostile-client
        // tests set these low again.
        config.auth.attempts_per_address = 1_000_000;
        config.auth.attempts_per_account = 1_000_000;
        config.auth.attempts_burst = 1_000_000;
        // Tests write fast from few accounts; the limit tests set rates of
        // their own.
        unlimited_writes(&mut config);
        if let Some(s3) = &s3 {
            config.media.store = MediaStoreKind::S3;
            config.s3.bucket = Some(s3::BUCKET.into());
            config.s3.endpoint = Some(s3.endpoint());
            config.s3.region = Some("us-east-1".into());
            config.s3.path_style = true;
            config.s3.access_key_id = Some(s3::ACCESS_KEY.into());
            config.s3.secret_access_key = Some(s3::SECRET_KEY.into());
        }
        adjust(&mut config);
        let clock = Clock::manual(chrono::Utc::now().timestamp_millis());
        let (shutdown, stopped) = watch::channel(false);
        let (addr, state, server, cpu_threads) = match own_runtime {
            None => {
                let app = App::build(config, clock.clone())
                    .await
                    .expect("server starts");
                let addr = app.local_addr().expect("addr");
                let state = app.state().clone();
                let server = tokio::spawn(async move {
                    app.run_until(stopped).await.expect("server runs");
                });
                (addr, state, server, None)
            }
            Some(name) => {
                let (started, ready) = tokio::sync::oneshot::channel();
                let server_clock = clock.clone();
                let thread_name = name.clone();
                let thread = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .thread_name(thread_name)
                        .enable_all()
                        .build()
                        .expect("server runtime");
                    runtime.block_on(async move {
                        let app = App::build(config, server_clock)
                            .await
                            .expect("server starts");
                        let state = app.state().clone();
                        let _ = started.send((app.local_addr().expect("addr"), state.clone()));
                        app.run_until(stopped).await.expect("server runs");
                        state.db.clone().close().await.ok();
                    });
                    runtime.shutdown_timeout(Duration::from_secs(5));
                });
                let (addr, state) = ready.await.expect("the server runtime starts");
                let server = tokio::task::spawn_blocking(move || {
                    let _ = thread.join();
                });
                (addr, state, server, Some(name))
            }
        };
        Self {
            cpu_threads,
            backend,
            client: Client::new(addr),
            clock,
            state,
            database_url,
            store,
            s3,
            shutdown,
            server,
            dir,
            pg_db,
        }
    }

    /// Stops the server and drops the test database.
    pub async fn finish(self) {
        let _ = self.shutdown.send(true);
        // Open websockets keep a graceful shutdown waiting; don't wait for them.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
        self.state.db.clone().close().await.ok();
        if let Some(name) = self.pg_db {
            drop_pg_database(&name).await;
        }
        drop(self.dir);
    }

    /// Counts rows with a plain SQL query (`SELECT COUNT(*) AS n ...`).
    pub async fn count(&self, sql: &str) -> i64 {
        let row = self
            .state
            .db
            .query_one_raw(sea_orm::Statement::from_string(
                self.state.db.get_database_backend(),
                sql.to_owned(),
            ))
            .await
            .expect("count query")
            .expect("a row");
        row.try_get::<i64>("", "n").expect("column n")
    }

    /// Waits (bounded, about 10 s) until the count query `sql` gives `n`;
    /// returns the last count, for the caller to assert on.
    pub async fn wait_for_count(&self, sql: &str, n: i64) -> i64 {
        let mut last = self.count(sql).await;
        for _ in 0..100 {
            if last == n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            last = self.count(sql).await;
        }
        last
    }

    /// Ends every session the server has open on its PostgreSQL database, as
    /// a restart of the database does, and waits until they are gone; returns
    /// how many there were.
    pub async fn end_database_sessions(&self) -> usize {
        let name = self.pg_db.clone().expect("a PostgreSQL test");
        let admin = Database::connect(&pg_admin_url())
            .await
            .expect("connect to PostgreSQL");
        let pids = |sql: String| {
            let admin = &admin;
            async move {
                let rows = admin
                    .query_all_raw(sea_orm::Statement::from_string(
                        sea_orm::DbBackend::Postgres,
                        sql,
                    ))
                    .await
                    .expect("pg_stat_activity");
                rows.iter()
                    .map(|r| r.try_get::<i32>("", "pid").expect("pid"))
                    .collect::<Vec<i32>>()
            }
        };
        let ended = pids(format!(
            "WITH ours AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
             WHERE datname = '{name}' AND usename = current_user AND pid <> pg_backend_pid()) \
             SELECT pid FROM ours WHERE pg_terminate_backend(pid)"
        ))
        .await;
        let list = ended
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        for _ in 0..100 {
            if ended.is_empty()
                || pids(format!(
                    "SELECT pid FROM pg_stat_activity WHERE pid IN ({list})"
                ))
                .await
                .is_empty()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        admin.close().await.ok();
        ended.len()
    }
}

impl TestApp {
    /// Every key in the media store.
    pub async fn store_keys(&self) -> Vec<String> {
        self.state
            .media
            .store
            .keys()
            .await
            .expect("list the media store")
    }

    /// Runs the media job once at the clock's time.
    pub async fn media_gc(&self) -> ephemera::jobs::media_gc::MediaGcReport {
        ephemera::jobs::media_gc::run_once(&self.state, self.clock.now())
            .await
            .expect("media gc runs")
    }
}

/// A GraphQL multipart request body: `uploadMedia` with `bytes` as its file.
pub fn upload_form(bytes: Vec<u8>, filename: &str, content_type: &str) -> reqwest::multipart::Form {
    reqwest::multipart::Form::new()
        .text(
            "operations",
            json!({
                "query": "mutation($f: Upload!) { uploadMedia(file: $f) { id url contentType byteSize width height } }",
                "variables": { "f": null }
            })
            .to_string(),
        )
        .text("map", json!({ "0": ["variables.f"] }).to_string())
        .part(
            "0",
            reqwest::multipart::Part::bytes(bytes)
                .file_name(filename.to_owned())
                .mime_str(content_type)
                .unwrap(),
        )
}

/// The bytes of a file in `tests/fixtures`.
pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture")
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The ids of a connection's `nodes`, in order.
pub fn connection_ids(conn: &Value) -> Vec<String> {
    conn["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("a connection: {conn}"))
        .iter()
        .map(|n| n["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// The API's id of row `n` of `kind` (ids say their type).
pub fn gid(kind: IdKind, n: i64) -> String {
    ephemera::graphql::types::id(kind, n).0
}

/// The id of `author`'s entry in `viewer`'s tray.
pub fn entry_id(viewer: Option<&TestUser>, author: &TestUser) -> String {
    ephemera::graphql::types::tray_entry_id(viewer.map(|v| raw(&v.id)), raw(&author.id)).0
}

/// The row id behind an id the API gave.
pub fn raw(id: &str) -> i64 {
    ephemera::graphql::types::decode_id(&async_graphql::ID(id.to_owned()))
        .unwrap_or_else(|| panic!("not an id this server makes: {id}"))
        .1
}

/// The first error's `extensions.code`.
pub fn error_code(resp: &Value) -> String {
    resp["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error with a code, got {resp}"))
        .to_owned()
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}_{}_{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// An hour.
pub const HOUR: Duration = Duration::from_secs(3600);

/// The fields tests read back from a moment.
pub const MOMENT_FIELDS: &str = "id caption latitude longitude visibility isJournaled durationHours expiresAt createdAt likesCount viewerHasLiked author { username } media { id url } location { id name momentCount }";

/// Where seeded moments go by default (central Paris).
pub const PARIS: (f64, f64) = (48.8566, 2.3522);

impl TestApp {
    /// Inserts `n` moments of `author` straight into the database (media rows
    /// included, blobs not), one second apart, ending now; returns their ids.
    pub async fn seed_moments(&self, author: &TestUser, n: usize, seed: Seed) -> Vec<i64> {
        let db = &self.state.db;
        let author_id: i64 = raw(&author.id);
        let now = self.clock.now();
        let mut ids = Vec::new();
        for i in 0..n {
            let media_id = self.state.ids.next_id();
            let id = self.state.ids.next_id();
            let at = now - (n - i) as i64 * 1000;
            let media = media::Model {
                id: media_id,
                owner_id: author_id,
                storage_key: format!("se/{media_id:032x}"),
                content_type: "image/gif".into(),
                byte_size: 10,
                width: Some(1),
                height: Some(1),
                created_at: at,
                ready_at: Some(at),
                attached_at: Some(at),
                upload_expires_at: None,
                upload_received_at: None,
            };
            insert::row(db, media).await.expect("seed media");
            let (lat, lon) = (seed.latitude + i as f64 * 1e-5, seed.longitude);
            let (journaled, hours, expires) = if seed.journaled {
                (true, 0, None)
            } else {
                (false, 24, Some(at + 24 * 3_600_000))
            };
            let row = moment::Model {
                id,
                author_id,
                media_id,
                caption: Some("seeded".into()),
                latitude: lat,
                longitude: lon,
                map_cell: ephemera::domain::geo::map_cell(lat, lon),
                location_id: seed.location,
                visibility: seed.visibility.into(),
                is_journaled: journaled,
                duration_hours: hours,
                expires_at: expires,
                created_at: at,
                deleted_at: None,
                likes_count: 0,
            };
            insert::row(db, row).await.expect("seed moment");
            // Keep the location's PUBLIC counter as the server would.
            if let (Some(location), "PUBLIC") = (seed.location, seed.visibility) {
                let count = Sql::new(
                    "UPDATE locations SET public_moments = public_moments + 1 WHERE id = ",
                )
                .bind(location);
                ephemera::db::execute(db, count).await.expect("seed count");
            }
            ids.push(id);
        }
        ids
    }
}

/// How [`TestApp::seed_moments`] makes its moments.
#[derive(Clone, Copy, Debug)]
pub struct Seed {
    pub latitude: f64,
    pub longitude: f64,
    pub location: Option<i64>,
    pub visibility: &'static str,
    pub journaled: bool,
}

impl Seed {
    /// Journaled moments at the default place.
    pub fn journaled() -> Self {
        Self {
            journaled: true,
            ..Self::default()
        }
    }
}

impl Default for Seed {
    fn default() -> Self {
        Self {
            latitude: PARIS.0,
            longitude: PARIS.1,
            location: None,
            visibility: "PUBLIC",
            journaled: false,
        }
    }
}

/// The plan the database runs `sql` with, as text: SQLite's `EXPLAIN QUERY
/// PLAN`; on PostgreSQL the generic plan (the one a prepared statement is
/// cached with after five runs), run with `EXPLAIN (ANALYZE, BUFFERS)` for
/// the rows and buffers each node read.
pub async fn plan_of(db: &sea_orm::DatabaseConnection, sql: Sql) -> String {
    use ephemera::db::Dialect;
    use sea_orm::TransactionTrait;
    let dialect = Dialect::of(db);
    let rows = match dialect {
        Dialect::Sqlite => {
            let (explain, _) = dialect.explain();
            db.query_all_raw(Sql::new(explain).push(" ").append(sql).build(dialect))
                .await
                .expect("explain")
        }
        Dialect::Postgres => {
            let built = sql.build(dialect);
            let args = literal_args(&built);
            let txn = db.begin().await.expect("a transaction");
            txn.execute_unprepared("SET LOCAL plan_cache_mode = force_generic_plan")
                .await
                .expect("generic plans");
            txn.execute_unprepared(&format!("PREPARE planned AS {}", built.sql))
                .await
                .expect("prepare");
            let execute = if args.is_empty() {
                "EXPLAIN (ANALYZE, BUFFERS) EXECUTE planned".to_owned()
            } else {
                format!(
                    "EXPLAIN (ANALYZE, BUFFERS) EXECUTE planned({})",
                    args.join(", ")
                )
            };
            let rows = txn
                .query_all_raw(sea_orm::Statement::from_string(
                    sea_orm::DbBackend::Postgres,
                    execute,
                ))
                .await
                .expect("explain");
            // A prepared statement outlives the transaction.
            txn.execute_unprepared("DEALLOCATE planned")
                .await
                .expect("deallocate");
            txn.rollback().await.expect("rollback");
            rows
        }
    };
    let (_, column) = dialect.explain();
    rows.iter()
        .map(|r| r.try_get::<String>("", column).expect("plan text"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The rows and loops a node's line of a PostgreSQL `EXPLAIN ANALYZE`
/// plan reports (`actual time=... rows=R loops=L`).
fn actual_rows(line: &str) -> Option<(u64, u64)> {
    let actual = line.split("actual time=").nth(1)?;
    let field = |name: &str| -> Option<u64> {
        let digits = actual.split(name).nth(1)?;
        digits
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("rows=")?, field("loops=")?))
}

/// The most rows any node of a PostgreSQL `EXPLAIN ANALYZE` `plan` that
/// `node` keeps read (per loop, times its loops); 0 on SQLite's plans.
pub fn rows_read(plan: &str, node: impl Fn(&str) -> bool) -> u64 {
    plan.lines()
        .filter(|l| node(l))
        .filter_map(actual_rows)
        .map(|(rows, loops)| rows * loops)
        .max()
        .unwrap_or(0)
}

/// The rows the nodes of a PostgreSQL `EXPLAIN ANALYZE` `plan` that `node`
/// keeps read, all nodes and loops together: those they returned and those
/// their filters left out; 0 on SQLite's plans.
pub fn read_by(plan: &str, node: impl Fn(&str) -> bool) -> u64 {
    let lines: Vec<&str> = plan.lines().collect();
    let mut total = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some((rows, loops)) = actual_rows(line).filter(|_| node(line)) else {
            continue;
        };
        let removed: u64 = lines[i + 1..]
            .iter()
            .take_while(|l| !l.contains("->"))
            .filter_map(|l| l.trim().strip_prefix("Rows Removed by Filter: "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .sum();
        total += (rows + removed) * loops.max(1);
    }
    total
}

/// The values bound in `built` (a PostgreSQL statement), as SQL literals:
/// the arguments of an `EXECUTE` of it prepared.
pub fn literal_args(built: &sea_orm::Statement) -> Vec<String> {
    let dialect = ephemera::db::Dialect::Postgres;
    built
        .values
        .iter()
        .flat_map(|v| v.0.iter())
        .map(|v| dialect.value_literal(v))
        .collect()
}

/// Runs `statements` (seeding SQL) on the test's database, then refreshes
/// the planner's statistics.
pub async fn seed_sql(db: &sea_orm::DatabaseConnection, statements: Vec<Sql>) {
    let dialect = ephemera::db::Dialect::of(db);
    for sql in statements {
        db.execute_unprepared(&sql.build(dialect).sql)
            .await
            .expect("seed");
    }
    db.execute_unprepared(dialect.analyze())
        .await
        .expect("analyze");
}

/// The seeding SQL of 20,000 accounts `pl1` to `pl20000` (ids 5,000,001
/// up, display names `Pl 1`...), each indexed under its username, `pl`
/// and its number: one prefix that 20,000 share.
pub fn pl_accounts() -> Vec<Sql> {
    let series = "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 20000)";
    let mut seed = vec![insert::select_into::<ephemera::entity::user::Entity>(
        Sql::new(&format!(
            "{series} SELECT 5000000 + x, 'pl' || x, 'pl' || x, 'Pl ' || x, 'x', 0, FALSE, NULL, NULL, NULL, NULL, 0 FROM g"
        )),
    )];
    for word in ["'pl' || x", "'pl'", "CAST(x AS TEXT)"] {
        seed.push(Sql::new(&format!(
            "INSERT INTO user_words (word, user_id) {series} SELECT {word}, 5000000 + x FROM g"
        )));
    }
    seed
}
