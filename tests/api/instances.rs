//! Several instances as one (PostgreSQL, media in S3): three `ephemera`
//! processes on one database and one S3 server. A subscriber on each hears
//! every status posted through any of them, once, in order; a transaction
//! that commits after later ones is delivered in its place by every
//! instance, not skipped; a client resumes on another instance than the one
//! it left; no two live instances hold the
//! same node id, and a dead one's is taken over only after its lease; and an
//! instance killed with `kill -9` in the middle of a status purge, a moment
//! purge or a media round leaves work the others finish, with nothing lost,
//! done twice, orphaned or deleted early.

use std::time::Duration;

use serde_json::json;

use crate::live::{ev, next_events, silent, subscribe};
use crate::support::cluster::{Cluster, kill9};
use crate::support::ws::{Protocol, WsClient};
use crate::support::{IdKind, gid, raw};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_deliver_every_status_to_every_subscriber_once_in_order() {
    let cluster = Cluster::new().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(cluster.spawn(&[]).await);
    }
    let mut nodes = Vec::new();
    for i in &instances {
        nodes.push(i.node_id().await);
    }
    nodes.sort_unstable();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "every instance leased its own node id");

    let authors = [
        instances[0].sign_up("alpha").await,
        instances[1].sign_up("bravo").await,
        instances[2].sign_up("charlie").await,
    ];
    // On each instance: `statusCreated` (anonymous) and `events` (signed in).
    let mut plain = Vec::new();
    let mut resumable = Vec::new();
    for (i, instance) in instances.iter().enumerate() {
        let (mut ws, ack) =
            WsClient::connect(&instance.ws_url, Protocol::TransportWs, json!({})).await;
        assert_eq!(ack["type"], "connection_ack");
        ws.subscribe("s", "subscription { statusCreated { id } }", json!({}))
            .await;
        plain.push(ws);
        resumable.push(subscribe(&instance.ws_url, Some(&authors[(i + 1) % 3]), json!({})).await);
        instance.wait_for_metric("ephemera_subscribers", 2).await;
    }
    // Posted round the instances, each by a different author.
    let mut posted = Vec::new();
    for n in 0..30 {
        let k = n % 3;
        posted.push(
            instances[k]
                .post_status(&authors[k], &format!("status {n}"))
                .await,
        );
    }
    let expected: Vec<_> = posted
        .iter()
        .map(|id| ev("StatusCreatedEvent", id))
        .collect();
    for ws in &mut resumable {
        assert_eq!(next_events(ws, 30).await, expected);
    }
    for ws in &mut plain {
        let mut heard = Vec::new();
        for _ in 0..30 {
            heard.push(
                ws.next_payload().await["data"]["statusCreated"]["id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        assert_eq!(heard, posted);
    }
    for ws in plain.iter_mut().chain(resumable.iter_mut()) {
        assert!(silent(ws, Duration::from_millis(500)).await, "once each");
    }
    drop(instances);
    cluster.finish().await;
}

/// A transaction that wrote its event first but commits last (held open
/// on the shared database while three instances take posts): no instance
/// skips it, and each delivers it before the posts that came after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_is_delivered_in_its_place_by_every_instance() {
    use crate::support::write_logged_status;
    use sea_orm::TransactionTrait;

    let cluster = Cluster::new().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(cluster.spawn(&[]).await);
    }
    let author = instances[0].sign_up("latecomer").await;
    let author_id: i64 = raw(&author.id);
    let mut sockets = Vec::new();
    for i in &instances {
        sockets.push(subscribe(&i.ws_url, None, json!({})).await);
        i.wait_for_metric("ephemera_subscribers", 1).await;
    }
    let now = chrono::Utc::now().timestamp_millis();
    let late_id: i64 = 9_000_000_001;
    let txn = cluster.db.begin().await.unwrap();
    write_logged_status(&txn, late_id, author_id, now).await;
    // Posts through each instance commit while it is open.
    let mut after = Vec::new();
    for i in &instances {
        after.push(i.post_status(&author, "on time").await);
    }
    for ws in &mut sockets {
        assert!(silent(ws, Duration::from_millis(300)).await, "held back");
    }
    txn.commit().await.unwrap();
    let mut expected = vec![ev("StatusCreatedEvent", &gid(IdKind::Status, late_id))];
    expected.extend(after.iter().map(|id| ev("StatusCreatedEvent", id)));
    for ws in &mut sockets {
        assert_eq!(next_events(ws, 4).await, expected);
        assert!(silent(ws, Duration::from_millis(300)).await, "once each");
    }
    drop(instances);
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_another_instance_without_missing_anything() {
    let cluster = Cluster::new().await;
    let a = cluster.spawn(&[]).await;
    let b = cluster.spawn(&[]).await;
    let c = cluster.spawn(&[]).await;
    let author = a.sign_up("roamer").await;
    let listener = a.sign_up("listener").await;
    let mut ws = subscribe(&a.ws_url, Some(&listener), json!({})).await;
    a.wait_for_metric("ephemera_subscribers", 1).await;
    let first = b.post_status(&author, "before").await;
    let p = ws.next_payload().await;
    assert_eq!(crate::live::summary(&p), ev("StatusCreatedEvent", &first));
    let cursor = p["data"]["events"]["cursor"].as_str().unwrap().to_owned();
    // The phone changes networks: gone from A while B and C take posts.
    drop(ws);
    let mut missed = Vec::new();
    for (n, instance) in [&b, &c, &a, &c].into_iter().enumerate() {
        missed.push(instance.post_status(&author, &format!("away {n}")).await);
    }
    let mut back = subscribe(&c.ws_url, Some(&listener), json!({ "after": cursor })).await;
    let expected: Vec<_> = missed
        .iter()
        .map(|id| ev("StatusCreatedEvent", id))
        .collect();
    assert_eq!(next_events(&mut back, 4).await, expected);
    let live = b.post_status(&author, "live").await;
    assert_eq!(
        next_events(&mut back, 1).await,
        vec![ev("StatusCreatedEvent", &live)]
    );
    assert!(silent(&mut back, Duration::from_millis(500)).await);
    drop((a, b, c));
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ids_are_never_shared_and_a_dead_instances_is_taken_over_after_its_lease() {
    let cluster = Cluster::new().await;
    let lease = [("EPHEMERA_NODE_LEASE", "2s")];
    let mut first = cluster.spawn(&lease).await;
    let second = cluster.spawn(&lease).await;
    let dead = first.node_id().await;
    assert_ne!(dead, second.node_id().await);
    first.kill9().await;
    // Its lease is still running: a new instance takes another id.
    let third = cluster.spawn(&lease).await;
    let third_id = third.node_id().await;
    assert_ne!(third_id, dead);
    assert_ne!(third_id, second.node_id().await);
    // Renewed while they live (every third of the lease), never taken from them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fourth = cluster.spawn(&lease).await;
    assert_eq!(
        fourth.node_id().await,
        dead,
        "the dead one's, once its lease ran out"
    );
    let held: Vec<u64> = vec![
        second.node_id().await,
        third.node_id().await,
        fourth.node_id().await,
    ];
    let mut distinct = held.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{held:?}");
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM node_leases WHERE expires_at > (EXTRACT(EPOCH FROM now()) * 1000)::bigint")
            .await,
        3
    );
    // A clean stop gives the id back at once.
    drop((second, third, fourth));
    cluster.finish().await;
}

/// Seeds `n` statuses of one author, each with a media row and its blob:
/// `expired` ones a day old, the others live. Returns the author's id.
async fn seed_statuses(cluster: &Cluster, author: i64, first_id: i64, n: i64, expired: bool) {
    let now = chrono::Utc::now().timestamp_millis();
    let (created, expires) = if expired {
        (now - 25 * 3_600_000, now - 3_600_000)
    } else {
        (now, now + 3_600_000)
    };
    let tag = if expired { "e" } else { "l" };
    cluster
        .execute(&format!(
            "INSERT INTO media (id, owner_id, storage_key, content_type, byte_size, width, height, created_at, ready_at, attached_at) \
             SELECT {first_id} + g, {author}, 'kp/{tag}' || ({first_id} + g), 'image/gif', 10, 1, 1, {created}, {created}, {created} \
             FROM generate_series(0, {n} - 1) g"
        ))
        .await;
    cluster
        .execute(&format!(
            "INSERT INTO statuses (id, author_id, media_id, caption, created_at, expires_at, audience) \
             SELECT {first_id} + 500000000 + g, {author}, {first_id} + g, 'seeded', {created}, {expires}, 'PUBLIC' \
             FROM generate_series(0, {n} - 1) g"
        ))
        .await;
    for i in 0..n {
        let path = cluster.s3.object_path(&format!("kp/{tag}{}", first_id + i));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"GIF89a").unwrap();
    }
}

