//! Close friends, hidden stories, mutes and blocks as their owners manage
//! them: the lists, what a block ends, what stays hidden from whom, the
//! default audience and the audience of statuses stored before audiences,
//! and every rejection path of the mutations.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{IdKind, TestApp, TestUser, connection_ids, error_code, gid, raw};

both_backends!(
    lists_are_paged_and_private,
    close_friends_are_friends_only,
    blocks_hide_likes_views_and_counts,
    a_muted_person_cannot_tell,
    the_default_audience_is_friends,
    tray_places_follow_deletes_per_audience,
    statuses_stored_before_audiences_stay_public,
    relation_mutations_refuse_bad_input,
);

const LISTS: [(&str, &str, &str); 4] = [
    ("addCloseFriend", "removeCloseFriend", "closeFriends"),
    ("hideStoriesFrom", "unhideStoriesFrom", "storiesHiddenFrom"),
    ("muteUser", "unmuteUser", "mutedUsers"),
    ("blockUser", "unblockUser", "blockedUsers"),
];

async fn call(app: &TestApp, who: &TestUser, mutation: &str, other: &str) -> Value {
    let q = format!("mutation($u: ID!) {{ {mutation}(userId: $u) }}");
    app.gql(who.token(), &q, json!({ "u": other })).await
}

async fn list(
    app: &TestApp,
    who: &TestUser,
    field: &str,
    first: i32,
    after: Option<&str>,
) -> Value {
    let q = format!(
        "query($f: Int, $a: String) {{ {field}(first: $f, after: $a) {{ nodes {{ id }} pageInfo {{ hasNextPage endCursor }} }} }}"
    );
    app.ok(who.token(), &q, json!({ "f": first, "a": after }))
        .await[field]
        .clone()
}

async fn lists_are_paged_and_private(app: &TestApp) {
    let owner = app.sign_up("owner").await;
    let a = app.sign_up("first_one").await;
    let b = app.sign_up("second_one").await;
    app.befriend(&owner, &a).await;
    app.befriend(&owner, &b).await;
    for (add, remove, field) in LISTS {
        app.relate(&owner, add, &a).await;
        app.clock.advance(std::time::Duration::from_secs(1));
        app.relate(&owner, add, &b).await;
        // Idempotent.
        app.relate(&owner, add, &b).await;
        let page = list(app, &owner, field, 1, None).await;
        assert_eq!(
            connection_ids(&page),
            vec![b.id.clone()],
            "{field}: newest first"
        );
        assert_eq!(page["pageInfo"]["hasNextPage"], true);
        let cursor = page["pageInfo"]["endCursor"].as_str().unwrap().to_owned();
        let rest = list(app, &owner, field, 1, Some(&cursor)).await;
        assert_eq!(
            connection_ids(&rest),
            vec![a.id.clone()],
            "{field}: second page"
        );
        assert_eq!(rest["pageInfo"]["hasNextPage"], false);
        // A cursor of one person's list is refused on another's.
        let q = format!("query($a: String) {{ {field}(after: $a) {{ nodes {{ id }} }} }}");
        let resp = app.gql(a.token(), &q, json!({ "a": cursor })).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{field}");
        // Nobody else's list is readable: each reads their own (empty).
        assert!(
            connection_ids(&list(app, &a, field, 10, None).await).is_empty(),
            "{field}"
        );
        let resp = app.gql(None, &q, json!({ "a": null })).await;
        assert_eq!(error_code(&resp), "UNAUTHENTICATED", "{field}");
        app.relate(&owner, remove, &a).await;
        app.relate(&owner, remove, &a).await;
        app.relate(&owner, remove, &b).await;
        assert!(connection_ids(&list(app, &owner, field, 10, None).await).is_empty());
        if add == "blockUser" {
            // The block ended the friendships; bring them back for the next list.
            app.befriend(&owner, &a).await;
            app.befriend(&owner, &b).await;
        }
    }
}

