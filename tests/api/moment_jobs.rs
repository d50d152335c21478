//! The moment lifecycle jobs: expiry soft-deletes what expired (never a
//! journaled moment), the purge hard-deletes past the grace with likes and
//! media; both drain their backlog in one run, are idempotent, share the
//! work when run at once, run from the real scheduler and from the command.

use std::time::Duration;

use ephemera::jobs::{moment_expiry, moment_purge};
use serde_json::json;

use crate::both_backends;
use crate::support::{Backend, HOUR, Seed, TestApp, raw};

both_backends!(expiry_and_purge_lifecycle, concurrent_runs_share_the_work,);

const DAY: Duration = Duration::from_secs(86_400);

async fn expiry_and_purge_lifecycle(app: &TestApp) {
    let u = app.sign_up("cycler").await;
    let fan = app.sign_up("fan").await;
    let short = app
        .post_moment(
            &u,
            json!({ "durationHours": 1, "visibility": "PUBLIC", "placeName": "Old Town" }),
        )
        .await;
    app.ok(
        fan.token(),
        "mutation($id: ID!) { toggleMomentLike(momentId: $id) { id } }",
        json!({ "id": short["id"] }),
    )
    .await;
    let journaled = app.post_moment(&u, json!({ "durationHours": 0 })).await;
    let long = app.post_moment(&u, json!({ "durationHours": 48 })).await;
    assert_eq!(app.store_keys().await.len(), 3);

    // Before anything expired: nothing to do.
    let r = moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 0);
    app.clock.advance(HOUR * 2);
    let r = moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 1);
    let again = moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(again.rows, 0, "idempotent");
    let deleted = app
        .count("SELECT COUNT(*) AS n FROM moments WHERE deleted_at IS NOT NULL")
        .await;
    assert_eq!(deleted, 1);

    // Within the grace the purge leaves it (and its like) alone.
    app.clock.advance(DAY * 6);
    let r = moment_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 0);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moment_likes").await, 1);

    // Past it: the moment, its like and its media row go; its blob is queued.
    app.clock.advance(DAY * 2);
    let r = moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 1, "the 48-hour moment expired meanwhile");
    let r = moment_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 1);
    let short_id = raw(short["id"].as_str().unwrap());
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) AS n FROM moments WHERE id = {short_id}"
        ))
        .await,
        0
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moment_likes").await, 0);
    let media_id = raw(short["media"]["id"].as_str().unwrap());
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) AS n FROM media WHERE id = {media_id}"
        ))
        .await,
        0
    );
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM media_deletions").await,
        1
    );
    app.media_gc().await;
    assert_eq!(app.store_keys().await.len(), 2, "only the purged blob went");
    // The location stays with no moment.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM locations").await, 1);
    // The journaled moment is untouched by both; the 48-hour one waits for its grace.
    let remaining = app
        .count(&format!(
            "SELECT COUNT(*) AS n FROM moments WHERE id IN ({}, {})",
            raw(journaled["id"].as_str().unwrap()),
            raw(long["id"].as_str().unwrap())
        ))
        .await;
    assert_eq!(remaining, 2);
    app.clock.advance(DAY * 8);
    moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    let r = moment_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 1);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moments").await, 1);
    assert_eq!(
        app.count(
            "SELECT COUNT(*) AS n FROM moments WHERE is_journaled = TRUE AND deleted_at IS NULL"
        )
        .await,
        1
    );
}

async fn concurrent_runs_share_the_work(app: &TestApp) {
    let u = app.sign_up("many").await;
    app.seed_moments(&u, 120, Seed::default()).await;
    app.seed_moments(&u, 5, Seed::journaled()).await;
    app.clock.advance(DAY * 2);
    let now = app.clock.now();
    let (a, b, c) = tokio::join!(
        moment_expiry::run_once(&app.state, now),
        moment_expiry::run_once(&app.state, now),
        moment_expiry::run_once(&app.state, now),
    );
    let total = a.unwrap().rows + b.unwrap().rows + c.unwrap().rows;
    assert_eq!(total, 120, "every moment soft-deleted exactly once");
    app.clock.advance(DAY * 8);
    let now = app.clock.now();
    let (a, b, c) = tokio::join!(
        moment_purge::run_once(&app.state, now),
        moment_purge::run_once(&app.state, now),
        moment_purge::run_once(&app.state, now),
    );
    let total = a.unwrap().rows + b.unwrap().rows + c.unwrap().rows;
    assert_eq!(total, 120, "every moment purged exactly once");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moments").await, 5);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM media").await, 5);
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM media_deletions").await,
        120
    );
}

