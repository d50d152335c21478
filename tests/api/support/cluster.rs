//! Several instances as one: the real `ephemera` binary started as separate
//! processes on one PostgreSQL database and one S3 server (on 127.0.0.1),
//! as the README's production shape runs it, so a test can post through one
//! instance, listen on another, and `kill -9` one in the middle of a job.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sea_orm::{ConnectionTrait, Database, DatabaseConnection};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::s3::{self, S3Server};
use super::{Client, JWT_SECRET, create_pg_database, drop_pg_database};

/// One database and one S3 server that instances share.
pub struct Cluster {
    pub database_url: String,
    db_name: String,
    pub s3: S3Server,
    /// The test's own connection to the database.
    pub db: DatabaseConnection,
    dir: tempfile::TempDir,
}

/// A running server process.
pub struct Instance {
    pub client: Client,
    child: Child,
    /// What it printed, for a failing test to show.
    pub output: Arc<Mutex<Vec<String>>>,
}

impl std::ops::Deref for Instance {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

/// What a process printed and how it ended.
pub struct Ran {
    pub success: bool,
    pub output: String,
}

impl Cluster {
    pub async fn new() -> Self {
        let (database_url, db_name) = create_pg_database().await;
        let db = Database::connect(&database_url)
            .await
            .expect("connect to the test database");
        Self {
            database_url,
            db_name,
            s3: S3Server::start().await,
            db,
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// The settings every process of the cluster gets, then `extra`.
    fn command(&self, extra: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ephemera"));
        let data = tempfile::tempdir_in(self.dir.path()).expect("data dir");
        let endpoint = self.s3.endpoint();
        let data_dir = data.keep();
        let env = [
            ("DATABASE_URL", self.database_url.as_str()),
            ("EPHEMERA_LISTEN", "127.0.0.1:0"),
            ("EPHEMERA_DATA_DIR", data_dir.to_str().expect("a path")),
            ("EPHEMERA_JWT_SECRET", JWT_SECRET),
            ("EPHEMERA_JOBS", "false"),
            ("EPHEMERA_MEDIA_STORE", "s3"),
            ("EPHEMERA_S3_BUCKET", s3::BUCKET),
            ("EPHEMERA_S3_ENDPOINT", endpoint.as_str()),
            ("EPHEMERA_S3_REGION", "us-east-1"),
            ("EPHEMERA_S3_PATH_STYLE", "true"),
            ("EPHEMERA_S3_ACCESS_KEY_ID", s3::ACCESS_KEY),
            ("EPHEMERA_S3_SECRET_ACCESS_KEY", s3::SECRET_KEY),
            ("EPHEMERA_AUTH_ATTEMPTS_PER_ADDRESS", "1000000"),
            ("EPHEMERA_AUTH_ATTEMPTS_PER_ACCOUNT", "1000000"),
            ("EPHEMERA_AUTH_ATTEMPTS_BURST", "1000000"),
            ("EPHEMERA_RATE_POSTS", "1000000/1s"),
            ("EPHEMERA_RATE_DELETES", "1000000/1s"),
            ("EPHEMERA_RATE_LIKES", "1000000/1s"),
            ("EPHEMERA_RATE_SEEN", "1000000/1s"),
            ("EPHEMERA_RATE_SOCIAL", "1000000/1s"),
            ("EPHEMERA_RATE_REPORTS", "1000000/1s"),
            ("EPHEMERA_RATE_MEDIA", "1000000/1s"),
            ("EPHEMERA_RATE_MODERATION", "1000000/1s"),
            ("EPHEMERA_RATE_ACCOUNT", "1000000/1s"),
            ("EPHEMERA_RATE_CATCHUP", "1000000/1s"),
            ("EPHEMERA_RATE_PERSISTED_QUERIES", "1000000/1s"),
            ("EPHEMERA_WORK_TIME_PER_CLIENT", "1000s"),
            ("EPHEMERA_WORK_TIME_BURST", "1000s"),
            ("EPHEMERA_DB_POOL", "5"),
            ("EPHEMERA_LOG", "info"),
            ("NO_COLOR", "1"),
        ];
        cmd.env_clear()
            .envs(env)
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Starts a server; returns once it listens.
    pub async fn spawn(&self, extra: &[(&str, &str)]) -> Instance {
        let mut child = self.command(extra).spawn().expect("start ephemera");
        let output = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        let tx = Arc::new(Mutex::new(Some(tx)));
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        for reader in [
            Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(stderr),
        ] {
            let output = output.clone();
            let tx = tx.clone();
            // Read everything it prints, always: a full pipe would stall it.
            tokio::spawn(async move {
                let mut lines = BufReader::new(reader).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(at) = line.find("listening on http://") {
                        let addr = line[at + "listening on http://".len()..]
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_owned();
                        if let Some(tx) = tx.lock().unwrap().take() {
                            let _ = tx.send(addr);
                        }
                    }
                    let mut out = output.lock().unwrap();
                    if out.len() < 2000 {
                        out.push(line);
                    }
                }
            });
        }
        let addr = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .unwrap_or_else(|_| panic!("the instance never listened: {:?}", output.lock().unwrap()))
            .expect("the instance's output");
        Instance {
            client: Client::new(addr.parse().expect("a socket address")),
            child,
            output,
        }
    }

    /// Starts `ephemera jobs run NAME` (with `extra` settings).
    pub fn start_job(&self, name: &str, extra: &[(&str, &str)]) -> Child {
        let mut cmd = self.command(extra);
        cmd.args(["jobs", "run", name]).stdout(Stdio::piped());
        cmd.spawn().expect("start a job")
    }

    /// Runs `ephemera jobs run NAME` to its end.
    pub async fn run_job(&self, name: &str, extra: &[(&str, &str)]) -> Ran {
        let child = self.start_job(name, extra);
        let out = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
            .await
            .expect("the job ends")
            .expect("the job's output");
        Ran {
            success: out.status.success(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// A count (`SELECT COUNT(*) AS n ...`) on the shared database.
    pub async fn count(&self, sql: &str) -> i64 {
        let row = self
            .db
            .query_one_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                sql.to_owned(),
            ))
            .await
            .expect("count query")
            .expect("a row");
        row.try_get::<i64>("", "n").expect("column n")
    }

    /// Runs SQL on the shared database.
    pub async fn execute(&self, sql: &str) {
        self.db.execute_unprepared(sql).await.expect("SQL runs");
    }

    /// Drops the database (instances must be gone).
    pub async fn finish(self) {
        self.db.close().await.ok();
        drop_pg_database(&self.db_name).await;
    }
}

impl Instance {
    /// `kill -9`: no shutdown, no cleanup, leases and claims left behind.
    pub async fn kill9(&mut self) {
        self.child.start_kill().expect("SIGKILL");
        let _ = self.child.wait().await;
    }

    /// The node id it makes ids with.
    pub async fn node_id(&self) -> u64 {
        self.metric("ephemera_node_id").await
    }
}

/// `kill -9` of a running job process.
pub async fn kill9(child: &mut Child) {
    child.start_kill().expect("SIGKILL");
    let _ = child.wait().await;
}
