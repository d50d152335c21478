//! The visibility matrix: every path that reads, counts or likes a moment ×
//! {author, friend, stranger, anonymous} × {PUBLIC, FRIENDS_ONLY} × {live,
//! expired, soft-deleted, journaled}. A moment is seen exactly when it is live
//! (or journaled) and PUBLIC or the viewer is its author or an accepted friend.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{HOUR, TestApp, TestUser, error_code};

both_backends!(
    every_path_agrees_on_who_sees_what,
    badges_count_only_what_the_viewer_sees
);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Live,
    Expired,
    Deleted,
    Journaled,
}

#[derive(Debug)]
struct Case {
    visibility: &'static str,
    state: State,
    standalone: String,
    located: String,
    location: String,
}

const WORLD: &str = "{ south: -90, west: -180, north: 90, east: 180 }";

fn set(values: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    values.into_iter().collect()
}

fn node_ids(conn: &Value) -> BTreeSet<String> {
    set(conn["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("a connection: {conn}"))
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned()))
}

async fn every_path_agrees_on_who_sees_what(app: &TestApp) {
    let author = app.sign_up("author").await;
    let friend = app.sign_up("friend").await;
    let stranger = app.sign_up("stranger").await;
    app.befriend(&author, &friend).await;

    let mut cases = Vec::new();
    let mut n = 0.0;
    // Expired ones first, then time moves on past their hour.
    for state in [
        State::Expired,
        State::Live,
        State::Deleted,
        State::Journaled,
    ] {
        if state == State::Live {
            app.clock.advance(HOUR * 2);
        }
        for visibility in ["PUBLIC", "FRIENDS_ONLY"] {
            n += 1.0;
            let hours = match state {
                State::Expired => 1,
                State::Journaled => 0,
                _ => 24,
            };
            let base = json!({ "visibility": visibility, "durationHours": hours });
            let mut standalone = base.clone();
            standalone["latitude"] = json!(10.0 + n);
            let mut located = base.clone();
            located["latitude"] = json!(-10.0 - n);
            located["placeName"] = json!(format!("Place {n}"));
            let s = app.post_moment(&author, standalone).await;
            let l = app.post_moment(&author, located).await;
            if state == State::Deleted {
                for m in [&s, &l] {
                    app.ok(
                        author.token(),
                        "mutation($id: ID!) { deleteMoment(id: $id) }",
                        json!({ "id": m["id"] }),
                    )
                    .await;
                }
            }
            cases.push(Case {
                visibility,
                state,
                standalone: s["id"].as_str().unwrap().to_owned(),
                located: l["id"].as_str().unwrap().to_owned(),
                location: l["location"]["id"].as_str().unwrap().to_owned(),
            });
        }
    }

    check_all(app, &author, &friend, &stranger, &cases).await;
    // The jobs change nothing anyone sees: expiry soft-deletes what was
    // already invisible.
    let expired = ephemera::jobs::moment_expiry::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(expired.rows, 4);
    check_all(app, &author, &friend, &stranger, &cases).await;
}

