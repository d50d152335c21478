//! `statusCreated` over both websocket subprotocols.

use serde_json::json;

use crate::both_backends;
use crate::support::ws::{Protocol, WsClient};
use crate::support::{Backend, TestApp};

both_backends!(
    delivered_over_graphql_transport_ws,
    delivered_over_legacy_graphql_ws,
    friends_scope_filters,
    friends_scope_checks_once_per_status,
    bad_tokens_and_oversized_messages_are_refused,
);

const SUB: &str =
    "subscription($s: Scope) { statusCreated(scope: $s) { id caption author { username } } }";

async fn delivered_over_graphql_transport_ws(app: &TestApp) {
    let poster = app.sign_up("poster").await;
    let (mut anon, ack) = WsClient::connect(&app.ws_url, Protocol::TransportWs, json!({})).await;
    assert_eq!(ack["type"], "connection_ack");
    let (mut authed, ack) = WsClient::connect(
        &app.ws_url,
        Protocol::TransportWs,
        json!({ "authorization": format!("Bearer {}", poster.token) }),
    )
    .await;
    assert_eq!(ack["type"], "connection_ack");
    anon.subscribe("1", SUB, json!({})).await;
    authed.subscribe("a", SUB, json!({ "s": "EVERYONE" })).await;
    app.wait_for_metric("ephemera_subscribers", 2).await;

    let id = app.post_status(&poster, "live!").await;
    for (client, sub_id) in [(&mut anon, "1"), (&mut authed, "a")] {
        let msg = client.next_message().await.unwrap();
        assert_eq!(msg["type"], "next");
        assert_eq!(msg["id"], sub_id);
        let s = &msg["payload"]["data"]["statusCreated"];
        assert_eq!(s["id"], id);
        assert_eq!(s["caption"], "live!");
        assert_eq!(s["author"]["username"], "poster");
    }
}

