//! Finding people by name: the words of a user's username and display name,
//! normalised (transliterated to ASCII by `deunicode`, lower-cased, split on
//! everything but letters and digits), are kept in `user_words`, one row
//! per word, so that a prefix is a range of one btree on either database.
//!
//! A search matches users with, for every word of its text, a name word
//! that begins with it. One word of the text walks the index (the other
//! words are checked per candidate), so a page reads the rows of one range
//! from its cursor on, never the table. Which word walks is decided on the
//! first page by a sample: the first [`SAMPLE`] index rows of each word's
//! range, and how many of them the other words match; the word whose rows
//! match most often walks (the longest among equals), and the cursors carry
//! it, so later pages walk the same range in the same order. Friends come
//! first, then everyone else; within each, users in the order of their first
//! word in the walking range (an exact word first, then alphabetically), then
//! by id. Accounts blocked either way and suspended ones are left out, as
//! everywhere.

use std::collections::BTreeSet;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, FromQueryResult, QueryResult};
use sha2::{Digest, Sha256};

use super::page::{Key, Page, PageQuery};
use super::user::{PROFILE_COLUMNS, Profile};
use super::visibility::{Who, visible_person};
use crate::clock::Millis;
use crate::db::{self, Columns, Dialect, Sql};
use crate::error::{AppError, AppResult};

/// The longest search text, in characters.
pub const MAX_TEXT: usize = 50;
/// The words of a search text that are used (the longest ones).
pub const MAX_QUERY_WORDS: usize = 4;
/// Index rows one page reads at most before its filters (blocked, hidden,
/// the other words of the text): what bounds a search whose words are
/// common alone and rare together.
pub const SCAN: u64 = 1000;
/// Index rows of each word's range the first page of a search of several
/// words samples to choose the word that walks.
pub const SAMPLE: i64 = 32;
/// A stored word's length at most (longer ones are cut).
const MAX_WORD: usize = 50;
/// Phases of a search: friends, then everyone else. A cursor's `ts` is the
/// phase plus twice the index of the word that walks.
pub const FRIENDS: i64 = 0;
pub const OTHERS: i64 = 1;

/// The normalised words of `text`: ASCII letters and digits, lower-cased.
pub fn normalise(text: &str) -> Vec<String> {
    deunicode::deunicode(text)
        .to_ascii_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.chars().take(MAX_WORD).collect())
        .collect()
}

/// The distinct words a user is found by.
pub fn words_of(username: &str, display_name: Option<&str>) -> BTreeSet<String> {
    let mut words: BTreeSet<String> = normalise(username).into_iter().collect();
    words.extend(display_name.map(normalise).unwrap_or_default());
    words
}

/// The smallest string greater than every string that begins with `p`
/// (words hold only `0-9a-z`); `None` when there is none (`p` is all `z`).
fn successor(p: &str) -> Option<String> {
    let mut chars: Vec<char> = p.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '0'..='8' | 'a'..='y' => char::from_u32(last as u32 + 1),
            '9' => Some('a'),
            _ => None,
        };
        if let Some(c) = next {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Writes `user`'s name words, replacing what was there, and marks them
/// written; in the caller's transaction.
pub async fn index_user<C: ConnectionTrait>(
    txn: &C,
    user: i64,
    username: &str,
    display_name: Option<&str>,
    now: Millis,
) -> AppResult<()> {
    db::execute(
        txn,
        Sql::new("DELETE FROM user_words WHERE user_id = ").bind(user),
    )
    .await?;
    let words = words_of(username, display_name);
    if !words.is_empty() {
        let mut sql = Sql::new("INSERT INTO user_words (word, user_id) VALUES ");
        for (i, w) in words.into_iter().enumerate() {
            if i > 0 {
                sql = sql.push(", ");
            }
            sql = sql.push("(").bind(w).push(", ").bind(user).push(")");
        }
        db::execute(txn, sql.push(" ON CONFLICT DO NOTHING")).await?;
    }
    db::execute(
        txn,
        Sql::new("UPDATE users SET words_indexed_at = ")
            .bind(now)
            .push(" WHERE id = ")
            .bind(user),
    )
    .await?;
    Ok(())
}

#[derive(FromQueryResult)]
struct Unindexed {
    id: i64,
    username: String,
    display_name: Option<String>,
}

/// Indexes the accounts whose words were never written (older than the
/// index, or seeded around the server), a batch per transaction; how many.
pub async fn backfill(db: &DatabaseConnection, now: Millis) -> AppResult<u64> {
    let mut done = 0;
    loop {
        let batch: Vec<Unindexed> = db::fetch_all(
            db,
            Sql::new(
                "SELECT id, username, display_name FROM users \
                 WHERE words_indexed_at IS NULL ORDER BY id LIMIT 500",
            ),
        )
        .await?;
        if batch.is_empty() {
            return Ok(done);
        }
        let txn = db::begin(db).await?;
        for u in &batch {
            index_user(&txn, u.id, &u.username, u.display_name.as_deref(), now).await?;
        }
        txn.commit().await?;
        done += batch.len() as u64;
    }
}

/// A checked search text: its words, the longest first, and the one that
/// walks the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Search {
    words: Vec<String>,
    walk: usize,
}

