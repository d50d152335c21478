//! The HTTP surface: `/graphql` (POST with JSON or a multipart upload, GET
//! for queries only, and the websocket upgrade on the same URL, both
//! `graphql-transport-ws` and the legacy `graphql-ws`), `/media/<key>` for
//! the local media store, GraphiQL at `/` with its assets embedded in the
//! binary, `/healthz` and `/metrics`.
//!
//! Our own handlers stand in front of async-graphql so that a bad token is
//! refused before anything runs, request bodies are capped (uploads while
//! they stream in), batches are bounded, malformed JSON is a 400 with a
//! GraphQL error (never a 5xx), mutations over GET are refused, and a
//! multipart request without Apollo's preflight header (which a cross-site
//! form cannot send) is refused before its body is read.

mod media;
mod multipart;
mod serve;
mod ws;

pub use serve::{Peer, ServeLimits, serve};

use async_graphql::http::WebSocketProtocols;
use async_graphql::{BatchRequest, BatchResponse, Executor};
use axum::body::Bytes;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::TraceLayer;

use crate::auth::{Bearer, Viewer};
use crate::domain::session;
use crate::error::AppError;
use crate::graphql::executor::{GuardedExecutor, NOT_OVER_GET, ViaGet};
use crate::graphql::loaders::Loaders;
use crate::graphql::{self, AppSchema};
use crate::state::AppState;
use crate::throttle::{ClientAddr, PasswordBudget};

#[derive(Clone)]
struct HttpState {
    app: AppState,
    schema: GuardedExecutor,
    /// Open websockets, overall and per client address.
    websockets: serve::Counter,
}

/// The router of the whole server.
pub fn router(app: AppState, schema: AppSchema) -> Router {
    let config = app.config.clone();
    let mut router = Router::new();
    if config.server.graphiql {
        router = router
            .route("/", get(graphiql_page))
            .route("/graphiql/{file}", get(graphiql_asset));
    }
    let mut router = router
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/graphql", get(graphql_get).post(graphql_post))
        .route("/media/{dir}/{name}", get(media::serve).put(media::receive))
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .with_state(HttpState {
            schema: graphql::executor(schema, &app),
            app,
            websockets: serve::Counter::default(),
        })
        .layer(DefaultBodyLimit::max(config.http.max_body_bytes))
        .layer(TraceLayer::new_for_http());
    let origins: Vec<HeaderValue> = config
        .server
        .cors_origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o.trim()).ok())
        .collect();
    if !origins.is_empty() {
        router = router.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([Method::GET, Method::POST, Method::PUT])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    HeaderName::from_static(PREFLIGHT_HEADERS[0]),
                    HeaderName::from_static(PREFLIGHT_HEADERS[1]),
                ]),
        );
    }
    router
}

/// A GraphQL-shaped error response outside the executor.
fn error_response(status: StatusCode, err: &AppError) -> Response {
    (status, Json(err.to_graphql_json())).into_response()
}

/// A refusal decided before the request's body was read: in the media type
/// the client accepts, and with `Connection: close`, since the unread body
/// still stands between this response and the next request on the
/// connection (hyper closes it; the client is told so, and does not send
/// its next request into a closing socket).
fn refuse_unread(status: StatusCode, err: &AppError, headers: &HeaderMap) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, Reply::of(headers).content_type()),
            (header::CONNECTION, "close"),
        ],
        Json(err.to_graphql_json()),
    )
        .into_response()
}

/// The token an `Authorization` header value carries, and the viewer it
/// stands for while its session lasts.
async fn authenticate(
    app: &AppState,
    header: Option<&str>,
) -> Result<(Viewer, Option<Bearer>), AppError> {
    let bearer = app.accounts.tokens.bearer_from_header(header, &app.clock)?;
    let sessions = &app.accounts.sessions;
    let viewer = session::viewer(&app.db, sessions, bearer, app.clock.now()).await?;
    Ok((viewer, bearer))
}

/// Who is calling: the viewer (and the token's session), the client's
/// address, and the password check the HTTP request (all operations of a
/// batch together) may spend.
#[derive(Clone)]
struct Caller {
    viewer: Viewer,
    bearer: Option<Bearer>,
    client: Option<ClientAddr>,
    budget: PasswordBudget,
}

impl Caller {
    async fn new(
        state: &HttpState,
        headers: &HeaderMap,
        peer: Option<Peer>,
    ) -> Result<Self, AppError> {
        let header = headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or("?"));
        let (viewer, bearer) = authenticate(&state.app, header).await?;
        Ok(Self {
            viewer,
            bearer,
            client: client_addr(headers, peer, state.app.config.http.trusted_proxies),
            budget: PasswordBudget::default(),
        })
    }
}

