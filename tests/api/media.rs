//! Media: uploads judged by their bytes, the CSRF rule, the streaming size
//! limit, signed URLs, direct uploads, the attach rules, and deletion through
//! the outbox (status delete and purge, unattached sweep, account deletion,
//! an S3 outage). Each runs on both databases, most on both stores.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{
    Backend, HOUR, Store, TestApp, TestUser, contains, fixture, raw, upload_form,
};
use crate::{all_stores, both_backends};

all_stores!(
    every_accepted_type_is_stored_and_served,
    refused_uploads_store_nothing,
    multipart_needs_a_preflight_header,
    a_huge_upload_is_cut_off_at_the_limit,
    direct_upload_end_to_end,
    direct_upload_rejections,
    attach_rules,
    deleting_a_status_deletes_its_blob,
    unattached_uploads_are_swept,
    account_deletion_leaves_nothing,
);
// S3 URLs: `media_store::s3_urls_expire`.
both_backends!(local_urls_are_signed_and_expire);

const CREATE: &str = "mutation($i: CreateStatusInput!) { createStatus(input: $i) { id media { id url contentType byteSize width height } } }";

/// Posts a status with `media`, which must fail; the error's code.
async fn attach_code(app: &TestApp, user: &TestUser, media: &Value) -> String {
    app.err(user.token(), CREATE, json!({ "i": { "mediaId": media } }))
        .await
}

async fn media_rows(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) AS n FROM media").await
}

async fn outbox(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) AS n FROM media_deletions").await
}