impl Search {
    /// 1 to [`MAX_TEXT`] characters, else `BAD_USER_INPUT`. A text with no
    /// letter or digit finds nobody.
    pub fn parse(text: &str) -> AppResult<Self> {
        let len = text.chars().count();
        if len == 0 || len > MAX_TEXT {
            return Err(AppError::bad_input(format!(
                "text must be 1 to {MAX_TEXT} characters"
            )));
        }
        let distinct: BTreeSet<String> = normalise(text).into_iter().collect();
        let mut words: Vec<String> = distinct.into_iter().collect();
        // The longest word walks the index; a word that begins another
        // adds nothing the other does not check.
        words.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        let mut kept: Vec<String> = Vec::new();
        for w in words {
            if !kept.iter().any(|k| k.starts_with(&w)) {
                kept.push(w);
            }
        }
        kept.truncate(MAX_QUERY_WORDS);
        Ok(Self {
            words: kept,
            walk: 0,
        })
    }

    /// The same search with its `i`th word (clamped to the words there
    /// are) walking the index.
    pub fn walking(mut self, i: usize) -> Self {
        self.walk = i.min(self.words.len().saturating_sub(1));
        self
    }

    /// The word that walks the index.
    fn walk_word(&self) -> Option<&String> {
        self.words.get(self.walk)
    }

    /// The words checked per candidate.
    fn others(&self) -> impl Iterator<Item = &String> {
        let walk = self.walk;
        self.words
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != walk)
            .map(|(_, w)| w)
    }

    /// What a cursor of this search is signed for: the viewer and the
    /// words, so a cursor of another search is refused.
    pub fn owner(&self, viewer: Option<i64>) -> i64 {
        let mut h = Sha256::new();
        h.update(viewer.unwrap_or(0).to_be_bytes());
        for w in &self.words {
            h.update(w.as_bytes());
            h.update([0]);
        }
        let digest = h.finalize();
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&digest[..8]);
        i64::from_be_bytes(eight)
    }
}

/// `col` begins with `word`: a range of the btree, its bounds out of the
/// planner's sight ([`Dialect::opaque_text`]). Planned for the words'
/// actual ranges, a search statement looked cheaper than its generic plan
/// (a guessed range of 15,000 rows at 1M accounts) and PostgreSQL planned
/// it anew on every run: about 0.8 ms in `bind` each time, for the same
/// plan, which then ran in 0.2–0.4 ms.
fn begins(col: &str, word: &str, dialect: Dialect) -> Sql {
    let sql = Sql::new(&format!("{col} >= ")).append(dialect.opaque_text(word.to_owned()));
    match successor(word) {
        Some(hi) => sql
            .push(&format!(" AND {col} < "))
            .append(dialect.opaque_text(hi)),
        None => sql,
    }
}

