//! DataLoaders: every per-item lookup a page makes (authors, media, tray
//! counts, seen state, view counts, friendship, locations, location counts,
//! like state) is batched into one query.
//!
//! Batching by a timer alone depends on how fast a page resolves, and the
//! timer (1 ms) is paid by every request that waits on it, so each page
//! resolver *primes* the loaders instead: it looks ahead at the fields the
//! query asks of the page's items and loads them for the whole page in one
//! call, straight away ([`prime_statuses`], [`prime_tray`], [`prime_users`],
//! [`prime_moments`]); a lone lookup ([`Loaders::one`]) does not wait either.
//! Each HTTP request gets its own loaders with a cache, so the items then read
//! the primed values, and a page of 50 runs the same number of SQL statements
//! as a page of 1. The schema also holds a set with the cache off, which
//! subscriptions use (their connections live long; a cache would go stale):
//! there priming is skipped and the timer batches. Keys that depend on the
//! viewer carry the viewer.

use std::collections::{HashMap, HashSet};

use async_graphql::Context;
use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};

use std::sync::Arc;

use super::{loaders, viewer};

use crate::clock::Clock;
use crate::db::RequestDb;
use crate::domain::friend;
use crate::domain::status::{self, TrayCounts};
use crate::domain::user::{self, Profile};
use crate::domain::{like, location};
use crate::entity::{self, media};
use crate::error::{AppError, AppResult};
use crate::state::AppState;

type Cached<T> = DataLoader<T, HashMapCache>;

/// All loaders.
pub struct Loaders {
    pub users: Cached<UserLoader>,
    pub media: Cached<MediaLoader>,
    pub tray_counts: Cached<TrayCountsLoader>,
    pub seen: Cached<SeenLoader>,
    pub view_counts: Cached<ViewCountLoader>,
    pub friendship: Cached<FriendshipLoader>,
    pub friend_counts: Cached<FriendCountLoader>,
    pub locations: Cached<LocationLoader>,
    pub location_counts: Cached<LocationCountLoader>,
    pub liked: Cached<LikedLoader>,
    /// The database as this request (or, for the shared set, each
    /// statement) reaches it: the loaders and the page resolvers use it.
    pub db: Arc<RequestDb>,
    /// Whether values are cached for the request (so priming pays off).
    cache: bool,
}

fn loader<T: Loader<K>, K: Send + Sync + std::hash::Hash + Eq + Clone + 'static>(
    inner: T,
    cache: bool,
) -> Cached<T> {
    let l = DataLoader::with_cache(inner, tokio::spawn, HashMapCache::default());
    l.enable_all_cache(cache);
    l
}

impl Loaders {
    /// Loaders for one request, caching what they load for its duration.
    pub fn per_request(state: &AppState) -> Self {
        Self::new(state, true)
    }

    /// Loaders without a cache, shared by long-lived subscriptions.
    pub fn shared(state: &AppState) -> Self {
        Self::new(state, false)
    }

    fn new(state: &AppState, cache: bool) -> Self {
        // A request's statements are budgeted; the shared loaders serve
        // every event of long-lived subscriptions and are not.
        let limits = &state.config.limits;
        let budget = cache.then(|| {
            crate::db::Budget::new(limits.request_max_statements, limits.request_max_db_time)
        });
        let db = Arc::new(RequestDb::new(
            state.db.clone(),
            state.db_stats.clone(),
            state.query_conns.clone(),
            budget,
        ));
        let b = || Base {
            db: db.clone(),
            clock: state.clock.clone(),
        };
        Self {
            users: loader(UserLoader(b()), cache),
            media: loader(MediaLoader(b()), cache),
            tray_counts: loader(TrayCountsLoader(b()), cache),
            seen: loader(SeenLoader(b()), cache),
            view_counts: loader(ViewCountLoader(b()), cache),
            friendship: loader(FriendshipLoader(b()), cache),
            friend_counts: loader(FriendCountLoader(b()), cache),
            locations: loader(LocationLoader(b()), cache),
            location_counts: loader(LocationCountLoader(b()), cache),
            liked: loader(LikedLoader(b()), cache),
            db,
            cache,
        }
    }

