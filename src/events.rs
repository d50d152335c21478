//! The event bus behind subscriptions. In-process for now: a bounded
//! broadcast channel, so a slow subscriber skips events it could not take in
//! time instead of holding up the publisher or the other subscribers, and
//! memory stays bounded. Everything goes through [`EventBus`], so a
//! cross-instance transport can replace the channel without touching callers.

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use tokio::sync::{OnceCell, broadcast};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::entity::status;
use crate::error::AppResult;

/// Something subscribers hear about.
#[derive(Clone, Debug)]
pub enum Event {
    StatusCreated(Arc<StatusCreated>),
}

/// A status just posted, and its author's friends, looked up once for all
/// the subscribers that ask (`statusCreated(scope: FRIENDS)`): one query per
/// status, however many subscribers there are.
#[derive(Debug)]
pub struct StatusCreated {
    pub status: Arc<status::Model>,
    author_friends: OnceCell<HashSet<i64>>,
}

impl StatusCreated {
    pub fn new(status: status::Model) -> Self {
        Self {
            status: Arc::new(status),
            author_friends: OnceCell::new(),
        }
    }

    /// The author's accepted friends: loaded by `load` for the first
    /// subscriber that asks (the others wait for it), kept for the rest. A
    /// failed load is not kept; the next subscriber tries again.
    pub async fn author_friends<F>(&self, load: impl FnOnce() -> F) -> AppResult<&HashSet<i64>>
    where
        F: Future<Output = AppResult<HashSet<i64>>>,
    {
        self.author_friends.get_or_try_init(load).await
    }
}

/// Sessions that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// One session (signed out).
    Session(i64),
    /// Every session of a user (signed out everywhere, password changed,
    /// account deleted).
    User(i64),
}

/// Publishes events to every subscriber.
#[derive(Clone, Debug)]
pub struct EventBus {
    sender: broadcast::Sender<Event>,
    /// Sessions that ended, for the open websockets that stand on them.
    ended: broadcast::Sender<Ended>,
}

impl EventBus {
    /// A bus that buffers up to `capacity` events for each subscriber.
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        let (ended, _) = broadcast::channel(1024);
        Self { sender, ended }
    }

    /// Tells this instance's open websockets that sessions are over.
    pub fn end(&self, ended: Ended) {
        let _ = self.ended.send(ended);
    }

    /// Sessions ended from now on.
    pub fn ended(&self) -> broadcast::Receiver<Ended> {
        self.ended.subscribe()
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
        Event::StatusCreated(Arc::new(StatusCreated::new(status::Model {
            id,
            author_id: 1,
            media_id: None,
            caption: Some("x".into()),
            bg_color: None,
            created_at: 0,
            expires_at: 1,
        })))
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
            assert_eq!(s.status.id, i);
        }
        // The stalled one kept only the newest few; it skips the rest.
        let ids: Vec<i64> = {
            drop(bus);
            stalled
                .map(|Event::StatusCreated(s)| s.status.id)
                .collect::<Vec<_>>()
                .await
        };
        assert_eq!(ids, vec![996, 997, 998, 999]);
    }
}
