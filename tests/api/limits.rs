//! Abuse refused before it runs, malformed requests, and error codes.

use serde_json::json;

use crate::both_backends;
use crate::support::{Backend, TestApp, error_code};

both_backends!(internal_errors_hide_their_cause);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_limits() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    // Depth.
    let mut deep = String::from("__typename");
    for _ in 0..5 {
        deep = format!("user(username: \"x\") {{ friends {{ nodes {{ {deep} }} }} }}");
    }
    let resp = app.gql(None, &format!("{{ {deep} }}"), json!({})).await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    assert!(
        resp["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("depth limit is 12"),
        "{resp}"
    );

    // Complexity: wide lists of lists.
    let resp = app
        .gql(
            None,
            "{ storyTray(first: 50) { nodes { author { friends(first: 50) { nodes { statuses(first: 50) { nodes { id caption } } } } } } } }",
            json!({}),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    assert!(
        resp["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("complexity limit is 5000"),
        "{resp}"
    );

    // Aliases.
    let aliased: String = (0..31).map(|i| format!("a{i}: __typename ")).collect();
    let resp = app.gql(None, &format!("{{ {aliased} }}"), json!({})).await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    // A refused query is refused again (parsed documents are remembered, and
    // a remembered one is checked like a new one).
    for q in [
        format!("{{ {deep} }}"),
        format!("{{ {aliased} }}"),
        "{ storyTray(first: 50) { nodes { author { friends(first: 50) { nodes { statuses(first: 50) { nodes { id caption } } } } } } } }".to_owned(),
    ] {
        let again = app.gql(None, &q, json!({})).await;
        assert_eq!(error_code(&again), "BAD_USER_INPUT", "{again}");
        assert!(again.get("data").is_none_or(serde_json::Value::is_null), "{again}");
    }
    assert!(
        resp["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("limit is 30"),
        "{resp}"
    );

    // Batches: up to 10 run, 11 are refused.
    let op = json!({ "query": "{ __typename }" });
    let (status, ok) = app.post(None, &json!(vec![op.clone(); 10])).await;
    assert_eq!(status, 200);
    assert_eq!(ok.as_array().unwrap().len(), 10);
    let (status, refused) = app.post(None, &json!(vec![op.clone(); 11])).await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&refused), "BAD_USER_INPUT");
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("limit is 10")
    );
    let (status, empty) = app.post(None, &json!([])).await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&empty), "BAD_USER_INPUT");

    // Body size.
    let big = "x".repeat(2 * 1024 * 1024);
    let (status, body) = app
        .post(
            None,
            &json!({ "query": format!("{{ __typename }} #{big}") }),
        )
        .await;
    assert_eq!(status, 413);
    assert_eq!(error_code(&body), "PAYLOAD_TOO_LARGE");
    app.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_client_errors() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let url = format!("{}/graphql", app.base);
    for body in ["{not json", "", "[1, 2]", "{\"query\": 5}", "null"] {
        let resp = app
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(error_code(&v), "BAD_USER_INPUT");
    }
    let resp = app
        .http
        .post(&url)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 415);

    // Syntax errors, unknown fields, bad variables: coded client errors.
    for (q, vars) in [
        ("{ viewer { id ", json!({})),
        ("{ nope }", json!({})),
        (
            "query($n: Int!) { storyTray(first: $n) { nodes { storyCount } } }",
            json!({ "n": "many" }),
        ),
        (
            "query($n: Int!) { storyTray(first: $n) { nodes { storyCount } } }",
            json!({}),
        ),
    ] {
        let resp = app.gql(None, q, vars).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{q}: {resp}");
    }

    // GET: queries run, mutations are refused and change nothing.
    let get = |q: &str| {
        let url = url.clone();
        let q = q.to_owned();
        let http = app.http.clone();
        async move {
            let resp = http.get(url).query(&[("query", q)]).send().await.unwrap();
            resp.json::<serde_json::Value>().await.unwrap()
        }
    };
    let ok = get("{ __typename }").await;
    assert_eq!(ok["data"]["__typename"], "Query");
    // The server remembers parsed documents: a mutation it has parsed for
    // a POST naming an operation it lacks is still refused over GET, every
    // time.
    let mutation =
        "mutation { signUp(input: { username: \"viaget\", password: \"password123\" }) { token } }";
    let (_, posted) = app
        .post(None, &json!({ "query": mutation, "operationName": "Nope" }))
        .await;
    assert_eq!(error_code(&posted), "BAD_USER_INPUT", "{posted}");
    for _ in 0..2 {
        let refused = get(mutation).await;
        assert_eq!(error_code(&refused), "BAD_USER_INPUT");
    }
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM users").await, 0);
    let resp = app
        .http
        .get(&url)
        .query(&[("variables", "{bad")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    app.finish().await;
}

async fn internal_errors_hide_their_cause(app: &TestApp) {
    use sea_orm::ConnectionTrait;
    let u = app.sign_up("victim").await;
    let s = app.post_status(&u, "x").await;
    // Break the database under the server.
    app.state
        .db
        .execute_unprepared("DROP TABLE status_views")
        .await
        .unwrap();
    let resp = app
        .gql(
            u.token(),
            "query($id: ID!) { status(id: $id) { id viewerHasSeen } }",
            json!({ "id": s }),
        )
        .await;
    assert_eq!(error_code(&resp), "INTERNAL_SERVER_ERROR");
    let message = resp["errors"][0]["message"].as_str().unwrap();
    assert_eq!(message, "internal server error");
    let text = resp.to_string().to_lowercase();
    assert!(
        !text.contains("status_views") && !text.contains("sql"),
        "{resp}"
    );
}
