//! The event bus behind subscriptions. In-process for now: a bounded
//! broadcast channel, so a slow subscriber skips events it could not take in
//! time instead of holding up the publisher or the other subscribers, and
//! memory stays bounded. Everything goes through [`EventBus`], so a
//! cross-instance transport can replace the channel without touching callers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

/// For each viewer asked, whether a status is for them: `None` if they may
/// not see it, `Some(in_friends)` if they may (`in_friends`: the author is
/// the viewer or a friend, what a `FRIENDS` scope keeps).
pub type Verdicts = HashMap<i64, Option<bool>>;

/// A status just posted, and whom it is for among the viewers subscribed
/// when the first subscriber asks: decided once for all of them (a few
/// statements per status, however many subscribers there are).
#[derive(Debug)]
pub struct StatusCreated {
    pub status: Arc<status::Model>,
    verdicts: OnceCell<Verdicts>,
}

impl StatusCreated {
    pub fn new(status: status::Model) -> Self {
        Self {
            status: Arc::new(status),
            verdicts: OnceCell::new(),
        }
    }

    /// The verdicts: loaded by `load` for the first subscriber that asks
    /// (the others wait for it), kept for the rest. A failed load is not
    /// kept; the next subscriber tries again. A viewer who subscribed after
    /// they were loaded is not in them.
    pub async fn verdicts<F>(&self, load: impl FnOnce() -> F) -> AppResult<&Verdicts>
    where
        F: Future<Output = AppResult<Verdicts>>,
    {
        self.verdicts.get_or_try_init(load).await
    }
}

/// Which viewers (0: anonymous) are subscribed on this instance, and how
/// many subscriptions each holds.
#[derive(Clone, Debug, Default)]
pub struct Watchers(Arc<Mutex<HashMap<i64, usize>>>);

impl Watchers {
    /// Counts a subscription of `viewer` until the returned guard drops.
    pub fn watch(&self, viewer: i64) -> Watching {
        if let Ok(mut w) = self.0.lock() {
            *w.entry(viewer).or_default() += 1;
        }
        Watching {
            watchers: self.clone(),
            viewer,
        }
    }

    /// The viewers subscribed now.
    pub fn viewers(&self) -> Vec<i64> {
        self.0
            .lock()
            .map(|w| w.keys().copied().collect())
            .unwrap_or_default()
    }
}

/// One subscription's place among the [`Watchers`].
#[derive(Debug)]
pub struct Watching {
    watchers: Watchers,
    viewer: i64,
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Ok(mut w) = self.watchers.0.lock()
            && let Some(n) = w.get_mut(&self.viewer)
        {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.viewer);
            }
        }
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
    /// Who is subscribed.
    pub watchers: Watchers,
}

impl EventBus {
    /// A bus that buffers up to `capacity` events for each subscriber.
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        let (ended, _) = broadcast::channel(1024);
        Self {
            sender,
            ended,
            watchers: Watchers::default(),
        }
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
            audience: "PUBLIC".into(),
        })))
    }

    #[test]
    fn watchers_count_subscriptions() {
        let w = Watchers::default();
        let a = w.watch(5);
        let b = w.watch(5);
        let c = w.watch(0);
        let mut v = w.viewers();
        v.sort_unstable();
        assert_eq!(v, vec![0, 5]);
        drop(a);
        drop(c);
        assert_eq!(w.viewers(), vec![5]);
        drop(b);
        assert!(w.viewers().is_empty());
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