async fn close_friends_are_friends_only(app: &TestApp) {
    let owner = app.sign_up("owner").await;
    let pal = app.sign_up("pal").await;
    let asked = app.sign_up("asked").await;
    let stranger = app.sign_up("stranger").await;
    app.befriend(&owner, &pal).await;
    // A pending request is not a friendship.
    app.ok(
        owner.token(),
        "mutation($u: ID!) { sendFriendRequest(userId: $u) }",
        json!({ "u": asked.id }),
    )
    .await;
    for user in [&stranger, &asked] {
        let resp = call(app, &owner, "addCloseFriend", &user.id).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{resp}");
    }
    assert!(connection_ids(&list(app, &owner, "closeFriends", 10, None).await).is_empty());
    app.relate(&owner, "addCloseFriend", &pal).await;
    let id = app
        .post_status_to(&owner, "inner circle", "CLOSE_FRIENDS")
        .await;
    let q = "query($id: ID!) { status(id: $id) { id } }";
    assert!(!app.ok(pal.token(), q, json!({ "id": id })).await["status"].is_null());
    // Unfriending takes them off the list, and off the audience.
    app.ok(
        pal.token(),
        "mutation($u: ID!) { removeFriend(userId: $u) }",
        json!({ "u": owner.id }),
    )
    .await;
    assert!(connection_ids(&list(app, &owner, "closeFriends", 10, None).await).is_empty());
    assert!(app.ok(pal.token(), q, json!({ "id": id })).await["status"].is_null());
    // Friends again: not close again until added.
    app.befriend(&owner, &pal).await;
    assert!(app.ok(pal.token(), q, json!({ "id": id })).await["status"].is_null());
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM user_relations WHERE kind = 'CLOSE_FRIEND'")
            .await,
        0
    );
}

async fn blocks_hide_likes_views_and_counts(app: &TestApp) {
    let author = app.sign_up("author").await;
    let fan = app.sign_up("fan").await;
    let troll = app.sign_up("troll").await;
    let bystander = app.sign_up("bystander").await;
    app.befriend(&author, &troll).await;
    let status = app.post_status(&author, "hello").await;
    let moment = app
        .post_moment(
            &author,
            json!({ "visibility": "PUBLIC", "placeName": "Square" }),
        )
        .await;
    let moment_id = moment["id"].as_str().unwrap().to_owned();
    for user in [&fan, &troll] {
        app.ok(
            user.token(),
            "mutation($id: ID!) { markStatusSeen(id: $id) { id } }",
            json!({ "id": status }),
        )
        .await;
        app.ok(
            user.token(),
            "mutation($id: ID!) { setMomentLike(momentId: $id, liked: true) { id } }",
            json!({ "id": moment_id }),
        )
        .await;
    }
    // The troll's pending request to someone the author knows is not
    // touched; the one between the two is.
    app.ok(
        troll.token(),
        "mutation($u: ID!) { sendFriendRequest(userId: $u) }",
        json!({ "u": bystander.id }),
    )
    .await;
    app.relate(&author, "blockUser", &troll).await;
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) AS n FROM friendships WHERE (low_id = {a} OR high_id = {a})",
            a = raw(&author.id)
        ))
        .await,
        0
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM friendships").await, 1);

    let q = "query($s: ID!, $m: ID!) { status(id: $s) { viewCount viewers { nodes { id } } } moment(id: $m) { likesCount likers { nodes { id } } } }";
    let vars = json!({ "s": status, "m": moment_id });
    let mine = app.ok(author.token(), q, vars.clone()).await;
    assert_eq!(
        connection_ids(&mine["status"]["viewers"]),
        vec![fan.id.clone()]
    );
    assert_eq!(mine["status"]["viewCount"], 1);
    assert_eq!(
        connection_ids(&mine["moment"]["likers"]),
        vec![fan.id.clone()]
    );
    assert_eq!(mine["moment"]["likesCount"], 1);
    // Others see both likes: the block is between the two of them.
    let theirs = app.ok(bystander.token(), q, vars.clone()).await;
    assert_eq!(theirs["moment"]["likesCount"], 2);
    // The troll sees nothing of the author's, and cannot act on it.
    let blocked = app.ok(troll.token(), q, vars.clone()).await;
    assert!(blocked["status"].is_null() && blocked["moment"].is_null());
    for (m, vars) in [
        (
            "mutation($id: ID!) { markStatusSeen(id: $id) { id } }",
            json!({ "id": status }),
        ),
        (
            "mutation($id: ID!) { toggleMomentLike(momentId: $id) { id } }",
            json!({ "id": moment_id }),
        ),
        (
            "mutation($id: ID!) { report(input: { subjectId: $id, reason: SPAM }) { id } }",
            json!({ "id": status }),
        ),
        (
            "mutation($u: ID!) { sendFriendRequest(userId: $u) }",
            json!({ "u": author.id }),
        ),
        (
            "mutation($u: ID!) { acceptFriendRequest(userId: $u) }",
            json!({ "u": author.id }),
        ),
    ] {
        let resp = app.gql(troll.token(), m, vars).await;
        assert_eq!(error_code(&resp), "NOT_FOUND", "{m}: {resp}");
    }
    // The location's badge as the troll sees it leaves the author's moment out.
    let map = "{ mapMarkers(bbox: { south: -90, west: -180, north: 90, east: 180 }) { markers { __typename } } }";
    let seen = app.ok(troll.token(), map, json!({})).await;
    assert_eq!(seen["mapMarkers"]["markers"], json!([]));
    // Only the blocker can undo it: the troll's unblock changes nothing,
    // and answers as for someone who does not exist.
    let unblock = "mutation($u: ID!) { unblockUser(userId: $u) }";
    let hidden = app
        .gql(troll.token(), unblock, json!({ "u": author.id }))
        .await;
    let missing = app
        .gql(troll.token(), unblock, json!({ "u": "123456789" }))
        .await;
    assert_eq!(hidden, missing);
    assert_eq!(error_code(&hidden), "NOT_FOUND");
    let still = app.ok(troll.token(), q, vars.clone()).await;
    assert!(still["status"].is_null());
    app.relate(&author, "unblockUser", &troll).await;
    let back = app.ok(troll.token(), q, vars).await;
    assert!(!back["status"].is_null() && !back["moment"].is_null());
    // The friendship does not come back by itself.
    let state = app
        .ok(
            author.token(),
            "query($u: ID!) { user(id: $u) { friendship } }",
            json!({ "u": troll.id }),
        )
        .await;
    assert_eq!(state["user"]["friendship"], "NONE");
}

