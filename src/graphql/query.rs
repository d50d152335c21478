//! Query fields: the viewer, users, nodes, statuses, the story tray and
//! friend requests.

use async_graphql::connection::Connection;
use async_graphql::{Context, ID, MergedObject, Object, Result};

use super::loaders::{prime_statuses, prime_tray};
use super::types::{
    Media, Node, Scope, Status, StoryTrayEntry, User, connection, forward_query, list_cost,
    parse_id, user_connection,
};
use super::{app, loaders, viewer};
use crate::domain::page::{CursorKind, PageArgs};
use crate::domain::{friend, status, user};
use crate::entity::media;
use crate::error::AppError;

/// The query root.
#[derive(MergedObject, Default)]
#[graphql(name = "Query")]
pub struct QueryRoot(UserQuery, StatusQuery);

#[derive(Default)]
pub struct UserQuery;

const MAX_NODES: usize = 100;

#[Object]
impl UserQuery {
    /// Refetch any object by its id (Relay Global Object Identification).
    async fn node(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Node>> {
        Ok(resolve_nodes(ctx, &[id]).await?.pop().flatten())
    }

    /// Many objects at once, in the order asked, null where an id is unknown or not visible; at most 100 ids.
    async fn nodes(&self, ctx: &Context<'_>, ids: Vec<ID>) -> Result<Vec<Option<Node>>> {
        if ids.len() > MAX_NODES {
            return Err(AppError::bad_input(format!("at most {MAX_NODES} ids")).into());
        }
        resolve_nodes(ctx, &ids).await
    }

    /// The authenticated user; null for an anonymous request (no token). A bad or expired token is UNAUTHENTICATED, here as everywhere.
    async fn viewer(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let Some(v) = viewer(ctx).id() else {
            return Ok(None);
        };
        let profile = loaders(ctx)?.users.load_one(v).await?;
        // A token for an account that no longer exists is no longer valid.
        profile
            .map(|p| Some(User(p)))
            .ok_or_else(|| AppError::unauthenticated("this account no longer exists").into())
    }

    /// Exactly one of id or username.
    async fn user(
        &self,
        ctx: &Context<'_>,
        id: Option<ID>,
        username: Option<String>,
    ) -> Result<Option<User>> {
        let app = app(ctx)?;
        match (id, username) {
            (Some(id), None) => match parse_id(&id) {
                Some(n) => Ok(loaders(ctx)?.users.load_one(n).await?.map(User)),
                None => Ok(None),
            },
            (None, Some(name)) => Ok(user::find_by_username(&app.db, &name).await?.map(User)),
            _ => Err(AppError::bad_input("pass exactly one of id or username").into()),
        }
    }

    /// Users who asked the viewer to be friends and wait for an answer.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn friend_requests(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, User>> {
        let v = viewer(ctx).require()?;
        let q = forward_query(ctx, CursorKind::FriendRequest, first, after, 20)?;
        let page = friend::incoming_page(&app(ctx)?.db, v, &q).await?;
        user_connection(ctx, CursorKind::FriendRequest, page).await
    }
}

/// Looks ids up in every table that holds nodes, one query per table.
async fn resolve_nodes(ctx: &Context<'_>, ids: &[ID]) -> Result<Vec<Option<Node>>> {
    let app = app(ctx)?;
    let numbers: Vec<i64> = ids.iter().filter_map(parse_id).collect();
    let now = app.clock.now();
    let users = user::find_by_ids(&app.db, &numbers).await?;
    let statuses = status::find_live_by_ids(&app.db, &numbers, now).await?;
    // Media that is not attached yet is visible to its uploader only.
    let media: Vec<media::Model> = match viewer(ctx).id() {
        Some(v) if !numbers.is_empty() => {
            let mut values = vec![v.into()];
            values.extend(numbers.iter().map(|&n| n.into()));
            crate::db::fetch_all(
                &app.db,
                &format!(
                    "SELECT * FROM media WHERE owner_id = $1 AND id IN ({})",
                    crate::db::placeholders(2, numbers.len())
                ),
                values,
            )
            .await?
        }
        _ => Vec::new(),
    };
    Ok(ids
        .iter()
        .map(|id| {
            let n = parse_id(id)?;
            if let Some(u) = users.get(&n) {
                return Some(Node::User(User(u.clone())));
            }
            if let Some(s) = statuses.get(&n) {
                return Some(Node::Status(Status::new(s.clone())));
            }
            media
                .iter()
                .find(|m| m.id == n)
                .map(|m| Node::Media(Media(m.clone())))
        })
        .collect())
}

/// A page of one author's live statuses (for `statuses` and `User.statuses`).
pub(crate) async fn statuses_of(
    ctx: &Context<'_>,
    author: i64,
    args: PageArgs,
) -> Result<Connection<String, Status>> {
    let app = app(ctx)?;
    let q = app
        .cursors
        .query(CursorKind::Status, &args, 10, app.config.max_page_size)?;
    let page = status::page_by_author(&app.db, author, app.clock.now(), &q).await?;
    let rows: Vec<_> = page.items.iter().map(|i| i.1.clone()).collect();
    prime_statuses(ctx, &rows).await?;
    Ok(connection(
        &app.cursors,
        CursorKind::Status,
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
    ) -> Result<Connection<String, StoryTrayEntry>> {
        let app = app(ctx)?;
        let q = forward_query(ctx, CursorKind::Tray, first, after, 20)?;
        let page =
            status::tray_page(&app.db, viewer(ctx).id(), scope.into(), app.clock.now(), &q).await?;
        let authors: Vec<i64> = page.items.iter().map(|i| i.1.author_id).collect();
        prime_tray(ctx, &authors).await?;
        Ok(connection(
            &app.cursors,
            CursorKind::Tray,
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
    ) -> Result<Connection<String, Status>> {
        let args = PageArgs {
            first,
            after,
            last,
            before,
        };
        match parse_id(&user_id) {
            Some(author) => statuses_of(ctx, author, args).await,
            None => {
                // Still check the arguments, then answer like for any unknown user.
                let app = app(ctx)?;
                app.cursors
                    .query(CursorKind::Status, &args, 10, app.config.max_page_size)?;
                Ok(Connection::new(false, false))
            }
        }
    }

    /// A live status by id; null if it does not exist or has expired.
    async fn status(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Status>> {
        let app = app(ctx)?;
        let Some(n) = parse_id(&id) else {
            return Ok(None);
        };
        Ok(status::find_live(&app.db, n, app.clock.now())
            .await?
            .map(Status::new))
    }
}
