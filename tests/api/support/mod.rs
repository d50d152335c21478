//! The test harness: the real server on 127.0.0.1:0 against SQLite (a temp
//! file) or PostgreSQL (a fresh database per test, dropped afterwards), with
//! a manual clock, a GraphQL-over-HTTP client and a websocket client.

#![allow(dead_code)]

pub mod ws;

use std::time::Duration;

use ephemera::app::{App, AppState};
use ephemera::clock::Clock;
use ephemera::config::Config;
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

/// A running server and what a test needs to talk to it.
pub struct TestApp {
    pub backend: Backend,
    pub base: String,
    pub ws_url: String,
    pub clock: Clock,
    pub state: AppState,
    pub database_url: String,
    pub http: reqwest::Client,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
    pg_db: Option<String>,
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

impl TestApp {
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, |_| {}).await
    }

    /// Spawns with settings changed by `adjust` (jobs are off unless it turns them on).
    pub async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let (database_url, pg_db) = match backend {
            Backend::Sqlite => (
                format!("sqlite://{}?mode=rwc", dir.path().join("test.db").display()),
                None,
            ),
            Backend::Postgres => {
                let admin = pg_admin_url();
                let name = format!("ephemera_t_{}", rand_suffix());
                let conn = Database::connect(&admin)
                    .await
                    .expect("connect to PostgreSQL");
                conn.execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("create test database");
                conn.close().await.ok();
                (replace_db_name(&admin, &name), Some(name))
            }
        };
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            database_url: Some(database_url.clone()),
            data_dir: dir.path().to_path_buf(),
            jwt_secret: Some(JWT_SECRET.into()),
            jobs: false,
            db_pool: 5,
            ..Config::default()
        };
        adjust(&mut config);
        let clock = Clock::manual(chrono::Utc::now().timestamp_millis());
        let app = App::build(config, clock.clone())
            .await
            .expect("server starts");
        let addr = app.local_addr().expect("addr");
        let state = app.state().clone();
        let (shutdown, stopped) = watch::channel(false);
        let server = tokio::spawn(async move {
            app.run_until(stopped).await.expect("server runs");
        });
        Self {
            backend,
            base: format!("http://{addr}"),
            ws_url: format!("ws://{addr}/graphql"),
            clock,
            state,
            database_url,
            http: reqwest::Client::new(),
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
            let conn = Database::connect(&pg_admin_url())
                .await
                .expect("connect to PostgreSQL");
            conn.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
                .expect("drop test database");
            conn.close().await.ok();
        }
        drop(self.dir);
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

    /// Posts a status with a caption; returns its id.
    pub async fn post_status(&self, user: &TestUser, caption: &str) -> String {
        let data = self
            .ok(
                user.token(),
                "mutation($c: String) { createStatus(input: { caption: $c }) { id } }",
                json!({ "c": caption }),
            )
            .await;
        data["createStatus"]["id"].as_str().expect("id").to_owned()
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
