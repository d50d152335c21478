//! GraphQL output and input types: thin wrappers over domain values, one
//! file per area, and what they share here (scalars, ids, enums, connection
//! helpers, the `Node` interface). Each field's doc comment is its
//! description in the schema.

mod global_id;
mod live;
mod media;
mod moment;
mod safety;
mod status;
mod user;

pub use global_id::{IdKind, decode_id, id, parse_id, require_id, tray_entry_id};
pub use live::{
    AuthorGoneEvent, FriendshipChangedEvent, LiveEvent, MomentCreatedEvent, MomentDeletedEvent,
    MomentRestoredEvent, StatusCreatedEvent, StatusDeletedEvent, StatusSeenEvent,
    StoryTrayEntryChangedEvent, StoryTrayEntryRemovedEvent,
};
pub use media::{HttpHeader, Media, MediaUploadInput, MediaUploadTicket, Upload};
pub use moment::{
    BoundingBoxInput, CreateMomentInput, Location, LocationPin, MapMarker, MapMarkerSet, Moment,
    MomentPin, Visibility, moments_of,
};
pub use safety::{
    ModerationNotice, Report, ReportInput, ReportReason, ReportSubject, parse_subject,
};
pub use status::{CreateStatusInput, Status, StatusAudience, StoryTrayEntry};
pub use user::{AuthPayload, SignInInput, SignUpInput, UpdateProfileInput, User, load_user};

use async_graphql::connection::{Connection, CursorType, Edge};
use async_graphql::{
    Context, Enum, ID, InputValueError, InputValueResult, Interface, OutputType, Result, Scalar,
    ScalarType, Value,
};

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::app;
use super::loaders::prime_users;
use crate::clock::{Millis, to_datetime};
use crate::domain::Scope as DomainScope;
use crate::domain::friend::FriendshipState as DomainFriendship;
use crate::domain::page::{Cursors, Key, List, Page, PageArgs, PageQuery};
use crate::domain::user::Profile;
use crate::error::AppError;

/// An instant, as an RFC 3339 string in UTC (`2026-11-29T17:42:00.000Z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateTime(pub Millis);

#[Scalar(name = "DateTime")]
impl ScalarType for DateTime {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
                .map(|d| DateTime(d.timestamp_millis()))
                .map_err(|_| InputValueError::custom("expected an RFC 3339 date-time")),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        Value::String(to_datetime(self.0).to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    }
}

/// Whose content a list shows: everyone's the viewer may see, or only the viewer's own and accepted friends'.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything the viewer may see.
    Everyone,
    /// The viewer's own and their accepted friends'.
    Friends,
}

impl From<Option<Scope>> for DomainScope {
    fn from(s: Option<Scope>) -> Self {
        match s {
            Some(Scope::Friends) => DomainScope::Friends,
            _ => DomainScope::Everyone,
        }
    }
}

/// How the viewer stands with a user.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FriendshipState {
    /// The user is the viewer.
    #[graphql(name = "SELF")]
    Myself,
    /// No friendship and no request either way.
    None,
    /// The viewer asked; the user has not answered.
    OutgoingRequest,
    /// The user asked; the viewer has not answered.
    IncomingRequest,
    /// Accepted friends.
    Friends,
}

impl From<DomainFriendship> for FriendshipState {
    fn from(s: DomainFriendship) -> Self {
        match s {
            DomainFriendship::Myself => Self::Myself,
            DomainFriendship::None => Self::None,
            DomainFriendship::OutgoingRequest => Self::OutgoingRequest,
            DomainFriendship::IncomingRequest => Self::IncomingRequest,
            DomainFriendship::Friends => Self::Friends,
        }
    }
}

/// A connection's cursor: the item's key, signed only when a client selects
/// the cursor (`edges.cursor`, `pageInfo.startCursor`/`endCursor`), so a
/// page read without them never pays for the signatures.
pub struct PageCursor {
    cursors: Arc<Cursors>,
    list: List,
    key: Key,
}

impl CursorType for PageCursor {
    type Error = &'static str;

    /// Never used: arguments are decoded by `PageQuery`, against their list.
    fn decode_cursor(_: &str) -> Result<Self, Self::Error> {
        Err("cursors are decoded with their list")
    }

    fn encode_cursor(&self) -> String {
        self.cursors.encode(self.list, self.key)
    }
}

/// A Relay connection of `N`, its cursors signed when selected.
pub type Connected<N> = Connection<PageCursor, N>;

/// A page as a Relay connection.
pub fn connection<T, N: OutputType>(
    cursors: &Arc<Cursors>,
    list: impl Into<List>,
    page: Page<T>,
    node: impl Fn(T) -> N,
) -> Connected<N> {
    let list = list.into();
    let mut c = Connection::new(page.has_previous, page.has_next);
    c.edges.extend(page.items.into_iter().map(|(key, item)| {
        let cursor = PageCursor {
            cursors: cursors.clone(),
            list,
            key,
        };
        Edge::new(cursor, node(item))
    }));
    c
}

/// Checks the arguments of a forward-only connection (`first`, `after`).
pub fn forward_query(
    ctx: &Context<'_>,
    list: impl Into<List>,
    first: Option<i32>,
    after: Option<String>,
    default: u32,
) -> Result<PageQuery, AppError> {
    let app = app(ctx)?;
    let args = PageArgs {
        first,
        after,
        ..Default::default()
    };
    let max = app.config.graphql.max_page_size;
    PageQuery::from_args(&app.cursors, list, &args, default, max)
}

/// A page of users as a connection, with what its items ask for loaded at once.
pub async fn user_connection(
    ctx: &Context<'_>,
    list: impl Into<List>,
    page: Page<Profile>,
) -> Result<Connected<User>> {
    let ids: Vec<i64> = page.items.iter().map(|i| i.1.id).collect();
    prime_users(ctx, &ids, &[]).await?;
    Ok(connection(&app(ctx)?.cursors, list, page, User))
}

/// The largest page a connection returns, as complexity prices it: set from
/// `EPHEMERA_MAX_PAGE_SIZE` when a schema is built (complexity functions see
/// only their arguments). Several servers in one process (tests) price with
/// the largest of their settings, which over-prices and never under-prices.
static PRICED_PAGE_MAX: AtomicU32 = AtomicU32::new(50);

/// Prices connections with pages of up to `max` items.
pub fn price_pages_up_to(max: u32) {
    PRICED_PAGE_MAX.fetch_max(max, Ordering::Relaxed);
}

/// What a connection field costs in the complexity limit: its page size
/// (clamped like the page itself) times what each item asks for.
pub fn list_cost(first: Option<i32>, last: Option<i32>, default: i32, child: usize) -> usize {
    let max = i32::try_from(PRICED_PAGE_MAX.load(Ordering::Relaxed)).unwrap_or(i32::MAX);
    let n = last.or(first).unwrap_or(default).clamp(0, max);
    1 + usize::try_from(n).unwrap_or(0).saturating_mul(child)
}

/// Any object that can be refetched by its id.
#[derive(Interface)]
#[graphql(field(name = "id", ty = "ID"))]
pub enum Node {
    User(User),
    Status(Status),
    Media(Media),
    Moment(Moment),
    Location(Location),
}
