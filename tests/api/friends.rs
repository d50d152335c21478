//! The friend graph: requests, acceptance, removal, visibility of friend lists.

use serde_json::json;

use crate::both_backends;
use crate::support::TestApp;

both_backends!(
    request_accept_and_remove,
    asking_each_other_makes_friends,
    friend_mutation_rejections,
    friend_lists_are_private,
    concurrent_mutual_requests_end_as_friends,
);

const SEND: &str = "mutation($u: ID!) { sendFriendRequest(userId: $u) }";
const ACCEPT: &str = "mutation($u: ID!) { acceptFriendRequest(userId: $u) }";
const REMOVE: &str = "mutation($u: ID!) { removeFriend(userId: $u) }";
const STATE: &str = "query($u: ID!) { user(id: $u) { friendship } }";

async fn request_accept_and_remove(app: &TestApp) {
    let a = app.sign_up("alice").await;
    let b = app.sign_up("bruno").await;
    assert_eq!(
        app.ok(a.token(), SEND, json!({ "u": b.id })).await["sendFriendRequest"],
        "OUTGOING_REQUEST"
    );
    // Idempotent.
    assert_eq!(
        app.ok(a.token(), SEND, json!({ "u": b.id })).await["sendFriendRequest"],
        "OUTGOING_REQUEST"
    );
    assert_eq!(
        app.ok(a.token(), STATE, json!({ "u": b.id })).await["user"]["friendship"],
        "OUTGOING_REQUEST"
    );
    assert_eq!(
        app.ok(b.token(), STATE, json!({ "u": a.id })).await["user"]["friendship"],
        "INCOMING_REQUEST"
    );
    assert_eq!(
        app.ok(None, STATE, json!({ "u": a.id })).await["user"]["friendship"],
        "NONE"
    );

    let requests = app
        .ok(
            b.token(),
            "{ friendRequests { nodes { id } pageInfo { hasNextPage } } }",
            json!({}),
        )
        .await;
    assert_eq!(requests["friendRequests"]["nodes"], json!([{ "id": a.id }]));
    let none = app
        .ok(a.token(), "{ friendRequests { nodes { id } } }", json!({}))
        .await;
    assert_eq!(none["friendRequests"]["nodes"], json!([]));

    assert_eq!(
        app.ok(b.token(), ACCEPT, json!({ "u": a.id })).await["acceptFriendRequest"],
        "FRIENDS"
    );
    assert_eq!(
        app.ok(b.token(), ACCEPT, json!({ "u": a.id })).await["acceptFriendRequest"],
        "FRIENDS"
    );
    assert_eq!(
        app.ok(a.token(), STATE, json!({ "u": b.id })).await["user"]["friendship"],
        "FRIENDS"
    );
    let after = app
        .ok(b.token(), "{ friendRequests { nodes { id } } }", json!({}))
        .await;
    assert_eq!(after["friendRequests"]["nodes"], json!([]));

    assert_eq!(
        app.ok(a.token(), REMOVE, json!({ "u": b.id })).await["removeFriend"],
        "NONE"
    );
    assert_eq!(
        app.ok(b.token(), STATE, json!({ "u": a.id })).await["user"]["friendship"],
        "NONE"
    );
    // Declining an incoming request.
    app.ok(a.token(), SEND, json!({ "u": b.id })).await;
    assert_eq!(
        app.ok(b.token(), REMOVE, json!({ "u": a.id })).await["removeFriend"],
        "NONE"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM friendships").await, 0);
}

async fn asking_each_other_makes_friends(app: &TestApp) {
    let a = app.sign_up("carla").await;
    let b = app.sign_up("dmitri").await;
    app.ok(a.token(), SEND, json!({ "u": b.id })).await;
    assert_eq!(
        app.ok(b.token(), SEND, json!({ "u": a.id })).await["sendFriendRequest"],
        "FRIENDS"
    );
}

async fn friend_mutation_rejections(app: &TestApp) {
    let a = app.sign_up("edgar").await;
    let b = app.sign_up("fiona").await;
    for q in [SEND, ACCEPT, REMOVE] {
        assert_eq!(
            app.err(a.token(), q, json!({ "u": a.id })).await,
            "BAD_USER_INPUT",
            "{q} self"
        );
        assert_eq!(
            app.err(a.token(), q, json!({ "u": "4242" })).await,
            "NOT_FOUND",
            "{q} unknown"
        );
        assert_eq!(
            app.err(a.token(), q, json!({ "u": "x" })).await,
            "NOT_FOUND",
            "{q} malformed"
        );
        assert_eq!(
            app.err(None, q, json!({ "u": b.id })).await,
            "UNAUTHENTICATED",
            "{q} anonymous"
        );
    }
    // Accepting with no request from them, or one's own request.
    assert_eq!(
        app.err(a.token(), ACCEPT, json!({ "u": b.id })).await,
        "BAD_USER_INPUT"
    );
    app.ok(a.token(), SEND, json!({ "u": b.id })).await;
    assert_eq!(
        app.err(a.token(), ACCEPT, json!({ "u": b.id })).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.err(None, "{ friendRequests { nodes { id } } }", json!({}))
            .await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(
            b.token(),
            "{ friendRequests(first: -1) { nodes { id } } }",
            json!({})
        )
        .await,
        "BAD_USER_INPUT"
    );
    // Nothing changed by the failures.
    assert_eq!(
        app.ok(b.token(), STATE, json!({ "u": a.id })).await["user"]["friendship"],
        "INCOMING_REQUEST"
    );
}

async fn friend_lists_are_private(app: &TestApp) {
    let a = app.sign_up("gina").await;
    let b = app.sign_up("hugo").await;
    let c = app.sign_up("ivan").await;
    let stranger = app.sign_up("jade").await;
    app.befriend(&a, &b).await;
    app.befriend(&a, &c).await;
    let q = "query($u: ID!, $after: String) { user(id: $u) { friends(first: 1, after: $after) { nodes { username } pageInfo { hasNextPage endCursor } } } }";
    // Most recent friendship first, paged.
    let first = app.ok(a.token(), q, json!({ "u": a.id })).await;
    let page = &first["user"]["friends"];
    assert_eq!(page["nodes"], json!([{ "username": "ivan" }]));
    assert_eq!(page["pageInfo"]["hasNextPage"], true);
    let second = app
        .ok(
            a.token(),
            q,
            json!({ "u": a.id, "after": page["pageInfo"]["endCursor"] }),
        )
        .await;
    assert_eq!(
        second["user"]["friends"]["nodes"],
        json!([{ "username": "hugo" }])
    );
    assert_eq!(second["user"]["friends"]["pageInfo"]["hasNextPage"], false);
    let bad = "query($u: ID!, $n: Int, $after: String) { user(id: $u) { friends(first: $n, after: $after) { nodes { id } } } }";
    assert_eq!(
        app.err(a.token(), bad, json!({ "u": a.id, "n": -1 })).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.err(a.token(), bad, json!({ "u": a.id, "after": "forged" }))
            .await,
        "BAD_USER_INPUT"
    );
    // A friend sees the list; a stranger and an anonymous viewer get it empty.
    let by_friend = app.ok(b.token(), q, json!({ "u": a.id })).await;
    assert_eq!(
        by_friend["user"]["friends"]["nodes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    for token in [stranger.token(), None] {
        let hidden = app.ok(token, q, json!({ "u": a.id })).await;
        assert_eq!(
            hidden["user"]["friends"]["pageInfo"]["endCursor"],
            json!(null)
        );
        assert_eq!(hidden["user"]["friends"]["nodes"], json!([]));
        assert_eq!(hidden["user"]["friends"]["pageInfo"]["hasNextPage"], false);
    }
}

async fn concurrent_mutual_requests_end_as_friends(app: &TestApp) {
    for round in 0..5 {
        let a = app.sign_up(&format!("ka{round}")).await;
        let b = app.sign_up(&format!("kb{round}")).await;
        let (ra, rb) = tokio::join!(
            app.ok(a.token(), SEND, json!({ "u": b.id })),
            app.ok(b.token(), SEND, json!({ "u": a.id })),
        );
        let states = [
            ra["sendFriendRequest"].clone(),
            rb["sendFriendRequest"].clone(),
        ];
        assert!(states.contains(&json!("FRIENDS")), "{states:?}");
        assert_eq!(
            app.ok(a.token(), STATE, json!({ "u": b.id })).await["user"]["friendship"],
            "FRIENDS"
        );
    }
}
