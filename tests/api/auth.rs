//! Sign-up, sign-in, tokens, user lookup and node refetching.

use serde_json::json;

use crate::both_backends;
use crate::support::{HOUR, TestApp, error_code};

both_backends!(
    sign_up_sign_in_and_viewer,
    sign_up_rejections_create_nothing,
    sign_in_failures_look_the_same,
    tokens_are_checked,
    user_lookup,
    nodes_refetch_users_and_live_statuses,
);

async fn sign_up_sign_in_and_viewer(app: &TestApp) {
    let data = app
        .ok(
            None,
            r#"mutation { signUp(input: { username: "Ann_1", password: "password123", displayName: "  Ann  " }) {
                token user { id username displayName createdAt } } }"#,
            json!({}),
        )
        .await;
    let user = &data["signUp"]["user"];
    assert_eq!(user["username"], "Ann_1");
    assert_eq!(user["displayName"], "Ann");
    assert!(user["createdAt"].as_str().unwrap().ends_with('Z'));
    let token = data["signUp"]["token"].as_str().unwrap();

    let me = app
        .ok(
            Some(token),
            "{ viewer { id username friendship } }",
            json!({}),
        )
        .await;
    assert_eq!(me["viewer"]["id"], user["id"]);
    assert_eq!(me["viewer"]["friendship"], "SELF");

    // Sign-in is case-insensitive on the username.
    let signed = app
        .ok(
            None,
            r#"mutation { signIn(input: { username: "ann_1", password: "password123" }) { token user { id } } }"#,
            json!({}),
        )
        .await;
    assert_eq!(signed["signIn"]["user"]["id"], user["id"]);
    let anon = app.ok(None, "{ viewer { id } }", json!({})).await;
    assert!(anon["viewer"].is_null());
}

async fn sign_up_rejections_create_nothing(app: &TestApp) {
    app.sign_up("taken").await;
    let cases = [
        ("ab", "password123", None),
        (&"a".repeat(31) as &str, "password123", None),
        ("bad name", "password123", None),
        ("bad-name", "password123", None),
        ("émile", "password123", None),
        ("shortpw", "1234567", None),
        ("TAKEN", "password123", None),
        ("longname", "password123", Some("x".repeat(51))),
    ];
    for (username, password, display) in cases {
        let resp = app
            .gql(
                None,
                "mutation($u: String!, $p: String!, $d: String) { signUp(input: { username: $u, password: $p, displayName: $d }) { token } }",
                json!({ "u": username, "p": password, "d": display }),
            )
            .await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{username}: {resp}");
        assert!(resp["data"].is_null());
    }
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM users").await, 1);
    // 50 characters, as updateProfile takes them, is the most.
    let data = app
        .ok(
            None,
            "mutation($d: String) { signUp(input: { username: \"fifty\", password: \"password123\", displayName: $d }) { user { displayName } } }",
            json!({ "d": "é".repeat(50) }),
        )
        .await;
    assert_eq!(data["signUp"]["user"]["displayName"], "é".repeat(50));
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM users").await, 2);
    // A missing argument is refused by the schema.
    let code = app
        .err(
            None,
            r#"mutation { signUp(input: { username: "x" }) { token } }"#,
            json!({}),
        )
        .await;
    assert_eq!(code, "BAD_USER_INPUT");
}

async fn sign_in_failures_look_the_same(app: &TestApp) {
    app.sign_up("bob").await;
    let q = "mutation($u: String!, $p: String!) { signIn(input: { username: $u, password: $p }) { token } }";
    let wrong = app
        .gql(None, q, json!({ "u": "bob", "p": "wrong password" }))
        .await;
    let unknown = app
        .gql(None, q, json!({ "u": "nobody", "p": "wrong password" }))
        .await;
    assert_eq!(error_code(&wrong), "UNAUTHENTICATED");
    assert_eq!(
        wrong["errors"][0]["message"],
        unknown["errors"][0]["message"]
    );
    assert_eq!(error_code(&unknown), "UNAUTHENTICATED");
}

async fn tokens_are_checked(app: &TestApp) {
    let user = app.sign_up("carol").await;
    for bad in ["garbage", "Bearer", &format!("{}x", user.token)] {
        let (status, body) = app
            .post(Some(bad), &json!({ "query": "{ __typename }" }))
            .await;
        assert_eq!(status, 401);
        assert_eq!(error_code(&body), "UNAUTHENTICATED");
    }
    // The token expires by the server's clock (30 days by default).
    app.clock.advance(HOUR * 24 * 31);
    let (status, body) = app
        .post(user.token(), &json!({ "query": "{ viewer { id } }" }))
        .await;
    assert_eq!(status, 401);
    assert_eq!(error_code(&body), "UNAUTHENTICATED");
}

async fn user_lookup(app: &TestApp) {
    let user = app.sign_up("dave").await;
    let q = "query($id: ID, $n: String) { user(id: $id, username: $n) { id username } }";
    let by_id = app.ok(None, q, json!({ "id": user.id })).await;
    assert_eq!(by_id["user"]["username"], "dave");
    let by_name = app.ok(None, q, json!({ "n": "DAVE" })).await;
    assert_eq!(by_name["user"]["id"], user.id);
    for vars in [
        json!({ "id": "12345" }),
        json!({ "id": "not-an-id" }),
        json!({ "n": "nobody" }),
    ] {
        assert!(app.ok(None, q, vars).await["user"].is_null());
    }
    assert_eq!(app.err(None, q, json!({})).await, "BAD_USER_INPUT");
    assert_eq!(
        app.err(None, q, json!({ "id": user.id, "n": "dave" }))
            .await,
        "BAD_USER_INPUT"
    );
}

async fn nodes_refetch_users_and_live_statuses(app: &TestApp) {
    let user = app.sign_up("erin").await;
    let status = app.post_status(&user, "hello").await;
    let q = "query($ids: [ID!]!) { nodes(ids: $ids) { __typename id ... on Status { caption } } }";
    let data = app
        .ok(None, q, json!({ "ids": [status, "999", user.id, "junk"] }))
        .await;
    let nodes = data["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    assert_eq!(nodes[0]["__typename"], "Status");
    assert_eq!(nodes[0]["caption"], "hello");
    assert!(nodes[1].is_null());
    assert_eq!(nodes[2]["__typename"], "User");
    assert!(nodes[3].is_null());

    let one = app
        .ok(
            None,
            "query($id: ID!) { node(id: $id) { id } }",
            json!({ "id": status }),
        )
        .await;
    assert_eq!(one["node"]["id"], status);

    let too_many: Vec<String> = (0..101).map(|i| i.to_string()).collect();
    assert_eq!(
        app.err(None, q, json!({ "ids": too_many })).await,
        "BAD_USER_INPUT"
    );

    // Expired: gone from node at once.
    app.clock.advance(HOUR * 25);
    let gone = app
        .ok(
            None,
            "query($id: ID!) { node(id: $id) { id } }",
            json!({ "id": status }),
        )
        .await;
    assert!(gone["node"].is_null());
}
