//! HTTP load: the queries the clients send most, a closed loop for
//! throughput and an open loop for latency.
//!
//! The closed loop keeps `concurrency` requests in flight for the run and
//! counts answers. The open loop sends at a fixed rate whatever the server
//! does, and measures each request from the moment it was due, so a server
//! that falls behind shows its queueing in the percentiles instead of hiding
//! it by slowing the client down (coordinated omission).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ephemera::graphql::types::{IdKind, id as global};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Uri};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::time::Instant;

use crate::Opts;
use crate::cpu;
use crate::seed::{Bench, PARIS};
use crate::server::Server;

/// Signed-in viewers the requests rotate through.
const VIEWERS: i64 = 8;

/// One kind of request, as a few variants (viewers, authors) to rotate through.
pub struct Query {
    pub name: &'static str,
    pub bodies: Vec<Request>,
}

/// One request: its body and, when signed in, a bearer token.
#[derive(Clone)]
pub struct Request {
    pub body: Bytes,
    pub auth: Option<HeaderValue>,
}

/// What a query did over HTTP.
#[derive(Clone, Debug, Default)]
pub struct HttpResult {
    /// Answers per second with `concurrency` in flight.
    pub throughput: f64,
    /// The fixed rate of the open loop.
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Latency with `concurrency` in flight (the closed loop).
    pub closed_p50_ms: f64,
    pub closed_p99_ms: f64,
    /// CPU per answered request in the closed loop, in µs: the server's own
    /// and, on PostgreSQL, the database's.
    pub cpu_us: f64,
    /// The server's own part of it.
    pub server_cpu_us: f64,
    /// Requests that failed or answered with GraphQL errors.
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The open-loop rate of each query, fixed at the first size it ran at.
#[derive(Default)]
pub struct Rates(HashMap<&'static str, f64>);

/// The benchmark's queries, as the apps send them.
pub fn queries(bench: &Bench) -> Vec<Query> {
    let signed_in = |query: &str, vars: serde_json::Value, viewer: i64| Request {
        body: Bytes::from(json!({ "query": query, "variables": vars }).to_string()),
        auth: Some(
            HeaderValue::from_str(&format!("Bearer {}", bench.token(viewer)))
                .expect("token header"),
        ),
    };
    let viewers = 1..=VIEWERS;
    let (plat, plon) = PARIS;
    let (lat, lon) = (plat as f64 / 10.0, plon as f64 / 10.0);
    let bbox =
        json!({ "south": lat - 0.2, "north": lat + 0.3, "west": lon - 0.2, "east": lon + 0.3 });
    vec![
        Query {
            name: TYPENAME,
            bodies: vec![Request {
                body: Bytes::from_static(br#"{"query":"{ __typename }"}"#),
                auth: None,
            }],
        },
        Query {
            name: TRAY_NAME,
            bodies: viewers
                .clone()
                .map(|v| signed_in(TRAY, json!({}), v))
                .collect(),
        },
        Query {
            name: STATUSES_NAME,
            bodies: bench
                .status_authors(VIEWERS)
                .into_iter()
                .zip(viewers.clone())
                .map(|(author, v)| {
                    signed_in(STATUSES, json!({ "u": global(IdKind::User, author).0 }), v)
                })
                .collect(),
        },
        Query {
            name: "momentFeed(first: 20)",
            bodies: viewers
                .clone()
                .map(|v| signed_in(FEED, json!({}), v))
                .collect(),
        },
        Query {
            name: SEARCH_NAME,
            // One word that begins a few usernames, or two words one of
            // which every account has.
            bodies: viewers
                .clone()
                .map(|v| {
                    let text = if v % 2 == 1 {
                        format!("user{v}")
                    } else {
                        format!("User {v}")
                    };
                    signed_in(SEARCH, json!({ "t": text }), v)
                })
                .collect(),
        },
        Query {
            name: "mapMarkers(city, limit: 100)",
            bodies: viewers
                .map(|v| signed_in(MAP, json!({ "b": bbox }), v))
                .collect(),
        },
    ]
}

/// The floor query's name in the tables.
pub const TYPENAME: &str = "{ __typename }";
/// The tray page's name in the tables.
pub const TRAY_NAME: &str = "storyTray(first: 20)";
/// The people search's name in the tables.
pub const SEARCH_NAME: &str = "searchUsers(text, first: 20)";

const SEARCH: &str = "query($t: String!) { searchUsers(text: $t, first: 20) { edges { cursor node { \
    id username displayName } } pageInfo { hasNextPage endCursor } } }";

/// The per-author page's name in the tables.
pub const STATUSES_NAME: &str = "statuses(userId, first: 10)";

pub const TRAY: &str = "query { storyTray(first: 20) { edges { cursor node { \
    author { id username displayName } latestCreatedAt storyCount hasUnseen } } \
    pageInfo { hasNextPage endCursor } } }";

pub const STATUSES: &str = "query($u: ID!) { statuses(userId: $u, first: 10) { edges { cursor node { \
    id caption bgColor createdAt expiresAt viewerHasSeen media { id url width height } } } \
    pageInfo { hasNextPage endCursor } } }";

const FEED: &str = "query { momentFeed(first: 20) { edges { cursor node { \
    id caption latitude longitude createdAt expiresAt isJournaled likesCount viewerHasLiked \
    author { id username } media { url width height } location { id name } } } \
    pageInfo { hasNextPage endCursor } } }";

const MAP: &str = "query($b: BoundingBoxInput!) { mapMarkers(bbox: $b, limit: 100) { truncated markers { \
    __typename \
    ... on MomentPin { latitude longitude moment { id caption media { url } } } \
    ... on LocationPin { latitude longitude badgeCount location { id name } } } } }";

/// Sends requests to one server over kept-alive HTTP/1.1 connections, with
/// hyper's connection API and nothing on top: the load generator shares the
/// two cores with the server, so every µs it spends is one the server does
/// not get. (reqwest, with its pool, URL parsing and per-request header
/// maps, spent about as much CPU per request as the server did.)
#[derive(Clone)]
pub struct Client {
    addr: Arc<str>,
    host: HeaderValue,
    uri: Uri,
    idle: Arc<Mutex<Vec<SendRequest<Full<Bytes>>>>>,
}

impl Client {
    pub fn new(server: &Server) -> Self {
        Self::at(&server.addr)
    }

    /// A client of the GraphQL endpoint at `addr` (`host:port`, `/graphql`).
    pub fn at(addr: &str) -> Self {
        Self {
            addr: addr.into(),
            host: HeaderValue::from_str(addr).expect("host header"),
            uri: Uri::from_static("/graphql"),
            idle: Arc::default(),
        }
    }

    /// An idle connection, or a new one.
    async fn connection(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        loop {
            let Some(mut conn) = self.idle.lock().expect("idle connections").pop() else {
                break;
            };
            if conn.ready().await.is_ok() {
                return Ok(conn);
            }
        }
        let stream = tokio::net::TcpStream::connect(&*self.addr)
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (conn, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(driver);
        Ok(conn)
    }

    /// Sends one request; `Err` with what went wrong.
    async fn send(&self, req: &Request) -> Result<(), String> {
        let mut conn = self.connection().await?;
        let mut request = hyper::Request::new(Full::new(req.body.clone()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(auth) = &req.auth {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        let res = conn
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = res.status();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        self.idle.lock().expect("idle connections").push(conn);
        if !status.is_success() || body.windows(9).any(|w| w == b"\"errors\"") {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        Ok(())
    }
}

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram")
}

pub fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Counts of one loop.
pub struct Tally {
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Each request's time, in µs (the closed loop's).
    pub latency: Histogram<u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            ok: 0,
            errors: 0,
            first_error: None,
            latency: histogram(),
        }
    }
}

impl Tally {
    fn add(&mut self, r: Result<(), String>) {
        match r {
            Ok(()) => self.ok += 1,
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// Requests per second with `concurrency` always in flight, for `run`.
pub async fn closed_loop(
    client: &Client,
    query: &Query,
    concurrency: usize,
    run: Duration,
) -> Tally {
    let deadline = Instant::now() + run;
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let client = client.clone();
        let bodies = query.bodies.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut n = worker;
            while Instant::now() < deadline {
                let sent = Instant::now();
                let r = client.send(&bodies[n % bodies.len()]).await;
                let us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                tally.latency.saturating_record(us);
                tally.add(r);
                n += concurrency;
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for t in tasks {
        let t = t.await.expect("worker");
        total.ok += t.ok;
        total.errors += t.errors;
        total
            .latency
            .add(&t.latency)
            .expect("histograms of one shape");
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    total
}

/// Latency at `rate` requests per second for `run`, each measured from when
/// it was due.
pub async fn open_loop(
    client: &Client,
    query: &Query,
    rate: f64,
    run: Duration,
) -> (Histogram<u64>, Tally) {
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let started = Instant::now();
    let end = started + run;
    let latencies = Arc::new(Mutex::new(histogram()));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut tasks = Vec::new();
    let mut due = started;
    let mut n = 0usize;
    while due < end {
        while due <= Instant::now() && due < end {
            let (client, req) = (client.clone(), query.bodies[n % query.bodies.len()].clone());
            let (latencies, tally) = (latencies.clone(), tally.clone());
            let sent_due = due;
            tasks.push(tokio::spawn(async move {
                let r = client.send(&req).await;
                let us = u64::try_from(sent_due.elapsed().as_micros()).unwrap_or(u64::MAX);
                latencies.lock().expect("histogram").saturating_record(us);
                tally.lock().expect("tally").add(r);
            }));
            n += 1;
            due += interval;
        }
        tokio::time::sleep_until(due).await;
    }
    // Requests still out well after the run are cut off and counted as
    // errors (a server that far behind has failed the rate anyway).
    let cutoff = Instant::now() + Duration::from_secs(10);
    for mut t in tasks {
        if tokio::time::timeout_at(cutoff, &mut t).await.is_err() {
            t.abort();
            let mut tally = tally.lock().expect("tally");
            tally.add(Err("still unanswered 10 s after the run".into()));
        }
    }
    let h = latencies.lock().expect("histogram").clone();
    let t = std::mem::take(&mut *tally.lock().expect("tally"));
    (h, t)
}

/// The highest open-loop rate used: above it the load generator, spawning a
/// task (and, when behind, a connection) per request on the cores it shares
/// with the server, falls behind and fails requests itself (`{ __typename }`
/// at 30,000/s did). Only the floor query comes near it.
pub const MAX_OPEN_RATE: f64 = 10_000.0;

/// Throughput, then latency at a fixed rate (half the throughput first
/// measured for this query, unless told otherwise, and at most
/// [`MAX_OPEN_RATE`]).
///
/// The requests are sent from a single-threaded runtime on a thread of its
/// own: on two cores shared with the server, a multi-threaded load
/// generator spent a third of its CPU switching its own threads in and out.
pub async fn measure(server: &Server, query: &Query, opts: &Opts, rates: &mut Rates) -> HttpResult {
    on_load_thread(drive(server, query, opts, rates))
}

/// Runs `work` on a single-threaded runtime on a thread of its own (see
/// [`measure`]), waiting for it.
pub fn on_load_thread<T: Send>(work: impl Future<Output = T> + Send) -> T {
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("load runtime")
                        .block_on(work)
                })
                .join()
                .expect("load thread")
        })
    })
}

async fn drive(server: &Server, query: &Query, opts: &Opts, rates: &mut Rates) -> HttpResult {
    let client = Client::new(server);
    let run = opts.duration();
    // Warm up connections, caches and the database's buffers.
    closed_loop(&client, query, opts.concurrency, run / 4).await;
    let meter = cpu::Meter::start(vec![server.pid()], server.postgres);
    let closed = closed_loop(&client, query, opts.concurrency, run).await;
    let (cpu_us, server_cpu_us) = meter.micros_per(closed.ok);
    let throughput = closed.ok as f64 / run.as_secs_f64();
    let rate = *rates
        .0
        .entry(query.name)
        .or_insert((throughput * opts.rate_fraction).clamp(1.0, MAX_OPEN_RATE));
    let (latency, open) = open_loop(&client, query, rate, run).await;
    HttpResult {
        throughput,
        rate,
        p50_ms: ms(&latency, 0.5),
        p99_ms: ms(&latency, 0.99),
        closed_p50_ms: ms(&closed.latency, 0.5),
        closed_p99_ms: ms(&closed.latency, 0.99),
        cpu_us,
        server_cpu_us,
        errors: closed.errors + open.errors,
        first_error: closed.first_error.or(open.first_error),
    }
}