    /// Loads `keys` through `l` now, in one call and without the batching
    /// timer (the caller already holds every key), and caches the values for
    /// the rest of the request. Does nothing when the cache is off.
    pub async fn prime<K, T>(
        &self,
        l: &Cached<T>,
        keys: impl IntoIterator<Item = K>,
    ) -> AppResult<()>
    where
        T: Loader<K, Error = AppError>,
        K: Send + Sync + std::hash::Hash + Eq + Clone + 'static,
    {
        if !self.cache {
            return Ok(());
        }
        let keys: Vec<K> = keys
            .into_iter()
            .collect::<HashSet<K>>()
            .into_iter()
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let found = l.loader().load(&keys).await?;
        l.feed_many(found).await;
        Ok(())
    }

    /// One value through `l`, without waiting for the batching timer when
    /// the request's cache is on (a lone lookup has nothing to batch with).
    pub async fn one<K, T>(&self, l: &Cached<T>, key: K) -> AppResult<Option<T::Value>>
    where
        T: Loader<K, Error = AppError>,
        K: Send + Sync + std::hash::Hash + Eq + Clone + 'static,
    {
        if !self.cache {
            return l.load_one(key).await;
        }
        let mut found = l.loader().load(std::slice::from_ref(&key)).await?;
        let value = found.remove(&key);
        if let Some(v) = &value {
            l.feed_one(key, v.clone()).await;
        }
        Ok(value)
    }
}

/// Lets the statements of `request` (a query: the guard has checked) share
/// one connection ([`RequestDb`]). Mutations, whose transactions take
/// connections of their own, and subscriptions keep taking one per
/// statement; so do the subscriptions' shared loaders, which never pin.
pub fn pin_query(request: &async_graphql::Request) {
    let loaders = request
        .data
        .get(&std::any::TypeId::of::<Loaders>())
        .and_then(|l| l.downcast_ref::<Loaders>());
    if let Some(l) = loaders
        && l.cache
    {
        l.db.pin();
    }
}

/// Where a connection's items sit below the field being resolved.
const CONNECTION_ITEMS: &[&[&str]] = &[&["nodes"], &["edges", "node"]];

/// Whether the query asks for `path` below each item of the connection being
/// resolved (through `nodes` or `edges { node }`).
fn wants(ctx: &Context<'_>, path: &[&str]) -> bool {
    wants_below(ctx, CONNECTION_ITEMS, path)
}

/// Whether the query asks for `path` below any of the item positions `items`
/// of the field being resolved.
fn wants_below(ctx: &Context<'_>, items: &[&[&str]], path: &[&str]) -> bool {
    items.iter().any(|root| {
        let mut l = ctx.look_ahead();
        for p in root.iter().chain(path) {
            l = l.field(p);
        }
        l.exists()
    })
}

/// Primes what a page of users (found at `path` below each item) will ask for.
pub async fn prime_users(ctx: &Context<'_>, users: &[i64], path: &[&str]) -> AppResult<()> {
    prime_users_below(ctx, users, CONNECTION_ITEMS, path).await
}

/// [`prime_users`] for users found at `path` below the item positions `items`.
async fn prime_users_below(
    ctx: &Context<'_>,
    users: &[i64],
    items: &[&[&str]],
    path: &[&str],
) -> AppResult<()> {
    let mut friendship = path.to_vec();
    friendship.push("friendship");
    if let Some(v) = viewer(ctx).id()
        && wants_below(ctx, items, &friendship)
    {
        let l = loaders(ctx)?;
        l.prime(&l.friendship, users.iter().map(|&u| (v, u)))
            .await?;
    }
    Ok(())
}

/// The viewer, when signed in and the page being resolved asks whether
/// they have seen its statuses (which the page's statement can then read).
pub fn wants_seen(ctx: &Context<'_>) -> Option<i64> {
    viewer(ctx).id().filter(|_| wants(ctx, &["viewerHasSeen"]))
}

/// Primes what a page of statuses will ask for; `seen`, when the page's
/// statement already read it (see [`wants_seen`]), is which the viewer has
/// seen.
pub async fn prime_statuses(
    ctx: &Context<'_>,
    statuses: &[&entity::status::Model],
    seen: Option<&HashSet<i64>>,
) -> AppResult<()> {
    let l = loaders(ctx)?;
    let viewer = viewer(ctx).id();
    if wants(ctx, &["author"]) {
        let authors: Vec<i64> = statuses.iter().map(|s| s.author_id).collect();
        l.prime(&l.users, authors.iter().copied()).await?;
        prime_users(ctx, &authors, &["author"]).await?;
    }
    if wants(ctx, &["media"]) {
        l.prime(&l.media, statuses.iter().filter_map(|s| s.media_id))
            .await?;
    }
    if let Some(v) = viewer {
        if let Some(seen) = seen {
            if l.cache {
                l.seen
                    .feed_many(statuses.iter().map(|s| ((v, s.id), seen.contains(&s.id))))
                    .await;
            }
        } else if wants(ctx, &["viewerHasSeen"]) {
            l.prime(&l.seen, statuses.iter().map(|s| (v, s.id))).await?;
        }
        if wants(ctx, &["viewCount"]) {
            let own = statuses.iter().filter(|s| s.author_id == v).map(|s| s.id);
            l.prime(&l.view_counts, own).await?;
        }
    }
    Ok(())
}

