//! GraphQL output and input types: thin wrappers over domain values. Each
//! field's doc comment is its description in the schema.

use std::sync::Arc;

use async_graphql::connection::{Connection, Edge};
use async_graphql::{
    ComplexObject, Context, Enum, ID, InputObject, InputValueError, InputValueResult, Interface,
    Object, OutputType, Result, Scalar, ScalarType, SimpleObject, Value,
};

use super::loaders::prime_users;
use super::{app, loaders, viewer};
use crate::clock::{Millis, to_datetime};
use crate::domain::Scope as DomainScope;
use crate::domain::friend::{self, FriendshipState as DomainFriendship};
use crate::domain::page::{CursorKind, Cursors, Page, PageArgs, PageQuery};
use crate::domain::status as status_domain;
use crate::domain::user::Profile;
use crate::entity::{media, status};
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

/// A decimal snowflake id as a GraphQL ID.
pub fn id(n: i64) -> ID {
    ID(n.to_string())
}

/// The number behind an ID; `None` for an id this server could not have made.
pub fn parse_id(id: &ID) -> Option<i64> {
    id.0.parse::<i64>().ok().filter(|n| *n > 0)
}

/// The number behind an ID that must name something: `NOT_FOUND` otherwise.
pub fn require_id(id: &ID, what: &str) -> Result<i64, AppError> {
    parse_id(id).ok_or_else(|| AppError::not_found(format!("{what} not found")))
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

/// A page as a Relay connection.
pub fn connection<T, N: OutputType>(
    cursors: &Cursors,
    kind: CursorKind,
    page: Page<T>,
    node: impl Fn(T) -> N,
) -> Connection<String, N> {
    let mut c = Connection::new(page.has_previous, page.has_next);
    c.edges.extend(
        page.items
            .into_iter()
            .map(|(key, item)| Edge::new(cursors.encode(kind, key), node(item))),
    );
    c
}

/// Checks the arguments of a forward-only connection (`first`, `after`).
pub fn forward_query(
    ctx: &Context<'_>,
    kind: CursorKind,
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
    app.cursors
        .query(kind, &args, default, app.config.max_page_size)
}

/// A page of users as a connection, with what its items ask for loaded at once.
pub async fn user_connection(
    ctx: &Context<'_>,
    kind: CursorKind,
    page: Page<Profile>,
) -> Result<Connection<String, User>> {
    let ids: Vec<i64> = page.items.iter().map(|i| i.1.id).collect();
    prime_users(ctx, &ids, &[]).await?;
    Ok(connection(&app(ctx)?.cursors, kind, page, User))
}

/// What a connection field costs in the complexity limit: its page size
/// (clamped like the page itself) times what each item asks for.
pub fn list_cost(first: Option<i32>, last: Option<i32>, default: i32, child: usize) -> usize {
    let n = last.or(first).unwrap_or(default).clamp(0, 50);
    1 + usize::try_from(n).unwrap_or(0) * child
}

/// Any object that can be refetched by its id.
#[derive(Interface)]
#[graphql(field(name = "id", ty = "ID"))]
pub enum Node {
    User(User),
    Status(Status),
    Media(Media),
}

/// A person on ephemera.
#[derive(Clone, Debug)]
pub struct User(pub Profile);

#[Object]
impl User {
    /// The user's id.
    async fn id(&self) -> ID {
        id(self.0.id)
    }

    /// The unique handle: 3 to 30 letters, digits or underscores.
    async fn username(&self) -> &str {
        &self.0.username
    }

    /// The name the user shows, if they set one.
    async fn display_name(&self) -> Option<&str> {
        self.0.display_name.as_deref()
    }

    /// When the account was created.
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }

    /// This user's live statuses, newest first.
    #[graphql(complexity = "list_cost(first, last, 10, child_complexity)")]
    async fn statuses(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> Result<Connection<String, Status>> {
        super::query::statuses_of(
            ctx,
            self.0.id,
            PageArgs {
                first,
                after,
                last,
                before,
            },
        )
        .await
    }

    /// How the viewer stands with this user; NONE without authentication.
    async fn friendship(&self, ctx: &Context<'_>) -> Result<FriendshipState> {
        let Some(v) = viewer(ctx).id() else {
            return Ok(FriendshipState::None);
        };
        let state = loaders(ctx)?.friendship.load_one((v, self.0.id)).await?;
        Ok(state.unwrap_or(DomainFriendship::None).into())
    }

    /// Accepted friends; visible to the user and their friends, an empty connection to others.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn friends(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, User>> {
        let q = forward_query(ctx, CursorKind::Friend, first, after, 20)?;
        let allowed = match viewer(ctx).id() {
            Some(v) if v == self.0.id => true,
            Some(v) => {
                loaders(ctx)?.friendship.load_one((v, self.0.id)).await?
                    == Some(DomainFriendship::Friends)
            }
            None => false,
        };
        let page = if allowed {
            friend::friends_page(&app(ctx)?.db, self.0.id, &q).await?
        } else {
            Page::empty()
        };
        user_connection(ctx, CursorKind::Friend, page).await
    }
}

