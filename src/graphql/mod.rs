//! The GraphQL schema: roots split by area, the DataLoaders, and the guards
//! that refuse abusive queries before they run. The schema knows nothing of
//! HTTP; `http.rs` feeds it requests with the viewer attached.

pub mod document;
pub mod executor;
pub mod loaders;
pub mod mutation;
pub mod query;
pub mod subscription;
pub mod types;

use async_graphql::{Context, Schema};

use crate::auth::Viewer;
use crate::error::AppError;
use crate::state::AppState;

/// The schema type.
pub type AppSchema =
    Schema<query::QueryRoot, mutation::MutationRoot, subscription::SubscriptionRoot>;

/// Builds the schema over `state`, with the complexity limit (depth and
/// aliases are counted by the guard, see [`executor`]).
pub fn build_schema(state: AppState) -> AppSchema {
    let config = state.config.clone();
    types::price_pages_up_to(config.graphql.max_page_size);
    let schema = builder()
        .data(loaders::Loaders::shared(&state))
        .data(state)
        .limit_complexity(config.graphql.max_complexity);
    if config.server.introspection {
        schema.finish()
    } else {
        schema.disable_introspection().finish()
    }
}

/// The schema behind the guard, as HTTP and websockets run it.
pub fn executor(schema: AppSchema, state: &AppState) -> executor::GuardedExecutor {
    let config = &state.config;
    executor::GuardedExecutor::new(
        schema,
        state.clone(),
        executor::Limits {
            document: document::Limits {
                max_tokens: config.graphql.max_tokens,
                max_nesting: config.graphql.max_nesting,
            },
            max_fields: config.graphql.max_fields,
            max_depth: config.graphql.max_depth,
            max_complexity: config.graphql.max_complexity,
            max_aliases: config.graphql.max_aliases,
            persisted_per_address: config.limits.rate_persisted_queries,
        },
    )
}

/// An [`AppError`] as a GraphQL error: its message and `extensions.code`
/// (and `retryAfter`). This is where a resolver's error becomes a response,
/// so an internal one is logged here with its cause, once.
impl From<AppError> for async_graphql::Error {
    fn from(err: AppError) -> Self {
        use async_graphql::ErrorExtensions;
        err.log();
        let code = err.code().as_str();
        let retry_after = err.retry_after();
        async_graphql::Error::new(err.message()).extend_with(|_, ext| {
            ext.set("code", code);
            if let Some(secs) = retry_after {
                ext.set("retryAfter", secs);
            }
        })
    }
}

/// The schema in SDL, as `schema.graphql` keeps it.
pub fn sdl(schema: &AppSchema) -> String {
    schema.sdl_with_options(
        async_graphql::SDLExportOptions::new()
            .sorted_fields()
            .sorted_enum_items(),
    )
}

/// The application state of a request.
pub(crate) fn app<'a>(ctx: &Context<'a>) -> Result<&'a AppState, AppError> {
    ctx.data::<AppState>()
        .map_err(|_| AppError::internal("schema data", "AppState missing"))
}

/// The loaders of a request.
pub(crate) fn loaders<'a>(ctx: &Context<'a>) -> Result<&'a loaders::Loaders, AppError> {
    ctx.data::<loaders::Loaders>()
        .map_err(|_| AppError::internal("schema data", "Loaders missing"))
}

/// The database as this request reaches it (see [`crate::db::RequestDb`]).
pub(crate) fn db<'a>(ctx: &Context<'a>) -> Result<&'a crate::db::RequestDb, AppError> {
    Ok(&loaders(ctx)?.db)
}

/// Who is asking (anonymous unless the transport attached a user).
pub(crate) fn viewer(ctx: &Context<'_>) -> Viewer {
    ctx.data_opt::<Viewer>()
        .copied()
        .unwrap_or(Viewer::Anonymous)
}

/// The signed-in viewer's id, for mutations: `UNAUTHENTICATED` without a
/// token, and for a token whose account has been deleted.
pub(crate) async fn member(ctx: &Context<'_>) -> Result<i64, AppError> {
    let id = viewer(ctx).require()?;
    let l = loaders(ctx)?;
    match l.one(&l.users, id).await? {
        Some(_) => Ok(id),
        None => Err(crate::domain::user::gone()),
    }
}

/// The signed-in viewer's id for a write of kind `write`: [`member`], then
/// one such write spent from the account's rate limit (`RATE_LIMITED` with
/// `retryAfter` past it, on every instance alike).
pub(crate) async fn writer(
    ctx: &Context<'_>,
    write: crate::throttle::Write,
) -> Result<i64, AppError> {
    // The limit first: a refused write (a flood's) costs no statement when
    // the limit is known to refuse it, not even the account's lookup.
    let id = viewer(ctx).require()?;
    let app = app(ctx)?;
    app.accounts
        .limits
        .write(&app.db, write, id, app.clock.now())
        .await?;
    member(ctx).await
}

/// The SDL of the schema, built without a database (for `ephemera schema`
/// and the test that keeps `schema.graphql` in sync).
pub fn schema_sdl() -> String {
    sdl(&builder().finish())
}

fn builder() -> async_graphql::SchemaBuilder<
    query::QueryRoot,
    mutation::MutationRoot,
    subscription::SubscriptionRoot,
> {
    Schema::build(
        query::QueryRoot::default(),
        mutation::MutationRoot::default(),
        subscription::SubscriptionRoot,
    )
}
