//! The results, printed as Markdown tables headed by the machine, the date
//! and the command, ready to paste into the README.

use std::fmt::Write;

use crate::Opts;
use crate::attack::AttackResult;
use crate::events::EventsResult;
use crate::floor::FloorResult;
use crate::load::{HttpResult, TYPENAME};
use crate::peer::PeerResult;
use crate::plain::SqlResult;
use crate::purge::PurgeResult;
use crate::seed::{Db, Seeded};
use crate::server::Server;
use crate::subs::SubResult;

struct Start {
    db: Db,
    size: u64,
    seeded: Option<Seeded>,
    ready_ms: f64,
    idle_rss_kib: u64,
    after_load_kib: u64,
    after_load_anon_kib: u64,
}

struct Http {
    db: Db,
    size: u64,
    query: &'static str,
    http: HttpResult,
    sql: Option<SqlResult>,
}

/// Everything measured in one run.
#[derive(Default)]
pub struct Report {
    starts: Vec<Start>,
    http: Vec<Http>,
    subs: Vec<(Db, Vec<SubResult>)>,
    events: Vec<(Db, EventsResult)>,
    purge: Vec<(Db, PurgeResult)>,
    attack: Vec<(Db, AttackResult)>,
    floor: Vec<FloorResult>,
    peer: Vec<PeerResult>,
    pending_seed: Option<(Db, u64, Seeded)>,
}

fn mib(kib: u64) -> String {
    let m = kib as f64 / 1024.0;
    format!("{m:.1}")
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "–".into()
    }
}

