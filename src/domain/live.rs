//! Who hears of what: the change log's events (see `events`) judged by the
//! same visibility rules as every query, for many viewers and many events in
//! a few statements per batch (not per event, not per subscriber).
//!
//! | event | who hears of it |
//! |---|---|
//! | status created | whoever may read it in a list now ([`super::status::readable`], `Reach::List`) |
//! | status deleted (author, moderator, purge) | whoever its audience admitted, exclusions applied ([`visibility::visible_status`] on the audience it had) |
//! | status seen | the viewer who saw it, while they may read it |
//! | moment created, restored | whoever may read it in a list now ([`super::moment::readable`]) |
//! | moment deleted (author, moderator, expiry) | whoever its visibility admitted, exclusions applied ([`visibility::visible_moment`]) |
//! | account deleted | everyone, if it had live public content; else each of its friends (one event each) |
//! | friendship changed | the one side it names (each side has its own event) |
//! | tray changed (a change between two people) | the one side it names, as a tray part alone |
//!
//! Whoever hears of a status created, deleted or seen, of an account gone,
//! or of a tray change, is also told, after the last such event of the page
//! for that author, the author's entry in their tray as `storyTray` would
//! read it now (`domain::tray`), or that it is gone: the event's
//! [`Pos::TRAY`] part.
//!
//! A moment an event shows carries, for each viewer, the likes count that
//! viewer would read in a query (likes of people hidden from them taken off).
//!
//! A `FRIENDS` scope then keeps what the viewer's own and their friends'
//! ([`visibility::scope`]): each verdict says whether the author is one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::expiry::{live_moment, live_status};
use super::visibility::{self, Reach, Who};
use super::{Scope, tray};
use crate::clock::Millis;
use crate::db::{self, Column, Dialect, Sql};
use crate::entity::{moment as moment_row, status as status_row};
use crate::error::AppResult;
use crate::events::{Admitted, Asked, Delivery, Heard, Kind, LogEvent, Pos, TrayChange};

/// Viewers asked about in one statement at most.
const VIEWER_CHUNK: usize = 1000;

