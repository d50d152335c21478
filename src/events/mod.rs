//! The change log behind subscriptions, and the bus that fans it out on
//! this instance.
//!
//! Every change a subscriber may hear of (a status created, deleted or
//! purged, seen by its viewer; a moment created, deleted, expired or
//! restored) is written into the `events` table in the transaction that
//! makes it ([`log::record`]), whichever instance took it. One reader per
//! instance ([`EventBus::run_reader`]) polls the table for what became
//! final after the last position it read (an index probe per poll, a few
//! per second; a local write wakes it at once) and publishes each page as
//! one [`Batch`] on a bounded broadcast channel. A subscriber follows the
//! bus from a position ([`EventBus::follow`]): it first catches up from the
//! table, then takes live batches; one that falls more than the channel's
//! buffer behind catches up from the table again instead of skipping, so it
//! sees every event once, in order, and its memory is one position. On
//! SQLite (one instance) the same code runs on the same table.
//!
//! Whom an event is for is not decided here: [`Batch::admitted`] keeps what
//! the domain's visibility rules decided for the viewers subscribed here,
//! computed once per batch by the first subscriber that asks.

pub mod log;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use sea_orm::DatabaseConnection;
use tokio::sync::{Notify, OnceCell, Semaphore, broadcast, watch};

use crate::entity::{moment, status};
use crate::error::{AppError, AppResult};

/// A position in the change log: events are ordered by `(tx, seq)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub tx: i64,
    pub seq: i64,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    StatusCreated,
    /// Deleted by its author or a moderator, or purged when it expired.
    StatusDeleted,
    /// The event's viewer marked it seen (theirs alone).
    StatusSeen,
    MomentCreated,
    /// Deleted by its author or a moderator, or expired.
    MomentDeleted,
    MomentRestored,
}

impl Kind {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::StatusCreated => "STATUS_CREATED",
            Kind::StatusDeleted => "STATUS_DELETED",
            Kind::StatusSeen => "STATUS_SEEN",
            Kind::MomentCreated => "MOMENT_CREATED",
            Kind::MomentDeleted => "MOMENT_DELETED",
            Kind::MomentRestored => "MOMENT_RESTORED",
        }
    }

    /// From the stored form (an unknown one reads as a deletion of a status,
    /// which shows nothing that was not shown before).
    pub fn from_stored(s: &str) -> Self {
        match s {
            "STATUS_CREATED" => Kind::StatusCreated,
            "STATUS_SEEN" => Kind::StatusSeen,
            "MOMENT_CREATED" => Kind::MomentCreated,
            "MOMENT_DELETED" => Kind::MomentDeleted,
            "MOMENT_RESTORED" => Kind::MomentRestored,
            _ => Kind::StatusDeleted,
        }
    }

    /// Whether its subject is a moment (else a status).
    pub fn is_moment(self) -> bool {
        matches!(
            self,
            Kind::MomentCreated | Kind::MomentDeleted | Kind::MomentRestored
        )
    }
}

/// One event read from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEvent {
    pub pos: Pos,
    pub kind: Kind,
    /// The status or moment.
    pub subject: i64,
    pub author: i64,
    /// The status's audience or the moment's visibility when it happened.
    pub audience: String,
    /// With [`Kind::StatusSeen`]: whose seen state changed.
    pub viewer: Option<i64>,
}

/// What the domain decided about a batch for some viewers (0: anonymous).
#[derive(Debug, Default)]
pub struct Admitted {
    /// The viewers it was decided for (shared between batches while the
    /// subscribers do not change).
    pub asked: Arc<HashSet<i64>>,
    /// Per viewer who hears of something: the events of the batch (their
    /// index, in order) they hear of, each with whether the author is the
    /// viewer or a friend (what a `FRIENDS` scope keeps). One look-up per
    /// subscriber per batch.
    pub by_viewer: HashMap<i64, Vec<(usize, bool)>>,
    /// The statuses and moments the events show, read once for everyone.
    pub statuses: HashMap<i64, Arc<status::Model>>,
    pub moments: HashMap<i64, Arc<moment::Model>>,
}

/// Consecutive events of the log: published together to every subscriber
/// of the instance, or read for one subscriber alone.
#[derive(Debug)]
pub struct Batch {
    pub events: Vec<LogEvent>,
    shared: bool,
    admitted: OnceCell<Admitted>,
}

impl Batch {
    /// A batch the reader publishes to everyone.
    pub fn new(events: Vec<LogEvent>) -> Self {
        Self {
            events,
            shared: true,
            admitted: OnceCell::new(),
        }
    }

    /// A batch for one subscriber (caught up from the log, or the part of
    /// a published one it had not had yet).
    pub fn private(events: Vec<LogEvent>) -> Self {
        Self {
            shared: false,
            ..Self::new(events)
        }
    }

