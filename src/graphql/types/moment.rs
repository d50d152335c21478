//! Moments, locations, the map and likes.

use std::sync::Arc;

use super::Connected;
use async_graphql::{
    ComplexObject, Context, Enum, ID, InputObject, Object, Result, SimpleObject, Union,
};

use super::{
    DateTime, IdKind, Media, User, connection, forward_query, id, list_cost, load_user,
    user_connection,
};
use crate::domain::geo::BoundingBox;
use crate::domain::moment::{MomentList, Visibility as DomainVisibility};
use crate::domain::page::{CursorKind, List, Page};
use crate::domain::{like, moment as moment_domain};
use crate::entity::{location, moment};
use crate::error::AppError;
use crate::graphql::loaders::prime_moments;
use crate::graphql::{app, db, loaders, viewer};

/// Who may see a moment.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Anyone, signed in or not.
    Public,
    /// The author and the author's accepted friends only.
    FriendsOnly,
}

impl From<Visibility> for DomainVisibility {
    fn from(v: Visibility) -> Self {
        match v {
            Visibility::Public => DomainVisibility::Public,
            Visibility::FriendsOnly => DomainVisibility::FriendsOnly,
        }
    }
}

impl From<DomainVisibility> for Visibility {
    fn from(v: DomainVisibility) -> Self {
        match v {
            DomainVisibility::Public => Visibility::Public,
            DomainVisibility::FriendsOnly => Visibility::FriendsOnly,
        }
    }
}

/// An image with a caption at a place, for a while (or journaled: for good).
#[derive(Clone, Debug)]
pub struct Moment(pub Arc<moment::Model>);

impl Moment {
    pub fn new(model: moment::Model) -> Self {
        Self(Arc::new(model))
    }
}

#[Object]
impl Moment {
    /// The moment's id.
    pub async fn id(&self) -> ID {
        id(IdKind::Moment, self.0.id)
    }

    /// Who posted it.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        load_user(ctx, self.0.author_id).await
    }

    /// The image.
    async fn media(&self, ctx: &Context<'_>) -> Result<Media> {
        let found = loaders(ctx)?.media.load_one(self.0.media_id).await?;
        Ok(Media(found.ok_or_else(|| {
            AppError::internal("moment media", format!("media {} missing", self.0.media_id))
        })?))
    }

    /// Text shown with the image, at most 2,200 characters.
    async fn caption(&self) -> Option<&str> {
        self.0.caption.as_deref()
    }

    /// Where it was taken: latitude in degrees, -90 to 90.
    async fn latitude(&self) -> f64 {
        self.0.latitude
    }

    /// Where it was taken: longitude in degrees, -180 to 180.
    async fn longitude(&self) -> f64 {
        self.0.longitude
    }

    /// The persisted place it is attached to; null for a standalone moment.
    async fn location(&self, ctx: &Context<'_>) -> Result<Option<Location>> {
        let Some(lid) = self.0.location_id else {
            return Ok(None);
        };
        Ok(loaders(ctx)?
            .locations
            .load_one(lid)
            .await?
            .map(Location::new))
    }

    /// Who may see it.
    async fn visibility(&self) -> Visibility {
        DomainVisibility::from_stored(&self.0.visibility).into()
    }

    /// True when it never expires and belongs to the author's diary.
    async fn is_journaled(&self) -> bool {
        self.0.is_journaled
    }

    /// Hours it lives for; 0 when journaled.
    async fn duration_hours(&self) -> i32 {
        self.0.duration_hours
    }

    /// Null exactly when journaled.
    async fn expires_at(&self) -> Option<DateTime> {
        self.0.expires_at.map(DateTime)
    }

    /// When it was posted.
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }

    /// How many people like it (leaving out people the viewer may not see).
    async fn likes_count(&self) -> i32 {
        self.0.likes_count
    }

    /// Whether the viewer likes it; false without authentication.
    async fn viewer_has_liked(&self, ctx: &Context<'_>) -> Result<bool> {
        let Some(v) = viewer(ctx).id() else {
            return Ok(false);
        };
        Ok(loaders(ctx)?
            .liked
            .load_one((v, self.0.id))
            .await?
            .unwrap_or(false))
    }

    /// For the author only; null for everyone else. Most recent first.
    #[graphql(complexity = "PER_PARENT_STATEMENT + list_cost(first, None, 20, child_complexity)")]
    async fn likers(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Option<Connected<User>>> {
        let q = forward_query(
            ctx,
            List(CursorKind::MomentLiker, self.0.id),
            first,
            after,
            20,
        )?;
        if viewer(ctx).id() != Some(self.0.author_id) {
            return Ok(None);
        }
        let page = like::likers_page(db(ctx)?, self.0.id, self.0.author_id, &q).await?;
        Ok(Some(
            user_connection(ctx, List(CursorKind::MomentLiker, self.0.id), page).await?,
        ))
    }
}

/// A persisted place that moments attach to.
#[derive(Clone, Debug)]
pub struct Location(pub Arc<location::Model>);

impl Location {
    pub fn new(model: location::Model) -> Self {
        Self(Arc::new(model))
    }
}

#[Object]
impl Location {
    /// The location's id.
    pub async fn id(&self) -> ID {
        id(IdKind::Location, self.0.id)
    }