async fn check_all(
    app: &TestApp,
    author: &TestUser,
    friend: &TestUser,
    stranger: &TestUser,
    cases: &[Case],
) {
    let viewers: [(&str, Option<&TestUser>); 4] = [
        ("author", Some(author)),
        ("friend", Some(friend)),
        ("stranger", Some(stranger)),
        ("anonymous", None),
    ];
    for (who, viewer) in viewers {
        let token = viewer.map(|v| v.token.as_str());
        let close = who == "author" || who == "friend";
        let sees = |c: &Case| {
            matches!(c.state, State::Live | State::Journaled) && (c.visibility == "PUBLIC" || close)
        };
        let expect_all = set(cases
            .iter()
            .filter(|c| sees(c))
            .flat_map(|c| [c.standalone.clone(), c.located.clone()]));
        let ctx = |path: &str| format!("{who} via {path}");

        // Pages.
        let feed = app
            .ok(
                token,
                "{ momentFeed(first: 50) { nodes { id } } }",
                json!({}),
            )
            .await;
        assert_eq!(
            node_ids(&feed["momentFeed"]),
            expect_all,
            "{}",
            ctx("momentFeed")
        );
        let q = "query($u: ID!) { user(id: $u) { all: moments(first: 50) { nodes { id } } diary: moments(first: 50, journaled: true) { nodes { id } } } }";
        let user = app.ok(token, q, json!({ "u": author.id })).await;
        assert_eq!(
            node_ids(&user["user"]["all"]),
            expect_all,
            "{}",
            ctx("User.moments")
        );
        let diary = set(cases
            .iter()
            .filter(|c| sees(c) && c.state == State::Journaled)
            .flat_map(|c| [c.standalone.clone(), c.located.clone()]));
        assert_eq!(
            node_ids(&user["user"]["diary"]),
            diary,
            "{}",
            ctx("User.moments(journaled)")
        );

        // The map, over the whole world.
        let map = app
            .ok(
                token,
                &format!("{{ mapMarkers(bbox: {WORLD}) {{ truncated markers {{ __typename ... on MomentPin {{ moment {{ id }} }} ... on LocationPin {{ badgeCount location {{ id momentCount }} }} }} }} }}"),
                json!({}),
            )
            .await;
        let markers = map["mapMarkers"]["markers"].as_array().unwrap();
        let pins = set(markers
            .iter()
            .filter(|m| m["__typename"] == "MomentPin")
            .map(|m| m["moment"]["id"].as_str().unwrap().to_owned()));
        let locations = set(markers
            .iter()
            .filter(|m| m["__typename"] == "LocationPin")
            .map(|m| {
                assert_eq!(m["badgeCount"], 1, "{}", ctx("LocationPin.badgeCount"));
                assert_eq!(
                    m["location"]["momentCount"],
                    1,
                    "{}",
                    ctx("LocationPin.location.momentCount")
                );
                m["location"]["id"].as_str().unwrap().to_owned()
            }));
        assert_eq!(
            pins,
            set(cases
                .iter()
                .filter(|c| sees(c))
                .map(|c| c.standalone.clone())),
            "{}",
            ctx("mapMarkers MomentPin")
        );
        assert_eq!(
            locations,
            set(cases.iter().filter(|c| sees(c)).map(|c| c.location.clone())),
            "{}",
            ctx("mapMarkers LocationPin")
        );

        // Each moment and location by every single-object path.
        let all_ids: Vec<&String> = cases
            .iter()
            .flat_map(|c| [&c.standalone, &c.located])
            .collect();
        let nodes = app
            .ok(
                token,
                "query($ids: [ID!]!) { nodes(ids: $ids) { id } }",
                json!({ "ids": all_ids }),
            )
            .await;
        for (i, id) in all_ids.iter().enumerate() {
            let case = &cases[i / 2];
            let visible = sees(case);
            let q = "query($id: ID!) { moment(id: $id) { id likers { nodes { id } } } node(id: $id) { id ... on Moment { likesCount } } }";
            let one = app.ok(token, q, json!({ "id": id })).await;
            assert_eq!(
                !one["moment"].is_null(),
                visible,
                "{} {case:?}",
                ctx("moment")
            );
            assert_eq!(
                !one["node"].is_null(),
                visible,
                "{} {:?}",
                ctx("node"),
                case.state
            );
            assert_eq!(!nodes["nodes"][i].is_null(), visible, "{}", ctx("nodes"));
            if visible {
                assert_eq!(
                    !one["moment"]["likers"].is_null(),
                    who == "author",
                    "{}",
                    ctx("likers")
                );
            }
            // Likes: allowed exactly on what the viewer sees.
            let set_like = "mutation($id: ID!, $l: Boolean!) { setMomentLike(momentId: $id, liked: $l) { likesCount viewerHasLiked } }";
            let toggle = "mutation($id: ID!) { toggleMomentLike(momentId: $id) { likesCount viewerHasLiked } }";
            match viewer {
                None => {
                    assert_eq!(
                        app.err(None, toggle, json!({ "id": id })).await,
                        "UNAUTHENTICATED"
                    );
                    assert_eq!(
                        app.err(None, set_like, json!({ "id": id, "l": true }))
                            .await,
                        "UNAUTHENTICATED"
                    );
                }
                Some(v) if visible => {
                    let liked = app
                        .ok(v.token(), set_like, json!({ "id": id, "l": true }))
                        .await;
                    assert_eq!(liked["setMomentLike"]["viewerHasLiked"], true);
                    let unliked = app.ok(v.token(), toggle, json!({ "id": id })).await;
                    assert_eq!(unliked["toggleMomentLike"]["viewerHasLiked"], false);
                }
                Some(v) => {
                    let resp = app.gql(v.token(), toggle, json!({ "id": id })).await;
                    assert_eq!(
                        error_code(&resp),
                        "NOT_FOUND",
                        "{}",
                        ctx("toggleMomentLike")
                    );
                    let resp = app
                        .gql(v.token(), set_like, json!({ "id": id, "l": false }))
                        .await;
                    assert_eq!(error_code(&resp), "NOT_FOUND", "{}", ctx("setMomentLike"));
                }
            }
        }
        for case in cases {
            let q = "query($id: ID!) { location(id: $id) { momentCount moments { nodes { id } } } node(id: $id) { ... on Location { momentCount } } }";
            let loc = app.ok(token, q, json!({ "id": case.location })).await;
            // A location is seen only with a live moment the viewer may see
            // there (each case's location holds its one moment).
            if sees(case) {
                assert_eq!(
                    loc["location"]["momentCount"],
                    1,
                    "{}",
                    ctx("Location.momentCount")
                );
                assert_eq!(
                    loc["node"]["momentCount"],
                    1,
                    "{}",
                    ctx("node Location.momentCount")
                );
                assert_eq!(
                    node_ids(&loc["location"]["moments"]).len(),
                    1,
                    "{}",
                    ctx("Location.moments")
                );
            } else {
                assert!(loc["location"].is_null(), "{}", ctx("location"));
                assert!(loc["node"].is_null(), "{}", ctx("node Location"));
            }
        }
    }
    // No like was left behind by the like checks.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM moment_likes").await, 0);
    assert_eq!(
        app.count("SELECT COALESCE(SUM(likes_count), 0) AS n FROM moments")
            .await,
        0
    );
}