/// With a batch smaller than the backlog, one run still drains all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_batches_drain_everything() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let app = TestApp::spawn_with(backend, |c| c.moments.batch = 7).await;
        let u = app.sign_up("backlog").await;
        app.seed_moments(&u, 50, Seed::default()).await;
        app.clock.advance(DAY * 2);
        let r = moment_expiry::run_once(&app.state, app.clock.now())
            .await
            .unwrap();
        assert_eq!((r.rows, r.batches), (50, 8));
        app.clock.advance(DAY * 8);
        let r = moment_purge::run_once(&app.state, app.clock.now())
            .await
            .unwrap();
        assert_eq!((r.rows, r.batches), (50, 8));
        assert_eq!(app.count("SELECT COUNT(*) AS n FROM moments").await, 0);
        app.finish().await;
    }
}

/// On PostgreSQL, rows another instance has claimed are skipped, not waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_locked_leaves_claimed_moments_alone() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let app = TestApp::spawn(Backend::Postgres).await;
    let u = app.sign_up("locked").await;
    app.seed_moments(&u, 10, Seed::default()).await;
    app.clock.advance(DAY * 2);
    let holder = app.state.db.begin().await.unwrap();
    holder
        .execute_unprepared("SELECT id FROM moments ORDER BY expires_at LIMIT 3 FOR UPDATE")
        .await
        .unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        moment_expiry::run_once(&app.state, app.clock.now()),
    )
    .await
    .expect("the expiry never waits for locked rows")
    .unwrap();
    assert_eq!(r.rows, 7);
    // Reads do not wait either: liveness is in the query.
    let feed = tokio::time::timeout(
        Duration::from_secs(20),
        app.ok(None, "{ momentFeed { nodes { id } } }", json!({})),
    )
    .await
    .expect("reads never wait for a job");
    assert_eq!(feed["momentFeed"]["nodes"].as_array().unwrap().len(), 0);
    holder.rollback().await.unwrap();
    let r = moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 3);
    app.finish().await;
}

/// Both jobs run on their own through the real scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_runs_the_moment_jobs() {
    let app = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.jobs.enabled = true;
        c.moments.expiry_cron = "* * * * * *".into();
        c.moments.moment_purge_cron = "* * * * * *".into();
        c.moments.grace = Duration::from_secs(3600);
    })
    .await;
    let u = app.sign_up("scheduled").await;
    app.seed_moments(&u, 3, Seed::default()).await;
    app.clock.advance(DAY * 2);
    // Expired by the first tick; purged by a tick an hour of grace later.
    let soft = app
        .wait_for_count(
            "SELECT COUNT(*) AS n FROM moments WHERE deleted_at IS NOT NULL",
            3,
        )
        .await;
    assert_eq!(soft, 3, "the scheduled expiry did not run");
    app.clock.advance(HOUR * 2);
    let left = app
        .wait_for_count("SELECT COUNT(*) AS n FROM moments", 0)
        .await;
    assert_eq!(left, 0, "the scheduled purge did not run");
    app.finish().await;
}

/// `ephemera jobs run moment-expiry` and `moment-purge` run once and say what they did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_commands() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    // Seeded ten days ago by the server's clock, so the real clock the
    // command uses finds them expired, and then past the grace.
    app.clock
        .set(chrono::Utc::now().timestamp_millis() - 10 * 86_400_000);
    let u = app.sign_up("commander").await;
    app.seed_moments(&u, 2, Seed::default()).await;
    app.seed_moments(&u, 1, Seed::journaled()).await;
    let run = |job: &'static str| {
        let url = app.database_url.clone();
        async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ephemera"))
                .args(["jobs", "run", job])
                .env("DATABASE_URL", url)
                .env("EPHEMERA_DATA_DIR", tempfile::tempdir().unwrap().path())
                .env("EPHEMERA_LOG", "warn")
                .env("EPHEMERA_MOMENT_GRACE", "1h")
                .output()
                .await
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
    };
    assert_eq!(
        run("moment-expiry").await,
        "moment-expiry: soft-deleted 2 expired moments in 1 batches"
    );
    assert_eq!(
        run("moment-purge").await,
        "moment-purge: deleted 0 moments past the grace in 0 batches"
    );
    // Soft-deleted "now" by the real clock: an hour of grace later they go.
    use sea_orm::ConnectionTrait;
    app.state
        .db
        .execute_unprepared(
            "UPDATE moments SET deleted_at = deleted_at - 7200000 WHERE deleted_at IS NOT NULL",
        )
        .await
        .unwrap();
    assert_eq!(
        run("moment-purge").await,
        "moment-purge: deleted 2 moments past the grace in 1 batches"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moments").await, 1);
    app.finish().await;
}
