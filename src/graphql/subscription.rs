//! Subscription fields: `statusCreated`, fed by the event bus.
//!
//! Whom an event is for is decided by the domain's rule
//! (`domain::status::admitted`, the rule every query uses), once per event
//! for all the viewers subscribed on this instance.

use async_graphql::{Context, Result, Subscription};
use futures_util::{Stream, StreamExt};

use super::types::{Scope, Status};
use super::{app, viewer};
use crate::domain::{Scope as DomainScope, status};
use crate::error::AppError;
use crate::events::Event;

/// The subscription root.
#[derive(Default)]
pub struct SubscriptionRoot;

#[Subscription(name = "Subscription")]
impl SubscriptionRoot {
    /// Each new status the subscriber may see, as it is posted, from whichever server instance took it. The same rules as the tray: its audience, blocks, hidden stories and mutes.
    async fn status_created(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "Some(Scope::Everyone)")] scope: Option<Scope>,
    ) -> Result<impl Stream<Item = Status> + use<>> {
        let app = app(ctx)?.clone();
        let scope = DomainScope::from(scope);
        let viewer = viewer(ctx).id();
        if scope == DomainScope::Friends && viewer.is_none() {
            return Err(AppError::sign_in_required().into());
        }
        let me = viewer.unwrap_or(0);
        let events = app.events.subscribe();
        let watching = app.events.watchers.watch(me);
        Ok(events.filter_map(move |event| {
            let app = app.clone();
            // Held as long as the stream: this viewer counts as subscribed.
            let _ = &watching;
            async move {
                let Event::StatusCreated(created) = event;
                let id = created.status.id;
                let now = app.clock.now();
                let verdicts = created
                    .verdicts(|| async {
                        let viewers = app.events.watchers.viewers();
                        let admitted = status::admitted(&app.db, id, &viewers, now).await?;
                        Ok(viewers
                            .into_iter()
                            .map(|v| (v, admitted.get(&v).copied()))
                            .collect())
                    })
                    .await;
                let verdict = match verdicts.map(|v| v.get(&me).copied()) {
                    Ok(Some(verdict)) => verdict,
                    // Subscribed after the verdicts were made: asked alone.
                    Ok(None) => status::admitted(&app.db, id, &[me], now)
                        .await
                        .ok()?
                        .get(&me)
                        .copied(),
                    Err(e) => {
                        e.log();
                        None
                    }
                }?;
                (scope == DomainScope::Everyone || verdict).then(|| Status(created.status.clone()))
            }
        }))
    }
}