async fn delivered_over_legacy_graphql_ws(app: &TestApp) {
    let poster = app.sign_up("legacy").await;
    let (mut client, ack) = WsClient::connect(&app.ws_url, Protocol::LegacyWs, json!({})).await;
    assert_eq!(ack["type"], "connection_ack");
    client.subscribe("7", SUB, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    let id = app.post_status(&poster, "old protocol").await;
    let msg = client.next_message().await.unwrap();
    assert_eq!(msg["type"], "data");
    assert_eq!(msg["id"], "7");
    assert_eq!(msg["payload"]["data"]["statusCreated"]["id"], id);
}

async fn friends_scope_filters(app: &TestApp) {
    let me = app.sign_up("listener").await;
    let friend = app.sign_up("pal").await;
    let stranger = app.sign_up("nobody").await;
    app.befriend(&me, &friend).await;
    let (mut client, _) = WsClient::connect(
        &app.ws_url,
        Protocol::TransportWs,
        json!({ "authorization": format!("Bearer {}", me.token) }),
    )
    .await;
    client.subscribe("f", SUB, json!({ "s": "FRIENDS" })).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    app.post_status(&stranger, "not for you").await;
    let from_friend = app.post_status(&friend, "for friends").await;
    let mine = app.post_status(&me, "my own").await;
    let p1 = client.next_payload().await;
    assert_eq!(p1["data"]["statusCreated"]["id"], from_friend);
    let p2 = client.next_payload().await;
    assert_eq!(p2["data"]["statusCreated"]["id"], mine);

    // FRIENDS without authentication is refused.
    let (mut anon, _) = WsClient::connect(&app.ws_url, Protocol::TransportWs, json!({})).await;
    anon.subscribe("x", SUB, json!({ "s": "FRIENDS" })).await;
    let msg = anon.next_message().await.unwrap();
    assert_eq!(msg["type"], "next", "{msg}");
    assert_eq!(
        msg["payload"]["errors"][0]["extensions"]["code"],
        "UNAUTHENTICATED"
    );
    assert_eq!(anon.next_message().await.unwrap()["type"], "complete");
    // An invalid subscription document is a coded client error too.
    anon.subscribe("y", "subscription { statusCreated { nope } }", json!({}))
        .await;
    let msg = anon.next_message().await.unwrap();
    assert_eq!(msg["id"], "y", "{msg}");
    assert_eq!(
        msg["payload"]["errors"][0]["extensions"]["code"],
        "BAD_USER_INPUT"
    );
    // The request limits hold over a websocket as over HTTP: too many
    // aliases, and a query nested too deep.
    let aliased: String = (0..31).map(|i| format!(" a{i}: id")).collect();
    let deep = format!(
        "subscription {{ statusCreated {{ author {{ {} }} }} }}",
        "statuses { nodes { author { ".repeat(6) + "id" + &" } } }".repeat(6)
    );
    for (id, query) in [
        (
            "z",
            format!("subscription {{ statusCreated {{{aliased} }} }}"),
        ),
        ("w", deep),
    ] {
        anon.subscribe(id, &query, json!({})).await;
        // (The previous operation's `complete` may come first.)
        let mut msg = anon.next_message().await.unwrap();
        while msg["type"] == "complete" {
            msg = anon.next_message().await.unwrap();
        }
        assert_eq!(msg["id"], id, "{msg}");
        let error = &msg["payload"]["errors"][0];
        assert_eq!(error["extensions"]["code"], "BAD_USER_INPUT", "{msg}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("limit")),
            "{msg}"
        );
    }
}

/// However many FRIENDS subscribers a status has, its author's friends are
/// looked up once: a post with four such subscribers runs two statements
/// more than the same post with none (whom it is for, and the status read
/// back from the change log's event, both once for everyone; the log's own
/// reads are counted apart).
async fn friends_scope_checks_once_per_status(app: &TestApp) {
    const FRIENDS_ONLY: &str = "subscription { statusCreated(scope: FRIENDS) { id caption } }";
    let author = app.sign_up("famous").await;
    let stranger = app.sign_up("outsider").await;
    app.post_status(&author, "warm-up").await;
    let statements = || app.metric("ephemera_db_statements_total");
    let before = statements().await;
    app.post_status(&author, "nobody listens").await;
    let alone = statements().await - before;

    let mut clients = Vec::new();
    for i in 0..4 {
        let fan = app.sign_up(&format!("fan{i}")).await;
        app.befriend(&author, &fan).await;
        clients.push(fan);
    }
    let mut sockets = Vec::new();
    for user in clients.iter().chain([&stranger]) {
        let (mut ws, _) = WsClient::connect(
            &app.ws_url,
            Protocol::TransportWs,
            json!({ "authorization": format!("Bearer {}", user.token) }),
        )
        .await;
        ws.subscribe("f", FRIENDS_ONLY, json!({})).await;
        sockets.push(ws);
    }
    app.wait_for_metric("ephemera_subscribers", 5).await;
    let before = statements().await;
    let id = app.post_status(&author, "for my friends").await;
    for ws in &mut sockets[..4] {
        assert_eq!(ws.next_payload().await["data"]["statusCreated"]["id"], id);
    }
    let heard = statements().await - before;
    assert_eq!(
        heard,
        alone + 2,
        "four FRIENDS subscribers: {heard} statements, {alone} with none"
    );
    // The stranger was not told: the next thing it hears is its own post.
    let own = app.post_status(&stranger, "mine").await;
    let stranger_ws = &mut sockets[4];
    assert_eq!(
        stranger_ws.next_payload().await["data"]["statusCreated"]["id"],
        own
    );
}

async fn bad_tokens_and_oversized_messages_are_refused(app: &TestApp) {
    // An oversized message closes the connection instead of being buffered.
    let (mut client, _) = WsClient::connect(&app.ws_url, Protocol::TransportWs, json!({})).await;
    let query = format!(
        "subscription {{ statusCreated {{ id }} }} #{}",
        "x".repeat(2 << 20)
    );
    let sent = client
        .try_send(json!({ "id": "big", "type": "subscribe", "payload": { "query": query } }))
        .await;
    // Whether or not the send got through, the connection is gone: a status
    // posted now reaches no subscription on it.
    let _ = sent;
    client
        .try_send(json!({ "id": "small", "type": "subscribe", "payload": { "query": SUB } }))
        .await;
    let poster = app.sign_up("bigsender").await;
    app.post_status(&poster, "after the big one").await;
    let answer = client.next_message().await;
    assert!(
        answer.as_ref().is_none_or(|m| m["type"] != "next"),
        "{answer:?}"
    );

    for protocol in [Protocol::TransportWs, Protocol::LegacyWs] {
        let (_client, answer) = WsClient::connect(
            &app.ws_url,
            protocol,
            json!({ "authorization": "Bearer not-a-token" }),
        )
        .await;
        assert_ne!(answer["type"], "connection_ack", "{answer}");
    }
}

/// A subscriber that never reads does not hold up the others, and its buffer
/// is bounded: it skips what it could not take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_subscribers_do_not_hold_up_others() {
    let app = TestApp::spawn_with(Backend::Sqlite, |c| c.ws.event_buffer = 4).await;
    let poster = app.sign_up("flood").await;
    let (mut stalled, _) = WsClient::connect(&app.ws_url, Protocol::TransportWs, json!({})).await;
    stalled.subscribe("s", SUB, json!({})).await;
    let (mut fast, _) = WsClient::connect(&app.ws_url, Protocol::TransportWs, json!({})).await;
    fast.subscribe("f", SUB, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 2).await;
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(app.post_status(&poster, &format!("n{i}")).await);
        // The fast subscriber keeps up as statuses arrive.
        let p = fast.next_payload().await;
        assert_eq!(p["data"]["statusCreated"]["id"], ids[i]);
    }
    // The stalled one, once it reads, gets at most what it had buffered plus
    // what was in flight, never all 40 held in memory for it.
    let mut got = 0;
    while let Ok(Some(m)) = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        stalled.next_message(),
    )
    .await
    {
        if m["type"] == "next" {
            got += 1;
        }
    }
    assert!(got <= 40);
    app.finish().await;
}

/// A websocket that never sends `connection_init` is closed with 4408 once
/// `EPHEMERA_WS_INIT_TIMEOUT` passes; pings before it do not keep it open,
/// and one that does send it in time works as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_init_must_come_in_time() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    let app = crate::support::TestApp::spawn_with(crate::support::Backend::Sqlite, |c| {
        c.ws.init_timeout = std::time::Duration::from_millis(300);
    })
    .await;
    let mut request = app.ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    socket.send(Message::Ping(vec![1].into())).await.unwrap();
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Close(frame) = message {
                return frame;
            }
        }
        None
    })
    .await
    .expect("the server closes the socket");
    let frame = closed.expect("a close frame");
    assert_eq!(u16::from(frame.code), 4408);
    assert_eq!(frame.reason.as_str(), "Connection initialisation timeout");

    let (_client, ack) = crate::support::ws::WsClient::connect(
        &app.ws_url,
        crate::support::ws::Protocol::TransportWs,
        json!({}),
    )
    .await;
    assert_eq!(ack["type"], "connection_ack");
    app.finish().await;
}
