//! The change log behind subscriptions, and the bus that fans it out on
//! this instance.
//!
//! Every change a subscriber may hear of (a status created, deleted or
//! purged, seen by its viewer; a moment created, deleted, expired or
//! restored) is written into the `events` table in the transaction that
//! makes it ([`log::record`]), whichever instance took it. One reader per
//! instance ([`EventBus::run_reader`]) polls the table for what became
//! final after the last position it read (an index probe per poll, ten a
//! second by default; a local write wakes it, to read at most once per
//! 100 ms or per poll, whichever is shorter, so that writes close together
//! are read, and decided, together). For each page it asks the
//! domain's rules once whom each event is for among the viewers subscribed
//! here (the [`Decide`] the wiring gives it), then hands each subscription
//! only what is for it, on a bounded channel of its own: a subscriber that
//! hears nothing is never woken. A subscriber follows the bus from a
//! position ([`EventBus::follow`]): it first catches up from the table,
//! then takes what the reader hands it; one whose channel is full is marked
//! behind and catches up from the table again instead of skipping, so it
//! sees every event once, in order, and its memory is its channel. On
//! SQLite (one instance) the same code runs on the same table.

pub mod log;

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::Stream;
use sea_orm::DatabaseConnection;
use tokio::sync::{Notify, Semaphore, broadcast, mpsc, watch};

use crate::entity::{moment, status};
use crate::error::{AppError, AppResult};

/// How soon after one catch-up page the same client (address, else
/// account) may read its next: ten pages (5,000 events by default) a second
/// per client, so a client resuming from a day-old cursor over many sockets
/// costs the database a bounded rate of work, and one resuming after a
/// short disconnection (one page) does not wait at all.
pub const CATCH_UP_PACE: Duration = Duration::from_millis(100);

/// A position in the change log: events are ordered by `(tx, seq)`, and
/// what one event gives a subscriber (the event itself, then the tray entry
/// it changed) by `part`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub tx: i64,
    pub seq: i64,
    pub part: u8,
}

impl Pos {
    /// The event itself.
    pub const EVENT: u8 = 0;
    /// The tray entry it changed (after the event).
    pub const TRAY: u8 = 1;
    /// The last part: at it, a subscriber has had all an event gives it
    /// (a cursor there resumes after the event; the reader's position and
    /// the pruning mark are there).
    pub const ALL: u8 = Self::TRAY;

    /// After everything of the event at `(tx, seq)`.
    pub fn after_all(tx: i64, seq: i64) -> Self {
        Self {
            tx,
            seq,
            part: Self::ALL,
        }
    }

    /// The same event's position of `part`.
    pub fn with_part(self, part: u8) -> Self {
        Self { part, ..self }
    }
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
    /// An account was deleted: everything of the author's is gone. One
    /// event per account (not one per status and moment), for everyone if
    /// the account had live public content, else one per friend
    /// (`viewer`).
    AuthorGone,
    /// How `viewer` stands with `subject` (a user) changed: a friend
    /// request sent, accepted or withdrawn, a friendship ended, a block.
    /// One event per side, each for its `viewer` alone.
    FriendshipChanged,
    /// Which of `author`'s live statuses `viewer` may see changed without
    /// a status changing (a friendship, a block, a list): that viewer's
    /// tray entry of the author is to be told again. Its `seq` is the
    /// negated viewer id (unique in its transaction).
    TrayChanged,
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
            Kind::AuthorGone => "AUTHOR_GONE",
            Kind::FriendshipChanged => "FRIENDSHIP_CHANGED",
            Kind::TrayChanged => "TRAY_CHANGED",
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
            "AUTHOR_GONE" => Kind::AuthorGone,
            "FRIENDSHIP_CHANGED" => Kind::FriendshipChanged,
            "TRAY_CHANGED" => Kind::TrayChanged,
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
    /// With [`Kind::StatusSeen`]: whose seen state changed; with
    /// [`Kind::AuthorGone`], the one viewer it is for (none: everyone);
    /// with [`Kind::FriendshipChanged`] and [`Kind::TrayChanged`], the one
    /// viewer it is for.
    pub viewer: Option<i64>,
}

