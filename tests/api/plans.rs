//! Hot statements keep their index walks at real sizes: each is planned
//! on a seeded database (authors of 1,000 live statuses among many of a
//! few), on PostgreSQL as the generic plan a prepared statement is cached
//! with, and run; a plan fails the test when it reads more than its page
//! needs.

use ephemera::db::{Dialect, Sql, insert};
use ephemera::domain::page::{Key, PageQuery};
use ephemera::domain::status;
use ephemera::entity::{status as status_row, user};
use sea_orm::ConnectionTrait;

use crate::support::{IdKind, TestApp, gid, plan_of, raw, read_by};

/// Accounts 7,000,001 to 7,002,000; each of the first 1,998 with two live
/// statuses, the last two (7,001,999 and 7,002,000) with 1,000 each.
async fn seed_authors(app: &TestApp) {
    let now = app.clock.now();
    let series = |n: u32| {
        format!("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n})")
    };
    let seed = vec![
        insert::select_into::<user::Entity>(Sql::new(&format!(
            "{} SELECT 7000000 + x, 'au' || x, 'au' || x, NULL, 'x', 0, FALSE, NULL, NULL, NULL, NULL, 0 FROM g",
            series(2000)
        ))),
        // Two each: ids 8,000,000 + 2x (+ 1), created a second apart.
        insert::select_into::<status_row::Entity>(Sql::new(&format!(
            "{} SELECT 8000000 + 2 * x + k.k, 7000000 + x, NULL, 'c', NULL, {now} - 100000 + x + k.k, \
             {now} + 3600000 + x, 'PUBLIC' FROM g CROSS JOIN (SELECT 0 AS k UNION ALL SELECT 1) k WHERE x <= 1998",
            series(1998)
        ))),
        // A thousand each, newest last.
        insert::select_into::<status_row::Entity>(Sql::new(&format!(
            "{} SELECT 9000000 + x, 7001999 + x % 2, NULL, 'c', NULL, {now} - 2000000 + x, \
             {now} + 3600000 + x, CASE WHEN x % 3 = 0 THEN 'FRIENDS' ELSE 'PUBLIC' END FROM g",
            series(2000)
        ))),
    ];
    crate::support::seed_sql(&app.state.db, seed).await;
}

/// The per-author page (`statuses(userId:)`, `User.statuses`), anonymous
/// and signed in, with and without the seen marks, first and later pages,
/// of an author of 1,000 statuses: it walks `statuses_author_created` and
/// stops after the page (PostgreSQL: at most the page and one more row read
/// from the index, a few dozen buffers; SQLite: that index, no sort).
async fn the_author_page_walks_its_index(app: &TestApp) {
    seed_authors(app).await;
    let viewer = app.sign_up("reader").await;
    let me: i64 = raw(&viewer.id);
    let db = &app.state.db;
    let now = app.clock.now();
    let first = PageQuery {
        limit: 10,
        backward: false,
        after: None,
        before: None,
    };
    let later = PageQuery {
        after: Some(Key {
            ts: now - 2_000_000 + 1_500,
            id: 9_001_500,
        }),
        ..first
    };
    let seen = |v: Option<i64>| match v {
        Some(v) => Sql::new("EXISTS (SELECT 1 FROM status_views v WHERE v.viewer_id = ")
            .bind(v)
            .push(" AND v.status_id = s.id)"),
        None => Sql::new("FALSE"),
    };
    for (name, q) in [("first page", &first), ("later page", &later)] {
        for viewer in [None, Some(me)] {
            for seen_by in [None, viewer] {
                let name = format!("{name}, viewer {viewer:?}, seen {seen_by:?}");
                let sql = status::author_page_query(7_002_000, now, q, viewer, seen(seen_by));
                let plan = plan_of(db, sql).await;
                assert!(
                    plan.contains("statuses_author_created"),
                    "{name}: not the author's index:\n{plan}"
                );
                match Dialect::of(db) {
                    Dialect::Sqlite => assert!(!plan.contains("TEMP B-TREE"), "{name}:\n{plan}"),
                    Dialect::Postgres => {
                        // The page, one more, and what the audience
                        // leaves out on the way (a third are FRIENDS).
                        let read = read_by(&plan, |l| l.contains("on statuses"));
                        assert!(read <= 2 * 11, "{name}: {read} rows read:\n{plan}");
                        assert!(!plan.contains("Sort"), "{name}: a sort:\n{plan}");
                        let buffers: u64 = plan
                            .lines()
                            .find_map(|l| l.trim().strip_prefix("Buffers: shared hit="))
                            .and_then(|b| b.split_whitespace().next()?.parse().ok())
                            .unwrap_or(0);
                        assert!(buffers <= 40, "{name}: {buffers} buffers:\n{plan}");
                    }
                }
            }
        }
    }
}

