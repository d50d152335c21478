//! Moments: create, delete, restore, like.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::like::{self, LikeChange};
use crate::domain::moment::{self, NewMoment};
use crate::graphql::types::{CreateMomentInput, IdKind, Moment, Visibility, id, require_id};
use crate::graphql::{app, writer};
use crate::throttle::Write;

#[derive(Default)]
pub struct MomentMutation;

#[Object]
impl MomentMutation {
    /// Posts a moment: an uploaded image at a place, for `durationHours` (or journaled with 0).
    async fn create_moment(&self, ctx: &Context<'_>, input: CreateMomentInput) -> Result<Moment> {
        let v = writer(ctx, Write::Post).await?;
        let media_id = require_id(&input.media_id, IdKind::Media, "media")?;
        let location_id = input
            .location_id
            .as_ref()
            .map(|l| require_id(l, IdKind::Location, "location"))
            .transpose()?;
        let app = app(ctx)?;
        let created = moment::create(
            &app.db,
            &app.media,
            &app.ids,
            v,
            NewMoment {
                media_id,
                caption: input.caption,
                latitude: input.latitude,
                longitude: input.longitude,
                duration_hours: input.duration_hours.unwrap_or(24),
                visibility: input.visibility.unwrap_or(Visibility::FriendsOnly).into(),
                location_id,
                place_name: input.place_name,
            },
            app.clock.now(),
        )
        .await?;
        app.events.written();
        Ok(Moment::new(created))
    }

    /// Only the author may delete. The moment disappears at once and can be restored for 7 days; then it and its media are gone.
    async fn delete_moment(&self, ctx: &Context<'_>, id: ID) -> Result<ID> {
        let v = writer(ctx, Write::Delete).await?;
        let n = require_id(&id, IdKind::Moment, "moment")?;
        let app = app(ctx)?;
        let deleted = moment::delete(&app.db, v, n, app.clock.now()).await?;
        app.events.written();
        Ok(self::id(IdKind::Moment, deleted))
    }

    /// Undoes deleteMoment within the 7-day grace, for the author only.
    async fn restore_moment(&self, ctx: &Context<'_>, id: ID) -> Result<Moment> {
        let v = writer(ctx, Write::Delete).await?;
        let n = require_id(&id, IdKind::Moment, "moment")?;
        let app = app(ctx)?;
        let now = app.clock.now();
        let grace = app.config.moments.grace;
        let restored = moment::restore(&app.db, v, n, now, grace).await?;
        app.events.written();
        Ok(Moment::new(restored))
    }

    /// Likes if the viewer has not, unlikes if it has. One like per (moment, user), whatever the concurrency.
    async fn toggle_moment_like(&self, ctx: &Context<'_>, moment_id: ID) -> Result<Moment> {
        let v = writer(ctx, Write::Like).await?;
        let n = require_id(&moment_id, IdKind::Moment, "moment")?;
        let app = app(ctx)?;
        let now = app.clock.now();
        Ok(Moment::new(
            like::change(&app.db, v, n, LikeChange::Toggle, now).await?,
        ))
    }

    /// Idempotent form of the toggle, safe to retry.
    async fn set_moment_like(
        &self,
        ctx: &Context<'_>,
        moment_id: ID,
        liked: bool,
    ) -> Result<Moment> {
        let v = writer(ctx, Write::Like).await?;
        let n = require_id(&moment_id, IdKind::Moment, "moment")?;
        let app = app(ctx)?;
        let now = app.clock.now();
        Ok(Moment::new(
            like::change(&app.db, v, n, LikeChange::Set(liked), now).await?,
        ))
    }
}
