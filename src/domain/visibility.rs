//! Who may see what, written once as SQL fragments that every read path,
//! count, mutation and subscription builds on (a page is never filtered after
//! fetching).
//!
//! | content | who may see it |
//! |---|---|
//! | status `PUBLIC` | anyone, signed in or not |
//! | status `FRIENDS` | its author and the author's accepted friends |
//! | status `CLOSE_FRIENDS` | its author and those on the author's close-friends list |
//! | moment `PUBLIC` | anyone |
//! | moment `FRIENDS_ONLY` | its author and the author's accepted friends |
//! | a profile | anyone |
//!
//! and then, whatever the audience, nobody sees the content or profile of
//! ([`excluded`]):
//! - a suspended account (until it is reinstated);
//! - someone they blocked or who blocked them (both ways);
//! - for statuses, an author who hides their stories from them;
//! - in lists that gather many authors (tray, feeds, a location's moments,
//!   the map, `statusCreated`), someone they muted. A direct read (`node`,
//!   `status`, a profile and its pages) still works: a mute is not a block.
//!
//! A `FRIENDS` scope keeps the viewer's own and their accepted friends'.
//! An anonymous viewer is passed as user id 0, which no account has; it sees
//! `PUBLIC` content of accounts that are not suspended.
//!
//! The viewer is a bound id ([`Who::User`]) or, to ask for many viewers at
//! once (a subscription's fan-out), a column ([`Who::Column`]).

use super::Scope;
use crate::db::Sql;

/// Who is looking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who<'a> {
    /// One viewer by id (0: anonymous).
    User(i64),
    /// The viewer is the value of this column of an outer query.
    Column(&'a str),
}

impl Who<'_> {
    fn sql(self) -> Sql {
        match self {
            Who::User(id) => Sql::new("").bind(id),
            Who::Column(c) => Sql::new(c),
        }
    }

    fn anonymous(self) -> bool {
        self == Who::User(0)
    }
}

impl From<i64> for Who<'_> {
    fn from(id: i64) -> Self {
        Who::User(id)
    }
}

/// What is being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content {
    Status,
    Moment,
    /// A profile (and a person in a list: likers, viewers, friends).
    Person,
}

/// How it is being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// By id, or on the author's own pages.
    Direct,
    /// In a list that gathers many authors: mutes apply.
    List,
}

/// The kinds of [`user_relations`](crate::domain::safety) rows.
pub mod kind {
    /// The object is on the subject's close-friends list.
    pub const CLOSE_FRIEND: &str = "CLOSE_FRIEND";
    /// The object never sees the subject's statuses.
    pub const HIDE: &str = "HIDE";
    /// The subject does not see the object's content in lists.
    pub const MUTE: &str = "MUTE";
    /// Neither sees the other; only the subject can undo it.
    pub const BLOCK: &str = "BLOCK";
}

/// SQL for the ids of `user`'s accepted friends (a subquery body).
pub fn friend_ids<'a>(user: impl Into<Who<'a>>) -> Sql {
    let user = user.into();
    Sql::new("SELECT high_id FROM friendships WHERE low_id = ")
        .append(user.sql())
        .push(" AND accepted_at IS NOT NULL UNION ALL SELECT low_id FROM friendships WHERE high_id = ")
        .append(user.sql())
        .push(" AND accepted_at IS NOT NULL")
}

/// SQL for the ids of the accounts that keep `who` on their close-friends
/// list (a subquery body).
fn close_friend_of(who: Who<'_>) -> Sql {
    Sql::new(&format!(
        "SELECT c.subject_id FROM user_relations c WHERE c.kind = '{}' AND c.object_id = ",
        kind::CLOSE_FRIEND
    ))
    .append(who.sql())
}

/// SQL that keeps rows whose author column `author` is `who` or one of
/// `who`'s accepted friends.
fn own_or_friends(author: &str, who: Who<'_>) -> Sql {
    Sql::new(&format!("({author} = "))
        .append(who.sql())
        .push(" OR ")
        .append(is_friend(author, who))
        .push(")")
}

/// SQL true where the account column `author` is one of `who`'s accepted
/// friends. For one viewer, against the viewer's friends (read once per
/// statement); for a column, a probe of the one friendship the pair could
/// have: asked per row, its cost does not grow with anyone's friends.
fn is_friend(author: &str, who: Who<'_>) -> Sql {
    match who {
        Who::User(_) => Sql::new(&format!("{author} IN ("))
            .append(friend_ids(who))
            .push(")"),
        Who::Column(w) => Sql::new(&format!(
            "EXISTS (SELECT 1 FROM friendships vf \
             WHERE vf.low_id = CASE WHEN {author} < {w} THEN {author} ELSE {w} END \
             AND vf.high_id = CASE WHEN {author} < {w} THEN {w} ELSE {author} END \
             AND vf.accepted_at IS NOT NULL)"
        )),
    }
}

