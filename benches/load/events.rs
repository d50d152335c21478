//! Events across instances: three servers on PostgreSQL (one on SQLite,
//! which one instance owns) sharing the change log.
//!
//! - The change log's cost per instance: statements of its own pool
//!   (`ephemera_event_log_statements_total`: the reader's polls and
//!   subscribers' catch-ups) per second, idle and while statuses are posted
//!   at a fixed rate (1,000/s by default) through all the instances.
//! - Cross-instance delivery: N `statusCreated` subscribers spread over the
//!   instances, statuses posted through each in turn; the time from just
//!   before `createStatus` to each subscriber reading the `next` message.
//! - Posting throughput (closed loop, `createStatus` through all instances)
//!   with no subscriber, then with the N attached: the ratio.

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
    /// `createStatus` per second without and with the subscribers.
    pub posts_without: f64,
    pub posts_with: f64,
    pub errors: u64,
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

    // Idle: the readers poll.
    result.idle_log_per_s = log_rate(&servers, opts.duration(), async {}).await;

    // Throughput without subscribers.
    result.posts_without = closed_loop(bench, &servers, opts, &errors).await;

    // The subscribers, spread over the instances.
    let n = opts.subscribers.iter().copied().max().unwrap_or(0);
    result.subscribers = n;
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
        let mut open = 0;
        for s in &servers {
            open += s.metric("ephemera_subscribers").await as usize;
        }
        if subscribed.load(Ordering::SeqCst) >= n && open >= n {
            break;
        }
        assert!(Instant::now() < deadline, "subscribers did not all connect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Delivery across instances: each status posted through the next one.
    let http = reqwest::Client::new();
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("hist");
    let poster = format!("Bearer {}", bench.token(1));
    for event in 1..=EVENTS {
        let server = &servers[event as usize % instances];
        let sent = Instant::now();
        post(
            &http,
            &server.graphql_url(),
            &poster,
            &format!("bench-event-{}", 1_000_000 + event),
            &AtomicU64::new(0),
            &errors,
        )
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

    // Throughput with them attached (deliveries are drained, not timed).
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    result.posts_with = closed_loop(bench, &servers, opts, &errors).await;

    // The log's cost while statuses come at a fixed rate.
    let rate = if bench.db == Db::Postgres {
        1_000.0
    } else {
        200.0
    };
    result.rate_asked = rate;
    let posted = Arc::new(AtomicU64::new(0));
    result.loaded_log_per_s = log_rate(
        &servers,
        opts.duration(),
        open_loop(
            bench,
            &servers,
            rate,
            opts.duration(),
            posted.clone(),
            errors.clone(),
        ),
    )
    .await;
    result.rate_reached = posted.load(Ordering::Relaxed) as f64 / opts.seconds;
    result.errors = errors.load(Ordering::Relaxed);
    eprintln!("  {result:?}");

    for t in tasks {
        t.abort();
    }
    drain.abort();
    for s in servers {
        s.stop().await;
    }
    result
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

/// Posts a PUBLIC status through `url`; counts it in `done` or `errors`.
async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    caption: &str,
    done: &AtomicU64,
    errors: &AtomicU64,
) {
    let body = json!({
        "query": "mutation($c: String!) { createStatus(input: { caption: $c, audience: PUBLIC }) { id } }",
        "variables": { "c": caption },
    });
    let ok = match http
        .post(url)
        .header("authorization", token)
        .json(&body)
        .send()
        .await
    {
        Ok(r) => r
            .json::<Value>()
            .await
            .is_ok_and(|v| v.get("errors").is_none()),
        Err(_) => false,
    };
    if ok {
        done.fetch_add(1, Ordering::Relaxed);
    } else {
        errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// `createStatus` per second with `opts.concurrency` in flight, round the
/// instances, each request by one of as many posters.
async fn closed_loop(
    bench: &Bench,
    servers: &[Server],
    opts: &Opts,
    errors: &Arc<AtomicU64>,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + opts.duration();
    let mut workers = Vec::new();
    for w in 0..opts.concurrency {
        let token = format!("Bearer {}", bench.token(w as i64 + 2));
        let url = servers[w % servers.len()].graphql_url();
        let (done, errors) = (done.clone(), errors.clone());
        workers.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut i = 0u64;
            while Instant::now() < stop {
                i += 1;
                post(
                    &http,
                    &url,
                    &token,
                    &format!("load {w} {i}"),
                    &done,
                    &errors,
                )
                .await;
            }
        }));
    }
    let started = Instant::now();
    for w in workers {
        let _ = w.await;
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Posts `rate` statuses a second for `length`, round the instances, at most
/// 512 in flight; counts those that succeeded in `posted`.
async fn open_loop(
    bench: &Bench,
    servers: &[Server],
    rate: f64,
    length: Duration,
    posted: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) {
    let http = reqwest::Client::new();
    let in_flight = Arc::new(Semaphore::new(512));
    let urls: Vec<String> = servers.iter().map(Server::graphql_url).collect();
    let tokens: Vec<String> = (0..16)
        .map(|u| format!("Bearer {}", bench.token(u + 2)))
        .collect();
    let total = (rate * length.as_secs_f64()) as u64;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..total {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (http, posted, errors) = (http.clone(), posted.clone(), errors.clone());
        let url = urls[i as usize % urls.len()].clone();
        let token = tokens[i as usize % tokens.len()].clone();
        tasks.push(tokio::spawn(async move {
            post(&http, &url, &token, &format!("rate {i}"), &posted, &errors).await;
            drop(permit);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}