async fn every_accepted_type_is_stored_and_served(app: &TestApp) {
    let u = app.sign_up("uploader").await;
    for (file, ty, w, h) in [
        ("gps.jpg", "image/jpeg", 3, 2),
        ("gps.png", "image/png", 3, 2),
        ("tiny.gif", "image/gif", 3, 2),
        ("gps.webp", "image/webp", 3, 2),
        ("tiny.heic", "image/heic", 64, 64),
        ("tiny.heif", "image/heif", 64, 64),
        ("gps.heic", "image/heic", 64, 64),
    ] {
        // Named and declared as something else: the bytes decide.
        let (status, resp) = app
            .upload(u.token(), fixture(file), "upload.bin", "text/plain")
            .await;
        assert_eq!(status, StatusCode::OK, "{file}: {resp}");
        let m = &resp["data"]["uploadMedia"];
        assert_eq!(m["contentType"], ty, "{file}: {resp}");
        assert_eq!(
            (m["width"].as_i64(), m["height"].as_i64()),
            (Some(w), Some(h)),
            "{file}"
        );
        let (status, bytes) = app.fetch(m["url"].as_str().unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{file}");
        assert_eq!(
            bytes.len() as i64,
            m["byteSize"].as_i64().unwrap(),
            "{file}"
        );
        assert_eq!(
            ephemera::domain::image::content_type_of(&bytes),
            Some(ty),
            "{file}"
        );
        // Location metadata is gone from what is stored. (HEIF names its
        // EXIF item's type in its tables; the item's bytes are blanked.)
        for marker in [
            &b"Exif"[..],
            b"EXIF",
            b"eXIf",
            b"GPS",
            b"EphemeraCam",
            b"xmpmeta",
        ] {
            if !ty.starts_with("image/hei") || marker != b"Exif" {
                assert!(!contains(&bytes, marker), "{file} still holds {marker:?}");
            }
        }
    }
    // A phone photo keeps its orientation (alone), so it still shows upright.
    let rotated = app.upload_fixture(&u, "rotated.jpg").await;
    let (_, bytes) = app.fetch(rotated["url"].as_str().unwrap()).await;
    assert!(contains(&bytes, b"Exif\0\0"), "the orientation is kept");
    assert!(!contains(&bytes, b"GPS") && !contains(&bytes, b"EphemeraCam"));
    assert_eq!(media_rows(app).await, 8);
    assert_eq!(app.store_keys().await.len(), 8);
    // The JPEG and HEIC samples did carry GPS before.
    assert!(contains(&fixture("gps.jpg"), b"GPS"));
    assert!(contains(&fixture("gps.heic"), b"EphemeraCam"));
}

async fn refused_uploads_store_nothing(app: &TestApp) {
    let u = app.sign_up("uploader").await;
    let png = fixture("gps.png");
    let cases: [(&str, Vec<u8>); 4] = [
        ("a script renamed .png", b"#!/bin/sh\nrm -rf /\n".to_vec()),
        ("an empty file", Vec::new()),
        ("a truncated header", png[..20].to_vec()),
        ("HTML", b"<html><script>alert(1)</script></html>".to_vec()),
    ];
    for (what, bytes) in cases {
        let (status, resp) = app.upload(u.token(), bytes, "photo.png", "image/png").await;
        assert_eq!(status, StatusCode::OK, "{what}");
        assert_eq!(
            resp["errors"][0]["extensions"]["code"], "UNSUPPORTED_MEDIA_TYPE",
            "{what}: {resp}"
        );
        assert!(resp["data"].is_null(), "{what}");
    }
    // Anonymous: refused before the body is read.
    let (status, resp) = app.upload(None, png.clone(), "a.png", "image/png").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(resp["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
    // Two files in one request.
    let form = reqwest::multipart::Form::new()
        .text("operations", json!({ "query": "mutation($a: Upload!, $b: Upload!) { a: uploadMedia(file: $a) { id } b: uploadMedia(file: $b) { id } }", "variables": { "a": null, "b": null } }).to_string())
        .text("map", json!({ "0": ["variables.a"], "1": ["variables.b"] }).to_string())
        .part("0", reqwest::multipart::Part::bytes(png.clone()).file_name("a.png"))
        .part("1", reqwest::multipart::Part::bytes(png.clone()).file_name("b.png"));
    let resp = app
        .http
        .post(format!("{}/graphql", app.base))
        .header("apollo-require-preflight", "true")
        .bearer_auth(&u.token)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "{body}"
    );
    // The file argument without a file.
    let code = app
        .err(
            u.token(),
            "mutation { uploadMedia(file: null) { id } }",
            json!({}),
        )
        .await;
    assert_eq!(code, "BAD_USER_INPUT");
    for forged in ["not a file", "#__graphql_file__:7", "#__graphql_file__:x"] {
        let code = app
            .err(
                u.token(),
                "mutation($f: Upload!) { uploadMedia(file: $f) { id } }",
                json!({ "f": forged }),
            )
            .await;
        assert_eq!(code, "BAD_USER_INPUT", "{forged}");
    }
    let code = app
        .err(
            u.token(),
            "mutation { uploadMedia(file: \"#__graphql_file__:x\") { id } }",
            json!({}),
        )
        .await;
    assert_eq!(code, "BAD_USER_INPUT");
    assert_eq!(media_rows(app).await, 0);
    assert!(app.store_keys().await.is_empty());
    assert_eq!(outbox(app).await, 0);
}

async fn multipart_needs_a_preflight_header(app: &TestApp) {
    let u = app.sign_up("uploader").await;
    for header in [None, Some(""), Some("  ")] {
        let form = upload_form(fixture("gps.png"), "a.png", "image/png");
        let mut req = app
            .http
            .post(format!("{}/graphql", app.base))
            .bearer_auth(&u.token)
            .multipart(form);
        if let Some(h) = header {
            req = req.header("x-apollo-operation-name", h);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{header:?}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT");
        assert!(
            body["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("Apollo-Require-Preflight")
        );
    }
    assert_eq!(media_rows(app).await, 0);
    assert!(app.store_keys().await.is_empty());
    // Either header works.
    let form = upload_form(fixture("gps.png"), "a.png", "image/png");
    let resp = app
        .http
        .post(format!("{}/graphql", app.base))
        .bearer_auth(&u.token)
        .header("x-apollo-operation-name", "Upload")
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(media_rows(app).await, 1);
}

/// A 1 GB upload over a raw socket: the server answers 413 once the limit has
/// streamed in, and the client never gets to send most of it.
async fn a_huge_upload_is_cut_off_at_the_limit(app: &TestApp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let u = app.sign_up("uploader").await;
    let boundary = "XyZzYboundary";
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"operations\"\r\n\r\n{}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"map\"\r\n\r\n{}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"0\"; filename=\"huge.png\"\r\nContent-Type: image/png\r\n\r\n",
        json!({ "query": "mutation($f: Upload!) { uploadMedia(file: $f) { id } }", "variables": { "f": null } }),
        json!({ "0": ["variables.f"] }),
    );
    let total: u64 = 1 << 30;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let request_head = format!(
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Apollo-Require-Preflight: true\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n\
         Content-Length: {}\r\n\r\n",
        u.token,
        head.len() as u64 + total
    );
    let writer = tokio::spawn(async move {
        let mut sent = 0u64;
        if wr.write_all(request_head.as_bytes()).await.is_err()
            || wr.write_all(head.as_bytes()).await.is_err()
        {
            return sent;
        }
        let mut chunk = vec![0u8; 64 * 1024];
        chunk[..8].copy_from_slice(b"\x89PNG\r\n\x1a\n");
        while sent < total {
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
            sent += chunk.len() as u64;
            chunk[..8].fill(0);
        }
        sent
    });
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(60), rd.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                response.extend_from_slice(&buf[..n]);
                if contains(&response, b"}]}") {
                    break;
                }
            }
            Err(_) => panic!("no answer within 60 s"),
        }
    }
    drop(rd);
    let text = String::from_utf8_lossy(&response).to_string();
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("PAYLOAD_TOO_LARGE"), "{text}");
    let sent = tokio::time::timeout(std::time::Duration::from_secs(60), writer)
        .await
        .expect("the writer stops once the server hangs up")
        .unwrap();
    assert!(
        sent < 48 * 1024 * 1024,
        "the client got to send {sent} bytes"
    );
    assert_eq!(media_rows(app).await, 0);
    assert!(app.store_keys().await.is_empty());
}

