//! Subscription fields: `statusCreated` (live) and `events` (resumable),
//! both fed by the change log (`events`), so a subscriber hears of changes
//! made through any instance.
//!
//! Whom an event is for is decided by the domain (`domain::live`, built on
//! the rules every query uses), once per page of the log for all the
//! viewers subscribed on this instance, or for one subscriber alone while
//! it catches up; each subscription is handed only what is for it.

use async_graphql::{Context, Result, Subscription};
use futures_util::{Stream, StreamExt};

use super::types::{
    AuthorGoneEvent, FriendshipChangedEvent, IdKind, LiveEvent, Moment, MomentCreatedEvent,
    MomentDeletedEvent, MomentRestoredEvent, Scope, Status, StatusCreatedEvent, StatusDeletedEvent,
    StatusSeenEvent, StoryTrayEntry, StoryTrayEntryChangedEvent, StoryTrayEntryRemovedEvent, id,
    tray_entry_id,
};
use super::{app, viewer};
use crate::cursor::{CursorKind, Key, List};
use crate::domain::{Scope as DomainScope, live};
use crate::error::{AppError, AppResult};
use crate::events::{Delivery, Kind, Pos, TrayChange, log};
use crate::state::AppState;
use crate::throttle::ClientAddr;

/// The subscription root.
#[derive(Default)]
pub struct SubscriptionRoot;

#[Subscription(name = "Subscription")]
impl SubscriptionRoot {
    /// Each new status the subscriber may see, as it is posted, from whichever server instance took it. The same rules as the tray: its audience, blocks, hidden stories and mutes. Live only: to resume after a disconnection without missing any, use `events(after:)`.
    async fn status_created(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "Some(Scope::Everyone)")] scope: Option<Scope>,
    ) -> Result<impl Stream<Item = Status> + use<>> {
        let heard = hear(ctx, scope, None, false)?;
        Ok(heard.filter_map(|heard| async move {
            match heard {
                Ok(Delivery {
                    event,
                    status: Some(status),
                    ..
                }) if event.kind == Kind::StatusCreated => Some(Status(status)),
                Ok(_) => None,
                Err(e) => {
                    e.log();
                    None
                }
            }
        }))
    }

    /// Everything a live story tray and feed need, from whichever instance took it, in order and once each: statuses created, deleted or purged; the viewer's own seen marks (so devices agree); moments created, deleted or expired, restored; how the viewer stands with someone (friendship events, to both sides); and the viewer's own tray entries as `storyTray` returns them (`StoryTrayEntryChangedEvent`, after the event that changed one) or their removal. The same visibility rules as every query. Each event has a `cursor`: pass the last one seen as `after` to receive, in order, everything missed since, then live events. A cursor older than what is kept (`EPHEMERA_EVENT_RETENTION`, 24 hours by default) is refused with `CURSOR_EXPIRED`: refetch, then subscribe without it. FRIENDS keeps the viewer's own and their friends' (sign-in required).
    async fn events(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The cursor of the last event received; none: from now on.")]
        after: Option<String>,
        #[graphql(default_with = "Some(Scope::Everyone)")] scope: Option<Scope>,
    ) -> Result<impl Stream<Item = Result<LiveEvent>> + use<>> {
        let app = app(ctx)?.clone();
        let after = match after {
            Some(cursor) => {
                let pos = decode_event_cursor(&app, &cursor)?;
                if log::pruned(&app.log_db).await? > pos {
                    return Err(AppError::cursor_expired().into());
                }
                // Each resume reads the log from its cursor: metered per
                // client address and per account, on every instance alike.
                app.accounts
                    .limits
                    .catch_up(
                        &app.db,
                        ctx.data_opt::<ClientAddr>().copied(),
                        viewer(ctx).id(),
                        app.clock.now(),
                    )
                    .await?;
                Some(pos)
            }
            None => None,
        };
        let heard = hear(ctx, scope, after, true)?;
        let viewer = viewer(ctx).id().unwrap_or(0);
        Ok(heard.filter_map(move |heard| {
            let event = heard.map(|d| live_event(d, &app, viewer));
            async move {
                match event {
                    Ok(event) => event.map(Ok),
                    Err(e) => Some(Err(e.into())),
                }
            }
        }))
    }
}

