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