/// Decides, for each of `events`, which of the viewers `asked` (0:
/// anonymous) hear of it at `now`, and reads the statuses and moments they
/// show, and the tray entries they change for those told them. `circles`,
/// the reader's (kept from page to page), answers who among the asked are
/// the authors' friends when they are more than a catch-up's [`FEW`].
pub async fn admit<C: ConnectionTrait>(
    db: &C,
    events: &[LogEvent],
    asked: &Asked,
    now: Millis,
    circles: Option<&mut Circles>,
) -> AppResult<Admitted> {
    let trays_for = &asked.trays;
    let circles = match circles {
        Some(c) if signed_in(&asked.viewers) > FEW => {
            c.follow(db, events, &asked.viewers).await?;
            Some(&*c)
        }
        Some(c) => {
            // Decided from the database alone: what is kept would go stale.
            *c = Circles::default();
            None
        }
        None => None,
    };
    let asked = &*asked.viewers;
    let every = vec![true; events.len()];
    let created = subjects(events, &every, &[Kind::StatusCreated]);
    let seen = subjects(events, &every, &[Kind::StatusSeen]);
    let moments = subjects(events, &every, &[Kind::MomentCreated, Kind::MomentRestored]);
    let gone = |moment: bool| {
        distinct(
            events
                .iter()
                .filter(|e| {
                    e.kind.is_moment() == moment
                        && matches!(e.kind, Kind::StatusDeleted | Kind::MomentDeleted)
                })
                .map(|e| (e.author, e.audience.clone())),
        )
    };
    let seers: HashSet<i64> = events
        .iter()
        .filter(|e| e.kind == Kind::StatusSeen)
        .filter_map(|e| e.viewer)
        .filter(|v| asked.contains(v))
        .collect();

    // The live statuses and moments the events show, read once: who may
    // read them is asked of the (author, audience) pairs they have, and
    // they are what those who hear of them are shown.
    let ids: Vec<i64> = created.iter().chain(&seen).copied().collect();
    let statuses: HashMap<i64, Arc<status_row::Model>> = live_rows(
        db,
        ("statuses", "s"),
        &ids,
        live_status("s", now),
        |s: &status_row::Model| s.id,
    )
    .await?;
    // With every like counted: each viewer's own count is made from it
    // below ([`hidden_likes`]).
    let moment_rows: HashMap<i64, Arc<moment_row::Model>> = live_rows(
        db,
        ("moments", "m"),
        &moments,
        live_moment("m", now),
        |m: &moment_row::Model| m.id,
    )
    .await?;
    let status_pair = |id: &i64| statuses.get(id).map(|s| (s.author_id, s.audience.clone()));
    let moment_pair = |id: &i64| {
        moment_rows
            .get(id)
            .map(|m| (m.author_id, m.visibility.clone()))
    };
    let created_pairs = distinct(created.iter().filter_map(status_pair));
    let seen_pairs = distinct(seen.iter().filter_map(status_pair));
    let moment_pairs = distinct(moments.iter().filter_map(moment_pair));

    let all = Readers {
        viewers: asked,
        circles,
    };
    let seers = Readers {
        viewers: &seers,
        circles: None,
    };
    let created_for = readers(db, Shown::Status, &created_pairs, &all, Reach::List).await?;
    let seen_for = readers(db, Shown::Status, &seen_pairs, &seers, Reach::Direct).await?;
    let moments_for = readers(db, Shown::Moment, &moment_pairs, &all, Reach::List).await?;
    let status_gone_for = readers(db, Shown::Status, &gone(false), &all, Reach::List).await?;
    let moment_gone_for = readers(db, Shown::Moment, &gone(true), &all, Reach::List).await?;

    // An account gone: its one event is for everyone asked, or for the one
    // friend it names; in every scope (it only evicts).
    let everyone: HashMap<i64, bool> = if events
        .iter()
        .any(|e| e.kind == Kind::AuthorGone && e.viewer.is_none())
    {
        asked.iter().map(|&v| (v, true)).collect()
    } else {
        HashMap::new()
    };
    let one_of: HashMap<i64, HashMap<i64, bool>> = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                Kind::AuthorGone | Kind::FriendshipChanged | Kind::TrayChanged
            )
        })
        .filter_map(|e| e.viewer)
        .filter(|v| asked.contains(v))
        .map(|v| (v, HashMap::from([(v, true)])))
        .collect();

    let mut admitted = Admitted::default();
    let empty = HashMap::new();
    let mut heard = vec![false; events.len()];
    // Per (viewer, author) whose tray entry an event changes: the last such
    // event of the page, whether it removes the entry for certain, and
    // whether the author is theirs (for an entry gone).
    let mut touched: HashMap<(i64, i64), Touch> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let verdicts = match e.kind {
            Kind::AuthorGone => match e.viewer {
                Some(v) => one_of.get(&v),
                None => Some(&everyone),
            },
            Kind::FriendshipChanged | Kind::TrayChanged => e.viewer.and_then(|v| one_of.get(&v)),
            Kind::StatusCreated => status_pair(&e.subject).and_then(|p| created_for.get(&p)),
            Kind::StatusSeen => status_pair(&e.subject).and_then(|p| seen_for.get(&p)),
            Kind::MomentCreated | Kind::MomentRestored => {
                moment_pair(&e.subject).and_then(|p| moments_for.get(&p))
            }
            Kind::StatusDeleted => status_gone_for.get(&(e.author, e.audience.clone())),
            Kind::MomentDeleted => moment_gone_for.get(&(e.author, e.audience.clone())),
        }
        .unwrap_or(&empty);
        for (&viewer, &in_friends) in verdicts {
            // A seen mark is its viewer's alone.
            if e.kind == Kind::StatusSeen && Some(viewer) != e.viewer {
                continue;
            }
            heard[i] = true;
            if e.kind != Kind::TrayChanged {
                admitted.by_viewer.entry(viewer).or_default().push(Heard {
                    index: i,
                    part: Pos::EVENT,
                    in_friends,
                });
            }
            if changes_tray(e.kind) && trays_for.contains(&viewer) {
                let touch = Touch {
                    index: i,
                    gone: e.kind == Kind::AuthorGone,
                    in_friends,
                };
                touched.insert((viewer, e.author), touch);
            }
        }
    }
    tell_trays(db, &mut admitted, touched, now).await?;
    for events in admitted.by_viewer.values_mut() {
        events.sort_unstable();
    }
    // The rows shown, once for everyone: only those someone hears of.
    let statuses_heard = subjects(events, &heard, &[Kind::StatusCreated, Kind::StatusSeen]);
    admitted.statuses = statuses_heard
        .iter()
        .filter_map(|id| statuses.get(id).map(|s| (*id, s.clone())))
        .collect();
    let moments_heard = subjects(events, &heard, &[Kind::MomentCreated, Kind::MomentRestored]);
    if !moments_heard.is_empty() {
        admitted.moments = moments_heard
            .iter()
            .filter_map(|id| moment_rows.get(id).map(|m| (*id, m.clone())))
            .collect();
        let liked: Vec<i64> = admitted
            .moments
            .values()
            .filter(|m| m.likes_count > 0)
            .map(|m| m.id)
            .collect();
        let hearers: Vec<i64> = admitted
            .by_viewer
            .iter()
            .filter(|(_, mine)| {
                mine.iter().any(|h| {
                    matches!(
                        events[h.index].kind,
                        Kind::MomentCreated | Kind::MomentRestored
                    )
                })
            })
            .map(|(&v, _)| v)
            .collect();
        admitted.hidden_likes = hidden_likes(db, &liked, &hearers).await?;
    }
    Ok(admitted)
}

