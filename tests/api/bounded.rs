//! Hostile clients, round three: the work one client can buy is bounded by
//! what it does. Each test sends the reported attack and unseen variants of
//! it, as an attacker would, and asserts the refusal code, that nothing was
//! stored that should not be, and that the server still serves others.

use serde_json::{Value, json};

use crate::support::ws::{Protocol, WsClient};
use crate::support::{IdKind, TestApp, error_code, gid, raw, still_serving};

/// The settings every test server has.
fn defaults(_: &mut ephemera::config::Config) {}

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
        // Over GET: refused as a document, or, where the URL is longer than
        // a request head may be, refused (431) before it is read at all.
        let got = app
            .http
            .get(format!("{}/graphql", app.base))
            .query(&[("query", doc.as_str())])
            .send()
            .await
            .expect("an answer");
        if got.status() != 431 {
            let resp: Value = got.json().await.expect("JSON");
            assert_eq!(error_code(&resp), "BAD_USER_INPUT", "GET {name}: {resp}");
        }
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

crate::both_backends_measured!(defaults => fragment_bombs_are_refused_before_expansion);

const TICKET: &str = "mutation($i: MediaUploadInput!) { requestMediaUpload(input: $i) { mediaId uploadUrl headers { name value } } }";
const POST_MEDIA: &str = "mutation($m: ID!) { createStatus(input: { mediaId: $m, audience: FRIENDS }) { media { url } } }";

