//! The event bus behind subscriptions. In-process for now: a bounded
//! broadcast channel, so a slow subscriber skips events it could not take in
//! time instead of holding up the publisher or the other subscribers, and
//! memory stays bounded. Everything goes through [`EventBus`], so a
//! cross-instance transport can replace the channel without touching callers.

use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::entity::status;

/// Something subscribers hear about.
#[derive(Clone, Debug)]
pub enum Event {
    StatusCreated(Arc<status::Model>),
}

/// Publishes events to every subscriber.
#[derive(Clone, Debug)]
pub struct EventBus {
    sender: broadcast::Sender<Event>,
}

impl EventBus {
    /// A bus that buffers up to `capacity` events for each subscriber.
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        Self { sender }
    }

    /// Sends an event to everyone subscribed now. Never blocks.
    pub fn publish(&self, event: Event) {
        // An error only means nobody is listening.
        let _ = self.sender.send(event);
    }

    /// Every event from now on. A subscriber that falls more than the buffer
    /// behind skips the oldest events and is told so in the log.
    pub fn subscribe(&self) -> impl Stream<Item = Event> + Send + use<> {
        BroadcastStream::new(self.sender.subscribe()).filter_map(|item| async move {
            match item {
                Ok(event) => Some(event),
                Err(BroadcastStreamRecvError::Lagged(skipped)) => {
                    tracing::warn!(skipped, "slow subscriber skipped events");
                    None
                }
            }
        })
    }

    /// How many subscribers are connected.
    pub fn subscribers(&self) -> usize {
        self.sender.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::status;

    fn event(id: i64) -> Event {
        Event::StatusCreated(Arc::new(status::Model {
            id,
            author_id: 1,
            media_id: None,
            caption: Some("x".into()),
            bg_color: None,
            created_at: 0,
            expires_at: 1,
        }))
    }

    #[tokio::test]
    async fn a_stalled_subscriber_holds_a_bounded_backlog() {
        let bus = EventBus::new(4);
        let stalled = bus.subscribe();
        let mut live = Box::pin(bus.subscribe());
        for i in 0..1000 {
            // Publishing never waits for anyone.
            bus.publish(event(i));
            let Some(Event::StatusCreated(s)) = live.next().await else {
                panic!("live subscriber missed an event");
            };
            assert_eq!(s.id, i);
        }
        // The stalled one kept only the newest few; it skips the rest.
        let ids: Vec<i64> = {
            drop(bus);
            stalled
                .map(|Event::StatusCreated(s)| s.id)
                .collect::<Vec<_>>()
                .await
        };
        assert_eq!(ids, vec![996, 997, 998, 999]);
    }
}