/// The distinct (author, audience) pairs of `pairs`.
fn distinct(pairs: impl Iterator<Item = (i64, String)>) -> Vec<(i64, String)> {
    let set: HashSet<(i64, String)> = pairs.collect();
    set.into_iter().collect()
}

/// The rows of `table` (as `alias`) among `ids` that `live` keeps; none
/// asked for, no statement.
async fn live_rows<M: FromQueryResult, C: ConnectionTrait>(
    db: &C,
    (table, alias): (&str, &str),
    ids: &[i64],
    live: Sql,
    id: fn(&M) -> i64,
) -> AppResult<HashMap<i64, Arc<M>>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<M> = db::fetch_all(
        db,
        Sql::new(&format!(
            "SELECT {alias}.* FROM {table} {alias} WHERE {alias}.id"
        ))
        .append(Dialect::of(db).in_bound(ids))
        .push(" AND ")
        .append(live),
    )
    .await?;
    Ok(rows.into_iter().map(|r| (id(&r), Arc::new(r))).collect())
}

/// The last event of a page that changes one viewer's tray entry of one
/// author.
#[derive(Clone, Copy, Debug)]
struct Touch {
    index: usize,
    /// The author's account is gone: no entry, nothing to read.
    gone: bool,
    /// Whether the author is the viewer or a friend, for an entry gone.
    in_friends: bool,
}

/// Whether an event of `kind` changes the tray entry of its author for
/// those who hear of it.
fn changes_tray(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::StatusCreated
            | Kind::StatusDeleted
            | Kind::StatusSeen
            | Kind::AuthorGone
            | Kind::TrayChanged
    )
}

/// Adds to `admitted` the tray part of each `touched` entry: the entry as
/// `storyTray` reads it now ([`tray::entries`], for all the pairs at once),
/// or its removal; after the last event of the page that touched it.
async fn tell_trays<C: ConnectionTrait>(
    db: &C,
    admitted: &mut Admitted,
    touched: HashMap<(i64, i64), Touch>,
    now: Millis,
) -> AppResult<()> {
    let read: Vec<(i64, i64)> = touched
        .iter()
        .filter(|(_, t)| !t.gone)
        .map(|(&pair, _)| pair)
        .collect();
    let entries = tray::entries(db, &read, now).await?;
    for ((viewer, author), touch) in touched {
        let (change, in_friends) = match entries.get(&(viewer, author)) {
            Some(seen) => (TrayChange::Changed(seen.entry), seen.in_friends),
            None => (TrayChange::Removed { author }, touch.in_friends),
        };
        admitted.trays.insert((viewer, touch.index), change);
        admitted.by_viewer.entry(viewer).or_default().push(Heard {
            index: touch.index,
            part: Pos::TRAY,
            in_friends,
        });
    }
    Ok(())
}