fn size(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

impl Report {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn seeded(&mut self, db: Db, size: u64, seeded: Seeded) {
        self.pending_seed = Some((db, size, seeded));
    }

    pub fn server_start(&mut self, db: Db, size: u64, server: &Server) {
        let seeded = self
            .pending_seed
            .take()
            .filter(|(d, s, _)| *d == db && *s == size)
            .map(|(_, _, s)| s);
        eprintln!(
            "  ready in {:.1} ms, idle RSS {} MiB",
            server.ready.as_secs_f64() * 1000.0,
            mib(server.idle_rss_kib)
        );
        self.starts.push(Start {
            db,
            size,
            seeded,
            ready_ms: server.ready.as_secs_f64() * 1000.0,
            idle_rss_kib: server.idle_rss_kib,
            after_load_kib: 0,
            after_load_anon_kib: 0,
        });
    }

    pub fn server_after_load(&mut self, db: Db, size: u64, rss_kib: u64, anon_kib: u64) {
        if let Some(s) = self
            .starts
            .iter_mut()
            .rev()
            .find(|s| s.db == db && s.size == size)
        {
            s.after_load_kib = rss_kib;
            s.after_load_anon_kib = anon_kib;
        }
    }

    pub fn http(
        &mut self,
        db: Db,
        size: u64,
        query: &'static str,
        http: HttpResult,
        sql: Option<SqlResult>,
    ) {
        eprintln!("  {http:?}\n  {sql:?}");
        self.http.push(Http {
            db,
            size,
            query,
            http,
            sql,
        });
    }

    pub fn peer(&mut self, results: Vec<PeerResult>) {
        self.peer.extend(results);
    }

    pub fn floor(&mut self, results: Vec<FloorResult>) {
        for r in &results {
            eprintln!("  floor of {}: {:.1} µs", r.query, r.us_per_request);
        }
        self.floor = results;
    }

    pub fn events(&mut self, db: Db, result: EventsResult) {
        self.events.push((db, result));
    }

    pub fn subs(&mut self, db: Db, results: Vec<SubResult>) {
        self.subs.push((db, results));
    }

    pub fn attack(&mut self, db: Db, result: AttackResult) {
        eprintln!("  {result:?}");
        self.attack.push((db, result));
    }

    pub fn purge(&mut self, db: Db, result: PurgeResult) {
        eprintln!("  {result:?}");
        self.purge.push((db, result));
    }

    /// The tables.
    pub fn render(&self, opts: &Opts) -> String {
        let mut out = String::new();
        let args: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| a != "--bench")
            .collect();
        let _ = writeln!(
            out,
            "\n## ephemera benchmark, {}\n\n{}; command: `scripts/bench{}{}`; \
             {} s per measurement, {} requests in flight, open-loop rate {} × the first size's throughput.\n",
            chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
            machine(),
            if args.is_empty() { "" } else { " " },
            args.join(" "),
            opts.seconds,
            opts.concurrency,
            opts.rate_fraction,
        );

        out.push_str(
            "### Queries over HTTP, and the same SQL without the server\n\n\
             The first req/s, p50 and p99 are with the requests in flight (a closed loop); \
             the last p50 and p99 are at the fixed open-loop rate.\n\n\
             | db | size | query | req/s | p50 ms | p99 ms | SQL replay req/s | ratio | pgbench tps | ratio | CPU µs/req | of it server | SQL replay CPU µs/req | rate req/s | p50 ms | p99 ms | stmts | errors |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for h in &self.http {
            let (replay, pg, stmts) = match &h.sql {
                Some(s) => (
                    format!("{:.0}", s.throughput),
                    s.pgbench_tps,
                    s.statements.to_string(),
                ),
                None => ("–".into(), None, "0".into()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | `{}` | {:.0} | {:.2} | {:.2} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.0} | {:.2} | {:.2} | {} | {} |",
                h.db,
                size(h.size),
                h.query,
                h.http.throughput,
                h.http.closed_p50_ms,
                h.http.closed_p99_ms,
                replay,
                h.sql
                    .as_ref()
                    .map_or("–".into(), |s| ratio(h.http.throughput, s.throughput)),
                pg.map_or("–".into(), |t| format!("{t:.0}")),
                pg.map_or("–".into(), |t| ratio(h.http.throughput, t)),
                h.http.cpu_us,
                h.http.server_cpu_us,
                h.sql
                    .as_ref()
                    .map_or("–".into(), |s| format!("{:.0}", s.cpu_us)),
                h.http.rate,
                h.http.p50_ms,
                h.http.p99_ms,
                stmts,
                h.http.errors + h.sql.as_ref().map_or(0, |s| s.errors),
            );
        }

        self.render_peer(&mut out);
        self.render_floor(&mut out);

        if opts.sizes.len() > 1 {
            let (small, large) = (opts.sizes[0], opts.sizes[opts.sizes.len() - 1]);
            let _ = writeln!(
                out,
                "\n### Growth: {} against {} (same open-loop rate)\n\n\
                 | db | query | p50 ms | p50 ms | × | p99 ms | p99 ms | × | req/s | req/s | × |\n\
                 |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                size(large),
                size(small)
            );
            for a in self.http.iter().filter(|h| h.size == small) {
                let Some(b) = self
                    .http
                    .iter()
                    .find(|h| h.size == large && h.db == a.db && h.query == a.query)
                else {
                    continue;
                };
                let (x, y) = (&a.http, &b.http);
                let _ = writeln!(
                    out,
                    "| {} | `{}` | {:.2} | {:.2} | {} | {:.2} | {:.2} | {} | {:.0} | {:.0} | {} |",
                    a.db,
                    a.query,
                    x.p50_ms,
                    y.p50_ms,
                    ratio(y.p50_ms, x.p50_ms),
                    x.p99_ms,
                    y.p99_ms,
                    ratio(y.p99_ms, x.p99_ms),
                    x.throughput,
                    y.throughput,
                    ratio(y.throughput, x.throughput),
                );
            }
        }

        out.push_str(
            "\n### Start-up and memory\n\n\
             | db | size | seeding s | ready ms | idle RSS MiB | RSS after load MiB | of it anonymous MiB |\n\
             |---|---:|---:|---:|---:|---:|---:|\n",
        );
        for s in &self.starts {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {} | {} | {} |",
                s.db,
                size(s.size),
                s.seeded.map_or("–".into(), |x| format!("{:.1}", x.seconds)),
                s.ready_ms,
                mib(s.idle_rss_kib),
                mib(s.after_load_kib),
                mib(s.after_load_anon_kib),
            );
        }

        out.push_str(
            "\n### Subscriptions (`statusCreated`, graphql-transport-ws)\n\n\
             | db | subscribers | RSS per idle subscriber KiB | delivered | p50 ms | p99 ms | max ms |\n\
             |---|---:|---:|---:|---:|---:|---:|\n",
        );
        for (db, results) in &self.subs {
            for r in results {
                let _ = writeln!(
                    out,
                    "| {db} | {} | {:.1} | {}/{} | {:.1} | {:.1} | {:.1} |",
                    r.subscribers,
                    r.rss_per_subscriber_kib,
                    r.delivered,
                    r.expected,
                    r.p50_ms,
                    r.p99_ms,
                    r.max_ms
                );
            }
        }

        out.push_str(
            "\n### Events across instances (the change log)\n\n\
             | db | instances | log statements/s per instance, idle | posting rate asked / reached | log statements/s per instance at that rate | subscribers | delivered | p50 ms | p99 ms | max ms | createStatus/s without subscribers | with them (posts they do not receive) | with / without | createStatus/s each to every subscriber | deliveries/s |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (db, e) in &self.events {
            let _ = writeln!(
                out,
                "| {db} | {} | {:.1} | {:.0} / {:.0} | {:.1} | {} | {}/{} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} |",
                e.instances,
                e.idle_log_per_s,
                e.rate_asked,
                e.rate_reached,
                e.loaded_log_per_s,
                e.subscribers,
                e.delivered,
                e.expected,
                e.p50_ms,
                e.p99_ms,
                e.max_ms,
                e.posts_without,
                e.posts_with,
                e.posts_with / e.posts_without.max(f64::MIN_POSITIVE),
                e.posts_to_all,
                e.posts_to_all * e.subscribers as f64,
            );
        }
        let _ = write!(
            out,
            "\n### The live tray: signed-in `events` subscribers, each told its tray entries\n\n\
             Posts by the seeded accounts in turn, {} friends each; \"without\" is measured right before the subscribers attach (with / without is against it) and again after they left, each once the instances and the database are quiet.\n\n\
             | db | instances | subscribers | FRIENDS createStatus/s without (before, after) | with them | with / without | tray events told/s | PUBLIC createStatus/s with them (every tray) | tray events told/s |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            opts.friends
        );
        for (db, e) in &self.events {
            let t = &e.tray;
            let _ = writeln!(
                out,
                "| {db} | {} | {} | {:.0}, {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} |",
                e.instances,
                t.subscribers,
                t.friends_without,
                t.friends_without_after,
                t.friends_with,
                t.ratio(),
                t.friends_tray_events,
                t.public_with,
                t.public_tray_events,
            );
        }
        out.push_str(
            "\nCPU per FRIENDS post, µs, without the subscribers (before they attach) → with them (read from `/proc`; \
             the server side is the instances and PostgreSQL, the harness its posting clients and subscribers; \
             server-side without / with is the posting ratio the server alone would reach on cores of its own):\n\n\
             | db | ephemera | PostgreSQL | harness | server side | server side without / with | SQL statements a post |\n\
             |---|---:|---:|---:|---:|---:|---:|\n",
        );
        for (db, e) in &self.events {
            let (a, b) = (&e.tray.cpu_without, &e.tray.cpu_with);
            let _ = writeln!(
                out,
                "| {db} | {:.0} → {:.0} | {:.0} → {:.0} | {:.0} → {:.0} | {:.0} → {:.0} | {:.2} | {:.2} → {:.2} |",
                a.servers,
                b.servers,
                a.database,
                b.database,
                a.harness,
                b.harness,
                a.server_side(),
                b.server_side(),
                a.server_side() / b.server_side().max(f64::MIN_POSITIVE),
                a.statements,
                b.statements,
            );
        }

        out.push_str(
            "\n### Purge of expired statuses, each with a media row\n\n\
             | db | rows | batch | job workers | purge job rows/s | outbox rows | plain batched DELETE rows/s | job / plain |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (db, p) in &self.purge {
            let _ = writeln!(
                out,
                "| {db} | {} | {} | {} | {:.0} | {} | {:.0} | {} |",
                size(p.rows),
                p.batch,
                p.workers,
                p.job_rows_per_s,
                p.outbox,
                p.plain_rows_per_s,
                ratio(p.job_rows_per_s, p.plain_rows_per_s),
            );
        }
        if !self.attack.is_empty() {
            out.push_str(
                "\n### Load held under attack: `statuses(userId, first: 10)`\n\n\
                 Each ratio is to the page alone around that attack: the mean of the runs right before and right after it.\n\n\
                 | db | alone req/s | with slow-body connections | ratio | with a sign-in flood | ratio | flood attempts (rate limited) |\n\
                 |---|---:|---:|---:|---:|---:|---:|\n",
            );
            for (db, a) in &self.attack {
                let _ = writeln!(
                    out,
                    "| {db} | {:.0} | {:.0} ({}) | {} | {:.0} | {} | {} ({}) |",
                    a.baseline,
                    a.slow_bodies,
                    a.slow_connections,
                    ratio(a.slow_bodies, a.around(0)),
                    a.flood,
                    ratio(a.flood, a.around(1)),
                    a.flood_sent,
                    a.flood_limited,
                );
            }
            out.push_str(
                "\n| db | alone req/s | one account flooding writes | ratio | writes (refused) | one address flooding resumes | ratio | resumes (refused) | max-priced queries | ratio | answered (refused) |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            );
            for (db, a) in &self.attack {
                let _ = writeln!(
                    out,
                    "| {db} | {:.0} | {:.0} | {} | {} ({}) | {:.0} | {} | {} ({}) | {:.0} | {} | {} ({}) |",
                    a.baseline,
                    a.writes,
                    ratio(a.writes, a.around(2)),
                    a.writes_sent,
                    a.writes_limited,
                    a.catch_ups,
                    ratio(a.catch_ups, a.around(3)),
                    a.catch_ups_sent,
                    a.catch_ups_limited,
                    a.heavy,
                    ratio(a.heavy, a.around(4)),
                    a.heavy_done,
                    a.heavy_limited,
                );
            }
        }
        out
    }

    /// What the pages could reach at best on this stack: their SQL against
    /// their SQL plus async-graphql's execution floor plus the HTTP floor
    /// (the server's CPU for `{ __typename }` at the same size).
    /// ephemera and PostGraphile, query by query: the peer's row under ours,
    /// and the ratios (ours against the peer's) under both.
    fn render_peer(&self, out: &mut String) {
        if self.peer.is_empty() {
            return;
        }
        out.push_str(
            "\n### ephemera and PostGraphile 5 on one PostgreSQL database\n\n\
             Alternating closed-loop rounds (the first req/s, p50, p99), then both at one \
             open-loop rate (half the slower one's throughput). CPU per request: in all, \
             the server's process, the database's backends.\n\n\
             | size | query | server | req/s | p50 ms | p99 ms | rate req/s | p50 ms | p99 ms | CPU µs/req | server | database | RSS MiB | errors |\n\
             |---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.peer {
            for (who, s) in [("ephemera", &r.ours), ("PostGraphile", &r.peer)] {
                let _ = writeln!(
                    out,
                    "| {} | `{}` | {who} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {} | {} |",
                    size(r.size),
                    r.query,
                    s.throughput,
                    s.closed_p50_ms,
                    s.closed_p99_ms,
                    r.rate,
                    s.p50_ms,
                    s.p99_ms,
                    s.cpu_us,
                    s.server_cpu_us,
                    s.db_cpu_us,
                    mib(s.rss_kib),
                    s.errors,
                );
            }
            let (a, b) = (&r.ours, &r.peer);
            let _ = writeln!(
                out,
                "| {} | `{}` | ephemera ÷ PostGraphile | {} | {} | {} | | {} | {} | {} | {} | {} | {} | |",
                size(r.size),
                r.query,
                ratio(a.throughput, b.throughput),
                ratio(a.closed_p50_ms, b.closed_p50_ms),
                ratio(a.closed_p99_ms, b.closed_p99_ms),
                ratio(a.p50_ms, b.p50_ms),
                ratio(a.p99_ms, b.p99_ms),
                ratio(a.cpu_us, b.cpu_us),
                ratio(a.server_cpu_us, b.server_cpu_us),
                ratio(a.db_cpu_us, b.db_cpu_us),
                ratio(a.rss_kib as f64, b.rss_kib as f64),
            );
        }
    }

    fn render_floor(&self, out: &mut String) {
        if self.floor.is_empty() {
            return;
        }
        out.push_str(
            "\n### The floor of a page on this stack\n\n\
             async-graphql alone: the page's query executed in process over a schema of the same \
             shape whose fields hold their values already (no database, no loaders, no HTTP), \
             with its JSON, µs on one thread:\n\n\
             | query | execution floor µs | response bytes |\n|---|---:|---:|\n",
        );
        for f in &self.floor {
            let _ = writeln!(
                out,
                "| `{}` | {:.1} | {} |",
                f.query, f.us_per_request, f.bytes
            );
        }
        out.push_str(
            "\nAgainst the SQL: the best ratio a server on this stack could reach is the SQL's \
             CPU over the SQL's plus the execution floor plus the HTTP floor (`{ __typename }`'s \
             server CPU); the measured ratio is CPU too (SQL replay CPU over the server's).\n\n\
             | db | size | query | SQL replay CPU µs | execution floor µs | HTTP floor µs | best ratio | server CPU µs | measured |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for h in &self.http {
            let (Some(sql), Some(f)) = (&h.sql, self.floor.iter().find(|f| f.query == h.query))
            else {
                continue;
            };
            let http_floor = self
                .http
                .iter()
                .find(|t| t.db == h.db && t.size == h.size && t.query == TYPENAME)
                .map_or(0.0, |t| t.http.server_cpu_us);
            let _ = writeln!(
                out,
                "| {} | {} | `{}` | {:.0} | {:.0} | {:.0} | {} | {:.0} | {} |",
                h.db,
                size(h.size),
                h.query,
                sql.cpu_us,
                f.us_per_request,
                http_floor,
                ratio(sql.cpu_us, sql.cpu_us + f.us_per_request + http_floor),
                h.http.cpu_us,
                ratio(sql.cpu_us, h.http.cpu_us),
            );
        }
    }

    /// The smoke run's check: every part ran and nothing failed (no times).
    pub fn assert_complete(&self) {
        assert!(!self.http.is_empty(), "no HTTP measurements");
        for h in &self.http {
            assert!(
                h.http.errors == 0,
                "{} on {}: {:?}",
                h.query,
                h.db,
                h.http.first_error
            );
            assert!(h.http.throughput > 0.0, "{} answered nothing", h.query);
            if h.query != TYPENAME {
                let sql = h.sql.as_ref().expect("plain SQL measured");
                assert!(
                    sql.statements > 0 && sql.errors == 0,
                    "{}: {sql:?}",
                    h.query
                );
                if h.db == Db::Postgres {
                    assert!(sql.pgbench_tps.is_some(), "pgbench ran for {}", h.query);
                }
            }
        }
        assert!(
            self.floor.iter().all(|f| f.us_per_request > 0.0) && self.floor.len() == 3,
            "execution floor not measured"
        );
        assert!(
            self.peer.len() >= 3,
            "PostGraphile not measured side by side"
        );
        for r in &self.peer {
            for (who, side) in [("ephemera", &r.ours), ("PostGraphile", &r.peer)] {
                assert!(
                    side.errors == 0 && side.throughput > 0.0 && side.rss_kib > 0,
                    "{} on {who}: {:?} ({side:?})",
                    r.query,
                    side.first_error
                );
            }
        }
        assert!(!self.subs.is_empty(), "no subscription measurements");
        for (db, results) in &self.subs {
            for r in results {
                assert_eq!(r.delivered, r.expected, "{db}: {r:?}");
            }
        }
        assert!(!self.events.is_empty(), "no events measurements");
        for (db, e) in &self.events {
            assert_eq!(e.delivered, e.expected, "{db}: {e:?}");
            assert!(
                e.posts_without > 0.0
                    && e.posts_with > 0.0
                    && e.posts_to_all > 0.0
                    && e.rate_reached > 0.0
                    && e.tray.friends_with > 0.0
                    && e.tray.public_tray_events > 0.0,
                "{db}: {e:?}"
            );
        }
        assert!(!self.purge.is_empty(), "no purge measurements");
        for (db, a) in &self.attack {
            assert!(
                a.baseline > 0.0 && a.slow_bodies > 0.0 && a.flood > 0.0 && a.errors == 0,
                "attack part on {db}: {a:?}"
            );
            assert!(a.flood_sent > 0, "the flood sent nothing on {db}");
            assert!(
                a.writes > 0.0 && a.catch_ups > 0.0 && a.heavy > 0.0,
                "attack part on {db}: {a:?}"
            );
            assert!(
                a.writes_sent > 0 && a.catch_ups_sent > 0 && a.heavy_done > 0,
                "an attacker sent nothing on {db}: {a:?}"
            );
        }
        assert!(!self.attack.is_empty(), "no attack measurements");
        for (db, p) in &self.purge {
            assert_eq!(p.left, (0, 0), "{db}: expired statuses left");
            assert_eq!(u64::try_from(p.outbox).ok(), Some(p.rows), "{db}: outbox");
        }
    }
}

/// CPU model, cores and memory of this machine.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024 / 1024);
    format!("{cpu}, {cores} cores, {mem_gib} GiB")
}