/// The accepted friends of `viewer`, as a subquery of `fid`.
fn friend_ids(viewer: i64) -> Sql {
    Sql::new("SELECT high_id AS fid FROM friendships WHERE low_id = ")
        .bind(viewer)
        .push(" AND accepted_at IS NOT NULL UNION ALL SELECT low_id AS fid FROM friendships WHERE high_id = ")
        .bind(viewer)
        .push(" AND accepted_at IS NOT NULL")
}

/// The other words of `search` than its walking one are each a word of
/// the user `col` that begins with it: each looked up by `(user_id, word)`
/// as a scalar subquery, which PostgreSQL does not turn into a join that
/// reads every user with that word (`EXISTS` it does).
fn has_others(search: &Search, col: &str, dialect: Dialect) -> Sql {
    let mut sql = Sql::new("1 = 1");
    for other in search.others() {
        sql = sql
            .push(&format!(
                " AND (SELECT o.user_id FROM user_words o WHERE o.user_id = {col} AND "
            ))
            .append(begins("o.word", other, dialect))
            .push(" LIMIT 1) IS NOT NULL");
    }
    sql
}

#[derive(FromQueryResult)]
struct Sampled {
    walk: i64,
    matched: i64,
}

/// The statement of the sample that chooses the walking word: for each
/// word, how many of the first [`SAMPLE`] rows of its range the other words
/// match. `None` for fewer than two words (there is nothing to choose).
/// Its values are out of the planner's sight, as [`begins`] says why.
pub fn sample_query(search: &Search, dialect: Dialect) -> Option<Sql> {
    if search.words.len() < 2 {
        return None;
    }
    let mut sql = Sql::new("");
    for i in 0..search.words.len() {
        let walking = search.clone().walking(i);
        if i > 0 {
            sql = sql.push(" UNION ALL ");
        }
        sql = sql
            .push("SELECT ")
            .bind(i64::try_from(i).unwrap_or(i64::MAX))
            .push(" AS walk, (SELECT COUNT(*) FROM (SELECT s.user_id FROM user_words s WHERE ")
            .append(begins("s.word", &search.words[i], dialect))
            // A constant: a bound limit is one more value a custom plan
            // sees and the generic plan guesses.
            .push(&format!(
                " ORDER BY s.word, s.user_id LIMIT {SAMPLE}) h WHERE "
            ))
            .append(has_others(&walking, "h.user_id", dialect))
            .push(") AS matched");
    }
    Some(sql)
}

/// `search` with the word that walks chosen by [`sample_query`]: the one
/// whose first rows the other words match most often (the longest among
/// equals); one statement, none for a single word.
pub async fn choose_walk<C: ConnectionTrait>(db: &C, search: Search) -> AppResult<Search> {
    let Some(sql) = sample_query(&search, Dialect::of(db)) else {
        return Ok(search);
    };
    let sampled: Vec<Sampled> = db::fetch_all(db, sql).await?;
    let best = sampled
        .iter()
        .max_by(|a, b| a.matched.cmp(&b.matched).then(b.walk.cmp(&a.walk)))
        .and_then(|s| usize::try_from(s.walk).ok())
        .unwrap_or(0);
    Ok(search.walking(best))
}