    /// Whether every subscriber of the instance gets this batch (so whom
    /// it is for is worth deciding for all of them at once).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The last position in the batch.
    pub fn last(&self) -> Option<Pos> {
        self.events.last().map(|e| e.pos)
    }

    /// Whom the batch is for: decided by `decide` for the first subscriber
    /// that asks (the others wait for it) and kept for the rest. A failed
    /// decision is not kept; the next subscriber tries again.
    pub async fn admitted<F>(&self, decide: impl FnOnce() -> F) -> AppResult<&Admitted>
    where
        F: Future<Output = AppResult<Admitted>>,
    {
        self.admitted.get_or_try_init(decide).await
    }
}

/// Which viewers (0: anonymous) are subscribed on this instance, and how
/// many subscriptions each holds.
#[derive(Clone, Debug, Default)]
pub struct Watchers(Arc<Mutex<Watched>>);

#[derive(Debug, Default)]
struct Watched {
    counts: HashMap<i64, usize>,
    /// The set of viewers, made once after each change.
    set: Option<Arc<HashSet<i64>>>,
}

impl Watchers {
    /// Counts a subscription of `viewer` until the returned guard drops.
    pub fn watch(&self, viewer: i64) -> Watching {
        if let Ok(mut w) = self.0.lock() {
            *w.counts.entry(viewer).or_default() += 1;
            w.set = None;
        }
        Watching {
            watchers: self.clone(),
            viewer,
        }
    }

