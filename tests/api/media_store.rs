//! The media store's contract, the same on local disk and S3; the deletion
//! outbox across an S3 outage (nothing lost, nothing orphaned), with several
//! job runs at once, through the scheduler and through `ephemera jobs run`.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use crate::support::{Backend, HOUR, Store, TestApp, raw};

const CREATE: &str = "mutation($i: CreateStatusInput!) { createStatus(input: $i) { id } }";

async fn outage(backend: Backend) {
    let app = TestApp::spawn_full(backend, Store::S3, |_| {}).await;
    let u = app.sign_up("poster").await;
    let live = app.upload_fixture(&u, "gps.png").await;
    app.ok(u.token(), CREATE, json!({ "i": { "mediaId": live["id"] } }))
        .await;
    let mut doomed = Vec::new();
    for _ in 0..3 {
        let m = app.upload_fixture(&u, "gps.jpg").await;
        let s = app
            .ok(u.token(), CREATE, json!({ "i": { "mediaId": m["id"] } }))
            .await;
        doomed.push(s["createStatus"]["id"].clone());
    }
    assert_eq!(app.store_keys().await.len(), 4);

    let s3 = app.s3.as_ref().unwrap();
    s3.stop().await;
    // Deleting works while S3 is down: the rows go, the blobs wait in the outbox.
    for id in &doomed {
        app.ok(
            u.token(),
            "mutation($id: ID!) { deleteStatus(id: $id) }",
            json!({ "id": id }),
        )
        .await;
    }
    let report = app.media_gc().await;
    assert_eq!((report.deleted, report.failed), (0, 3));
    assert_eq!(
        app.metric("ephemera_media_blob_delete_failures_total")
            .await,
        3
    );
    assert_eq!(app.metric("ephemera_media_deletions_waiting").await, 3);
    assert_eq!(app.metric("ephemera_media_uploads_total").await, 4);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM media_deletions WHERE attempts = 1 AND last_error IS NOT NULL").await, 3);
    // Uploads fail cleanly while S3 is down, and leave no row behind.
    let (_, resp) = app
        .upload(
            u.token(),
            crate::support::fixture("gps.png"),
            "a.png",
            "image/png",
        )
        .await;
    assert_eq!(
        resp["errors"][0]["extensions"]["code"], "INTERNAL_SERVER_ERROR",
        "{resp}"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM media").await, 1);
    // Failures back off: a second failed round doubles the wait.
    app.clock.advance(Duration::from_secs(31));
    assert_eq!(
        app.media_gc().await.failed,
        4,
        "three deletions and the failed upload's blob"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM media_deletions").await,
        4
    );

    s3.restart().await;
    // Not due yet: nothing is retried before its backoff passes.
    assert_eq!(app.media_gc().await.deleted, 0);
    app.clock.advance(HOUR);
    assert_eq!(app.media_gc().await.deleted, 4);
    assert_eq!(app.metric("ephemera_media_deletions_waiting").await, 0);
    assert_eq!(app.metric("ephemera_media_blobs_deleted_total").await, 4);
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM media_deletions").await,
        0
    );
    // Zero orphans, zero live blobs lost.
    let keys = app.store_keys().await;
    let live_key: Vec<String> = vec![live_key(&app, &live["id"]).await];
    assert_eq!(keys, live_key);
    let url = live["url"].as_str().unwrap();
    assert_eq!(app.fetch(url).await.0, reqwest::StatusCode::OK);
    app.finish().await;
}