/// PUTs `body` to `url` with `content_type`; the status.
async fn put_to(app: &TestApp, url: &str, content_type: &str, body: Vec<u8>) -> u16 {
    app.http
        .put(app.absolute(url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("a PUT answer")
        .status()
        .as_u16()
}

/// The path and query of a URL the server gave (absolute or not).
fn path_of(url: &str) -> String {
    match url.find("://") {
        Some(i) => {
            let rest = &url[i + 3..];
            rest[rest.find('/').unwrap_or(rest.len())..].to_owned()
        }
        None => url.to_owned(),
    }
}

/// Sends `request` as it is over a new connection; the answer's status.
async fn raw_status(app: &TestApp, request: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    conn.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `url` with its `sig` query value replaced.
fn with_sig(url: &str, sig: &str) -> String {
    let (head, rest) = url.split_once("sig=").expect("a signed URL");
    let tail = rest.find('&').map(|i| &rest[i..]).unwrap_or("");
    format!("{head}sig={sig}{tail}")
}

fn sig_of(url: &str) -> String {
    let rest = url.split_once("sig=").expect("a signed URL").1;
    rest.split('&').next().unwrap_or_default().to_owned()
}

/// Local media signatures: every 1-byte tag (all 256), a truncated real
/// tag and the real tag with a byte more are refused on GET and PUT alike;
/// only the full tag issued works. A ticket takes one PUT of exactly its
/// bytes: a second PUT, or ten at once, get one success between them, and
/// a body of another length, or one without a length, is refused before a
/// byte is stored.
async fn media_signatures_and_tickets_are_exact(app: &TestApp) {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let owner = app.sign_up("owner").await;
    let png = crate::support::fixture("gps.png");
    let media = app.upload_fixture(&owner, "gps.png").await;
    let posted = app
        .ok(owner.token(), POST_MEDIA, json!({ "m": media["id"] }))
        .await;
    let url = posted["createStatus"]["media"]["url"]
        .as_str()
        .expect("a media URL")
        .to_owned();
    let real = URL_SAFE_NO_PAD.decode(sig_of(&url)).expect("base64");
    assert_eq!(real.len(), 16);
    let keys_before = app.store_keys().await.len();
    for b in 0..=255u8 {
        let forged = with_sig(&url, &URL_SAFE_NO_PAD.encode([b]));
        assert_eq!(app.fetch(&forged).await.0.as_u16(), 403, "GET with tag {b}");
    }
    for n in [1, 8, 15] {
        let short = with_sig(&url, &URL_SAFE_NO_PAD.encode(&real[..n]));
        assert_eq!(app.fetch(&short).await.0.as_u16(), 403, "{n}-byte prefix");
    }
    let mut longer = real.clone();
    longer.push(0);
    let long = with_sig(&url, &URL_SAFE_NO_PAD.encode(&longer));
    assert_eq!(app.fetch(&long).await.0.as_u16(), 403);
    assert_eq!(app.fetch(&url).await.0.as_u16(), 200);

    // PUT: a 70-byte ticket and a forged URL for a larger body.
    let ticket = |size: usize| {
        let token = owner.token.clone();
        async move {
            app.ok(
                Some(&token),
                TICKET,
                json!({ "i": { "contentType": "image/png", "byteSize": size } }),
            )
            .await["requestMediaUpload"]
                .clone()
        }
    };
    let t = ticket(70).await;
    let put_url = t["uploadUrl"].as_str().expect("an upload URL").to_owned();
    let html = b"<html>".repeat(200).to_vec();
    for b in 0..=255u8 {
        let forged = with_sig(&put_url, &URL_SAFE_NO_PAD.encode([b]));
        assert_eq!(
            put_to(app, &forged, "text/html", html.clone()).await,
            403,
            "PUT with tag {b}"
        );
    }
    // The signed length, but no Content-Length (chunked): refused.
    let status = raw_status(
        app,
        &format!(
            "PUT {} HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            path_of(&put_url)
        ),
    )
    .await;
    assert_eq!(status, 411);
    assert_eq!(app.store_keys().await.len(), keys_before);

    // One PUT per ticket: the second is refused, and ten at once get one 200.
    let t = ticket(png.len()).await;
    let put_url = t["uploadUrl"].as_str().expect("an upload URL").to_owned();
    assert_eq!(put_to(app, &put_url, "image/png", png.clone()).await, 200);
    assert_eq!(put_to(app, &put_url, "image/png", png.clone()).await, 409);
    let t = ticket(png.len()).await;
    let put_url = t["uploadUrl"].as_str().expect("an upload URL").to_owned();
    let puts = (0..10).map(|_| put_to(app, &put_url, "image/png", png.clone()));
    let statuses = futures_util::future::join_all(puts).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 409),
        "{statuses:?}"
    );
    // Both uploads attach and serve.
    app.ok(owner.token(), POST_MEDIA, json!({ "m": t["mediaId"] }))
        .await;
    still_serving(app).await;
}

crate::both_backends!(media_signatures_and_tickets_are_exact);

fn tight_quotas(c: &mut ephemera::config::Config) {
    c.media.upload_pending_max = 10;
    c.media.upload_bytes_per_day = 1_000;
}

/// `n` tickets of `size` bytes asked for at once by `user`: how many were
/// granted (the others must be `RATE_LIMITED` with `retryAfter`).
async fn ask_tickets(app: &TestApp, user: &crate::support::TestUser, size: u32, n: usize) -> usize {
    let asks = (0..n).map(|_| {
        app.gql(
            user.token(),
            TICKET,
            json!({ "i": { "contentType": "image/png", "byteSize": size } }),
        )
    });
    let answers = futures_util::future::join_all(asks).await;
    for refused in answers.iter().filter(|a| !a["errors"].is_null()) {
        assert_eq!(error_code(refused), "RATE_LIMITED", "{refused}");
        assert!(refused["errors"][0]["extensions"]["retryAfter"].as_u64() >= Some(1));
    }
    answers.iter().filter(|a| a["errors"].is_null()).count()
}

/// Forty tickets asked for at once: the pending cap (10) and the daily
/// byte quota (1,000 bytes, charged as tickets are taken) hold exactly, on
/// every database, and a refused ticket leaves no row.
async fn upload_quotas_are_atomic(app: &TestApp) {
    let u = app.sign_up("burst").await;
    assert_eq!(ask_tickets(app, &u, 10, 40).await, 10, "the pending cap");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM media").await, 10);
    // 300-byte tickets: the byte quota allows three (the pending cap ten).
    let v = app.sign_up("bytes").await;
    assert_eq!(ask_tickets(app, &v, 300, 40).await, 3, "the byte quota");
    let charged = app
        .count(&format!(
            "SELECT CAST(SUM(bytes) AS BIGINT) AS n FROM upload_charges WHERE owner_id = {}",
            raw(&v.id)
        ))
        .await;
    assert_eq!(charged, 900);
}

crate::both_backends_with!(tight_quotas => upload_quotas_are_atomic);

fn three_live(c: &mut ephemera::config::Config) {
    c.statuses.max_live = 3;
}

/// One account's live statuses are capped (`EPHEMERA_STATUS_MAX_LIVE`, 3
/// here): ten posts at once store exactly three, the others are
/// `RATE_LIMITED` with a `retryAfter` of when the oldest expires; a refused
/// post with media leaves the media unattached, usable; another account is
/// not affected; a deletion or an expiry (before any purge) makes room.
async fn live_statuses_are_capped_per_account(app: &TestApp) {
    const POST: &str = "mutation($c: String!) { createStatus(input: { caption: $c }) { id } }";
    let u = app.sign_up("prolific").await;
    let posts = (0..10).map(|i| app.gql(u.token(), POST, json!({ "c": format!("p{i}") })));
    let answers = futures_util::future::join_all(posts).await;
    let mut ids = Vec::new();
    for a in &answers {
        if a["errors"].is_null() {
            ids.push(
                a["data"]["createStatus"]["id"]
                    .as_str()
                    .expect("id")
                    .to_owned(),
            );
        } else {
            assert_eq!(error_code(a), "RATE_LIMITED", "{a}");
            let retry = a["errors"][0]["extensions"]["retryAfter"].as_u64();
            assert!(retry > Some(23 * 3600) && retry <= Some(24 * 3600), "{a}");
        }
    }
    assert_eq!(ids.len(), 3, "{answers:?}");
    let stored = format!(
        "SELECT COUNT(*) AS n FROM statuses WHERE author_id = {}",
        raw(&u.id)
    );
    assert_eq!(app.count(&stored).await, 3);

    // Refused with media: nothing attached, the media still postable later.
    let media = app.upload_id(&u).await;
    let refused = app.gql(u.token(), POST_MEDIA, json!({ "m": media })).await;
    assert_eq!(error_code(&refused), "RATE_LIMITED", "{refused}");
    let attached = format!(
        "SELECT COUNT(*) AS n FROM media WHERE id = {} AND attached_at IS NOT NULL",
        raw(&media)
    );
    assert_eq!(app.count(&attached).await, 0);

    // Someone else posts as usual.
    let v = app.sign_up("quiet").await;
    app.ok(v.token(), POST, json!({ "c": "mine" })).await;

    // A deletion makes room for one, and the media goes out then.
    let delete = "mutation($id: ID!) { deleteStatus(id: $id) }";
    app.ok(u.token(), delete, json!({ "id": ids[0] })).await;
    app.ok(u.token(), POST_MEDIA, json!({ "m": media })).await;
    assert_eq!(app.count(&attached).await, 1);
    assert_eq!(
        error_code(&app.gql(u.token(), POST, json!({ "c": "full" })).await),
        "RATE_LIMITED"
    );
    // Expired statuses count for nothing, purged or not.
    app.clock
        .advance(std::time::Duration::from_secs(24 * 3600 + 1));
    for i in 0..3 {
        app.ok(u.token(), POST, json!({ "c": format!("new{i}") }))
            .await;
    }
    assert_eq!(
        error_code(&app.gql(u.token(), POST, json!({ "c": "full" })).await),
        "RATE_LIMITED"
    );
    assert!(app.count(&stored).await >= 6);
}

crate::both_backends_with!(three_live => live_statuses_are_capped_per_account);

fn two_a_minute(c: &mut ephemera::config::Config) {
    let two: ephemera::throttle::Rate = "2/1m".parse().expect("a rate");
    for rate in crate::support::write_rates(c) {
        *rate = two;
    }
}

/// Every kind of write is limited per account: at 2 a minute, the third
/// of each kind is `RATE_LIMITED` with `retryAfter` (whatever the first two
/// answered), aliased into one request or sent one by one; another
/// account is not slowed; the pace refills with time; nothing is stored
/// by a refused write.
async fn every_write_is_rate_limited_per_account(app: &TestApp) {
    let a = app.sign_up("writer").await;
    let b = app.sign_up("bystander").await;
    let writes: Vec<(&str, &str, Value)> = vec![
        (
            "post",
            "mutation { createStatus(input: { caption: \"s\" }) { id } }",
            json!({}),
        ),
        ("delete", "mutation { deleteStatus(id: \"1\") }", json!({})),
        (
            "like",
            "mutation { toggleMomentLike(momentId: \"1\") { id } }",
            json!({}),
        ),
        (
            "seen",
            "mutation { markStatusSeen(id: \"1\") { id } }",
            json!({}),
        ),
        (
            "social",
            "mutation($u: ID!) { muteUser(userId: $u) }",
            json!({ "u": b.id }),
        ),
        (
            "report",
            "mutation($u: ID!) { report(input: { subjectId: $u, reason: SPAM }) { id } }",
            json!({ "u": b.id }),
        ),
        (
            "media",
            "mutation { requestMediaUpload(input: { contentType: \"image/png\", byteSize: 10 }) { mediaId } }",
            json!({}),
        ),
        (
            "moderate",
            "mutation($u: ID!) { reinstateUser(userId: $u) }",
            json!({ "u": b.id }),
        ),
    ];
    for (kind, mutation, vars) in &writes {
        for _ in 0..2 {
            let resp = app.gql(a.token(), mutation, vars.clone()).await;
            assert_ne!(
                resp["errors"][0]["extensions"]["code"], "RATE_LIMITED",
                "{kind}: {resp}"
            );
        }
        let resp = app.gql(a.token(), mutation, vars.clone()).await;
        assert_eq!(error_code(&resp), "RATE_LIMITED", "{kind}: {resp}");
        assert!(
            resp["errors"][0]["extensions"]["retryAfter"].as_u64() >= Some(1),
            "{kind}: {resp}"
        );
        assert!(message(&resp).contains(kind), "{kind}: {resp}");
    }
    // The mutes and reports counted: two each, the third stored nothing.
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM user_relations").await,
        1,
        "a mute is idempotent"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM reports").await, 1);
    // Aliased into one request: the first two of five posts (of a fresh
    // account) pass, the other three are refused, and three statuses are
    // not stored.
    let c = app.sign_up("aliaser").await;
    let five = "mutation { a: createStatus(input: { caption: \"1\" }) { id } b: createStatus(input: { caption: \"2\" }) { id } c: createStatus(input: { caption: \"3\" }) { id } d: createStatus(input: { caption: \"4\" }) { id } e: createStatus(input: { caption: \"5\" }) { id } }";
    let resp = app.gql(c.token(), five, json!({})).await;
    let limited = resp["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter(|e| e["extensions"]["code"] == "RATE_LIMITED")
        .count();
    assert_eq!(limited, 3, "{resp}");
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) AS n FROM statuses WHERE author_id = {}",
            raw(&c.id)
        ))
        .await,
        2
    );
    // Another account posts as ever.
    app.ok(
        b.token(),
        "mutation { createStatus(input: { caption: \"b\" }) { id } }",
        json!({}),
    )
    .await;
    // 2 a minute: one more after 30 s.
    app.clock.advance(std::time::Duration::from_secs(31));
    let post = "mutation { createStatus(input: { caption: \"later\" }) { id } }";
    app.ok(a.token(), post, json!({})).await;
    assert_eq!(
        error_code(&app.gql(a.token(), post, json!({})).await),
        "RATE_LIMITED"
    );
    still_serving(app).await;
}

