//! The friend graph: requests, acceptance, removal.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::friend;
use crate::graphql::types::{FriendshipState, IdKind, require_id};
use crate::graphql::{app, writer};
use crate::throttle::Write;

#[derive(Default)]
pub struct FriendMutation;

#[Object]
impl FriendMutation {
    /// Asking yourself is BAD_USER_INPUT; an unknown user is NOT_FOUND (so for the other friend mutations).
    async fn send_friend_request(&self, ctx: &Context<'_>, user_id: ID) -> Result<FriendshipState> {
        let v = writer(ctx, Write::Social).await?;
        let other = require_id(&user_id, IdKind::User, "user")?;
        let app = app(ctx)?;
        let state = friend::send_request(&app.db, v, other, app.clock.now()).await?;
        Ok(state.into())
    }

    /// Accepts the user's pending request; BAD_USER_INPUT if there is none.
    async fn accept_friend_request(
        &self,
        ctx: &Context<'_>,
        user_id: ID,
    ) -> Result<FriendshipState> {
        let v = writer(ctx, Write::Social).await?;
        let other = require_id(&user_id, IdKind::User, "user")?;
        let app = app(ctx)?;
        let state = friend::accept_request(&app.db, v, other, app.clock.now()).await?;
        Ok(state.into())
    }

    /// Removes a friend, declines an incoming request or cancels an outgoing one.
    async fn remove_friend(&self, ctx: &Context<'_>, user_id: ID) -> Result<FriendshipState> {
        let v = writer(ctx, Write::Social).await?;
        let other = require_id(&user_id, IdKind::User, "user")?;
        let app = app(ctx)?;
        Ok(friend::remove(&app.db, v, other, app.clock.now())
            .await?
            .into())
    }
}
