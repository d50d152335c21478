//! Mutation fields: accounts, friends and statuses.

use async_graphql::{Context, ID, MergedObject, Object, Result};

use super::types::{
    AuthPayload, CreateStatusInput, FriendshipState, SignInInput, SignUpInput, Status, User, id,
    require_id,
};
use super::{app, viewer};
use crate::domain::{friend, status, user};

/// The mutation root.
#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(UserMutation, StatusMutation);

#[derive(Default)]
pub struct UserMutation;

#[Object]
impl UserMutation {
    /// Creates an account and signs it in. A taken username is BAD_USER_INPUT.
    async fn sign_up(&self, ctx: &Context<'_>, input: SignUpInput) -> Result<AuthPayload> {
        let session = user::sign_up(
            app(ctx)?,
            user::SignUp {
                username: input.username,
                password: input.password,
                display_name: input.display_name,
            },
        )
        .await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Signs in. A wrong password and an unknown user give the same UNAUTHENTICATED error.
    async fn sign_in(&self, ctx: &Context<'_>, input: SignInInput) -> Result<AuthPayload> {
        let session = user::sign_in(app(ctx)?, &input.username, input.password).await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Asking yourself is BAD_USER_INPUT; an unknown user is NOT_FOUND (so for the other friend mutations).
    async fn send_friend_request(&self, ctx: &Context<'_>, user_id: ID) -> Result<FriendshipState> {
        let v = viewer(ctx).require()?;
        let other = require_id(&user_id, "user")?;
        Ok(friend::send_request(app(ctx)?, v, other).await?.into())
    }

    /// Accepts the user's pending request; BAD_USER_INPUT if there is none.
    async fn accept_friend_request(
        &self,
        ctx: &Context<'_>,
        user_id: ID,
    ) -> Result<FriendshipState> {
        let v = viewer(ctx).require()?;
        let other = require_id(&user_id, "user")?;
        Ok(friend::accept_request(app(ctx)?, v, other).await?.into())
    }

    /// Removes a friend, declines an incoming request or cancels an outgoing one.
    async fn remove_friend(&self, ctx: &Context<'_>, user_id: ID) -> Result<FriendshipState> {
        let v = viewer(ctx).require()?;
        let other = require_id(&user_id, "user")?;
        Ok(friend::remove(app(ctx)?, v, other).await?.into())
    }
}

#[derive(Default)]
pub struct StatusMutation;

#[Object]
impl StatusMutation {
    /// Posts a status that lives 24 hours (the server's configured TTL). At least one of mediaId and caption.
    async fn create_status(&self, ctx: &Context<'_>, input: CreateStatusInput) -> Result<Status> {
        let v = viewer(ctx).require()?;
        let media_id = input
            .media_id
            .as_ref()
            .map(|m| require_id(m, "media"))
            .transpose()?;
        let created = status::create(
            app(ctx)?,
            v,
            status::NewStatus {
                media_id,
                caption: input.caption,
                bg_color: input.bg_color,
            },
        )
        .await?;
        Ok(Status::new(created))
    }

    /// Only the author may delete; returns the deleted id. Its media is deleted too.
    async fn delete_status(&self, ctx: &Context<'_>, id: ID) -> Result<ID> {
        let v = viewer(ctx).require()?;
        let n = require_id(&id, "status")?;
        Ok(self::id(status::delete(app(ctx)?, v, n).await?))
    }

    /// Records that the viewer saw a live status; idempotent.
    async fn mark_status_seen(&self, ctx: &Context<'_>, id: ID) -> Result<Status> {
        let v = viewer(ctx).require()?;
        let n = require_id(&id, "status")?;
        Ok(Status::new(status::mark_seen(app(ctx)?, v, n).await?))
    }
}