    /// The place's name, as first given.
    async fn name(&self) -> &str {
        &self.0.name
    }

    /// Latitude in degrees.
    async fn latitude(&self) -> f64 {
        self.0.latitude
    }

    /// Longitude in degrees.
    async fn longitude(&self) -> f64 {
        self.0.longitude
    }

    /// Live moments attached here that the viewer may see.
    async fn moment_count(&self, ctx: &Context<'_>) -> Result<i32> {
        let n = loaders(ctx)?
            .location_counts
            .load_one((viewer(ctx).id(), self.0.id))
            .await?
            .unwrap_or(0);
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    }

    /// Live moments attached here that the viewer may see, newest first.
    #[graphql(complexity = "PER_PARENT_STATEMENT + list_cost(first, None, 20, child_complexity)")]
    async fn moments(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connected<Moment>> {
        moments_of(
            ctx,
            List(CursorKind::LocationMoments, self.0.id),
            MomentList::Location(self.0.id),
            first,
            after,
        )
        .await
    }
}

/// A page of moments from `list` as a connection, with what its items ask
/// for loaded at once (for every moment connection).
pub async fn moments_of(
    ctx: &Context<'_>,
    cursors: List,
    list: MomentList,
    first: Option<i32>,
    after: Option<String>,
) -> Result<Connected<Moment>> {
    let app = app(ctx)?;
    let q = forward_query(ctx, cursors, first, after, 20)?;
    let page: Page<moment::Model> =
        moment_domain::page(db(ctx)?, viewer(ctx).id(), list, app.clock.now(), &q).await?;
    let rows: Vec<_> = page.items.iter().map(|i| &i.1).collect();
    prime_moments(ctx, &[&["nodes"], &["edges", "node"]], &rows).await?;
    Ok(connection(&app.cursors, cursors, page, Moment::new))
}

/// What a connection read by a statement of its own for each parent adds
/// to its price, as fields: a statement costs the server about as much as
/// fifty fields. The map prices its markers' fields at a tenth (they are
/// loaded for all markers at once), but a location pin's `moments` is one
/// statement per pin, so a thousand pins with it pass the complexity limit.
pub const PER_PARENT_STATEMENT: usize = 50;

/// A standalone moment on the map, at its own coordinates.
#[derive(SimpleObject)]
pub struct MomentPin {
    /// The moment.
    pub moment: Moment,
    /// The moment's latitude.
    pub latitude: f64,
    /// The moment's longitude.
    pub longitude: f64,
}

/// A location on the map with the live moments the viewer may see there.
#[derive(SimpleObject)]
#[graphql(complex)]
pub struct LocationPin {
    /// The location.
    pub location: Location,
    /// Live moments attached to the location that the viewer may see; never 0.
    pub badge_count: i32,
    #[graphql(skip)]
    pub point: (f64, f64),
}

#[ComplexObject]
impl LocationPin {
    /// The location's latitude.
    async fn latitude(&self) -> f64 {
        self.point.0
    }

    /// The location's longitude.
    async fn longitude(&self) -> f64 {
        self.point.1
    }
}

/// One thing the map shows.
#[derive(Union)]
pub enum MapMarker {
    MomentPin(MomentPin),
    LocationPin(LocationPin),
}

/// What a map shows inside a box.
#[derive(SimpleObject)]
pub struct MapMarkerSet {
    /// Newest activity first.
    pub markers: Vec<MapMarker>,
    /// True when more markers were in the box than limit (a limit above 1,000 is clamped to 1,000).
    pub truncated: bool,
}

/// A new moment.
#[derive(InputObject)]
pub struct CreateMomentInput {
    /// An image the viewer uploaded and has not attached elsewhere.
    pub media_id: ID,
    /// At most 2,200 characters.
    pub caption: Option<String>,
    /// Degrees, -90 to 90.
    pub latitude: f64,
    /// Degrees, -180 to 180.
    pub longitude: f64,
    /// Hours until it expires, 1 to 168; 0 journals it: it never expires and lives on the author's profile as a diary.
    #[graphql(default = 24)]
    pub duration_hours: Option<i32>,
    /// Who may see it.
    #[graphql(default_with = "Some(Visibility::FriendsOnly)")]
    pub visibility: Option<Visibility>,
    /// Attach to this existing location.
    pub location_id: Option<ID>,
    /// Attach to the persisted location with this name within 50 m of the coordinates, creating it if there is none. Without locationId or placeName the moment is a standalone pin.
    pub place_name: Option<String>,
}

/// A map box in degrees. A box whose west is greater than its east crosses the antimeridian.
#[derive(InputObject)]
pub struct BoundingBoxInput {
    /// Southern edge, -90 to 90.
    pub south: f64,
    /// Western edge, -180 to 180.
    pub west: f64,
    /// Northern edge, -90 to 90, not below south.
    pub north: f64,
    /// Eastern edge, -180 to 180.
    pub east: f64,
}

impl From<BoundingBoxInput> for BoundingBox {
    fn from(b: BoundingBoxInput) -> Self {
        BoundingBox {
            south: b.south,
            west: b.west,
            north: b.north,
            east: b.east,
        }
    }
}
