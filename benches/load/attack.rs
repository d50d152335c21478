//! Load held under attack: the per-author page's throughput (closed loop,
//! as in [`crate::load`]) while (a) slow-body connections trickle request
//! bodies a byte at a time, (b) a sign-in flood sends wrong passwords
//! from many addresses at a fixed rate, (c) one account floods writes,
//! (d) one address floods resumes of `events` from the oldest cursor, and
//! (e) clients run the most expensive queries the limits let through, each
//! as a ratio to the page alone measured right before and right after it
//! (their mean: the machine's speed drifts between phases). The attackers
//! come from other loopback addresses (127.0.0.2 and up) than the load (127.0.0.1), as they would from other
//! hosts; the server runs with its default abuse limits.

use std::time::Duration;

use ephemera::graphql::types::{IdKind, id as global};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use crate::Opts;
use crate::load::{self, Client, Query};
use crate::seed::Bench;

/// What the page kept under each attack.
#[derive(Clone, Debug, Default)]
pub struct AttackResult {
    pub baseline: f64,
    pub slow_bodies: f64,
    pub slow_connections: usize,
    pub flood: f64,
    /// Sign-in attempts the flood sent, and how many were refused
    /// `RATE_LIMITED` without a password check.
    pub flood_sent: u64,
    pub flood_limited: u64,
    /// (c) the page while one account floods writes; writes sent, refused.
    pub writes: f64,
    pub writes_sent: u64,
    pub writes_limited: u64,
    /// (d) the page while one address floods resumes; resumes, refused.
    pub catch_ups: f64,
    pub catch_ups_sent: u64,
    pub catch_ups_limited: u64,
    /// (e) the page while max-priced legal queries run; how many were
    /// answered with data, how many refused as rate limited.
    pub heavy: f64,
    pub heavy_done: u64,
    pub heavy_limited: u64,
    /// The page alone, measured between the attacks: before slow bodies,
    /// sign-in flood, writes, resumes and heavy queries, and after the
    /// last. Attack `i` is compared with the mean of `alone[i]` and
    /// `alone[i + 1]`, the runs seconds before and after it, on a machine
    /// whose speed drifts.
    pub alone: [f64; 6],
    pub errors: u64,
}

impl AttackResult {
    /// The page alone around attack `i`: the mean of the runs before and
    /// after it.
    pub fn around(&self, i: usize) -> f64 {
        (self.alone[i] + self.alone[i + 1]) / 2.0
    }
}

/// Sends `body` as one request on a new connection from `source` (as a
/// script would); the answer, or nothing.
async fn one_request(addr: &str, source: u8, body: &str, auth: Option<&str>) -> Vec<u8> {
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let Ok(mut s) = connect_from(source, addr).await else {
        tokio::time::sleep(Duration::from_millis(10)).await;
        return Vec::new();
    };
    if s.write_all(request.as_bytes()).await.is_err() {
        return Vec::new();
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    answer
}

fn rate_limited(answer: &[u8]) -> bool {
    answer.windows(12).any(|w| w == b"RATE_LIMITED")
}

/// (c) One account's writes, as fast as they are answered, from `source`:
/// a post with an aliased second post, then a like; (sent, refused).
async fn write_flood(addr: String, source: u8, token: String, until: Instant) -> (u64, u64) {
    let (mut sent, mut limited) = (0, 0);
    let body = r#"{"query":"mutation { a: createStatus(input: { caption: \"flood\", audience: PUBLIC }) { id } b: createStatus(input: { caption: \"flood\", audience: PUBLIC }) { id } }"}"#;
    while Instant::now() < until {
        let answer = one_request(&addr, source, body, Some(&token)).await;
        sent += 2;
        if rate_limited(&answer) {
            limited += 2;
        }
    }
    (sent, limited)
}

/// (d) Resumes of `events` from `cursor` from `source`, one after another
/// on new websockets, each read for up to 200 events; (resumes, refused).
async fn catch_up_flood(addr: String, source: u8, cursor: String, until: Instant) -> (u64, u64) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let (mut sent, mut limited) = (0, 0);
    let subscribe = serde_json::json!({
        "id": "1", "type": "subscribe",
        "payload": { "query": "subscription($a: String) { events(after: $a) { cursor } }", "variables": { "a": cursor } }
    })
    .to_string();
    while Instant::now() < until {
        let Ok(stream) = connect_from(source, &addr).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok(mut request) = format!("ws://{addr}/graphql").into_client_request() else {
            return (sent, limited);
        };
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "graphql-transport-ws".parse().expect("header"),
        );
        let Ok((mut ws, _)) = tokio_tungstenite::client_async(request, stream).await else {
            continue;
        };
        let init = r#"{"type":"connection_init","payload":{}}"#;
        if ws.send(Message::Text(init.into())).await.is_err() {
            continue;
        }
        let _ = ws.next().await; // connection_ack
        if ws
            .send(Message::Text(subscribe.clone().into()))
            .await
            .is_err()
        {
            continue;
        }
        sent += 1;
        let mut read = 0;
        while read < 200 {
            let Ok(Some(Ok(Message::Text(t)))) =
                tokio::time::timeout(Duration::from_secs(5), ws.next()).await
            else {
                break;
            };
            if t.contains("RATE_LIMITED") {
                limited += 1;
                break;
            }
            read += 1;
        }
        let _ = ws.close(None).await;
    }
    (sent, limited)
}