/// An event as the `events` subscription sends it (`None` when what it
/// shows was gone by the time it was read).
fn live_event(d: Delivery, app: &AppState, viewer: i64) -> Option<LiveEvent> {
    let cursor = event_cursor(app, d.event.pos);
    if let Some(change) = d.tray {
        return Some(match change {
            TrayChange::Changed(entry) => {
                LiveEvent::StoryTrayEntryChanged(StoryTrayEntryChangedEvent {
                    cursor,
                    entry: StoryTrayEntry::from(entry),
                })
            }
            TrayChange::Removed { author } => {
                LiveEvent::StoryTrayEntryRemoved(StoryTrayEntryRemovedEvent {
                    cursor,
                    entry_id: tray_entry_id(Some(viewer).filter(|&v| v != 0), author),
                    author_id: id(IdKind::User, author),
                })
            }
        });
    }
    let author_id = id(IdKind::User, d.event.author);
    Some(match d.event.kind {
        Kind::StatusCreated => LiveEvent::StatusCreated(StatusCreatedEvent {
            cursor,
            status: Status(d.status?),
        }),
        Kind::StatusSeen => LiveEvent::StatusSeen(StatusSeenEvent {
            cursor,
            status: Status(d.status?),
        }),
        Kind::StatusDeleted => LiveEvent::StatusDeleted(StatusDeletedEvent {
            cursor,
            status_id: id(IdKind::Status, d.event.subject),
            author_id,
        }),
        Kind::MomentCreated => LiveEvent::MomentCreated(MomentCreatedEvent {
            cursor,
            moment: Moment(d.moment?),
        }),
        Kind::MomentRestored => LiveEvent::MomentRestored(MomentRestoredEvent {
            cursor,
            moment: Moment(d.moment?),
        }),
        Kind::MomentDeleted => LiveEvent::MomentDeleted(MomentDeletedEvent {
            cursor,
            moment_id: id(IdKind::Moment, d.event.subject),
            author_id,
        }),
        Kind::AuthorGone => LiveEvent::AuthorGone(AuthorGoneEvent { cursor, author_id }),
        Kind::FriendshipChanged => LiveEvent::FriendshipChanged(FriendshipChangedEvent {
            cursor,
            user_id: d.event.subject,
        }),
        // Told by its tray part alone (above).
        Kind::TrayChanged => return None,
    })
}

/// What the viewer hears of after `after` (or from now) in `scope`, in
/// order; an error ends the stream (a client resumes from its last cursor).
fn hear(
    ctx: &Context<'_>,
    scope: Option<Scope>,
    after: Option<Pos>,
    trays: bool,
) -> Result<impl Stream<Item = AppResult<Delivery>> + use<>> {
    let app = app(ctx)?;
    let scope = DomainScope::from(scope);
    let viewer = viewer(ctx).id();
    if scope == DomainScope::Friends && viewer.is_none() {
        return Err(AppError::sign_in_required().into());
    }
    // Catch-up turns are per client: its address, else its account.
    let client = match ctx.data_opt::<ClientAddr>() {
        Some(ClientAddr(ip)) => ip.to_string(),
        None => format!("account:{}", viewer.unwrap_or(0)),
    };
    let deliveries = app.events.follow(
        app.log_db.clone(),
        viewer.unwrap_or(0),
        &client,
        after,
        app.config.ws.event_page,
        trays,
    );
    Ok(deliveries.filter_map(move |d| {
        let kept = match d {
            Ok(d) => live::for_scope(scope, d).map(Ok),
            Err(e) => Some(Err(e)),
        };
        async move { kept }
    }))
}

/// The cursor of one part of a change-log event: a list of its own for the
/// tray part, so that both parts of one event resume apart.
fn event_cursor(app: &AppState, pos: Pos) -> String {
    let kind = if pos.part == Pos::TRAY {
        CursorKind::TrayEvent
    } else {
        CursorKind::Event
    };
    app.cursors.encode(
        List(kind, 0),
        Key {
            ts: pos.tx,
            id: pos.seq,
        },
    )
}

/// The position an event cursor names ([`event_cursor`]).
fn decode_event_cursor(app: &AppState, cursor: &str) -> AppResult<Pos> {
    let (key, part) = match app.cursors.decode(List(CursorKind::Event, 0), cursor) {
        Ok(key) => (key, Pos::EVENT),
        Err(e) => match app.cursors.decode(List(CursorKind::TrayEvent, 0), cursor) {
            Ok(key) => (key, Pos::TRAY),
            Err(_) => return Err(e),
        },
    };
    Ok(Pos {
        tx: key.ts,
        seq: key.id,
        part,
    })
}