crate::both_backends!(the_author_page_walks_its_index);

/// `node` and `nodes` read only the tables their ids name (ids say their
/// type): one statement per type present (plus the session's lookup), none
/// for ids this server could not have made; what a table's rules hide, and
/// an id of one type that is another's number, answer null as an unknown
/// id does.
async fn nodes_read_only_the_tables_of_their_ids(app: &TestApp) {
    use serde_json::json;
    let author = app.sign_up("noder").await;
    let viewer = app.sign_up("refetcher").await;
    let status = app.post_status_to(&author, "public", "PUBLIC").await;
    let hidden = app.post_status_to(&author, "friends", "FRIENDS").await;
    let moment = app
        .post_moment(&author, json!({ "visibility": "PUBLIC" }))
        .await["id"]
        .clone();
    const NODES: &str = "query($ids: [ID!]!) { nodes(ids: $ids) { __typename id } }";
    let status_n = raw(&status);
    let cases = [
        (
            json!([status]),
            1,
            json!([{ "__typename": "Status", "id": status }]),
        ),
        (json!([gid(IdKind::Status, 123_456_789)]), 1, json!([null])),
        // A status's number under another type: not that type's row.
        (
            json!([gid(IdKind::Moment, status_n), gid(IdKind::User, status_n)]),
            2,
            json!([null, null]),
        ),
        (json!([gid(IdKind::Report, status_n)]), 0, json!([null])),
        (
            json!(["not an id", status_n.to_string()]),
            0,
            json!([null, null]),
        ),
        (json!([hidden]), 1, json!([null])),
        (
            json!([author.id, status, moment, hidden]),
            3,
            json!([
                { "__typename": "User", "id": author.id },
                { "__typename": "Status", "id": status },
                { "__typename": "Moment", "id": moment },
                null
            ]),
        ),
    ];
    for (ids, most, expected) in cases {
        let (statements, data) = app
            .statements_during(app.ok(viewer.token(), NODES, json!({ "ids": ids })))
            .await;
        assert_eq!(data["nodes"], expected, "{ids}");
        assert!(statements <= most + 1, "{ids}: {statements} statements");
    }
}

crate::both_backends!(nodes_read_only_the_tables_of_their_ids);

/// The story tray's page (`storyTray`), anonymous and signed in, of
/// everyone and of friends, with and without the authors' profiles, over
/// 2,000 authors' tray rows (three levels each), the viewer a friend of 50
/// of them: it walks the tray in page order (`status_tray_order`), reading
/// a bounded number of rows, with no sort over the tray.
async fn the_tray_page_walks_its_index(app: &TestApp) {
    use ephemera::domain::Scope;
    seed_authors(app).await;
    let viewer = app.sign_up("trayreader").await;
    let me: i64 = raw(&viewer.id);
    let db = &app.state.db;
    let dialect = Dialect::of(db);
    db.execute_unprepared(
        "INSERT INTO status_tray (author_id, audience, latest_created_at, max_expires_at) \
         SELECT s.author_id, l.level, MAX(s.created_at), MAX(s.expires_at) FROM statuses s \
         CROSS JOIN (SELECT 'PUBLIC' AS level UNION ALL SELECT 'FRIENDS' UNION ALL SELECT 'CLOSE_FRIENDS') l \
         WHERE s.author_id > 7000000 GROUP BY s.author_id, l.level",
    )
    .await
    .expect("tray rows");
    for f in 0..50 {
        let friend = 7_000_001 + f * 40;
        let (low, high) = (friend.min(me), friend.max(me));
        db.execute_unprepared(&format!(
            "INSERT INTO friendships (low_id, high_id, requester_id, created_at, accepted_at) \
             VALUES ({low}, {high}, {me}, 0, 0)"
        ))
        .await
        .expect("a friend");
    }
    db.execute_unprepared(dialect.analyze())
        .await
        .expect("analyze");
    let now = app.clock.now();
    let q = PageQuery {
        limit: 20,
        backward: false,
        after: None,
        before: None,
    };
    for (viewer, scope) in [
        (0, Scope::Everyone),
        (me, Scope::Everyone),
        (me, Scope::Friends),
    ] {
        for with_authors in [false, true] {
            let name = format!("viewer {viewer}, {scope:?}, authors {with_authors}");
            let sql = status::tray_page_query(dialect, viewer, scope, now, &q, with_authors);
            let plan = plan_of(db, sql).await;
            match (dialect, scope) {
                (Dialect::Sqlite, Scope::Everyone) => {
                    assert!(
                        plan.contains("SCAN t USING INDEX status_tray_order"),
                        "{name}:\n{plan}"
                    );
                    assert!(!plan.contains("TEMP B-TREE"), "{name}:\n{plan}");
                }
                (Dialect::Sqlite, Scope::Friends) => {
                    assert!(plan.contains("SEARCH t USING INDEX"), "{name}:\n{plan}");
                    assert!(!plan.contains("SCAN t"), "{name}:\n{plan}");
                }
                (Dialect::Postgres, Scope::Everyone) => {
                    // Three levels per author: at most three rows each.
                    let read = read_by(&plan, |l| l.contains("on status_tray "));
                    assert!(read <= 3 * 21, "{name}: {read} rows read:\n{plan}");
                    assert!(!plan.contains("Sort"), "{name}: a sort:\n{plan}");
                }
                (Dialect::Postgres, Scope::Friends) => {
                    // The viewer's and 50 friends' rows, not the tray's.
                    let read = read_by(&plan, |l| l.contains("on status_tray "));
                    assert!(read <= 3 * 51, "{name}: {read} rows read:\n{plan}");
                    assert!(!plan.contains("status_tray_order"), "{name}:\n{plan}");
                }
            }
        }
    }
}

