//! Statuses and the story tray.

use crate::graphql::types::moment::PER_PARENT_STATEMENT;
use std::sync::Arc;

use super::Connected;
use async_graphql::{ComplexObject, Context, Enum, ID, InputObject, Object, Result, SimpleObject};

use super::{
    DateTime, IdKind, Media, User, forward_query, id, list_cost, load_user, tray_entry_id,
    user_connection,
};
use crate::domain::page::{CursorKind, List};
use crate::domain::status as status_domain;
use crate::entity::status;
use crate::graphql::{db, loaders, viewer};

/// Who may see a status. Whoever it names, a status is never shown to someone the author blocked or who blocked the author, nor to people the author hides their stories from.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusAudience {
    /// Anyone, signed in or not.
    Public,
    /// The author's accepted friends.
    Friends,
    /// The people on the author's close-friends list.
    CloseFriends,
}

impl From<StatusAudience> for status_domain::Audience {
    fn from(a: StatusAudience) -> Self {
        match a {
            StatusAudience::Public => Self::Public,
            StatusAudience::Friends => Self::Friends,
            StatusAudience::CloseFriends => Self::CloseFriends,
        }
    }
}

impl From<status_domain::Audience> for StatusAudience {
    fn from(a: status_domain::Audience) -> Self {
        match a {
            status_domain::Audience::Public => Self::Public,
            status_domain::Audience::Friends => Self::Friends,
            status_domain::Audience::CloseFriends => Self::CloseFriends,
        }
    }
}

/// A story: a post with optional media, a caption and a background colour that lives 24 hours.
#[derive(Clone, Debug)]
pub struct Status(pub Arc<status::Model>);

impl Status {
    pub fn new(model: status::Model) -> Self {
        Self(Arc::new(model))
    }

    fn viewer_is_author(&self, ctx: &Context<'_>) -> bool {
        viewer(ctx).id() == Some(self.0.author_id)
    }
}

#[Object]
impl Status {
    /// The status's id.
    pub async fn id(&self) -> ID {
        id(IdKind::Status, self.0.id)
    }

    /// Who posted it.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        load_user(ctx, self.0.author_id).await
    }

    /// The attached image, if any.
    async fn media(&self, ctx: &Context<'_>) -> Result<Option<Media>> {
        let Some(media_id) = self.0.media_id else {
            return Ok(None);
        };
        Ok(loaders(ctx)?.media.load_one(media_id).await?.map(Media))
    }

    /// Text shown with the status, at most 500 characters.
    async fn caption(&self) -> Option<&str> {
        self.0.caption.as_deref()
    }

    /// Background colour as `#RRGGBB`.
    async fn bg_color(&self) -> Option<&str> {
        self.0.bg_color.as_deref()
    }

    /// When it was posted.
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }

    /// Who may see it.
    async fn audience(&self) -> StatusAudience {
        status_domain::Audience::from_stored(&self.0.audience).into()
    }

    /// When it stops being live (its creation plus the server's status TTL).
    async fn expires_at(&self) -> DateTime {
        DateTime(self.0.expires_at)
    }

    /// Whether the viewer marked it seen; false without authentication.
    async fn viewer_has_seen(&self, ctx: &Context<'_>) -> Result<bool> {
        let Some(v) = viewer(ctx).id() else {
            return Ok(false);
        };
        Ok(loaders(ctx)?
            .seen
            .load_one((v, self.0.id))
            .await?
            .unwrap_or(false))
    }

    /// For the author only; null for everyone else.
    async fn view_count(&self, ctx: &Context<'_>) -> Result<Option<i32>> {
        if !self.viewer_is_author(ctx) {
            return Ok(None);
        }
        let n = loaders(ctx)?
            .view_counts
            .load_one(self.0.id)
            .await?
            .unwrap_or(0);
        Ok(Some(i32::try_from(n).unwrap_or(i32::MAX)))
    }

    /// For the author only; null for everyone else. Most recent first.
    #[graphql(complexity = "PER_PARENT_STATEMENT + list_cost(first, None, 20, child_complexity)")]
    async fn viewers(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Option<Connected<User>>> {
        let q = forward_query(
            ctx,
            List(CursorKind::StatusViewer, self.0.id),
            first,
            after,
            20,
        )?;
        if !self.viewer_is_author(ctx) {
            return Ok(None);
        }
        let page = status_domain::viewers_page(db(ctx)?, &self.0, &q).await?;
        Ok(Some(
            user_connection(ctx, List(CursorKind::StatusViewer, self.0.id), page).await?,
        ))
    }
}

/// One author in the story tray.
#[derive(Clone, Debug, SimpleObject)]
#[graphql(complex)]
pub struct StoryTrayEntry {
    #[graphql(skip)]
    pub author_id: i64,
    /// When the author's newest live status was posted.
    pub latest_created_at: DateTime,
    /// Its counts when they were read with it (an event's entry), else
    /// read through the loader.
    #[graphql(skip)]
    pub counts: Option<status_domain::TrayCounts>,
}

#[ComplexObject]
impl StoryTrayEntry {
    /// Stable for one author in one viewer's tray, for normalised client caches.
    async fn id(&self, ctx: &Context<'_>) -> ID {
        tray_entry_id(viewer(ctx).id(), self.author_id)
    }

    /// The author whose statuses this entry stands for.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        load_user(ctx, self.author_id).await
    }

    /// How many live statuses the author has that the viewer may see.
    async fn story_count(&self, ctx: &Context<'_>) -> Result<i32> {
        let counts = self.counts(ctx).await?;
        Ok(i32::try_from(counts.live).unwrap_or(i32::MAX))
    }

    /// Whether the author has a live status the viewer has not marked seen; true without authentication.
    async fn has_unseen(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.counts(ctx).await?.unseen > 0)
    }
}

impl StoryTrayEntry {
    async fn counts(&self, ctx: &Context<'_>) -> Result<status_domain::TrayCounts> {
        if let Some(counts) = self.counts {
            return Ok(counts);
        }
        let key = (viewer(ctx).id(), self.author_id);
        Ok(loaders(ctx)?
            .tray_counts
            .load_one(key)
            .await?
            .unwrap_or_default())
    }
}

impl From<status_domain::TrayRow> for StoryTrayEntry {
    fn from(row: status_domain::TrayRow) -> Self {
        Self {
            author_id: row.author_id,
            latest_created_at: DateTime(row.latest_created_at),
            counts: None,
        }
    }
}

impl From<crate::events::TrayEntry> for StoryTrayEntry {
    fn from(e: crate::events::TrayEntry) -> Self {
        Self {
            author_id: e.author,
            latest_created_at: DateTime(e.latest_created_at),
            counts: Some(status_domain::TrayCounts {
                live: e.live,
                unseen: e.unseen,
            }),
        }
    }
}

/// A new status.
#[derive(InputObject)]
pub struct CreateStatusInput {
    /// An image the viewer uploaded and has not attached elsewhere.
    pub media_id: Option<ID>,
    /// At most 500 characters.
    pub caption: Option<String>,
    /// #RRGGBB
    pub bg_color: Option<String>,
    /// Who may see it; FRIENDS unless given.
    #[graphql(default_with = "StatusAudience::Friends")]
    pub audience: StatusAudience,
}