/// Uploads of exactly the limit pass; one byte more does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_exact() {
    let png = fixture("gps.png");
    let len = png.len() as u64;
    for (limit, ok) in [(len, true), (len - 1, false)] {
        let app = TestApp::spawn_full(Backend::Sqlite, Store::Local, |c| {
            c.media.max_upload_bytes = limit
        })
        .await;
        let u = app.sign_up("uploader").await;
        let (status, resp) = app
            .upload(u.token(), png.clone(), "a.png", "image/png")
            .await;
        if ok {
            assert_eq!(status, StatusCode::OK, "{resp}");
            assert!(resp.get("errors").is_none(), "{resp}");
        } else {
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{resp}");
            assert_eq!(resp["errors"][0]["extensions"]["code"], "PAYLOAD_TOO_LARGE");
        }
        app.finish().await;
    }
}

const TICKET: &str = "mutation($i: MediaUploadInput!) { requestMediaUpload(input: $i) { mediaId uploadUrl headers { name value } expiresAt } }";

/// PUTs `body` to a ticket's URL with the ticket's headers (Content-Length
/// set from the body by the client).
async fn put(app: &TestApp, ticket: &Value, body: Vec<u8>) -> StatusCode {
    let mut req = app
        .http
        .put(app.absolute(ticket["uploadUrl"].as_str().unwrap()));
    for h in ticket["headers"].as_array().unwrap() {
        let name = h["name"].as_str().unwrap();
        if !name.eq_ignore_ascii_case("content-length") {
            req = req.header(name, h["value"].as_str().unwrap());
        }
    }
    req.body(body).send().await.unwrap().status()
}

async fn ticket(app: &TestApp, token: Option<&str>, ty: &str, size: usize) -> Value {
    app.ok(
        token,
        TICKET,
        json!({ "i": { "contentType": ty, "byteSize": size } }),
    )
    .await["requestMediaUpload"]
        .clone()
}

