//! Hostile clients, round three: the work one client can buy is bounded by
//! what it does. Each test sends the reported attack and unseen variants of
//! it, as an attacker would, and asserts the refusal code, that nothing was
//! stored that should not be, and that the server still serves others.

use serde_json::{Value, json};

use crate::support::ws::{Protocol, WsClient};
use crate::support::{TestApp, error_code};

/// The server still answers `/healthz` and a query.
async fn still_serving(app: &TestApp) {
    let health = app
        .http
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .expect("healthz answers");
    assert_eq!(health.status(), 200);
    let data = app.ok(None, "{ __typename }", json!({})).await;
    assert_eq!(data["__typename"], "Query");
}

fn message(resp: &Value) -> String {
    resp["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `fragment F0 { ...F1 ×ways }` … `fragment F{n} { last }`.
fn spreads(ways: usize, n: usize, on: &str, last: &str) -> String {
    let mut doc = String::new();
    for i in 0..n {
        let next = format!(" ...F{}", i + 1);
        doc.push_str(&format!(" fragment F{i} on {on} {{{}}}", next.repeat(ways)));
    }
    doc.push_str(&format!(" fragment F{n} on {on} {{ {last} }}"));
    doc
}

/// The code of the error a websocket message carries: a `next`/`data`
/// payload's first error, or an `error` message's.
fn ws_error_code(message: &Value) -> String {
    let payload = &message["payload"];
    let error = if payload["errors"].is_array() {
        &payload["errors"][0]
    } else if payload.is_array() {
        &payload[0]
    } else {
        payload
    };
    error["extensions"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The reported 1.1 KB bomb (spreads three ways deep ending in a fragment
/// that does not exist) and its siblings: a cycle at the bottom, an unused
/// bomb beside a harmless operation, the bomb inside a field, in an
/// operation `operationName` does not select, a chain of fragments too long
/// to walk on the stack. Sent over POST, GET, a batch, both websocket
/// protocols and an APQ registration: each refused with `BAD_USER_INPUT`
/// before any walk that expands spreads, and the server CPU it costs stays
/// under 2 s in all (debug build; a stalled walk is minutes).
async fn fragment_bombs_are_refused_before_expansion(app: &TestApp) {
    let unknown = format!(
        "query {{ ...F0 }}{}",
        spreads(3, 24, "Query", "...Nowhere ...Nowhere")
    );
    let cycle = format!("query {{ ...F0 }}{}", spreads(3, 24, "Query", "...F0"));
    let unused = format!(
        "query {{ __typename }}{}",
        spreads(3, 24, "Query", "__typename")
    );
    let in_field = format!(
        "query {{ viewer {{ ...F0 }} }}{}",
        spreads(3, 24, "User", "...Nowhere")
    );
    let unselected = format!(
        "query A {{ __typename }} query B {{ ...F0 }}{}",
        spreads(3, 24, "Query", "...Nowhere")
    );
    let mut chain = String::from("query { ...F0 }");
    chain.push_str(&spreads(1, 1_000, "Query", "__typename"));
    let cpu = crate::support::ServerCpu::start(app);
    for (name, doc) in [
        ("unknown", &unknown),
        ("cycle", &cycle),
        ("unused", &unused),
        ("in a field", &in_field),
        ("unselected operation", &unselected),
        ("chain", &chain),
    ] {
        let body = json!({ "query": doc, "operationName": if name == "unselected operation" { json!("A") } else { Value::Null } });
        let (_, resp) = app.post(None, &body).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{name}: {resp}");
        let text = message(&resp);
        assert!(
            text.contains("unknown fragment")
                || text.contains("spreads itself")
                || text.contains("never used")
                || text.contains("nest too deep"),
            "{name}: {text}"
        );
        let resp = app.get(&[("query", doc.as_str())]).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "GET {name}: {resp}");
        let (_, batch) = app.post(None, &json!([body, body])).await;
        for answer in batch.as_array().expect("a batch answer") {
            assert_eq!(error_code(answer), "BAD_USER_INPUT", "batch {name}");
        }
        let ext = json!({ "persistedQuery": { "version": 1, "sha256Hash": sha256(doc) } });
        let (_, resp) = app
            .post(None, &json!({ "query": doc, "extensions": ext }))
            .await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "APQ {name}: {resp}");
        for protocol in [Protocol::TransportWs, Protocol::LegacyWs] {
            let (mut ws, _) = WsClient::connect(&app.ws_url, protocol, json!({})).await;
            ws.subscribe("1", doc, json!({})).await;
            let refused = ws.next_message().await.expect("an answer");
            assert_eq!(
                ws_error_code(&refused),
                "BAD_USER_INPUT",
                "{protocol:?} {name}: {refused}"
            );
        }
    }
    let spent = cpu.spent();
    eprintln!("fragment bombs, 6 kinds × 7 ways: {spent:?} of server CPU");
    assert!(
        spent < std::time::Duration::from_secs(2),
        "the refusals cost {spent:?} of server CPU"
    );
    // The APQ registrations were refused, so the hash alone is not known.
    let ext = json!({ "persistedQuery": { "version": 1, "sha256Hash": sha256(&unknown) } });
    let (_, resp) = app.post(None, &json!({ "extensions": ext })).await;
    assert_eq!(error_code(&resp), "PERSISTED_QUERY_NOT_FOUND", "{resp}");
    // Legitimate fragments, nested and spread more than once, still work.
    let data = app
        .ok(
            None,
            "query { ...A viewer { ...U } } fragment A on Query { t: __typename ...B } \
             fragment B on Query { __typename } fragment U on User { id }",
            json!({}),
        )
        .await;
    assert_eq!(data["t"], "Query");
    still_serving(app).await;
}

crate::both_backends_measured!(|_| {} => fragment_bombs_are_refused_before_expansion);