async fn a_muted_person_cannot_tell(app: &TestApp) {
    let muter = app.sign_up("muter").await;
    let loud = app.sign_up("loud").await;
    app.befriend(&muter, &loud).await;
    app.relate(&muter, "muteUser", &loud).await;
    // The muted person still sees the muter's statuses and moments, in
    // lists and directly, as before.
    let s = app.post_status(&muter, "still here").await;
    let m = app
        .post_moment(&muter, json!({ "visibility": "FRIENDS_ONLY" }))
        .await;
    let q = "{ storyTray { nodes { author { id } } } momentFeed { nodes { id } } }";
    let seen = app.ok(loud.token(), q, json!({})).await;
    assert_eq!(
        seen["storyTray"]["nodes"][0]["author"]["id"],
        muter.id.as_str()
    );
    assert_eq!(seen["momentFeed"]["nodes"][0]["id"], m["id"]);
    let one = app
        .ok(
            loud.token(),
            "query($id: ID!) { status(id: $id) { id } }",
            json!({ "id": s }),
        )
        .await;
    assert_eq!(one["status"]["id"], s.as_str());
    // Nothing they can read says so: the friendship reads as before.
    let state = app
        .ok(
            loud.token(),
            "query($u: ID!) { user(id: $u) { friendship } }",
            json!({ "u": muter.id }),
        )
        .await;
    assert_eq!(state["user"]["friendship"], "FRIENDS");
    // And the muter still reads the muted person directly.
    let theirs = app.post_status(&loud, "look at me").await;
    let direct = app
        .ok(
            muter.token(),
            "query($id: ID!) { status(id: $id) { id } }",
            json!({ "id": theirs }),
        )
        .await;
    assert_eq!(direct["status"]["id"], theirs.as_str());
    let tray = app.ok(muter.token(), q, json!({})).await;
    let authors: Vec<&Value> = tray["storyTray"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["author"]["id"])
        .collect();
    assert_eq!(authors, vec![&json!(muter.id)]);
}

async fn the_default_audience_is_friends(app: &TestApp) {
    let author = app.sign_up("author").await;
    let pal = app.sign_up("pal").await;
    let stranger = app.sign_up("stranger").await;
    app.befriend(&author, &pal).await;
    let data = app
        .ok(
            author.token(),
            "mutation { createStatus(input: { caption: \"who sees this?\" }) { id audience } }",
            json!({}),
        )
        .await;
    assert_eq!(data["createStatus"]["audience"], "FRIENDS");
    let id = data["createStatus"]["id"].as_str().unwrap();
    let q = "query($id: ID!) { status(id: $id) { id } storyTray { nodes { author { id } } } }";
    let seen = app.ok(pal.token(), q, json!({ "id": id })).await;
    assert_eq!(seen["status"]["id"], id);
    assert_eq!(seen["storyTray"]["nodes"].as_array().unwrap().len(), 1);
    for token in [stranger.token(), None] {
        let seen = app.ok(token, q, json!({ "id": id })).await;
        assert!(seen["status"].is_null());
        assert_eq!(seen["storyTray"]["nodes"], json!([]));
    }
}