/// The client's address: the peer's, or with `trusted` proxies in front,
/// the entry of `X-Forwarded-For` that many places from the right (each
/// proxy appends the address that reached it, so entries further left are
/// whatever the client claimed).
fn client_addr(headers: &HeaderMap, peer: Option<Peer>, trusted: usize) -> Option<ClientAddr> {
    let peer = peer.map(|Peer(ip)| ClientAddr(ip));
    if trusted == 0 {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let index = hops.len().checked_sub(trusted)?;
    hops.get(index)
        .and_then(|h| h.parse().ok())
        .map(ClientAddr)
        .or(peer)
}

/// Attaches what resolvers read per request: the caller and fresh loaders.
fn with_context(
    state: &HttpState,
    request: async_graphql::Request,
    caller: &Caller,
) -> async_graphql::Request {
    let mut request = request
        .data(caller.viewer)
        .data(caller.budget.clone())
        .data(Loaders::per_request(&state.app));
    if let Some(client) = caller.client {
        request = request.data(client);
    }
    if let Some(bearer) = caller.bearer {
        request = request.data(bearer);
    }
    request
}

/// Initial read buffer of a websocket (it grows for a larger message).
const WS_READ_BUFFER: usize = 4 * 1024;

/// Headers of which a multipart request must carry one, non-empty (Apollo's
/// CSRF convention): a browser sends them only after a CORS preflight.
const PREFLIGHT_HEADERS: [&str; 2] = ["apollo-require-preflight", "x-apollo-operation-name"];

async fn graphql_post(State(state): State<HttpState>, request: Request) -> Response {
    let headers = request.headers().clone();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let is_multipart = content_type.starts_with("multipart/form-data");
    let reply = Reply::of(&headers);
    if !content_type.starts_with("application/json") && !is_multipart {
        return error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &AppError::bad_input(
                "Content-Type must be application/json, or multipart/form-data for uploads",
            ),
        );
    }
    if is_multipart {
        let preflighted = PREFLIGHT_HEADERS.iter().any(|name| {
            headers
                .get(*name)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| !v.trim().is_empty())
        });
        if !preflighted {
            return refuse_unread(
                StatusCode::BAD_REQUEST,
                &AppError::bad_input(
                    "a multipart request must carry a non-empty Apollo-Require-Preflight or \
                     X-Apollo-Operation-Name header (CSRF protection)",
                ),
                &headers,
            );
        }
    }
    let peer = request.extensions().get::<Peer>().copied();
    let caller = match Caller::new(&state, &headers, peer).await {
        Ok(c) => c,
        Err(e) => return refuse_unread(StatusCode::UNAUTHORIZED, &e, &headers),
    };
    let batch = if is_multipart {
        if caller.viewer == Viewer::Anonymous {
            return refuse_unread(
                StatusCode::UNAUTHORIZED,
                &AppError::sign_in_required(),
                &headers,
            );
        }
        let limits = multipart::Limits {
            max_file: state.app.config.media.max_upload_bytes,
            max_part: state.app.config.http.max_body_bytes as u64,
        };
        match multipart::parse(request.into_body(), &content_type, limits, parse_batch).await {
            Ok(b) => b,
            Err((status, e)) => return error_response(status, &e),
        }
    } else {
        let body = match Bytes::from_request(request, &()).await {
            Ok(b) => b,
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                let limit = state.app.config.http.max_body_bytes;
                return error_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &AppError::payload_too_large(format!(
                        "request body is larger than {limit} bytes"
                    )),
                );
            }
            Err(rejection) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    &AppError::bad_input(format!("could not read the request body: {rejection}")),
                );
            }
        };
        match parse_batch(&body) {
            Ok(b) => b,
            Err(e) => return error_response(StatusCode::BAD_REQUEST, &e),
        }
    };
    let missing = match &batch {
        BatchRequest::Single(r) => !names_a_query(r),
        BatchRequest::Batch(rs) => !rs.iter().all(names_a_query),
    };
    if missing {
        return error_response(
            StatusCode::BAD_REQUEST,
            &AppError::bad_input("the request has no query"),
        );
    }
    let max = state.app.config.graphql.max_batch;
    let batch = match batch {
        BatchRequest::Single(r) => BatchRequest::Single(with_context(&state, r, &caller)),
        BatchRequest::Batch(rs) if rs.len() > max => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &AppError::bad_input(format!(
                    "batch of {} operations; the batch size limit is {max}",
                    rs.len()
                )),
            );
        }
        BatchRequest::Batch(rs) => BatchRequest::Batch(
            rs.into_iter()
                .map(|r| with_context(&state, r, &caller))
                .collect(),
        ),
    };
    match state.schema.execute_batch(batch).await {
        BatchResponse::Single(r) => graphql_response(reply, r),
        batch @ BatchResponse::Batch(_) => {
            ([(header::CONTENT_TYPE, reply.content_type())], Json(batch)).into_response()
        }
    }
}

