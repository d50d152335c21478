//! Users: the viewer, lookups, friend requests.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::page::{CursorKind, List};
use crate::domain::visibility::Who;
use crate::domain::{friend, search, user};
use crate::error::AppError;
use crate::graphql::types::{
    Connected, IdKind, User, forward_query, list_cost, parse_id, user_connection,
};
use crate::graphql::{db, loaders, viewer};

#[derive(Default)]
pub struct UserQuery;

#[Object]
impl UserQuery {
    /// The authenticated user; null for an anonymous request (no token). A bad or expired token is UNAUTHENTICATED, here as everywhere.
    async fn viewer(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let Some(v) = viewer(ctx).id() else {
            return Ok(None);
        };
        let l = loaders(ctx)?;
        let profile = l.one(&l.users, v).await?;
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
        match (id, username) {
            (Some(id), None) => match parse_id(&id, IdKind::User) {
                Some(n) => Ok(user::find_visible_by_ids(db(ctx)?, viewer(ctx).id(), &[n])
                    .await?
                    .remove(&n)
                    .map(User)),
                None => Ok(None),
            },
            (None, Some(name)) => {
                let who = Who::User(viewer(ctx).id().unwrap_or(0));
                Ok(user::find_by_username(db(ctx)?, Some(who), &name)
                    .await?
                    .map(User))
            }
            _ => Err(AppError::bad_input("pass exactly one of id or username").into()),
        }
    }

    /// People whose username or display name begins with a word of `text` (case- and accent-insensitive; 1 to 50 characters), friends first, then the closest matches; accounts blocked either way and suspended ones left out.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn search_users(
        &self,
        ctx: &Context<'_>,
        text: String,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        let found = search::Search::parse(&text)?;
        let v = viewer(ctx).id();
        let list = List(CursorKind::UserSearch, found.owner(v));
        let q = forward_query(ctx, list, first, after, 20)?;
        let page = search::page(db(ctx)?, found, v, &q).await?;
        user_connection(ctx, list, page).await
    }

    /// Friend requests the viewer sent that are still pending, newest first.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn sent_friend_requests(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        pending_requests(ctx, true, first, after).await
    }

    /// Users who asked the viewer to be friends and wait for an answer.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn friend_requests(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        pending_requests(ctx, false, first, after).await
    }
}

/// The viewer's friend requests that wait for an answer: those they `sent`,
/// else those they received; newest first.
async fn pending_requests(
    ctx: &Context<'_>,
    sent: bool,
    first: Option<i32>,
    after: Option<String>,
) -> Result<Connected<User>> {
    let v = viewer(ctx).require()?;
    let kind = if sent {
        CursorKind::SentFriendRequest
    } else {
        CursorKind::FriendRequest
    };
    let q = forward_query(ctx, List(kind, v), first, after, 20)?;
    let page = if sent {
        friend::outgoing_page(db(ctx)?, v, &q).await?
    } else {
        friend::incoming_page(db(ctx)?, v, &q).await?
    };
    user_connection(ctx, List(kind, v), page).await
}
