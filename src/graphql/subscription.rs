//! Subscription fields: `statusCreated`, fed by the event bus.

use async_graphql::{Context, Result, Subscription};
use futures_util::{Stream, StreamExt};

use super::types::{Scope, Status};
use super::{app, viewer};
use crate::domain::{Scope as DomainScope, friend};
use crate::error::AppError;
use crate::events::Event;

/// The subscription root.
#[derive(Default)]
pub struct SubscriptionRoot;

#[Subscription(name = "Subscription")]
impl SubscriptionRoot {
    /// Each new status the subscriber may see, as it is posted, from whichever server instance took it.
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
        let events = app.events.subscribe();
        Ok(events.filter_map(move |event| {
            let app = app.clone();
            async move {
                let Event::StatusCreated(created) = event;
                let author = created.status.author_id;
                let admitted = match (scope, viewer) {
                    (DomainScope::Friends, Some(v)) => {
                        author == v
                            || created
                                .author_friends(|| friend::friend_ids(&app.db, author))
                                .await
                                .is_ok_and(|friends| friends.contains(&v))
                    }
                    _ => true,
                };
                admitted.then(|| Status(created.status.clone()))
            }
        }))
    }
}
