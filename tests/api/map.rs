//! Locations and the map: place-name resolution within 50 m (and under
//! concurrency), attaching by id, pins and badges, boxes across the
//! antimeridian, and every rejection of the map's arguments.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{IdKind, Seed, TestApp, gid, raw};
use ephemera::jobs::moment_expiry;

both_backends!(
    place_names_resolve_within_fifty_metres,
    concurrent_creates_of_a_new_place_make_one_location,
    moments_attach_to_a_location_by_id,
    map_pins_and_badges,
    boxes_across_the_antimeridian,
    map_argument_rejections,
    marker_limits_and_truncation,
    map_queries_walk_the_cell_indexes,
    public_counters_follow_every_write,
);

/// Metres north of a latitude, in degrees.
fn north(lat: f64, metres: f64) -> f64 {
    lat + metres / 111_195.0
}

fn bbox(s: f64, w: f64, n: f64, e: f64) -> Value {
    json!({ "south": s, "west": w, "north": n, "east": e })
}

const MAP: &str = "query($b: BoundingBoxInput!, $l: Int) { mapMarkers(bbox: $b, limit: $l) { truncated markers { __typename ... on MomentPin { latitude longitude moment { id } } ... on LocationPin { latitude longitude badgeCount location { id name } } } } }";

async fn place_names_resolve_within_fifty_metres(app: &TestApp) {
    let u = app.sign_up("mapper").await;
    let (lat, lon) = (48.8540, 2.3325);
    let at = |la: f64, name: &str| json!({ "latitude": la, "longitude": lon, "placeName": name, "visibility": "PUBLIC" });
    let a = app.post_moment(&u, at(lat, "Café de Flore")).await;
    let loc_a = a["location"]["id"].clone();
    assert_eq!(a["location"]["name"], "Café de Flore");
    // Case and whitespace runs do not matter within 50 m.
    let same = app
        .post_moment(&u, at(north(lat, 20.0), "  café   DE flore "))
        .await;
    assert_eq!(same["location"]["id"], loc_a);
    assert_eq!(same["location"]["name"], "Café de Flore");
    // 70 m away is another place of the same name.
    let far = app
        .post_moment(&u, at(north(lat, 70.0), "Café de Flore"))
        .await;
    let loc_b = far["location"]["id"].clone();
    assert_ne!(loc_b, loc_a);
    // Another name at the same spot is another place.
    let other = app.post_moment(&u, at(lat, "Les Deux Magots")).await;
    assert_ne!(other["location"]["id"], loc_a);
    // Within 50 m of both: the nearest wins (40 m from A, 30 m from B).
    let between = app
        .post_moment(&u, at(north(lat, 40.0), "cafe de flore"))
        .await;
    assert_ne!(
        between["location"]["id"], loc_a,
        "accents count: another name"
    );
    let between = app
        .post_moment(&u, at(north(lat, 40.0), "CAFÉ DE FLORE"))
        .await;
    assert_eq!(between["location"]["id"], loc_b);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM locations").await, 4);
    // The moment keeps its own coordinates; the location keeps the first.
    assert_eq!(same["latitude"].as_f64().unwrap(), north(lat, 20.0));
    let q = "query($id: ID!) { location(id: $id) { name latitude longitude momentCount moments { nodes { id } } } }";
    let loc = app.ok(None, q, json!({ "id": loc_a })).await;
    assert_eq!(loc["location"]["latitude"], lat);
    assert_eq!(loc["location"]["momentCount"], 2);
    assert_eq!(
        loc["location"]["moments"]["nodes"],
        json!([{ "id": same["id"] }, { "id": a["id"] }])
    );
}

