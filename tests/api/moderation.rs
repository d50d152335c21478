//! Reports and moderation: reporting what one can see, the moderators'
//! queue, taking content down (with its media, through the outbox, and a
//! notice to the author), suspending and reinstating accounts, the
//! `ephemera users grant-moderator` command, and every rejection path.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{Backend, IdKind, TestApp, TestUser, error_code, gid, raw};

both_backends!(
    reports_reach_the_moderators,
    taking_down_deletes_and_tells_the_author,
    suspension_hides_everything_until_reinstated,
    moderator_actions_refuse_bad_input,
);

const REPORT: &str = "mutation($id: ID!, $r: ReportReason!, $d: String) { report(input: { subjectId: $id, reason: $r, details: $d }) { id subjectKind subjectId excerpt reason details resolvedAt reporter { id } subjectAuthor { id } } }";
const REPORTS: &str = "query($all: Boolean) { reports(first: 50, includeResolved: $all) { nodes { id subjectKind subjectId reason excerpt resolution reporter { username } subjectAuthor { username } } } }";

async fn moderator(app: &TestApp, name: &str) -> TestUser {
    let user = app.sign_up(name).await;
    ephemera::domain::moderation::set_moderator(&app.state.db, name, true)
        .await
        .unwrap();
    user
}

async fn report(app: &TestApp, who: &TestUser, id: &str, reason: &str) -> Value {
    app.gql(who.token(), REPORT, json!({ "id": id, "r": reason }))
        .await
}

