//! The status purge: batches, backlog drained in one run, concurrency, the
//! real scheduler, and the `jobs run` command.

use std::time::Duration;

use ephemera::jobs::status_purge;
use serde_json::json;

use crate::both_backends;
use crate::support::{Backend, HOUR, TestApp};

both_backends!(backlog_drains_in_one_run, concurrent_purges_share_the_work);

async fn seed(app: &TestApp, users: usize, per_user: usize) -> Vec<crate::support::TestUser> {
    let mut out = Vec::new();
    for i in 0..users {
        let u = app.sign_up(&format!("purge{i}")).await;
        for j in 0..per_user {
            app.post_status(&u, &format!("{i}-{j}")).await;
        }
        out.push(u);
    }
    out
}

async fn backlog_drains_in_one_run(app: &TestApp) {
    // 3 users x 10 statuses, seen by someone, then all expire; one user posts again.
    let users = seed(app, 3, 10).await;
    let seer = app.sign_up("seer").await;
    let mark = "mutation($id: ID!) { markStatusSeen(id: $id) { id } }";
    let page = app
        .ok(
            None,
            "query($u: ID!) { statuses(userId: $u, first: 3) { nodes { id } } }",
            json!({ "u": users[0].id }),
        )
        .await;
    for n in page["statuses"]["nodes"].as_array().unwrap() {
        app.ok(seer.token(), mark, json!({ "id": n["id"] })).await;
    }
    app.clock.advance(HOUR * 25);
    let live = app.post_status(&users[1], "fresh").await;

    let report = status_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(report.rows, 30);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM status_views").await, 0);
    assert_eq!(
        app.count("SELECT COUNT(DISTINCT author_id) AS n FROM status_tray")
            .await,
        1
    );
    let tray = app
        .ok(
            None,
            "{ storyTray { nodes { author { username } storyCount } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        tray["storyTray"]["nodes"],
        json!([{ "author": { "username": "purge1" }, "storyCount": 1 }])
    );
    let still = app
        .ok(
            None,
            "query($id: ID!) { status(id: $id) { id } }",
            json!({ "id": live }),
        )
        .await;
    assert_eq!(still["status"]["id"], live);
    // Idempotent: nothing left to do.
    let again = status_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(again.rows, 0);
}

/// With a batch smaller than the backlog, one run still drains all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_batches_drain_everything_sqlite() {
    small_batches(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_batches_drain_everything_postgres() {
    small_batches(Backend::Postgres).await;
}

async fn small_batches(backend: Backend) {
    // One worker: batches of 7, in order.
    let report = purge_in_batches_of_7(backend, 1, 2).await;
    assert_eq!(report.rows, 50);
    assert_eq!(report.batches, 8); // 7 x 7 + 1
    // Four workers (one on SQLite): every row once, no batch over 7.
    let report = purge_in_batches_of_7(backend, 4, 4).await;
    assert_eq!(report.rows, 100);
    assert!(report.batches >= 15, "{report:?}"); // 100 = 14 x 7 + 2
}

/// Seeds 25 statuses for each of `users`, lets them expire and purges them
/// 7 per batch with `workers`; checks nothing is left.
async fn purge_in_batches_of_7(
    backend: Backend,
    workers: u32,
    users: usize,
) -> ephemera::domain::BatchReport {
    let app = TestApp::spawn_with(backend, |c| {
        c.statuses.purge_batch = 7;
        c.statuses.purge_workers = workers;
    })
    .await;
    seed(&app, users, 25).await;
    app.clock.advance(HOUR * 25);
    let report = status_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM status_tray").await, 0);
    app.finish().await;
    report
}

async fn concurrent_purges_share_the_work(app: &TestApp) {
    seed(app, 4, 25).await;
    app.clock.advance(HOUR * 25);
    let now = app.clock.now();
    let (a, b, c) = tokio::join!(
        status_purge::run_once(&app.state, now),
        status_purge::run_once(&app.state, now),
        status_purge::run_once(&app.state, now),
    );
    let total = a.unwrap().rows + b.unwrap().rows + c.unwrap().rows;
    assert_eq!(total, 100, "every row deleted exactly once");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 0);
}

/// On PostgreSQL, a batch claimed by one purge is skipped, not waited for, by another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_locked_leaves_claimed_rows_to_their_owner() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let app = TestApp::spawn(Backend::Postgres).await;
    seed(&app, 1, 10).await;
    app.clock.advance(HOUR * 25);
    // Another instance holds locks on the three oldest expired rows.
    let holder = app.state.db.begin().await.unwrap();
    holder
        .execute_unprepared("SELECT id FROM statuses ORDER BY expires_at LIMIT 3 FOR UPDATE")
        .await
        .unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(20),
        status_purge::run_once(&app.state, app.clock.now()),
    )
    .await
    .expect("the purge never waits for locked rows")
    .unwrap();
    assert_eq!(report.rows, 7);
    holder.rollback().await.unwrap();
    let rest = status_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(rest.rows, 3);
    app.finish().await;
}

/// The purge runs on its own through the real scheduler; a failed run is
/// retried at the next tick and does not stop the scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_runs_the_purge_and_survives_failures() {
    use sea_orm::ConnectionTrait;
    let app = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.jobs.enabled = true;
        c.statuses.purge_cron = "* * * * * *".into();
    })
    .await;
    seed(&app, 1, 3).await;
    // Break the purge (its tray statement fails), let it fail twice, then mend it.
    app.state
        .db
        .execute_unprepared("ALTER TABLE status_tray RENAME TO status_tray_away")
        .await
        .unwrap();
    let failures = app.metric("ephemera_db_statement_failures_total").await;
    app.clock.advance(HOUR * 25);
    app.wait_for_metric("ephemera_db_statement_failures_total", failures + 2)
        .await;
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM statuses").await,
        3,
        "a failed run deletes nothing"
    );
    app.state
        .db
        .execute_unprepared("ALTER TABLE status_tray_away RENAME TO status_tray")
        .await
        .unwrap();
    let left = app
        .wait_for_count("SELECT COUNT(*) AS n FROM statuses", 0)
        .await;
    assert_eq!(left, 0, "the scheduled purge did not run again");
    app.finish().await;
}

/// An invalid cron expression stops the server from starting, with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_cron_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ephemera::config::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.data_dir = dir.path().to_path_buf();
    config.statuses.purge_cron = "every minute".into();
    let err = ephemera::app::App::build(config, ephemera::clock::Clock::system())
        .await
        .err()
        .expect("refused");
    assert!(err.message().contains("cron"), "{err:?}");
}

/// `ephemera jobs run status-purge` runs the job once and says what it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_command() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    // Post two days ago by the server's clock, so that the real clock the
    // command uses finds the statuses expired.
    app.clock
        .set(chrono::Utc::now().timestamp_millis() - 48 * 3_600_000);
    seed(&app, 1, 2).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ephemera"))
        .args(["jobs", "run", "status-purge"])
        .env("DATABASE_URL", &app.database_url)
        .env("EPHEMERA_DATA_DIR", tempfile::tempdir().unwrap().path())
        .env("EPHEMERA_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "status-purge: deleted 2 expired statuses in 1 batches"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 0);
    app.finish().await;
}