/// A stored image.
#[derive(Clone, Debug)]
pub struct Media(pub media::Model);

#[Object]
impl Media {
    /// The media's id.
    async fn id(&self) -> ID {
        id(self.0.id)
    }

    /// Where a client fetches the bytes: served by this server for the local store, a time-limited signed URL for S3.
    async fn url(&self) -> String {
        format!("/media/{}", self.0.storage_key)
    }

    /// The type judged from the file's bytes, e.g. `image/jpeg`.
    async fn content_type(&self) -> &str {
        &self.0.content_type
    }

    /// Size of the stored file in bytes.
    async fn byte_size(&self) -> i32 {
        i32::try_from(self.0.byte_size).unwrap_or(i32::MAX)
    }

    /// Width in pixels, where the file's header gives it.
    async fn width(&self) -> Option<i32> {
        self.0.width
    }

    /// Height in pixels, where the file's header gives it.
    async fn height(&self) -> Option<i32> {
        self.0.height
    }
}

/// A story: a post with optional media, a caption and a background colour that lives 24 hours.
#[derive(Clone, Debug)]
pub struct Status(pub Arc<status::Model>);

impl Status {
    pub fn new(model: status::Model) -> Self {
        Self(Arc::new(model))
    }

    fn viewer_is_author(&self, ctx: &Context<'_>) -> bool {
        viewer(ctx).id() == Some(self.0.author_id)
    }
}

#[Object]
impl Status {
    /// The status's id.
    async fn id(&self) -> ID {
        id(self.0.id)
    }

