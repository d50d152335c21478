//! Events across instances: three servers on PostgreSQL (one on SQLite,
//! which one instance owns) sharing the change log.
//!
//! - The change log's cost per instance: statements of its own pool
//!   (`ephemera_event_log_statements_total`: the reader's polls and
//!   subscribers' catch-ups) per second, idle and while statuses are posted
//!   at a fixed rate (1,000/s on PostgreSQL) through all the instances.
//! - Cross-instance delivery: N anonymous `statusCreated` subscribers spread
//!   over the instances, PUBLIC statuses posted through each in turn; the
//!   time from just before `createStatus` to each subscriber reading the
//!   `next` message.
//! - Posting throughput (closed loop, `createStatus` through all instances)
//!   with no subscriber, then with the N attached: first for posts they do
//!   not receive (FRIENDS statuses; the subscribers are anonymous), which is
//!   what attaching subscribers costs the write path; then for posts every
//!   one of them receives (PUBLIC), where the work is the deliveries
//!   (reported per second).
//! - The live tray: N signed-in subscribers of `events` (seeded accounts
//!   1..=N, each told its tray entries), posting throughput against the
//!   same posts with none attached (measured right before): FRIENDS posts
//!   (each reaches the poster's friends' trays), then PUBLIC ones (every
//!   subscriber's tray), with the tray events they were told per second.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use crate::Opts;
use crate::seed::{Bench, Db};
use crate::server::Server;
use crate::subs::{CONNECTING, Delivery, subscriber};

/// Statuses timed for the delivery latency.
const EVENTS: u32 = 20;

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct EventsResult {
    pub instances: usize,
    pub subscribers: usize,
    /// Log statements per second per instance, idle.
    pub idle_log_per_s: f64,
    /// The posting rate asked for and reached in the rate run.
    pub rate_asked: f64,
    pub rate_reached: f64,
    /// Log statements per second per instance during the rate run.
    pub loaded_log_per_s: f64,
    pub delivered: u64,
    pub expected: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// `createStatus` per second without subscribers, and with them attached
    /// for posts they do not receive.
    pub posts_without: f64,
    pub posts_with: f64,
    /// `createStatus` per second when every subscriber receives every post.
    pub posts_to_all: f64,
    /// The live tray: signed-in `events` subscribers.
    pub tray: TrayResult,
    pub errors: u64,
}

/// The live tray's cost to posting.
#[derive(Clone, Debug, Default)]
pub struct TrayResult {
    pub subscribers: usize,
    /// FRIENDS `createStatus` per second with none attached (before they
    /// attach, and again after they left), then with them.
    pub friends_without: f64,
    pub friends_without_after: f64,
    pub friends_with: f64,
    /// Tray events told per second during the FRIENDS run.
    pub friends_tray_events: f64,
    /// PUBLIC `createStatus` per second with them, and tray events per second.
    pub public_with: f64,
    pub public_tray_events: f64,
    /// CPU per FRIENDS post without subscribers (before they attach, after
    /// they left), then with them.
    pub cpu_without: PostCpu,
    pub cpu_without_after: PostCpu,
    pub cpu_with: PostCpu,
}

impl TrayResult {
    /// Posting with the subscribers against without them (before they
    /// attached: the run after they left has come out slower every time,
    /// whatever the build, so it is shown, not averaged in).
    pub fn ratio(&self) -> f64 {
        self.friends_with / self.friends_without.max(f64::MIN_POSITIVE)
    }
}

/// Microseconds of CPU per posted status, by whose they were: what a post
/// costs the server side, apart from the harness that shares the cores.
#[derive(Clone, Copy, Debug, Default)]
pub struct PostCpu {
    /// The ephemera instances together.
    pub servers: f64,
    /// Every `postgres` process (zero on SQLite).
    pub database: f64,
    /// This harness: the posting clients and, with them, the subscribers.
    pub harness: f64,
    /// SQL statements the instances ran per post (their pools' and the
    /// change log's: the posts', the readers' and any catch-up's), a count
    /// that does not move with the machine's speed.
    pub statements: f64,
}