crate::both_backends_with!(two_a_minute => every_write_is_rate_limited_per_account);

/// Limits hold across instances: two server processes on one PostgreSQL
/// give one account the same three posts a minute as one, and the same
/// password attempts per address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_instances() {
    let cluster = crate::support::cluster::Cluster::new().await;
    let limits = [
        ("EPHEMERA_RATE_POSTS", "3/1m"),
        ("EPHEMERA_AUTH_ATTEMPTS_PER_ADDRESS", "4"),
        ("EPHEMERA_AUTH_ATTEMPTS_BURST", "4"),
    ];
    let one = cluster.spawn(&limits).await;
    let two = cluster.spawn(&limits).await;
    // Sign-up is a password attempt too: 2 here.
    let u = one.sign_up("everywhere").await;
    let post = "mutation { createStatus(input: { caption: \"x\" }) { id } }";
    one.ok(u.token(), post, json!({})).await;
    two.ok(u.token(), post, json!({})).await;
    one.ok(u.token(), post, json!({})).await;
    for instance in [&one, &two] {
        let resp = instance.gql(u.token(), post, json!({})).await;
        assert_eq!(error_code(&resp), "RATE_LIMITED", "{resp}");
    }
    assert_eq!(cluster.count("SELECT COUNT(*) AS n FROM statuses").await, 3);
    // Password attempts from this address: 4 in all (a burst of 4), one
    // used by the sign-up; then both instances refuse.
    let sign_in = "mutation { signIn(input: { username: \"everywhere\", password: \"wrong-password\" }) { token } }";
    let mut codes = Vec::new();
    for i in 0..5 {
        let instance = if i % 2 == 0 { &one } else { &two };
        codes.push(error_code(&instance.gql(None, sign_in, json!({})).await));
    }
    assert_eq!(
        codes,
        [
            "UNAUTHENTICATED",
            "UNAUTHENTICATED",
            "UNAUTHENTICATED",
            "RATE_LIMITED",
            "RATE_LIMITED"
        ],
        "{codes:?}"
    );
    drop((one, two));
    cluster.finish().await;
}

/// How many sessions `user`'s account has.
async fn sessions_of(app: &TestApp, user: &crate::support::TestUser) -> i64 {
    app.count(&format!(
        "SELECT COUNT(*) AS n FROM sessions WHERE user_id = {}",
        raw(&user.id)
    ))
    .await
}

const SIGN_IN: &str = "mutation($u: String!, $p: String!) { signIn(input: { username: $u, password: $p }) { token } }";

/// A sign-in in flight while a suspension or a password change commits:
/// after both have answered, no session authorised before the change
/// exists (rows counted), and a token the sign-in returned does not work.
/// Twelve trials of each, the sign-in started first each time.
async fn sign_ins_racing_suspension_or_password_change_leave_no_session(app: &TestApp) {
    let moderator = app.sign_up("warden").await;
    ephemera::domain::moderation::set_moderator(&app.state.db, "warden", true)
        .await
        .expect("a moderator");
    let viewer = "{ viewer { id } }";
    for trial in 0..12 {
        let name = format!("racer{trial}");
        let u = app.sign_up(&name).await;
        let suspend = "mutation($u: ID!) { suspendUser(userId: $u, reason: \"spam\") }";
        let (signed, suspended) = tokio::join!(
            app.gql(None, SIGN_IN, json!({ "u": name, "p": "password123" })),
            async {
                tokio::task::yield_now().await;
                app.gql(moderator.token(), suspend, json!({ "u": u.id }))
                    .await
            }
        );
        assert!(suspended["errors"].is_null(), "{suspended}");
        let sessions = sessions_of(app, &u).await;
        assert_eq!(sessions, 0, "trial {trial}: {signed}");
        if let Some(token) = signed["data"]["signIn"]["token"].as_str() {
            let resp = app.gql(Some(token), viewer, json!({})).await;
            assert!(resp["data"]["viewer"].is_null(), "trial {trial}: {resp}");
        } else {
            assert_eq!(error_code(&signed), "FORBIDDEN", "{signed}");
        }
    }
    let change = "mutation { changePassword(currentPassword: \"password123\", newPassword: \"password456\") { token } }";
    for trial in 0..12 {
        let name = format!("changer{trial}");
        let u = app.sign_up(&name).await;
        let (signed, changed) = tokio::join!(
            app.gql(None, SIGN_IN, json!({ "u": name, "p": "password123" })),
            async {
                tokio::task::yield_now().await;
                app.gql(u.token(), change, json!({})).await
            }
        );
        let new_token = changed["data"]["changePassword"]["token"]
            .as_str()
            .expect("the change commits")
            .to_owned();
        // The change's own session is the only one.
        let sessions = sessions_of(app, &u).await;
        assert_eq!(sessions, 1, "trial {trial}: {signed}");
        if let Some(token) = signed["data"]["signIn"]["token"].as_str() {
            let resp = app.gql(Some(token), viewer, json!({})).await;
            assert!(resp["data"]["viewer"].is_null(), "trial {trial}: {resp}");
        }
        let resp = app.ok(Some(&new_token), viewer, json!({})).await;
        assert_eq!(resp["viewer"]["id"], u.id.as_str());
    }
}

crate::both_backends!(sign_ins_racing_suspension_or_password_change_leave_no_session);

/// A moderator cannot suspend another moderator (`FORBIDDEN`, nothing
/// changes); `ephemera users reinstate NAME` lifts any suspension.
async fn moderators_cannot_suspend_moderators(app: &TestApp) {
    let a = app.sign_up("mod_a").await;
    let b = app.sign_up("mod_b").await;
    let c = app.sign_up("plain").await;
    for name in ["mod_a", "mod_b"] {
        ephemera::domain::moderation::set_moderator(&app.state.db, name, true)
            .await
            .expect("a moderator");
    }
    let suspend = "mutation($u: ID!) { suspendUser(userId: $u, reason: \"x\") }";
    let resp = app.gql(a.token(), suspend, json!({ "u": b.id })).await;
    assert_eq!(error_code(&resp), "FORBIDDEN", "{resp}");
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM users WHERE suspended_at IS NOT NULL")
            .await,
        0
    );
    app.ok(b.token(), "{ viewer { id } }", json!({})).await;
    app.ok(a.token(), suspend, json!({ "u": c.id })).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ephemera"))
        .args(["users", "reinstate", "PLAIN"])
        .env("DATABASE_URL", &app.database_url)
        .env(
            "EPHEMERA_DATA_DIR",
            app.state.config.server.data_dir.clone(),
        )
        .env("EPHEMERA_JWT_SECRET", crate::support::JWT_SECRET)
        .env("EPHEMERA_LOG", "warn")
        .output()
        .await
        .expect("the command runs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "PLAIN is reinstated"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM users WHERE suspended_at IS NOT NULL")
            .await,
        0
    );
    app.ok(None, SIGN_IN, json!({ "u": "plain", "p": "password123" }))
        .await;
}