/// One author's entry in one viewer's story tray, as the tray query would
/// give it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrayEntry {
    pub author: i64,
    pub latest_created_at: i64,
    /// Live statuses the viewer may see, and how many of them they have not
    /// seen.
    pub live: i64,
    pub unseen: i64,
}

/// What became of one author's entry in a viewer's tray.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrayChange {
    /// It is (now) in the tray, as this.
    Changed(TrayEntry),
    /// It is not in the tray (any more).
    Removed { author: i64 },
}

/// That a viewer hears of (part of) one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Heard {
    /// The event's index in its page.
    pub index: usize,
    /// [`Pos::EVENT`] or [`Pos::TRAY`].
    pub part: u8,
    /// Whether the author is the viewer or a friend (what a `FRIENDS`
    /// scope keeps).
    pub in_friends: bool,
}

/// What the domain decided about some events for some viewers (0:
/// anonymous).
#[derive(Debug, Default)]
pub struct Admitted {
    /// Per viewer who hears of something: what they hear of, in order.
    pub by_viewer: HashMap<i64, Vec<Heard>>,
    /// Per (viewer, event index): the tray entry a [`Pos::TRAY`] part tells.
    pub trays: HashMap<(i64, usize), TrayChange>,
    /// The statuses and moments the events show, read once for everyone.
    pub statuses: HashMap<i64, Arc<status::Model>>,
    pub moments: HashMap<i64, Arc<moment::Model>>,
    /// Per (moment, viewer): the likes of a moment shown that the viewer
    /// may not see (their likers blocked either way, or suspended), taken
    /// off its `likes_count` for that viewer, as every query does.
    pub hidden_likes: HashMap<(i64, i64), i32>,
}

/// The viewers events are decided for (0: anonymous).
#[derive(Clone, Debug, Default)]
pub struct Asked {
    pub viewers: Arc<HashSet<i64>>,
    /// Those of them with a subscription that is told tray entries
    /// (`events`; `statusCreated` is not): the tray parts are read for
    /// these alone.
    pub trays: Arc<HashSet<i64>>,
    /// Whether these are the instance's subscribers as its reader asks,
    /// page after page (what the rules may keep between pages is kept for
    /// these), not one subscriber catching up.
    pub reader: bool,
}

/// Decides whom events are for among viewers: the domain's rules, given to
/// the bus by the wiring (this layer sits below the domain).
pub type Decide = Arc<
    dyn Fn(Vec<LogEvent>, Asked) -> Pin<Box<dyn Future<Output = AppResult<Admitted>> + Send>>
        + Send
        + Sync,
>;

/// One event for one subscriber, with what it shows.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub event: LogEvent,
    /// Whether the author is the subscriber or a friend.
    pub in_friends: bool,
    pub status: Option<Arc<status::Model>>,
    pub moment: Option<Arc<moment::Model>>,
    /// For a [`Pos::TRAY`] part: the viewer's tray entry of the author.
    pub tray: Option<TrayChange>,
}