/// The accounts the write flood and the max-priced queries come from: not
/// among the page's viewers, whose share of work they would spend.
const WRITER_ACCOUNT: i64 = 101;
const HEAVY_ACCOUNT: i64 = 100;

/// (e) The most expensive queries the limits let through, one after
/// another from `source`: a world map of 1,000 markers, and 100 statuses
/// by id with their authors and media; (answered with data, refused as
/// rate limited).
async fn heavy_queries(
    addr: String,
    source: u8,
    token: String,
    ids: Vec<i64>,
    until: Instant,
) -> (u64, u64) {
    let ids: Vec<String> = ids
        .iter()
        .map(|i| format!("\\\"{}\\\"", global(IdKind::Status, *i).0))
        .collect();
    let map = r#"{"query":"{ mapMarkers(bbox: { south: -90, west: -180, north: 90, east: 180 }, limit: 1000) { truncated markers { __typename ... on MomentPin { latitude longitude moment { id caption likesCount media { url } } } ... on LocationPin { badgeCount location { id name } } } } }"}"#.to_owned();
    let nodes = format!(
        r#"{{"query":"{{ nodes(ids: [{}]) {{ id ... on Status {{ caption createdAt viewerHasSeen author {{ id username displayName }} media {{ url width height }} }} }} }}"}}"#,
        ids.join(",")
    );
    let (mut done, mut limited) = (0, 0);
    while Instant::now() < until {
        for body in [&map, &nodes] {
            let answer = one_request(&addr, source, body, Some(&token)).await;
            if answer.windows(12).any(|w| w == b"RATE_LIMITED") {
                limited += 1;
            } else if answer.starts_with(b"HTTP/1.1 200") {
                done += 1;
            }
        }
    }
    (done, limited)
}

async fn connect_from(source: u8, addr: &str) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(
        format!("127.0.0.{source}:0")
            .parse()
            .expect("source address"),
    )?;
    socket.connect(addr.parse().expect("server address")).await
}

/// One slow-body connection: a head promising a large body, then a byte
/// every 200 ms until `until` (or the server gives up on it).
async fn trickle(addr: String, source: u8, until: Instant) {
    let Ok(mut s) = connect_from(source, &addr).await else {
        return;
    };
    let head = format!(
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{"
    );
    if s.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if s.write_all(b" ").await.is_err() {
            return;
        }
    }
}

/// One flooder: wrong sign-ins from its own address, one every `every`
/// (each on a new connection, as from a script), until `until`; returns
/// (sent, refused as rate limited).
async fn flood(addr: String, source: u8, every: Duration, until: Instant) -> (u64, u64) {
    let (mut sent, mut limited) = (0, 0);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while Instant::now() < until {
        tick.tick().await;
        // A different account each time, so that only the per-address
        // limit and the hashing gate stand in the way.
        let body = format!(
            r#"{{"query":"mutation {{ signIn(input: {{ username: \"user{}\", password: \"wrong-password\" }}) {{ token }} }}"}}"#,
            1 + (u64::from(source) * 1_000 + sent) % 10_000
        );
        let request = format!(
            "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let Ok(mut s) = connect_from(source, &addr).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if s.write_all(request.as_bytes()).await.is_err() {
            continue;
        }
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
        sent += 1;
        if answer.windows(12).any(|w| w == b"RATE_LIMITED") {
            limited += 1;
        }
    }
    (sent, limited)
}