crate::both_backends!(moderators_cannot_suspend_moderators);

/// Lists are priced by their length and per-parent connections by the
/// statement each runs: `nodes` of 100 ids (duplicates too) and friends'
/// statuses are refused by the complexity limit where their item price
/// multiplies, and pass where it does not.
async fn prices_follow_the_work(app: &TestApp) {
    let u = app.sign_up("pricer").await;
    let id = u.id.as_str();
    let many = vec![json!(id); 100];
    let heavy = "query($ids: [ID!]!) { nodes(ids: $ids) { id ... on User { username displayName createdAt friendship } } }";
    // 100 × 5 fields: under the limit.
    let data = app.ok(u.token(), heavy, json!({ "ids": many })).await;
    assert_eq!(data["nodes"].as_array().map(Vec::len), Some(100));
    // 100 × a connection per item: over it, by variables as by literals.
    let per_item = "query($ids: [ID!]!) { nodes(ids: $ids) { ... on User { friends(first: 1) { nodes { id } } } } }";
    let resp = app.gql(u.token(), per_item, json!({ "ids": many })).await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{resp}");
    assert!(message(&resp).contains("complexity"), "{resp}");
    let literal = format!(
        "{{ nodes(ids: [{}]) {{ ... on User {{ friends(first: 1) {{ nodes {{ id }} }} }} }} }}",
        vec![format!("\"{id}\""); 100].join(",")
    );
    assert_eq!(
        app.err(u.token(), &literal, json!({})).await,
        "BAD_USER_INPUT"
    );
    // Friends' statuses: one statement per friend.
    let fof = "query($u: String!) { user(username: $u) { friends(first: 50) { nodes { statuses(first: 50) { nodes { id } } } } } }";
    let resp = app.gql(u.token(), fof, json!({ "u": "pricer" })).await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{resp}");
    let cheap = "query($u: String!) { user(username: $u) { friends(first: 10) { nodes { statuses(first: 5) { nodes { id } } } } } }";
    app.ok(u.token(), cheap, json!({ "u": "pricer" })).await;
}

crate::both_backends!(prices_follow_the_work);

fn tight_budget(c: &mut ephemera::config::Config) {
    c.limits.request_max_statements = 6;
}