async fn direct_upload_end_to_end(app: &TestApp) {
    let u = app.sign_up("direct").await;
    let jpeg = fixture("gps.jpg");
    let t = ticket(app, u.token(), "image/jpeg", jpeg.len()).await;
    assert!(t["headers"].as_array().unwrap().iter().any(|h| {
        h["name"]
            .as_str()
            .unwrap()
            .eq_ignore_ascii_case("content-type")
    }));
    assert_eq!(put(app, &t, jpeg.clone()).await, StatusCode::OK);
    let made = app
        .ok(
            u.token(),
            CREATE,
            json!({ "i": { "mediaId": t["mediaId"] } }),
        )
        .await;
    let m = &made["createStatus"]["media"];
    assert_eq!(m["id"], t["mediaId"]);
    assert_eq!(m["contentType"], "image/jpeg");
    assert_eq!(
        (m["width"].as_i64(), m["height"].as_i64()),
        (Some(3), Some(2))
    );
    let (status, bytes) = app.fetch(m["url"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes.len() as i64, m["byteSize"].as_i64().unwrap());
    assert!(
        !contains(&bytes, b"GPS") && !contains(&bytes, b"Exif"),
        "metadata stripped from direct uploads too"
    );
    // A second PUT with the same ticket cannot replace what was checked.
    let replayed = put(app, &t, b"<html>gotcha</html>".to_vec()).await;
    assert!(
        replayed == StatusCode::OK || replayed.is_client_error(),
        "{replayed}"
    );
    let (_, again) = app.fetch(m["url"].as_str().unwrap()).await;
    assert_eq!(again, bytes);
    // The upload key is deleted once the ticket can no longer write it.
    assert_eq!(app.store_keys().await.len(), 2);
    assert_eq!(app.media_gc().await.deleted, 0);
    app.clock.advance(2 * HOUR);
    assert_eq!(app.media_gc().await.deleted, 1);
    assert_eq!(app.store_keys().await.len(), 1);
    // (Back to real time: S3 refuses URLs signed in the future.)
    app.clock.set(app.clock.now() - 2 * HOUR.as_millis() as i64);
    let (status, served) = app.fetch(&made_url(app, &u, &t["mediaId"]).await).await;
    assert_eq!((status, served), (StatusCode::OK, bytes));
}

/// The current URL of a media, by id, for its uploader.
async fn made_url(app: &TestApp, u: &crate::support::TestUser, id: &Value) -> String {
    let q = "query($id: ID!) { node(id: $id) { ... on Media { url } } }";
    app.ok(u.token(), q, json!({ "id": id })).await["node"]["url"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn direct_upload_rejections(app: &TestApp) {
    let u = app.sign_up("direct").await;
    let max = app.state.config.media.max_upload_bytes as usize;
    for (input, code) in [
        (
            json!({ "contentType": "text/plain", "byteSize": 10 }),
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            json!({ "contentType": "image/svg+xml", "byteSize": 10 }),
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            json!({ "contentType": "image/png", "byteSize": 0 }),
            "BAD_USER_INPUT",
        ),
        (
            json!({ "contentType": "image/png", "byteSize": -5 }),
            "BAD_USER_INPUT",
        ),
        (
            json!({ "contentType": "image/png", "byteSize": max + 1 }),
            "PAYLOAD_TOO_LARGE",
        ),
    ] {
        assert_eq!(
            app.err(u.token(), TICKET, json!({ "i": input })).await,
            code,
            "{input}"
        );
    }
    assert_eq!(
        app.err(
            None,
            TICKET,
            json!({ "i": { "contentType": "image/png", "byteSize": 10 } })
        )
        .await,
        "UNAUTHENTICATED"
    );
    assert_eq!(media_rows(app).await, 0);

    // Attached before the bytes arrived: refused, the ticket stays usable.
    let png = fixture("gps.png");
    let t = ticket(app, u.token(), "image/png", png.len()).await;
    assert_eq!(attach_code(app, &u, &t["mediaId"]).await, "BAD_USER_INPUT");
    // A PUT whose length differs from the signed one is refused.
    let mut longer = png.clone();
    longer.push(0);
    let status = put(app, &t, longer).await;
    assert!(status.is_client_error(), "{status}");
    assert_eq!(put(app, &t, png.clone()).await, StatusCode::OK);
    app.ok(
        u.token(),
        CREATE,
        json!({ "i": { "mediaId": t["mediaId"] } }),
    )
    .await;

    // A script uploaded as image/png: refused when attached, row and blob gone.
    let script = b"#!/bin/sh\necho hi\n".to_vec();
    let t = ticket(app, u.token(), "image/png", script.len()).await;
    assert_eq!(put(app, &t, script.clone()).await, StatusCode::OK);
    // The earlier upload's key is still held; this one makes three.
    assert_eq!(app.store_keys().await.len(), 3);
    assert_eq!(
        attach_code(app, &u, &t["mediaId"]).await,
        "UNSUPPORTED_MEDIA_TYPE"
    );
    assert_eq!(attach_code(app, &u, &t["mediaId"]).await, "NOT_FOUND");
    assert_eq!(media_rows(app).await, 1);
    assert_eq!(outbox(app).await, 2);
    // Both keys are held while their tickets could write them, then deleted,
    // even if the client PUT again in between.
    assert_eq!(app.media_gc().await.deleted, 0);
    let _ = put(app, &t, script).await;
    app.clock.advance(2 * HOUR);
    assert_eq!(app.media_gc().await.deleted, 2);
    assert_eq!(app.store_keys().await.len(), 1);
    app.clock.set(app.clock.now() - 2 * HOUR.as_millis() as i64);

    // A ticket used after it expired is refused by the store.
    let real_now = app.clock.now();
    app.clock.set(real_now - HOUR.as_millis() as i64);
    let t = ticket(app, u.token(), "image/png", png.len()).await;
    app.clock.set(real_now);
    assert_eq!(put(app, &t, png.clone()).await, StatusCode::FORBIDDEN);
    // A tampered local signature is refused too.
    if app.store == Store::Local {
        let t = ticket(app, u.token(), "image/png", png.len()).await;
        let mut bad = t.clone();
        bad["uploadUrl"] = json!(t["uploadUrl"].as_str().unwrap().replace("sig=", "sig=AA"));
        assert_eq!(put(app, &bad, png.clone()).await, StatusCode::FORBIDDEN);
        // Another content type than the one signed.
        let mut other = t.clone();
        other["headers"] = json!([{ "name": "Content-Type", "value": "image/jpeg" }]);
        assert_eq!(put(app, &other, png.clone()).await, StatusCode::FORBIDDEN);
    }
    assert_eq!(app.store_keys().await.len(), 1);
}

async fn attach_rules(app: &TestApp) {
    let owner = app.sign_up("owner").await;
    let other = app.sign_up("other").await;
    let m = app.upload_fixture(&owner, "gps.png").await;
    let id = m["id"].clone();
    // Someone else's upload answers as one that does not exist.
    assert_eq!(attach_code(app, &other, &id).await, "NOT_FOUND");
    assert_eq!(
        attach_code(app, &owner, &json!("99999999")).await,
        "NOT_FOUND"
    );
    assert_eq!(attach_code(app, &owner, &json!("x")).await, "NOT_FOUND");
    // Two concurrent attaches: exactly one wins.
    let (a, b) = tokio::join!(
        app.gql(owner.token(), CREATE, json!({ "i": { "mediaId": id } })),
        app.gql(owner.token(), CREATE, json!({ "i": { "mediaId": id } })),
    );
    let wins = [&a, &b]
        .iter()
        .filter(|r| r.get("errors").is_none())
        .count();
    assert_eq!(wins, 1, "{a} {b}");
    let loser = if a.get("errors").is_some() { &a } else { &b };
    assert_eq!(loser["errors"][0]["extensions"]["code"], "BAD_USER_INPUT");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 1);
    // Visible by id to its uploader only.
    let node = "query($id: ID!) { node(id: $id) { id } }";
    assert_eq!(
        app.ok(owner.token(), node, json!({ "id": id })).await["node"]["id"],
        id
    );
    assert!(app.ok(other.token(), node, json!({ "id": id })).await["node"].is_null());
    assert!(app.ok(None, node, json!({ "id": id })).await["node"].is_null());
}

async fn deleting_a_status_deletes_its_blob(app: &TestApp) {
    let u = app.sign_up("poster").await;
    let keep = app.upload_fixture(&u, "gps.png").await;
    let a = app.upload_fixture(&u, "gps.jpg").await;
    let b = app.upload_fixture(&u, "tiny.gif").await;
    app.ok(u.token(), CREATE, json!({ "i": { "mediaId": keep["id"] } }))
        .await;
    let sa = app
        .ok(u.token(), CREATE, json!({ "i": { "mediaId": a["id"] } }))
        .await;
    app.ok(u.token(), CREATE, json!({ "i": { "mediaId": b["id"] } }))
        .await;
    assert_eq!(app.store_keys().await.len(), 3);

    // Delete: the row and media row go at once, the blob through the outbox.
    app.ok(
        u.token(),
        "mutation($id: ID!) { deleteStatus(id: $id) }",
        json!({ "id": sa["createStatus"]["id"] }),
    )
    .await;
    assert_eq!(media_rows(app).await, 2);
    assert_eq!(outbox(app).await, 1);
    assert_eq!(app.media_gc().await.deleted, 1);
    assert_eq!(app.store_keys().await.len(), 2);
    assert_eq!(outbox(app).await, 0);
    let (status, _) = app.fetch(a["url"].as_str().unwrap()).await;
    assert!(status.is_client_error(), "{status}");

    // Purge: expired statuses take their media with them.
    app.clock.advance(25 * HOUR);
    let report = ephemera::jobs::status_purge::run_once(&app.state, app.clock.now())
        .await
        .unwrap();
    assert_eq!(report.rows, 2);
    assert_eq!(media_rows(app).await, 0);
    assert_eq!(outbox(app).await, 2);
    assert_eq!(app.media_gc().await.deleted, 2);
    assert!(app.store_keys().await.is_empty());
    // Running again finds nothing to do.
    assert_eq!(app.media_gc().await, Default::default());
}

async fn unattached_uploads_are_swept(app: &TestApp) {
    let u = app.sign_up("hoarder").await;
    let loose = app.upload_fixture(&u, "gps.png").await;
    let used = app.upload_fixture(&u, "gps.jpg").await;
    app.clock.advance(23 * HOUR);
    assert_eq!(app.media_gc().await.swept, 0);
    app.ok(u.token(), CREATE, json!({ "i": { "mediaId": used["id"] } }))
        .await;
    app.clock.advance(2 * HOUR);
    let report = app.media_gc().await;
    assert_eq!((report.swept, report.deleted), (1, 1));
    assert_eq!(media_rows(app).await, 1);
    assert_eq!(app.store_keys().await.len(), 1);
    assert_eq!(attach_code(app, &u, &loose["id"]).await, "NOT_FOUND");
    // The attached one still serves. (Back to real time first: S3 refuses
    // URLs signed in the future.)
    app.clock
        .set(app.clock.now() - 25 * HOUR.as_millis() as i64);
    let s = app
        .ok(
            u.token(),
            "query($u: ID!) { statuses(userId: $u) { nodes { media { url } } } }",
            json!({ "u": u.id }),
        )
        .await;
    let url = s["statuses"]["nodes"][0]["media"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.fetch(&url).await.0, StatusCode::OK);
}

async fn local_urls_are_signed_and_expire(app: &TestApp) {
    let u = app.sign_up("viewer").await;
    let m = app.upload_fixture(&u, "gps.png").await;
    let url = m["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with("/media/") && url.contains("sig="), "{url}");
    assert_eq!(app.fetch(&url).await.0, StatusCode::OK);
    let resp = app.http.get(app.absolute(&url)).send().await.unwrap();
    assert_eq!(resp.headers()["content-type"], "image/png");
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    // The same URL for a while (cacheable).
    let again = app
        .ok(
            u.token(),
            "query($id: ID!) { node(id: $id) { ... on Media { url } } }",
            json!({ "id": m["id"] }),
        )
        .await;
    assert_eq!(again["node"]["url"], url);
    let unsigned = url.split('?').next().unwrap().to_owned();
    let tampered = url.replace("sig=", "sig=x");
    let other_key = format!("/media/00/00{}", &unsigned[12..]);
    for bad in [unsigned.as_str(), tampered.as_str()] {
        assert_eq!(app.fetch(bad).await.0, StatusCode::FORBIDDEN, "{bad}");
    }
    let moved = format!("{other_key}?{}", url.split('?').nth(1).unwrap());
    assert_eq!(
        app.fetch(&moved).await.0,
        StatusCode::FORBIDDEN,
        "a signature is for its key only"
    );
    let traversal = app
        .fetch("/media/..%2F..%2Fetc/passwd?exp=9999999999&sig=x")
        .await
        .0;
    assert!(traversal.is_client_error(), "{traversal}");
    // Expired after at most two URL lifetimes.
    app.clock
        .advance(2 * HOUR + std::time::Duration::from_secs(1));
    assert_eq!(app.fetch(&url).await.0, StatusCode::FORBIDDEN);
}

async fn account_deletion_leaves_nothing(app: &TestApp) {
    let gone = app.sign_up("leaving").await;
    let stays = app.sign_up("staying").await;
    app.befriend(&gone, &stays).await;
    let m1 = app.upload_fixture(&gone, "gps.jpg").await;
    app.upload_fixture(&gone, "gps.png").await; // never attached
    let s = app
        .ok(
            gone.token(),
            CREATE,
            json!({ "i": { "mediaId": m1["id"] } }),
        )
        .await;
    let sid = s["createStatus"]["id"].clone();
    app.ok(
        stays.token(),
        "mutation($id: ID!) { markStatusSeen(id: $id) { id } }",
        json!({ "id": sid }),
    )
    .await;
    let mine = app.upload_fixture(&stays, "tiny.gif").await;
    let own = app
        .ok(
            stays.token(),
            CREATE,
            json!({ "i": { "mediaId": mine["id"] } }),
        )
        .await;
    app.ok(
        gone.token(),
        "mutation($id: ID!) { markStatusSeen(id: $id) { id } }",
        json!({ "id": own["createStatus"]["id"] }),
    )
    .await;

    let delete = "mutation($p: String!) { deleteAccount(password: $p) }";
    assert_eq!(
        app.err(gone.token(), delete, json!({ "p": "wrong password" }))
            .await,
        "FORBIDDEN"
    );
    assert_eq!(
        app.err(None, delete, json!({ "p": "password123" })).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM users").await, 2);
    assert_eq!(media_rows(app).await, 3);
    assert_eq!(
        app.ok(gone.token(), delete, json!({ "p": "password123" }))
            .await["deleteAccount"],
        true
    );

    let id = raw(&gone.id);
    for (table, sql) in [
        (
            "users",
            format!("SELECT COUNT(*) AS n FROM users WHERE id = {id}"),
        ),
        (
            "statuses",
            format!("SELECT COUNT(*) AS n FROM statuses WHERE author_id = {id}"),
        ),
        (
            "media",
            format!("SELECT COUNT(*) AS n FROM media WHERE owner_id = {id}"),
        ),
        (
            "status_tray",
            format!("SELECT COUNT(*) AS n FROM status_tray WHERE author_id = {id}"),
        ),
        (
            "status_views",
            format!("SELECT COUNT(*) AS n FROM status_views WHERE viewer_id = {id}"),
        ),
        (
            "friendships",
            format!("SELECT COUNT(*) AS n FROM friendships WHERE low_id = {id} OR high_id = {id}"),
        ),
    ] {
        assert_eq!(app.count(&sql).await, 0, "{table}");
    }
    assert_eq!(outbox(app).await, 2);
    assert_eq!(app.media_gc().await.deleted, 2);
    assert_eq!(
        app.store_keys().await.len(),
        1,
        "only the other user's blob is left"
    );
    // The other user is untouched; their status lost its view by the deleted user.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 1);
    // The deleted account's token no longer works anywhere it acts.
    assert_eq!(
        app.err(gone.token(), CREATE, json!({ "i": { "caption": "ghost" } }))
            .await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.err(gone.token(), delete, json!({ "p": "password123" }))
            .await,
        "UNAUTHENTICATED"
    );
    let (_, resp) = app
        .upload(gone.token(), fixture("gps.png"), "a.png", "image/png")
        .await;
    assert_eq!(
        resp["errors"][0]["extensions"]["code"], "UNAUTHENTICATED",
        "{resp}"
    );
    assert_eq!(media_rows(app).await, 1);
    // The name is free again.
    app.sign_up("leaving").await;
}
