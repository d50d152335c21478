//! The story tray: order, scope, paging and counts.

use std::time::Duration;

use serde_json::json;

use crate::both_backends;
use crate::support::{HOUR, TestApp, raw};

both_backends!(
    tray_orders_authors_by_freshest_status,
    tray_friends_scope,
    tray_pages
);

const TRAY: &str = "query($first: Int, $after: String, $scope: Scope) {
  storyTray(first: $first, after: $after, scope: $scope) {
    nodes { author { username } storyCount latestCreatedAt }
    pageInfo { hasNextPage hasPreviousPage endCursor } } }";

fn names(data: &serde_json::Value) -> Vec<String> {
    data["storyTray"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["author"]["username"].as_str().unwrap().to_owned())
        .collect()
}

async fn tray_orders_authors_by_freshest_status(app: &TestApp) {
    let a = app.sign_up("amy").await;
    let b = app.sign_up("ben").await;
    let c = app.sign_up("cat").await;
    app.post_status(&a, "a1").await;
    app.clock.advance(Duration::from_secs(60));
    app.post_status(&b, "b1").await;
    app.clock.advance(Duration::from_secs(60));
    app.post_status(&a, "a2").await;
    let data = app.ok(None, TRAY, json!({})).await;
    assert_eq!(names(&data), vec!["amy", "ben"]);
    assert_eq!(data["storyTray"]["nodes"][0]["storyCount"], 2);

    // Same instant: the higher author id first.
    app.clock.advance(Duration::from_secs(60));
    app.post_status(&c, "c1").await;
    app.post_status(&b, "b2").await;
    let data = app.ok(None, TRAY, json!({})).await;
    let mut tied = [(raw(&b.id), "ben"), (raw(&c.id), "cat")];
    tied.sort_by_key(|t| std::cmp::Reverse(t.0));
    assert_eq!(names(&data)[..2], [tied[0].1, tied[1].1]);
    assert_eq!(names(&data)[2], "amy");

    // The explicit EVERYONE scope is the default.
    let everyone = app.ok(None, TRAY, json!({ "scope": "EVERYONE" })).await;
    assert_eq!(names(&everyone), names(&data));

    // Counts follow expiry: after 24 h only what was posted later is live.
    app.clock.advance(HOUR * 24 - Duration::from_secs(150));
    let data = app.ok(None, TRAY, json!({})).await;
    assert_eq!(names(&data).len(), 3);
    let amy = data["storyTray"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["author"]["username"] == "amy")
        .unwrap()
        .clone();
    assert_eq!(amy["storyCount"], 1);
}

async fn tray_friends_scope(app: &TestApp) {
    let me = app.sign_up("myself").await;
    let friend = app.sign_up("friend").await;
    let pending = app.sign_up("pending").await;
    let stranger = app.sign_up("stranger").await;
    app.befriend(&me, &friend).await;
    app.ok(
        me.token(),
        "mutation($u: ID!) { sendFriendRequest(userId: $u) }",
        json!({ "u": pending.id }),
    )
    .await;
    for u in [&me, &friend, &pending, &stranger] {
        app.post_status(u, "hello").await;
        app.clock.advance(Duration::from_secs(1));
    }
    let mine = app
        .ok(me.token(), TRAY, json!({ "scope": "FRIENDS" }))
        .await;
    assert_eq!(names(&mine), vec!["friend", "myself"]);
    let all = app.ok(me.token(), TRAY, json!({})).await;
    assert_eq!(names(&all), vec!["stranger", "pending", "friend", "myself"]);
    assert_eq!(
        app.err(None, TRAY, json!({ "scope": "FRIENDS" })).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(None, TRAY, json!({ "scope": "NOBODY" })).await,
        "BAD_USER_INPUT"
    );
}

async fn tray_pages(app: &TestApp) {
    let mut users = Vec::new();
    for i in 0..5 {
        let u = app.sign_up(&format!("trayuser{i}")).await;
        app.post_status(&u, "x").await;
        app.clock.advance(Duration::from_secs(1));
        users.push(u);
    }
    let empty_first = app.ok(None, TRAY, json!({ "first": 0 })).await;
    assert_eq!(empty_first["storyTray"]["pageInfo"]["hasNextPage"], true);
    let p1 = app.ok(None, TRAY, json!({ "first": 2 })).await;
    assert_eq!(names(&p1), vec!["trayuser4", "trayuser3"]);
    assert_eq!(p1["storyTray"]["pageInfo"]["hasNextPage"], true);
    let p2 = app
        .ok(
            None,
            TRAY,
            json!({ "first": 2, "after": p1["storyTray"]["pageInfo"]["endCursor"] }),
        )
        .await;
    assert_eq!(names(&p2), vec!["trayuser2", "trayuser1"]);
    assert_eq!(p2["storyTray"]["pageInfo"]["hasPreviousPage"], true);
    let p3 = app
        .ok(
            None,
            TRAY,
            json!({ "first": 2, "after": p2["storyTray"]["pageInfo"]["endCursor"] }),
        )
        .await;
    assert_eq!(names(&p3), vec!["trayuser0"]);
    assert_eq!(p3["storyTray"]["pageInfo"]["hasNextPage"], false);
    assert_eq!(
        app.err(None, TRAY, json!({ "first": -3 })).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.err(None, TRAY, json!({ "after": "garbage" })).await,
        "BAD_USER_INPUT"
    );
    // A status page's cursor is not a tray cursor.
    let sp = app
        .ok(
            None,
            "query($u: ID!) { statuses(userId: $u) { pageInfo { endCursor } } }",
            json!({ "u": users[0].id }),
        )
        .await;
    let foreign = sp["statuses"]["pageInfo"]["endCursor"].clone();
    assert_eq!(
        app.err(None, TRAY, json!({ "after": foreign })).await,
        "BAD_USER_INPUT"
    );
    let clamped = app.ok(None, TRAY, json!({ "first": 1000 })).await;
    assert_eq!(names(&clamped).len(), 5);
}