/// The runtime backstop: a request that runs more statements than its
/// budget ends with `RATE_LIMITED` naming the budget, whatever the static
/// price let through; the next request has a budget of its own.
async fn a_request_runs_at_most_its_statements(app: &TestApp) {
    let mut users = Vec::new();
    for i in 0..12 {
        users.push(app.sign_up(&format!("budget{i}")).await);
    }
    // Each aliased user lookup by name is a statement of its own.
    let fields: String = (0..12)
        .map(|i| format!("u{i}: user(username: \"budget{i}\") {{ id }} "))
        .collect();
    let cpu = crate::support::ServerCpu::start(app);
    let resp = app.gql(None, &format!("{{ {fields} }}"), json!({})).await;
    let spent = cpu.spent();
    assert!(
        spent < std::time::Duration::from_millis(500),
        "the refused request cost {spent:?}"
    );
    let codes: Vec<&str> = resp["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["extensions"]["code"].as_str())
        .collect();
    assert!(
        !codes.is_empty() && codes.iter().all(|c| *c == "RATE_LIMITED"),
        "{resp}"
    );
    assert!(message(&resp).contains("6 database statements"), "{resp}");
    // The same over a websocket, on either protocol.
    for protocol in [Protocol::TransportWs, Protocol::LegacyWs] {
        let (mut ws, _) = WsClient::connect(&app.ws_url, protocol, json!({})).await;
        ws.subscribe("1", &format!("{{ {fields} }}"), json!({}))
            .await;
        let answer = ws.next_message().await.expect("an answer");
        assert_eq!(
            ws_error_code(&answer),
            "RATE_LIMITED",
            "{protocol:?}: {answer}"
        );
    }
    // Within the budget: answered whole.
    let data = app
        .ok(
            None,
            "{ a: user(username: \"budget0\") { id } b: user(username: \"budget1\") { id } }",
            json!({}),
        )
        .await;
    assert_eq!(data["a"]["id"], users[0].id.as_str());
}

crate::both_backends_measured!(tight_budget => a_request_runs_at_most_its_statements);

fn no_db_time(c: &mut ephemera::config::Config) {
    c.limits.request_max_db_time = std::time::Duration::from_nanos(1);
}

/// Past its database time a request's statements are cut off:
/// `RATE_LIMITED`, and the server serves the next request.
async fn a_request_takes_at_most_its_database_time(app: &TestApp) {
    // Signed up before the budget matters: mutations run on the pool.
    let u = app.sign_up("timer").await;
    // The user first, then their lists: statements one after another, the
    // later ones past the (1 ns) budget the first one spent.
    let q = "{ user(username: \"timer\") { friends(first: 1) { nodes { id } } statuses(first: 1) { nodes { id } } } }";
    let resp = app.gql(u.token(), q, json!({})).await;
    assert_eq!(error_code(&resp), "RATE_LIMITED", "{resp}");
    assert!(message(&resp).contains("database time"), "{resp}");
    let data = app.ok(None, "{ __typename }", json!({})).await;
    assert_eq!(data["__typename"], "Query");
}

crate::both_backends_with!(no_db_time => a_request_takes_at_most_its_database_time);

/// A map of the whole world reads at most `MAP_SCAN` moments and places
/// however many are stored: with more than that in the box, the answer is
/// truncated, holds the newest, and takes the same statements.
async fn a_world_map_reads_a_bounded_number_of_rows(app: &TestApp) {
    use ephemera::db::{Dialect, Sql, insert};
    use ephemera::entity::{media, moment};
    use sea_orm::ConnectionTrait;
    let u = app.sign_up("cartographer").await;
    let db = &app.state.db;
    let dialect = Dialect::of(db);
    let n = ephemera::domain::map::MAP_SCAN + 1_000;
    let series =
        format!("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n})");
    let place = "((x * 7919) % 170) - 85.0, ((x * 104729) % 360) - 180.0, \
                 (((x * 7919) % 170) + 5) * 10 * 3600 + ((x * 104729) % 360) * 10";
    let now = app.clock.now();
    let author = raw(&u.id);
    for sql in [
        insert::select_into::<media::Entity>(Sql::new(&format!(
            "{series} SELECT 1000000 + x, {author}, 'w/' || x, 'image/gif', 1, NULL, NULL, 0, 0, 0, NULL, NULL FROM g"
        ))),
        insert::select_into::<moment::Entity>(Sql::new(&format!(
            "{series} SELECT 2000000 + x, {author}, 1000000 + x, NULL, {place}, NULL, 'PUBLIC', TRUE, 0, NULL, {now} - 100000 + x, NULL, 0 FROM g"
        ))),
    ] {
        db.execute_unprepared(&sql.build(dialect).sql)
            .await
            .expect("seed");
    }
    let world = "{ mapMarkers(bbox: { south: -90, west: -180, north: 90, east: 180 }, limit: 10) { truncated markers { ... on MomentPin { moment { id } } } } }";
    let cpu = crate::support::ServerCpu::start(app);
    let (statements, data) = app.statements_during(app.ok(None, world, json!({}))).await;
    let spent = cpu.spent();
    eprintln!("world map over {n} moments: {spent:?} of server CPU");
    // Debug build; a read of every moment in the box is several times this.
    assert!(
        spent < std::time::Duration::from_secs(2),
        "the world map cost {spent:?}"
    );
    let markers = &data["mapMarkers"];
    assert_eq!(markers["truncated"], true);
    let ids: Vec<&str> = markers["markers"]
        .as_array()
        .expect("markers")
        .iter()
        .filter_map(|m| m["moment"]["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 10);
    assert_eq!(
        ids[0],
        gid(IdKind::Moment, 2_000_000 + n),
        "the newest first"
    );
    // A small box beside: the same few statements.
    let city = "{ mapMarkers(bbox: { south: 48.8, west: 2.3, north: 48.9, east: 2.4 }, limit: 10) { truncated } }";
    let (few, _) = app.statements_during(app.ok(None, city, json!({}))).await;
    assert!(statements <= few + 2, "world {statements}, city {few}");
}

crate::both_backends_measured!(defaults => a_world_map_reads_a_bounded_number_of_rows);

/// Exists-but-hidden answers exactly as does-not-exist, mutations included:
/// a close-friends status deleted by a stranger, and every mutation that
/// names a user, aimed at someone who blocked the viewer or is suspended,
/// answer the same bytes as for an id that was never issued.
async fn hidden_answers_as_missing_on_every_mutation(app: &TestApp) {
    let author = app.sign_up("author").await;
    let viewer = app.sign_up("viewer").await;
    let blocker = app.sign_up("blocker").await;
    let gone = app.sign_up("suspended").await;
    let warden = app.sign_up("warden").await;
    ephemera::domain::moderation::set_moderator(&app.state.db, "warden", true)
        .await
        .expect("a moderator");
    app.ok(
        warden.token(),
        "mutation($u: ID!) { suspendUser(userId: $u, reason: \"x\") }",
        json!({ "u": gone.id }),
    )
    .await;
    app.relate(&blocker, "blockUser", &viewer).await;
    let secret = app
        .post_status_to(&author, "close friends only", "CLOSE_FRIENDS")
        .await;
    let missing = "386000000000000000";
    let del = "mutation($id: ID!) { deleteStatus(id: $id) }";
    let hidden = app.gql(viewer.token(), del, json!({ "id": secret })).await;
    let none = app.gql(viewer.token(), del, json!({ "id": missing })).await;
    assert_eq!(hidden, none);
    assert_eq!(error_code(&hidden), "NOT_FOUND");
    let by_user = [
        "mutation($u: ID!) { blockUser(userId: $u) }",
        "mutation($u: ID!) { unblockUser(userId: $u) }",
        "mutation($u: ID!) { muteUser(userId: $u) }",
        "mutation($u: ID!) { unmuteUser(userId: $u) }",
        "mutation($u: ID!) { hideStoriesFrom(userId: $u) }",
        "mutation($u: ID!) { unhideStoriesFrom(userId: $u) }",
        "mutation($u: ID!) { addCloseFriend(userId: $u) }",
        "mutation($u: ID!) { removeCloseFriend(userId: $u) }",
        "mutation($u: ID!) { sendFriendRequest(userId: $u) }",
        "mutation($u: ID!) { acceptFriendRequest(userId: $u) }",
        "mutation($u: ID!) { removeFriend(userId: $u) }",
        "mutation($u: ID!) { report(input: { subjectId: $u, reason: SPAM }) { id } }",
    ];
    for m in by_user {
        let none = app.gql(viewer.token(), m, json!({ "u": missing })).await;
        for who in [&blocker, &gone] {
            let hidden = app.gql(viewer.token(), m, json!({ "u": who.id })).await;
            assert_eq!(hidden, none, "{m} on {}", who.username);
        }
    }
    // Nothing was stored by any of them.
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) AS n FROM user_relations WHERE subject_id = {}",
            raw(&viewer.id)
        ))
        .await,
        0
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM reports").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM friendships").await, 0);
}

crate::both_backends!(hidden_answers_as_missing_on_every_mutation);

fn three_relations(c: &mut ephemera::config::Config) {
    c.limits.max_relations = 3;
}

/// One account's lists are bounded (`EPHEMERA_MAX_RELATIONS`): past it,
/// adding is `BAD_USER_INPUT` and stores nothing, re-adding someone listed
/// still answers as before, and ten adds at once leave exactly the cap.
async fn an_accounts_lists_are_bounded(app: &TestApp) {
    let owner = app.sign_up("lister").await;
    let mut others = Vec::new();
    for i in 0..12 {
        others.push(app.sign_up(&format!("other{i}")).await);
    }
    for o in &others[..3] {
        app.relate(&owner, "muteUser", o).await;
    }
    let mute = "mutation($u: ID!) { muteUser(userId: $u) }";
    let resp = app
        .gql(owner.token(), mute, json!({ "u": others[3].id }))
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{resp}");
    assert!(message(&resp).contains("at most 3"), "{resp}");
    app.ok(owner.token(), mute, json!({ "u": others[0].id }))
        .await;
    // Another list has its own three.
    app.relate(&owner, "blockUser", &others[4]).await;
    let count = |kind: &'static str| {
        let owner = raw(&owner.id);
        async move {
            app.count(&format!(
                "SELECT COUNT(*) AS n FROM user_relations WHERE subject_id = {owner} AND kind = '{kind}'"
            ))
            .await
        }
    };
    assert_eq!(count("MUTE").await, 3);
    // At once: exactly three hidden-from.
    let hide = "mutation($u: ID!) { hideStoriesFrom(userId: $u) }";
    let many = others[..10]
        .iter()
        .map(|o| app.gql(owner.token(), hide, json!({ "u": o.id })));
    futures_util::future::join_all(many).await;
    assert_eq!(count("HIDE").await, 3);
}

crate::both_backends_with!(three_relations => an_accounts_lists_are_bounded);

const GONE_EVENTS: &str = "subscription($after: String) { events(after: $after) { __typename cursor \
    ... on StatusCreatedEvent { status { id } } \
    ... on StatusDeletedEvent { statusId } \
    ... on AuthorGoneEvent { authorId } \
    ... on MomentRestoredEvent { moment { id likesCount } } } }";

/// Connects as `user` (anonymous without) and subscribes with `query`.
async fn listen(
    app: &TestApp,
    user: Option<&crate::support::TestUser>,
    query: &str,
    vars: Value,
) -> WsClient {
    let init = match user {
        Some(u) => json!({ "authorization": format!("Bearer {}", u.token) }),
        None => json!({}),
    };
    let (mut ws, ack) = WsClient::connect(&app.ws_url, Protocol::TransportWs, init).await;
    assert_eq!(ack["type"], "connection_ack");
    ws.subscribe("e", query, vars).await;
    ws
}

