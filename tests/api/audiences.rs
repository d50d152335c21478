//! Who sees what: every read path × every relationship to an author × every
//! status audience and moment visibility, on both databases.
//!
//! The author posts a status for each audience (PUBLIC, FRIENDS,
//! CLOSE_FRIENDS) and a standalone and a located moment for each visibility.
//! Each viewer stands to the author as one of: self, friend, close friend,
//! a friend the author hides their stories from, stranger, anonymous, a
//! friend who blocked the author, a friend the author blocked, a friend who
//! muted the author, a moderator (a stranger with the role). What each may
//! see is written once here ([`sees_status`], [`sees_moment`]) and checked on
//! every path: the tray (both scopes, with its counts, unseen state and
//! order), per-author pages, `status`/`moment`/`node`/`nodes`, seen marks,
//! viewers and view counts, the moment feed, a user's moments, a location's
//! moments and count, map pins and badges, likes and likers, profiles,
//! friend requests and `statusCreated`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::ws::{Protocol, WsClient};
use crate::support::{TestApp, TestUser, connection_ids, error_code};

both_backends!(every_path_agrees_on_who_sees_what);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rel {
    Myself,
    Friend,
    CloseFriend,
    Hidden,
    Stranger,
    Anonymous,
    Blocker,
    Blocked,
    Muter,
    Moderator,
}

const RELS: [Rel; 10] = [
    Rel::Myself,
    Rel::Friend,
    Rel::CloseFriend,
    Rel::Hidden,
    Rel::Stranger,
    Rel::Anonymous,
    Rel::Blocker,
    Rel::Blocked,
    Rel::Muter,
    Rel::Moderator,
];

const AUDIENCES: [&str; 3] = ["PUBLIC", "FRIENDS", "CLOSE_FRIENDS"];
const VISIBILITIES: [&str; 2] = ["PUBLIC", "FRIENDS_ONLY"];

/// Whether a viewer standing as `rel` sees a status for `audience`, in a
/// list that gathers many authors (`list`) or read directly.
fn sees_status(rel: Rel, audience: &str, list: bool) -> bool {
    match rel {
        Rel::Myself | Rel::CloseFriend => true,
        Rel::Blocker | Rel::Blocked | Rel::Hidden => false,
        Rel::Muter if list => false,
        Rel::Friend | Rel::Muter => audience != "CLOSE_FRIENDS",
        Rel::Stranger | Rel::Anonymous | Rel::Moderator => audience == "PUBLIC",
    }
}

/// Whether a viewer standing as `rel` sees a moment of `visibility`.
fn sees_moment(rel: Rel, visibility: &str, list: bool) -> bool {
    match rel {
        Rel::Myself => true,
        Rel::Blocker | Rel::Blocked => false,
        Rel::Muter if list => false,
        Rel::Friend | Rel::CloseFriend | Rel::Hidden | Rel::Muter => true,
        Rel::Stranger | Rel::Anonymous | Rel::Moderator => visibility == "PUBLIC",
    }
}

fn sees_profile(rel: Rel) -> bool {
    !matches!(rel, Rel::Blocker | Rel::Blocked)
}

/// Whether the author counts in the viewer's FRIENDS scope.
fn in_friends_scope(rel: Rel) -> bool {
    matches!(
        rel,
        Rel::Myself | Rel::Friend | Rel::CloseFriend | Rel::Hidden | Rel::Muter
    )
}

struct Status {
    audience: &'static str,
    id: String,
}

struct Moment {
    visibility: &'static str,
    standalone: String,
    located: String,
    location: String,
}

fn ids(conn: &Value) -> BTreeSet<String> {
    connection_ids(conn).into_iter().collect()
}

const WORLD: &str = "{ south: -90, west: -180, north: 90, east: 180 }";
const SUB: &str = "subscription($s: Scope) { statusCreated(scope: $s) { id } }";

