//! Who may see what. Statuses are public while live; a `FRIENDS` scope keeps
//! the viewer's own and their accepted friends'. The friend set is one SQL
//! fragment, used by every path that narrows to friends.

use super::Scope;

/// SQL for the ids of `$user_param`'s accepted friends (a subquery body).
pub fn friend_ids_sql(user_param: usize) -> String {
    format!(
        "SELECT high_id FROM friendships WHERE low_id = ${user_param} AND accepted_at IS NOT NULL \
         UNION ALL \
         SELECT low_id FROM friendships WHERE high_id = ${user_param} AND accepted_at IS NOT NULL"
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