/// The `events` a socket hears until (and without) a status with
/// `sentinel`'s id.
async fn until_sentinel(ws: &mut WsClient, sentinel: &str) -> Vec<Value> {
    let mut heard = Vec::new();
    loop {
        let p = ws.next_payload().await;
        let e = p["data"]["events"].clone();
        if e["status"]["id"] == sentinel {
            return heard;
        }
        heard.push(e);
    }
}

/// Deleting an account with 30 public statuses and friends-only ones is
/// one event, not one per status: every subscriber (friend, stranger,
/// anonymous) hears one `AuthorGoneEvent`. An account with friends-only
/// content only is one event per friend: its friends hear it (item 12: the
/// friends-only content they could see), strangers hear nothing.
async fn an_account_deletion_is_one_event(app: &TestApp) {
    let public = app.sign_up("loud").await;
    let quiet = app.sign_up("quiet").await;
    let friend = app.sign_up("friend").await;
    let stranger = app.sign_up("stranger").await;
    let herald = app.sign_up("herald").await;
    app.befriend(&public, &friend).await;
    app.befriend(&quiet, &friend).await;
    for i in 0..30 {
        app.post_status_to(&public, &format!("p{i}"), "PUBLIC")
            .await;
    }
    app.post_status_to(&public, "f", "FRIENDS").await;
    app.post_status_to(&quiet, "only friends", "FRIENDS").await;
    let mut sockets = [
        listen(app, Some(&friend), GONE_EVENTS, json!({})).await,
        listen(app, Some(&stranger), GONE_EVENTS, json!({})).await,
        listen(app, None, GONE_EVENTS, json!({})).await,
    ];
    app.wait_for_metric("ephemera_subscribers", 3).await;
    let before = app.count("SELECT COUNT(*) AS n FROM events").await;
    let delete = "mutation { deleteAccount(password: \"password123\") }";
    app.ok(public.token(), delete, json!({})).await;
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM events").await,
        before + 1
    );
    app.ok(quiet.token(), delete, json!({})).await;
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM events").await,
        before + 2,
        "one event per friend of an account without public content"
    );
    let sentinel = app.post_status_to(&herald, "sentinel", "PUBLIC").await;
    let gone = |id: &str| json!({ "__typename": "AuthorGoneEvent", "authorId": id });
    for (i, ws) in sockets.iter_mut().enumerate() {
        // (Statuses posted and friendships made just before it subscribed
        // may reach it too, where the reader had not passed them yet.)
        let heard: Vec<Value> = until_sentinel(ws, &sentinel)
            .await
            .into_iter()
            .filter(|e| {
                e["__typename"] != "StatusCreatedEvent"
                    && e["__typename"] != "FriendshipChangedEvent"
            })
            .map(|mut e| {
                e.as_object_mut().map(|o| o.remove("cursor"));
                e
            })
            .collect();
        let expected = if i == 0 {
            vec![gone(&public.id), gone(&quiet.id)]
        } else {
            vec![gone(&public.id)]
        };
        assert_eq!(heard, expected, "socket {i}");
    }
}

crate::both_backends!(an_account_deletion_is_one_event);

/// A moment an event shows counts its likes as the subscriber would read
/// them: likes of people hidden from the subscriber (blocked) are not
/// counted for them, while others see every like.
async fn events_count_likes_for_their_viewer(app: &TestApp) {
    let author = app.sign_up("author").await;
    let liker = app.sign_up("liker").await;
    let viewer = app.sign_up("viewer").await;
    let moment = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    app.ok(
        liker.token(),
        "mutation($m: ID!) { toggleMomentLike(momentId: $m) { id } }",
        json!({ "m": moment }),
    )
    .await;
    app.relate(&viewer, "blockUser", &liker).await;
    let mut blocked_side = listen(app, Some(&viewer), GONE_EVENTS, json!({})).await;
    let mut anonymous = listen(app, None, GONE_EVENTS, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 2).await;
    app.ok(
        author.token(),
        "mutation($m: ID!) { deleteMoment(id: $m) }",
        json!({ "m": moment }),
    )
    .await;
    app.ok(
        author.token(),
        "mutation($m: ID!) { restoreMoment(id: $m) { id } }",
        json!({ "m": moment }),
    )
    .await;
    assert_eq!(restored_likes(&mut blocked_side).await, Some(0));
    assert_eq!(restored_likes(&mut anonymous).await, Some(1));
    let q = "query($m: ID!) { moment(id: $m) { likesCount } }";
    let read = app.ok(viewer.token(), q, json!({ "m": moment })).await;
    assert_eq!(read["moment"]["likesCount"], 0);
}

crate::both_backends!(events_count_likes_for_their_viewer);

/// The likes count of the next restored moment `ws` hears of.
async fn restored_likes(ws: &mut WsClient) -> Option<i64> {
    loop {
        let p = ws.next_payload().await;
        let e = &p["data"]["events"];
        if e["__typename"] == "MomentRestoredEvent" {
            return e["moment"]["likesCount"].as_i64();
        }
    }
}

fn three_resumes(c: &mut ephemera::config::Config) {
    c.limits.rate_catchup = "3/1m".parse().expect("a rate");
}

/// Resumes from a cursor are metered per address and per account: the
/// fourth in a minute is refused `RATE_LIMITED`, on either protocol, and a
/// subscription without a cursor is not metered.
async fn resumes_are_metered(app: &TestApp) {
    let u = app.sign_up("resumer").await;
    let mut first = listen(app, None, GONE_EVENTS, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 1).await;
    let s = app.post_status_to(&u, "x", "PUBLIC").await;
    let p = first.next_payload().await;
    assert_eq!(p["data"]["events"]["status"]["id"], s.as_str());
    let cursor = p["data"]["events"]["cursor"].clone();
    for i in 0..4 {
        let mut ws = listen(app, None, GONE_EVENTS, json!({ "after": cursor })).await;
        let other = app.post_status_to(&u, &format!("y{i}"), "PUBLIC").await;
        let msg = ws.next_message().await.expect("an answer");
        if i < 3 {
            assert!(
                msg["payload"]["data"]["events"].is_object(),
                "resume {i}: {msg}"
            );
            let _ = other;
        } else {
            assert_eq!(ws_error_code(&msg), "RATE_LIMITED", "{msg}");
        }
    }
    // Without a cursor: not a resume.
    let mut plain = listen(app, None, GONE_EVENTS, json!({})).await;
    app.wait_for_metric("ephemera_subscribers", 2).await;
    let z = app.post_status_to(&u, "z", "PUBLIC").await;
    until_sentinel(&mut plain, &z).await;
}

crate::both_backends_with!(three_resumes => resumes_are_metered);