    /// The viewers subscribed now.
    pub fn viewers(&self) -> Arc<HashSet<i64>> {
        let Ok(mut w) = self.0.lock() else {
            return Arc::default();
        };
        if w.set.is_none() {
            w.set = Some(Arc::new(w.counts.keys().copied().collect()));
        }
        w.set.clone().unwrap_or_default()
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
            && let Some(n) = w.counts.get_mut(&self.viewer)
        {
            *n -= 1;
            if *n == 0 {
                w.counts.remove(&self.viewer);
                w.set = None;
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

/// The least time between two reads woken by local writes.
const WAKE_GAP: Duration = Duration::from_millis(10);

/// How the reader reads (see [`EventBus::run_reader`]).
#[derive(Clone, Copy, Debug)]
pub struct ReaderSettings {
    /// How often it looks for events written by other instances.
    pub poll: Duration,
    /// Events read (and published) at most at once.
    pub page: u32,
}

/// Fans the change log out to this instance's subscribers.
#[derive(Clone, Debug)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<Batch>>,
    /// The last position the reader published.
    published: watch::Sender<Option<Pos>>,
    /// Wakes the reader before its next poll (a change was written here).
    wake: Arc<Notify>,
    /// Sessions that ended, for the open websockets that stand on them.
    ended: broadcast::Sender<Ended>,
    /// Who is subscribed.
    pub watchers: Watchers,
    /// Bounds the work done for one subscriber alone (a page caught up from
    /// the log, and deciding whom it is for): a thousand clients resuming
    /// at once take turns here instead of taking every connection.
    pub solo: Arc<Semaphore>,
}

/// Pages of work done for single subscribers at once (see [`EventBus::solo`]).
const SOLO: usize = 4;

impl EventBus {
    /// A bus that buffers up to `capacity` batches for each subscriber.
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        let (ended, _) = broadcast::channel(1024);
        Self {
            sender,
            published: watch::Sender::new(None),
            wake: Arc::new(Notify::new()),
            ended,
            watchers: Watchers::default(),
            solo: Arc::new(Semaphore::new(SOLO)),
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

    /// Says that a change was just committed here, so the reader looks now
    /// rather than at its next poll. Never blocks.
    pub fn written(&self) {
        self.wake.notify_one();
    }

    /// How many subscribers are connected.
    pub fn subscribers(&self) -> usize {
        self.sender.receiver_count()
    }

    /// The last position the reader published (`None` before its first
    /// read).
    pub fn published(&self) -> Option<Pos> {
        *self.published.borrow()
    }

    /// Publishes a batch to everyone following now. Never blocks.
    fn publish(&self, batch: Batch) {
        if let Some(last) = batch.last() {
            // An error only means nobody is listening.
            let _ = self.sender.send(Arc::new(batch));
            self.published.send_replace(Some(last));
        }
    }

    /// The reader: from the end of the log as it stands, reads what became
    /// final, page by page, and publishes it; sleeps `poll` (or until a
    /// local write wakes it) when there is nothing more. A failed read is
    /// logged and tried again at the next poll. Runs until `stop` turns true.
    pub async fn run_reader(
        self,
        db: DatabaseConnection,
        settings: ReaderSettings,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut last = None;
        while !*stop.borrow() {
            let read = async {
                let after = match last {
                    Some(p) => p,
                    None => log::end(&db).await?,
                };
                last = Some(after);
                log::read_after(&db, after, settings.page).await
            };
            let mut full = false;
            match read.await {
                Ok(events) => {
                    full = events.len() >= settings.page as usize;
                    if let Some(pos) = events.last().map(|e| e.pos) {
                        last = Some(pos);
                        self.publish(Batch::new(events));
                    } else if self.published().is_none() {
                        self.published.send_replace(last);
                    }
                }
                Err(e) => {
                    e.log();
                    tracing::warn!("reading the change log failed; trying again");
                }
            }
            if full {
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(settings.poll) => {}
                () = self.wake.notified() => {
                    // Writes close together are read together: at most one
                    // read per gap however many statuses are posted.
                    tokio::time::sleep(settings.poll.min(WAKE_GAP)).await;
                }
                _ = stop.changed() => {}
            }
        }
    }

    /// Every event after `after` (or, without one, after the reader's
    /// position now), in order and once each, in batches: first those
    /// already in the log (read from the table), then live ones. Falling
    /// behind the bus's buffer costs a read from the table, never an event.
    /// Ends with `CURSOR_EXPIRED` if events it still had to deliver were
    /// pruned.
    pub fn follow(
        &self,
        db: DatabaseConnection,
        after: Option<Pos>,
        page: u32,
    ) -> impl Stream<Item = AppResult<Arc<Batch>>> + Send + use<> {
        let mut live = self.sender.subscribe();
        // Read after subscribing: nothing published from here on is missed.
        let start = after.or_else(|| self.published());
        let solo = self.solo.clone();
        async_stream::stream! {
            let mut last = start;
            let mut behind = after.is_some();
            'follow: loop {
                // Page by page from the table: memory stays one page.
                while behind {
                    let Some(from) = last else { break 'follow };
                    let turn = solo.acquire().await;
                    let read = catch_up_page(&db, from, page).await;
                    drop(turn);
                    match read {
                        Ok((batch, more)) => {
                            behind = more;
                            if let Some(batch) = batch {
                                last = batch.last();
                                yield Ok(Arc::new(batch));
                            }
                        }
                        Err(e) => {
                            yield Err(e);
                            break 'follow;
                        }
                    }
                }
                match live.recv().await {
                    Ok(batch) => {
                        let Some(end) = batch.last() else { continue };
                        match last {
                            // Already delivered (read from the table).
                            Some(l) if end <= l => continue,
                            Some(l) if batch.events[0].pos <= l => {
                                let rest = batch.events.iter().filter(|e| e.pos > l).cloned().collect();
                                last = Some(end);
                                yield Ok(Arc::new(Batch::private(rest)));
                            }
                            _ => {
                                last = Some(end);
                                yield Ok(batch);
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(skipped)) => {
                        tracing::debug!(skipped, "a slow subscriber catches up from the log");
                        behind = true;
                        if last.is_none() {
                            // Nothing delivered yet: from where the reader started.
                            match log::end(&db).await {
                                Ok(end) => last = Some(end),
                                Err(e) => {
                                    yield Err(e);
                                    break 'follow;
                                }
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        }
    }
}

/// One page of the final events after `from` (`None` when there are none)
/// and whether there may be more; `CURSOR_EXPIRED` if events after `from`
/// were pruned (before or while reading).
async fn catch_up_page(
    db: &DatabaseConnection,
    from: Pos,
    page: u32,
) -> AppResult<(Option<Batch>, bool)> {
    let events = log::read_after(db, from, page).await?;
    if log::pruned(db).await? > from {
        return Err(AppError::cursor_expired());
    }
    let more = events.len() >= page as usize;
    Ok(((!events.is_empty()).then(|| Batch::private(events)), more))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_count_subscriptions() {
        let w = Watchers::default();
        let a = w.watch(5);
        let b = w.watch(5);
        let c = w.watch(0);
        let mut v: Vec<i64> = w.viewers().iter().copied().collect();
        v.sort_unstable();
        assert_eq!(v, vec![0, 5]);
        let same = w.viewers();
        assert!(Arc::ptr_eq(&same, &w.viewers()), "made once per change");
        drop(a);
        drop(c);
        assert_eq!(*w.viewers(), HashSet::from([5]));
        drop(b);
        assert!(w.viewers().is_empty());
    }

    #[test]
    fn positions_order_by_transaction_then_sequence() {
        let p = |tx, seq| Pos { tx, seq };
        assert!(p(1, 9) < p(2, 1));
        assert!(p(2, 1) < p(2, 3));
        for k in [
            Kind::StatusCreated,
            Kind::StatusDeleted,
            Kind::StatusSeen,
            Kind::MomentCreated,
            Kind::MomentDeleted,
            Kind::MomentRestored,
        ] {
            assert_eq!(Kind::from_stored(k.as_str()), k);
        }
        assert!(Kind::MomentRestored.is_moment() && !Kind::StatusSeen.is_moment());
    }
}
