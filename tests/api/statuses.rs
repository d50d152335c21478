//! Statuses: creation and its rejections, per-author pages, expiry without a
//! purge, ownership on delete, seen state, and statement counts.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{HOUR, TestApp, TestUser};

both_backends!(
    create_status_stamps_expiry,
    create_status_rejections_store_nothing,
    pages_forward_and_backward,
    page_argument_rejections,
    expired_statuses_vanish_without_a_purge,
    delete_checks_ownership,
    seen_state_and_viewers,
    pages_run_a_constant_number_of_statements,
    a_query_holds_one_connection,
);

const CREATE: &str = "mutation($i: CreateStatusInput!) { createStatus(input: $i) { id caption bgColor createdAt expiresAt author { username } media { id } viewerHasSeen viewCount } }";

fn millis(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a date"))
        .expect("RFC 3339")
        .timestamp_millis()
}

async fn create_status_stamps_expiry(app: &TestApp) {
    let u = app.sign_up("poster").await;
    let data = app
        .ok(
            u.token(),
            CREATE,
            json!({ "i": { "caption": "sunset", "bgColor": "#FFaa00" } }),
        )
        .await;
    let s = &data["createStatus"];
    assert_eq!(s["caption"], "sunset");
    assert_eq!(s["bgColor"], "#FFaa00");
    assert_eq!(s["author"]["username"], "poster");
    assert!(s["media"].is_null());
    assert_eq!(s["viewCount"], 0);
    assert_eq!(
        millis(&s["expiresAt"]) - millis(&s["createdAt"]),
        24 * 3600 * 1000
    );
    assert_eq!(millis(&s["createdAt"]), app.clock.now());
    // Exactly 500 characters is fine.
    app.ok(
        u.token(),
        CREATE,
        json!({ "i": { "caption": "é".repeat(500) } }),
    )
    .await;
}

async fn create_status_rejections_store_nothing(app: &TestApp) {
    let u = app.sign_up("rejected").await;
    let cases = [
        (json!({}), "BAD_USER_INPUT"),
        (json!({ "caption": "   " }), "BAD_USER_INPUT"),
        (json!({ "bgColor": "#000000" }), "BAD_USER_INPUT"),
        (json!({ "caption": "x".repeat(501) }), "BAD_USER_INPUT"),
        (
            json!({ "caption": "ok", "bgColor": "red" }),
            "BAD_USER_INPUT",
        ),
        (
            json!({ "caption": "ok", "bgColor": "#12345" }),
            "BAD_USER_INPUT",
        ),
        (
            json!({ "caption": "ok", "bgColor": "#1234567" }),
            "BAD_USER_INPUT",
        ),
        (
            json!({ "caption": "ok", "bgColor": "#GG0000" }),
            "BAD_USER_INPUT",
        ),
        (json!({ "caption": "ok", "mediaId": "123456" }), "NOT_FOUND"),
        (json!({ "caption": "ok", "mediaId": "nope" }), "NOT_FOUND"),
        (json!({ "caption": 5 }), "BAD_USER_INPUT"),
    ];
    for (input, code) in cases {
        assert_eq!(
            app.err(u.token(), CREATE, json!({ "i": input })).await,
            code,
            "{input}"
        );
    }
    assert_eq!(
        app.err(None, CREATE, json!({ "i": { "caption": "anon" } }))
            .await,
        "UNAUTHENTICATED"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM status_tray").await, 0);
}

const PAGE: &str = "query($u: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  statuses(userId: $u, first: $first, after: $after, last: $last, before: $before) {
    edges { cursor node { caption } }
    nodes { caption }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }";

async fn page(app: &TestApp, user: &TestUser, args: Value) -> Value {
    let mut vars = args;
    vars["u"] = json!(user.id);
    app.ok(None, PAGE, vars).await["statuses"].clone()
}