/// Variables of the wrong shape for an input object or list are the
/// client's mistake (`BAD_USER_INPUT`), never an internal error; request
/// bodies of the wrong shape are refused naming the rule, not serde's types.
async fn wrong_shapes_are_bad_input(app: &TestApp) {
    let u = app.sign_up("shaper").await;
    let create = "mutation($i: CreateStatusInput!) { createStatus(input: $i) { id } }";
    for v in [
        json!(5),
        json!("x"),
        json!([1]),
        json!(true),
        json!({ "caption": 5 }),
    ] {
        let resp = app.gql(u.token(), create, json!({ "i": v })).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{v}: {resp}");
    }
    let nodes = "query($ids: [ID!]!) { nodes(ids: $ids) { id } }";
    for v in [json!({ "a": 1 }), json!([[1]]), json!([{}])] {
        let resp = app.gql(None, nodes, json!({ "ids": v })).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{v}: {resp}");
    }
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 0);
    for body in [
        json!({ "query": 5 }),
        json!({ "query": "{ __typename }", "variables": 5 }),
        json!({ "query": "{ __typename }", "operationName": [] }),
        json!({ "query": "{ __typename }", "extensions": "x" }),
        json!([{ "query": "{ __typename }" }, { "query": {} }]),
    ] {
        let (_, resp) = app.post(None, &body).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{body}: {resp}");
        let text = message(&resp);
        assert!(
            !text.contains("untagged") && !text.contains("enum") && !text.contains("BatchRequest"),
            "{text}"
        );
        assert!(text.contains("must be"), "{text}");
    }
    let resp = app
        .get(&[("query", "{ __typename }"), ("variables", "[1")])
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{resp}");
    assert!(!message(&resp).contains("serde"), "{resp}");
}

crate::both_backends!(wrong_shapes_are_bad_input);

fn short_writes(c: &mut ephemera::config::Config) {
    c.http.write_timeout = std::time::Duration::from_secs(1);
}

/// A client that never reads its responses is disconnected once a write
/// has waited `EPHEMERA_HTTP_WRITE_TIMEOUT`; a request head larger than
/// `EPHEMERA_HTTP_MAX_HEAD_BYTES` is refused (431) without buffering it; a
/// 401 decided before the body was read says `Connection: close` and, to a
/// client that accepts it, is `application/graphql-response+json`.
async fn slow_and_big_clients_are_bounded(app: &TestApp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base.trim_start_matches("http://").to_owned();
    // Pipeline many requests whose answers are large, and never read.
    let big = format!(
        "{{ {} }}",
        (0..30)
            .map(|i| format!("a{i}: __schema {{ types {{ name description }} }}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let body = json!({ "query": big }).to_string();
    let request = format!(
        "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // A small receive buffer: the server's writes stall after a response
    // or two, however slowly a loaded machine answers them.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("receive buffer");
    let mut conn = socket
        .connect(addr.parse().expect("address"))
        .await
        .expect("connect");
    let _ = conn.set_nodelay(true);
    let started = std::time::Instant::now();
    let mut sent = 0;
    // Stop sending once the server stops reading (its writes are stuck).
    while started.elapsed() < std::time::Duration::from_secs(20) {
        match tokio::time::timeout(
            std::time::Duration::from_secs(3),
            conn.write_all(request.as_bytes()),
        )
        .await
        {
            Ok(Ok(())) => sent += 1,
            _ => break,
        }
    }
    // Still without reading for several write timeouts (reading would
    // unstick a server that had not yet given up), then the server has
    // given up on the connection: reading finds it closed after what it
    // had written, within the test's bound.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(closed, "the connection stayed open after {sent} requests");
    still_serving(app).await;

    // A request head of 64 KiB.
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    assert_eq!(raw_status(app, &head).await, 431);

    // A 401 before the body: `Connection: close`, and the client's type.
    let resp = app
        .http
        .post(format!("{}/graphql", app.base))
        .header("authorization", "Bearer not-a-token")
        .header("accept", "application/graphql-response+json")
        .json(&json!({ "query": "{ __typename }" }))
        .send()
        .await
        .expect("an answer");
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["connection"], "close");
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("application/graphql-response+json")
    );
    still_serving(app).await;
}

crate::both_backends_with!(short_writes => slow_and_big_clients_are_bounded);

fn production_switches(c: &mut ephemera::config::Config) {
    c.server.graphiql = false;
    c.server.introspection = false;
    c.server.metrics_token = Some("metrics-secret".into());
}

/// The production switches: no playground, no introspection, `/metrics`
/// behind its token.
async fn production_switches_hold(app: &TestApp) {
    let page = app
        .http
        .get(format!("{}/", app.base))
        .send()
        .await
        .expect("an answer");
    assert_eq!(page.status(), 404);
    // Introspection answers nothing of the schema.
    let resp = app
        .gql(None, "{ __schema { types { name } } }", json!({}))
        .await;
    assert!(resp["data"]["__schema"].is_null(), "{resp}");
    let resp = app
        .gql(
            None,
            "{ __type(name: \"Status\") { fields { name } } }",
            json!({}),
        )
        .await;
    assert!(resp["data"]["__type"].is_null(), "{resp}");
    app.ok(None, "{ __typename }", json!({})).await;
    let metrics = |token: Option<&'static str>| {
        let mut get = app.http.get(format!("{}/metrics", app.base));
        if let Some(t) = token {
            get = get.bearer_auth(t);
        }
        get.send()
    };
    assert_eq!(metrics(None).await.expect("an answer").status(), 401);
    let wrong = metrics(Some("metrics-secreT")).await.expect("an answer");
    assert_eq!(wrong.status(), 401);
    let right = metrics(Some("metrics-secret")).await.expect("an answer");
    assert_eq!(right.status(), 200);
    let text = right.text().await.expect("metrics");
    assert!(
        text.contains("ephemera_limits_refused_total{kind=\"post\"}"),
        "{text}"
    );
}

crate::both_backends_with!(production_switches => production_switches_hold);

/// The playground's page is served under a CSP that keeps it out of other
/// sites' frames and lets it load and talk to this server only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_page_has_a_strict_csp() {
    let app = TestApp::spawn(crate::support::Backend::Sqlite).await;
    let page = app
        .http
        .get(format!("{}/", app.base))
        .send()
        .await
        .expect("an answer");
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .expect("a CSP")
        .to_owned();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    app.finish().await;
}

fn few_registrations(c: &mut ephemera::config::Config) {
    c.limits.rate_persisted_queries = "3/1m".parse().expect("a rate");
}

/// One client cannot flush the persisted-query cache: new registrations
/// from one address are limited (`RATE_LIMITED`), what is registered stays,
/// and known hashes still run.
async fn persisted_queries_are_rationed_per_address(app: &TestApp) {
    let register = |i: usize| {
        let query = format!("query Q{i} {{ __typename }}");
        let ext = json!({ "persistedQuery": { "version": 1, "sha256Hash": sha256(&query) } });
        json!({ "query": query, "extensions": ext })
    };
    for i in 0..3 {
        let (_, resp) = app.post(None, &register(i)).await;
        assert_eq!(resp["data"]["__typename"], "Query", "{resp}");
    }
    let (_, resp) = app.post(None, &register(3)).await;
    assert_eq!(error_code(&resp), "RATE_LIMITED", "{resp}");
    // Registering a known one again is not new.
    let (_, resp) = app.post(None, &register(0)).await;
    assert_eq!(resp["data"]["__typename"], "Query", "{resp}");
    let hash_only = json!({ "extensions": register(1)["extensions"] });
    let (_, resp) = app.post(None, &hash_only).await;
    assert_eq!(resp["data"]["__typename"], "Query", "{resp}");
    let unknown = json!({ "extensions": register(3)["extensions"] });
    let (_, resp) = app.post(None, &unknown).await;
    assert_eq!(error_code(&resp), "PERSISTED_QUERY_NOT_FOUND", "{resp}");
}

