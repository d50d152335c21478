//! The HTTP surface around GraphQL: GraphiQL served offline, health, CORS,
//! deadlines for request heads.

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
        c.server.cors_origins = vec!["https://app.example".into()]
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

/// A client that starts a request head and never finishes it, or opens a
/// connection and sends nothing, or keeps a connection idle after its
/// request, is cut off after `EPHEMERA_HTTP_HEADER_TIMEOUT`, and the server
/// answers others meanwhile. (A liveness check with a generous bound, not a
/// timing: the setting is 300 ms, the test waits up to 10 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_or_idle_connections_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    let app = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.http.header_timeout = std::time::Duration::from_millis(300);
    })
    .await;
    let addr = app.base.trim_start_matches("http://").to_owned();

    let mut half = TcpStream::connect(&addr).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );

    // A new client each time: the test's pooled connections are cut off too.
    let health = reqwest::Client::new()
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "others are served meanwhile");

    for (what, stream) in [
        ("half a request head", &mut half),
        ("a silent connection", &mut silent),
        ("an idle kept-alive connection", &mut idle),
    ] {
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_to_end(&mut rest),
        )
        .await;
        assert!(closed.is_ok(), "{what} is still open after 10 s");
        assert!(
            !String::from_utf8_lossy(&rest).contains("200 OK"),
            "{what} was not answered"
        );
    }

    let health = reqwest::Client::new()
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    app.finish().await;
}

/// A zero header timeout (every connection cut off at once) stops the server
/// from starting, with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_header_timeout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ephemera::config::Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.data_dir = dir.path().to_path_buf();
    config.http.header_timeout = std::time::Duration::ZERO;
    let err = ephemera::app::App::build(config, ephemera::clock::Clock::system())
        .await
        .err()
        .expect("refused");
    assert!(
        err.message().contains("EPHEMERA_HTTP_HEADER_TIMEOUT"),
        "{err:?}"
    );
}