async fn badges_count_only_what_the_viewer_sees(app: &TestApp) {
    let author = app.sign_up("author").await;
    let friend = app.sign_up("friend").await;
    let stranger = app.sign_up("stranger").await;
    app.befriend(&author, &friend).await;
    let place = json!({ "placeName": "Shared Square" });
    let mut public = place.clone();
    public["visibility"] = json!("PUBLIC");
    let first = app.post_moment(&author, public).await;
    app.post_moment(&author, place.clone()).await;
    app.post_moment(&author, place).await;
    let q = format!(
        "{{ mapMarkers(bbox: {WORLD}) {{ markers {{ ... on LocationPin {{ badgeCount location {{ id momentCount }} }} }} }} }}"
    );
    for (token, badge) in [
        (author.token(), 3),
        (friend.token(), 3),
        (stranger.token(), 1),
        (None, 1),
    ] {
        let data = app.ok(token, &q, json!({})).await;
        let markers = data["mapMarkers"]["markers"].as_array().unwrap();
        assert_eq!(markers.len(), 1);
        assert_eq!(markers[0]["badgeCount"], badge);
        assert_eq!(markers[0]["location"]["momentCount"], badge);
        assert_eq!(markers[0]["location"]["id"], first["location"]["id"]);
    }
    // Once the friendship ends, the friend counts as a stranger.
    app.ok(
        friend.token(),
        "mutation($u: ID!) { removeFriend(userId: $u) }",
        json!({ "u": author.id }),
    )
    .await;
    let data = app.ok(friend.token(), &q, json!({})).await;
    assert_eq!(data["mapMarkers"]["markers"][0]["badgeCount"], 1);
}
