//! Load held under attack: the per-author page's throughput (closed loop,
//! as in [`crate::load`]) while (a) slow-body connections trickle request
//! bodies a byte at a time and (b) a sign-in flood sends wrong passwords
//! from many addresses at a fixed rate, each as a ratio to the
//! same run without them. The attackers come from other loopback addresses
//! (127.0.0.2 and up) than the load (127.0.0.1), as they would from other
//! hosts; the server runs with its default abuse limits.

use std::time::Duration;

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
    pub errors: u64,
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
    let server = bench
        .serve(&[
            // The defaults a deployment has.
            ("EPHEMERA_AUTH_ATTEMPTS_PER_ADDRESS", "30"),
            ("EPHEMERA_MAX_CONNECTIONS_PER_ADDRESS", "256"),
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
    server.stop().await;
    result
}
