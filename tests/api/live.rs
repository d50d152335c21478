//! The `events` subscription over websockets, on both databases: every kind
//! of event reaches exactly those who may see it, a client resumes after its
//! cursor without missing or repeating anything, old and bad cursors are
//! refused with their codes, jobs announce what they remove, a subscriber
//! that falls behind catches up from the log, transactions that commit out
//! of order are not skipped (PostgreSQL), and node ids are leased.

use std::time::Duration;

use ephemera::events::Pos;
use ephemera::events::log;
use ephemera::ids::NodeLease;
use futures_util::StreamExt;
use sea_orm::{Database, TransactionTrait};
use serde_json::{Value, json};

use crate::support::ws::{Protocol, WsClient};
use crate::support::{Backend, IdKind, TestApp, TestUser, gid, raw, write_logged_status};
use crate::{both_backends, both_backends_with};

both_backends!(
    every_kind_reaches_those_who_may_see_it,
    a_client_resumes_after_its_cursor,
    old_and_bad_cursors_are_refused,
    jobs_announce_what_they_remove,
    node_ids_are_leased_one_holder_at_a_time,
);
both_backends_with!(tiny_buffer => a_subscriber_that_falls_behind_catches_up);

pub const EVENTS: &str = "subscription($after: String, $s: Scope) { events(after: $after, scope: $s) { __typename cursor \
    ... on StatusCreatedEvent { status { id caption } } \
    ... on StatusDeletedEvent { statusId authorId } \
    ... on StatusSeenEvent { status { id viewerHasSeen } } \
    ... on MomentCreatedEvent { moment { id } } \
    ... on MomentDeletedEvent { momentId authorId } \
    ... on MomentRestoredEvent { moment { id } } } }";

/// An event as `(typename, subject id)`.
pub fn summary(payload: &Value) -> (String, String) {
    let e = &payload["data"]["events"];
    assert!(e.is_object(), "not an event: {payload}");
    let kind = e["__typename"].as_str().unwrap_or_default().to_owned();
    let subject = [
        &e["status"]["id"],
        &e["statusId"],
        &e["moment"]["id"],
        &e["momentId"],
    ]
    .into_iter()
    .find_map(|v| v.as_str())
    .unwrap_or_default()
    .to_owned();
    (kind, subject)
}

/// `(typename, id)` pairs, for comparing sequences.
pub fn ev(kind: &str, id: &str) -> (String, String) {
    (kind.to_owned(), id.to_owned())
}

/// Connects as `user` (anonymous without) and subscribes to `events`.
pub async fn subscribe(ws_url: &str, user: Option<&TestUser>, vars: Value) -> WsClient {
    let init = match user {
        Some(u) => json!({ "authorization": format!("Bearer {}", u.token) }),
        None => json!({}),
    };
    let (mut ws, ack) = WsClient::connect(ws_url, Protocol::TransportWs, init).await;
    assert_eq!(ack["type"], "connection_ack");
    ws.subscribe("e", EVENTS, vars).await;
    ws
}

/// The next `n` events a socket hears, as summaries.
pub async fn next_events(ws: &mut WsClient, n: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(summary(&ws.next_payload().await));
    }
    out
}

/// Whether nothing arrives on `ws` within `wait`.
pub async fn silent(ws: &mut WsClient, wait: Duration) -> bool {
    tokio::time::timeout(wait, ws.next_message()).await.is_err()
}