/// Starts job `name` and `kill -9`s it once `remaining` (a count query)
/// has fallen below `start` but not to zero; returns what remained.
async fn kill_midway(
    cluster: &Cluster,
    name: &str,
    extra: &[(&str, &str)],
    remaining: &str,
    start: i64,
) -> i64 {
    let mut job = cluster.start_job(name, extra);
    let mut left = start;
    for _ in 0..6000 {
        left = cluster.count(remaining).await;
        if left < start {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kill9(&mut job).await;
    let left_after = cluster.count(remaining).await;
    assert!(
        left_after > 0 && left_after < start,
        "{name} was not killed midway: {left} then {left_after} of {start} left"
    );
    left_after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_status_purge_and_mid_media_round_the_others_finish() {
    let cluster = Cluster::new().await;
    let server = cluster.spawn(&[]).await;
    let author = server.sign_up("prolific").await;
    let author_id: i64 = raw(&author.id);
    let mut ws = subscribe(&server.ws_url, None, json!({})).await;
    server.wait_for_metric("ephemera_subscribers", 1).await;
    const EXPIRED: i64 = 3000;
    const LIVE: i64 = 20;
    seed_statuses(&cluster, author_id, 1_000_000, EXPIRED, true).await;
    seed_statuses(&cluster, author_id, 2_000_000, LIVE, false).await;
    let expired = "SELECT COUNT(*) AS n FROM statuses WHERE expires_at < (EXTRACT(EPOCH FROM now()) * 1000)::bigint";

    // Killed in the middle of the purge (one small batch at a time).
    let slow = [
        ("EPHEMERA_STATUS_PURGE_BATCH", "5"),
        ("EPHEMERA_STATUS_PURGE_WORKERS", "1"),
    ];
    kill_midway(&cluster, "status-purge", &slow, expired, EXPIRED).await;
    // Another instance finishes it.
    let ran = cluster.run_job("status-purge", &[]).await;
    assert!(ran.success, "{}", ran.output);
    assert_eq!(cluster.count(expired).await, 0);
    assert_eq!(
        cluster.count("SELECT COUNT(*) AS n FROM statuses").await,
        LIVE
    );
    // Every purged status's media row went, its blob queued exactly once;
    // no live one's.
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM media WHERE storage_key LIKE 'kp/e%'")
            .await,
        0
    );
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM media_deletions WHERE storage_key LIKE 'kp/e%'")
            .await,
        EXPIRED
    );
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM media_deletions WHERE storage_key LIKE 'kp/l%'")
            .await,
        0
    );
    // Each deletion logged once, and subscribers told (none of them was
    // ever announced as created, so they are all news of deletions).
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM events WHERE kind = 'STATUS_DELETED'")
            .await,
        EXPIRED
    );
    let mut deleted = std::collections::HashSet::new();
    for _ in 0..EXPIRED {
        let (kind, id) = crate::live::summary(&ws.next_payload().await);
        assert_eq!(kind, "StatusDeletedEvent");
        assert!(deleted.insert(id), "a deletion heard twice");
    }

    // The media round, against a slow store: killed midway, its claimed
    // blobs are left to it for the lease, then another instance takes them.
    cluster.s3.slow_deletes(Duration::from_millis(3));
    let queued = "SELECT COUNT(*) AS n FROM media_deletions";
    let lease = [
        ("EPHEMERA_MEDIA_CLAIM_LEASE", "3s"),
        ("EPHEMERA_MEDIA_GC_BATCH", "50"),
    ];
    kill_midway(&cluster, "media-gc", &lease, queued, EXPIRED).await;
    let ran = cluster.run_job("media-gc", &lease).await;
    assert!(ran.success, "{}", ran.output);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ran = cluster.run_job("media-gc", &lease).await;
    assert!(ran.success, "{}", ran.output);
    assert_eq!(cluster.count(queued).await, 0);
    for i in 0..EXPIRED {
        let key = format!("kp/e{}", 1_000_000 + i);
        assert!(!cluster.s3.object_path(&key).exists(), "{key} orphaned");
    }
    for i in 0..LIVE {
        let key = format!("kp/l{}", 2_000_000 + i);
        assert!(cluster.s3.object_path(&key).exists(), "{key} deleted early");
    }
    drop(server);
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_moment_purge_the_others_finish() {
    let cluster = Cluster::new().await;
    let server = cluster.spawn(&[]).await;
    let author = server.sign_up("diarist").await;
    let author_id: i64 = raw(&author.id);
    const GONE: i64 = 3000;
    const KEPT: i64 = 20;
    let now = chrono::Utc::now().timestamp_millis();
    // Soft-deleted eight days ago (past the 7-day grace), and live ones.
    for (first, n, deleted_at, tag) in [
        (3_000_000i64, GONE, format!("{}", now - 8 * 86_400_000), "g"),
        (4_000_000i64, KEPT, "NULL".to_owned(), "k"),
    ] {
        cluster
            .execute(&format!(
                "INSERT INTO media (id, owner_id, storage_key, content_type, byte_size, width, height, created_at, ready_at, attached_at) \
                 SELECT {first} + g, {author_id}, 'mp/{tag}' || ({first} + g), 'image/gif', 10, 1, 1, {now}, {now}, {now} \
                 FROM generate_series(0, {n} - 1) g"
            ))
            .await;
        cluster
            .execute(&format!(
                "INSERT INTO moments (id, author_id, media_id, caption, latitude, longitude, map_cell, visibility, is_journaled, duration_hours, expires_at, created_at, deleted_at, likes_count) \
                 SELECT {first} + 500000000 + g, {author_id}, {first} + g, 'seeded', 48.85, 2.35, 0, 'PUBLIC', TRUE, 0, NULL, {now}, {deleted_at}, 0 \
                 FROM generate_series(0, {n} - 1) g"
            ))
            .await;
    }
    let gone = "SELECT COUNT(*) AS n FROM moments WHERE deleted_at IS NOT NULL";
    let slow = [("EPHEMERA_MOMENT_BATCH", "5")];
    kill_midway(&cluster, "moment-purge", &slow, gone, GONE).await;
    let ran = cluster.run_job("moment-purge", &[]).await;
    assert!(ran.success, "{}", ran.output);
    assert_eq!(cluster.count(gone).await, 0);
    assert_eq!(
        cluster.count("SELECT COUNT(*) AS n FROM moments").await,
        KEPT
    );
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM media WHERE storage_key LIKE 'mp/g%'")
            .await,
        0
    );
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM media_deletions WHERE storage_key LIKE 'mp/g%'")
            .await,
        GONE
    );
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM media WHERE storage_key LIKE 'mp/k%'")
            .await,
        KEPT
    );
    assert_eq!(
        cluster
            .count("SELECT COUNT(*) AS n FROM media_deletions WHERE storage_key LIKE 'mp/k%'")
            .await,
        0
    );
    drop(server);
    cluster.finish().await;
}