/// A status stored before audiences existed was posted for anyone: after
/// the migration it is PUBLIC, and in the tray for anonymous readers.
async fn statuses_stored_before_audiences_stay_public(app: &TestApp) {
    use migration::{Migrator, MigratorTrait};
    use sea_orm::ConnectionTrait;
    let author = app.sign_up("veteran").await;
    let db = &app.state.db;
    // Back to before the audiences (and every migration after them).
    let after = Migrator::migrations()
        .iter()
        .rev()
        .take_while(|m| m.name() != "m20261202_000006_safety")
        .count();
    Migrator::down(db, Some(u32::try_from(after).unwrap() + 1))
        .await
        .unwrap();
    let now = app.clock.now();
    let id = app.state.ids.next_id();
    for sql in [
        format!(
            "INSERT INTO statuses (id, author_id, caption, created_at, expires_at) VALUES ({id}, {}, 'old', {now}, {})",
            raw(&author.id),
            now + 3_600_000
        ),
        format!(
            "INSERT INTO status_tray (author_id, latest_created_at, max_expires_at) VALUES ({}, {now}, {})",
            raw(&author.id),
            now + 3_600_000
        ),
    ] {
        db.execute_unprepared(&sql).await.unwrap();
    }
    Migrator::up(db, None).await.unwrap();
    let q = "query($id: ID!) { status(id: $id) { audience } storyTray { nodes { author { username } storyCount } } }";
    let seen = app
        .ok(None, q, json!({ "id": gid(IdKind::Status, id) }))
        .await;
    assert_eq!(seen["status"]["audience"], "PUBLIC");
    assert_eq!(
        seen["storyTray"]["nodes"][0]["author"]["username"],
        "veteran"
    );
    assert_eq!(seen["storyTray"]["nodes"][0]["storyCount"], 1);
}

async fn relation_mutations_refuse_bad_input(app: &TestApp) {
    let me = app.sign_up("myself").await;
    let other = app.sign_up("other").await;
    let verbs = LISTS.iter().flat_map(|(add, remove, _)| [*add, *remove]);
    for mutation in verbs {
        // Oneself.
        let resp = call(app, &me, mutation, &me.id).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{mutation} self");
        // Unknown and malformed ids.
        for id in ["999999999", "x", "-1"] {
            let resp = call(app, &me, mutation, id).await;
            assert_eq!(error_code(&resp), "NOT_FOUND", "{mutation} {id}");
        }
        // Without signing in.
        let q = format!("mutation($u: ID!) {{ {mutation}(userId: $u) }}");
        let resp = app.gql(None, &q, json!({ "u": other.id })).await;
        assert_eq!(error_code(&resp), "UNAUTHENTICATED", "{mutation} anonymous");
        // A missing argument is a document error.
        let resp = app
            .gql(me.token(), &format!("mutation {{ {mutation} }}"), json!({}))
            .await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{mutation} no userId");
    }
    // Nothing was stored by any of them.
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM user_relations").await,
        0
    );
    // An audience that does not exist.
    let resp = app
        .gql(
            me.token(),
            "mutation { createStatus(input: { caption: \"x\", audience: EVERYBODY }) { id } }",
            json!({}),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    let resp = app
        .gql(
            me.token(),
            "mutation($a: StatusAudience) { createStatus(input: { caption: \"x\", audience: $a }) { id } }",
            json!({ "a": null }),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{resp}");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 0);
}

/// Deleting a status recomputes each audience level's summary: a close
/// friend's tray entry falls back to the newest status they may still see,
/// and a friend's never moved.
async fn tray_places_follow_deletes_per_audience(app: &TestApp) {
    let author = app.sign_up("author").await;
    let close = app.sign_up("closest").await;
    let pal = app.sign_up("pal").await;
    app.befriend(&author, &close).await;
    app.befriend(&author, &pal).await;
    app.relate(&author, "addCloseFriend", &close).await;
    let q = "{ storyTray { nodes { latestCreatedAt storyCount } } }";
    let public = app.post_status(&author, "for all").await;
    let first = app.ok(pal.token(), q, json!({})).await["storyTray"]["nodes"][0].clone();
    app.clock.advance(std::time::Duration::from_secs(60));
    let inner = app.post_status_to(&author, "inner", "CLOSE_FRIENDS").await;
    let seen = app.ok(close.token(), q, json!({})).await;
    assert_ne!(
        seen["storyTray"]["nodes"][0]["latestCreatedAt"],
        first["latestCreatedAt"]
    );
    assert_eq!(seen["storyTray"]["nodes"][0]["storyCount"], 2);
    assert_eq!(
        app.ok(pal.token(), q, json!({})).await["storyTray"]["nodes"][0],
        first
    );
    let del = "mutation($id: ID!) { deleteStatus(id: $id) }";
    app.ok(author.token(), del, json!({ "id": inner })).await;
    assert_eq!(
        app.ok(close.token(), q, json!({})).await["storyTray"]["nodes"][0],
        first
    );
    app.ok(author.token(), del, json!({ "id": public })).await;
    for who in [&close, &pal, &author] {
        assert_eq!(
            app.ok(who.token(), q, json!({})).await["storyTray"]["nodes"],
            json!([])
        );
    }
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM status_tray").await, 0);
}