/// The statement of one phase's page (its values unseen by PostgreSQL's
/// planner, see [`begins`]): `limit` + 1 users at most, after
/// `after` (a user id of this phase), as [`Found`] rows; `None` when the
/// search has no word.
pub fn phase_query(
    search: &Search,
    viewer: Option<i64>,
    phase: i64,
    after: Option<i64>,
    limit: u64,
    dialect: Dialect,
) -> Option<Sql> {
    let walk = search.walk_word()?;
    // The candidates, and their alias: the friends' words, each a user's
    // first in the range; or the index itself, where a user with several
    // words in the range is met once per word.
    let (w, mut candidates) = match (phase, viewer) {
        // Driven from the friends, each with the first of their words in
        // the range (one probe of `(user_id, word)` a friend, fenced so
        // that it is made once): joined instead, PostgreSQL hashed the
        // friends and read the whole range of a common word (100,000 rows
        // for `user` at 100,000 accounts: 40 ms, not 1).
        (FRIENDS, Some(v)) => (
            "fw",
            Sql::new(
                "WITH fw AS MATERIALIZED (SELECT f.fid AS user_id, \
                 (SELECT MIN(m.word) FROM user_words m WHERE m.user_id = f.fid AND ",
            )
            .append(begins("m.word", walk, dialect))
            .push(") AS word FROM (")
            .append(friend_ids(v))
            .push(") f) SELECT fw.word, fw.user_id FROM fw WHERE fw.word IS NOT NULL"),
        ),
        _ => (
            "w",
            Sql::new("SELECT w.word, w.user_id FROM user_words w WHERE ")
                .append(begins("w.word", walk, dialect)),
        ),
    };
    if let Some(after) = after {
        // The position of `after`: its first word in the range.
        let at = || {
            Sql::new("(SELECT COALESCE(MIN(a.word), ")
                .append(dialect.opaque_text(walk.clone()))
                .push(") FROM user_words a WHERE a.user_id = ")
                .append(dialect.opaque_bigint(after))
                .push(" AND ")
                .append(begins("a.word", walk, dialect))
                .push(")")
        };
        candidates = candidates
            .push(&format!(" AND {w}.word >= "))
            .append(at())
            .push(&format!(" AND ({w}.word > "))
            .append(at())
            .push(&format!(" OR {w}.user_id > "))
            .append(dialect.opaque_bigint(after))
            .push(")");
    }
    candidates = candidates.push(&format!(" ORDER BY {w}.word, {w}.user_id LIMIT {SCAN}"));
    let mut sql = Sql::new(&format!(
        "SELECT {PROFILE_COLUMNS}, CAST({phase} AS BIGINT) AS phase, c.word FROM ("
    ))
    .append(candidates)
    .push(") c JOIN users u ON u.id = c.user_id WHERE ");
    if w == "w" {
        // Each user once, at their first word in the range.
        sql = sql
            .push("NOT EXISTS (SELECT 1 FROM user_words d WHERE d.user_id = c.user_id AND ")
            .append(begins("d.word", walk, dialect))
            .push(" AND d.word < c.word) AND ");
    }
    sql = sql.append(has_others(search, "c.user_id", dialect));
    if let (OTHERS, Some(v)) = (phase, viewer) {
        // The viewer's friends were the first phase: read once, not per row.
        sql = sql
            .push(" AND u.id NOT IN (")
            .append(friend_ids(v))
            .push(")");
    }
    sql = sql
        .push(" AND ")
        .append(visible_person("u.id", Who::User(viewer.unwrap_or(0))))
        .push(" ORDER BY c.word, c.user_id LIMIT ")
        .append(dialect.opaque_bigint(i64::try_from(limit + 1).unwrap_or(i64::MAX)));
    Some(sql)
}

/// A found user and the phase that found them ([`phase_query`]'s columns;
/// the word it walked to, last, orders the rows and is not read).
struct Found {
    profile: Profile,
    phase: i64,
}

impl FromQueryResult for Found {
    fn from_query_result(res: &QueryResult, _: &str) -> Result<Self, DbErr> {
        let mut c = Columns::of(res);
        Ok(Self {
            profile: Profile::read(&mut c)?,
            phase: c.take()?,
        })
    }
}

/// The statement of a page from phase `at` on: for a signed-in viewer's
/// friends' phase, that phase's rows and everyone else's in one statement
/// (each arm its own page, `limit` + 1 rows at most: the second costs a
/// bounded walk when friends fill the page, and saves a statement when they
/// do not, which is nearly always); else the one phase's.
pub fn page_query(
    search: &Search,
    viewer: Option<i64>,
    at: i64,
    after: Option<i64>,
    limit: u64,
    dialect: Dialect,
) -> Option<Sql> {
    if at != FRIENDS || viewer.is_none() {
        return phase_query(search, viewer, OTHERS, after, limit, dialect);
    }
    let friends = phase_query(search, viewer, FRIENDS, after, limit, dialect)?;
    let others = phase_query(search, viewer, OTHERS, None, limit, dialect)?;
    Some(
        Sql::new("SELECT * FROM (")
            .append(friends)
            .push(") friends_page UNION ALL SELECT * FROM (")
            .append(others)
            // In the database's collation, as each arm walked its words.
            .push(") others_page ORDER BY phase, word, id"),
    )
}

