//! Close friends, hiding stories, mutes and blocks; reports; moderation.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::moderation::{self, NewReport};
use crate::domain::safety::{self, Relation};
use crate::error::AppError;
use crate::graphql::types::{IdKind, Report, ReportInput, parse_subject, require_id};
use crate::graphql::{app, writer};
use crate::throttle::Write;

#[derive(Default)]
pub struct SafetyMutation;

impl SafetyMutation {
    async fn relate(ctx: &Context<'_>, user_id: &ID, list: Relation, on: bool) -> Result<ID> {
        let v = writer(ctx, Write::Social).await?;
        let other = require_id(user_id, IdKind::User, "user")?;
        let app = app(ctx)?;
        if on {
            safety::add(
                &app.db,
                v,
                other,
                list,
                app.config.limits.max_relations,
                app.clock.now(),
            )
            .await?;
        } else {
            safety::remove(&app.db, v, other, list, app.clock.now()).await?;
        }
        Ok(user_id.clone())
    }
}

#[Object]
impl SafetyMutation {
    /// Puts an accepted friend on the viewer's close-friends list (who see CLOSE_FRIENDS statuses); idempotent. Nobody else can tell who is on it. A user who is not an accepted friend is BAD_USER_INPUT; returns the user's id.
    async fn add_close_friend(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::CloseFriend, true).await
    }

    /// Takes a user off the viewer's close-friends list; idempotent.
    async fn remove_close_friend(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::CloseFriend, false).await
    }

    /// The user never sees the viewer's statuses, whatever their audience (moments keep their own visibility); idempotent.
    async fn hide_stories_from(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::Hide, true).await
    }

    /// Undoes hideStoriesFrom; idempotent.
    async fn unhide_stories_from(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::Hide, false).await
    }

    /// The viewer stops seeing the user's statuses and moments in the tray, feeds, location pages, the map and statusCreated; reading them directly still works, and the muted user cannot tell. Idempotent.
    async fn mute_user(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::Mute, true).await
    }

    /// Undoes muteUser; idempotent.
    async fn unmute_user(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::Mute, false).await
    }

    /// Neither the viewer nor the user sees the other any more: statuses, moments, pins and badges, likes, viewers, profile (each reads as not found); their friendship and pending requests end, and neither can send a request. Only the viewer can undo it. Blocking yourself is BAD_USER_INPUT.
    async fn block_user(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::Block, true).await
    }

    /// Undoes the viewer's own block (a block the other way stays); idempotent. The friendship does not come back.
    async fn unblock_user(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        Self::relate(ctx, &user_id, Relation::Block, false).await
    }

    /// Reports a status, moment or user the viewer can see (NOT_FOUND otherwise; oneself or one's own content is BAD_USER_INPUT). Reporting the same thing again while the first report is open returns that report.
    async fn report(&self, ctx: &Context<'_>, input: ReportInput) -> Result<Report> {
        let v = writer(ctx, Write::Report).await?;
        let (subject_kind, subject_id) = parse_subject(&input.subject_id)
            .ok_or_else(|| AppError::not_found("nothing to report with this id"))?;
        let app = app(ctx)?;
        let report = moderation::report(
            &app.db,
            &app.ids,
            v,
            NewReport {
                subject_kind,
                subject_id,
                reason: input.reason.as_str().to_owned(),
                details: input.details,
            },
            app.clock.now(),
        )
        .await?;
        Ok(report.into())
    }

    /// Moderators only (FORBIDDEN otherwise): deletes a status or moment at once with its media, tells its author why (their moderationNotices), and resolves the open reports about it. Returns its id.
    async fn take_down(&self, ctx: &Context<'_>, id: ID, reason: String) -> Result<ID> {
        let v = writer(ctx, Write::Moderate).await?;
        let subject = parse_subject(&id)
            .ok_or_else(|| AppError::not_found("no status or moment with this id"))?;
        let app = app(ctx)?;
        moderation::take_down(&app.db, &app.ids, v, subject, reason, app.clock.now()).await?;
        Ok(id)
    }

    /// Moderators only: resolves a report with what was decided.
    async fn resolve_report(
        &self,
        ctx: &Context<'_>,
        id: ID,
        resolution: String,
    ) -> Result<Report> {
        let v = writer(ctx, Write::Moderate).await?;
        let n = require_id(&id, IdKind::Report, "report")?;
        let app = app(ctx)?;
        let report = moderation::resolve(&app.db, v, n, resolution, app.clock.now()).await?;
        Ok(report.into())
    }

    /// Moderators only: suspends an account. Its tokens stop working, it cannot sign in (FORBIDDEN, with the reason), and its profile and content disappear from every path until reinstateUser. Returns its id.
    async fn suspend_user(&self, ctx: &Context<'_>, user_id: ID, reason: String) -> Result<ID> {
        let v = writer(ctx, Write::Moderate).await?;
        let n = require_id(&user_id, IdKind::User, "user")?;
        let app = app(ctx)?;
        moderation::suspend(
            &app.db,
            &app.accounts,
            &app.ids,
            v,
            n,
            reason,
            app.clock.now(),
        )
        .await?;
        Ok(user_id)
    }

    /// Moderators only: lifts a suspension; the account and its content are back.
    async fn reinstate_user(&self, ctx: &Context<'_>, user_id: ID) -> Result<ID> {
        let v = writer(ctx, Write::Moderate).await?;
        let n = require_id(&user_id, IdKind::User, "user")?;
        moderation::reinstate(&app(ctx)?.db, v, n).await?;
        Ok(user_id)
    }
}
