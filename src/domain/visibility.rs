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

/// SQL for the ids of `$user_param`'s accepted friends (a subquery body).
pub fn friend_ids_sql(user_param: usize) -> String {
    format!(
        "SELECT high_id FROM friendships WHERE low_id = ${user_param} AND accepted_at IS NOT NULL \
         UNION ALL \
         SELECT low_id FROM friendships WHERE high_id = ${user_param} AND accepted_at IS NOT NULL"
    )
}

/// SQL that keeps the moments of alias `m` that viewer `$viewer_param` may
/// see (liveness aside: see [`super::moment::readable_sql`]).
pub fn visible_moment_sql(m: &str, viewer_param: usize) -> String {
    format!(
        "({m}.visibility = 'PUBLIC' OR {m}.author_id = ${viewer_param} OR {m}.author_id IN ({}))",
        friend_ids_sql(viewer_param)
    )
}

/// SQL that keeps rows whose author column `author_col` the scope admits for
/// viewer `$viewer_param` (`TRUE` for everyone).
pub fn scope_sql(scope: Scope, author_col: &str, viewer_param: usize) -> String {
    match scope {
        Scope::Everyone => "1 = 1".to_owned(),
        Scope::Friends => format!(
            "({author_col} = ${viewer_param} OR {author_col} IN ({}))",
            friend_ids_sql(viewer_param)
        ),
    }
}
