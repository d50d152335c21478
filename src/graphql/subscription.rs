//! Subscription fields: `statusCreated` (live) and `events` (resumable),
//! both fed by the change log (`events`), so a subscriber hears of changes
//! made through any instance.
//!
//! Whom an event is for is decided by the domain (`domain::live`, built on
//! the rules every query uses), once per batch for all the viewers
//! subscribed on this instance; a subscriber that joined after that, or
//! that is catching up from the log, is decided for alone.

use std::sync::Arc;

use async_graphql::{Context, Result, Subscription};
use futures_util::{Stream, StreamExt, stream};

use super::types::{
    LiveEvent, Moment, MomentCreatedEvent, MomentDeletedEvent, MomentRestoredEvent, Scope, Status,
    StatusCreatedEvent, StatusDeletedEvent, StatusSeenEvent, id,
};
use super::{app, viewer};
use crate::cursor::{CursorKind, Key, List};
use crate::domain::{Scope as DomainScope, live};
use crate::entity::{moment, status};
use crate::error::{AppError, AppResult};
use crate::events::{Admitted, Batch, Kind, LogEvent, Pos, log};
use crate::state::AppState;

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
        let heard = hear(ctx, scope, None).await?;
        Ok(heard.filter_map(|heard| async move {
            match heard {
                Ok(Heard {
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

    /// Everything a live story tray and feed need, from whichever instance took it, in order and once each: statuses created, deleted or purged; the viewer's own seen marks (so devices agree); moments created, deleted or expired, restored. The same visibility rules as every query. Each event has a `cursor`: pass the last one seen as `after` to receive, in order, everything missed since, then live events. A cursor older than what is kept (`EPHEMERA_EVENT_RETENTION`, 24 hours by default) is refused with `CURSOR_EXPIRED`: refetch, then subscribe without it. FRIENDS keeps the viewer's own and their friends' (sign-in required).
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
                let key = app.cursors.decode(List(CursorKind::Event, 0), &cursor)?;
                let pos = Pos {
                    tx: key.ts,
                    seq: key.id,
                };
                if log::pruned(&app.log_db).await? > pos {
                    return Err(AppError::cursor_expired().into());
                }
                Some(pos)
            }
            None => None,
        };
        let heard = hear(ctx, scope, after).await?;
        Ok(heard.filter_map(move |heard| {
            let app = app.clone();
            async move {
                match heard {
                    Ok(heard) => heard.into_event(&app).map(Ok),
                    Err(e) => Some(Err(e.into())),
                }
            }
        }))
    }
}

/// An event a subscriber hears of, with what it shows.
struct Heard {
    event: LogEvent,
    status: Option<Arc<status::Model>>,
    moment: Option<Arc<moment::Model>>,
}

impl Heard {
    fn into_event(self, app: &AppState) -> Option<LiveEvent> {
        let Pos { tx, seq } = self.event.pos;
        let cursor = app
            .cursors
            .encode(List(CursorKind::Event, 0), Key { ts: tx, id: seq });
        let subject = id(self.event.subject);
        let author_id = id(self.event.author);
        Some(match self.event.kind {
            Kind::StatusCreated => LiveEvent::StatusCreated(StatusCreatedEvent {
                cursor,
                status: Status(self.status?),
            }),
            Kind::StatusSeen => LiveEvent::StatusSeen(StatusSeenEvent {
                cursor,
                status: Status(self.status?),
            }),
            Kind::StatusDeleted => LiveEvent::StatusDeleted(StatusDeletedEvent {
                cursor,
                status_id: subject,
                author_id,
            }),
            Kind::MomentCreated => LiveEvent::MomentCreated(MomentCreatedEvent {
                cursor,
                moment: Moment(self.moment?),
            }),
            Kind::MomentRestored => LiveEvent::MomentRestored(MomentRestoredEvent {
                cursor,
                moment: Moment(self.moment?),
            }),
            Kind::MomentDeleted => LiveEvent::MomentDeleted(MomentDeletedEvent {
                cursor,
                moment_id: subject,
                author_id,
            }),
        })
    }
}

/// The events after `after` (or from now) that the viewer hears of in
/// `scope`, in order; an error ends the stream (a client resumes from its
/// last cursor).
async fn hear(
    ctx: &Context<'_>,
    scope: Option<Scope>,
    after: Option<Pos>,
) -> Result<impl Stream<Item = AppResult<Heard>> + use<>> {
    let app = app(ctx)?.clone();
    let scope = DomainScope::from(scope);
    let viewer = viewer(ctx).id();
    if scope == DomainScope::Friends && viewer.is_none() {
        return Err(AppError::sign_in_required().into());
    }
    let me = viewer.unwrap_or(0);
    let watching = app.events.watchers.watch(me);
    let batches = app
        .events
        .follow(app.log_db.clone(), after, app.config.ws.event_page);
    Ok(batches
        .then(move |batch| {
            let app = app.clone();
            // Held as long as the stream: this viewer counts as subscribed.
            let _ = &watching;
            async move {
                let heard = match batch {
                    Ok(batch) => admitted_to(&app, &batch, me, scope).await,
                    Err(e) => Err(e),
                };
                match heard {
                    Ok(heard) => stream::iter(heard.into_iter().map(Ok)).left_stream(),
                    Err(e) => stream::iter([Err(e)]).right_stream(),
                }
            }
        })
        .flatten()
        .scan(false, |failed, item| {
            // Nothing after an error: the client resumes from its cursor.
            let out = (!*failed).then_some(item);
            if matches!(out, Some(Err(_))) {
                *failed = true;
            }
            async move { out }
        }))
}

/// The events of `batch` that `me` hears of in `scope`: decided once for
/// everyone subscribed here, or for `me` alone if they were not among them.
async fn admitted_to(
    app: &AppState,
    batch: &Batch,
    me: i64,
    scope: DomainScope,
) -> AppResult<Vec<Heard>> {
    let now = app.clock.now();
    let shared = if batch.is_shared() {
        let shared = batch
            .admitted(|| async {
                let viewers = app.events.watchers.viewers();
                live::admit(&app.db, &batch.events, viewers, now).await
            })
            .await?;
        shared.asked.contains(&me).then_some(shared)
    } else {
        None
    };
    let alone;
    let admitted: &Admitted = match shared {
        Some(shared) => shared,
        None => {
            // Work for this subscriber alone takes its turn.
            let _turn = app.events.solo.acquire().await;
            let me_alone = Arc::new(std::collections::HashSet::from([me]));
            alone = live::admit(&app.db, &batch.events, me_alone, now).await?;
            &alone
        }
    };
    let mine = admitted.by_viewer.get(&me).map_or(&[][..], Vec::as_slice);
    Ok(mine
        .iter()
        .filter(|&&(_, in_friends)| live::in_scope(scope, in_friends))
        .filter_map(|&(i, _)| batch.events.get(i))
        .map(|event| Heard {
            event: event.clone(),
            status: admitted.statuses.get(&event.subject).cloned(),
            moment: admitted.moments.get(&event.subject).cloned(),
        })
        .collect())
}