/// The media type a GraphQL response goes out as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    /// `application/json`: every response 200, as legacy clients expect.
    Json,
    /// `application/graphql-response+json`, when the client accepts it: a
    /// request error (nothing executed) is 400 and has no `data`.
    GraphqlResponse,
}

impl Reply {
    fn of(headers: &HeaderMap) -> Self {
        let accepts = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("application/graphql-response+json"));
        if accepts {
            Reply::GraphqlResponse
        } else {
            Reply::Json
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Reply::Json => "application/json",
            Reply::GraphqlResponse => "application/graphql-response+json; charset=utf-8",
        }
    }
}

/// One operation's response as GraphQL over HTTP says: a request error
/// (parse, validation, variables, limits: errors without a path and no
/// data) is 400 without `data` under `application/graphql-response+json`;
/// under `application/json` everything is 200.
fn graphql_response(reply: Reply, response: async_graphql::Response) -> Response {
    let request_error = response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| e.path.is_empty());
    if reply == Reply::Json || !request_error {
        return (
            [(header::CONTENT_TYPE, reply.content_type())],
            Json(response),
        )
            .into_response();
    }
    let mut body = serde_json::to_value(&response).unwrap_or_default();
    if let Some(o) = body.as_object_mut() {
        o.remove("data");
    }
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, reply.content_type())],
        Json(body),
    )
        .into_response()
}

/// What was wrong with a GET's parameters, without serde's own type names.
fn get_problem(e: &dyn std::fmt::Display) -> &'static str {
    let text = e.to_string();
    if text.contains("variables") {
        "`variables` is not a JSON object"
    } else if text.contains("extensions") {
        "`extensions` is not a JSON object"
    } else {
        "they could not be read"
    }
}

/// Whether a request names what to run: a query, or a persisted query's hash.
fn names_a_query(r: &async_graphql::Request) -> bool {
    !r.query.is_empty() || r.extensions.contains_key("persistedQuery")
}

/// A request body: one operation object, or a non-empty array of them.
fn parse_batch(body: &[u8]) -> Result<BatchRequest, AppError> {
    let malformed =
        |e: &dyn std::fmt::Display| AppError::bad_input(format!("malformed GraphQL request: {e}"));
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| malformed(&e))?;
    let shape_ok = match &value {
        serde_json::Value::Object(_) => true,
        serde_json::Value::Array(items) => items.iter().all(serde_json::Value::is_object),
        _ => false,
    };
    if !shape_ok {
        return Err(malformed(
            &"expected an operation object or an array of them",
        ));
    }
    if value.as_array().is_some_and(Vec::is_empty) {
        return Err(AppError::bad_input("empty batch"));
    }
    let operations = match &value {
        serde_json::Value::Array(items) => items.iter().collect(),
        one => vec![one],
    };
    if let Some(wrong) = operations.into_iter().find_map(misshapen) {
        return Err(malformed(&wrong));
    }
    // The shape was checked: what serde says now names its own types, not
    // the request's; the client is told the rule instead.
    serde_json::from_value(value).map_err(|_| malformed(&OPERATION_SHAPE))
}

/// What an operation object holds, as clients are told when it does not.
const OPERATION_SHAPE: &str = "an operation is an object with `query` (a string), and optionally \
     `variables` (an object), `operationName` (a string) and `extensions` (an object)";

/// Why an operation object is not of [`OPERATION_SHAPE`], if it is not.
fn misshapen(op: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    let o = op.as_object()?;
    let kind = |field: &str, ok: fn(&Value) -> bool, what: &str| {
        o.get(field)
            .filter(|v| !v.is_null() && !ok(v))
            .map(|_| format!("`{field}` must be {what}"))
    };
    kind("query", Value::is_string, "a string")
        .or_else(|| kind("variables", Value::is_object, "an object"))
        .or_else(|| kind("operationName", Value::is_string, "a string"))
        .or_else(|| kind("extensions", Value::is_object, "an object"))
}