/// SQL true where the account column `author` keeps `who` on their
/// close-friends list (for a column, one probe per row, as [`is_friend`]).
fn is_close_friend_of(author: &str, who: Who<'_>) -> Sql {
    match who {
        Who::User(_) => Sql::new(&format!("{author} IN ("))
            .append(close_friend_of(who))
            .push(")"),
        Who::Column(w) => Sql::new(&format!(
            "EXISTS (SELECT 1 FROM user_relations vc WHERE vc.subject_id = {author} \
             AND vc.object_id = {w} AND vc.kind = '{}')",
            kind::CLOSE_FRIEND
        )),
    }
}

/// The relation kinds that exclude an account from what a viewer reads of
/// `content` this way: those the viewer set on the account, and those the
/// account set on the viewer (see the module doc). Both forms of the rule
/// ([`excluded`], [`not_excluded`] for a column) read them here.
fn exclusion_kinds(content: Content, reach: Reach) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut mine = vec![kind::BLOCK];
    if reach == Reach::List && content != Content::Person {
        mine.push(kind::MUTE);
    }
    let mut theirs = vec![kind::BLOCK];
    if content == Content::Status {
        theirs.push(kind::HIDE);
    }
    (mine, theirs)
}

/// SQL for the ids of the accounts whose `content` `who` never sees when
/// reading it this way (a subquery body; see the module doc).
pub fn excluded(who: Who<'_>, content: Content, reach: Reach) -> Sql {
    let mut parts = vec![Sql::new(
        "SELECT x.id FROM users x WHERE x.suspended_at IS NOT NULL",
    )];
    if !who.anonymous() {
        let related = |column: &str, k: &str, side: &str| {
            Sql::new(&format!(
                "SELECT r.{column} FROM user_relations r WHERE r.kind = '{k}' AND r.{side} = "
            ))
            .append(who.sql())
        };
        let (mine, theirs) = exclusion_kinds(content, reach);
        parts.extend(mine.iter().map(|k| related("object_id", k, "subject_id")));
        parts.extend(theirs.iter().map(|k| related("subject_id", k, "object_id")));
    }
    Sql::join(parts, " UNION ALL ")
}