/// What a subscriber of `scope` is told of a delivery: it, nothing (what
/// the scope leaves out), or, for the entry of someone who is no longer the
/// viewer's friend, the entry's removal from a `FRIENDS` tray.
pub fn for_scope(scope: Scope, mut d: Delivery) -> Option<Delivery> {
    if in_scope(scope, d.in_friends) {
        return Some(d);
    }
    match d.tray {
        Some(TrayChange::Changed(entry)) if d.event.kind == Kind::TrayChanged => {
            d.tray = Some(TrayChange::Removed {
                author: entry.author,
            });
            Some(d)
        }
        _ => None,
    }
}

#[derive(Debug, FromQueryResult)]
struct HiddenRow {
    moment: i64,
    viewer: i64,
    n: i64,
}

/// Per (moment, viewer): how many of the likes of `moments` are by people
/// `viewer` may not see ([`visibility::excluded`] for people, as
/// `moment::columns` counts them in queries), for `viewers` all at once.
async fn hidden_likes<C: ConnectionTrait>(
    db: &C,
    moments: &[i64],
    viewers: &[i64],
) -> AppResult<HashMap<(i64, i64), i32>> {
    if moments.is_empty() || viewers.is_empty() {
        return Ok(HashMap::new());
    }
    let dialect = Dialect::of(db);
    let likes = |who: Who<'_>| {
        Sql::new("hl.moment_id")
            .append(dialect.in_bound(moments))
            .push(" AND hl.user_id IN (")
            .append(visibility::excluded(
                who,
                visibility::Content::Person,
                Reach::Direct,
            ))
            .push(")")
    };
    let anonymous = || {
        Sql::new(
            "SELECT hl.moment_id AS moment, CAST(0 AS BIGINT) AS viewer, CAST(COUNT(*) AS BIGINT) AS n \
             FROM moment_likes hl WHERE ",
        )
        .append(likes(Who::User(0)))
        .push(" GROUP BY hl.moment_id")
    };
    let signed_in = |chunk: &[i64]| {
        Sql::new(
            "SELECT hl.moment_id AS moment, w.id AS viewer, CAST(COUNT(*) AS BIGINT) AS n \
             FROM users w CROSS JOIN moment_likes hl WHERE w.id",
        )
        .append(dialect.in_bound(chunk))
        .push(" AND ")
        .append(likes(Who::Column("w.id")))
        .push(" GROUP BY hl.moment_id, w.id")
    };
    let rows: Vec<HiddenRow> = ask_viewers(db, viewers, anonymous, signed_in).await?;
    Ok(rows
        .into_iter()
        .map(|r| ((r.moment, r.viewer), i32::try_from(r.n).unwrap_or(i32::MAX)))
        .collect())
}

/// The distinct subjects of the events of `kinds` that `keep` (by index)
/// keeps.
fn subjects(events: &[LogEvent], keep: &[bool], kinds: &[Kind]) -> Vec<i64> {
    let set: HashSet<i64> = events
        .iter()
        .zip(keep)
        .filter(|(e, keep)| **keep && kinds.contains(&e.kind))
        .map(|(e, _)| e.subject)
        .collect();
    set.into_iter().collect()
}

/// Whether a viewer who hears of an event (`in_friends`: its author is the
/// viewer or a friend) hears of it through a subscription of `scope`.
pub fn in_scope(scope: Scope, in_friends: bool) -> bool {
    scope == Scope::Everyone || in_friends
}

/// What an event shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shown {
    Status,
    Moment,
}

/// Per (author, audience) of content: the viewers who may read it, and
/// whether its author is theirs (themselves or a friend).
type PairVerdicts = HashMap<(i64, String), HashMap<i64, bool>>;

impl Shown {
    /// The column of who it is for.
    fn audience(self) -> &'static str {
        match self {
            Shown::Status => "audience",
            Shown::Moment => "visibility",
        }
    }

    /// The audience rule of content whose author and audience are the
    /// columns of `alias` (liveness aside).
    fn rule(self, alias: &str, who: Who<'_>, reach: Reach) -> Sql {
        match self {
            Shown::Status => visibility::visible_status(alias, who, reach),
            Shown::Moment => visibility::visible_moment(alias, who, reach),
        }
    }
}