/// The error code of a subscription's refusal (an `error` message, or a
/// `next` whose payload has errors).
pub fn refusal_code(msg: &Value) -> String {
    let errors = if msg["type"] == "error" {
        &msg["payload"]
    } else {
        &msg["payload"]["errors"]
    };
    errors[0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {msg}"))
        .to_owned()
}

/// Each step's event is awaited before the next step: an event is judged
/// when it is delivered, so a status deleted before its creation was read
/// is (rightly) not shown as created.
async fn every_kind_reaches_those_who_may_see_it(app: &TestApp) {
    let author = app.sign_up("author").await;
    let friend = app.sign_up("friend").await;
    let stranger = app.sign_up("stranger").await;
    app.befriend(&author, &friend).await;
    // 0: author, 1: friend, 2: stranger, 3: anonymous, 4: friend in FRIENDS scope.
    let mut sockets = vec![
        subscribe(&app.ws_url, Some(&author), json!({})).await,
        subscribe(&app.ws_url, Some(&friend), json!({})).await,
        subscribe(&app.ws_url, Some(&stranger), json!({})).await,
        subscribe(&app.ws_url, None, json!({})).await,
        subscribe(&app.ws_url, Some(&friend), json!({ "s": "FRIENDS" })).await,
    ];
    app.wait_for_metric("ephemera_subscribers", 5).await;
    async fn heard_by(sockets: &mut [WsClient], who: &[usize], expected: (String, String)) {
        for &i in who {
            // (The friendship made just before subscribing may reach it.)
            let p = loop {
                let p = sockets[i].next_payload().await;
                if p["data"]["events"]["__typename"] != "FriendshipChangedEvent" {
                    break p;
                }
            };
            assert_eq!(summary(&p), expected, "socket {i}: {p}");
            if expected.0 == "StatusSeenEvent" {
                assert_eq!(p["data"]["events"]["status"]["viewerHasSeen"], true);
            }
        }
    }
    let everyone = [0, 1, 2, 3, 4];
    let friends = [0, 1, 4];

    let s1 = app.post_status_to(&author, "for friends", "FRIENDS").await;
    heard_by(&mut sockets, &friends, ev("StatusCreatedEvent", &s1)).await;
    let seen = "mutation($id: ID!) { markStatusSeen(id: $id) { id } }";
    app.ok(friend.token(), seen, json!({ "id": s1 })).await;
    // The friend's seen mark is theirs alone (both of their subscriptions).
    heard_by(&mut sockets, &[1, 4], ev("StatusSeenEvent", &s1)).await;
    // Seen again: not news, no event.
    app.ok(friend.token(), seen, json!({ "id": s1 })).await;
    app.ok(
        author.token(),
        "mutation($id: ID!) { deleteStatus(id: $id) }",
        json!({ "id": s1 }),
    )
    .await;
    heard_by(&mut sockets, &friends, ev("StatusDeletedEvent", &s1)).await;
    let m1 = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    heard_by(&mut sockets, &everyone, ev("MomentCreatedEvent", &m1)).await;
    app.ok(
        author.token(),
        "mutation($id: ID!) { deleteMoment(id: $id) }",
        json!({ "id": m1 }),
    )
    .await;
    heard_by(&mut sockets, &everyone, ev("MomentDeletedEvent", &m1)).await;
    app.ok(
        author.token(),
        "mutation($id: ID!) { restoreMoment(id: $id) { id } }",
        json!({ "id": m1 }),
    )
    .await;
    heard_by(&mut sockets, &everyone, ev("MomentRestoredEvent", &m1)).await;
    let m2 = app
        .post_moment(&author, json!({ "visibility": "FRIENDS_ONLY" }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    heard_by(&mut sockets, &friends, ev("MomentCreatedEvent", &m2)).await;
    // The stranger's PUBLIC status: everyone but the FRIENDS scope. Being
    // the next event each hears, it shows nobody heard what was not theirs.
    let last = app.post_status(&stranger, "public").await;
    heard_by(&mut sockets, &[0, 1, 2, 3], ev("StatusCreatedEvent", &last)).await;
    for ws in &mut sockets {
        assert!(
            silent(ws, Duration::from_millis(500)).await,
            "an event too many"
        );
    }
}

async fn a_client_resumes_after_its_cursor(app: &TestApp) {
    let author = app.sign_up("resumer").await;
    let mut ws = subscribe(&app.ws_url, None, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    let a1 = app.post_status(&author, "one").await;
    let first = ws.next_payload().await;
    assert_eq!(summary(&first), ev("StatusCreatedEvent", &a1));
    let cursor = first["data"]["events"]["cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    drop(ws);
    app.wait_for_metric_at_most("ephemera_subscribers", 0).await;

    // Missed while away: a2 (then deleted), a3, a moment.
    let a2 = app.post_status(&author, "two").await;
    let a3 = app.post_status(&author, "three").await;
    app.ok(
        author.token(),
        "mutation($id: ID!) { deleteStatus(id: $id) }",
        json!({ "id": a2 }),
    )
    .await;
    let m = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // What is gone by the time the client is back is not shown as created.
    let missed = vec![
        ev("StatusCreatedEvent", &a3),
        ev("StatusDeletedEvent", &a2),
        ev("MomentCreatedEvent", &m),
    ];
    let mut back = subscribe(&app.ws_url, None, json!({ "after": cursor })).await;
    assert_eq!(next_events(&mut back, 3).await, missed);
    let a4 = app.post_status(&author, "live again").await;
    assert_eq!(
        next_events(&mut back, 1).await,
        vec![ev("StatusCreatedEvent", &a4)]
    );
    assert!(silent(&mut back, Duration::from_millis(300)).await);
    drop(back);
    app.wait_for_metric_at_most("ephemera_subscribers", 0).await;
    // Again from the same cursor: the same events in the same order, and
    // what came since.
    let mut again = subscribe(&app.ws_url, None, json!({ "after": cursor })).await;
    let mut since = missed.clone();
    since.push(ev("StatusCreatedEvent", &a4));
    assert_eq!(next_events(&mut again, 4).await, since);
    assert!(silent(&mut again, Duration::from_millis(300)).await);
    drop(again);
    // From the cursor of the last event: only what comes after it.
    let mut latest = subscribe(&app.ws_url, None, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    let a5 = app.post_status(&author, "five").await;
    let p = latest.next_payload().await;
    assert_eq!(summary(&p), ev("StatusCreatedEvent", &a5));
    let at_end = p["data"]["events"]["cursor"].as_str().unwrap().to_owned();
    let mut resumed = subscribe(&app.ws_url, None, json!({ "after": at_end })).await;
    assert!(silent(&mut resumed, Duration::from_millis(500)).await);
    let a6 = app.post_status(&author, "six").await;
    assert_eq!(
        next_events(&mut resumed, 1).await,
        vec![ev("StatusCreatedEvent", &a6)]
    );
}

async fn old_and_bad_cursors_are_refused(app: &TestApp) {
    let author = app.sign_up("pruned").await;
    let mut ws = subscribe(&app.ws_url, None, json!({})).await;
    ws.hear_trays();
    app.wait_for_metric("ephemera_subscribers", 1).await;
    // Each status: its event, then the tray entry it changed.
    let mut cursors = Vec::new();
    for caption in ["old news", "older news"] {
        app.post_status(&author, caption).await;
        for kind in ["StatusCreatedEvent", "StoryTrayEntryChangedEvent"] {
            let p = ws.next_payload().await;
            assert_eq!(p["data"]["events"]["__typename"], kind, "{p}");
            cursors.push(p["data"]["events"]["cursor"].as_str().unwrap().to_owned());
        }
    }
    let (old, newer) = (cursors[1].clone(), cursors[3].clone());
    drop(ws);

    // Kept for the retention (24 hours by default): a day later it is pruned.
    app.clock.advance(Duration::from_secs(25 * 3600));
    let pruned = ephemera::jobs::event_prune::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(pruned, 2);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM events").await, 0);

    // The first event was followed by one that is gone: refused.
    let mut expired = subscribe(&app.ws_url, None, json!({ "after": old })).await;
    let msg = expired.next_message().await.unwrap();
    assert_eq!(refusal_code(&msg), "CURSOR_EXPIRED", "{msg}");
    // The last one pruned missed nothing: it resumes.
    let mut complete = subscribe(&app.ws_url, None, json!({ "after": newer })).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    let id = app.post_status(&author, "since").await;
    assert_eq!(
        next_events(&mut complete, 1).await,
        vec![ev("StatusCreatedEvent", &id)]
    );
    drop(complete);
    app.wait_for_metric_at_most("ephemera_subscribers", 0).await;

    for bad in ["not-a-cursor", "", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"] {
        let mut ws = subscribe(&app.ws_url, None, json!({ "after": bad })).await;
        let msg = ws.next_message().await.unwrap();
        assert_eq!(refusal_code(&msg), "BAD_USER_INPUT", "{bad}: {msg}");
    }
    // A cursor of another list is not an event cursor.
    let tray = app
        .ok(
            None,
            "{ storyTray(first: 1) { edges { cursor } } }",
            json!({}),
        )
        .await;
    let other = tray["storyTray"]["edges"][0]["cursor"].as_str();
    if let Some(other) = other {
        let mut ws = subscribe(&app.ws_url, None, json!({ "after": other })).await;
        let msg = ws.next_message().await.unwrap();
        assert_eq!(refusal_code(&msg), "BAD_USER_INPUT", "{msg}");
    }
    let mut anon_friends = subscribe(&app.ws_url, None, json!({ "s": "FRIENDS" })).await;
    let msg = anon_friends.next_message().await.unwrap();
    assert_eq!(refusal_code(&msg), "UNAUTHENTICATED", "{msg}");
    let mut wrong_scope = subscribe(&app.ws_url, None, json!({ "s": "NOBODY" })).await;
    let msg = wrong_scope.next_message().await.unwrap();
    assert_eq!(refusal_code(&msg), "BAD_USER_INPUT", "{msg}");

    // Without a cursor it starts from now, as ever.
    let mut fresh = subscribe(&app.ws_url, None, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    let id = app.post_status(&author, "new").await;
    assert_eq!(
        next_events(&mut fresh, 1).await,
        vec![ev("StatusCreatedEvent", &id)]
    );
}

async fn jobs_announce_what_they_remove(app: &TestApp) {
    let author = app.sign_up("expiring").await;
    let mut ws = subscribe(&app.ws_url, None, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    let s = app.post_status(&author, "a day").await;
    let m = app
        .post_moment(
            &author,
            json!({ "visibility": "PUBLIC", "durationHours": 1 }),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Heard before the clock moves (a moment that has expired by the time
    // its event is read is not shown as created).
    assert_eq!(
        next_events(&mut ws, 2).await,
        vec![ev("StatusCreatedEvent", &s), ev("MomentCreatedEvent", &m)]
    );
    app.clock.advance(Duration::from_secs(25 * 3600));
    let now = app.clock.now();
    let purged = ephemera::jobs::status_purge::run_once(&app.state, now)
        .await
        .unwrap();
    assert_eq!(purged.rows, 1);
    let expired = ephemera::jobs::moment_expiry::run_once(&app.state, now)
        .await
        .unwrap();
    assert_eq!(expired.rows, 1);
    assert_eq!(
        next_events(&mut ws, 2).await,
        vec![ev("StatusDeletedEvent", &s), ev("MomentDeletedEvent", &m)]
    );
}

fn tiny_buffer(config: &mut ephemera::config::Config) {
    config.ws.event_buffer = 1;
    config.ws.event_page = 3;
}

/// A subscriber that does not keep up fills its channel (one page here):
/// it reads what it missed from the log, so it still gets every event once,
/// in order.
async fn a_subscriber_that_falls_behind_catches_up(app: &TestApp) {
    let author = app.sign_up("flood").await;
    for _ in 0..100 {
        if app.state.events.published().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut slow =
        Box::pin(
            app.state
                .events
                .follow(app.state.log_db.clone(), 0, "test", None, 3, true),
        );
    let mut posted = Vec::new();
    for i in 0..20 {
        let id = app.post_status(&author, &format!("s{i}")).await;
        posted.push(raw(&id));
        // Let the reader hand them out page by page.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let mut heard = Vec::new();
    while heard.len() < posted.len() {
        let delivery = tokio::time::timeout(Duration::from_secs(10), slow.next())
            .await
            .expect("the slow subscriber hears more")
            .expect("the stream goes on")
            .expect("no error");
        // Each status's tray part follows it.
        if delivery.tray.is_none() {
            heard.push(delivery.event.subject);
        }
    }
    assert_eq!(heard, posted);
}

async fn node_ids_are_leased_one_holder_at_a_time(app: &TestApp) {
    let db = &app.state.db;
    // The server holds one; another instance gets another.
    let server = app.state.ids.node();
    let other = NodeLease::new(Duration::from_secs(60));
    let second = other.acquire(db).await.unwrap();
    assert_ne!(second, server);
    // A short lease left to expire is taken over; its first holder finds it
    // lost when it tries to renew.
    let short = NodeLease::new(Duration::from_secs(1));
    let third = short.acquire(db).await.unwrap();
    assert!(third != server && third != second);
    let before = NodeLease::new(Duration::from_secs(60));
    assert_ne!(before.acquire(db).await.unwrap(), third, "still leased");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let taker = NodeLease::new(Duration::from_secs(60));
    assert_eq!(taker.acquire(db).await.unwrap(), third, "expired: free");
    assert!(!short.renew(db, third).await.unwrap());
    assert!(taker.renew(db, third).await.unwrap());
    // Released: free at once.
    other.release(db, second).await.unwrap();
    let next = NodeLease::new(Duration::from_secs(60));
    assert_eq!(next.acquire(db).await.unwrap(), second);
    assert_eq!(
        app.metric("ephemera_node_id").await,
        u64::from(server),
        "the server says its node id"
    );
}

/// Two transactions write events; the one that wrote first commits last.
/// Nothing after the first is delivered while it is open, and then both are,
/// in order, once: none is skipped (PostgreSQL; SQLite's writers take turns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_commits_are_not_skipped() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let author = app.sign_up("slowpoke").await;
    let author_id: i64 = raw(&author.id);
    let mut ws = subscribe(&app.ws_url, None, json!({})).await;
    let mut plain = {
        let (mut c, _) = WsClient::connect(&app.ws_url, Protocol::TransportWs, json!({})).await;
        c.subscribe("p", "subscription { statusCreated { id } }", json!({}))
            .await;
        c
    };
    app.wait_for_metric("ephemera_subscribers", 2).await;
    let conn = Database::connect(&app.database_url).await.unwrap();
    let now = app.clock.now();
    let (first, first_id) = (conn.begin().await.unwrap(), app.state.ids.next_id());
    write_logged_status(&first, first_id, author_id, now).await;
    let (second, second_id) = (conn.begin().await.unwrap(), app.state.ids.next_id());
    write_logged_status(&second, second_id, author_id, now).await;
    second.commit().await.unwrap();
    // Committed, but behind one still open: held back, not skipped past.
    assert!(silent(&mut ws, Duration::from_millis(800)).await);
    first.commit().await.unwrap();
    assert_eq!(
        next_events(&mut ws, 2).await,
        vec![
            ev("StatusCreatedEvent", &gid(IdKind::Status, first_id)),
            ev("StatusCreatedEvent", &gid(IdKind::Status, second_id)),
        ]
    );
    for id in [first_id, second_id] {
        assert_eq!(
            plain.next_payload().await["data"]["statusCreated"]["id"],
            gid(IdKind::Status, id)
        );
    }
    let pos: Vec<Pos> = log::read_after(&app.state.db, Pos::default(), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.pos)
        .collect();
    assert_eq!(pos.len(), 2);
    assert!(pos[0] < pos[1]);
    // And the sentinel: nothing was repeated before it.
    let last = app.post_status(&author, "after").await;
    assert_eq!(
        next_events(&mut ws, 1).await,
        vec![ev("StatusCreatedEvent", &last)]
    );
    conn.close().await.ok();
    app.finish().await;
}
