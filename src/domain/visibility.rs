//! Who may see what, written once as SQL fragments that every read path,
//! count and mutation builds on (a page is never filtered after fetching).
//!
//! - Statuses are public while live.
//! - A PUBLIC moment is visible to anyone; a FRIENDS_ONLY moment to its author
//!   and the author's accepted friends, and to nobody else by any path.
//! - A `FRIENDS` scope keeps the viewer's own and their accepted friends'.
//!
//! An anonymous viewer is passed as user id 0, which no account has.

use super::Scope;
use crate::db::Sql;

/// SQL for the ids of `user`'s accepted friends (a subquery body).
pub fn friend_ids(user: i64) -> Sql {
    Sql::new("SELECT high_id FROM friendships WHERE low_id = ")
        .bind(user)
        .push(" AND accepted_at IS NOT NULL UNION ALL SELECT low_id FROM friendships WHERE high_id = ")
        .bind(user)
        .push(" AND accepted_at IS NOT NULL")
}

/// SQL that keeps the moments of alias `m` that `viewer` may see (liveness
/// aside: see [`super::moment::readable`]).
pub fn visible_moment(m: &str, viewer: i64) -> Sql {
    Sql::new(&format!("({m}.visibility = 'PUBLIC' OR {m}.author_id = "))
        .bind(viewer)
        .push(&format!(" OR {m}.author_id IN ("))
        .append(friend_ids(viewer))
        .push("))")
}

/// SQL that keeps rows whose author column `author_col` the scope admits for
/// `viewer` (`1 = 1` for everyone).
pub fn scope(scope: Scope, author_col: &str, viewer: i64) -> Sql {
    match scope {
        Scope::Everyone => Sql::new("1 = 1"),
        Scope::Friends => Sql::new(&format!("({author_col} = "))
            .bind(viewer)
            .push(&format!(" OR {author_col} IN ("))
            .append(friend_ids(viewer))
            .push("))"),
    }
}
