//! DataLoaders: every per-item lookup a page makes (authors, media, tray
//! counts, seen state, view counts, friendship) is batched into one query per
//! page, so a page of 50 runs the same number of SQL statements as a page of
//! 1. They hold no cache, so they are shared by all requests; keys that
//! depend on the viewer carry the viewer.

use std::collections::{HashMap, HashSet};

use async_graphql::dataloader::{DataLoader, Loader};

use crate::app::AppState;
use crate::db;
use crate::domain::friend::{self, FriendshipState};
use crate::domain::status::{self, TrayCounts};
use crate::domain::user::{self, Profile};
use crate::entity::media;
use crate::error::{AppError, AppResult};

/// All loaders, kept in the schema's data.
pub struct Loaders {
    pub users: DataLoader<UserLoader>,
    pub media: DataLoader<MediaLoader>,
    pub tray_counts: DataLoader<TrayCountsLoader>,
    pub seen: DataLoader<SeenLoader>,
    pub view_counts: DataLoader<ViewCountLoader>,
    pub friendship: DataLoader<FriendshipLoader>,
}

impl Loaders {
    pub fn new(state: &AppState) -> Self {
        let l = |s: &AppState| Base(s.clone());
        Self {
            users: DataLoader::new(UserLoader(l(state)), tokio::spawn),
            media: DataLoader::new(MediaLoader(l(state)), tokio::spawn),
            tray_counts: DataLoader::new(TrayCountsLoader(l(state)), tokio::spawn),
            seen: DataLoader::new(SeenLoader(l(state)), tokio::spawn),
            view_counts: DataLoader::new(ViewCountLoader(l(state)), tokio::spawn),
            friendship: DataLoader::new(FriendshipLoader(l(state)), tokio::spawn),
        }
    }
}

/// What every loader holds.
pub struct Base(AppState);

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
        user::find_by_ids(&self.0.0.db, keys).await
    }
}

/// Media rows by id.
pub struct MediaLoader(Base);

impl Loader<i64> for MediaLoader {
    type Value = media::Model;
    type Error = AppError;

    async fn load(&self, keys: &[i64]) -> AppResult<HashMap<i64, media::Model>> {
        let rows: Vec<media::Model> = db::fetch_all(
            &self.0.0.db,
            &format!(
                "SELECT * FROM media WHERE id IN ({})",
                db::placeholders(1, keys.len())
            ),
            keys.iter().map(|&k| k.into()).collect(),
        )
        .await?;
        Ok(rows.into_iter().map(|m| (m.id, m)).collect())
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
        let state = &self.0.0;
        let now = state.clock.now();
        let mut out = HashMap::new();
        for (viewer, authors) in by_viewer(keys) {
            let counts = status::tray_counts(&state.db, viewer, &authors, now).await?;
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
            let seen: HashSet<i64> = status::seen_by(&self.0.0.db, viewer, &ids).await?;
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
        status::view_counts(&self.0.0.db, keys).await
    }
}

/// How (viewer, user) stand.
pub struct FriendshipLoader(Base);

impl Loader<(i64, i64)> for FriendshipLoader {
    type Value = FriendshipState;
    type Error = AppError;

    async fn load(&self, keys: &[(i64, i64)]) -> AppResult<HashMap<(i64, i64), FriendshipState>> {
        let mut out = HashMap::new();
        for (viewer, others) in by_viewer(keys) {
            let states = friend::states(&self.0.0.db, viewer, &others).await?;
            out.extend(states.into_iter().map(|(o, s)| ((viewer, o), s)));
        }
        Ok(out)
    }
}
