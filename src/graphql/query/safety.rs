//! The viewer's own lists (close friends, hidden from, muted, blocked),
//! their moderation notices, and the moderators' report queue.

use async_graphql::{Context, Object, Result};

use crate::domain::moderation;
use crate::domain::page::{CursorKind, List};
use crate::domain::safety::{self, Relation};
use crate::graphql::types::{
    Connected, ModerationNotice, Report, User, connection, forward_query, list_cost,
    user_connection,
};
use crate::graphql::{app, db, viewer};

#[derive(Default)]
pub struct SafetyQuery;

impl SafetyQuery {
    async fn list(
        ctx: &Context<'_>,
        kind: CursorKind,
        list: Relation,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        let v = viewer(ctx).require()?;
        let q = forward_query(ctx, List(kind, v), first, after, 20)?;
        let page = safety::page(db(ctx)?, v, list, &q).await?;
        user_connection(ctx, List(kind, v), page).await
    }
}

#[Object]
impl SafetyQuery {
    /// The viewer's close friends (who see their CLOSE_FRIENDS statuses), most recently added first. Only the viewer can read it.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn close_friends(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        Self::list(
            ctx,
            CursorKind::CloseFriend,
            Relation::CloseFriend,
            first,
            after,
        )
        .await
    }

    /// The people who never see the viewer's statuses.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn stories_hidden_from(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        Self::list(ctx, CursorKind::HiddenFrom, Relation::Hide, first, after).await
    }

    /// The people the viewer muted.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn muted_users(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        Self::list(ctx, CursorKind::Muted, Relation::Mute, first, after).await
    }

    /// The people the viewer blocked (so that they can unblock them).
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn blocked_users(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        Self::list(ctx, CursorKind::Blocked, Relation::Block, first, after).await
    }

    /// What moderators told the viewer (content taken down, a suspension), newest first.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn moderation_notices(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<ModerationNotice>> {
        let v = viewer(ctx).require()?;
        let list = List(CursorKind::Notice, v);
        let q = forward_query(ctx, list, first, after, 20)?;
        let page = moderation::notices_page(db(ctx)?, v, &q).await?;
        Ok(connection(
            &app(ctx)?.cursors,
            list,
            page,
            ModerationNotice::from,
        ))
    }

    /// Moderators only (FORBIDDEN otherwise): reports, newest first; open ones unless includeResolved.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn reports(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
        #[graphql(default_with = "Some(false)")] include_resolved: Option<bool>,
    ) -> Result<Connected<Report>> {
        let include_resolved = include_resolved.unwrap_or(false);
        let v = viewer(ctx).require()?;
        let list = List(CursorKind::Report, i64::from(include_resolved));
        let q = forward_query(ctx, list, first, after, 20)?;
        let page = moderation::reports_page(db(ctx)?, v, include_resolved, &q).await?;
        Ok(connection(&app(ctx)?.cursors, list, page, Report::from))
    }
}