/// Signed-in viewers up to which the friends' arms walk those viewers'
/// friendships with the authors in the database (a catch-up decides for
/// one); above, the reader's [`Circles`] name each author's friends among
/// them, and the rule is asked of those alone.
const FEW: usize = 64;

/// Viewers asked about, and who among them are whose friends when the
/// reader asks for many ([`Circles`]).
struct Readers<'a> {
    viewers: &'a HashSet<i64>,
    circles: Option<&'a Circles>,
}

/// How many of `viewers` are signed in.
fn signed_in(viewers: &HashSet<i64>) -> usize {
    viewers.len() - usize::from(viewers.contains(&0))
}

#[derive(Debug, FromQueryResult)]
struct AudienceRow {
    author_id: i64,
    audience: String,
    viewer: i64,
    in_friends: bool,
}

/// Which of the `asked` viewers may read content of each (author,
/// audience) of `pairs` read this way (exclusions applied), and whether its
/// author is theirs: the rule is asked per (pair, candidate), never per
/// status or moment, so a page of one author's posts costs what one does.
/// The candidates come first: for public content every viewer asked, a
/// thousand per statement; for the rest only the author and their friends
/// (a close friend is a friend) among those asked: the friends named by the
/// reader's [`Circles`] (no friendship read but the rule's own), or, for a
/// few viewers, found through the friendships' indexes. The pairs and the
/// viewers are bound whole ([`Dialect::bound_rows`]): each statement's text
/// is the same whatever their number, and is planned once.
async fn readers<C: ConnectionTrait>(
    db: &C,
    shown: Shown,
    pairs: &[(i64, String)],
    asked: &Readers<'_>,
    reach: Reach,
) -> AppResult<PairVerdicts> {
    let mut out = PairVerdicts::new();
    let set = asked.viewers;
    if pairs.is_empty() || set.is_empty() {
        return Ok(out);
    }
    let col = shown.audience();
    let dialect = Dialect::of(db);
    let authors: Vec<i64> = pairs.iter().map(|p| p.0).collect();
    let audiences: Vec<&str> = pairs.iter().map(|p| p.1.as_str()).collect();
    let with_d = || {
        Sql::new(&format!("WITH d AS (SELECT p.author_id, p.{col} FROM "))
            .append(dialect.bound_rows(
                "p",
                &[
                    ("author_id", Column::BigInt(&authors)),
                    (col, Column::Text(&audiences)),
                ],
            ))
            .push(") ")
    };
    // `source` names the content's pairs `d`, `viewer` their candidate
    // viewers' column; `among` keeps the viewers asked before the rule is
    // (else it is asked of all).
    let arm = |source: &str, viewer: &str, public: bool, among: Option<Sql>| {
        let sql = Sql::new(&format!(
            "SELECT d.author_id, d.{col} AS audience, {viewer} AS viewer, "
        ))
        .append(visibility::scope(
            Scope::Friends,
            "d.author_id",
            Who::Column(viewer),
        ))
        .push(&format!(
            " AS in_friends FROM {source} WHERE d.{col} {} 'PUBLIC' AND ",
            if public { "=" } else { "<>" }
        ));
        match among {
            Some(among) => sql.append(among).push(" AND "),
            None => sql,
        }
        .append(shown.rule("d", Who::Column(viewer), reach))
    };
    let friendships = |near: &str| {
        format!("d JOIN friendships f ON f.{near} = d.author_id AND f.accepted_at IS NOT NULL")
    };
    let public = pairs.iter().any(|(_, a)| a == "PUBLIC");
    let private = pairs.iter().any(|(_, a)| a != "PUBLIC");
    // The signed-in viewers, gathered only where they are bound.
    let others = || -> Vec<i64> { set.iter().copied().filter(|&v| v != 0).collect() };
    let mut statements = Vec::new();
    if public && set.contains(&0) {
        statements.push(with_d().push(&format!(
            "SELECT d.author_id, d.{col} AS audience, CAST(0 AS BIGINT) AS viewer, 1 = 0 AS in_friends FROM d WHERE "
        )).append(shown.rule("d", Who::User(0), reach)));
    }
    match asked.circles {
        Some(circles) if private => {
            // An instance's subscribers: each author and the friends the
            // circles name, as (author, audience, viewer) rows, then judged.
            let mut rows = (Vec::new(), Vec::new(), Vec::new());
            for (author, audience) in pairs.iter().filter(|(_, a)| a != "PUBLIC") {
                let own = set.contains(author).then_some(author);
                for &viewer in own.into_iter().chain(circles.hearers_of(*author)) {
                    rows.0.push(*author);
                    rows.1.push(audience.as_str());
                    rows.2.push(viewer);
                }
            }
            for start in (0..rows.0.len()).step_by(VIEWER_CHUNK) {
                let end = (start + VIEWER_CHUNK).min(rows.0.len());
                let candidates = dialect.bound_rows(
                    "p",
                    &[
                        ("author_id", Column::BigInt(&rows.0[start..end])),
                        (col, Column::Text(&rows.1[start..end])),
                        ("viewer", Column::BigInt(&rows.2[start..end])),
                    ],
                );
                statements.push(
                    Sql::new(&format!(
                        "WITH d AS (SELECT p.author_id, p.{col}, p.viewer FROM "
                    ))
                    .append(candidates)
                    .push(") ")
                    .append(arm("d", "d.viewer", false, None)),
                );
            }
        }
        _ if private && signed_in(set) > 0 => {
            // A catch-up: the viewers' own friendships with the authors.
            let others = others();
            let among = |c: &str| Some(Sql::new(c).append(dialect.in_bound(&others)));
            statements.push(with_d().append(Sql::join(
                [
                    arm("d", "d.author_id", false, among("d.author_id")),
                    arm(
                        &friendships("low_id"),
                        "f.high_id",
                        false,
                        among("f.high_id"),
                    ),
                    arm(
                        &friendships("high_id"),
                        "f.low_id",
                        false,
                        among("f.low_id"),
                    ),
                ],
                " UNION ALL ",
            )));
        }
        _ => {}
    }
    if public {
        for chunk in others().chunks(VIEWER_CHUNK) {
            statements.push(with_d().append(arm(
                "d CROSS JOIN users w",
                "w.id",
                true,
                Some(Sql::new("w.id").append(dialect.in_bound(chunk))),
            )));
        }
    }
    for sql in statements {
        let rows: Vec<AudienceRow> = db::fetch_all(db, sql).await?;
        for r in rows.into_iter().filter(|r| set.contains(&r.viewer)) {
            out.entry((r.author_id, r.audience))
                .or_default()
                .insert(r.viewer, r.in_friends);
        }
    }
    Ok(out)
}