async fn concurrent_creates_of_a_new_place_make_one_location(app: &TestApp) {
    let mut jobs = Vec::new();
    for i in 0..8 {
        let u = app.sign_up(&format!("rush{i}")).await;
        let media = app.upload_id(&u).await;
        jobs.push((u, media, i));
    }
    let creates = jobs.iter().map(|(u, media, i)| {
        let input = json!({
            "mediaId": media,
            "latitude": north(40.7580, f64::from(*i) * 3.0),
            "longitude": -73.9855,
            "placeName": if i % 2 == 0 { "Times Square" } else { "times  square" },
            // Public, so that each author may see the others' place.
            "visibility": "PUBLIC",
        });
        app.gql(
            u.token(),
            "mutation($i: CreateMomentInput!) { createMoment(input: $i) { location { id } } }",
            json!({ "i": input }),
        )
    });
    let results = futures_util::future::join_all(creates).await;
    let mut locations: Vec<String> = results
        .iter()
        .map(|r| {
            assert!(r.get("errors").is_none(), "{r}");
            r["data"]["createMoment"]["location"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    locations.dedup();
    assert_eq!(locations.len(), 1, "one location for one place");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM locations").await, 1);
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM moments WHERE location_id IS NOT NULL")
            .await,
        8
    );
}

async fn moments_attach_to_a_location_by_id(app: &TestApp) {
    let u = app.sign_up("attacher").await;
    let first = app
        .post_moment(&u, json!({ "placeName": "Ueno Park", "latitude": 35.7156, "longitude": 139.7745, "visibility": "PUBLIC" }))
        .await;
    let loc = first["location"]["id"].clone();
    let second = app
        .post_moment(&u, json!({ "locationId": loc, "visibility": "PUBLIC" }))
        .await;
    assert_eq!(second["location"]["id"], loc);
    assert_eq!(second["location"]["momentCount"], 2);
    // With no live moment left there, nobody sees the location.
    for m in [&first, &second] {
        app.ok(
            u.token(),
            "mutation($id: ID!) { deleteMoment(id: $id) }",
            json!({ "id": m["id"] }),
        )
        .await;
    }
    let q = "query($id: ID!) { location(id: $id) { name momentCount } }";
    for who in [None, u.token()] {
        let data = app.ok(who, q, json!({ "id": loc })).await;
        assert!(data["location"].is_null(), "{data}");
    }
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM locations").await, 1);
    // Unknown and malformed ids read as null.
    for id in ["123", "nope", "-1"] {
        assert_eq!(
            app.ok(None, q, json!({ "id": id })).await["location"],
            Value::Null
        );
    }
}

async fn map_pins_and_badges(app: &TestApp) {
    let u = app.sign_up("pinner").await;
    let standalone = app
        .post_moment(
            &u,
            json!({ "latitude": 51.5007, "longitude": -0.1246, "visibility": "PUBLIC" }),
        )
        .await;
    // Later, so that the location's newest moment is the newest activity.
    app.clock.advance(std::time::Duration::from_secs(1));
    let located = app
        .post_moment(&u, json!({ "latitude": 51.5014, "longitude": -0.1419, "placeName": "Buckingham Palace", "visibility": "PUBLIC" }))
        .await;
    app.post_moment(&u, json!({ "latitude": 51.5015, "longitude": -0.1418, "placeName": "buckingham palace", "visibility": "PUBLIC" }))
        .await;
    // Outside the box.
    app.post_moment(
        &u,
        json!({ "latitude": 48.8584, "longitude": 2.2945, "visibility": "PUBLIC" }),
    )
    .await;
    let london = bbox(51.28, -0.51, 51.69, 0.33);
    let data = app.ok(None, MAP, json!({ "b": london })).await;
    let set = &data["mapMarkers"];
    assert_eq!(set["truncated"], false);
    let markers = set["markers"].as_array().unwrap();
    assert_eq!(markers.len(), 2, "{set}");
    // Newest activity first: the location (its newest moment is the newest).
    assert_eq!(markers[0]["__typename"], "LocationPin");
    assert_eq!(markers[0]["badgeCount"], 2);
    assert_eq!(markers[0]["location"]["id"], located["location"]["id"]);
    assert_eq!(markers[0]["latitude"], 51.5014);
    assert_eq!(markers[1]["__typename"], "MomentPin");
    assert_eq!(markers[1]["moment"]["id"], standalone["id"]);
    assert_eq!(markers[1]["latitude"], 51.5007);
    assert_eq!(markers[1]["longitude"], -0.1246);
    // An attached moment is never pinned on its own.
    assert!(markers.iter().all(|m| m["moment"]["id"] != located["id"]));
    // The box edges are inclusive.
    let tight = bbox(51.5007, -0.1246, 51.5007, -0.1246);
    let data = app.ok(None, MAP, json!({ "b": tight })).await;
    assert_eq!(data["mapMarkers"]["markers"].as_array().unwrap().len(), 1);
}

async fn boxes_across_the_antimeridian(app: &TestApp) {
    let u = app.sign_up("pacific").await;
    let east = app
        .post_moment(
            &u,
            json!({ "latitude": -17.7, "longitude": 179.95, "visibility": "PUBLIC" }),
        )
        .await;
    let west = app
        .post_moment(
            &u,
            json!({ "latitude": -17.6, "longitude": -179.95, "visibility": "PUBLIC" }),
        )
        .await;
    let edge = app
        .post_moment(&u, json!({ "latitude": -17.5, "longitude": 180.0, "visibility": "PUBLIC", "placeName": "Dateline" }))
        .await;
    app.post_moment(
        &u,
        json!({ "latitude": -17.7, "longitude": 0.0, "visibility": "PUBLIC" }),
    )
    .await;
    let fiji = bbox(-19.0, 177.0, -16.0, -178.0);
    let data = app.ok(None, MAP, json!({ "b": fiji })).await;
    let markers = data["mapMarkers"]["markers"].as_array().unwrap();
    let pins: Vec<&Value> = markers.iter().map(|m| &m["moment"]["id"]).collect();
    assert_eq!(markers.len(), 3, "{markers:?}");
    assert!(pins.contains(&&east["id"]) && pins.contains(&&west["id"]));
    assert!(
        markers
            .iter()
            .any(|m| m["location"]["id"] == edge["location"]["id"])
    );
    // The same span the other way round (west < east) is the rest of the world.
    let rest = bbox(-19.0, -178.0, -16.0, 177.0);
    let data = app.ok(None, MAP, json!({ "b": rest })).await;
    assert_eq!(data["mapMarkers"]["markers"].as_array().unwrap().len(), 1);
}

async fn map_argument_rejections(app: &TestApp) {
    let bad = [
        bbox(10.0, 0.0, 5.0, 1.0),                    // south above north
        bbox(-91.0, 0.0, 5.0, 1.0),                   // latitude out of range
        bbox(0.0, 0.0, 90.5, 1.0),                    // latitude out of range
        bbox(0.0, -180.5, 5.0, 1.0),                  // longitude out of range
        bbox(0.0, 0.0, 5.0, 181.0),                   // longitude out of range
        json!({ "south": 0, "west": 0, "north": 1 }), // a missing edge
        json!({ "south": "a", "west": 0, "north": 1, "east": 1 }),
        Value::Null,
    ];
    for b in bad {
        assert_eq!(
            app.err(None, MAP, json!({ "b": b })).await,
            "BAD_USER_INPUT",
            "{b}"
        );
    }
    let ok = bbox(0.0, 0.0, 1.0, 1.0);
    for limit in [json!(-1), json!("ten"), json!(1.5)] {
        assert_eq!(
            app.err(None, MAP, json!({ "b": ok, "l": limit })).await,
            "BAD_USER_INPUT"
        );
    }
}

async fn marker_limits_and_truncation(app: &TestApp) {
    let u = app.sign_up("crowd").await;
    let ids = app.seed_moments(&u, 1001, Seed::default()).await;
    let city = bbox(48.80, 2.25, 48.95, 2.45);
    let count = |data: &Value| data["mapMarkers"]["markers"].as_array().unwrap().len();
    // Above 1,000 is clamped to 1,000.
    let data = app.ok(None, MAP, json!({ "b": city, "l": 5000 })).await;
    assert_eq!(count(&data), 1000);
    assert_eq!(data["mapMarkers"]["truncated"], true);
    // The default is 500; newest first.
    let data = app.ok(None, MAP, json!({ "b": city })).await;
    assert_eq!(count(&data), 500);
    assert_eq!(
        data["mapMarkers"]["markers"][0]["moment"]["id"],
        gid(IdKind::Moment, *ids.last().unwrap())
    );
    // Zero: nothing, but it says something was left out.
    let data = app.ok(None, MAP, json!({ "b": city, "l": 0 })).await;
    assert_eq!(count(&data), 0);
    assert_eq!(data["mapMarkers"]["truncated"], true);
    // Exactly what is there: not truncated.
    let few = bbox(48.8566, 2.3522, 48.8566 + 2.5e-5, 2.3522);
    let data = app.ok(None, MAP, json!({ "b": few, "l": 3 })).await;
    assert_eq!(count(&data), 3);
    assert_eq!(data["mapMarkers"]["truncated"], false);
    let data = app.ok(None, MAP, json!({ "b": few, "l": 2 })).await;
    assert_eq!(count(&data), 2);
    assert_eq!(data["mapMarkers"]["truncated"], true);
}

/// With 20,000 moments and 2,000 locations spread over the world (and the
/// planner's statistics gathered), both map queries walk the grid-cell
/// indexes for a city-sized box instead of scanning the tables.
async fn map_queries_walk_the_cell_indexes(app: &TestApp) {
    use ephemera::db::{Dialect, Sql, insert};
    use ephemera::entity::{location, media, moment};
    use sea_orm::ConnectionTrait;
    let u = app.sign_up("planner").await;
    let db = &app.state.db;
    let dialect = Dialect::of(db);
    let series = |n: u32| {
        format!("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n})")
    };
    // Integer arithmetic only, so both databases place every row alike.
    let spread =
        "(CAST(x AS BIGINT) * 7919) % 170000 AS la, (CAST(x AS BIGINT) * 104729) % 360000 AS lo";
    let place = "la / 1000.0 - 85, lo / 1000.0 - 180, ((la + 5000) / 100) * 3600 + lo / 100";
    let author = raw(&u.id);
    let rows = [
        insert::select_into::<media::Entity>(Sql::new(&format!(
            "{} SELECT 1000000 + x, {author}, 'plan/' || x, 'image/gif', 1, NULL, NULL, 0, 0, 0, NULL, NULL \
             FROM g",
            series(20_000)
        ))),
        insert::select_into::<location::Entity>(Sql::new(&format!(
            "{} SELECT 3000000 + x, 'p' || x, 'p' || x, {place}, 0, 0 FROM (SELECT x, {spread} FROM g) s",
            series(2_000)
        ))),
        insert::select_into::<moment::Entity>(Sql::new(&format!(
            "{} SELECT 2000000 + x, {author}, 1000000 + x, NULL, {place}, \
               CASE WHEN x % 2 = 0 THEN 3000001 + x % 2000 END, 'PUBLIC', FALSE, 24, {far}, x, NULL, 0 \
             FROM (SELECT x, {spread} FROM g) s",
            series(20_000),
            far = i64::MAX / 2,
        ))),
    ];
    crate::support::seed_sql(db, rows.into()).await;
    let paris = ephemera::domain::geo::BoundingBox {
        south: 48.75,
        west: 2.2,
        north: 48.95,
        east: 2.5,
    };
    let standalone =
        ephemera::domain::map::standalone_query(dialect, None, &paris, 501, app.clock.now());
    let located = ephemera::domain::map::locations_query(dialect, &paris);
    for (sql, index) in [(standalone, "moments_map"), (located, "locations_map")] {
        let (explain, column) = dialect.explain();
        let explained = Sql::new(explain).push(" ").append(sql);
        let rows = db
            .query_all_raw(explained.build(dialect))
            .await
            .expect("explain");
        let plan: Vec<String> = rows
            .iter()
            .map(|r| r.try_get::<String>("", column).expect("plan text"))
            .collect();
        let plan = plan.join("\n");
        assert!(plan.contains(index), "{index} not used:\n{plan}");
        assert!(
            !plan.contains("Seq Scan on moments") && !plan.contains("SCAN m\n"),
            "{plan}"
        );
        if index == "moments_map" && dialect == Dialect::Sqlite {
            // A city box merges its cells newest first and stops early.
            // (PostgreSQL chooses between `Merge Append` and sorting the
            // few rows by cost; on this little data it sorts.)
            assert!(
                plan.contains("MERGE (UNION ALL)"),
                "cells not merged:\n{plan}"
            );
        }
    }
    // And the answer is right: everything in the box, nothing outside.
    let data = app
        .ok(None, MAP, json!({ "b": bbox(48.75, 2.2, 48.95, 2.5) }))
        .await;
    for m in data["mapMarkers"]["markers"].as_array().unwrap() {
        let (lat, lon) = (
            m["latitude"].as_f64().unwrap(),
            m["longitude"].as_f64().unwrap(),
        );
        assert!(
            (48.75..=48.95).contains(&lat) && (2.2..=2.5).contains(&lon),
            "{m}"
        );
    }
}

/// The PUBLIC counter behind badges, through every write: create, delete,
/// restore, expiry before and after the job, account deletion. Each step
/// checks the badge, `momentCount`, and the counter against a recount.
async fn public_counters_follow_every_write(app: &TestApp) {
    let a = app.sign_up("counter_a").await;
    let b = app.sign_up("counter_b").await;
    let place = |hours: i64, vis: &str| json!({ "latitude": 48.85, "longitude": 2.35, "placeName": "Counted", "visibility": vis, "durationHours": hours });
    let first = app.post_moment(&a, place(24, "PUBLIC")).await;
    let loc = first["location"]["id"].as_str().unwrap().to_owned();
    let short = app.post_moment(&a, place(1, "PUBLIC")).await;
    let _diary = app.post_moment(&b, place(0, "PUBLIC")).await;
    let _hidden = app.post_moment(&b, place(24, "FRIENDS_ONLY")).await;
    let check = |want: i64| {
        let loc = loc.clone();
        async move {
            let data = app
                .ok(None, MAP, json!({ "b": bbox(48.8, 2.3, 48.9, 2.4) }))
                .await;
            let badge = data["mapMarkers"]["markers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["location"]["id"] == loc.as_str())
                .map_or(0, |m| m["badgeCount"].as_i64().unwrap());
            assert_eq!(badge, want, "badge");
            let count = app
                .ok(
                    None,
                    "query($id: ID!) { location(id: $id) { momentCount } }",
                    json!({ "id": loc }),
                )
                .await;
            assert_eq!(count["location"]["momentCount"], want, "momentCount");
            let drift = app
                .count(
                    "SELECT COUNT(*) AS n FROM locations l WHERE l.public_moments <> \
                     (SELECT COUNT(*) FROM moments m WHERE m.location_id = l.id \
                      AND m.visibility = 'PUBLIC' AND m.deleted_at IS NULL)",
                )
                .await;
            assert_eq!(drift, 0, "counter = recount");
        }
    };
    check(3).await;
    let delete = "mutation($id: ID!) { deleteMoment(id: $id) }";
    let restore = "mutation($id: ID!) { restoreMoment(id: $id) { id } }";
    app.ok(a.token(), delete, json!({ "id": first["id"] }))
        .await;
    check(2).await;
    // A rejected delete changes nothing.
    let refused = app
        .gql(b.token(), delete, json!({ "id": short["id"] }))
        .await;
    assert_eq!(refused["errors"][0]["extensions"]["code"], "FORBIDDEN");
    check(2).await;
    app.ok(a.token(), restore, json!({ "id": first["id"] }))
        .await;
    check(3).await;
    // Restoring a live one again counts nothing twice.
    app.ok(a.token(), restore, json!({ "id": first["id"] }))
        .await;
    check(3).await;
    // Expired: gone from the badge at once, before the job runs ...
    app.clock.advance(std::time::Duration::from_secs(2 * 3600));
    let data = app
        .ok(None, MAP, json!({ "b": bbox(48.8, 2.3, 48.9, 2.4) }))
        .await;
    let badge = data["mapMarkers"]["markers"][0]["badgeCount"].clone();
    assert_eq!(badge, 2);
    // ... and after it (the counter then drops too).
    let r = moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(r.rows, 1);
    check(2).await;
    // A deleted account takes its moments off.
    app.ok(
        b.token(),
        "mutation { deleteAccount(password: \"password123\") }",
        json!({}),
    )
    .await;
    check(1).await;
}