impl PostCpu {
    /// The server side's: the instances' and the database's.
    pub fn server_side(&self) -> f64 {
        self.servers + self.database
    }
}

/// Posting throughput through `poster` for `audience`, with what each post
/// cost in CPU on each side. With `EPHEMERA_BENCH_PERF` set to a folder,
/// the machine is sampled by `perf record -g` while it posts, into
/// `<folder>/<phase>.data` (a server build with frame pointers gives the
/// call graphs: see docs/benchmarks.md).
async fn metered(
    opts: &Opts,
    servers: &[Server],
    poster: &Poster<'_>,
    audience: &str,
    phase: &str,
) -> (f64, PostCpu) {
    let statements = || async {
        let mut n = 0.0;
        for s in servers {
            n += s.metric("ephemera_db_statements_total").await;
            n += s.metric("ephemera_event_log_statements_total").await;
        }
        n
    };
    let before = statements().await;
    let instances = meter(servers);
    let harness = crate::cpu::Meter::start(vec![std::process::id()], false);
    let started = Instant::now();
    let perf = profile(phase);
    let rate = poster.closed_loop(opts, audience).await;
    if let Some(mut perf) = perf {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status();
        let _ = perf.wait();
    }
    let posts = (rate * started.elapsed().as_secs_f64()).round() as u64;
    let (all, servers_cpu) = instances.micros_per(posts);
    let (harness, _) = harness.micros_per(posts);
    let cpu = PostCpu {
        servers: servers_cpu,
        database: all - servers_cpu,
        harness,
        statements: (statements().await - before) / posts.max(1) as f64,
    };
    (rate, cpu)
}

