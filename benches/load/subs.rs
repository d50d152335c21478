//! Subscriptions: steps up to N idle graphql-transport-ws subscribers of
//! `statusCreated`, reads the server's RSS per subscriber, then posts
//! statuses over HTTP and times each delivery from just before the
//! `createStatus` request to the subscriber reading the `next` message.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::Opts;
use crate::seed::Bench;
use crate::server::Server;

const SUBSCRIPTION: &str =
    "subscription { statusCreated { id caption createdAt author { id username } } }";
/// Statuses posted at each step.
const EVENTS: u32 = 10;
/// Connections being opened at once.
pub const CONNECTING: usize = 100;

/// One step.
#[derive(Clone, Debug)]
pub struct SubResult {
    pub subscribers: usize,
    /// (RSS with them − RSS with none) / subscribers, in KiB.
    pub rss_per_subscriber_kib: f64,
    pub delivered: u64,
    pub expected: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// A delivery: which event, when it was read.
pub type Delivery = (u32, Instant);

/// Steps through `opts.subscribers`.
pub async fn measure(server: &Server, bench: &Bench, opts: &Opts) -> Vec<SubResult> {
    let base_rss = server.rss_kib();
    let (tx, mut rx) = mpsc::unbounded_channel::<Delivery>();
    let subscribed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let mut tasks = Vec::new();
    let mut results = Vec::new();
    let url = format!("ws://{}/graphql", server.addr);
    // Each status by the next seeded account: one account holds only so
    // many live statuses (`EPHEMERA_STATUS_MAX_LIVE`).
    let poster = |event: u32| {
        let user = i64::from(event) % i64::try_from(bench.users).unwrap_or(1).max(1) + 1;
        format!("Bearer {}", bench.token(user))
    };
    let http = reqwest::Client::new();
    let mut event = 0u32;
    for &n in &opts.subscribers {
        while tasks.len() < n {
            let permit = gate.clone().acquire_owned().await.expect("gate");
            let (url, tx, subscribed) = (url.clone(), tx.clone(), subscribed.clone());
            tasks.push(tokio::spawn(async move {
                subscriber(&url, tx, subscribed, permit).await;
            }));
        }
        // Every one connected, and the server has every stream open.
        let deadline = Instant::now() + Duration::from_secs(120);
        while subscribed.load(Ordering::SeqCst) < n
            || (server.metric("ephemera_subscribers").await as usize) < n
        {
            assert!(Instant::now() < deadline, "subscribers did not all connect");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = server.rss_kib();
        let per = rss.saturating_sub(base_rss) as f64 / n as f64;

        let mut latencies = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("hist");
        let mut delivered = 0u64;
        for _ in 0..EVENTS {
            event += 1;
            let sent = Instant::now();
            let body = json!({
                "query": "mutation($c: String!) { createStatus(input: { caption: $c, audience: PUBLIC }) { id } }",
                "variables": { "c": format!("bench-event-{event}") },
            });
            let answer: Value = http
                .post(server.graphql_url())
                .header("authorization", poster(event))
                .json(&body)
                .send()
                .await
                .expect("createStatus")
                .json()
                .await
                .expect("createStatus body");
            assert!(answer.get("errors").is_none(), "{answer}");
            let deadline = sent + Duration::from_secs(30);
            let mut got = 0;
            while got < n {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some((e, at))) if e == event => {
                        got += 1;
                        let us = u64::try_from((at - sent).as_micros()).unwrap_or(u64::MAX);
                        latencies.saturating_record(us);
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            delivered += got as u64;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let ms = |q: f64| latencies.value_at_quantile(q) as f64 / 1000.0;
        results.push(SubResult {
            subscribers: n,
            rss_per_subscriber_kib: per,
            delivered,
            expected: n as u64 * u64::from(EVENTS),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
            max_ms: latencies.max() as f64 / 1000.0,
        });
        eprintln!("  {n} subscribers: {:?}", results.last());
    }
    for t in tasks {
        t.abort();
    }
    results
}

/// A graphql-transport-ws websocket to `url`.
pub async fn connect(
    url: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    connect_from(url, None).await
}

/// A `graphql-transport-ws` connection to `url` from the loopback address
/// `source` (any, where `None`): a subscriber that stands for one phone
/// comes from an address of its own, as phones do.
pub async fn connect_from(
    url: &str,
    source: Option<std::net::Ipv4Addr>,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let mut request = url.into_client_request().expect("ws request");
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-transport-ws".parse().expect("header"),
    );
    let Some(source) = source else {
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .expect("websocket connect (raise `ulimit -n`?)");
        return socket;
    };
    let uri = request.uri();
    let server = format!(
        "{}:{}",
        uri.host().expect("ws host"),
        uri.port_u16().expect("ws port")
    );
    let socket = tokio::net::TcpSocket::new_v4().expect("tcp socket");
    socket
        .bind(std::net::SocketAddr::from((source, 0)))
        .expect("bind a loopback source address");
    let stream = socket
        .connect(server.parse().expect("server address"))
        .await
        .expect("websocket connect (raise `ulimit -n`?)");
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    let (socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .expect("websocket handshake");
    socket
}

/// One subscriber: connects, subscribes, then reports every `next` it reads.
pub async fn subscriber(
    url: &str,
    tx: mpsc::UnboundedSender<Delivery>,
    subscribed: Arc<AtomicUsize>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let mut socket = connect(url).await;
    let send = |v: Value| Message::Text(v.to_string().into());
    socket
        .send(send(json!({ "type": "connection_init", "payload": {} })))
        .await
        .expect("connection_init");
    while let Some(Ok(msg)) = socket.next().await {
        if let Message::Text(t) = msg {
            let v: Value = serde_json::from_str(&t).expect("json");
            if v["type"] == "connection_ack" {
                break;
            }
        }
    }
    socket
        .send(send(json!({
            "id": "1", "type": "subscribe", "payload": { "query": SUBSCRIPTION }
        })))
        .await
        .expect("subscribe");
    subscribed.fetch_add(1, Ordering::SeqCst);
    drop(permit);
    while let Some(Ok(msg)) = socket.next().await {
        let Message::Text(t) = msg else { continue };
        let at = Instant::now();
        let v: Value = serde_json::from_str(&t).expect("json");
        if v["type"] != "next" {
            continue;
        }
        let caption = v["payload"]["data"]["statusCreated"]["caption"]
            .as_str()
            .unwrap_or_default();
        if let Some(e) = caption
            .strip_prefix("bench-event-")
            .and_then(|e| e.parse().ok())
        {
            let _ = tx.send((e, at));
        }
    }
}