/// SQL that keeps rows whose account column `col` is not [`excluded`].
/// For one viewer, against the set [`excluded`] (read once per statement);
/// for a column, probes of the rows that could exclude the pair (the
/// account suspended, a relation either way), so that a row costs the same
/// however many accounts are suspended or related to the viewer.
pub fn not_excluded(col: &str, who: Who<'_>, content: Content, reach: Reach) -> Sql {
    let Who::Column(w) = who else {
        return Sql::new(&format!("{col} NOT IN ("))
            .append(excluded(who, content, reach))
            .push(")");
    };
    let (mine, theirs) = exclusion_kinds(content, reach);
    let kinds = |k: &[&str]| {
        k.iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Sql::new(&format!(
        "(NOT EXISTS (SELECT 1 FROM users vx WHERE vx.id = {col} AND vx.suspended_at IS NOT NULL) \
         AND NOT EXISTS (SELECT 1 FROM user_relations vr WHERE vr.subject_id = {w} \
         AND vr.object_id = {col} AND vr.kind IN ({})) \
         AND NOT EXISTS (SELECT 1 FROM user_relations vr WHERE vr.subject_id = {col} \
         AND vr.object_id = {w} AND vr.kind IN ({})))",
        kinds(&mine),
        kinds(&theirs)
    ))
}

/// SQL that keeps the statuses (audience column `audience`, author column
/// `author`) whose audience admits `who`; exclusions aside.
pub fn status_audience(audience: &str, author: &str, who: Who<'_>) -> Sql {
    if who.anonymous() {
        return Sql::new(&format!("{audience} = 'PUBLIC'"));
    }
    Sql::new(&format!("({audience} = 'PUBLIC' OR {author} = "))
        .append(who.sql())
        .push(&format!(" OR ({audience} = 'FRIENDS' AND "))
        .append(is_friend(author, who))
        .push(&format!(") OR ({audience} = 'CLOSE_FRIENDS' AND "))
        .append(is_close_friend_of(author, who))
        .push("))")
}

/// SQL that keeps the tray summaries (audience level column `level`,
/// author column `author`) of the widest level that admits `who`:
/// `CLOSE_FRIENDS` for the author and their close friends, `FRIENDS` for
/// their other friends, else `PUBLIC`. Every audience up to that level
/// admits them too (close friends are friends), so this is
/// [`status_audience`] as one level, for the tray's summaries. Written as a
/// `CASE` of comparisons, which PostgreSQL's planner estimates as keeping
/// half the rows (compared with a `CASE` value, it guessed 1 in 200 and
/// sorted the whole tray instead of walking its index).
pub fn widest_level(level: &str, author: &str, who: Who<'_>) -> Sql {
    if who.anonymous() {
        return Sql::new(&format!("{level} = 'PUBLIC'"));
    }
    levels(author, who, is_friend(author, who), |l| {
        format!("{level} = '{l}'")
    })
}

/// [`widest_level`] as a value: the level itself, to look the one tray
/// summary up by it, given `in_friends`, SQL true where `author` is `who`
/// or a friend of theirs ([`scope`] `FRIENDS`, asked once elsewhere).
pub fn widest_level_of(author: &str, who: Who<'_>, in_friends: &str) -> Sql {
    levels(author, who, Sql::new(in_friends), |l| format!("'{l}'"))
}

/// The rule of [`widest_level`] and [`widest_level_of`]: `then` of the
/// level that `who` reaches of `author`, `friend` being true of a friend.
fn levels(author: &str, who: Who<'_>, friend: Sql, then: impl Fn(&str) -> String) -> Sql {
    Sql::new(&format!("(CASE WHEN {author} = "))
        .append(who.sql())
        .push(" OR ")
        .append(is_close_friend_of(author, who))
        .push(&format!(" THEN {} WHEN ", then("CLOSE_FRIENDS")))
        .append(friend)
        .push(&format!(
            " THEN {} ELSE {} END)",
            then("FRIENDS"),
            then("PUBLIC")
        ))
}

/// SQL that keeps the statuses of alias `s` that `who` may see read this way
/// (liveness aside: see [`super::expiry::live_status`]).
pub fn visible_status(s: &str, who: Who<'_>, reach: Reach) -> Sql {
    status_audience(&format!("{s}.audience"), &format!("{s}.author_id"), who)
        .push(" AND ")
        .append(not_excluded(
            &format!("{s}.author_id"),
            who,
            Content::Status,
            reach,
        ))
}

/// SQL that keeps the moments of alias `m` that `who` may see read this way
/// (liveness aside: see [`super::moment::readable`]).
pub fn visible_moment(m: &str, who: Who<'_>, reach: Reach) -> Sql {
    let visibility = if who.anonymous() {
        Sql::new(&format!("{m}.visibility = 'PUBLIC'"))
    } else {
        Sql::new(&format!("({m}.visibility = 'PUBLIC' OR "))
            .append(own_or_friends(&format!("{m}.author_id"), who))
            .push(")")
    };
    visibility.push(" AND ").append(not_excluded(
        &format!("{m}.author_id"),
        who,
        Content::Moment,
        reach,
    ))
}

/// SQL that keeps the people (id column `col`) whom `who` may see.
pub fn visible_person(col: &str, who: Who<'_>) -> Sql {
    not_excluded(col, who, Content::Person, Reach::Direct)
}

/// SQL that keeps rows whose author column `author_col` the scope admits for
/// `viewer` (`1 = 1` for everyone).
pub fn scope<'a>(scope: Scope, author_col: &str, viewer: impl Into<Who<'a>>) -> Sql {
    match scope {
        Scope::Everyone => Sql::new("1 = 1"),
        Scope::Friends => own_or_friends(author_col, viewer.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Dialect;

    #[test]
    fn anonymous_viewers_skip_the_relations() {
        let sql = visible_status("s", Who::User(0), Reach::List)
            .build(Dialect::Postgres)
            .sql;
        assert!(sql.starts_with("s.audience = 'PUBLIC' AND s.author_id NOT IN"));
        assert!(!sql.contains("user_relations"), "{sql}");
        let signed_in = visible_status("s", Who::User(7), Reach::List)
            .build(Dialect::Postgres)
            .sql;
        for k in ["BLOCK", "HIDE", "MUTE", "CLOSE_FRIEND"] {
            assert!(signed_in.contains(k), "{k}: {signed_in}");
        }
        let direct = visible_status("s", Who::User(7), Reach::Direct)
            .build(Dialect::Postgres)
            .sql;
        assert!(!direct.contains("MUTE"), "{direct}");
        let person = visible_person("u.id", Who::User(7))
            .build(Dialect::Postgres)
            .sql;
        assert!(!person.contains("HIDE") && !person.contains("MUTE"));
    }

    #[test]
    fn a_column_viewer_is_written_not_bound() {
        let sql = visible_moment("m", Who::Column("w.id"), Reach::List).build(Dialect::Sqlite);
        assert!(sql.sql.contains("m.author_id = w.id"), "{}", sql.sql);
        assert!(sql.sql.contains("vr.subject_id = w.id"));
        assert!(
            sql.values.is_none_or(|v| v.0.is_empty()),
            "nothing bound: {}",
            sql.sql
        );
    }
}