#[derive(Debug, FromQueryResult)]
struct FriendRow {
    viewer: i64,
    friend: i64,
}

/// The accepted friends of the viewers subscribed on one instance, kept in
/// memory by its reader from page to page, and for each account the
/// subscribed viewers it is a friend of: who may hear of an author's
/// friends-only content is then looked up here, where the database read
/// every friend of every author of a page on every instance (about 50 index
/// rows a post per instance, to keep the few subscribed there).
///
/// Kept as fresh as the log: a viewer's friends are read when they first
/// subscribe here, and read again after every `FriendshipChanged` event
/// that names them (a request accepted, a friendship ended, a block),
/// before the page holding it is decided; they are forgotten when the
/// viewer's last subscription here ends. They only name candidates: the
/// audience rule, friendship included, is still asked of each in the
/// database at the time of the decision, so a friendship ended that the
/// circles have not caught up with yet hears nothing. A friendship made
/// after the page was read counts from the page that tells it (which also
/// tells the new friend's tray entry). With 64 signed-in subscribers or
/// fewer a page is decided from the database and the circles are dropped;
/// while nobody is subscribed no page is decided, and what they hold (the
/// friends of those who were) waits for the next one.
#[derive(Debug, Default)]
pub struct Circles {
    /// The viewers these were made for (the reader's snapshot, which is
    /// made anew when subscriptions come or go).
    made_for: Option<Arc<HashSet<i64>>>,
    /// Per subscribed viewer: their accepted friends.
    friends: HashMap<i64, Vec<i64>>,
    /// Per account: the subscribed viewers who are its friends.
    hearers: HashMap<i64, Vec<i64>>,
}