async fn live_key(app: &TestApp, id: &serde_json::Value) -> String {
    use sea_orm::{ConnectionTrait, Statement};
    let row = app
        .state
        .db
        .query_one_raw(Statement::from_string(
            app.state.db.get_database_backend(),
            format!(
                "SELECT storage_key FROM media WHERE id = {}",
                raw(id.as_str().unwrap())
            ),
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get::<String>("", "storage_key").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_outage_loses_nothing_sqlite() {
    outage(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_outage_loses_nothing_postgres() {
    outage(Backend::Postgres).await;
}

/// put/get/size/delete/keys/url/upload target, the same on both stores.
async fn store_contract(store: Store) {
    let app = TestApp::spawn_full(Backend::Sqlite, store, |_| {}).await;
    let media = &app.state.media.store;
    let key = ephemera::storage::new_key();
    assert_eq!(media.size(&key).await.unwrap(), None);
    assert!(media.get(&key).await.unwrap().is_none());
    media
        .delete(&key)
        .await
        .expect("deleting a missing key succeeds");
    media
        .put(&key, Bytes::from_static(b"first"), "image/png")
        .await
        .unwrap();
    media
        .put(&key, Bytes::from_static(b"second!"), "image/png")
        .await
        .unwrap();
    assert_eq!(media.size(&key).await.unwrap(), Some(7));
    assert_eq!(
        media.get(&key).await.unwrap().unwrap(),
        Bytes::from_static(b"second!")
    );
    let other = ephemera::storage::new_key();
    media
        .put(&other, Bytes::from_static(b"x"), "image/gif")
        .await
        .unwrap();
    let mut expected = vec![key.clone(), other.clone()];
    expected.sort();
    assert_eq!(media.keys().await.unwrap(), expected);
    // A URL serves the bytes.
    let url = media.url(&key, app.clock.now(), HOUR).await.unwrap();
    let (status, bytes) = app.fetch(&url).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(bytes, b"second!");
    // An upload target takes exactly what it signed.
    let target = media
        .upload_target(
            &other,
            "image/png",
            3,
            app.clock.now(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert!(target.expires_at > app.clock.now());
    media.delete(&key).await.unwrap();
    media.delete(&key).await.unwrap();
    assert_eq!(media.keys().await.unwrap(), vec![other.clone()]);
    let (status, _) = app.fetch(&url).await;
    assert!(status.is_client_error(), "{status}");
    app.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_contract_local() {
    store_contract(Store::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_contract_s3() {
    store_contract(Store::S3).await;
}

/// S3 URLs are presigned and expire: one made three hours ago no longer works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_urls_expire() {
    let app = TestApp::spawn_full(Backend::Sqlite, Store::S3, |_| {}).await;
    let u = app.sign_up("viewer").await;
    let m = app.upload_fixture(&u, "gps.png").await;
    let url = m["url"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1") && url.contains("X-Amz-Signature"),
        "{url}"
    );
    assert_eq!(app.fetch(&url).await.0, reqwest::StatusCode::OK);
    let now = app.clock.now();
    app.clock.set(now - 3 * HOUR.as_millis() as i64);
    let node = "query($id: ID!) { node(id: $id) { ... on Media { url } } }";
    let old = app.ok(u.token(), node, json!({ "id": m["id"] })).await["node"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(old, url);
    // (s3s answers 400 for an expired URL where AWS answers 403.)
    assert!(app.fetch(&old).await.0.is_client_error());
    let tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0");
    assert!(app.fetch(&tampered).await.0.is_client_error());
    app.finish().await;
}

/// Uploads `n` images for `u`, posts each in a status and deletes it, leaving
/// `n` blobs in the outbox.
async fn queue_deletions(app: &TestApp, u: &crate::support::TestUser, n: usize) {
    for _ in 0..n {
        let m = app.upload_fixture(u, "tiny.gif").await;
        let s = app
            .ok(u.token(), CREATE, json!({ "i": { "mediaId": m["id"] } }))
            .await;
        app.ok(
            u.token(),
            "mutation($id: ID!) { deleteStatus(id: $id) }",
            json!({ "id": s["createStatus"]["id"] }),
        )
        .await;
    }
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM media_deletions").await,
        n as i64
    );
}

/// Three drains at once (as on three instances) claim disjoint batches: each
/// blob is deleted once and the outbox ends empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_gc_runs_share_the_outbox() {
    let app = TestApp::spawn_full(Backend::Postgres, Store::S3, |c| c.media.gc_batch = 4).await;
    let u = app.sign_up("poster").await;
    queue_deletions(&app, &u, 24).await;
    assert_eq!(app.store_keys().await.len(), 24);
    let (a, b, c) = tokio::join!(app.media_gc(), app.media_gc(), app.media_gc());
    assert_eq!(a.deleted + b.deleted + c.deleted, 24, "{a:?} {b:?} {c:?}");
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM media_deletions").await,
        0
    );
    assert!(app.store_keys().await.is_empty());
    app.finish().await;
}

/// The media job runs on its own through the real scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_runs_the_media_job() {
    let app = TestApp::spawn_full(Backend::Sqlite, Store::Local, |c| {
        c.jobs.enabled = true;
        c.media.gc_cron = "* * * * * *".into();
    })
    .await;
    let u = app.sign_up("poster").await;
    queue_deletions(&app, &u, 2).await;
    let left = app
        .wait_for_count("SELECT COUNT(*) AS n FROM media_deletions", 0)
        .await;
    assert_eq!(left, 0, "the scheduled media job did not run");
    assert!(app.store_keys().await.is_empty());
    app.finish().await;
}

/// `ephemera jobs run media-gc` runs the job once and says what it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_media_gc_command() {
    let app = TestApp::spawn_full(Backend::Sqlite, Store::Local, |_| {}).await;
    let u = app.sign_up("poster").await;
    queue_deletions(&app, &u, 2).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ephemera"))
        .args(["jobs", "run", "media-gc"])
        .env("DATABASE_URL", &app.database_url)
        .env("EPHEMERA_DATA_DIR", &app.state.config.server.data_dir)
        .env("EPHEMERA_JWT_SECRET", crate::support::JWT_SECRET)
        .env("EPHEMERA_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "media-gc: swept 0 unattached uploads, deleted 2 blobs, 0 deletions failed (queued for retry)"
    );
    assert!(app.store_keys().await.is_empty());
    app.finish().await;
}

/// A page of statuses with media, URLs included, runs as many statements for
/// one item as for many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_pages_run_constant_statements() {
    for store in [Store::Local, Store::S3] {
        let app = TestApp::spawn_full(Backend::Sqlite, store, |_| {}).await;
        let u = app.sign_up("poster").await;
        for _ in 0..5 {
            let m = app.upload_fixture(&u, "tiny.gif").await;
            app.ok(u.token(), CREATE, json!({ "i": { "mediaId": m["id"] } }))
                .await;
        }
        let q = "query($u: ID!, $n: Int) { statuses(userId: $u, first: $n) { nodes { id media { id url contentType width } } } }";
        // The token's session is looked up once, then remembered for a few
        // seconds: look it up before counting.
        app.ok(u.token(), "{ __typename }", json!({})).await;
        let mut counts = Vec::new();
        for n in [1, 5] {
            let (count, data) = app
                .statements_during(app.ok(u.token(), q, json!({ "u": u.id, "n": n })))
                .await;
            assert_eq!(data["statuses"]["nodes"].as_array().unwrap().len(), n);
            counts.push(count);
        }
        assert_eq!(counts[0], counts[1], "{store:?}: {counts:?}");
        app.finish().await;
    }
}