/// Runs every step on `bench`'s database.
pub async fn measure(bench: &Bench, opts: &Opts) -> EventsResult {
    let instances = match bench.db {
        Db::Postgres => 3,
        Db::Sqlite => 1,
    };
    let mut servers = Vec::new();
    for _ in 0..instances {
        servers.push(bench.serve(&[]).await);
    }
    let mut result = EventsResult {
        instances,
        ..EventsResult::default()
    };
    let errors = Arc::new(AtomicU64::new(0));
    let poster = Poster {
        bench,
        urls: servers.iter().map(Server::graphql_url).collect(),
        errors: errors.clone(),
        next: AtomicU64::new(0),
    };

    let n = opts.subscribers.iter().copied().max().unwrap_or(0);
    result.subscribers = n;
    // `--skip delivery` leaves out all but the live tray.
    if opts.runs("delivery") {
        // Idle: the readers poll.
        result.idle_log_per_s = log_rate(&servers, opts.duration(), async {}).await;

        // At a fixed rate: what the readers read then.
        let rate = if bench.db == Db::Postgres {
            1_000.0
        } else {
            200.0
        };
        result.rate_asked = rate;
        let posted = AtomicU64::new(0);
        result.loaded_log_per_s = log_rate(
            &servers,
            opts.duration(),
            poster.open_loop(rate, opts.duration(), &posted),
        )
        .await;
        result.rate_reached = posted.load(Ordering::Relaxed) as f64 / opts.seconds;

        result.posts_without = poster.closed_loop(opts, "FRIENDS").await;

        // The subscribers, spread over the instances.
        let (tx, mut rx) = mpsc::unbounded_channel::<Delivery>();
        let subscribed = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(CONNECTING));
        let mut tasks = Vec::new();
        for i in 0..n {
            let permit = gate.clone().acquire_owned().await.expect("gate");
            let url = format!("ws://{}/graphql", servers[i % instances].addr);
            let (tx, subscribed) = (tx.clone(), subscribed.clone());
            tasks.push(tokio::spawn(async move {
                subscriber(&url, tx, subscribed, permit).await;
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if subscribed.load(Ordering::SeqCst) >= n && open_on(&servers).await >= n {
                break;
            }
            assert!(Instant::now() < deadline, "subscribers did not all connect");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Delivery across instances: each status posted through the next one.
        let http = reqwest::Client::new();
        let mut latencies = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("hist");
        let token = format!("Bearer {}", bench.token(1));
        for event in 1..=EVENTS {
            let url = &poster.urls[event as usize % instances];
            let sent = Instant::now();
            let caption = format!("bench-event-{}", 1_000_000 + event);
            poster
                .post(&http, url, &token, &caption, "PUBLIC", &AtomicU64::new(0))
                .await;
            let deadline = sent + Duration::from_secs(30);
            let mut got = 0;
            while got < n {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some((e, at))) if e == 1_000_000 + event => {
                        got += 1;
                        let us = u64::try_from((at - sent).as_micros()).unwrap_or(u64::MAX);
                        latencies.saturating_record(us);
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            result.delivered += got as u64;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        result.expected = n as u64 * u64::from(EVENTS);
        let ms = |q: f64| latencies.value_at_quantile(q) as f64 / 1000.0;
        result.p50_ms = ms(0.5);
        result.p99_ms = ms(0.99);
        result.max_ms = latencies.max() as f64 / 1000.0;

        // Throughput with them attached (what they receive is drained, not timed).
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        result.posts_with = poster.closed_loop(opts, "FRIENDS").await;
        result.posts_to_all = poster.closed_loop(opts, "PUBLIC").await;
        for t in tasks {
            t.abort();
        }
        drain.abort();
    }
    result.tray = tray(bench, opts, &servers, &poster, n).await;
    result.errors = errors.load(Ordering::Relaxed);
    eprintln!("  {result:?}");

    for s in servers {
        s.stop().await;
    }
    result
}

/// The live tray's step: `n` signed-in `events` subscribers (at most the
/// seeded accounts), spread over the instances.
async fn tray(
    bench: &Bench,
    opts: &Opts,
    servers: &[Server],
    poster: &Poster<'_>,
    n: usize,
) -> TrayResult {
    until_left(servers, "anonymous").await;
    let n = n.min(usize::try_from(bench.users).unwrap_or(usize::MAX));
    settle(servers).await;
    let (friends_without, cpu_without) = metered(opts, servers, poster, "FRIENDS", "without").await;
    let mut result = TrayResult {
        subscribers: n,
        friends_without,
        cpu_without,
        ..TrayResult::default()
    };
    let told = Arc::new(AtomicU64::new(0));
    let subscribed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let mut tasks = Vec::new();
    for i in 0..n {
        let permit = gate.clone().acquire_owned().await.expect("gate");
        let url = format!("ws://{}/graphql", servers[i % servers.len()].addr);
        let token = bench.token(i as i64 + 1);
        let (told, subscribed) = (told.clone(), subscribed.clone());
        tasks.push(tokio::spawn(async move {
            tray_subscriber(&url, &token, told, subscribed, permit, phone(i)).await;
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while subscribed.load(Ordering::SeqCst) < n || open_on(servers).await < n {
        assert!(
            Instant::now() < deadline,
            "tray subscribers did not all connect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What a subscription costs once is paid before measuring, as on a
    // server that has had its subscribers a while: a few seconds of posts
    // make each reader read the new subscribers' friends into its circles
    // (about 0.5 s of PostgreSQL's CPU and more of the instances' for
    // 10,000) and plan its statements on its connection.
    poster
        .open_loop(200.0, Duration::from_secs(3), &AtomicU64::new(0))
        .await;
    settle(servers).await;
    let rate = |before: u64, started: Instant| {
        (told.load(Ordering::Relaxed) - before) as f64 / started.elapsed().as_secs_f64()
    };
    let (before, started) = (told.load(Ordering::Relaxed), Instant::now());
    (result.friends_with, result.cpu_with) =
        metered(opts, servers, poster, "FRIENDS", "with").await;
    result.friends_tray_events = rate(before, started);
    let (before, started) = (told.load(Ordering::Relaxed), Instant::now());
    result.public_with = poster.closed_loop(opts, "PUBLIC").await;
    result.public_tray_events = rate(before, started);
    for t in tasks {
        t.abort();
    }
    // Without them again, once they have all left.
    until_left(servers, "tray").await;
    settle(servers).await;
    (result.friends_without_after, result.cpu_without_after) =
        metered(opts, servers, poster, "FRIENDS", "after").await;
    result
}

/// `perf record -g` of the whole machine (the instances, PostgreSQL and
/// the harness, told apart by command name) into
/// `$EPHEMERA_BENCH_PERF/<phase>.data`, if that is set (stopped by SIGINT).
fn profile(phase: &str) -> Option<std::process::Child> {
    let dir = std::env::var_os("EPHEMERA_BENCH_PERF")?;
    let out = std::path::Path::new(&dir).join(format!("{phase}.data"));
    std::process::Command::new("perf")
        .args(["record", "-q", "-F", "499", "-g", "-a", "-o"])
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

/// CPU from now on of the instances and, on PostgreSQL, the database.
fn meter(servers: &[Server]) -> crate::cpu::Meter {
    let pids: Vec<u32> = servers.iter().map(Server::pid).collect();
    crate::cpu::Meter::start(pids, servers.iter().any(|s| s.postgres))
}

/// Subscriptions open on `servers`, all together.
async fn open_on(servers: &[Server]) -> usize {
    let mut open = 0;
    for s in servers {
        open += s.metric("ephemera_subscribers").await as usize;
    }
    open
}

/// Waits (a minute at most) until no subscription is open on `servers`
/// (`who`: which subscribers, for the message if they do not leave).
async fn until_left(servers: &[Server], who: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_on(servers).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the {who} subscribers did not leave"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (a minute at most) until the instances and the database have
/// stopped working on what came before (a reader's backlog, connections
/// opened or closed, autovacuum): under a tenth of a core for a second.
async fn settle(servers: &[Server]) {
    for _ in 0..60 {
        let meter = meter(servers);
        tokio::time::sleep(Duration::from_secs(1)).await;
        if meter.micros_per(1).0 < 100_000.0 {
            return;
        }
    }
}

/// The loopback address subscriber `i` of the live tray comes from
/// (127.1.0.1 and up): each is a phone of its own, so the server's
/// per-client pacing of catch-ups applies per subscriber, as it would.
fn phone(i: usize) -> std::net::Ipv4Addr {
    let i = u32::try_from(i).expect("subscriber index");
    std::net::Ipv4Addr::from(0x7f01_0001 + i / 250 * 256 + i % 250)
}

/// One signed-in subscriber of `events` that selects what a live tray
/// needs, from its own address; counts the tray events it is told.
async fn tray_subscriber(
    url: &str,
    token: &str,
    told: Arc<AtomicU64>,
    subscribed: Arc<AtomicUsize>,
    permit: tokio::sync::OwnedSemaphorePermit,
    source: std::net::Ipv4Addr,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    const TRAY: &str = "subscription { events { __typename cursor \
        ... on StatusCreatedEvent { status { id } } \
        ... on StoryTrayEntryChangedEvent { entry { id latestCreatedAt storyCount hasUnseen } } \
        ... on StoryTrayEntryRemovedEvent { entryId } } }";
    let mut socket = crate::subs::connect_from(url, Some(source)).await;
    let send = |v: Value| Message::Text(v.to_string().into());
    let init = json!({ "type": "connection_init", "payload": { "authorization": format!("Bearer {token}") } });
    socket.send(send(init)).await.expect("connection_init");
    while let Some(Ok(msg)) = socket.next().await {
        if let Message::Text(t) = msg
            && serde_json::from_str::<Value>(&t).is_ok_and(|v| v["type"] == "connection_ack")
        {
            break;
        }
    }
    socket
        .send(send(
            json!({ "id": "1", "type": "subscribe", "payload": { "query": TRAY } }),
        ))
        .await
        .expect("subscribe");
    subscribed.fetch_add(1, Ordering::SeqCst);
    drop(permit);
    while let Some(Ok(msg)) = socket.next().await {
        let Message::Text(t) = msg else { continue };
        if t.contains("StoryTrayEntry") {
            told.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The change log's statements per second per instance while `during` runs
/// (at least `wait`).
async fn log_rate(servers: &[Server], wait: Duration, during: impl Future<Output = ()>) -> f64 {
    let count = || async {
        let mut total = 0.0;
        for s in servers {
            total += s.metric("ephemera_event_log_statements_total").await;
        }
        total
    };
    let before = count().await;
    let started = Instant::now();
    let ((), ()) = tokio::join!(during, tokio::time::sleep(wait));
    let elapsed = started.elapsed().as_secs_f64();
    (count().await - before) / elapsed / servers.len() as f64
}

/// Posts statuses through the instances, each as the next of the seeded
/// users from 2 on, round them all: one account may hold only so many live
/// statuses (`EPHEMERA_STATUS_MAX_LIVE`), as a real crowd of posters does.
struct Poster<'a> {
    bench: &'a Bench,
    urls: Vec<String>,
    errors: Arc<AtomicU64>,
    next: AtomicU64,
}

impl Poster<'_> {
    /// The next poster's bearer token.
    fn token(&self) -> String {
        let others = self.bench.users.saturating_sub(1).max(1);
        let n = self.next.fetch_add(1, Ordering::Relaxed) % others;
        format!(
            "Bearer {}",
            self.bench.token(i64::try_from(n).unwrap_or(0) + 2)
        )
    }

    /// Posts a status for `audience` through `url`; counts it in `done`, or
    /// in the errors.
    async fn post(
        &self,
        http: &reqwest::Client,
        url: &str,
        token: &str,
        caption: &str,
        audience: &str,
        done: &AtomicU64,
    ) {
        let body = json!({
            "query": "mutation($c: String!, $a: StatusAudience!) { createStatus(input: { caption: $c, audience: $a }) { id } }",
            "variables": { "c": caption, "a": audience },
        });
        let sent = http
            .post(url)
            .header("authorization", token)
            .json(&body)
            .send()
            .await;
        let ok = match sent {
            Ok(r) => r
                .json::<Value>()
                .await
                .is_ok_and(|v| v.get("errors").is_none()),
            Err(_) => false,
        };
        if ok {
            done.fetch_add(1, Ordering::Relaxed);
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `createStatus` per second with `opts.concurrency` in flight, round
    /// the instances.
    async fn closed_loop(&self, opts: &Opts, audience: &str) -> f64 {
        let done = AtomicU64::new(0);
        let stop = Instant::now() + opts.duration();
        let started = Instant::now();
        let workers = (0..opts.concurrency).map(|w| {
            let (url, done) = (&self.urls[w % self.urls.len()], &done);
            async move {
                let http = reqwest::Client::new();
                let mut i = 0u64;
                while Instant::now() < stop {
                    i += 1;
                    let caption = format!("load {w} {i}");
                    let token = self.token();
                    self.post(&http, url, &token, &caption, audience, done)
                        .await;
                }
            }
        });
        futures_util::future::join_all(workers).await;
        done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
    }

    /// Posts `rate` FRIENDS statuses a second for `length`, round the
    /// instances, at most 512 in flight (one more is an error); counts those
    /// that succeeded in `posted`.
    async fn open_loop(&self, rate: f64, length: Duration, posted: &AtomicU64) {
        let http = reqwest::Client::new();
        let in_flight = Semaphore::new(512);
        let total = (rate * length.as_secs_f64()) as u64;
        let start = Instant::now();
        let mut sends = futures_util::stream::FuturesUnordered::new();
        for i in 0..total {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            // Keep the sends moving while waiting for the next one's time.
            while Instant::now() < due {
                use futures_util::StreamExt;
                tokio::select! {
                    _ = sends.next(), if !sends.is_empty() => {}
                    () = tokio::time::sleep_until(due) => {}
                }
            }
            let Ok(permit) = in_flight.try_acquire() else {
                self.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let (http, url, token) = (
                &http,
                &self.urls[i as usize % self.urls.len()],
                self.token(),
            );
            sends.push(async move {
                self.post(http, url, &token, &format!("rate {i}"), "FRIENDS", posted)
                    .await;
                drop(permit);
            });
        }
        use futures_util::StreamExt;
        while sends.next().await.is_some() {}
    }
}