async fn every_path_agrees_on_who_sees_what(app: &TestApp) {
    let author = app.sign_up("author").await;
    let other = app.sign_up("other").await;
    let closer = app.sign_up("closer").await;
    let mut viewers: Vec<(Rel, Option<TestUser>)> = Vec::new();
    for rel in RELS {
        let user = match rel {
            Rel::Myself => Some(author.clone()),
            Rel::Anonymous => None,
            _ => Some(app.sign_up(&format!("{rel:?}").to_lowercase()).await),
        };
        viewers.push((rel, user));
    }
    let user = |rel: Rel| {
        viewers
            .iter()
            .find(|(r, _)| *r == rel)
            .and_then(|(_, u)| u.clone())
            .unwrap()
    };
    for rel in [
        Rel::Friend,
        Rel::CloseFriend,
        Rel::Hidden,
        Rel::Blocker,
        Rel::Blocked,
        Rel::Muter,
    ] {
        app.befriend(&author, &user(rel)).await;
    }
    app.relate(&author, "addCloseFriend", &user(Rel::CloseFriend))
        .await;
    app.relate(&author, "hideStoriesFrom", &user(Rel::Hidden))
        .await;
    app.relate(&user(Rel::Muter), "muteUser", &author).await;
    app.relate(&user(Rel::Blocker), "blockUser", &author).await;
    app.relate(&author, "blockUser", &user(Rel::Blocked)).await;
    ephemera::domain::moderation::set_moderator(&app.state.db, "moderator", true)
        .await
        .unwrap();
    // A block ends the friendship both ways.
    let friends = app
        .ok(
            author.token(),
            "query($u: ID!) { user(id: $u) { friends(first: 50) { nodes { id } } } }",
            json!({ "u": author.id }),
        )
        .await;
    let friend_ids = ids(&friends["user"]["friends"]);
    for rel in [Rel::Blocker, Rel::Blocked] {
        assert!(
            !friend_ids.contains(&user(rel).id),
            "{rel:?} still a friend"
        );
    }
    assert_eq!(friend_ids.len(), 4);

    // Every viewer listens for new statuses, in both scopes.
    let mut sockets = Vec::new();
    for (rel, viewer) in &viewers {
        let auth = match viewer {
            Some(v) => json!({ "authorization": format!("Bearer {}", v.token) }),
            None => json!({}),
        };
        let (mut ws, _) = WsClient::connect(&app.ws_url, Protocol::TransportWs, auth).await;
        ws.subscribe("all", SUB, json!({ "s": "EVERYONE" })).await;
        if viewer.is_some() {
            ws.subscribe("friends", SUB, json!({ "s": "FRIENDS" }))
                .await;
        }
        sockets.push((*rel, ws));
    }
    app.wait_for_metric("ephemera_subscribers", 19).await;

    // The author's statuses, one a minute, with another author's PUBLIC
    // one between the first and the second.
    let mut statuses = Vec::new();
    let mut posted = Vec::new();
    for (i, audience) in AUDIENCES.into_iter().enumerate() {
        app.clock.advance(std::time::Duration::from_secs(60));
        let id = app
            .post_status_to(&author, &format!("for {audience}"), audience)
            .await;
        posted.push((Some(audience), id.clone()));
        statuses.push(Status { audience, id });
        if i == 0 {
            app.clock.advance(std::time::Duration::from_secs(60));
            let id = app.post_status(&other, "someone else").await;
            posted.push((None, id));
        }
    }
    let mut moments = Vec::new();
    for (i, visibility) in VISIBILITIES.into_iter().enumerate() {
        let s = app
            .post_moment(
                &author,
                json!({ "visibility": visibility, "latitude": 10.0 + i as f64 }),
            )
            .await;
        let l = app
            .post_moment(
                &author,
                json!({ "visibility": visibility, "latitude": -10.0 - i as f64, "placeName": format!("Place {i}") }),
            )
            .await;
        moments.push(Moment {
            visibility,
            standalone: s["id"].as_str().unwrap().to_owned(),
            located: l["id"].as_str().unwrap().to_owned(),
            location: l["location"]["id"].as_str().unwrap().to_owned(),
        });
    }

    // statusCreated: exactly what the tray would show, in order. A last
    // status of someone else closes each stream, so nothing extra went before it.
    let closing = app.post_status(&closer, "the end").await;
    for (rel, ws) in &mut sockets {
        let scopes: &[&str] = if *rel == Rel::Anonymous {
            &["all"]
        } else {
            &["all", "friends"]
        };
        let mut expected: Vec<(String, String)> = Vec::new();
        for (audience, id) in &posted {
            for scope in scopes {
                let shown = match audience {
                    Some(a) => {
                        sees_status(*rel, a, true) && (*scope == "all" || in_friends_scope(*rel))
                    }
                    None => *scope == "all",
                };
                if shown {
                    expected.push(((*scope).to_owned(), id.clone()));
                }
            }
        }
        expected.push(("all".to_owned(), closing.clone()));
        let mut got = Vec::new();
        while got.last().map(|(_, id): &(String, String)| id) != Some(&closing) {
            let msg = ws.next_message().await.expect("a message");
            assert_eq!(msg["type"], "next", "{rel:?}: {msg}");
            let id = msg["payload"]["data"]["statusCreated"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{rel:?}: {msg}"))
                .to_owned();
            got.push((msg["id"].as_str().unwrap().to_owned(), id));
        }
        // The two scopes interleave; each keeps its own order.
        for scope in scopes {
            let of = |v: &Vec<(String, String)>| {
                v.iter()
                    .filter(|(s, _)| s == scope)
                    .map(|(_, id)| id.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(of(&got), of(&expected), "{rel:?} statusCreated({scope})");
        }
    }

    for (rel, viewer) in &viewers {
        check_viewer(app, &author, *rel, viewer.as_ref(), &statuses, &moments).await;
    }

    // Viewers and view counts, for the author only: those who marked the
    // PUBLIC status seen above, blocked people aside.
    let q = "query($id: ID!) { status(id: $id) { viewCount viewers { nodes { id } } } }";
    let seen_public = app
        .ok(author.token(), q, json!({ "id": statuses[0].id }))
        .await;
    let expect: BTreeSet<String> = viewers
        .iter()
        .filter(|(r, v)| *r != Rel::Myself && v.is_some() && sees_status(*r, "PUBLIC", false))
        .map(|(_, v)| v.as_ref().unwrap().id.clone())
        .collect();
    assert_eq!(ids(&seen_public["status"]["viewers"]), expect);
    assert_eq!(seen_public["status"]["viewCount"], expect.len());
    let stranger = app
        .ok(
            user(Rel::Stranger).token(),
            q,
            json!({ "id": statuses[0].id }),
        )
        .await;
    assert!(stranger["status"]["viewers"].is_null());
    assert!(stranger["status"]["viewCount"].is_null());
}

/// Every read path as one viewer.
async fn check_viewer(
    app: &TestApp,
    author: &TestUser,
    rel: Rel,
    viewer: Option<&TestUser>,
    statuses: &[Status],
    moments: &[Moment],
) {
    let token = viewer.and_then(|v| v.token());
    let ctx = |path: &str| format!("{rel:?} via {path}");
    let listed: Vec<&Status> = statuses
        .iter()
        .filter(|s| sees_status(rel, s.audience, true))
        .collect();
    let direct: BTreeSet<String> = statuses
        .iter()
        .filter(|s| sees_status(rel, s.audience, false))
        .map(|s| s.id.clone())
        .collect();

    // The tray: the author's entry, placed by the newest status the viewer
    // may see, counting only those.
    let tray_q = "query($s: Scope) { storyTray(first: 50, scope: $s) { nodes { author { id username } storyCount hasUnseen latestCreatedAt } } }";
    let scopes: &[&str] = if viewer.is_some() {
        &["EVERYONE", "FRIENDS"]
    } else {
        &["EVERYONE"]
    };
    for scope in scopes {
        let tray = app.ok(token, tray_q, json!({ "s": scope })).await;
        let entries = tray["storyTray"]["nodes"].as_array().unwrap();
        let mine: Vec<&Value> = entries
            .iter()
            .filter(|e| e["author"]["id"] == author.id.as_str())
            .collect();
        let expected = !listed.is_empty() && (*scope == "EVERYONE" || in_friends_scope(rel));
        assert_eq!(
            mine.len(),
            usize::from(expected),
            "{}",
            ctx(&format!("storyTray({scope})"))
        );
        if expected {
            assert_eq!(mine[0]["storyCount"], listed.len(), "{}", ctx("storyCount"));
            assert_eq!(mine[0]["hasUnseen"], true, "{}", ctx("hasUnseen"));
            // The other author's status came between the first (PUBLIC) and
            // the second: the entry sorts after it exactly when the viewer
            // sees only the PUBLIC one.
            let names: Vec<&str> = entries
                .iter()
                .map(|e| e["author"]["username"].as_str().unwrap())
                .filter(|n| *n != "closer")
                .collect();
            if *scope == "EVERYONE" {
                let expect_order = if listed.len() == 1 {
                    vec!["other", "author"]
                } else {
                    vec!["author", "other"]
                };
                assert_eq!(names, expect_order, "{}", ctx("storyTray order"));
            }
        }
    }

    // Per-author pages and single reads.
    let q = "query($u: ID!) { statuses(userId: $u, first: 50) { nodes { id } } user(id: $u) { statuses(first: 50) { nodes { id } } } }";
    let pages = app.ok(token, q, json!({ "u": author.id })).await;
    assert_eq!(ids(&pages["statuses"]), direct, "{}", ctx("statuses"));
    if sees_profile(rel) {
        assert_eq!(
            ids(&pages["user"]["statuses"]),
            direct,
            "{}",
            ctx("User.statuses")
        );
    } else {
        assert!(pages["user"].is_null(), "{}", ctx("user"));
    }
    let all: Vec<&String> = statuses.iter().map(|s| &s.id).collect();
    let nodes = app
        .ok(
            token,
            "query($ids: [ID!]!) { nodes(ids: $ids) { id } }",
            json!({ "ids": all }),
        )
        .await;
    for (i, s) in statuses.iter().enumerate() {
        let visible = direct.contains(&s.id);
        let one = app
            .ok(
                token,
                "query($id: ID!) { status(id: $id) { id audience } node(id: $id) { id } }",
                json!({ "id": s.id }),
            )
            .await;
        assert_eq!(
            !one["status"].is_null(),
            visible,
            "{} {}",
            ctx("status"),
            s.audience
        );
        assert_eq!(
            !one["node"].is_null(),
            visible,
            "{} {}",
            ctx("node"),
            s.audience
        );
        assert_eq!(!nodes["nodes"][i].is_null(), visible, "{}", ctx("nodes"));
        if visible {
            assert_eq!(one["status"]["audience"], s.audience);
        }
        // Seen marks: exactly on what the viewer may see.
        let mark = "mutation($id: ID!) { markStatusSeen(id: $id) { id viewerHasSeen } }";
        match viewer {
            None => assert_eq!(
                app.err(None, mark, json!({ "id": s.id })).await,
                "UNAUTHENTICATED"
            ),
            Some(v) if visible => {
                let seen = app.ok(v.token(), mark, json!({ "id": s.id })).await;
                assert_eq!(seen["markStatusSeen"]["viewerHasSeen"], true);
            }
            Some(v) => {
                let resp = app.gql(v.token(), mark, json!({ "id": s.id })).await;
                assert_eq!(error_code(&resp), "NOT_FOUND", "{}", ctx("markStatusSeen"));
            }
        }
    }
    if viewer.is_some() && !listed.is_empty() {
        // Everything it may see is seen now: no unseen dot.
        let tray = app.ok(token, tray_q, json!({ "s": "EVERYONE" })).await;
        let entry = tray["storyTray"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["author"]["id"] == author.id.as_str())
            .cloned()
            .unwrap();
        assert_eq!(entry["hasUnseen"], false, "{}", ctx("hasUnseen after"));
    }

    // Moments.
    let listed_m: BTreeSet<String> = moments
        .iter()
        .filter(|m| sees_moment(rel, m.visibility, true))
        .flat_map(|m| [m.standalone.clone(), m.located.clone()])
        .collect();
    let direct_m: BTreeSet<String> = moments
        .iter()
        .filter(|m| sees_moment(rel, m.visibility, false))
        .flat_map(|m| [m.standalone.clone(), m.located.clone()])
        .collect();
    let feed = app
        .ok(
            token,
            "{ momentFeed(first: 50) { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(ids(&feed["momentFeed"]), listed_m, "{}", ctx("momentFeed"));
    let q = "query($u: ID!) { user(id: $u) { moments(first: 50) { nodes { id } } } }";
    let own = app.ok(token, q, json!({ "u": author.id })).await;
    if sees_profile(rel) {
        assert_eq!(
            ids(&own["user"]["moments"]),
            direct_m,
            "{}",
            ctx("User.moments")
        );
    }
    let map = app
        .ok(
            token,
            &format!("{{ mapMarkers(bbox: {WORLD}) {{ markers {{ __typename ... on MomentPin {{ moment {{ id }} }} ... on LocationPin {{ badgeCount location {{ id }} }} }} }} }}"),
            json!({}),
        )
        .await;
    let markers = map["mapMarkers"]["markers"].as_array().unwrap();
    let pins: BTreeSet<String> = markers
        .iter()
        .filter(|m| m["__typename"] == "MomentPin")
        .map(|m| m["moment"]["id"].as_str().unwrap().to_owned())
        .collect();
    let places: BTreeSet<String> = markers
        .iter()
        .filter(|m| m["__typename"] == "LocationPin")
        .map(|m| {
            assert_eq!(m["badgeCount"], 1, "{}", ctx("badgeCount"));
            m["location"]["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let expect_pins: BTreeSet<String> = moments
        .iter()
        .filter(|m| sees_moment(rel, m.visibility, true))
        .map(|m| m.standalone.clone())
        .collect();
    let expect_places: BTreeSet<String> = moments
        .iter()
        .filter(|m| sees_moment(rel, m.visibility, true))
        .map(|m| m.location.clone())
        .collect();
    assert_eq!(pins, expect_pins, "{}", ctx("map pins"));
    assert_eq!(places, expect_places, "{}", ctx("map badges"));
    for m in moments {
        for id in [&m.standalone, &m.located] {
            let visible = direct_m.contains(id);
            let q = "query($id: ID!) { moment(id: $id) { id likers { nodes { id } } } node(id: $id) { id } }";
            let one = app.ok(token, q, json!({ "id": id })).await;
            assert_eq!(
                !one["moment"].is_null(),
                visible,
                "{} {}",
                ctx("moment"),
                m.visibility
            );
            assert_eq!(!one["node"].is_null(), visible, "{}", ctx("node moment"));
            if visible {
                assert_eq!(
                    !one["moment"]["likers"].is_null(),
                    rel == Rel::Myself,
                    "{}",
                    ctx("likers")
                );
            }
            let like = "mutation($id: ID!) { setMomentLike(momentId: $id, liked: false) { id } }";
            match viewer {
                None => {}
                Some(v) if visible => {
                    app.ok(v.token(), like, json!({ "id": id })).await;
                }
                Some(v) => {
                    let resp = app.gql(v.token(), like, json!({ "id": id })).await;
                    assert_eq!(error_code(&resp), "NOT_FOUND", "{}", ctx("setMomentLike"));
                }
            }
        }
        let q = "query($id: ID!) { location(id: $id) { momentCount moments { nodes { id } } } }";
        let loc = app.ok(token, q, json!({ "id": m.location })).await;
        if sees_moment(rel, m.visibility, false) {
            let n = usize::from(sees_moment(rel, m.visibility, true));
            assert_eq!(
                loc["location"]["momentCount"],
                n,
                "{}",
                ctx("Location.momentCount")
            );
            assert_eq!(
                ids(&loc["location"]["moments"]).len(),
                n,
                "{}",
                ctx("Location.moments")
            );
        } else {
            assert!(loc["location"].is_null(), "{}", ctx("location"));
        }
    }

    // The profile, by every path, and a friend request around a block.
    let q = "query($u: ID!, $n: String!) { user(id: $u) { id } byName: user(username: $n) { id } node(id: $u) { id } }";
    let prof = app
        .ok(token, q, json!({ "u": author.id, "n": "author" }))
        .await;
    for path in ["user", "byName", "node"] {
        assert_eq!(!prof[path].is_null(), sees_profile(rel), "{}", ctx(path));
    }
    if let (Some(v), false) = (viewer, sees_profile(rel)) {
        let resp = app
            .gql(
                v.token(),
                "mutation($u: ID!) { sendFriendRequest(userId: $u) }",
                json!({ "u": author.id }),
            )
            .await;
        assert_eq!(
            error_code(&resp),
            "NOT_FOUND",
            "{}",
            ctx("sendFriendRequest")
        );
        // And the author cannot see them either.
        let back = app
            .ok(
                author.token(),
                "query($u: ID!) { user(id: $u) { id } }",
                json!({ "u": v.id }),
            )
            .await;
        assert!(back["user"].is_null(), "{}", ctx("the author reading them"));
        let resp = app
            .gql(
                author.token(),
                "mutation($u: ID!) { sendFriendRequest(userId: $u) }",
                json!({ "u": v.id }),
            )
            .await;
        assert_eq!(
            error_code(&resp),
            "NOT_FOUND",
            "{}",
            ctx("author's sendFriendRequest")
        );
    }
}
