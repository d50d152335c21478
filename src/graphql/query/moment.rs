//! Moments, locations and the map.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::moment::MomentList;
use crate::domain::page::{CursorKind, List};
use crate::domain::{location, map, moment};
use crate::graphql::loaders::prime_moments;
use crate::graphql::types::{
    BoundingBoxInput, Connected, IdKind, Location, LocationPin, MapMarker, MapMarkerSet, Moment,
    MomentPin, Scope, list_cost, moments_of, parse_id,
};
use crate::graphql::{app, db, loaders, viewer};

/// What the map's markers cost in the complexity limit: their fields are
/// loaded for all markers at once, so ten markers count as one item.
fn marker_cost(limit: Option<i32>, child: usize) -> usize {
    let n = usize::try_from(limit.unwrap_or(500).clamp(0, 1000)).unwrap_or(0);
    1 + n.div_ceil(10) * child
}

#[derive(Default)]
pub struct MomentQuery;

#[Object]
impl MomentQuery {
    /// Live moments the viewer may see, newest first. FRIENDS needs authentication.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn moment_feed(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
        #[graphql(default_with = "Some(Scope::Everyone)")] scope: Option<Scope>,
    ) -> Result<Connected<Moment>> {
        moments_of(
            ctx,
            List(CursorKind::MomentFeed, viewer(ctx).id().unwrap_or(0)),
            MomentList::Feed(scope.into()),
            first,
            after,
        )
        .await
    }

    /// A live moment the viewer may see; null otherwise (whether it does not exist, expired, was deleted or is not visible).
    async fn moment(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Moment>> {
        let app = app(ctx)?;
        let Some(n) = parse_id(&id, IdKind::Moment) else {
            return Ok(None);
        };
        Ok(
            moment::find_readable(db(ctx)?, viewer(ctx).id(), n, app.clock.now())
                .await?
                .map(Moment::new),
        )
    }

    /// A location by id; null if there is none, or if the viewer may see no live moment there.
    async fn location(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Location>> {
        let Some(n) = parse_id(&id, IdKind::Location) else {
            return Ok(None);
        };
        let now = app(ctx)?.clock.now();
        Ok(location::find_visible(db(ctx)?, viewer(ctx).id(), n, now)
            .await?
            .map(Location::new))
    }

    /// What a map shows inside a box: standalone moments as pins at their coordinates, locations with live moments as one pin carrying a badge count. A box whose west is greater than its east crosses the antimeridian.
    #[graphql(complexity = "marker_cost(limit, child_complexity)")]
    async fn map_markers(
        &self,
        ctx: &Context<'_>,
        bbox: BoundingBoxInput,
        #[graphql(default = 500)] limit: Option<i32>,
    ) -> Result<MapMarkerSet> {
        let app = app(ctx)?;
        let limit = map::clamp_limit(limit.unwrap_or(500))?;
        let viewer = viewer(ctx).id();
        let found = map::markers(db(ctx)?, viewer, &bbox.into(), limit, app.clock.now()).await?;
        let moments: Vec<_> = found
            .markers
            .iter()
            .filter_map(|m| match m {
                map::Marker::Moment(m) => Some(m),
                map::Marker::Location(..) => None,
            })
            .collect();
        prime_moments(ctx, &[&["markers", "moment"]], &moments).await?;
        // A pin's badge is its location's momentCount for this viewer.
        let mut markers = Vec::with_capacity(found.markers.len());
        let mut badges = Vec::new();
        for marker in found.markers {
            markers.push(match marker {
                map::Marker::Moment(m) => MapMarker::MomentPin(MomentPin {
                    latitude: m.latitude,
                    longitude: m.longitude,
                    moment: Moment::new(m),
                }),
                map::Marker::Location(l, badge) => {
                    badges.push(((viewer, l.id), badge));
                    MapMarker::LocationPin(LocationPin {
                        point: (l.latitude, l.longitude),
                        badge_count: i32::try_from(badge).unwrap_or(i32::MAX),
                        location: Location::new(l),
                    })
                }
            });
        }
        loaders(ctx)?.location_counts.feed_many(badges).await;
        Ok(MapMarkerSet {
            markers,
            truncated: found.truncated,
        })
    }
}
