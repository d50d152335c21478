//! Statuses: the story tray, per-author pages, one status.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::page::{CursorKind, List, PageArgs, PageQuery};
use crate::domain::status;
use crate::graphql::loaders::{prime_statuses, prime_tray, wants_authors, wants_seen};
use crate::graphql::types::{
    Connected, IdKind, Scope, Status, StoryTrayEntry, connection, forward_query, list_cost,
    parse_id,
};
use crate::graphql::{app, db, viewer};

/// A page of one author's live statuses (for `statuses` and `User.statuses`).
pub(crate) async fn statuses_of(
    ctx: &Context<'_>,
    author: i64,
    args: PageArgs,
) -> Result<Connected<Status>> {
    let app = app(ctx)?;
    let q = PageQuery::from_args(
        &app.cursors,
        List(CursorKind::Status, author),
        &args,
        10,
        app.config.graphql.max_page_size,
    )?;
    let seen_by = wants_seen(ctx);
    let (page, seen) = status::page_by_author(
        db(ctx)?,
        author,
        app.clock.now(),
        &q,
        viewer(ctx).id(),
        seen_by,
    )
    .await?;
    let rows: Vec<_> = page.items.iter().map(|i| &i.1).collect();
    prime_statuses(ctx, &rows, seen.as_ref()).await?;
    Ok(connection(
        &app.cursors,
        List(CursorKind::Status, author),
        page,
        Status::new,
    ))
}

#[derive(Default)]
pub struct StatusQuery;

#[Object]
impl StatusQuery {
    /// The story tray: one entry per author with at least one live status, the author with the freshest status first. FRIENDS needs authentication.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn story_tray(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
        #[graphql(default_with = "Some(Scope::Everyone)")] scope: Option<Scope>,
    ) -> Result<Connected<StoryTrayEntry>> {
        let app = app(ctx)?;
        let q = forward_query(
            ctx,
            List(CursorKind::Tray, viewer(ctx).id().unwrap_or(0)),
            first,
            after,
            20,
        )?;
        let (page, profiles) = status::tray_page(
            db(ctx)?,
            viewer(ctx).id(),
            scope.into(),
            app.clock.now(),
            &q,
            wants_authors(ctx),
        )
        .await?;
        let authors: Vec<i64> = page.items.iter().map(|i| i.1.author_id).collect();
        prime_tray(ctx, &authors, profiles).await?;
        Ok(connection(
            &app.cursors,
            List(CursorKind::Tray, viewer(ctx).id().unwrap_or(0)),
            page,
            StoryTrayEntry::from,
        ))
    }

    /// One author's live statuses, newest first.
    #[graphql(complexity = "list_cost(first, last, 10, child_complexity)")]
    async fn statuses(
        &self,
        ctx: &Context<'_>,
        user_id: ID,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> Result<Connected<Status>> {
        let args = PageArgs {
            first,
            after,
            last,
            before,
        };
        // An id that names no user still has its arguments checked and
        // answers like any unknown user: an empty connection.
        statuses_of(ctx, parse_id(&user_id, IdKind::User).unwrap_or(0), args).await
    }

    /// A live status by id; null if it does not exist, has expired or the viewer may not see it.
    async fn status(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Status>> {
        let app = app(ctx)?;
        let Some(n) = parse_id(&id, IdKind::Status) else {
            return Ok(None);
        };
        Ok(
            status::find_readable(db(ctx)?, viewer(ctx).id(), n, app.clock.now())
                .await?
                .map(Status::new),
        )
    }
}