async fn graphql_get(State(state): State<HttpState>, request: Request) -> Response {
    let is_upgrade = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if is_upgrade {
        return websocket(state, request).await;
    }
    let peer = request.extensions().get::<Peer>().copied();
    let caller = match Caller::new(&state, request.headers(), peer).await {
        Ok(c) => c,
        Err(e) => {
            let reply = Reply::of(request.headers());
            return (
                StatusCode::UNAUTHORIZED,
                [(header::CONTENT_TYPE, reply.content_type())],
                Json(e.to_graphql_json()),
            )
                .into_response();
        }
    };
    let query = request.uri().query().unwrap_or_default();
    let gql = match async_graphql::http::parse_query_string(query) {
        Ok(r) => r,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &AppError::bad_input(format!(
                    "malformed GraphQL request: the parameters are `query`, `variables` (a JSON object), \
                     `operationName` and `extensions` (a JSON object); {}",
                    get_problem(&e)
                )),
            );
        }
    };
    if !names_a_query(&gql) {
        return error_response(
            StatusCode::BAD_REQUEST,
            &AppError::bad_input("the request has no query parameter"),
        );
    }
    let reply = Reply::of(request.headers());
    let response = state
        .schema
        .execute(with_context(&state, gql, &caller).data(ViaGet))
        .await;
    if response.errors.iter().any(|e| e.message == NOT_OVER_GET) {
        let mut refused = graphql_response(Reply::Json, response);
        *refused.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        refused
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return refused;
    }
    graphql_response(reply, response)
}

async fn websocket(state: HttpState, request: Request) -> Response {
    let (mut parts, _body) = request.into_parts();
    let protocol = parts
        .headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().parse::<WebSocketProtocols>().ok());
    let Some(protocol) = protocol else {
        return error_response(
            StatusCode::BAD_REQUEST,
            &AppError::bad_input(
                "Sec-WebSocket-Protocol must be graphql-transport-ws or graphql-ws",
            ),
        );
    };
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => u,
        Err(rejection) => return rejection.into_response(),
    };
    let peer = parts.extensions.get::<Peer>().copied();
    let client = client_addr(&parts.headers, peer, state.app.config.http.trusted_proxies);
    let HttpState {
        app,
        schema,
        websockets,
    } = state;
    let config = &app.config;
    // Without a known address (not served through our accept loop), all
    // such sockets share one count.
    let ip = client.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |ClientAddr(ip)| ip);
    let admitted = websockets.admit(ip, config.ws.max_sockets, config.ws.max_sockets_per_address);
    let Some(admitted) = admitted else {
        return error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &AppError::rate_limited(
                "too many open websockets; try again later",
                std::time::Duration::from_secs(5),
            ),
        );
    };
    let limits = ws::WsLimits {
        init_timeout: config.ws.init_timeout,
        keepalive: config.ws.keepalive,
        max_operations: config.ws.max_operations,
    };
    // A websocket message is held to the same cap as a request body.
    let max = config.http.max_body_bytes;
    upgrade
        .protocols([protocol.sec_websocket_protocol()])
        .max_message_size(max)
        .max_frame_size(max)
        // Small buffers that grow when a message needs them: an idle
        // subscriber then costs a few KiB, not the 128 KiB read buffer and
        // 128 KiB write target the defaults give each socket (measured by
        // the subscription benchmark).
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(0)
        .on_upgrade(move |socket| async move {
            let recheck = app.clone();
            let session = ws::Session {
                ended: app.events.ended(),
                client,
                authenticate: Box::new(move |payload: serde_json::Value| {
                    Box::pin(async move {
                        let header = payload
                            .get("authorization")
                            .or_else(|| payload.get("Authorization"))
                            .and_then(|v| v.as_str());
                        authenticate(&app, header).await
                    })
                }),
                still_valid: Box::new(move |bearer| {
                    let app = recheck.clone();
                    Box::pin(async move {
                        // A failed check (database away) keeps the socket.
                        let (sessions, now) = (&app.accounts.sessions, app.clock.now());
                        session::alive(&app.db, sessions, bearer, now)
                            .await
                            .unwrap_or_else(|e| {
                                e.log();
                                true
                            })
                    })
                }),
            };
            ws::serve(socket, protocol, schema, limits, session).await;
            drop(admitted);
        })
}

async fn health(State(state): State<HttpState>) -> Response {
    match state.app.db.ping().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => {
            tracing::error!(error = ?e, "health check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable\n").into_response()
        }
    }
}

/// Prometheus text exposition of the few numbers the server keeps.
async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.app.config.server.metrics_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !crate::signing::same_secret(given.as_bytes(), token.as_bytes()) {
            tracing::info!("metrics refused: no or wrong token");
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a metrics token is required\n",
            )
                .into_response();
        }
    }
    metrics_text(&state).into_response()
}