fn captions(page: &Value) -> Vec<String> {
    page["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["caption"].as_str().unwrap().to_owned())
        .collect()
}

async fn post_many(app: &TestApp, user: &TestUser, n: usize) {
    for i in 0..n {
        app.post_status(user, &format!("s{i}")).await;
        app.clock.advance(std::time::Duration::from_secs(1));
    }
}

async fn pages_forward_and_backward(app: &TestApp) {
    let empty_user = app.sign_up("empty").await;
    let empty = page(app, &empty_user, json!({})).await;
    assert_eq!(empty["nodes"], json!([]));
    assert_eq!(
        empty["pageInfo"],
        json!({ "hasNextPage": false, "hasPreviousPage": false, "startCursor": null, "endCursor": null })
    );

    let u = app.sign_up("pager").await;
    post_many(app, &u, 10).await;
    // Exactly one default page (10).
    let exact = page(app, &u, json!({})).await;
    assert_eq!(captions(&exact).len(), 10);
    assert_eq!(captions(&exact)[0], "s9");
    assert_eq!(exact["pageInfo"]["hasNextPage"], false);

    // Page + 1.
    app.post_status(&u, "s10").await;
    let first = page(app, &u, json!({})).await;
    assert_eq!(captions(&first).len(), 10);
    assert_eq!(first["pageInfo"]["hasNextPage"], true);
    assert_eq!(first["pageInfo"]["hasPreviousPage"], false);
    assert_eq!(
        first["edges"][0]["cursor"],
        first["pageInfo"]["startCursor"]
    );
    let rest = page(app, &u, json!({ "after": first["pageInfo"]["endCursor"] })).await;
    assert_eq!(captions(&rest), vec!["s0"]);
    assert_eq!(rest["pageInfo"]["hasNextPage"], false);
    assert_eq!(rest["pageInfo"]["hasPreviousPage"], true);

    // Backward: the oldest three, in newest-first order.
    let last = page(app, &u, json!({ "last": 3 })).await;
    assert_eq!(captions(&last), vec!["s2", "s1", "s0"]);
    assert_eq!(last["pageInfo"]["hasPreviousPage"], true);
    assert_eq!(last["pageInfo"]["hasNextPage"], false);
    let before = page(
        app,
        &u,
        json!({ "last": 3, "before": last["pageInfo"]["startCursor"] }),
    )
    .await;
    assert_eq!(captions(&before), vec!["s5", "s4", "s3"]);
    assert_eq!(before["pageInfo"]["hasNextPage"], true);
    let top = page(
        app,
        &u,
        json!({ "last": 20, "before": last["pageInfo"]["startCursor"] }),
    )
    .await;
    assert_eq!(captions(&top).len(), 8);
    assert_eq!(top["pageInfo"]["hasPreviousPage"], false);

    // Walk forward one at a time: every status exactly once.
    let mut seen = Vec::new();
    let mut after: Option<Value> = None;
    loop {
        let p = page(app, &u, json!({ "first": 4, "after": after })).await;
        seen.extend(captions(&p));
        if p["pageInfo"]["hasNextPage"] == false {
            break;
        }
        after = Some(p["pageInfo"]["endCursor"].clone());
    }
    assert_eq!(seen.len(), 11);
    assert_eq!(seen.first().unwrap(), "s10");
    assert_eq!(seen.last().unwrap(), "s0");

    // first: 0 is an empty page that still knows there is more.
    let zero = page(app, &u, json!({ "first": 0 })).await;
    assert_eq!(zero["nodes"], json!([]));
    assert_eq!(zero["pageInfo"]["hasNextPage"], true);

    // Ids that name nothing are simply not found.
    let by_id = "query($id: ID!) { status(id: $id) { id } }";
    for id in ["junk", "0", "-5", "99999999"] {
        assert!(app.ok(None, by_id, json!({ "id": id })).await["status"].is_null());
    }

    // User.statuses is the same list.
    let via_user = app
        .ok(
            None,
            "query($u: ID!) { user(id: $u) { statuses(first: 2) { nodes { caption } } } }",
            json!({ "u": u.id }),
        )
        .await;
    assert_eq!(
        via_user["user"]["statuses"]["nodes"],
        json!([{ "caption": "s10" }, { "caption": "s9" }])
    );
}

async fn page_argument_rejections(app: &TestApp) {
    let u = app.sign_up("strict").await;
    post_many(app, &u, 55).await;
    // Clamped to 50.
    assert_eq!(
        captions(&page(app, &u, json!({ "first": 500 })).await).len(),
        50
    );
    assert_eq!(
        captions(&page(app, &u, json!({ "last": 500 })).await).len(),
        50
    );
    let tray = app
        .ok(None, "{ storyTray { pageInfo { endCursor } } }", json!({}))
        .await;
    let tray_cursor = tray["storyTray"]["pageInfo"]["endCursor"].clone();
    let own = page(app, &u, json!({ "first": 1 })).await["pageInfo"]["endCursor"].clone();
    let mut forged = own.as_str().unwrap().to_owned();
    forged.replace_range(3..4, if &forged[3..4] == "A" { "B" } else { "A" });
    let bad = [
        json!({ "first": -1 }),
        json!({ "last": -1 }),
        json!({ "first": 1, "last": 1 }),
        json!({ "after": "bm9wZQ" }),
        json!({ "after": forged }),
        json!({ "before": "%%%" }),
        json!({ "after": tray_cursor }),
        json!({ "first": "ten" }),
    ];
    for args in bad {
        let mut vars = args.clone();
        vars["u"] = json!(u.id);
        assert_eq!(app.err(None, PAGE, vars).await, "BAD_USER_INPUT", "{args}");
    }
    // User.statuses checks its arguments the same way.
    let nested = "query($u: ID!) { user(id: $u) { statuses(first: 1, last: 1) { nodes { id } } } }";
    assert_eq!(
        app.err(None, nested, json!({ "u": u.id })).await,
        "BAD_USER_INPUT"
    );
    // The same checks hold for a user id that does not exist.
    assert_eq!(
        app.err(None, PAGE, json!({ "u": "x", "first": -1 })).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.ok(None, PAGE, json!({ "u": "777" })).await["statuses"]["nodes"],
        json!([])
    );
}

async fn expired_statuses_vanish_without_a_purge(app: &TestApp) {
    let u = app.sign_up("fleeting").await;
    let other = app.sign_up("watcher").await;
    let old = app.post_status(&u, "old").await;
    app.clock.advance(HOUR * 12);
    app.post_status(&u, "new").await;
    app.clock.advance(HOUR * 13); // "old" is 25 h old, "new" 13 h
    assert_eq!(captions(&page(app, &u, json!({})).await), vec!["new"]);
    let q = "query($id: ID!) { status(id: $id) { id } }";
    assert!(app.ok(None, q, json!({ "id": old })).await["status"].is_null());
    let tray = app
        .ok(
            None,
            "{ storyTray { nodes { storyCount author { username } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        tray["storyTray"]["nodes"],
        json!([{ "storyCount": 1, "author": { "username": "fleeting" } }])
    );
    let seen = "mutation($id: ID!) { markStatusSeen(id: $id) { id } }";
    assert_eq!(
        app.err(other.token(), seen, json!({ "id": old })).await,
        "NOT_FOUND"
    );
    let del = "mutation($id: ID!) { deleteStatus(id: $id) }";
    assert_eq!(
        app.err(u.token(), del, json!({ "id": old })).await,
        "NOT_FOUND"
    );
    app.clock.advance(HOUR * 12);
    let tray = app
        .ok(None, "{ storyTray { nodes { storyCount } } }", json!({}))
        .await;
    assert_eq!(tray["storyTray"]["nodes"], json!([]));
    // The rows are still there: only the purge removes them.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 2);
}

async fn delete_checks_ownership(app: &TestApp) {
    let owner = app.sign_up("owner").await;
    let other = app.sign_up("intruder").await;
    let keep = app.post_status(&owner, "keep").await;
    let id = app.post_status(&owner, "to delete").await;
    let del = "mutation($id: ID!) { deleteStatus(id: $id) }";
    assert_eq!(
        app.err(other.token(), del, json!({ "id": id })).await,
        "FORBIDDEN"
    );
    assert_eq!(
        app.err(None, del, json!({ "id": id })).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(owner.token(), del, json!({ "id": "999" })).await,
        "NOT_FOUND"
    );
    assert_eq!(
        app.err(owner.token(), del, json!({ "id": "junk" })).await,
        "NOT_FOUND"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 2);

    assert_eq!(
        app.ok(owner.token(), del, json!({ "id": id })).await["deleteStatus"],
        id
    );
    assert_eq!(
        app.err(owner.token(), del, json!({ "id": id })).await,
        "NOT_FOUND"
    );
    let tray = app
        .ok(None, "{ storyTray { nodes { storyCount } } }", json!({}))
        .await;
    assert_eq!(tray["storyTray"]["nodes"], json!([{ "storyCount": 1 }]));
    app.ok(owner.token(), del, json!({ "id": keep })).await;
    let tray = app
        .ok(None, "{ storyTray { nodes { storyCount } } }", json!({}))
        .await;
    assert_eq!(tray["storyTray"]["nodes"], json!([]));
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM status_tray").await, 0);

    // Concurrent deletes of one status: exactly one wins.
    let id = app.post_status(&owner, "race").await;
    let (a, b) = tokio::join!(
        app.gql(owner.token(), del, json!({ "id": id })),
        app.gql(owner.token(), del, json!({ "id": id })),
    );
    let wins = [&a, &b]
        .iter()
        .filter(|r| r.get("errors").is_none())
        .count();
    assert_eq!(wins, 1, "{a} {b}");
}

async fn seen_state_and_viewers(app: &TestApp) {
    let author = app.sign_up("author").await;
    let v1 = app.sign_up("viewer1").await;
    let v2 = app.sign_up("viewer2").await;
    let s1 = app.post_status(&author, "one").await;
    let s2 = app.post_status(&author, "two").await;
    let mark = "mutation($id: ID!) { markStatusSeen(id: $id) { id viewerHasSeen } }";
    let q = "query($id: ID!) { status(id: $id) { viewerHasSeen viewCount viewers { nodes { username } } } }";
    let tray = "{ storyTray { nodes { hasUnseen } } }";

    assert_eq!(
        app.ok(v1.token(), tray, json!({})).await["storyTray"]["nodes"][0]["hasUnseen"],
        true
    );
    assert_eq!(
        app.ok(None, tray, json!({})).await["storyTray"]["nodes"][0]["hasUnseen"],
        true
    );
    let marked = app.ok(v1.token(), mark, json!({ "id": s1 })).await;
    assert_eq!(marked["markStatusSeen"]["viewerHasSeen"], true);
    app.ok(v1.token(), mark, json!({ "id": s1 })).await; // idempotent
    assert_eq!(
        app.ok(v1.token(), tray, json!({})).await["storyTray"]["nodes"][0]["hasUnseen"],
        true
    );
    app.ok(v1.token(), mark, json!({ "id": s2 })).await;
    assert_eq!(
        app.ok(v1.token(), tray, json!({})).await["storyTray"]["nodes"][0]["hasUnseen"],
        false
    );

    app.clock.advance(std::time::Duration::from_secs(5));
    app.ok(v2.token(), mark, json!({ "id": s1 })).await;
    app.ok(author.token(), mark, json!({ "id": s1 })).await; // the author's own view does not count

    let by_author = app.ok(author.token(), q, json!({ "id": s1 })).await;
    assert_eq!(by_author["status"]["viewCount"], 2);
    assert_eq!(
        by_author["status"]["viewers"]["nodes"],
        json!([{ "username": "viewer2" }, { "username": "viewer1" }])
    );
    let by_viewer = app.ok(v1.token(), q, json!({ "id": s1 })).await;
    assert_eq!(by_viewer["status"]["viewerHasSeen"], true);
    assert!(by_viewer["status"]["viewCount"].is_null());
    assert!(by_viewer["status"]["viewers"].is_null());
    let anon = app.ok(None, q, json!({ "id": s1 })).await;
    assert_eq!(anon["status"]["viewerHasSeen"], false);
    assert!(anon["status"]["viewCount"].is_null());

    // The author's page says the same per status, for each viewer (read in
    // the page's own statement).
    let page = "query($u: ID!) { statuses(userId: $u) { nodes { id viewerHasSeen } } }";
    let seen_on_page = |token: Option<String>| {
        let author = author.id.clone();
        async move {
            let data = app.ok(token.as_deref(), page, json!({ "u": author })).await;
            data["statuses"]["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| {
                    (
                        n["id"].as_str().unwrap().to_owned(),
                        n["viewerHasSeen"].clone(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let (s1, s2) = (s1.clone(), s2.clone());
    assert_eq!(
        seen_on_page(v1.token().map(str::to_owned)).await,
        vec![(s2.clone(), json!(true)), (s1.clone(), json!(true))]
    );
    assert_eq!(
        seen_on_page(v2.token().map(str::to_owned)).await,
        vec![(s2.clone(), json!(false)), (s1.clone(), json!(true))]
    );
    assert_eq!(
        seen_on_page(None).await,
        vec![(s2.clone(), json!(false)), (s1.clone(), json!(false))]
    );

    assert_eq!(
        app.err(None, mark, json!({ "id": s1 })).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(v1.token(), mark, json!({ "id": "31337" })).await,
        "NOT_FOUND"
    );
    assert_eq!(
        app.err(
            author.token(),
            "query($id: ID!) { status(id: $id) { viewers(first: -2) { nodes { id } } } }",
            json!({ "id": s1 })
        )
        .await,
        "BAD_USER_INPUT"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM status_views").await, 4);
}

async fn pages_run_a_constant_number_of_statements(app: &TestApp) {
    let viewer = app.sign_up("counter").await;
    let heavy = app.sign_up("heavy").await;
    for i in 0..50 {
        let u = app.sign_up(&format!("author{i}")).await;
        app.post_status(&u, "hi").await;
    }
    post_many(app, &heavy, 50).await;
    let tray = "query($n: Int) { storyTray(first: $n) { nodes { latestCreatedAt storyCount hasUnseen author { username friendship } } } }";
    let statuses = "query($u: ID!, $n: Int) { statuses(userId: $u, first: $n) { edges { node { caption viewerHasSeen viewCount media { id } author { username friendship } } } nodes { id } } }";
    assert_constant(app, viewer.token(), tray, json!({}), "/storyTray/nodes").await;
    assert_constant(app, None, tray, json!({}), "/storyTray/nodes").await;
    assert_constant(
        app,
        viewer.token(),
        statuses,
        json!({ "u": heavy.id }),
        "/statuses/nodes",
    )
    .await;
    // The author's view, with view counts, is constant too.
    assert_constant(
        app,
        heavy.token(),
        statuses,
        json!({ "u": heavy.id }),
        "/statuses/nodes",
    )
    .await;
}

/// Runs `query` with `n` = 1 and `n` = 50 and checks both ran as many SQL
/// statements; `list` is the JSON pointer of the items in `data`.
pub(crate) async fn assert_constant(
    app: &TestApp,
    token: Option<&str>,
    query: &str,
    vars: Value,
    list: &str,
) {
    let mut counts = Vec::new();
    for n in [1, 50] {
        // The token's session is looked up once, then remembered for a few
        // seconds: look it up right before each count (on a loaded machine
        // the first page can take longer than that).
        app.ok(token, "{ __typename }", json!({})).await;
        let mut v = vars.clone();
        v["n"] = json!(n);
        let (statements, data) = app.statements_during(app.ok(token, query, v)).await;
        let items = data.pointer(list).and_then(Value::as_array);
        assert_eq!(items.map(Vec::len), Some(n), "{list} in {data}");
        counts.push(statements);
    }
    assert_eq!(
        counts[0], counts[1],
        "{list}: a page of 1 ran {} statements, a page of 50 ran {}",
        counts[0], counts[1]
    );
}

/// A query runs all its statements on one connection, given back when it
/// ends and used again by the next query (not opened anew); a mutation holds
/// none; many of both at once on a pool of 5 all answer (neither waits on a
/// connection the other holds), and queries never open more than 5.
async fn a_query_holds_one_connection(app: &TestApp) {
    let viewer = app.sign_up("holder").await;
    let mut statuses = Vec::new();
    for i in 0..3 {
        let author = app.sign_up(&format!("held{i}")).await;
        statuses.push(app.post_status(&author, "hi").await);
    }
    let held = || app.metric("ephemera_db_query_connections_total");
    let tray = "{ storyTray(first: 10) { nodes { storyCount hasUnseen author { username } } } \
                me: viewer { username } }";
    let before = held().await;
    let (statements, data) = app
        .statements_during(app.ok(viewer.token(), tray, json!({})))
        .await;
    assert_eq!(data["storyTray"]["nodes"].as_array().map(Vec::len), Some(3));
    assert_eq!(data["me"]["username"], "holder");
    assert!(statements >= 3, "{statements} statements");
    assert_eq!(
        held().await - before,
        1,
        "one connection for {statements} statements"
    );
    let opened = || app.metric("ephemera_db_query_connections_opened_total");
    let first = opened().await;
    assert!(first >= 1, "{first} query connections opened");
    for _ in 0..3 {
        app.ok(viewer.token(), tray, json!({})).await;
    }
    assert_eq!(held().await - before, 4);
    assert_eq!(
        opened().await,
        first,
        "the next queries reuse the connection"
    );

    let mark = "mutation($id: ID!) { markStatusSeen(id: $id) { id viewerHasSeen } }";
    let before = held().await;
    let marked = app
        .ok(viewer.token(), mark, json!({ "id": statuses[0] }))
        .await;
    assert_eq!(marked["markStatusSeen"]["viewerHasSeen"], true);
    assert_eq!(held().await, before, "a mutation holds no connection");

    let runs = (0..50).map(|i| {
        let (query, vars) = if i % 5 == 0 {
            (mark, json!({ "id": statuses[i % 3] }))
        } else {
            (tray, json!({}))
        };
        app.ok(viewer.token(), query, vars)
    });
    let answers = futures_util::future::join_all(runs).await;
    assert_eq!(answers.len(), 50);
    let after = app.ok(viewer.token(), tray, json!({})).await;
    let nodes = after["storyTray"]["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["hasUnseen"] == false), "{after}");
    let opened = opened().await;
    assert!(opened <= 5, "{opened} query connections for a pool of 5");
}

/// A restart of the database ends every session the server holds open; what
/// runs next gets a new connection instead of an error. PostgreSQL only: an
/// SQLite connection is a file that nothing else can close.
mod queries_and_transactions_outlive_a_database_restart {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let app = crate::support::TestApp::spawn(crate::support::Backend::Postgres).await;
        super::outlive_a_database_restart(&app).await;
        app.finish().await;
    }
}

async fn outlive_a_database_restart(app: &TestApp) {
    let viewer = app.sign_up("survivor").await;
    for i in 0..3 {
        let author = app.sign_up(&format!("restarted{i}")).await;
        app.post_status(&author, "before").await;
    }
    let tray = "{ storyTray(first: 10) { nodes { storyCount author { username } } } }";
    let entries = |data: &Value| data["storyTray"]["nodes"].as_array().map(Vec::len);
    // Several connections idle: the queries' own and the pool's.
    futures_util::future::join_all((0..8).map(|_| app.ok(viewer.token(), tray, json!({})))).await;
    let opened = || app.metric("ephemera_db_query_connections_opened_total");
    let before = opened().await;

    let ended = app.end_database_sessions().await;
    assert!(ended >= 2, "{ended} sessions ended");
    for _ in 0..3 {
        let data = app.ok(viewer.token(), tray, json!({})).await;
        assert_eq!(entries(&data), Some(3));
    }
    let answers =
        futures_util::future::join_all((0..8).map(|_| app.gql(viewer.token(), tray, json!({}))))
            .await;
    for a in &answers {
        assert!(a.get("errors").is_none(), "{a}");
        assert_eq!(entries(&a["data"]), Some(3));
    }
    assert!(
        opened().await > before,
        "the ended query connections were replaced"
    );

    // On the pool: signing in reads first; a job's transaction begins
    // first thing; posting looks the viewer up, then begins a transaction.
    let sign_in = "mutation { signIn(input: { username: \"survivor\", password: \"password123\" }) { token } }";
    let pooled = || async {
        let open =
            futures_util::future::join_all((0..5).map(|_| app.gql(None, sign_in, json!({})))).await;
        assert!(open.iter().all(|a| a.get("errors").is_none()), "{open:?}");
    };
    pooled().await;
    let ended = app.end_database_sessions().await;
    assert!(ended >= 2, "{ended} sessions ended");
    for _ in 0..3 {
        app.ok(None, sign_in, json!({})).await;
    }
    pooled().await;
    let ended = app.end_database_sessions().await;
    assert!(ended >= 2, "{ended} sessions ended");
    ephemera::jobs::moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .expect("a job's transaction after the restart");
    let ended = app.end_database_sessions().await;
    assert!(ended >= 1, "{ended} sessions ended");
    for i in 0..3 {
        app.post_status(&viewer, &format!("after {i}")).await;
    }
    let data = app.ok(viewer.token(), tray, json!({})).await;
    assert_eq!(entries(&data), Some(4));
}