crate::both_backends!(the_tray_page_walks_its_index);

/// On PostgreSQL, each hot statement is planned once and then runs its
/// cached generic plan: of ten runs of it prepared, at least five use the
/// generic plan (the planner switches after five custom plans when the
/// generic one costs no more). A statement that looks cheaper planned for
/// its values is planned anew on every run instead (the search's sample
/// was, about 1 ms each, for the same plan).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_statements_run_their_cached_plans() {
    use ephemera::domain::Scope;
    use ephemera::domain::search::{self, Search};
    use sea_orm::TransactionTrait;
    let app = TestApp::spawn(crate::support::Backend::Postgres).await;
    seed_authors(&app).await;
    let viewer = app.sign_up("planner").await;
    let db = &app.state.db;
    let dialect = Dialect::of(db);
    crate::support::seed_sql(db, crate::support::pl_accounts()).await;
    let me: i64 = raw(&viewer.id);
    let now = app.clock.now();
    let one = Search::parse("pl12").expect("a search");
    let two = Search::parse("Pl 7").expect("a search");
    let page = PageQuery {
        limit: 20,
        backward: false,
        after: None,
        before: None,
    };
    let statements = [
        (
            "search, others",
            search::phase_query(&one, Some(me), search::OTHERS, None, 20, dialect),
        ),
        (
            "search, friends",
            search::phase_query(&one, Some(me), search::FRIENDS, None, 20, dialect),
        ),
        (
            "search, two words",
            search::phase_query(&two, Some(me), search::OTHERS, None, 20, dialect),
        ),
        (
            "search, friends and others",
            search::page_query(&one, Some(me), search::FRIENDS, None, 20, dialect),
        ),
        ("search, the sample", search::sample_query(&two, dialect)),
        (
            "author page",
            Some(status::author_page_query(
                7_002_000,
                now,
                &page,
                Some(me),
                Sql::new("FALSE"),
            )),
        ),
        (
            "tray",
            Some(status::tray_page_query(
                dialect,
                me,
                Scope::Everyone,
                now,
                &page,
                true,
            )),
        ),
        (
            "friends' tray",
            Some(status::tray_page_query(
                dialect,
                me,
                Scope::Friends,
                now,
                &page,
                true,
            )),
        ),
    ];
    for (name, sql) in statements {
        let built = sql.expect("a statement").build(dialect);
        let args = crate::support::literal_args(&built);
        let txn = db.begin().await.expect("a transaction");
        txn.execute_unprepared(&format!("PREPARE hot AS {}", built.sql))
            .await
            .expect("prepare");
        for _ in 0..10 {
            txn.execute_unprepared(&format!("EXECUTE hot({})", args.join(", ")))
                .await
                .expect("execute");
        }
        let rows = txn
            .query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'hot'"
                    .to_owned(),
            ))
            .await
            .expect("the plan cache");
        let generic: i64 = rows[0].try_get("", "generic_plans").expect("generic");
        let custom: i64 = rows[0].try_get("", "custom_plans").expect("custom");
        txn.execute_unprepared("DEALLOCATE hot")
            .await
            .expect("deallocate");
        txn.rollback().await.expect("rollback");
        assert!(
            generic >= 5,
            "{name}: {generic} generic and {custom} custom plans of 10 runs"
        );
    }
    app.finish().await;
}

/// The server's PostgreSQL sessions never compile a plan (`jit` off): a
/// statement whose estimate passes `jit_above_cost` (the live tray's
/// decision for a busy page) spent more compiling than running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sessions_never_compile_plans() {
    let app = TestApp::spawn(crate::support::Backend::Postgres).await;
    let row = app
        .state
        .db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT current_setting('jit') AS jit",
        ))
        .await
        .unwrap()
        .expect("a row");
    assert_eq!(row.try_get::<String>("", "jit").unwrap(), "off");
    app.finish().await;
}
