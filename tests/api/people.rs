//! People: profiles (display name, bio, avatar), friend counts, sent
//! requests, finding each other by name, and tray entries' ids.

use serde_json::{Value, json};

use crate::both_backends;
use crate::live::silent;
use crate::support::ws::{Protocol, WsClient};
use crate::support::{TestApp, TestUser, entry_id, error_code, raw};

both_backends!(
    profiles_change_and_refuse_bad_input,
    avatars_replace_and_remove_their_media,
    friend_counts_and_sent_requests,
    search_finds_people_by_their_names,
    search_leaves_out_the_hidden_and_pages,
    tray_entries_have_ids,
    friendship_changes_reach_both_sides,
    search_walks_its_index,
);

const UPDATE: &str = "mutation($i: UpdateProfileInput!) { updateProfile(input: $i) { id displayName bio avatar { id url } } }";
const PROFILE: &str = "query($u: ID!) { user(id: $u) { displayName bio avatar { id } friendCount friendRequestedAt } }";
const SEARCH: &str = "query($t: String!, $n: Int, $a: String) { searchUsers(text: $t, first: $n, after: $a) { nodes { username } pageInfo { hasNextPage endCursor } } }";

async fn profile(app: &TestApp, viewer: &TestUser, of: &TestUser) -> Value {
    app.ok(viewer.token(), PROFILE, json!({ "u": of.id })).await["user"].clone()
}

async fn profiles_change_and_refuse_bad_input(app: &TestApp) {
    let ann = app.sign_up("ann").await;
    let data = app
        .ok(
            ann.token(),
            UPDATE,
            json!({ "i": { "displayName": "  Ann Lee ", "bio": "line one\nline two" } }),
        )
        .await;
    assert_eq!(data["updateProfile"]["displayName"], "Ann Lee");
    assert_eq!(data["updateProfile"]["bio"], "line one\nline two");
    // Left out: unchanged.
    let data = app
        .ok(ann.token(), UPDATE, json!({ "i": { "bio": "new" } }))
        .await;
    assert_eq!(data["updateProfile"]["displayName"], "Ann Lee");
    assert_eq!(data["updateProfile"]["bio"], "new");

    // Each refusal changes nothing.
    for bad in [
        json!({ "displayName": "x".repeat(51) }),
        json!({ "displayName": "two\nlines" }),
        json!({ "bio": "b".repeat(301) }),
        json!({ "bio": "bell\u{7}" }),
        json!({ "displayName": "fine", "bio": "b".repeat(301) }),
    ] {
        let resp = app.gql(ann.token(), UPDATE, json!({ "i": bad })).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{bad}: {resp}");
    }
    let unchanged = profile(app, &ann, &ann).await;
    assert_eq!(unchanged["displayName"], "Ann Lee");
    assert_eq!(unchanged["bio"], "new");
    // The limits themselves are accepted; empty strings clear.
    app.ok(
        ann.token(),
        UPDATE,
        json!({ "i": { "displayName": "é".repeat(50), "bio": "b".repeat(300) } }),
    )
    .await;
    let data = app
        .ok(
            ann.token(),
            UPDATE,
            json!({ "i": { "displayName": "", "bio": "" } }),
        )
        .await;
    assert_eq!(data["updateProfile"]["displayName"], Value::Null);
    assert_eq!(data["updateProfile"]["bio"], Value::Null);
    // Signed out: nothing to change.
    let resp = app
        .gql(None, UPDATE, json!({ "i": { "bio": "anon" } }))
        .await;
    assert_eq!(error_code(&resp), "UNAUTHENTICATED");
    // Wrong shapes.
    let resp = app
        .gql(ann.token(), UPDATE, json!({ "i": { "bio": 5 } }))
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
}

