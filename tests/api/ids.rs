//! Global ids say their type: every path that takes an id reads only its
//! type's table, and an id of another type (even one whose number is a row of
//! the asked type's table) answers exactly as an id that names nothing, on
//! queries and mutations alike, changing nothing.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{IdKind, TestApp, error_code, gid, raw};

both_backends!(ids_of_another_type_name_nothing);

async fn ids_of_another_type_name_nothing(app: &TestApp) {
    let ann = app.sign_up("ann").await;
    let warden = app.sign_up("warden").await;
    ephemera::domain::moderation::set_moderator(&app.state.db, "warden", true)
        .await
        .unwrap();
    let status = app.post_status(&ann, "mine").await;
    let moment = app.post_moment(&ann, json!({})).await;
    let moment_id = moment["id"].as_str().unwrap().to_owned();
    let media_id = moment["media"]["id"].as_str().unwrap().to_owned();
    // Each id as each other type, and the bare numbers ids used to be.
    let (s, m, u) = (raw(&status), raw(&moment_id), raw(&ann.id));
    let as_moment = gid(IdKind::Moment, s);
    let as_status = gid(IdKind::Status, m);
    let as_user = gid(IdKind::User, s);

    let q = "query($s: ID!, $m: ID!, $u: ID!, $l: ID!) { status(id: $s) { id } moment(id: $m) { id } \
             user(id: $u) { id } location(id: $l) { id } node(id: $s) { id } }";
    for (vars, what) in [
        (
            json!({ "s": as_status, "m": as_moment, "u": as_user, "l": gid(IdKind::Location, m) }),
            "other types",
        ),
        (
            json!({ "s": s.to_string(), "m": m.to_string(), "u": u.to_string(), "l": m.to_string() }),
            "bare numbers",
        ),
    ] {
        let data = app.ok(ann.token(), q, vars).await;
        for field in ["status", "moment", "user", "location", "node"] {
            assert!(data[field].is_null(), "{what}: {field}: {data}");
        }
    }
    // The right types find them.
    let right = json!({ "s": status, "m": moment_id, "u": ann.id, "l": gid(IdKind::Location, 1) });
    let data = app.ok(ann.token(), q, right).await;
    assert_eq!(data["status"]["id"], status);
    assert_eq!(data["moment"]["id"], moment_id);
    assert_eq!(data["user"]["id"], ann.id);
    assert_eq!(data["node"]["id"], status);

    // Mutations: NOT_FOUND, and nothing changes.
    let mutations: [(&str, Value); 8] = [
        (
            "mutation($id: ID!) { deleteStatus(id: $id) }",
            json!({ "id": as_status }),
        ),
        (
            "mutation($id: ID!) { deleteMoment(id: $id) }",
            json!({ "id": as_moment }),
        ),
        (
            "mutation($id: ID!) { markStatusSeen(id: $id) { id } }",
            json!({ "id": as_status }),
        ),
        (
            "mutation($id: ID!) { toggleMomentLike(momentId: $id) { id } }",
            json!({ "id": as_moment }),
        ),
        (
            "mutation($id: ID!) { sendFriendRequest(userId: $id) }",
            json!({ "id": as_user }),
        ),
        (
            "mutation($id: ID!) { blockUser(userId: $id) }",
            json!({ "id": as_user }),
        ),
        (
            "mutation($id: ID!) { createStatus(input: { mediaId: $id }) { id } }",
            json!({ "id": gid(IdKind::Moment, raw(&media_id)) }),
        ),
        (
            "mutation($id: ID!) { report(input: { subjectId: $id, reason: SPAM }) { id } }",
            json!({ "id": media_id }),
        ),
    ];
    let other = app.sign_up("other").await;
    for (m, vars) in &mutations {
        let resp = app.gql(other.token(), m, vars.clone()).await;
        assert_eq!(error_code(&resp), "NOT_FOUND", "{m}: {resp}");
    }
    let take_down = "mutation($id: ID!) { takeDown(id: $id, reason: \"r\") }";
    for id in [gid(IdKind::Media, raw(&media_id)), gid(IdKind::Status, m)] {
        let resp = app
            .gql(warden.token(), take_down, json!({ "id": id }))
            .await;
        assert_eq!(error_code(&resp), "NOT_FOUND", "{id}: {resp}");
    }
    // A user is suspended, not taken down.
    let resp = app
        .gql(warden.token(), take_down, json!({ "id": ann.id }))
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{resp}");
    for (table, n) in [("statuses", s), ("moments", m), ("media", raw(&media_id))] {
        let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE id = {n}");
        assert_eq!(app.count(&sql).await, 1, "{table}");
    }
    for table in [
        "moment_likes",
        "friendships",
        "user_relations",
        "reports",
        "status_views",
    ] {
        let sql = format!("SELECT COUNT(*) AS n FROM {table}");
        assert_eq!(app.count(&sql).await, 0, "{table}");
    }
    // Taken down by its own type's id.
    app.ok(warden.token(), take_down, json!({ "id": moment_id }))
        .await;
    let sql = format!("SELECT COUNT(*) AS n FROM moments WHERE id = {m}");
    assert_eq!(app.count(&sql).await, 0);
}
