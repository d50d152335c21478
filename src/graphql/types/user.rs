//! Users and sign-in.

use super::Connected;
use crate::graphql::types::moment::PER_PARENT_STATEMENT;
use async_graphql::{Context, ID, InputObject, Object, Result, SimpleObject};

use super::{
    DateTime, FriendshipState, IdKind, Media, Moment, Status, forward_query, id, list_cost,
    user_connection,
};
use crate::domain::friend::{self, FriendshipState as DomainFriendship};
use crate::domain::moment::MomentList;
use crate::domain::page::{CursorKind, List, Page, PageArgs};
use crate::domain::user::Profile;
use crate::error::AppError;
use crate::graphql::{db, loaders, viewer};

/// A user by id through the request's loader; `NOT_FOUND` if gone.
pub async fn load_user(ctx: &Context<'_>, id: i64) -> Result<User> {
    let profile = loaders(ctx)?.users.load_one(id).await?;
    Ok(User(
        profile.ok_or_else(|| AppError::not_found("user not found"))?,
    ))
}

/// A person on ephemera.
#[derive(Clone, Debug)]
pub struct User(pub Profile);

#[Object]
impl User {
    /// The user's id.
    pub async fn id(&self) -> ID {
        id(IdKind::User, self.0.id)
    }

    /// The unique handle: 3 to 30 letters, digits or underscores.
    async fn username(&self) -> &str {
        &self.0.username
    }

    /// The name the user shows, if they set one.
    async fn display_name(&self) -> Option<&str> {
        self.0.display_name.as_deref()
    }

    /// When the account was created.
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }

    /// This user's live statuses, newest first.
    #[graphql(complexity = "PER_PARENT_STATEMENT + list_cost(first, last, 10, child_complexity)")]
    async fn statuses(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> Result<Connected<Status>> {
        crate::graphql::query::statuses_of(
            ctx,
            self.0.id,
            PageArgs {
                first,
                after,
                last,
                before,
            },
        )
        .await
    }

    /// This user's live moments that the viewer may see, newest first; journaled: true gives the diary.
    #[graphql(complexity = "PER_PARENT_STATEMENT + list_cost(first, None, 20, child_complexity)")]
    async fn moments(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
        journaled: Option<bool>,
    ) -> Result<Connected<Moment>> {
        super::moments_of(
            ctx,
            List(CursorKind::UserMoments, self.0.id),
            MomentList::Author {
                author: self.0.id,
                journaled,
            },
            first,
            after,
        )
        .await
    }

    /// How the viewer stands with this user; NONE without authentication.
    async fn friendship(&self, ctx: &Context<'_>) -> Result<FriendshipState> {
        Ok(self
            .standing(ctx)
            .await?
            .map_or(DomainFriendship::None, |s| s.state)
            .into())
    }

    /// When the friend request between the viewer and this user that waits for an answer was sent (by either); null when there is none.
    async fn friend_requested_at(&self, ctx: &Context<'_>) -> Result<Option<DateTime>> {
        Ok(self
            .standing(ctx)
            .await?
            .and_then(|s| s.requested_at)
            .map(DateTime))
    }

    /// What the user wrote about themselves; at most 300 characters.
    async fn bio(&self) -> Option<&str> {
        self.0.bio.as_deref()
    }

    /// The user's picture; null until set.
    async fn avatar(&self, ctx: &Context<'_>) -> Result<Option<Media>> {
        let Some(media_id) = self.0.avatar_media_id else {
            return Ok(None);
        };
        Ok(loaders(ctx)?.media.load_one(media_id).await?.map(Media))
    }

    /// How many accepted friends the user has; null where the viewer may not see the user's friends.
    async fn friend_count(&self, ctx: &Context<'_>) -> Result<Option<i64>> {
        if !self.friends_visible(ctx).await? {
            return Ok(None);
        }
        let v = viewer(ctx).id().unwrap_or(0);
        Ok(loaders(ctx)?.friend_counts.load_one((v, self.0.id)).await?)
    }

    /// Accepted friends; visible to the user and their friends, an empty connection to others.
    #[graphql(complexity = "PER_PARENT_STATEMENT + list_cost(first, None, 20, child_complexity)")]
    async fn friends(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<User>> {
        let q = forward_query(ctx, List(CursorKind::Friend, self.0.id), first, after, 20)?;
        let page = if self.friends_visible(ctx).await? {
            friend::friends_page(db(ctx)?, self.0.id, viewer(ctx).id().unwrap_or(0), &q).await?
        } else {
            Page::empty()
        };
        user_connection(ctx, List(CursorKind::Friend, self.0.id), page).await
    }
}

impl User {
    /// How the viewer stands with this user; `None` without authentication.
    async fn standing(&self, ctx: &Context<'_>) -> Result<Option<friend::Standing>> {
        let Some(v) = viewer(ctx).id() else {
            return Ok(None);
        };
        Ok(loaders(ctx)?.friendship.load_one((v, self.0.id)).await?)
    }

    /// Whether the viewer may see this user's friends: the user themself
    /// and their friends.
    async fn friends_visible(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(match self.standing(ctx).await? {
            Some(s) => matches!(
                s.state,
                DomainFriendship::Myself | DomainFriendship::Friends
            ),
            None => false,
        })
    }
}

/// A signed-in session.
#[derive(SimpleObject)]
pub struct AuthPayload {
    /// Send as `Authorization: Bearer <token>`; expires after the server's token TTL.
    pub token: String,
    /// The signed-in user.
    pub user: User,
}

/// A new account.
#[derive(InputObject)]
pub struct SignUpInput {
    /// 3 to 30 characters: letters, digits, underscore.
    pub username: String,
    /// At least 8 characters.
    pub password: String,
    /// Up to 50 characters (as updateProfile takes them); blank means none.
    pub display_name: Option<String>,
}

/// Credentials.
#[derive(InputObject)]
pub struct SignInInput {
    /// The username, in any case.
    pub username: String,
    /// The password.
    pub password: String,
}

/// Changes to the viewer's profile; what is left out stays as it is.
#[derive(InputObject)]
pub struct UpdateProfileInput {
    /// 1 to 50 characters; an empty string clears it. Left out: unchanged.
    pub display_name: Option<String>,
    /// At most 300 characters; an empty string clears it. Left out: unchanged.
    pub bio: Option<String>,
    /// An image upload of the viewer's, not attached elsewhere. Left out: unchanged.
    pub avatar_media_id: Option<ID>,
    /// true removes the avatar (and deletes its media).
    #[graphql(default = false)]
    pub remove_avatar: bool,
}