crate::both_backends_with!(few_registrations => persisted_queries_are_rationed_per_address);

/// A JPEG segment: marker and contents, with its length.
fn jpeg_segment(marker: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![0xFF, marker];
    out.extend_from_slice(
        &u16::try_from(contents.len() + 2)
            .expect("short")
            .to_be_bytes(),
    );
    out.extend_from_slice(contents);
    out
}

/// Uploaded through the API, a JPEG hiding location data in a JFXX
/// thumbnail, an APP3 "Meta" segment, after its scan and in a comment is
/// stored and served without any of it; the stored file is the server's
/// user's alone (0600).
async fn uploads_keep_only_what_draws_the_image(app: &TestApp) {
    let u = app.sign_up("photographer").await;
    let original = crate::support::fixture("gps.jpg");
    let mut hostile = vec![0xFF, 0xD8];
    hostile.extend(jpeg_segment(0xE0, b"JFXX\0\x10GPS-IN-JFXX"));
    hostile.extend(jpeg_segment(0xE3, b"Meta\0GPS-IN-META"));
    hostile.extend_from_slice(&original[2..original.len() - 2]);
    hostile.extend(jpeg_segment(0xE1, b"Exif\0\0GPS-AFTER-THE-SCAN"));
    hostile.extend(jpeg_segment(0xFE, b"GPS-IN-COMMENT"));
    hostile.extend_from_slice(&[0xFF, 0xD9]);
    let (status, resp) = app.upload(u.token(), hostile, "x.jpg", "image/jpeg").await;
    assert_eq!(status, 200, "{resp}");
    let media = &resp["data"]["uploadMedia"];
    let (status, served) = app.fetch(media["url"].as_str().expect("a URL")).await;
    assert_eq!(status, 200);
    for secret in [
        &b"GPS-IN-JFXX"[..],
        b"GPS-IN-META",
        b"GPS-AFTER-THE-SCAN",
        b"GPS-IN-COMMENT",
    ] {
        assert!(
            !crate::support::contains(&served, secret),
            "{}",
            String::from_utf8_lossy(secret)
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let dir = app.state.config.effective_media_dir();
        let keys = app.store_keys().await;
        assert!(!keys.is_empty());
        for key in keys {
            let mode = std::fs::metadata(dir.join(&key))
                .expect("the stored file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
    }
}

crate::both_backends!(uploads_keep_only_what_draws_the_image);

fn small_work_share(c: &mut ephemera::config::Config) {
    c.limits.work_time_per_client = std::time::Duration::from_millis(1);
    c.limits.work_time_burst = std::time::Duration::from_millis(200);
}

/// Each client's share of work: a client that keeps asking for reads is
/// refused `RATE_LIMITED` once past its burst, over HTTP and websockets
/// alike, while another client is served. (The author's statuses are
/// written straight to the database: through the API its writes would be
/// charged to its own share, whose burst a slow commit could use up before
/// the test begins.)
async fn a_client_gets_its_share_of_work(app: &TestApp) {
    use sea_orm::TransactionTrait;
    let author = app.sign_up("author").await;
    let heavy = app.sign_up("heavy").await;
    let other = app.sign_up("other").await;
    for _ in 0..5 {
        let txn = app.state.db.begin().await.unwrap();
        let id = app.state.ids.next_id();
        crate::support::write_logged_status(&txn, id, raw(&author.id), app.clock.now()).await;
        txn.commit().await.unwrap();
    }
    let q = "query($u: ID!) { statuses(userId: $u, first: 50) { nodes { id caption author { username } } } }";
    let vars = json!({ "u": author.id });
    let mut refused = None;
    for _ in 0..2_000 {
        let resp = app.gql(heavy.token(), q, vars.clone()).await;
        if resp["errors"][0]["extensions"]["code"] == "RATE_LIMITED" {
            refused = Some(resp);
            break;
        }
    }
    let refused = refused.expect("the heavy client is refused at last");
    assert!(
        message(&refused).contains("share of the server's time"),
        "{refused}"
    );
    assert!(refused["errors"][0]["extensions"]["retryAfter"].as_u64() >= Some(1));
    let (mut ws, _) = WsClient::connect(
        &app.ws_url,
        Protocol::TransportWs,
        json!({ "authorization": format!("Bearer {}", heavy.token) }),
    )
    .await;
    // Over a websocket, the same share: refused within as many operations.
    let mut refused_over_ws = false;
    for i in 0..2_000 {
        let id = format!("q{i}");
        ws.subscribe(&id, q, vars.clone()).await;
        let answer = ws.next_message().await.expect("an answer");
        if ws_error_code(&answer) == "RATE_LIMITED" {
            refused_over_ws = true;
            break;
        }
        // The operation's `complete`.
        let _ = ws.next_message().await;
    }
    assert!(refused_over_ws, "never refused over the websocket");
    // Another client is served.
    let data = app.ok(other.token(), q, vars).await;
    assert_eq!(data["statuses"]["nodes"].as_array().map(Vec::len), Some(5));
}

crate::both_backends_with!(small_work_share => a_client_gets_its_share_of_work);

/// The share counts all the work a request makes, not only its database
/// time: a client whose queries run no statement at all (introspection,
/// pure execution) is refused once past its burst, and one whose queries
/// are refused by the guard pays for their parsing too; another client is
/// served meanwhile.
async fn a_client_is_charged_for_the_time_it_keeps_the_server_busy(app: &TestApp) {
    let busy = app.sign_up("busy").await;
    let other = app.sign_up("other").await;
    let q = "{ __schema { types { name description fields { name description args { name type { name kind } } type { name kind ofType { name kind } } } } } }";
    let mut refused = None;
    for _ in 0..5_000 {
        let resp = app.gql(busy.token(), q, json!({})).await;
        if resp["errors"][0]["extensions"]["code"] == "RATE_LIMITED" {
            refused = Some(resp);
            break;
        }
        assert!(resp["data"]["__schema"]["types"].is_array(), "{resp}");
    }
    let refused = refused.expect("a client that only keeps the server busy is refused at last");
    assert!(
        message(&refused).contains("share of the server's time"),
        "{refused}"
    );
    // Another client is served.
    let data = app.ok(other.token(), "{ __typename }", json!({})).await;
    assert_eq!(data["__typename"], "Query");

    // Invalid documents are parsed and refused, and the parsing is charged.
    let parser = app.sign_up("parser").await;
    let invalid = format!("{{ {} }}", vec!["__typename nowhere"; 200].join(" "));
    let mut refused = false;
    for _ in 0..20_000 {
        let resp = app.gql(parser.token(), &invalid, json!({})).await;
        let code = resp["errors"][0]["extensions"]["code"].clone();
        if code == "RATE_LIMITED" {
            refused = true;
            break;
        }
        assert!(
            resp.get("data").is_none_or(serde_json::Value::is_null),
            "{resp}"
        );
    }
    assert!(
        refused,
        "a client sending invalid documents is never charged"
    );
}

crate::both_backends_with!(small_work_share => a_client_is_charged_for_the_time_it_keeps_the_server_busy);