impl Admitted {
    /// What `viewer` hears of among `events`, in order.
    fn deliveries(&self, viewer: i64, events: &[LogEvent]) -> Vec<Delivery> {
        self.by_viewer
            .get(&viewer)
            .map(|mine| {
                mine.iter()
                    .filter_map(|heard| {
                        let i = heard.index;
                        let mut event = events.get(i)?.clone();
                        event.pos.part = heard.part;
                        if heard.part == Pos::TRAY {
                            return Some(Delivery {
                                in_friends: heard.in_friends,
                                status: None,
                                moment: None,
                                tray: Some(*self.trays.get(&(viewer, i))?),
                                event,
                            });
                        }
                        let moment = self.moments.get(&event.subject).map(|m| {
                            match self.hidden_likes.get(&(m.id, viewer)) {
                                Some(&hidden) => Arc::new(moment::Model {
                                    likes_count: (m.likes_count - hidden).max(0),
                                    ..(**m).clone()
                                }),
                                None => m.clone(),
                            }
                        });
                        Some(Delivery {
                            in_friends: heard.in_friends,
                            status: self.statuses.get(&event.subject).cloned(),
                            moment,
                            tray: None,
                            event,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
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

/// How the reader reads (see [`EventBus::run_reader`]).
#[derive(Clone, Copy, Debug)]
pub struct ReaderSettings {
    /// How often it looks for events written by other instances.
    pub poll: Duration,
    /// Events read (and handed out) at most at once.
    pub page: u32,
}

/// The least time between two reads woken by local writes (or the poll,
/// if shorter). Under load a read is woken again as soon as it is done, so
/// this paces the reader's pages: at 50 ms the fan-out of the live tray
/// (three instances, 10,000 subscribers) cost ephemera and PostgreSQL a
/// quarter more CPU a post than at 100 ms, in smaller pages and batches
/// (docs/benchmarks.md), for 50 ms less delay.
const WAKE_GAP: Duration = Duration::from_millis(100);

/// The deliveries (an event, or its tray part, to one viewer) a page of
/// the reader aims at: past them the next page is made smaller, in
/// proportion, so that a page's decision and hand-out stay short however
/// many subscribers each event is for. Every subscriber is told every
/// `PUBLIC` post, and a full page of them (500 posts, 3,333 subscribers on
/// an instance) was 3.3 million deliveries: over ten seconds in which that
/// instance told nobody anything.
const PAGE_DELIVERIES: usize = 10_000;

/// The size of the reader's next page, after one of `events` events that
/// made `deliveries`, at most `max`: in proportion when that page made too
/// many deliveries, else growing back (doubling) towards `max`.
fn next_page(size: u32, events: usize, deliveries: usize, max: u32) -> u32 {
    if deliveries > PAGE_DELIVERIES {
        let fit = events * PAGE_DELIVERIES / deliveries;
        u32::try_from(fit).unwrap_or(max).clamp(1, max)
    } else {
        size.saturating_mul(2).min(max)
    }
}

/// Pages of work done for single subscribers at once (see [`EventBus::solo`]).
const SOLO: usize = 4;

/// What the reader hands a subscription at once.
type Handed = Arc<Vec<Delivery>>;

/// One subscription, as the reader sees it.
#[derive(Debug)]
struct Sub {
    /// Also its place in registration order.
    id: u64,
    tx: mpsc::Sender<Handed>,
    /// Whether it is told tray entries.
    trays: bool,
    /// Set when something could not be handed to it (its channel was full):
    /// it reads the log again from where it is.
    behind: Arc<AtomicBool>,
}

/// The subscriptions of this instance, by viewer.
#[derive(Debug, Default)]
struct Registry {
    next: u64,
    by_viewer: HashMap<i64, Vec<Sub>>,
    /// The viewers, made once after each change.
    viewers: Option<Asked>,
}

/// The viewers subscribed at one moment, and the last subscription
/// registered by then.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    asked: Asked,
    upto: u64,
}

/// A subscription's place in the registry; leaves it when dropped.
#[derive(Debug)]
struct Subscribed {
    registry: Arc<Mutex<Registry>>,
    viewer: i64,
    id: u64,
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        if let Ok(mut r) = self.registry.lock()
            && let Some(subs) = r.by_viewer.get_mut(&self.viewer)
        {
            subs.retain(|s| s.id != self.id);
            if subs.is_empty() {
                r.by_viewer.remove(&self.viewer);
            }
            r.viewers = None;
        }
    }
}

/// Fans the change log out to this instance's subscribers.
#[derive(Clone)]
pub struct EventBus {
    registry: Arc<Mutex<Registry>>,
    /// Deliveries buffered per subscription.
    capacity: usize,
    /// The last position the reader handed out.
    published: watch::Sender<Option<Pos>>,
    /// Wakes the reader before its next poll (a change was written here).
    wake: Arc<Notify>,
    /// Sessions that ended, for the open websockets that stand on them.
    ended: broadcast::Sender<Ended>,
    /// Bounds the work done for one subscriber alone (a page caught up from
    /// the log, and deciding whom it is for): a thousand clients resuming
    /// at once take turns here instead of taking every connection.
    pub solo: Arc<Semaphore>,
    /// One catch-up page at a time per client (address, else account):
    /// a client with many sockets resuming at once waits behind itself,
    /// never in front of others, for [`Self::solo`].
    turns: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
    decide: Arc<OnceLock<Decide>>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("subscribers", &self.subscribers())
            .field("published", &self.published())
            .finish_non_exhaustive()
    }
}

impl EventBus {
    /// A bus that buffers up to `capacity` handed batches per subscription.
    pub fn new(capacity: usize) -> Self {
        let (ended, _) = broadcast::channel(1024);
        Self {
            registry: Arc::default(),
            capacity: capacity.max(1),
            published: watch::Sender::new(None),
            wake: Arc::new(Notify::new()),
            ended,
            solo: Arc::new(Semaphore::new(SOLO)),
            turns: Arc::default(),
            decide: Arc::default(),
        }
    }

    /// Where the reader starts: the end of the log as it stands, read before
    /// the server serves, so a subscription always has a position to start
    /// from (`follow` without a cursor starts at the reader's).
    pub async fn start_at_end(&self, db: &DatabaseConnection) -> AppResult<()> {
        let end = log::end(db).await?;
        self.published.send_replace(Some(end));
        Ok(())
    }

    /// The catch-up turn of `client`: shared by its subscriptions while
    /// any holds it (forgotten once none does).
    fn turn_of(&self, client: &str) -> Arc<Semaphore> {
        let Ok(mut turns) = self.turns.lock() else {
            return Arc::new(Semaphore::new(1));
        };
        if turns.len() >= 1024 {
            turns.retain(|_, t| Arc::strong_count(t) > 1);
        }
        turns
            .entry(client.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(1)))
            .clone()
    }

    /// Gives the bus the rules that decide whom events are for (once).
    pub fn set_decide(&self, decide: Decide) {
        let _ = self.decide.set(decide);
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

    /// How many subscriptions are open.
    pub fn subscribers(&self) -> usize {
        self.registry
            .lock()
            .map_or(0, |r| r.by_viewer.values().map(Vec::len).sum())
    }

    /// The viewers subscribed now (0: anonymous).
    pub fn viewers(&self) -> Arc<HashSet<i64>> {
        self.snapshot().asked.viewers
    }

    fn snapshot(&self) -> Snapshot {
        let Ok(mut r) = self.registry.lock() else {
            return Snapshot::default();
        };
        if r.viewers.is_none() {
            let viewers = r.by_viewer.keys().copied().collect();
            let trays = r
                .by_viewer
                .iter()
                .filter(|(_, subs)| subs.iter().any(|s| s.trays))
                .map(|(&v, _)| v)
                .collect();
            r.viewers = Some(Asked {
                viewers: Arc::new(viewers),
                trays: Arc::new(trays),
                reader: true,
            });
        }
        Snapshot {
            asked: r.viewers.clone().unwrap_or_default(),
            upto: r.next,
        }
    }

    /// The last position the reader handed out (`None` before its first
    /// read).
    pub fn published(&self) -> Option<Pos> {
        *self.published.borrow()
    }

    fn register(
        &self,
        viewer: i64,
        trays: bool,
    ) -> (Subscribed, mpsc::Receiver<Handed>, Arc<AtomicBool>) {
        let (tx, rx) = mpsc::channel(self.capacity);
        let behind = Arc::new(AtomicBool::new(false));
        let mut id = 0;
        if let Ok(mut r) = self.registry.lock() {
            r.next += 1;
            id = r.next;
            let sub = Sub {
                id,
                tx,
                trays,
                behind: behind.clone(),
            };
            r.by_viewer.entry(viewer).or_default().push(sub);
            r.viewers = None;
        }
        let subscribed = Subscribed {
            registry: self.registry.clone(),
            viewer,
            id,
        };
        (subscribed, rx, behind)
    }

    /// Hands each subscription what `admitted` says is for its viewer; one
    /// whose channel is full is marked behind instead. A subscription that
    /// registered after the viewers were taken (`upto`) may not be in the
    /// decision: it is marked behind too, and reads this page from the log.
    fn hand_out(&self, admitted: &Admitted, events: &[LogEvent], upto: u64) {
        let Ok(r) = self.registry.lock() else { return };
        for viewer in admitted.by_viewer.keys() {
            let Some(subs) = r.by_viewer.get(viewer) else {
                continue;
            };
            let handed: Handed = Arc::new(admitted.deliveries(*viewer, events));
            for s in subs {
                if s.tx.try_send(handed.clone()).is_err() {
                    s.behind.store(true, Ordering::Relaxed);
                }
            }
        }
        if r.next > upto {
            for s in r.by_viewer.values().flatten().filter(|s| s.id > upto) {
                s.behind.store(true, Ordering::Relaxed);
                let _ = s.tx.try_send(Arc::default());
            }
        }
    }

    /// Marks every subscription behind (what the reader read could not be
    /// decided) and wakes them, so each catches up from the log itself.
    fn all_behind(&self) {
        let Ok(r) = self.registry.lock() else { return };
        for s in r.by_viewer.values().flatten() {
            s.behind.store(true, Ordering::Relaxed);
            let _ = s.tx.try_send(Arc::default());
        }
    }

    /// The reader: from the end of the log as it stands, reads what became
    /// final, page by page, decides whom it is for among the viewers
    /// subscribed here (nothing to decide when nobody is) and hands it out;
    /// sleeps `poll` (or until a local write wakes it) when there is nothing
    /// more. A failed read is logged and tried again at the next poll.
    /// Runs until `stop` turns true.
    pub async fn run_reader(
        self,
        db: DatabaseConnection,
        settings: ReaderSettings,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut last = self.published();
        let mut size = settings.page;
        while !*stop.borrow() {
            let mut full = false;
            match self.read_once(&db, &mut last, size).await {
                Ok((events, deliveries)) => {
                    full = events >= size as usize;
                    size = next_page(size, events, deliveries, settings.page);
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

    /// One page: read, decided, handed out; returns how many events, and
    /// how many deliveries they made.
    async fn read_once(
        &self,
        db: &DatabaseConnection,
        last: &mut Option<Pos>,
        page: u32,
    ) -> AppResult<(usize, usize)> {
        let after = match *last {
            Some(p) => p,
            None => log::end(db).await?,
        };
        *last = Some(after);
        let events = log::read_after(db, after, page).await?;
        let Some(end) = events.last().map(|e| Pos::after_all(e.pos.tx, e.pos.seq)) else {
            if self.published().is_none() {
                self.published.send_replace(Some(after));
            }
            return Ok((0, 0));
        };
        let Snapshot { asked, upto } = self.snapshot();
        let mut deliveries = 0;
        match self.decide.get() {
            Some(decide) if !asked.viewers.is_empty() => {
                match decide(events.clone(), asked).await {
                    Ok(admitted) => {
                        deliveries = admitted.by_viewer.values().map(Vec::len).sum();
                        self.hand_out(&admitted, &events, upto);
                    }
                    Err(e) => {
                        e.log();
                        self.all_behind();
                    }
                }
            }
            // Nobody to decide for (but whoever subscribed meanwhile).
            _ => self.hand_out(&Admitted::default(), &events, upto),
        }
        *last = Some(end);
        self.published.send_replace(Some(end));
        Ok((events.len(), deliveries))
    }

    /// What `viewer` hears of after `after` (or, without one, after the
    /// reader's position now), in order and once each: first what is in the
    /// log already (read from the table, decided for this viewer alone),
    /// then what the reader hands out. Falling behind costs a read from the
    /// table, never an event. Ends with `CURSOR_EXPIRED` if events it still
    /// had to deliver were pruned, or with the error of a failed read.
    /// With `trays`, it is told the tray parts too.
    pub fn follow(
        &self,
        db: DatabaseConnection,
        viewer: i64,
        client: &str,
        after: Option<Pos>,
        page: u32,
        trays: bool,
    ) -> impl Stream<Item = AppResult<Delivery>> + Send + use<> {
        let (subscribed, mut handed, behind) = self.register(viewer, trays);
        let own_turn = self.turn_of(client);
        // Read after registering: every page the reader hands out from here
        // on either includes this subscription or marks it behind.
        let start = after.or_else(|| self.published());
        let solo = self.solo.clone();
        let decide = self.decide.clone();
        async_stream::stream! {
            let _subscribed = subscribed;
            let mut last = match start {
                Some(p) => p,
                None => match log::end(&db).await {
                    Ok(p) => p,
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                },
            };
            let Some(decide) = decide.get().cloned() else {
                yield Err(AppError::internal("following the change log", "no rules to decide with"));
                return;
            };
            let alone = Asked {
                viewers: Arc::new(HashSet::from([viewer])),
                trays: Arc::new(if trays { HashSet::from([viewer]) } else { HashSet::new() }),
                reader: false,
            };
            // From a cursor: what is in the log after it first. Without one,
            // the reader hands out what comes (or marks it behind, if it
            // decided a page without it).
            let mut catching_up = after.is_some();
            loop {
                while catching_up {
                    behind.store(false, Ordering::Relaxed);
                    let mine = own_turn.acquire().await;
                    let turn = solo.acquire().await;
                    let read = catch_up_page(&db, last, page).await;
                    let (events, more) = match read {
                        Ok(read) => read,
                        Err(e) => {
                            yield Err(e);
                            return;
                        }
                    };
                    let Some(end) = events.last().map(|e| Pos::after_all(e.pos.tx, e.pos.seq)) else {
                        catching_up = false;
                        break;
                    };
                    let admitted = match decide(events.clone(), alone.clone()).await {
                        Ok(admitted) => admitted,
                        Err(e) => {
                            yield Err(e);
                            return;
                        }
                    };
                    drop(turn);
                    // The first event may be the one `last` is a part of.
                    for d in admitted.deliveries(viewer, &events) {
                        if d.event.pos > last {
                            yield Ok(d);
                        }
                    }
                    last = end;
                    catching_up = more;
                    if more {
                        // One client reads at most one page per pace,
                        // whatever its number of sockets.
                        tokio::time::sleep(CATCH_UP_PACE).await;
                    }
                    drop(mine);
                }
                let Some(batch) = handed.recv().await else { return };
                for d in batch.iter() {
                    // What was read from the table already is not repeated.
                    if d.event.pos > last {
                        last = d.event.pos;
                        yield Ok(d.clone());
                    }
                }
                if behind.load(Ordering::Relaxed) {
                    tracing::debug!("a slow subscriber catches up from the log");
                    catching_up = true;
                }
            }
        }
    }
}

/// One page of the final events after `from`, and whether there may be
/// more; `CURSOR_EXPIRED` if events after `from` were pruned (before or
/// while reading).
async fn catch_up_page(
    db: &DatabaseConnection,
    from: Pos,
    page: u32,
) -> AppResult<(Vec<LogEvent>, bool)> {
    let events = log::read_after(db, from, page).await?;
    if log::pruned(db).await? > from {
        return Err(AppError::cursor_expired());
    }
    let more = events.len() >= page as usize;
    Ok((events, more))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_that_made_too_many_deliveries_makes_the_next_smaller_then_it_grows_back() {
        // 500 PUBLIC posts for 3,333 subscribers: 2 deliveries each.
        assert_eq!(next_page(500, 500, 3_333_000, 500), 1);
        assert_eq!(next_page(500, 40, 40 * 6_666, 500), 1);
        assert_eq!(next_page(500, 100, 20_000, 500), 50);
        assert_eq!(next_page(50, 50, 9_000, 500), 100);
        assert_eq!(next_page(400, 3, 12, 500), 500);
        assert_eq!(next_page(1, 1, 0, 500), 2);
    }

    fn event(subject: i64) -> LogEvent {
        LogEvent {
            pos: Pos {
                tx: subject,
                seq: subject,
                part: Pos::EVENT,
            },
            kind: Kind::StatusCreated,
            subject,
            author: 1,
            audience: "PUBLIC".into(),
            viewer: None,
        }
    }

    #[test]
    fn subscriptions_register_and_leave() {
        let bus = EventBus::new(4);
        let a = bus.register(5, true);
        let b = bus.register(5, true);
        let c = bus.register(0, false);
        let mut v: Vec<i64> = bus.viewers().iter().copied().collect();
        v.sort_unstable();
        assert_eq!(v, vec![0, 5]);
        assert_eq!(bus.subscribers(), 3);
        assert!(
            Arc::ptr_eq(&bus.viewers(), &bus.viewers()),
            "made once per change"
        );
        drop(a);
        drop(c);
        assert_eq!(*bus.viewers(), HashSet::from([5]));
        drop(b);
        assert!(bus.viewers().is_empty());
        assert_eq!(bus.subscribers(), 0);
    }

    #[test]
    fn each_subscription_is_handed_only_its_own_and_a_full_one_is_marked_behind() {
        let bus = EventBus::new(1);
        let (_a, mut to_a, a_behind) = bus.register(5, true);
        let (_b, mut to_b, _) = bus.register(6, true);
        let events = vec![event(1), event(2)];
        let admitted = Admitted {
            by_viewer: HashMap::from([(
                5,
                vec![
                    Heard {
                        index: 0,
                        part: Pos::EVENT,
                        in_friends: true,
                    },
                    Heard {
                        index: 1,
                        part: Pos::EVENT,
                        in_friends: false,
                    },
                ],
            )]),
            ..Admitted::default()
        };
        let upto = bus.snapshot().upto;
        bus.hand_out(&admitted, &events, upto);
        let got = to_a.try_recv().unwrap();
        assert_eq!(
            got.iter().map(|d| d.event.subject).collect::<Vec<_>>(),
            [1, 2]
        );
        assert!(got[0].in_friends && !got[1].in_friends);
        assert!(
            to_b.try_recv().is_err(),
            "nothing for 6, not even a wake-up"
        );
        bus.hand_out(&admitted, &events, upto);
        assert!(!a_behind.load(Ordering::Relaxed));
        bus.hand_out(&admitted, &events, upto);
        assert!(a_behind.load(Ordering::Relaxed), "the channel was full");
        // One that subscribed after the viewers were taken is marked behind.
        let (_c, mut to_c, c_behind) = bus.register(5, true);
        bus.hand_out(&Admitted::default(), &events, upto);
        assert!(c_behind.load(Ordering::Relaxed));
        assert!(to_c.try_recv().is_ok(), "woken to catch up");
    }

    #[test]
    fn positions_order_by_transaction_then_sequence() {
        let p = |tx, seq| Pos {
            tx,
            seq,
            part: Pos::EVENT,
        };
        assert!(p(1, 9) < p(2, 1));
        assert!(p(2, 1) < p(2, 3));
        assert!(p(2, 3) < p(2, 3).with_part(Pos::TRAY));
        assert_eq!(p(2, 3).with_part(Pos::TRAY), Pos::after_all(2, 3));
        assert!(Pos::after_all(2, 3) < p(2, 4));
        for k in [
            Kind::StatusCreated,
            Kind::StatusDeleted,
            Kind::StatusSeen,
            Kind::MomentCreated,
            Kind::MomentDeleted,
            Kind::MomentRestored,
            Kind::AuthorGone,
            Kind::FriendshipChanged,
            Kind::TrayChanged,
        ] {
            assert_eq!(Kind::from_stored(k.as_str()), k);
        }
        assert!(Kind::MomentRestored.is_moment() && !Kind::StatusSeen.is_moment());
    }
}