async fn reports_reach_the_moderators(app: &TestApp) {
    let author = app.sign_up("author").await;
    let reporter = app.sign_up("reporter").await;
    let mod_user = moderator(app, "warden").await;
    let status = app.post_status(&author, "buy my stuff").await;
    let moment = app
        .post_moment(
            &author,
            json!({ "visibility": "PUBLIC", "caption": "look" }),
        )
        .await;
    let hidden = app.post_status_to(&author, "friends only", "FRIENDS").await;

    let r1 = report(app, &reporter, &status, "SPAM").await;
    let r1 = &r1["data"]["report"];
    assert_eq!(r1["subjectKind"], "STATUS");
    assert_eq!(r1["excerpt"], "buy my stuff");
    assert_eq!(r1["reporter"]["id"], reporter.id.as_str());
    assert_eq!(r1["subjectAuthor"]["id"], author.id.as_str());
    assert!(r1["resolvedAt"].is_null());
    // Again while open: the same report.
    let again = report(app, &reporter, &status, "HATE").await;
    assert_eq!(again["data"]["report"]["id"], r1["id"]);
    let r2 = report(app, &reporter, moment["id"].as_str().unwrap(), "NUDITY").await;
    assert_eq!(r2["data"]["report"]["subjectKind"], "MOMENT");
    let r3 = app
        .gql(
            reporter.token(),
            REPORT,
            json!({ "id": author.id, "r": "IMPERSONATION", "d": "pretends to be me" }),
        )
        .await;
    assert_eq!(r3["data"]["report"]["subjectKind"], "USER");
    assert_eq!(r3["data"]["report"]["details"], "pretends to be me");
    // What the reporter cannot see cannot be reported; nor oneself.
    assert_eq!(
        error_code(&report(app, &reporter, &hidden, "SPAM").await),
        "NOT_FOUND"
    );
    assert_eq!(
        error_code(&report(app, &author, &status, "SPAM").await),
        "BAD_USER_INPUT"
    );
    assert_eq!(
        error_code(&report(app, &reporter, &reporter.id, "SPAM").await),
        "BAD_USER_INPUT"
    );
    assert_eq!(
        error_code(&report(app, &reporter, "12345", "SPAM").await),
        "NOT_FOUND"
    );
    let resp = app
        .gql(None, REPORT, json!({ "id": status, "r": "SPAM" }))
        .await;
    assert_eq!(error_code(&resp), "UNAUTHENTICATED");
    let long = "x".repeat(1001);
    let resp = app
        .gql(
            reporter.token(),
            REPORT,
            json!({ "id": status, "r": "SPAM", "d": long }),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    let resp = app
        .gql(
            reporter.token(),
            REPORT,
            json!({ "id": status, "r": "BORING" }),
        )
        .await;
    assert_eq!(error_code(&resp), "BAD_USER_INPUT");
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM reports").await, 3);

    // The queue: moderators only, newest first.
    let queue = app.ok(mod_user.token(), REPORTS, json!({})).await;
    let nodes = queue["reports"]["nodes"].as_array().unwrap();
    let kinds: Vec<&str> = nodes
        .iter()
        .map(|n| n["subjectKind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["USER", "MOMENT", "STATUS"]);
    assert_eq!(nodes[2]["reporter"]["username"], "reporter");
    for who in [&reporter, &author] {
        let resp = app.gql(who.token(), REPORTS, json!({})).await;
        assert_eq!(error_code(&resp), "FORBIDDEN");
    }
    assert_eq!(
        error_code(&app.gql(None, REPORTS, json!({})).await),
        "UNAUTHENTICATED"
    );

    // Resolving takes it off the open queue; a second resolution keeps the first.
    let resolve = "mutation($id: ID!, $r: String!) { resolveReport(id: $id, resolution: $r) { id resolvedAt resolution } }";
    let id = nodes[0]["id"].as_str().unwrap();
    let done = app
        .ok(
            mod_user.token(),
            resolve,
            json!({ "id": id, "r": "no action" }),
        )
        .await;
    assert_eq!(done["resolveReport"]["resolution"], "no action");
    assert!(!done["resolveReport"]["resolvedAt"].is_null());
    let again = app
        .ok(
            mod_user.token(),
            resolve,
            json!({ "id": id, "r": "changed my mind" }),
        )
        .await;
    assert_eq!(again["resolveReport"]["resolution"], "no action");
    let open = app.ok(mod_user.token(), REPORTS, json!({})).await;
    assert_eq!(open["reports"]["nodes"].as_array().unwrap().len(), 2);
    let all = app
        .ok(mod_user.token(), REPORTS, json!({ "all": true }))
        .await;
    assert_eq!(all["reports"]["nodes"].as_array().unwrap().len(), 3);
    let resp = app
        .gql(reporter.token(), resolve, json!({ "id": id, "r": "x" }))
        .await;
    assert_eq!(error_code(&resp), "FORBIDDEN");
    // Once the reporter is gone, the report stays, without a reporter.
    app.ok(
        reporter.token(),
        "mutation { deleteAccount(password: \"password123\") }",
        json!({}),
    )
    .await;
    let all = app
        .ok(mod_user.token(), REPORTS, json!({ "all": true }))
        .await;
    let nodes = all["reports"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["reporter"].is_null()));
}

async fn taking_down_deletes_and_tells_the_author(app: &TestApp) {
    let author = app.sign_up("author").await;
    let reporter = app.sign_up("reporter").await;
    let mod_user = moderator(app, "warden").await;
    let media = app.upload_id(&author).await;
    let status = app
        .ok(
            author.token(),
            "mutation($m: ID) { createStatus(input: { mediaId: $m, audience: PUBLIC }) { id } }",
            json!({ "m": media }),
        )
        .await["createStatus"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let moment = app
        .post_moment(
            &author,
            json!({ "visibility": "PUBLIC", "placeName": "Old Town" }),
        )
        .await;
    let moment_id = moment["id"].as_str().unwrap().to_owned();
    report(app, &reporter, &status, "VIOLENCE").await;
    let keys_before = app.store_keys().await.len();
    assert_eq!(keys_before, 2);

    let take = "mutation($id: ID!, $r: String!) { takeDown(id: $id, reason: $r) }";
    for id in [&status, &moment_id] {
        let done = app
            .ok(
                mod_user.token(),
                take,
                json!({ "id": id, "r": "graphic violence" }),
            )
            .await;
        assert_eq!(done["takeDown"], id.as_str());
    }
    // Gone from every path, with its media rows, the tray entry and the
    // place it alone used.
    let q = "query($s: ID!, $m: ID!) { status(id: $s) { id } moment(id: $m) { id } storyTray { nodes { author { id } } } momentFeed { nodes { id } } }";
    let gone = app
        .ok(author.token(), q, json!({ "s": status, "m": moment_id }))
        .await;
    assert!(gone["status"].is_null() && gone["moment"].is_null());
    assert_eq!(gone["storyTray"]["nodes"], json!([]));
    assert_eq!(gone["momentFeed"]["nodes"], json!([]));
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM media").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM locations").await, 0);
    // The author cannot restore what was taken down.
    let resp = app
        .gql(
            author.token(),
            "mutation($id: ID!) { restoreMoment(id: $id) { id } }",
            json!({ "id": moment_id }),
        )
        .await;
    assert_eq!(error_code(&resp), "NOT_FOUND");
    // The blobs go through the outbox.
    let report = app.media_gc().await;
    assert_eq!(report.deleted, 2, "{report:?}");
    assert!(app.store_keys().await.is_empty());
    // The author is told why.
    let notices = app
        .ok(
            author.token(),
            "{ moderationNotices { nodes { subjectKind subjectId reason } } }",
            json!({}),
        )
        .await;
    let nodes = notices["moderationNotices"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0]["subjectKind"], "MOMENT");
    assert_eq!(nodes[1]["subjectKind"], "STATUS");
    assert_eq!(nodes[1]["subjectId"], status.as_str());
    assert_eq!(nodes[1]["reason"], "graphic violence");
    // Nobody else reads them.
    let theirs = app
        .ok(
            reporter.token(),
            "{ moderationNotices { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(theirs["moderationNotices"]["nodes"], json!([]));
    // The report about the status was resolved by it.
    let all = app
        .ok(mod_user.token(), REPORTS, json!({ "all": true }))
        .await;
    assert_eq!(
        all["reports"]["nodes"][0]["resolution"],
        "taken down: graphic violence"
    );
    // Again: nothing is there any more.
    let resp = app
        .gql(
            mod_user.token(),
            take,
            json!({ "id": status, "r": "again" }),
        )
        .await;
    assert_eq!(error_code(&resp), "NOT_FOUND");
}

async fn suspension_hides_everything_until_reinstated(app: &TestApp) {
    let spammer = app.sign_up("spammer").await;
    let reader = app.sign_up("reader").await;
    let mod_user = moderator(app, "warden").await;
    let status = app.post_status(&spammer, "spam").await;
    let moment = app
        .post_moment(
            &spammer,
            json!({ "visibility": "PUBLIC", "placeName": "Mall" }),
        )
        .await;
    app.ok(
        spammer.token(),
        "mutation($id: ID!) { setMomentLike(momentId: $id, liked: true) { id } }",
        json!({ "id": moment["id"] }),
    )
    .await;
    report(app, &reader, &spammer.id, "SPAM").await;
    let suspend = "mutation($u: ID!, $r: String!) { suspendUser(userId: $u, reason: $r) }";
    app.ok(
        mod_user.token(),
        suspend,
        json!({ "u": spammer.id, "r": "spam" }),
    )
    .await;

    // Its tokens stop working; it cannot sign in, and is told why.
    let resp = app
        .gql(spammer.token(), "{ viewer { id } }", json!({}))
        .await;
    assert_eq!(error_code(&resp), "UNAUTHENTICATED");
    let sign_in = "mutation($u: String!, $p: String!) { signIn(input: { username: $u, password: $p }) { token } }";
    let creds = json!({ "u": "spammer", "p": "password123" });
    let resp = app.gql(None, sign_in, creds.clone()).await;
    assert_eq!(error_code(&resp), "FORBIDDEN");
    assert!(
        resp["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("spam")
    );

    // Its content and profile are gone from every path, for everyone.
    let world = "{ south: -90, west: -180, north: 90, east: 180 }";
    let q = format!(
        "query($s: ID!, $m: ID!, $u: ID!) {{ status(id: $s) {{ id }} moment(id: $m) {{ id likesCount }} user(id: $u) {{ id }} byName: user(username: \"spammer\") {{ id }} node(id: $u) {{ id }} storyTray {{ nodes {{ author {{ id }} }} }} statuses(userId: $u) {{ nodes {{ id }} }} momentFeed {{ nodes {{ id }} }} mapMarkers(bbox: {world}) {{ markers {{ __typename }} }} }}"
    );
    let vars = json!({ "s": status, "m": moment["id"], "u": spammer.id });
    for token in [reader.token(), mod_user.token(), None] {
        let seen = app.ok(token, &q, vars.clone()).await;
        for path in ["status", "moment", "user", "byName", "node"] {
            assert!(seen[path].is_null(), "{path}: {seen}");
        }
        for list in ["storyTray", "statuses", "momentFeed"] {
            assert_eq!(seen[list]["nodes"], json!([]), "{list}");
        }
        assert_eq!(seen["mapMarkers"]["markers"], json!([]));
    }
    // Nothing was deleted, and it all comes back on reinstatement.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 1);
    let notices = format!(
        "SELECT COUNT(*) AS n FROM moderation_notices WHERE user_id = {} AND subject_kind = 'USER'",
        raw(&spammer.id)
    );
    assert_eq!(app.count(&notices).await, 1);
    let reinstate = "mutation($u: ID!) { reinstateUser(userId: $u) }";
    app.ok(mod_user.token(), reinstate, json!({ "u": spammer.id }))
        .await;
    let seen = app.ok(reader.token(), &q, vars).await;
    assert_eq!(seen["status"]["id"], status.as_str());
    assert_eq!(seen["moment"]["likesCount"], 1);
    assert_eq!(
        seen["storyTray"]["nodes"][0]["author"]["id"],
        spammer.id.as_str()
    );
    assert_eq!(seen["mapMarkers"]["markers"].as_array().unwrap().len(), 1);
    let token = app.ok(None, sign_in, creds).await;
    assert!(token["signIn"]["token"].is_string());
}

async fn moderator_actions_refuse_bad_input(app: &TestApp) {
    let user = app.sign_up("someone").await;
    let mod_user = moderator(app, "warden").await;
    let status = app.post_status(&user, "fine").await;
    let actions = [
        (
            "mutation($id: ID!) { takeDown(id: $id, reason: \"r\") }",
            json!({ "id": status }),
        ),
        (
            "mutation($id: ID!) { resolveReport(id: $id, resolution: \"r\") { id } }",
            json!({ "id": gid(IdKind::Report, 1) }),
        ),
        (
            "mutation($id: ID!) { suspendUser(userId: $id, reason: \"r\") }",
            json!({ "id": user.id }),
        ),
        (
            "mutation($id: ID!) { reinstateUser(userId: $id) }",
            json!({ "id": user.id }),
        ),
    ];
    for (m, vars) in &actions {
        // Not a moderator; not signed in.
        let resp = app.gql(user.token(), m, vars.clone()).await;
        assert_eq!(error_code(&resp), "FORBIDDEN", "{m}");
        let resp = app.gql(None, m, vars.clone()).await;
        assert_eq!(error_code(&resp), "UNAUTHENTICATED", "{m}");
    }
    // Unknown subjects.
    for (m, vars) in [
        (
            "mutation { takeDown(id: \"424242\", reason: \"r\") }",
            json!({}),
        ),
        (
            "mutation { resolveReport(id: \"424242\", resolution: \"r\") { id } }",
            json!({}),
        ),
        (
            "mutation { suspendUser(userId: \"424242\", reason: \"r\") }",
            json!({}),
        ),
        ("mutation { reinstateUser(userId: \"424242\") }", json!({})),
        (
            "mutation { takeDown(id: \"nope\", reason: \"r\") }",
            json!({}),
        ),
    ] {
        let resp = app.gql(mod_user.token(), m, vars).await;
        assert_eq!(error_code(&resp), "NOT_FOUND", "{m}");
    }
    // Blank reasons, oneself, a user taken down.
    for (m, vars) in [
        (
            "mutation($id: ID!) { takeDown(id: $id, reason: \"  \") }",
            json!({ "id": status }),
        ),
        (
            "mutation($id: ID!) { suspendUser(userId: $id, reason: \"\") }",
            json!({ "id": user.id }),
        ),
        (
            "mutation($id: ID!) { suspendUser(userId: $id, reason: \"me\") }",
            json!({ "id": mod_user.id }),
        ),
        (
            "mutation($id: ID!) { takeDown(id: $id, reason: \"r\") }",
            json!({ "id": user.id }),
        ),
    ] {
        let resp = app.gql(mod_user.token(), m, vars).await;
        assert_eq!(error_code(&resp), "BAD_USER_INPUT", "{m}");
    }
    // Nothing happened.
    assert_eq!(app.count("SELECT COUNT(*) AS n FROM statuses").await, 1);
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM users WHERE suspended_at IS NOT NULL")
            .await,
        0
    );
    assert_eq!(
        app.count("SELECT COUNT(*) AS n FROM moderation_notices")
            .await,
        0
    );
}

/// `ephemera users grant-moderator NAME` makes a moderator of an account;
/// `revoke-moderator` takes it back; an unknown name fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_grant_moderator_command() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let user = app.sign_up("Keeper").await;
    let run = |args: Vec<&'static str>| {
        let url = app.database_url.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_ephemera"))
                .args(args)
                .env("DATABASE_URL", url)
                .env("EPHEMERA_DATA_DIR", tempfile::tempdir().unwrap().path())
                .env("EPHEMERA_LOG", "warn")
                .output()
                .await
                .unwrap()
        }
    };
    let out = run(vec!["users", "grant-moderator", "keeper"]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "keeper is now a moderator"
    );
    let queue = app.gql(user.token(), REPORTS, json!({})).await;
    assert!(queue["errors"].is_null(), "{queue}");
    let out = run(vec!["users", "revoke-moderator", "KEEPER"]).await;
    assert!(out.status.success(), "{out:?}");
    let queue = app.gql(user.token(), REPORTS, json!({})).await;
    assert_eq!(error_code(&queue), "FORBIDDEN");
    let out = run(vec!["users", "grant-moderator", "nobody"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no user named nobody"));
    app.finish().await;
}