impl Circles {
    /// The subscribed viewers who are `author`'s friends.
    fn hearers_of(&self, author: i64) -> impl Iterator<Item = &i64> {
        self.hearers.get(&author).into_iter().flatten()
    }

    /// Brings the circles up to `viewers` (0 aside) and to the friendships
    /// `events` say changed; reads the friends of the viewers new here and
    /// of those whose friendships changed, a thousand per statement. On a
    /// failed read they are dropped whole (read again on the next page).
    async fn follow<C: ConnectionTrait>(
        &mut self,
        db: &C,
        events: &[LogEvent],
        viewers: &Arc<HashSet<i64>>,
    ) -> AppResult<()> {
        let mut read: Vec<i64> = events
            .iter()
            .filter(|e| e.kind == Kind::FriendshipChanged)
            .filter_map(|e| e.viewer)
            .filter(|v| self.friends.contains_key(v))
            .collect();
        if !self
            .made_for
            .as_ref()
            .is_some_and(|m| Arc::ptr_eq(m, viewers))
        {
            let left: Vec<i64> = self
                .friends
                .keys()
                .copied()
                .filter(|v| !viewers.contains(v))
                .collect();
            for v in left {
                self.forget(v);
            }
            read.extend(
                viewers
                    .iter()
                    .copied()
                    .filter(|&v| v != 0 && !self.friends.contains_key(&v)),
            );
            self.made_for = Some(viewers.clone());
        }
        read.sort_unstable();
        read.dedup();
        for &v in &read {
            self.forget(v);
        }
        match read_friends(db, &read).await {
            Ok(rows) => {
                for &v in &read {
                    self.friends.insert(v, Vec::new());
                }
                for r in rows {
                    self.friends.entry(r.viewer).or_default().push(r.friend);
                    self.hearers.entry(r.friend).or_default().push(r.viewer);
                }
                Ok(())
            }
            Err(e) => {
                *self = Self::default();
                Err(e)
            }
        }
    }

    /// Forgets `viewer`'s friends.
    fn forget(&mut self, viewer: i64) {
        for friend in self.friends.remove(&viewer).unwrap_or_default() {
            if let Some(hearers) = self.hearers.get_mut(&friend) {
                hearers.retain(|&h| h != viewer);
                if hearers.is_empty() {
                    self.hearers.remove(&friend);
                }
            }
        }
    }
}

/// The accepted friends of `viewers`, through the accepted friendships'
/// indexes; a thousand viewers per statement, none for none.
async fn read_friends<C: ConnectionTrait>(db: &C, viewers: &[i64]) -> AppResult<Vec<FriendRow>> {
    let dialect = Dialect::of(db);
    let mut rows = Vec::new();
    for chunk in viewers.chunks(VIEWER_CHUNK) {
        let side = |near: &str, far: &str| {
            Sql::new(&format!(
                "SELECT f.{near} AS viewer, f.{far} AS friend FROM friendships f WHERE f.{near}"
            ))
            .append(dialect.in_bound(chunk))
            .push(" AND f.accepted_at IS NOT NULL")
        };
        let sql = Sql::join(
            [side("low_id", "high_id"), side("high_id", "low_id")],
            " UNION ALL ",
        );
        rows.extend(db::fetch_all::<FriendRow, C>(db, sql).await?);
    }
    Ok(rows)
}

/// The rows of `anonymous()` if the anonymous viewer (0) is among
/// `viewers`, and of `signed_in(chunk)` for each thousand of the others:
/// one statement per kind of viewer per thousand, whatever their number.
async fn ask_viewers<C, R>(
    db: &C,
    viewers: &[i64],
    anonymous: impl Fn() -> Sql,
    signed_in: impl Fn(&[i64]) -> Sql,
) -> AppResult<Vec<R>>
where
    C: ConnectionTrait,
    R: FromQueryResult,
{
    let mut rows = Vec::new();
    if viewers.contains(&0) {
        rows.extend(db::fetch_all::<R, C>(db, anonymous()).await?);
    }
    let others: Vec<i64> = viewers.iter().copied().filter(|&v| v != 0).collect();
    for chunk in others.chunks(VIEWER_CHUNK) {
        rows.extend(db::fetch_all::<R, C>(db, signed_in(chunk)).await?);
    }
    Ok(rows)
}