/// Whether the items of the connection being resolved are asked for their
/// `author` (which the page's statement can then read).
pub fn wants_authors(ctx: &Context<'_>) -> bool {
    wants(ctx, &["author"])
}

/// Primes what a page of the story tray will ask for; `profiles`, when the
/// page's statement already read the authors (see [`wants_authors`]).
pub async fn prime_tray(
    ctx: &Context<'_>,
    authors: &[i64],
    profiles: Option<Vec<Profile>>,
) -> AppResult<()> {
    let l = loaders(ctx)?;
    if profiles.is_some() || wants(ctx, &["author"]) {
        match profiles {
            Some(profiles) if l.cache => {
                l.users
                    .feed_many(profiles.into_iter().map(|p| (p.id, p)))
                    .await;
            }
            _ => l.prime(&l.users, authors.iter().copied()).await?,
        }
        prime_users(ctx, authors, &["author"]).await?;
    }
    if wants(ctx, &["storyCount"]) || wants(ctx, &["hasUnseen"]) {
        let v = viewer(ctx).id();
        l.prime(&l.tray_counts, authors.iter().map(|&a| (v, a)))
            .await?;
    }
    Ok(())
}

/// Primes what the moments found at `items` below the field being resolved
/// (a connection's `nodes`/`edges.node`, or the map's pins) will ask for.
pub async fn prime_moments(
    ctx: &Context<'_>,
    items: &[&[&str]],
    moments: &[&entity::moment::Model],
) -> AppResult<()> {
    let l = loaders(ctx)?;
    let viewer = viewer(ctx).id();
    let wanted = |path: &[&str]| wants_below(ctx, items, path);
    if wanted(&["author"]) {
        let authors: Vec<i64> = moments.iter().map(|m| m.author_id).collect();
        l.prime(&l.users, authors.iter().copied()).await?;
        prime_users_below(ctx, &authors, items, &["author"]).await?;
    }
    if wanted(&["media"]) {
        l.prime(&l.media, moments.iter().map(|m| m.media_id))
            .await?;
    }
    let located: Vec<i64> = moments.iter().filter_map(|m| m.location_id).collect();
    if wanted(&["location"]) {
        l.prime(&l.locations, located.iter().copied()).await?;
    }
    if wanted(&["location", "momentCount"]) {
        l.prime(&l.location_counts, located.iter().map(|&id| (viewer, id)))
            .await?;
    }
    if let Some(v) = viewer
        && wanted(&["viewerHasLiked"])
    {
        l.prime(&l.liked, moments.iter().map(|m| (v, m.id))).await?;
    }
    Ok(())
}

/// What every loader holds.
pub struct Base {
    db: Arc<RequestDb>,
    clock: Clock,
}

/// Groups keys `(viewer, item)` by viewer.
fn by_viewer<V: Copy + Eq + std::hash::Hash>(keys: &[(V, i64)]) -> HashMap<V, Vec<i64>> {
    let mut out: HashMap<V, Vec<i64>> = HashMap::new();
    for &(v, id) in keys {
        out.entry(v).or_default().push(id);
    }
    out
}

/// Users by id.
pub struct UserLoader(Base);

impl Loader<i64> for UserLoader {
    type Value = Profile;
    type Error = AppError;

    async fn load(&self, keys: &[i64]) -> AppResult<HashMap<i64, Profile>> {
        user::find_by_ids(&*self.0.db, keys).await
    }
}

/// Media rows by id.
pub struct MediaLoader(Base);

impl Loader<i64> for MediaLoader {
    type Value = media::Model;
    type Error = AppError;

    async fn load(&self, keys: &[i64]) -> AppResult<HashMap<i64, media::Model>> {
        crate::domain::media::find_by_ids(&*self.0.db, keys).await
    }
}

/// Live and unseen status counts by (viewer, author).
pub struct TrayCountsLoader(Base);

impl Loader<(Option<i64>, i64)> for TrayCountsLoader {
    type Value = TrayCounts;
    type Error = AppError;

