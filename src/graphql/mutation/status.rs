//! Statuses: create, delete, mark seen.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::status;
use crate::graphql::types::{CreateStatusInput, IdKind, Status, id, require_id};
use crate::graphql::{app, writer};
use crate::throttle::Write;

#[derive(Default)]
pub struct StatusMutation;

#[Object]
impl StatusMutation {
    /// Posts a status that lives 24 hours (the server's configured TTL). At least one of mediaId and caption. Its audience is FRIENDS unless the input says otherwise.
    async fn create_status(&self, ctx: &Context<'_>, input: CreateStatusInput) -> Result<Status> {
        let v = writer(ctx, Write::Post).await?;
        let media_id = input
            .media_id
            .as_ref()
            .map(|m| require_id(m, IdKind::Media, "media"))
            .transpose()?;
        let app = app(ctx)?;
        let created = status::create(
            &app.db,
            &app.media,
            &app.ids,
            v,
            status::NewStatus {
                media_id,
                caption: input.caption,
                bg_color: input.bg_color,
                lives: app.config.statuses.ttl,
                max_live: app.config.statuses.max_live,
                audience: input.audience.into(),
            },
            app.clock.now(),
        )
        .await?;
        app.events.written();
        Ok(Status::new(created))
    }

    /// Only the author may delete; returns the deleted id. Its media is deleted too.
    async fn delete_status(&self, ctx: &Context<'_>, id: ID) -> Result<ID> {
        let v = writer(ctx, Write::Delete).await?;
        let n = require_id(&id, IdKind::Status, "status")?;
        let app = app(ctx)?;
        let deleted = status::delete(&app.db, v, n, app.clock.now()).await?;
        app.events.written();
        Ok(self::id(IdKind::Status, deleted))
    }

    /// Records that the viewer saw a live status; idempotent.
    async fn mark_status_seen(&self, ctx: &Context<'_>, id: ID) -> Result<Status> {
        let v = writer(ctx, Write::Seen).await?;
        let n = require_id(&id, IdKind::Status, "status")?;
        let app = app(ctx)?;
        let seen = status::mark_seen(&app.db, v, n, app.clock.now()).await?;
        app.events.written();
        Ok(Status::new(seen))
    }
}
