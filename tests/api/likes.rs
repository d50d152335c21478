//! Likes: toggle and set, the liker list (author only), rejections, the count
//! under real concurrency, and accounts deleted with their likes.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{HOUR, TestApp, error_code, raw};

both_backends!(
    toggle_and_set,
    likers_are_for_the_author,
    like_rejections,
    concurrent_likes_keep_the_count_exact,
    deleted_accounts_take_their_likes,
);

const TOGGLE: &str =
    "mutation($id: ID!) { toggleMomentLike(momentId: $id) { id likesCount viewerHasLiked } }";
const SET: &str = "mutation($id: ID!, $l: Boolean!) { setMomentLike(momentId: $id, liked: $l) { id likesCount viewerHasLiked } }";

async fn toggle_and_set(app: &TestApp) {
    let author = app.sign_up("author").await;
    let a = app.sign_up("alice").await;
    let b = app.sign_up("bob").await;
    let id = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .clone();
    let t = app.ok(a.token(), TOGGLE, json!({ "id": id })).await;
    assert_eq!(t["toggleMomentLike"]["likesCount"], 1);
    assert_eq!(t["toggleMomentLike"]["viewerHasLiked"], true);
    // Setting what is already so changes nothing (safe to retry).
    for _ in 0..2 {
        let s = app.ok(a.token(), SET, json!({ "id": id, "l": true })).await;
        assert_eq!(s["setMomentLike"]["likesCount"], 1);
        assert_eq!(s["setMomentLike"]["viewerHasLiked"], true);
    }
    let s = app.ok(b.token(), SET, json!({ "id": id, "l": true })).await;
    assert_eq!(s["setMomentLike"]["likesCount"], 2);
    let t = app.ok(a.token(), TOGGLE, json!({ "id": id })).await;
    assert_eq!(t["toggleMomentLike"]["likesCount"], 1);
    assert_eq!(t["toggleMomentLike"]["viewerHasLiked"], false);
    for _ in 0..2 {
        let s = app
            .ok(b.token(), SET, json!({ "id": id, "l": false }))
            .await;
        assert_eq!(s["setMomentLike"]["likesCount"], 0);
        assert_eq!(s["setMomentLike"]["viewerHasLiked"], false);
    }
    // Anonymous readers see the count and never "liked".
    app.ok(a.token(), SET, json!({ "id": id, "l": true })).await;
    let q = "query($id: ID!) { moment(id: $id) { likesCount viewerHasLiked } }";
    assert_eq!(
        app.ok(None, q, json!({ "id": id })).await["moment"],
        json!({ "likesCount": 1, "viewerHasLiked": false })
    );
    assert_eq!(
        app.ok(a.token(), q, json!({ "id": id })).await["moment"],
        json!({ "likesCount": 1, "viewerHasLiked": true })
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moment_likes").await, 1);
}

async fn likers_are_for_the_author(app: &TestApp) {
    let author = app.sign_up("author").await;
    let id = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .clone();
    let mut fans = Vec::new();
    for i in 0..5 {
        let f = app.sign_up(&format!("fan{i}")).await;
        app.ok(f.token(), TOGGLE, json!({ "id": id })).await;
        app.clock.advance(std::time::Duration::from_secs(1));
        fans.push(f);
    }
    let q = "query($id: ID!, $n: Int, $a: String) { moment(id: $id) { likers(first: $n, after: $a) { nodes { username } pageInfo { hasNextPage endCursor } } } }";
    let page = app.ok(author.token(), q, json!({ "id": id, "n": 3 })).await;
    let likers = &page["moment"]["likers"];
    assert_eq!(
        likers["nodes"],
        json!([{ "username": "fan4" }, { "username": "fan3" }, { "username": "fan2" }])
    );
    assert_eq!(likers["pageInfo"]["hasNextPage"], true);
    let rest = app
        .ok(
            author.token(),
            q,
            json!({ "id": id, "n": 3, "a": likers["pageInfo"]["endCursor"] }),
        )
        .await;
    assert_eq!(
        rest["moment"]["likers"]["nodes"],
        json!([{ "username": "fan1" }, { "username": "fan0" }])
    );
    // Nobody else gets the list, not even a liker.
    for token in [fans[0].token(), None] {
        let data = app.ok(token, q, json!({ "id": id })).await;
        assert_eq!(data["moment"]["likers"], Value::Null);
    }
    // Its arguments are checked.
    assert_eq!(
        app.err(author.token(), q, json!({ "id": id, "n": -1 }))
            .await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.err(author.token(), q, json!({ "id": id, "a": "forged" }))
            .await,
        "BAD_USER_INPUT"
    );
}

async fn like_rejections(app: &TestApp) {
    let author = app.sign_up("author").await;
    let fan = app.sign_up("fan").await;
    let short = app
        .post_moment(
            &author,
            json!({ "visibility": "PUBLIC", "durationHours": 1 }),
        )
        .await["id"]
        .clone();
    let deleted = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .clone();
    let kept = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .clone();
    app.ok(fan.token(), SET, json!({ "id": deleted, "l": true }))
        .await;
    app.ok(
        author.token(),
        "mutation($id: ID!) { deleteMoment(id: $id) }",
        json!({ "id": deleted }),
    )
    .await;
    app.clock.advance(HOUR * 2);
    for id in [&short, &deleted, &json!("123456"), &json!("x"), &json!("0")] {
        for (q, vars) in [
            (TOGGLE, json!({ "id": id })),
            (SET, json!({ "id": id, "l": true })),
            (SET, json!({ "id": id, "l": false })),
        ] {
            let resp = app.gql(fan.token(), q, vars).await;
            assert_eq!(error_code(&resp), "NOT_FOUND", "{id}");
        }
    }
    assert_eq!(
        app.err(None, TOGGLE, json!({ "id": kept })).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(None, SET, json!({ "id": kept, "l": true })).await,
        "UNAUTHENTICATED"
    );
    for vars in [
        json!({ "id": kept }),
        json!({ "id": kept, "l": null }),
        json!({ "id": kept, "l": "yes" }),
    ] {
        assert_eq!(app.err(fan.token(), SET, vars).await, "BAD_USER_INPUT");
    }
    // The like on the deleted moment stays through the grace.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moment_likes").await, 1);
    let restored = app
        .ok(
            author.token(),
            "mutation($id: ID!) { restoreMoment(id: $id) { likesCount likers { nodes { username } } } }",
            json!({ "id": deleted }),
        )
        .await;
    assert_eq!(restored["restoreMoment"]["likesCount"], 1);
    assert_eq!(
        restored["restoreMoment"]["likers"]["nodes"],
        json!([{ "username": "fan" }])
    );
}

async fn concurrent_likes_keep_the_count_exact(app: &TestApp) {
    let author = app.sign_up("popular").await;
    let ids: Vec<Value> = {
        let mut v = Vec::new();
        for _ in 0..2 {
            v.push(
                app.post_moment(&author, json!({ "visibility": "PUBLIC" }))
                    .await["id"]
                    .clone(),
            );
        }
        v
    };
    let mut users = Vec::new();
    for i in 0..12 {
        users.push(app.sign_up(&format!("liker{i}")).await);
    }
    // Every user fires toggles and sets at both moments at once, several times.
    let mut calls = Vec::new();
    for (i, u) in users.iter().enumerate() {
        for round in 0..6 {
            for id in &ids {
                let (q, vars) = match (i + round) % 3 {
                    0 => (TOGGLE, json!({ "id": id })),
                    1 => (SET, json!({ "id": id, "l": true })),
                    _ => (SET, json!({ "id": id, "l": round % 2 == 0 })),
                };
                calls.push(app.gql(u.token(), q, vars));
            }
        }
    }
    let results = futures_util::future::join_all(calls).await;
    // On a loaded machine a call can wait out its database-time budget
    // behind the others' row locks: it is refused whole (RATE_LIMITED) and
    // changes nothing, so the counts below stay exact either way.
    let mut done = 0;
    for r in &results {
        match r.get("errors") {
            None => done += 1,
            Some(_) => assert_eq!(r["errors"][0]["extensions"]["code"], "RATE_LIMITED", "{r}"),
        }
    }
    assert!(done > 0, "none of {} done", results.len());
    for id in &ids {
        let rows = app
            .count(&format!(
                "SELECT COUNT(*) AS n FROM moment_likes WHERE moment_id = {}",
                raw(id.as_str().unwrap())
            ))
            .await;
        let data = app
            .ok(
                None,
                "query($id: ID!) { moment(id: $id) { likesCount } }",
                json!({ "id": id }),
            )
            .await;
        assert_eq!(
            data["moment"]["likesCount"], rows,
            "likesCount equals the like rows"
        );
        assert!(rows > 0);
    }
}

async fn deleted_accounts_take_their_likes(app: &TestApp) {
    let author = app.sign_up("author").await;
    let fan = app.sign_up("leaver").await;
    let stays = app.sign_up("stayer").await;
    let id = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .clone();
    app.ok(fan.token(), TOGGLE, json!({ "id": id })).await;
    app.ok(stays.token(), TOGGLE, json!({ "id": id })).await;
    app.ok(
        fan.token(),
        "mutation { deleteAccount(password: \"password123\") }",
        json!({}),
    )
    .await;
    let data = app
        .ok(
            author.token(),
            "query($id: ID!) { moment(id: $id) { likesCount likers { nodes { username } } } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(data["moment"]["likesCount"], 1);
    assert_eq!(
        data["moment"]["likers"]["nodes"],
        json!([{ "username": "stayer" }])
    );
    // The author's own account takes its moments, their likes and media.
    app.ok(
        author.token(),
        "mutation { deleteAccount(password: \"password123\") }",
        json!({}),
    )
    .await;
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moments").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moment_likes").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM media").await, 0);
    app.media_gc().await;
    assert!(app.store_keys().await.is_empty());
}
