//! The floor of the two pages the bars name: async-graphql executing the
//! harness's own tray and per-author queries over a schema of the same shape
//! whose fields return values already in memory — no database, no loaders,
//! no HTTP, one thread. What it costs per request is what any server on this
//! stack pays before its first statement, so `SQL / (SQL + floor + HTTP)` is
//! the best ratio to the plain SQL such a server could reach.

use std::hint::black_box;
use std::time::{Duration, Instant};

use async_graphql::parser::parse_query;
use async_graphql::{
    EmptyMutation, EmptySubscription, ID, Object, Request, Schema, SimpleObject, Variables,
};
use chrono::{DateTime, TimeZone, Utc};

use crate::load::{STATUSES, STATUSES_NAME, TRAY, TRAY_NAME, TYPENAME};

#[derive(SimpleObject, Clone)]
struct PageInfo {
    has_next_page: bool,
    end_cursor: Option<String>,
}

#[derive(SimpleObject, Clone)]
struct Author {
    id: ID,
    username: String,
    display_name: Option<String>,
}

#[derive(SimpleObject, Clone)]
struct TrayEntry {
    author: Author,
    latest_created_at: DateTime<Utc>,
    story_count: i32,
    has_unseen: bool,
}

#[derive(SimpleObject, Clone)]
struct TrayEdge {
    cursor: String,
    node: TrayEntry,
}

#[derive(SimpleObject, Clone)]
struct TrayConnection {
    edges: Vec<TrayEdge>,
    page_info: PageInfo,
}

#[derive(SimpleObject, Clone)]
struct Media {
    id: ID,
    url: String,
    width: i32,
    height: i32,
}

#[derive(SimpleObject, Clone)]
struct Status {
    id: ID,
    caption: Option<String>,
    bg_color: String,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    viewer_has_seen: bool,
    media: Option<Media>,
}

#[derive(SimpleObject, Clone)]
struct StatusEdge {
    cursor: String,
    node: Status,
}

#[derive(SimpleObject, Clone)]
struct StatusConnection {
    edges: Vec<StatusEdge>,
    page_info: PageInfo,
}

struct Query {
    tray: TrayConnection,
    statuses: StatusConnection,
}

#[Object]
impl Query {
    async fn story_tray(&self, first: i32) -> TrayConnection {
        let mut page = self.tray.clone();
        page.edges.truncate(usize::try_from(first).unwrap_or(0));
        page
    }

    async fn statuses(&self, user_id: ID, first: i32) -> StatusConnection {
        black_box(user_id);
        let mut page = self.statuses.clone();
        page.edges.truncate(usize::try_from(first).unwrap_or(0));
        page
    }
}

/// A cursor as long as the server's (an id, a time and an HMAC, base64).
fn cursor(i: usize) -> String {
    format!("MTcwMDAwMDAwMDAwMDoxMjM0NTY3ODkwOmFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6MDEyMzQ1{i:04}")
}

fn query_root() -> Query {
    let at = |h: i64| {
        Utc.timestamp_opt(1_800_000_000 + h * 60, 0)
            .single()
            .unwrap_or_default()
    };
    let tray = TrayConnection {
        edges: (0..20)
            .map(|i| TrayEdge {
                cursor: cursor(i),
                node: TrayEntry {
                    author: Author {
                        id: ID(format!("{}", 1000 + i)),
                        username: format!("user{i}"),
                        display_name: Some(format!("User Number {i}")),
                    },
                    latest_created_at: at(i as i64),
                    story_count: 3,
                    has_unseen: i % 2 == 0,
                },
            })
            .collect(),
        page_info: PageInfo {
            has_next_page: true,
            end_cursor: Some(cursor(19)),
        },
    };
    let statuses = StatusConnection {
        edges: (0..10)
            .map(|i| StatusEdge {
                cursor: cursor(i),
                node: Status {
                    id: ID(format!("{}", 50_000 + i)),
                    caption: Some(format!("caption of status {i}")),
                    bg_color: "#1E88E5".into(),
                    created_at: at(i as i64),
                    expires_at: at(i as i64 + 24 * 60),
                    viewer_has_seen: i % 3 == 0,
                    media: (i % 4 == 0).then(|| Media {
                        id: ID(format!("{}", 90_000 + i)),
                        url: format!(
                            "http://127.0.0.1:8080/media/{i}/0123456789abcdef0123456789abcdef"
                        ),
                        width: 1080,
                        height: 1920,
                    }),
                },
            })
            .collect(),
        page_info: PageInfo {
            has_next_page: true,
            end_cursor: Some(cursor(9)),
        },
    };
    Query { tray, statuses }
}

/// One page's floor.
pub struct FloorResult {
    pub query: &'static str,
    /// µs of one thread per request: execution plus the response's JSON.
    pub us_per_request: f64,
    pub bytes: usize,
}

/// Executes each page's query for `time` on this thread, the document parsed
/// once (as the server remembers documents), the response serialised.
pub async fn measure(time: Duration) -> Vec<FloorResult> {
    let schema = Schema::build(query_root(), EmptyMutation, EmptySubscription).finish();
    let pages: [(&'static str, &str, serde_json::Value); 3] = [
        (TYPENAME, TYPENAME, serde_json::json!({})),
        (TRAY_NAME, TRAY, serde_json::json!({})),
        (STATUSES_NAME, STATUSES, serde_json::json!({ "u": "1000" })),
    ];
    let mut results = Vec::new();
    for (name, text, vars) in pages {
        let doc = parse_query(text).expect("floor query parses");
        let request = || {
            let mut r = Request::new(text).variables(Variables::from_json(vars.clone()));
            r.set_parsed_query(doc.clone());
            r
        };
        let first = schema.execute(request()).await;
        assert!(first.errors.is_empty(), "{:?}", first.errors);
        let bytes = serde_json::to_vec(&first).expect("json").len();
        let start = Instant::now();
        let mut n = 0u32;
        while start.elapsed() < time {
            for _ in 0..100 {
                let response = schema.execute(request()).await;
                black_box(serde_json::to_vec(&response).expect("json"));
            }
            n += 100;
        }
        results.push(FloorResult {
            query: name,
            us_per_request: start.elapsed().as_secs_f64() * 1e6 / f64::from(n),
            bytes,
        });
    }
    results
}
