//! The server under test: the real `ephemera` binary in its own process, so
//! that its RSS is its own. Start-up is timed from spawning the process to
//! the first `200` from `/healthz` (migrations checked, database reachable,
//! listening).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::seed::{Bench, SECRET, bin};

/// A running server.
pub struct Server {
    child: Child,
    /// `127.0.0.1:port`.
    pub addr: String,
    /// From spawning the process to the first healthy answer.
    pub ready: Duration,
    /// RSS once ready and idle, in KiB.
    pub idle_rss_kib: u64,
    /// Its stderr.
    pub log: PathBuf,
    /// Whether its database is PostgreSQL (whose CPU then counts too).
    pub postgres: bool,
    pid: u32,
}

impl Bench {
    /// Starts the server on this database with jobs off (the benchmark runs
    /// them itself) and `extra` settings on top.
    pub async fn serve(&self, extra: &[(&str, &str)]) -> Server {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let log = self.dir.join(format!("server-{port}.log"));
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .envs(self.server_env())
            .env("EPHEMERA_LISTEN", &addr)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("server log"))
            .kill_on_drop(true);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let child = cmd.spawn().expect("start ephemera");
        let pid = child.id().expect("server pid");
        let client = reqwest::Client::new();
        let health = format!("http://{addr}/healthz");
        loop {
            if let Ok(r) = client.get(&health).send().await
                && r.status().is_success()
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "server did not become ready; see {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let ready = started.elapsed();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut server = Server {
            child,
            addr,
            ready,
            idle_rss_kib: 0,
            log,
            postgres: self.db == crate::seed::Db::Postgres,
            pid,
        };
        server.idle_rss_kib = server.rss_kib();
        server
    }

    /// Settings every benchmark server and job run gets.
    pub fn server_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DATABASE_URL", self.url.clone()),
            (
                "EPHEMERA_DATA_DIR",
                self.dir.join("data").display().to_string(),
            ),
            ("EPHEMERA_JWT_SECRET", SECRET.to_owned()),
            ("EPHEMERA_JOBS", "false".to_owned()),
            ("EPHEMERA_LOG", "warn".to_owned()),
            // The harness is one client address with many connections.
            ("EPHEMERA_MAX_CONNECTIONS", "100000".to_owned()),
            ("EPHEMERA_MAX_CONNECTIONS_PER_ADDRESS", "100000".to_owned()),
            ("EPHEMERA_MAX_WEBSOCKETS", "100000".to_owned()),
            ("EPHEMERA_MAX_WEBSOCKETS_PER_ADDRESS", "100000".to_owned()),
            ("EPHEMERA_AUTH_ATTEMPTS_PER_ADDRESS", "1000000".to_owned()),
            ("EPHEMERA_AUTH_ATTEMPTS_BURST", "1000000".to_owned()),
            // The harness writes fast from few accounts; the attack part
            // sets the limits a deployment has where it measures them.
            ("EPHEMERA_RATE_POSTS", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_DELETES", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_LIKES", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_SEEN", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_SOCIAL", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_REPORTS", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_MEDIA", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_MODERATION", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_ACCOUNT", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_CATCHUP", "1000000/1s".to_owned()),
            ("EPHEMERA_RATE_PERSISTED_QUERIES", "1000000/1s".to_owned()),
            ("EPHEMERA_WORK_TIME_PER_CLIENT", "1000s".to_owned()),
            ("EPHEMERA_WORK_TIME_BURST", "1000s".to_owned()),
        ]
    }
}

impl Server {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Current resident set size in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// Resident private memory in KiB (`RssAnon`): RSS without mapped files,
    /// which SQLite's memory map adds once per pooled connection.
    pub fn anon_kib(&self) -> u64 {
        self.status_kib("RssAnon:")
    }

    fn status_kib(&self, field: &str) -> u64 {
        status_kib(self.pid, field)
    }

    /// `http://addr/graphql`.
    pub fn graphql_url(&self) -> String {
        format!("http://{}/graphql", self.addr)
    }

    /// The value of one gauge or counter on `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(format!("http://{}/metrics", self.addr))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics body");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no metric {name}"))
    }

    /// Stops the process.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// One `kB` field of `/proc/<pid>/status`, e.g. `VmRSS:`.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc status"))
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}