/// Runs the three measurements against a fresh server.
pub async fn measure(bench: &Bench, opts: &Opts) -> AttackResult {
    let (slow, flooders) = (opts.attack_slow, opts.attack_flooders.max(1));
    // The log (d) resumes through, written before the server starts.
    bench.seed_events(20_000).await;
    let server = bench
        .serve(&[
            // The defaults a deployment has.
            ("EPHEMERA_AUTH_ATTEMPTS_PER_ADDRESS", "30"),
            ("EPHEMERA_AUTH_ATTEMPTS_BURST", "5"),
            ("EPHEMERA_MAX_CONNECTIONS_PER_ADDRESS", "256"),
            ("EPHEMERA_RATE_POSTS", "20/1m"),
            ("EPHEMERA_RATE_LIKES", "120/1m"),
            ("EPHEMERA_RATE_CATCHUP", "30/1m"),
            ("EPHEMERA_WORK_TIME_PER_CLIENT", "100ms"),
            ("EPHEMERA_WORK_TIME_BURST", "500ms"),
        ])
        .await;
    let query: Query = load::queries(bench)
        .into_iter()
        .find(|q| q.name == load::STATUSES_NAME)
        .expect("the per-author page");
    let client = Client::new(&server);
    let run = opts.duration();
    let rate = |t: &load::Tally| t.ok as f64 / run.as_secs_f64();
    let mut result = AttackResult::default();

    // Warm up, then the baseline.
    load::closed_loop(&client, &query, opts.concurrency, run / 2).await;
    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.baseline = rate(&t);

    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.alone[0] = rate(&t);
    // (a) Slow bodies: spread over source addresses so that the
    // per-address cap does not refuse them all before they start.
    let until = Instant::now() + run + Duration::from_secs(2);
    let trickles: Vec<_> = (0..slow)
        .map(|i| {
            let source = 2 + u8::try_from(i % 200).unwrap_or(0);
            tokio::spawn(trickle(server.addr.clone(), source, until))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.slow_bodies = rate(&t);
    result.slow_connections = slow;
    for t in trickles {
        t.abort();
    }

    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.alone[1] = rate(&t);
    // (b) A sign-in flood from `flooders` addresses, `attack_flood_rate`
    // attempts a second in all.
    let until = Instant::now() + run;
    let every = Duration::from_secs_f64(f64::from(flooders) / opts.attack_flood_rate.max(1.0));
    let floods: Vec<_> = (0..flooders)
        .map(|i| tokio::spawn(flood(server.addr.clone(), 2 + i, every, until)))
        .collect();
    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.flood = rate(&t);
    for f in floods {
        let (sent, limited) = f.await.unwrap_or_default();
        result.flood_sent += sent;
        result.flood_limited += limited;
    }

    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.alone[2] = rate(&t);
    // (c) One account floods writes, from its own address, eight at once.
    let until = Instant::now() + run;
    let token = bench.token(WRITER_ACCOUNT);
    let writers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(write_flood(server.addr.clone(), 50, token.clone(), until)))
        .collect();
    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.writes = rate(&t);
    for w in writers {
        let (sent, limited) = w.await.unwrap_or_default();
        result.writes_sent += sent;
        result.writes_limited += limited;
    }

    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.alone[3] = rate(&t);
    // (d) One address resumes from the oldest cursor over and over, 32
    // sockets at once, with the log holding 20,000 events.
    let oldest = bench.event_cursor(0, 0);
    let until = Instant::now() + run;
    let resumers: Vec<_> = (0..32)
        .map(|_| {
            tokio::spawn(catch_up_flood(
                server.addr.clone(),
                60,
                oldest.clone(),
                until,
            ))
        })
        .collect();
    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.catch_ups = rate(&t);
    for r in resumers {
        let (sent, limited) = r.await.unwrap_or_default();
        result.catch_ups_sent += sent;
        result.catch_ups_limited += limited;
    }

    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.alone[4] = rate(&t);
    // (e) Two clients run max-priced legal queries back to back.
    let until = Instant::now() + run;
    let ids = bench.status_ids(100).await;
    let heavy: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(heavy_queries(
                server.addr.clone(),
                70 + i,
                bench.token(HEAVY_ACCOUNT),
                ids.clone(),
                until,
            ))
        })
        .collect();
    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.heavy = rate(&t);
    for h in heavy {
        let (done, limited) = h.await.unwrap_or_default();
        result.heavy_done += done;
        result.heavy_limited += limited;
    }
    let t = load::closed_loop(&client, &query, opts.concurrency, run).await;
    result.errors += t.errors;
    result.alone[5] = rate(&t);
    server.stop().await;
    result
}
