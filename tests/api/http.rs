//! The HTTP surface around GraphQL: GraphiQL served offline, health, CORS.

use crate::support::{Backend, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphiql_is_served_from_the_binary() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let page = app.http.get(format!("{}/", app.base)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("graphiql"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external assets"
    );
    for asset in [
        "graphiql.min.js",
        "graphiql.min.css",
        "react.production.min.js",
        "react-dom.production.min.js",
        "graphql-ws.min.js",
        "init.js",
    ] {
        assert!(html.contains(asset), "{asset} referenced");
        let resp = app
            .http
            .get(format!("{}/graphiql/{asset}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{asset}");
        assert!(resp.bytes().await.unwrap().len() > 100);
    }
    let missing = app
        .http
        .get(format!("{}/graphiql/nope.js", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    app.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let health = app
        .http
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(app.metric("ephemera_db_statements_total").await > 0);
    app.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_only_for_configured_origins() {
    let preflight = |app: &TestApp, origin: &str| {
        app.http
            .request(reqwest::Method::OPTIONS, format!("{}/graphql", app.base))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "authorization, content-type",
            )
            .send()
    };
    let closed = TestApp::spawn(Backend::Sqlite).await;
    let resp = preflight(&closed, "https://app.example").await.unwrap();
    assert!(resp.headers().get("access-control-allow-origin").is_none());
    closed.finish().await;

    let open = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.cors_origins = vec!["https://app.example".into()]
    })
    .await;
    let resp = preflight(&open, "https://app.example").await.unwrap();
    assert_eq!(
        resp.headers().get("access-control-allow-origin").unwrap(),
        "https://app.example"
    );
    let other = preflight(&open, "https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    open.finish().await;
}