fn metrics_text(state: &HttpState) -> Response {
    let stats = &state.app.db_stats;
    let media = &state.app.media.stats;
    let body = format!(
        "# HELP ephemera_db_statements_total SQL statements run.\n\
         # TYPE ephemera_db_statements_total counter\n\
         ephemera_db_statements_total {}\n\
         # HELP ephemera_db_statement_failures_total SQL statements that failed.\n\
         # TYPE ephemera_db_statement_failures_total counter\n\
         ephemera_db_statement_failures_total {}\n\
         # HELP ephemera_db_query_connections_total Connections GraphQL queries held for all their statements.\n\
         # TYPE ephemera_db_query_connections_total counter\n\
         ephemera_db_query_connections_total {}\n\
         # HELP ephemera_db_query_connections_opened_total Connections opened for GraphQL queries to hold (kept between requests).\n\
         # TYPE ephemera_db_query_connections_opened_total counter\n\
         ephemera_db_query_connections_opened_total {}\n\
         # HELP ephemera_subscribers Connected subscription streams.\n\
         # TYPE ephemera_subscribers gauge\n\
         ephemera_subscribers {}\n\
         # HELP ephemera_event_log_statements_total SQL statements of the change log's reader and of subscribers catching up.\n\
         # TYPE ephemera_event_log_statements_total counter\n\
         ephemera_event_log_statements_total {}\n\
         # HELP ephemera_node_id The node id in the ids this instance makes.\n\
         # TYPE ephemera_node_id gauge\n\
         ephemera_node_id {}\n\
         # HELP ephemera_media_uploads_total Media stored (uploads and checked direct uploads).\n\
         # TYPE ephemera_media_uploads_total counter\n\
         ephemera_media_uploads_total {}\n\
         # HELP ephemera_media_blobs_deleted_total Blobs the media job deleted.\n\
         # TYPE ephemera_media_blobs_deleted_total counter\n\
         ephemera_media_blobs_deleted_total {}\n\
         # HELP ephemera_media_blob_delete_failures_total Blob deletions that failed (each is retried).\n\
         # TYPE ephemera_media_blob_delete_failures_total counter\n\
         ephemera_media_blob_delete_failures_total {}\n\
         # HELP ephemera_media_deletions_waiting Blobs still queued for deletion after the media job's last run.\n\
         # TYPE ephemera_media_deletions_waiting gauge\n\
         ephemera_media_deletions_waiting {}\n",
        stats.statements(),
        stats.failures(),
        stats.pinned(),
        stats.query_connections_opened(),
        state.app.events.subscribers(),
        state.app.log_stats.statements(),
        state.app.ids.node(),
        media.uploads(),
        media.deleted(),
        media.failed(),
        media.waiting(),
    );
    let mut body = body;
    body.push_str(
        "# HELP ephemera_limits_refused_total Actions refused by a rate limit, by kind.\n\
         # TYPE ephemera_limits_refused_total counter\n",
    );
    let work = ("db-time", state.app.work.refused());
    for (kind, n) in state
        .app
        .accounts
        .limits
        .refused()
        .into_iter()
        .chain([work])
    {
        body.push_str(&format!(
            "ephemera_limits_refused_total{{kind=\"{kind}\"}} {n}\n"
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// The playground's page: only its own scripts and styles, only this
/// server to talk to, and never inside another site's frame.
async fn graphiql_page() -> Response {
    (
        [
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                 img-src 'self' data:; font-src 'self' data:; connect-src 'self'; \
                 frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        Html(include_str!("graphiql/index.html")),
    )
        .into_response()
}

macro_rules! asset {
    ($path:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/web/node_modules/",
            $path
        ))
    };
}

/// GraphiQL's files, fetched from the npm registry at build time (see
/// `build.rs` and `web/package-lock.json`) and embedded, so the playground
/// works with no internet access.
async fn graphiql_asset(Path(file): Path<String>) -> Response {
    let (bytes, content_type): (&'static [u8], &str) = match file.as_str() {
        "graphiql.min.css" => (asset!("graphiql/graphiql.min.css"), "text/css"),
        "graphiql.min.js" => (asset!("graphiql/graphiql.min.js"), "text/javascript"),
        "react.production.min.js" => (
            asset!("react/umd/react.production.min.js"),
            "text/javascript",
        ),
        "react-dom.production.min.js" => (
            asset!("react-dom/umd/react-dom.production.min.js"),
            "text/javascript",
        ),
        "graphql-ws.min.js" => (
            asset!("graphql-ws/umd/graphql-ws.min.js"),
            "text/javascript",
        ),
        "init.js" => (include_bytes!("graphiql/init.js"), "text/javascript"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        bytes,
    )
        .into_response()
}