    /// Who posted it.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        let profile = loaders(ctx)?.users.load_one(self.0.author_id).await?;
        Ok(User(
            profile.ok_or_else(|| AppError::not_found("author not found"))?,
        ))
    }

    /// The attached image, if any.
    async fn media(&self, ctx: &Context<'_>) -> Result<Option<Media>> {
        let Some(media_id) = self.0.media_id else {
            return Ok(None);
        };
        Ok(loaders(ctx)?.media.load_one(media_id).await?.map(Media))
    }

    /// Text shown with the status, at most 500 characters.
    async fn caption(&self) -> Option<&str> {
        self.0.caption.as_deref()
    }

    /// Background colour as `#RRGGBB`.
    async fn bg_color(&self) -> Option<&str> {
        self.0.bg_color.as_deref()
    }

    /// When it was posted.
    async fn created_at(&self) -> DateTime {
        DateTime(self.0.created_at)
    }

    /// When it stops being live (its creation plus the server's status TTL).
    async fn expires_at(&self) -> DateTime {
        DateTime(self.0.expires_at)
    }

    /// Whether the viewer marked it seen; false without authentication.
    async fn viewer_has_seen(&self, ctx: &Context<'_>) -> Result<bool> {
        let Some(v) = viewer(ctx).id() else {
            return Ok(false);
        };
        Ok(loaders(ctx)?
            .seen
            .load_one((v, self.0.id))
            .await?
            .unwrap_or(false))
    }

    /// For the author only; null for everyone else.
    async fn view_count(&self, ctx: &Context<'_>) -> Result<Option<i32>> {
        if !self.viewer_is_author(ctx) {
            return Ok(None);
        }
        let n = loaders(ctx)?
            .view_counts
            .load_one(self.0.id)
            .await?
            .unwrap_or(0);
        Ok(Some(i32::try_from(n).unwrap_or(i32::MAX)))
    }

    /// For the author only; null for everyone else. Most recent first.
    #[graphql(complexity = "list_cost(first, None, 20, child_complexity)")]
    async fn viewers(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> Result<Option<Connection<String, User>>> {
        let q = forward_query(ctx, CursorKind::StatusViewer, first, after, 20)?;
        if !self.viewer_is_author(ctx) {
            return Ok(None);
        }
        let page = status_domain::viewers_page(&app(ctx)?.db, &self.0, &q).await?;
        Ok(Some(
            user_connection(ctx, CursorKind::StatusViewer, page).await?,
        ))
    }
}

/// One author in the story tray.
#[derive(Clone, Debug, SimpleObject)]
#[graphql(complex)]
pub struct StoryTrayEntry {
    #[graphql(skip)]
    pub author_id: i64,
    /// When the author's newest live status was posted.
    pub latest_created_at: DateTime,
}

#[ComplexObject]
impl StoryTrayEntry {
    /// The author whose statuses this entry stands for.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        let profile = loaders(ctx)?.users.load_one(self.author_id).await?;
        Ok(User(
            profile.ok_or_else(|| AppError::not_found("author not found"))?,
        ))
    }

    /// How many live statuses the author has.
    async fn story_count(&self, ctx: &Context<'_>) -> Result<i32> {
        let counts = self.counts(ctx).await?;
        Ok(i32::try_from(counts.live).unwrap_or(i32::MAX))
    }

    /// Whether the author has a live status the viewer has not marked seen; true without authentication.
    async fn has_unseen(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.counts(ctx).await?.unseen > 0)
    }
}

impl StoryTrayEntry {
    async fn counts(&self, ctx: &Context<'_>) -> Result<status_domain::TrayCounts> {
        let key = (viewer(ctx).id(), self.author_id);
        Ok(loaders(ctx)?
            .tray_counts
            .load_one(key)
            .await?
            .unwrap_or_default())
    }
}

impl From<status_domain::TrayRow> for StoryTrayEntry {
    fn from(row: status_domain::TrayRow) -> Self {
        Self {
            author_id: row.author_id,
            latest_created_at: DateTime(row.latest_created_at),
        }
    }
}

/// A signed-in session.
#[derive(SimpleObject)]
pub struct AuthPayload {
    /// Send as `Authorization: Bearer <token>`; expires after the server's token TTL.
    pub token: String,
    /// The signed-in user.
    pub user: User,
}

/// A new account.
#[derive(InputObject)]
pub struct SignUpInput {
    /// 3 to 30 characters: letters, digits, underscore.
    pub username: String,
    /// At least 8 characters.
    pub password: String,
    /// Up to 64 characters; blank means none.
    pub display_name: Option<String>,
}

/// Credentials.
#[derive(InputObject)]
pub struct SignInInput {
    /// The username, in any case.
    pub username: String,
    /// The password.
    pub password: String,
}

/// A new status.
#[derive(InputObject)]
pub struct CreateStatusInput {
    /// An image the viewer uploaded and has not attached elsewhere.
    pub media_id: Option<ID>,
    /// At most 500 characters.
    pub caption: Option<String>,
    /// #RRGGBB
    pub bg_color: Option<String>,
}