    async fn load(
        &self,
        keys: &[(Option<i64>, i64)],
    ) -> AppResult<HashMap<(Option<i64>, i64), TrayCounts>> {
        let state = &self.0;
        let now = state.clock.now();
        let mut out = HashMap::new();
        for (viewer, authors) in by_viewer(keys) {
            let counts = status::tray_counts(&*state.db, viewer, &authors, now).await?;
            for a in authors {
                out.insert((viewer, a), counts.get(&a).copied().unwrap_or_default());
            }
        }
        Ok(out)
    }
}

/// Whether (viewer, status) was marked seen.
pub struct SeenLoader(Base);

impl Loader<(i64, i64)> for SeenLoader {
    type Value = bool;
    type Error = AppError;

    async fn load(&self, keys: &[(i64, i64)]) -> AppResult<HashMap<(i64, i64), bool>> {
        let mut out = HashMap::new();
        for (viewer, ids) in by_viewer(keys) {
            let seen: HashSet<i64> = status::seen_by(&*self.0.db, viewer, &ids).await?;
            out.extend(ids.into_iter().map(|id| ((viewer, id), seen.contains(&id))));
        }
        Ok(out)
    }
}

/// How many people saw each status (the author aside).
pub struct ViewCountLoader(Base);

impl Loader<i64> for ViewCountLoader {
    type Value = i64;
    type Error = AppError;

    async fn load(&self, keys: &[i64]) -> AppResult<HashMap<i64, i64>> {
        status::view_counts(&*self.0.db, keys).await
    }
}

/// How (viewer, user) stand.
pub struct FriendshipLoader(Base);

impl Loader<(i64, i64)> for FriendshipLoader {
    type Value = friend::Standing;
    type Error = AppError;

    async fn load(&self, keys: &[(i64, i64)]) -> AppResult<HashMap<(i64, i64), friend::Standing>> {
        let mut out = HashMap::new();
        for (viewer, others) in by_viewer(keys) {
            let states = friend::states(&*self.0.db, viewer, &others).await?;
            out.extend(states.into_iter().map(|(o, s)| ((viewer, o), s)));
        }
        Ok(out)
    }
}

/// How many friends a user has that the viewer may see, by (viewer, user).
pub struct FriendCountLoader(Base);

impl Loader<(i64, i64)> for FriendCountLoader {
    type Value = i64;
    type Error = AppError;

    async fn load(&self, keys: &[(i64, i64)]) -> AppResult<HashMap<(i64, i64), i64>> {
        let mut out = HashMap::new();
        for (viewer, users) in by_viewer(keys) {
            let counts = friend::counts(&*self.0.db, viewer, &users).await?;
            out.extend(counts.into_iter().map(|(u, n)| ((viewer, u), n)));
        }
        Ok(out)
    }
}

/// Locations by id.
pub struct LocationLoader(Base);

impl Loader<i64> for LocationLoader {
    type Value = entity::location::Model;
    type Error = AppError;

    async fn load(&self, keys: &[i64]) -> AppResult<HashMap<i64, entity::location::Model>> {
        location::find_by_ids(&*self.0.db, keys).await
    }
}

/// Live moments a viewer may see at each location, by (viewer, location).
pub struct LocationCountLoader(Base);

impl Loader<(Option<i64>, i64)> for LocationCountLoader {
    type Value = i64;
    type Error = AppError;

    async fn load(
        &self,
        keys: &[(Option<i64>, i64)],
    ) -> AppResult<HashMap<(Option<i64>, i64), i64>> {
        let now = self.0.clock.now();
        let mut out = HashMap::new();
        for (viewer, ids) in by_viewer(keys) {
            let counts = location::moment_counts(&*self.0.db, viewer, &ids, now).await?;
            out.extend(counts.into_iter().map(|(id, n)| ((viewer, id), n)));
        }
        Ok(out)
    }
}

/// Whether (viewer, moment) is liked.
pub struct LikedLoader(Base);

impl Loader<(i64, i64)> for LikedLoader {
    type Value = bool;
    type Error = AppError;

    async fn load(&self, keys: &[(i64, i64)]) -> AppResult<HashMap<(i64, i64), bool>> {
        let mut out = HashMap::new();
        for (viewer, ids) in by_viewer(keys) {
            let liked = like::liked_by(&*self.0.db, viewer, &ids).await?;
            out.extend(
                ids.into_iter()
                    .map(|id| ((viewer, id), liked.contains(&id))),
            );
        }
        Ok(out)
    }
}
