//! Moments: creation and every rejection of its input, the journaled
//! invariant (in code and in a CHECK), pages, delete and restore.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{HOUR, IdKind, MOMENT_FIELDS, Seed, TestApp, TestUser, error_code, gid, raw};

both_backends!(
    create_moment_defaults,
    journaled_moments_never_expire,
    create_moment_rejections_lose_nothing,
    journaled_invariant_is_a_check_constraint,
    moment_pages,
    expired_moments_vanish_without_a_job,
    delete_and_restore,
    delete_and_restore_rejections,
    moment_pages_run_a_constant_number_of_statements,
    one_media_one_holder_under_concurrency,
);

const CREATE: &str = "mutation($i: CreateMomentInput!) { createMoment(input: $i) { id } }";

fn millis(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a date"))
        .expect("RFC 3339")
        .timestamp_millis()
}

fn ids(conn: &Value) -> Vec<String> {
    conn["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn create_moment_defaults(app: &TestApp) {
    let u = app.sign_up("poster").await;
    let m = app
        .post_moment(&u, json!({ "caption": "  golden hour " }))
        .await;
    assert_eq!(m["visibility"], "FRIENDS_ONLY");
    assert_eq!(m["durationHours"], 24);
    assert_eq!(m["isJournaled"], false);
    assert_eq!(m["likesCount"], 0);
    assert_eq!(m["viewerHasLiked"], false);
    assert_eq!(m["location"], Value::Null);
    assert_eq!(m["author"]["username"], "poster");
    assert_eq!(m["caption"], "  golden hour ");
    assert_eq!(m["latitude"], 48.8566);
    assert_eq!(m["longitude"], 2.3522);
    assert_eq!(
        millis(&m["expiresAt"]) - millis(&m["createdAt"]),
        24 * 3_600_000
    );
    let (status, bytes) = app.fetch(m["media"]["url"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    assert!(!bytes.is_empty());
    // Explicit values, and the edges of the ranges.
    for (hours, lat, lon) in [(1, -90.0, -180.0), (168, 90.0, 180.0)] {
        let m = app
            .post_moment(
                &u,
                json!({ "durationHours": hours, "latitude": lat, "longitude": lon, "visibility": "PUBLIC", "caption": "é".repeat(2200) }),
            )
            .await;
        assert_eq!(m["durationHours"], hours);
        assert_eq!(m["visibility"], "PUBLIC");
        assert_eq!(
            millis(&m["expiresAt"]) - millis(&m["createdAt"]),
            i64::from(hours) * 3_600_000
        );
    }
    // Null for the defaulted fields means the default.
    let m = app
        .post_moment(&u, json!({ "durationHours": null, "visibility": null }))
        .await;
    assert_eq!(m["durationHours"], 24);
    assert_eq!(m["visibility"], "FRIENDS_ONLY");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moments").await, 4);
}

async fn journaled_moments_never_expire(app: &TestApp) {
    let u = app.sign_up("diarist").await;
    let j = app
        .post_moment(&u, json!({ "durationHours": 0, "visibility": "PUBLIC" }))
        .await;
    assert_eq!(j["isJournaled"], true);
    assert_eq!(j["durationHours"], 0);
    assert_eq!(j["expiresAt"], Value::Null);
    let e = app
        .post_moment(&u, json!({ "durationHours": 2, "visibility": "PUBLIC" }))
        .await;
    let q =
        "query($u: ID!, $j: Boolean) { user(id: $u) { moments(journaled: $j) { nodes { id } } } }";
    // Anonymous: the author's token would not outlive the years below.
    let page = |j: Value| app.ok(None, q, json!({ "u": u.id, "j": j }));
    assert_eq!(
        ids(&page(json!(true)).await["user"]["moments"]),
        vec![j["id"].as_str().unwrap()]
    );
    assert_eq!(
        ids(&page(json!(false)).await["user"]["moments"]),
        vec![e["id"].as_str().unwrap()]
    );
    assert_eq!(ids(&page(Value::Null).await["user"]["moments"]).len(), 2);

    // Years later, after both jobs, the diary entry is still there.
    app.clock.advance(HOUR * 24 * 1000);
    let expired = ephemera::jobs::moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(expired.rows, 1);
    app.clock.advance(HOUR * 24 * 30);
    let purged = ephemera::jobs::moment_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(purged.rows, 1);
    assert_eq!(
        ids(&page(Value::Null).await["user"]["moments"]),
        vec![j["id"].as_str().unwrap()]
    );
    assert_eq!(
        app.count(
            "SELECT COUNT(*) AS n FROM moments WHERE deleted_at IS NULL AND expires_at IS NULL"
        )
        .await,
        1
    );
}

async fn create_moment_rejections_lose_nothing(app: &TestApp) {
    let u = app.sign_up("careful").await;
    let other = app.sign_up("other").await;
    let media = app.upload_id(&u).await;
    let theirs = app.upload_id(&other).await;
    let good = json!({ "mediaId": media, "latitude": 1.0, "longitude": 2.0 });
    let with = |k: &str, v: Value| {
        let mut i = good.clone();
        i[k] = v;
        json!({ "i": i })
    };
    let cases: Vec<(Value, &str)> = vec![
        (with("latitude", json!(90.0001)), "BAD_USER_INPUT"),
        (with("latitude", json!(-90.5)), "BAD_USER_INPUT"),
        (with("longitude", json!(180.0001)), "BAD_USER_INPUT"),
        (with("longitude", json!(-181)), "BAD_USER_INPUT"),
        (with("latitude", json!("north")), "BAD_USER_INPUT"),
        (with("latitude", Value::Null), "BAD_USER_INPUT"),
        (with("durationHours", json!(-1)), "BAD_USER_INPUT"),
        (with("durationHours", json!(169)), "BAD_USER_INPUT"),
        (with("durationHours", json!(1.5)), "BAD_USER_INPUT"),
        (with("caption", json!("x".repeat(2201))), "BAD_USER_INPUT"),
        (with("visibility", json!("PRIVATE")), "BAD_USER_INPUT"),
        (with("locationId", json!("12345")), "NOT_FOUND"),
        (with("locationId", json!("not-an-id")), "NOT_FOUND"),
        (with("placeName", json!("   ")), "BAD_USER_INPUT"),
        (with("placeName", json!("p".repeat(201))), "BAD_USER_INPUT"),
        (with("placeName", json!("bad\u{0}name")), "BAD_USER_INPUT"),
        (with("mediaId", json!("999")), "NOT_FOUND"),
        (with("mediaId", json!("x")), "NOT_FOUND"),
        (with("mediaId", json!(theirs)), "NOT_FOUND"),
        (with("mediaId", Value::Null), "BAD_USER_INPUT"),
    ];
    for (vars, code) in &cases {
        assert_eq!(
            &app.err(u.token(), CREATE, vars.clone()).await,
            code,
            "{vars}"
        );
    }
    // Both locationId and placeName.
    let loc = app
        .post_moment(&u, json!({ "placeName": "Pont Neuf" }))
        .await["location"]["id"]
        .clone();
    let mut both = good.clone();
    both["locationId"] = loc;
    both["placeName"] = json!("Pont Neuf");
    assert_eq!(
        app.err(u.token(), CREATE, json!({ "i": both })).await,
        "BAD_USER_INPUT"
    );
    // Anonymous, and a missing input.
    assert_eq!(
        app.err(None, CREATE, json!({ "i": good })).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(u.token(), "mutation { createMoment { id } }", json!({}))
            .await,
        "BAD_USER_INPUT"
    );
    // Nothing was stored and the media is still free: it attaches now.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moments").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM locations").await, 1);
    let created = app.ok(u.token(), CREATE, json!({ "i": good })).await;
    assert!(created["createMoment"]["id"].is_string());
    // Attached now: using it again is refused.
    assert_eq!(
        app.err(u.token(), CREATE, json!({ "i": good })).await,
        "BAD_USER_INPUT"
    );
    // A status cannot take a moment's media either.
    assert_eq!(
        app.err(
            u.token(),
            "mutation($m: ID!) { createStatus(input: { mediaId: $m }) { id } }",
            json!({ "m": media })
        )
        .await,
        "BAD_USER_INPUT"
    );
}

async fn journaled_invariant_is_a_check_constraint(app: &TestApp) {
    let u = app.sign_up("checker").await;
    app.seed_moments(&u, 1, Seed::default()).await;
    let db = &app.state.db;
    let bad = [
        // journaled with an expiry
        "UPDATE moments SET is_journaled = TRUE, duration_hours = 0",
        // duration 0 but not journaled
        "UPDATE moments SET duration_hours = 0, expires_at = NULL",
        // ephemeral without an expiry
        "UPDATE moments SET expires_at = NULL",
        // out of range
        "UPDATE moments SET duration_hours = 169",
        "UPDATE moments SET visibility = 'PRIVATE'",
        "UPDATE moments SET likes_count = -1",
        "UPDATE moments SET latitude = 91",
    ];
    for sql in bad {
        let r = db
            .execute_raw(sea_orm::Statement::from_string(
                db.get_database_backend(),
                sql.to_owned(),
            ))
            .await;
        assert!(r.is_err(), "the database accepted: {sql}");
    }
    use sea_orm::ConnectionTrait;
    db.execute_unprepared(
        "UPDATE moments SET is_journaled = TRUE, duration_hours = 0, expires_at = NULL",
    )
    .await
    .expect("a consistent journaled row is accepted");
}

async fn moment_pages(app: &TestApp) {
    let u = app.sign_up("pager").await;
    let q = "query($n: Int, $a: String) { momentFeed(first: $n, after: $a) { nodes { id } pageInfo { hasNextPage hasPreviousPage endCursor } } }";
    let feed = |n: Value, a: Value| app.ok(None, q, json!({ "n": n, "a": a }));
    // Empty.
    let empty = feed(json!(5), Value::Null).await;
    assert_eq!(ids(&empty["momentFeed"]).len(), 0);
    assert_eq!(empty["momentFeed"]["pageInfo"]["hasNextPage"], false);
    let seeded = app.seed_moments(&u, 6, Seed::default()).await;
    let newest_first: Vec<String> = seeded
        .iter()
        .rev()
        .map(|i| gid(IdKind::Moment, *i))
        .collect();
    // Exact, page + 1, first: 0, clamped, default.
    let exact = feed(json!(6), Value::Null).await;
    assert_eq!(ids(&exact["momentFeed"]), newest_first);
    assert_eq!(exact["momentFeed"]["pageInfo"]["hasNextPage"], false);
    let p1 = feed(json!(4), Value::Null).await;
    assert_eq!(ids(&p1["momentFeed"]), newest_first[..4]);
    assert_eq!(p1["momentFeed"]["pageInfo"]["hasNextPage"], true);
    let p2 = feed(json!(4), p1["momentFeed"]["pageInfo"]["endCursor"].clone()).await;
    assert_eq!(ids(&p2["momentFeed"]), newest_first[4..]);
    assert_eq!(p2["momentFeed"]["pageInfo"]["hasNextPage"], false);
    assert_eq!(p2["momentFeed"]["pageInfo"]["hasPreviousPage"], true);
    let zero = feed(json!(0), Value::Null).await;
    assert_eq!(ids(&zero["momentFeed"]).len(), 0);
    assert_eq!(zero["momentFeed"]["pageInfo"]["hasNextPage"], true);
    assert_eq!(
        ids(&feed(json!(5000), Value::Null).await["momentFeed"]).len(),
        6
    );
    assert_eq!(
        ids(&feed(Value::Null, Value::Null).await["momentFeed"]).len(),
        6
    );
    // Rejections: negative sizes, forged cursors, another list's cursor.
    assert_eq!(app.err(None, q, json!({ "n": -1 })).await, "BAD_USER_INPUT");
    assert_eq!(
        app.err(None, q, json!({ "a": "forged" })).await,
        "BAD_USER_INPUT"
    );
    let user_q = "query($u: ID!) { user(id: $u) { moments(first: 1) { pageInfo { endCursor } } } }";
    let other_cursor = app.ok(None, user_q, json!({ "u": u.id })).await["user"]["moments"]
        ["pageInfo"]["endCursor"]
        .clone();
    assert_eq!(
        app.err(None, q, json!({ "a": other_cursor })).await,
        "BAD_USER_INPUT"
    );
    // FRIENDS needs a viewer; a friend's moments appear in it, a stranger's do not.
    let fq = "{ momentFeed(scope: FRIENDS) { nodes { id } } }";
    assert_eq!(app.err(None, fq, json!({})).await, "UNAUTHENTICATED");
    let friend = app.sign_up("pal").await;
    let stranger = app.sign_up("nobody").await;
    app.befriend(&u, &friend).await;
    assert_eq!(
        ids(&app.ok(friend.token(), fq, json!({})).await["momentFeed"]).len(),
        6
    );
    assert_eq!(
        ids(&app.ok(stranger.token(), fq, json!({})).await["momentFeed"]).len(),
        0
    );
    assert_eq!(
        ids(&app.ok(u.token(), fq, json!({})).await["momentFeed"]).len(),
        6
    );
    for bad in [
        "{ momentFeed(scope: NOBODY) { nodes { id } } }",
        "{ momentFeed(first: \"x\") { nodes { id } } }",
    ] {
        assert_eq!(app.err(u.token(), bad, json!({})).await, "BAD_USER_INPUT");
    }
    // User.moments and Location.moments reject bad arguments too.
    let uq = "query($u: ID!, $n: Int, $j: Boolean) { user(id: $u) { moments(first: $n, journaled: $j) { nodes { id } } } }";
    assert_eq!(
        app.err(None, uq, json!({ "u": u.id, "n": -2 })).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.err(None, uq, json!({ "u": u.id, "j": "yes" })).await,
        "BAD_USER_INPUT"
    );
    let uq_after =
        "query($u: ID!, $a: String) { user(id: $u) { moments(after: $a) { nodes { id } } } }";
    assert_eq!(
        app.err(None, uq_after, json!({ "u": u.id, "a": "forged" }))
            .await,
        "BAD_USER_INPUT"
    );
    let place = app
        .post_moment(&u, json!({ "placeName": "Here", "visibility": "PUBLIC" }))
        .await;
    let lq = "query($l: ID!, $n: Int, $a: String) { location(id: $l) { moments(first: $n, after: $a) { nodes { id } } } }";
    let l = &place["location"]["id"];
    assert_eq!(
        app.err(None, lq, json!({ "l": l, "n": -1 })).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.err(None, lq, json!({ "l": l, "a": "forged" })).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        app.err(None, lq, json!({ "l": l, "a": other_cursor }))
            .await,
        "BAD_USER_INPUT"
    );
    // Ids that name nothing read as null; a missing id is refused.
    let one =
        "query($id: ID!) { moment(id: $id) { id } location(id: $id) { id } node(id: $id) { id } }";
    for id in ["abc", "0", "-3", "99999999"] {
        let data = app.ok(None, one, json!({ "id": id })).await;
        assert_eq!(
            data,
            json!({ "moment": null, "location": null, "node": null })
        );
    }
    assert_eq!(app.err(None, one, json!({})).await, "BAD_USER_INPUT");
}

async fn expired_moments_vanish_without_a_job(app: &TestApp) {
    let u = app.sign_up("fleeting").await;
    let m = app
        .post_moment(&u, json!({ "durationHours": 1, "visibility": "PUBLIC" }))
        .await;
    let id = m["id"].clone();
    let one = "query($id: ID!) { moment(id: $id) { id } node(id: $id) { id } }";
    assert_eq!(
        app.ok(None, one, json!({ "id": id })).await["moment"]["id"],
        id
    );
    app.clock.advance(HOUR);
    let data = app.ok(u.token(), one, json!({ "id": id })).await;
    assert_eq!(data["moment"], Value::Null);
    assert_eq!(data["node"], Value::Null);
    let feed = app
        .ok(u.token(), "{ momentFeed { nodes { id } } }", json!({}))
        .await;
    assert_eq!(ids(&feed["momentFeed"]).len(), 0);
    // The row is still there: no job ran.
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM moments WHERE deleted_at IS NULL")
            .await,
        1
    );
}

async fn delete_and_restore(app: &TestApp) {
    let u = app.sign_up("regretful").await;
    let fan = app.sign_up("fan").await;
    let m = app
        .post_moment(&u, json!({ "visibility": "PUBLIC", "durationHours": 0 }))
        .await;
    let id = m["id"].clone();
    let like = "mutation($id: ID!) { setMomentLike(momentId: $id, liked: true) { likesCount } }";
    app.ok(fan.token(), like, json!({ "id": id })).await;
    let del = "mutation($id: ID!) { deleteMoment(id: $id) }";
    assert_eq!(
        app.ok(u.token(), del, json!({ "id": id })).await["deleteMoment"],
        id
    );
    // Gone at once, for everyone, the author included.
    let one = "query($id: ID!) { moment(id: $id) { id likesCount } }";
    assert_eq!(
        app.ok(u.token(), one, json!({ "id": id })).await["moment"],
        Value::Null
    );
    assert_eq!(
        app.ok(fan.token(), one, json!({ "id": id })).await["moment"],
        Value::Null
    );
    // Deleting again: it is not there.
    assert_eq!(
        app.err(u.token(), del, json!({ "id": id })).await,
        "NOT_FOUND"
    );
    // Restored within the grace, likes intact.
    app.clock.advance(HOUR * 24 * 6);
    let restore = &format!("mutation($id: ID!) {{ restoreMoment(id: $id) {{ {MOMENT_FIELDS} }} }}");
    let back = app.ok(u.token(), restore, json!({ "id": id })).await;
    assert_eq!(back["restoreMoment"]["id"], id);
    assert_eq!(back["restoreMoment"]["likesCount"], 1);
    assert_eq!(
        app.ok(fan.token(), one, json!({ "id": id })).await["moment"]["likesCount"],
        1
    );
    // Restoring a live moment returns it as it is.
    let again = app.ok(u.token(), restore, json!({ "id": id })).await;
    assert_eq!(again["restoreMoment"]["id"], id);
    // Past the grace it cannot come back, even before the purge ran.
    app.ok(u.token(), del, json!({ "id": id })).await;
    app.clock.advance(HOUR * 24 * 7);
    assert_eq!(
        app.err(u.token(), restore, json!({ "id": id })).await,
        "NOT_FOUND"
    );
    // An ephemeral moment that expired after its deletion cannot come back.
    let short = app.post_moment(&u, json!({ "durationHours": 1 })).await;
    app.ok(u.token(), del, json!({ "id": short["id"] })).await;
    app.clock.advance(HOUR * 2);
    assert_eq!(
        app.err(u.token(), restore, json!({ "id": short["id"] }))
            .await,
        "BAD_USER_INPUT"
    );
}

async fn delete_and_restore_rejections(app: &TestApp) {
    let author = app.sign_up("owner").await;
    let friend = app.sign_up("friend").await;
    let stranger = app.sign_up("stranger").await;
    app.befriend(&author, &friend).await;
    let public = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .clone();
    let private = app.post_moment(&author, json!({})).await["id"].clone();
    let del = "mutation($id: ID!) { deleteMoment(id: $id) }";
    let restore = "mutation($id: ID!) { restoreMoment(id: $id) { id } }";
    let cases: Vec<(&TestUser, &Value, &str)> = vec![
        (&friend, &public, "FORBIDDEN"),
        (&stranger, &public, "FORBIDDEN"),
        (&friend, &private, "FORBIDDEN"),
        // A stranger cannot see it: it does not exist for them.
        (&stranger, &private, "NOT_FOUND"),
    ];
    for (who, id, code) in cases {
        assert_eq!(app.err(who.token(), del, json!({ "id": id })).await, code);
    }
    for id in [json!("0"), json!("-5"), json!("abc"), json!("123456789")] {
        assert_eq!(
            app.err(author.token(), del, json!({ "id": id })).await,
            "NOT_FOUND"
        );
        assert_eq!(
            app.err(author.token(), restore, json!({ "id": id })).await,
            "NOT_FOUND"
        );
    }
    assert_eq!(
        app.err(None, del, json!({ "id": public })).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(None, restore, json!({ "id": public })).await,
        "UNAUTHENTICATED"
    );
    // Someone else's deleted moment: not theirs to restore, and it does not exist for them.
    app.ok(author.token(), del, json!({ "id": public })).await;
    let resp = app
        .gql(friend.token(), restore, json!({ "id": public }))
        .await;
    assert_eq!(error_code(&resp), "NOT_FOUND");
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM moments WHERE deleted_at IS NULL")
            .await,
        1,
        "nothing but the author's own delete changed a row"
    );
}

async fn moment_pages_run_a_constant_number_of_statements(app: &TestApp) {
    use crate::statuses::assert_constant;
    let viewer = app.sign_up("counter").await;
    // Ten authors (two of them the viewer's friends), each with a location
    // and five moments there, plus fifty standalone moments.
    let mut locations = Vec::new();
    let mut first_author = None;
    for i in 0..10 {
        let author = app.sign_up(&format!("author{i}")).await;
        if i < 2 {
            app.befriend(&viewer, &author).await;
        }
        let lat = 48.80 + f64::from(i) * 0.01;
        let m = app
            .post_moment(&author, json!({ "latitude": lat, "visibility": "PUBLIC", "placeName": format!("Spot {i}") }))
            .await;
        let loc: i64 = raw(m["location"]["id"].as_str().unwrap());
        locations.push(loc);
        let seed = Seed {
            latitude: lat,
            location: Some(loc),
            ..Seed::default()
        };
        app.seed_moments(&author, 5, seed).await;
        app.seed_moments(
            &author,
            5,
            Seed {
                latitude: lat + 0.001,
                ..Seed::default()
            },
        )
        .await;
        first_author.get_or_insert(author);
    }
    let heavy = app.sign_up("heavy").await;
    app.seed_moments(
        &heavy,
        50,
        Seed {
            journaled: true,
            location: Some(locations[0]),
            ..Seed::default()
        },
    )
    .await;
    let fields = "id caption isJournaled expiresAt likesCount viewerHasLiked author { username friendship } media { url width } location { name momentCount }";
    let feed = format!(
        "query($n: Int) {{ momentFeed(first: $n) {{ nodes {{ {fields} }} edges {{ cursor node {{ id }} }} }} }}"
    );
    let user = format!(
        "query($u: ID!, $n: Int) {{ user(id: $u) {{ moments(first: $n, journaled: true) {{ nodes {{ {fields} }} }} }} }}"
    );
    let place = format!(
        "query($l: ID!, $n: Int) {{ location(id: $l) {{ momentCount moments(first: $n) {{ nodes {{ {fields} }} }} }} }}"
    );
    let map = format!(
        "query($n: Int) {{ mapMarkers(bbox: {{ south: 48, west: 2, north: 49.5, east: 3 }}, limit: $n) {{ truncated markers {{ ... on MomentPin {{ latitude moment {{ {fields} }} }} ... on LocationPin {{ badgeCount location {{ id name momentCount }} }} }} }} }}"
    );
    for token in [viewer.token(), None] {
        assert_constant(app, token, &feed, json!({}), "/momentFeed/nodes").await;
        assert_constant(
            app,
            token,
            &user,
            json!({ "u": heavy.id }),
            "/user/moments/nodes",
        )
        .await;
        assert_constant(
            app,
            token,
            &place,
            json!({ "l": gid(IdKind::Location, locations[0]) }),
            "/location/moments/nodes",
        )
        .await;
    }
    // The newest marker is a standalone moment, so a page of 1 holds a
    // MomentPin like the page of 50 does.
    app.clock.advance(std::time::Duration::from_secs(1));
    let newest = app
        .post_moment(&heavy, json!({ "latitude": 48.9, "visibility": "PUBLIC" }))
        .await;
    for token in [viewer.token(), None] {
        assert_constant(app, token, &map, json!({}), "/mapMarkers/markers").await;
        let one = app.ok(token, &map, json!({ "n": 1 })).await;
        assert_eq!(
            one["mapMarkers"]["markers"][0]["moment"]["id"],
            newest["id"]
        );
    }
    // The author's own view of a page.
    let own = first_author.unwrap();
    let mine = format!(
        "query($u: ID!, $n: Int) {{ user(id: $u) {{ moments(first: $n) {{ nodes {{ {fields} }} }} }} }}"
    );
    let data = app
        .ok(own.token(), &mine, json!({ "u": own.id, "n": 50 }))
        .await;
    assert_eq!(
        data["user"]["moments"]["nodes"].as_array().unwrap().len(),
        11
    );
}

/// A media taken by a moment and a status at the same instant goes to exactly one.
async fn one_media_one_holder_under_concurrency(app: &TestApp) {
    let u = app.sign_up("racer").await;
    for _ in 0..3 {
        let media = app.upload_id(&u).await;
        let moment = app.gql(
            u.token(),
            CREATE,
            json!({ "i": { "mediaId": media, "latitude": 0, "longitude": 0 } }),
        );
        let moment2 = app.gql(
            u.token(),
            CREATE,
            json!({ "i": { "mediaId": media, "latitude": 1, "longitude": 1, "placeName": "Race" } }),
        );
        let status = app.gql(
            u.token(),
            "mutation($m: ID!) { createStatus(input: { mediaId: $m }) { id } }",
            json!({ "m": media }),
        );
        let (a, b, c) = tokio::join!(moment, moment2, status);
        let ok = [&a, &b, &c]
            .iter()
            .filter(|r| r.get("errors").is_none())
            .count();
        assert_eq!(ok, 1, "{a} {b} {c}");
        for r in [&a, &b, &c] {
            if r.get("errors").is_some() {
                assert_eq!(error_code(r), "BAD_USER_INPUT", "{r}");
            }
        }
    }
    let holders = app.count("SELECT COUNT(*) AS n FROM moments").await
        + app.count("SELECT COUNT(*) AS n FROM statuses").await;
    assert_eq!(holders, 3);
}