/// A page of the users `search` finds for `viewer`: friends first (for a
/// signed-in viewer), then everyone else; at most two statements (the
/// sample that chooses the walking word, on a first page of several words;
/// the page, [`page_query`]).
pub async fn page<C: ConnectionTrait>(
    db: &C,
    search: Search,
    viewer: Option<i64>,
    q: &PageQuery,
) -> AppResult<Page<Profile>> {
    let (search, at, after) = match q.after {
        Some(Key { ts, id }) => {
            let ts = ts.max(0);
            let walk = usize::try_from(ts / 2).unwrap_or(usize::MAX);
            (search.walking(walk), ts % 2, Some(id))
        }
        None => {
            let phase = if viewer.is_some() { FRIENDS } else { OTHERS };
            (choose_walk(db, search).await?, phase, None)
        }
    };
    let walk = i64::try_from(search.walk).unwrap_or(0);
    let limit = usize::try_from(q.limit).unwrap_or(usize::MAX);
    let mut rows: Vec<Found> =
        match page_query(&search, viewer, at, after, q.limit, Dialect::of(db)) {
            Some(sql) => db::fetch_all(db, sql).await?,
            None => Vec::new(),
        };
    let mut items = Vec::new();
    let mut has_next = false;
    for phase in [FRIENDS, OTHERS] {
        let found: Vec<Found> = rows.extract_if(.., |r| r.phase == phase).collect();
        let left = limit - items.len();
        if found.len() > left {
            has_next = true;
        }
        let ts = phase + 2 * walk;
        items.extend(found.into_iter().take(left).map(|f| {
            (
                Key {
                    ts,
                    id: f.profile.id,
                },
                f.profile,
            )
        }));
        if has_next {
            break;
        }
    }
    Ok(Page {
        has_next,
        has_previous: q.after.is_some(),
        items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_ascii_lowercase_and_split() {
        assert_eq!(
            words_of("Zoe_Smith9", Some("Zoë Ångström-Łukasz")),
            ["angstrom", "lukasz", "smith9", "zoe"]
                .into_iter()
                .map(String::from)
                .collect()
        );
        assert!(words_of("___", None).is_empty());
    }

    #[test]
    fn successors_bound_every_word_with_the_prefix() {
        assert_eq!(successor("ali").as_deref(), Some("alj"));
        assert_eq!(successor("az").as_deref(), Some("b"));
        assert_eq!(successor("a9").as_deref(), Some("aa"));
        assert_eq!(successor("zz"), None);
        for w in ["ali", "ali0", "aliz", "alizzz9"] {
            assert!(("ali".."alj").contains(&w));
        }
    }

    #[test]
    fn search_texts_are_checked_and_reduced() {
        assert!(Search::parse("").is_err());
        assert!(Search::parse(&"a".repeat(51)).is_err());
        assert!(Search::parse(&"é".repeat(50)).is_ok());
        assert_eq!(Search::parse("!!").unwrap().words, Vec::<String>::new());
        assert_eq!(Search::parse("!!").unwrap().walking(3).walk, 0);
        assert_eq!(Search::parse("a b").unwrap().walking(7).walk, 1);
        assert_eq!(
            Search::parse("Al ALICE sm b c d e").unwrap().words,
            ["alice", "sm", "b", "c"].map(String::from)
        );
        let a = Search::parse("ann").unwrap();
        assert_ne!(a.owner(Some(1)), a.owner(Some(2)));
        assert_ne!(
            a.owner(Some(1)),
            Search::parse("anna").unwrap().owner(Some(1))
        );
    }
}