async fn avatars_replace_and_remove_their_media(app: &TestApp) {
    let ann = app.sign_up("ann").await;
    let bob = app.sign_up("bob").await;
    let first = app.upload_id(&ann).await;
    let data = app
        .ok(
            ann.token(),
            UPDATE,
            json!({ "i": { "avatarMediaId": first } }),
        )
        .await;
    assert_eq!(data["updateProfile"]["avatar"]["id"], first);
    let url = data["updateProfile"]["avatar"]["url"]
        .as_str()
        .expect("an avatar url")
        .to_owned();
    assert_eq!(app.fetch(&url).await.0, 200);
    assert_eq!(
        profile(app, &bob, &ann).await["avatar"]["id"],
        first,
        "others see it"
    );
    let media = |id: &str| format!("SELECT COUNT(*) AS n FROM media WHERE id = {}", raw(id));

    // Refused: someone else's upload, an attached one, an unknown id, both
    // fields at once; the avatar stays as it was.
    let bobs = app.upload_id(&bob).await;
    let resp = app
        .gql(
            ann.token(),
            UPDATE,
            json!({ "i": { "avatarMediaId": bobs } }),
        )
        .await;
    assert_eq!(error_code(&resp), "NOT_FOUND", "{resp}");
    let resp = app
        .gql(
            ann.token(),
            UPDATE,
            json!({ "i": { "avatarMediaId": first } }),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT", "already attached");
    for unknown in ["999999999", "nope"] {
        let resp = app
            .gql(
                ann.token(),
                UPDATE,
                json!({ "i": { "avatarMediaId": unknown } }),
            )
            .await;
        assert_eq!(error_code(&resp), "NOT_FOUND", "{resp}");
    }
    let second = app.upload_id(&ann).await;
    let resp = app
        .gql(
            ann.token(),
            UPDATE,
            json!({ "i": { "avatarMediaId": second, "removeAvatar": true } }),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    assert_eq!(profile(app, &ann, &ann).await["avatar"]["id"], first);
    assert_eq!(app.count(&media(&first)).await, 1);

    // Replaced: the old media row goes, its blob queued for deletion.
    let data = app
        .ok(
            ann.token(),
            UPDATE,
            json!({ "i": { "avatarMediaId": second } }),
        )
        .await;
    assert_eq!(data["updateProfile"]["avatar"]["id"], second);
    assert_eq!(app.count(&media(&first)).await, 0);
    assert_eq!(app.count(&media(&second)).await, 1);
    assert!(app.count("SELECT COUNT(*) AS n FROM media_deletions").await >= 1);
    // Removed.
    let data = app
        .ok(
            ann.token(),
            UPDATE,
            json!({ "i": { "removeAvatar": true } }),
        )
        .await;
    assert_eq!(data["updateProfile"]["avatar"], Value::Null);
    assert_eq!(app.count(&media(&second)).await, 0);
    // Removing what is not there is fine.
    app.ok(
        ann.token(),
        UPDATE,
        json!({ "i": { "removeAvatar": true } }),
    )
    .await;
}

async fn friend_counts_and_sent_requests(app: &TestApp) {
    let ann = app.sign_up("ann").await;
    let bob = app.sign_up("bob").await;
    let cat = app.sign_up("cat").await;
    let dan = app.sign_up("dan").await;
    app.befriend(&ann, &bob).await;
    app.befriend(&ann, &cat).await;
    assert_eq!(profile(app, &ann, &ann).await["friendCount"], 2);
    assert_eq!(profile(app, &bob, &ann).await["friendCount"], 2);
    // Not a friend, anonymous: the friends are not theirs to count.
    assert_eq!(profile(app, &dan, &ann).await["friendCount"], Value::Null);
    let anon = app.ok(None, PROFILE, json!({ "u": ann.id })).await;
    assert_eq!(anon["user"]["friendCount"], Value::Null);
    // A friend the viewer blocked is not counted for them.
    app.relate(&bob, "blockUser", &cat).await;
    assert_eq!(profile(app, &bob, &ann).await["friendCount"], 1);

    // Sent requests, newest first, with when they were sent.
    let send = "mutation($u: ID!) { sendFriendRequest(userId: $u) }";
    app.ok(dan.token(), send, json!({ "u": ann.id })).await;
    app.ok(dan.token(), send, json!({ "u": bob.id })).await;
    let sent = app
        .ok(
            dan.token(),
            "{ sentFriendRequests { nodes { username friendship friendRequestedAt } } }",
            json!({}),
        )
        .await;
    let nodes = sent["sentFriendRequests"]["nodes"]
        .as_array()
        .expect("nodes")
        .clone();
    assert_eq!(
        nodes
            .iter()
            .map(|n| n["username"].clone())
            .collect::<Vec<_>>(),
        [json!("bob"), json!("ann")]
    );
    assert!(nodes.iter().all(|n| n["friendship"] == "OUTGOING_REQUEST"));
    assert!(nodes.iter().all(|n| n["friendRequestedAt"].is_string()));
    // The other side sees the same time.
    let theirs = profile(app, &ann, &dan).await;
    assert_eq!(theirs["friendRequestedAt"], nodes[1]["friendRequestedAt"]);
    // Answered: gone from the list, and no request time.
    let accept = "mutation($u: ID!) { acceptFriendRequest(userId: $u) }";
    app.ok(ann.token(), accept, json!({ "u": dan.id })).await;
    let sent = app
        .ok(
            dan.token(),
            "{ sentFriendRequests(first: 1) { nodes { username } pageInfo { hasNextPage } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        sent["sentFriendRequests"]["nodes"],
        json!([{ "username": "bob" }])
    );
    assert_eq!(sent["sentFriendRequests"]["pageInfo"]["hasNextPage"], false);
    assert_eq!(
        profile(app, &ann, &dan).await["friendRequestedAt"],
        Value::Null
    );
    // A user who blocked the sender is left out of the sender's list.
    app.relate(&bob, "blockUser", &dan).await;
    let sent = app
        .ok(
            dan.token(),
            "{ sentFriendRequests { nodes { username } } }",
            json!({}),
        )
        .await;
    assert_eq!(sent["sentFriendRequests"]["nodes"], json!([]));
    // Rejections.
    let resp = app
        .gql(None, "{ sentFriendRequests { nodes { id } } }", json!({}))
        .await;
    assert_eq!(error_code(&resp), "UNAUTHENTICATED");
    for args in ["first: -1", "after: \"bogus\""] {
        let q = format!("{{ sentFriendRequests({args}) {{ nodes {{ id }} }} }}");
        let resp = app.gql(dan.token(), &q, json!({})).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{args}");
    }
}

fn names(data: &Value) -> Vec<String> {
    data["searchUsers"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["username"].as_str().expect("username").to_owned())
        .collect()
}

async fn search(app: &TestApp, viewer: Option<&TestUser>, text: &str) -> Vec<String> {
    names(
        &app.ok(
            viewer.and_then(TestUser::token),
            SEARCH,
            json!({ "t": text, "n": 50 }),
        )
        .await,
    )
}

async fn search_finds_people_by_their_names(app: &TestApp) {
    let viewer = app.sign_up("viewer").await;
    let alice = app.sign_up("alice_smith").await;
    app.ok(
        alice.token(),
        UPDATE,
        json!({ "i": { "displayName": "Zoë Ångström" } }),
    )
    .await;
    let _alicia = app.sign_up("alicia").await;
    let ali = app.sign_up("ali").await;
    let _bob = app.sign_up("bob").await;
    // Username words, display-name words, any case, any accent.
    assert_eq!(search(app, Some(&viewer), "smi").await, ["alice_smith"]);
    assert_eq!(search(app, Some(&viewer), "ZOE").await, ["alice_smith"]);
    assert_eq!(search(app, Some(&viewer), "angstr").await, ["alice_smith"]);
    assert_eq!(search(app, None, "Ångström").await, ["alice_smith"]);
    // Every word must begin a word of the user's names.
    assert_eq!(search(app, Some(&viewer), "ali zo").await, ["alice_smith"]);
    assert!(search(app, Some(&viewer), "ali bo").await.is_empty());
    // The exact word first, then the others alphabetically.
    assert_eq!(
        search(app, Some(&viewer), "ali").await,
        ["ali", "alice_smith", "alicia"]
    );
    // Friends first.
    app.befriend(&viewer, &_alicia).await;
    assert_eq!(
        search(app, Some(&viewer), "ali").await,
        ["alicia", "ali", "alice_smith"]
    );
    // Anonymous: no friends.
    assert_eq!(
        search(app, None, "ali").await,
        ["ali", "alice_smith", "alicia"]
    );
    // A changed display name is found by its new words only.
    app.ok(
        ali.token(),
        UPDATE,
        json!({ "i": { "displayName": "Quentin" } }),
    )
    .await;
    assert_eq!(search(app, None, "quen").await, ["ali"]);
    assert!(search(app, None, "zz").await.is_empty());
    // Nothing to find: no letter or digit.
    assert!(search(app, None, "!!").await.is_empty());
    // Rejections: the text's length, the page's arguments.
    for (text, n) in [
        (String::new(), json!(5)),
        ("a".repeat(51), json!(5)),
        ("ali".into(), json!(-1)),
    ] {
        let resp = app.gql(None, SEARCH, json!({ "t": text, "n": n })).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{text:?}");
    }
    let resp = app
        .gql(None, "{ searchUsers { nodes { id } } }", json!({}))
        .await;
    assert!(resp["errors"].is_array(), "text is required: {resp}");
}

async fn search_leaves_out_the_hidden_and_pages(app: &TestApp) {
    let viewer = app.sign_up("viewer").await;
    let mut people = Vec::new();
    for i in 0..7 {
        people.push(app.sign_up(&format!("sam{i}")).await);
    }
    app.befriend(&viewer, &people[5]).await;
    // Blocked either way, and suspended: not found.
    app.relate(&viewer, "blockUser", &people[1]).await;
    app.relate(&people[2], "blockUser", &viewer).await;
    let moderator = app.sign_up("warden").await;
    ephemera::domain::moderation::set_moderator(&app.state.db, "warden", true)
        .await
        .expect("a moderator");
    app.ok(
        moderator.token(),
        "mutation($u: ID!) { suspendUser(userId: $u, reason: \"spam\") }",
        json!({ "u": people[3].id }),
    )
    .await;
    assert_eq!(
        search(app, Some(&viewer), "sam").await,
        ["sam5", "sam0", "sam4", "sam6"]
    );
    // Others still see the ones the viewer blocked, not the suspended one.
    assert_eq!(
        search(app, None, "sam").await,
        ["sam0", "sam1", "sam2", "sam4", "sam5", "sam6"]
    );
    // Pages of two: friends, then the others, and nothing twice.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let data = app
            .ok(
                viewer.token(),
                SEARCH,
                json!({ "t": "sam", "n": 2, "a": after }),
            )
            .await;
        seen.extend(names(&data));
        let info = &data["searchUsers"]["pageInfo"];
        if info["hasNextPage"] != true {
            break;
        }
        after = info["endCursor"].as_str().map(str::to_owned);
        assert!(seen.len() < 10, "pages never end: {seen:?}");
    }
    assert_eq!(seen, ["sam5", "sam0", "sam4", "sam6"]);
    // A cursor of one search is refused by another, and by another viewer.
    let data = app
        .ok(viewer.token(), SEARCH, json!({ "t": "sam", "n": 1 }))
        .await;
    let cursor = data["searchUsers"]["pageInfo"]["endCursor"].clone();
    let resp = app
        .gql(
            viewer.token(),
            SEARCH,
            json!({ "t": "sa", "n": 1, "a": cursor }),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    let resp = app
        .gql(
            people[0].token(),
            SEARCH,
            json!({ "t": "sam", "n": 1, "a": cursor }),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
}

async fn tray_entries_have_ids(app: &TestApp) {
    let viewer = app.sign_up("viewer").await;
    let author = app.sign_up("author").await;
    app.post_status(&author, "hello").await;
    let q = "{ storyTray { nodes { id author { id } } } }";
    let data = app.ok(viewer.token(), q, json!({})).await;
    assert_eq!(
        data["storyTray"]["nodes"][0]["id"],
        entry_id(Some(&viewer), &author)
    );
    let again = app.ok(viewer.token(), q, json!({})).await;
    assert_eq!(
        again["storyTray"]["nodes"][0]["id"],
        data["storyTray"]["nodes"][0]["id"]
    );
    let anon = app.ok(None, q, json!({})).await;
    assert_eq!(anon["storyTray"]["nodes"][0]["id"], entry_id(None, &author));
}

const FRIEND_EVENTS: &str = "subscription($after: String) { events(after: $after) { __typename cursor \
    ... on FriendshipChangedEvent { user { username friendship friendRequestedAt } } } }";

async fn listen(app: &TestApp, user: &TestUser, after: Option<&str>) -> WsClient {
    let init = json!({ "authorization": format!("Bearer {}", user.token) });
    let (mut ws, ack) = WsClient::connect(&app.ws_url, Protocol::TransportWs, init).await;
    assert_eq!(ack["type"], "connection_ack");
    ws.subscribe("e", FRIEND_EVENTS, json!({ "after": after }))
        .await;
    ws
}

/// The next friendship event: (the other user, how the viewer stands with them, its cursor).
async fn next_change(ws: &mut WsClient) -> (String, String, String) {
    let p = ws.next_payload().await;
    let e = &p["data"]["events"];
    assert_eq!(e["__typename"], "FriendshipChangedEvent", "{p}");
    let user = &e["user"];
    let pending = user["friendRequestedAt"].is_string();
    let state = user["friendship"].as_str().unwrap_or_default();
    assert_eq!(pending, state.ends_with("_REQUEST"), "{p}");
    (
        user["username"].as_str().unwrap_or_default().to_owned(),
        state.to_owned(),
        e["cursor"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Each change between two users is told to both, as each now stands;
/// a block to the blocker, and to the blocked side only as the end of what
/// they had; nobody else hears; resumable like every event.
async fn friendship_changes_reach_both_sides(app: &TestApp) {
    let ann = app.sign_up("ann").await;
    let bob = app.sign_up("bob").await;
    let cat = app.sign_up("cat").await;
    let mut a = listen(app, &ann, None).await;
    let mut b = listen(app, &bob, None).await;
    let mut c = listen(app, &cat, None).await;
    app.wait_for_metric("ephemera_subscribers", 3).await;
    let send = "mutation($u: ID!) { sendFriendRequest(userId: $u) }";
    let accept = "mutation($u: ID!) { acceptFriendRequest(userId: $u) }";
    let remove = "mutation($u: ID!) { removeFriend(userId: $u) }";
    let pair = |x: (String, String, String)| (x.0, x.1);
    let s = |u: &str, st: &str| (u.to_owned(), st.to_owned());

    app.ok(ann.token(), send, json!({ "u": bob.id })).await;
    let first = next_change(&mut a).await;
    let resume_from = first.2.clone();
    assert_eq!(pair(first), s("bob", "OUTGOING_REQUEST"));
    assert_eq!(
        pair(next_change(&mut b).await),
        s("ann", "INCOMING_REQUEST")
    );
    app.ok(bob.token(), accept, json!({ "u": ann.id })).await;
    assert_eq!(pair(next_change(&mut a).await), s("bob", "FRIENDS"));
    assert_eq!(pair(next_change(&mut b).await), s("ann", "FRIENDS"));
    app.ok(ann.token(), remove, json!({ "u": bob.id })).await;
    assert_eq!(pair(next_change(&mut a).await), s("bob", "NONE"));
    assert_eq!(pair(next_change(&mut b).await), s("ann", "NONE"));
    // Friends again, then a block: both hear the friendship end.
    app.befriend(&ann, &bob).await;
    for ws in [&mut a, &mut b] {
        next_change(ws).await;
        next_change(ws).await;
    }
    app.relate(&bob, "blockUser", &ann).await;
    assert_eq!(pair(next_change(&mut b).await), s("ann", "NONE"));
    assert_eq!(pair(next_change(&mut a).await), s("bob", "NONE"));
    // A block of someone one had nothing with: the blocker alone.
    app.relate(&ann, "blockUser", &cat).await;
    assert_eq!(pair(next_change(&mut a).await), s("cat", "NONE"));
    app.relate(&ann, "unblockUser", &cat).await;
    assert_eq!(pair(next_change(&mut a).await), s("cat", "NONE"));
    assert!(
        silent(&mut c, std::time::Duration::from_millis(500)).await,
        "cat heard of it"
    );
    // Refused changes are not announced.
    let resp = app.gql(cat.token(), accept, json!({ "u": ann.id })).await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    assert!(silent(&mut a, std::time::Duration::from_millis(300)).await);

    // Resumed after the first event: the rest, in order.
    let mut again = listen(app, &ann, Some(&resume_from)).await;
    let mut heard = Vec::new();
    for _ in 0..7 {
        heard.push(pair(next_change(&mut again).await));
    }
    assert_eq!(
        heard,
        [
            s("bob", "NONE"),
            s("bob", "NONE"),
            s("bob", "NONE"),
            s("bob", "NONE"),
            s("bob", "NONE"),
            s("cat", "NONE"),
            s("cat", "NONE"),
        ],
        "the events are judged as the viewer stands now"
    );
}

/// With 20,000 accounts whose words share prefixes (and the planner's
/// statistics gathered), each search statement walks `user_words`' index
/// and never scans it or `users`: a first page, a later page, two words,
/// the friends phase; on PostgreSQL with the generic plan a prepared
/// statement switches to after five runs.
async fn search_walks_its_index(app: &TestApp) {
    use ephemera::db::{Dialect, Sql};
    use ephemera::domain::search::{self, Search};
    let viewer = app.sign_up("planner").await;
    let db = &app.state.db;
    let dialect = Dialect::of(db);
    let mut seed = crate::support::pl_accounts();
    // Friends with a few of them.
    for f in [5_000_012_i64, 5_000_120] {
        seed.push(Sql::new(&format!(
            "INSERT INTO friendships (low_id, high_id, requester_id, created_at, accepted_at) \
             VALUES ({f}, {v}, {v}, 0, 0)",
            v = raw(&viewer.id)
        )));
    }
    crate::support::seed_sql(db, seed).await;
    let me: i64 = raw(&viewer.id);
    let one = Search::parse("pl12").expect("a search");
    let two = Search::parse("Pl 7").expect("a search");
    let statements = [
        (
            "first page",
            search::phase_query(&one, Some(me), search::OTHERS, None, 20, dialect),
        ),
        (
            "later page",
            search::phase_query(&one, Some(me), search::OTHERS, Some(5_000_125), 20, dialect),
        ),
        (
            "two words",
            search::phase_query(&two, Some(me), search::OTHERS, None, 20, dialect),
        ),
        (
            "two words, the shorter walking",
            search::phase_query(
                &two.clone().walking(1),
                Some(me),
                search::OTHERS,
                None,
                20,
                dialect,
            ),
        ),
        (
            "the sample of two words",
            search::sample_query(&two, dialect),
        ),
        (
            "friends",
            search::phase_query(&one, Some(me), search::FRIENDS, None, 20, dialect),
        ),
        (
            "anonymous",
            search::phase_query(&one, None, search::OTHERS, None, 20, dialect),
        ),
        (
            "a signed-in page, friends and others",
            search::page_query(&one, Some(me), search::FRIENDS, None, 20, dialect),
        ),
    ];
    for (name, sql) in statements {
        let plan = crate::support::plan_of(db, sql.expect("a statement")).await;
        assert!(
            plan.contains("user_words"),
            "{name}: no index of user_words:\n{plan}"
        );
        for scan in [
            "Seq Scan on user_words",
            "Seq Scan on users",
            "SCAN w\n",
            "SCAN u\n",
            "SCAN d\n",
            "SCAN o\n",
        ] {
            assert!(
                !format!("{plan}\n").contains(scan),
                "{name}: {scan}:\n{plan}"
            );
        }
        if dialect == Dialect::Postgres {
            // Rows read from the index: what one page (and its filters)
            // needs, not the 20,000 that share the prefix `pl`.
            let most = crate::support::rows_read(&plan, |l| {
                l.contains("Index") && l.contains("user_words")
            });
            assert!(most <= 1_000, "{name}: {most} index rows:\n{plan}");
        }
    }
    // And the answers: the friends first, then the rest in word order.
    let data = app
        .ok(viewer.token(), SEARCH, json!({ "t": "pl12", "n": 4 }))
        .await;
    assert_eq!(names(&data), ["pl12", "pl120", "pl1200", "pl12000"]);
    // Of "Pl 7", the sample finds that every row of `7…` has `pl` and few
    // of `pl`'s have `7…`: `7` walks, in its order, on every page.
    let data = app
        .ok(viewer.token(), SEARCH, json!({ "t": "Pl 7", "n": 4 }))
        .await;
    assert_eq!(names(&data), ["pl7", "pl70", "pl700", "pl7000"]);
    let after = data["searchUsers"]["pageInfo"]["endCursor"].clone();
    let data = app
        .ok(
            viewer.token(),
            SEARCH,
            json!({ "t": "Pl 7", "n": 3, "a": after }),
        )
        .await;
    assert_eq!(names(&data), ["pl7001", "pl7002", "pl7003"]);
    // A rare short word is found though the long one's first 1,000 index
    // rows (all of 20,000 `pl`) do not hold it.
    let q = app.sign_up("plq").await;
    app.ok(q.token(), UPDATE, json!({ "i": { "displayName": "Q" } }))
        .await;
    let data = app
        .ok(viewer.token(), SEARCH, json!({ "t": "pl q", "n": 4 }))
        .await;
    assert_eq!(names(&data), ["plq"]);
    assert_eq!(data["searchUsers"]["pageInfo"]["hasNextPage"], false);
    // Statements the same whatever the page's size: the sample (several
    // words), then friends and everyone else in one (and the session's
    // lookup, remembered for a few seconds, renewed right before each).
    for (text, n, most) in [
        ("pl1", 1, 1),
        ("pl1", 50, 1),
        ("Pl 7", 1, 2),
        ("Pl 7", 50, 2),
    ] {
        app.ok(viewer.token(), "{ __typename }", json!({})).await;
        let (statements, data) = app
            .statements_during(app.ok(viewer.token(), SEARCH, json!({ "t": text, "n": n })))
            .await;
        assert_eq!(names(&data).len(), n, "{text}");
        assert!(
            statements <= most + 1,
            "{text}, a page of {n}: {statements} statements"
        );
    }
}
