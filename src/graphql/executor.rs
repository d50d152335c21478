//! The executor HTTP and websockets run every operation through
//! ([`GuardedExecutor`]): the schema behind a guard, a cache of parsed
//! documents, and the switch that lets a query hold one database connection.
//!
//! The guard refuses abusive or malformed requests before they run, and makes sure
//! every error a client sees carries an `extensions.code` from the contract:
//! - too deep (introspection aside), too complex, or too many aliases:
//!   `BAD_USER_INPUT` naming the limit;
//! - a mutation or subscription sent over HTTP GET: `BAD_USER_INPUT`;
//! - any other parse or validation error: `BAD_USER_INPUT`;
//! - an error raised without a code: logged, and sent as `INTERNAL_SERVER_ERROR`.
//!
//! It also remembers the documents it parsed (an LRU of
//! [`PARSED_DOCUMENTS`] query texts up to [`CACHED_QUERY_MAX`] bytes): clients
//! send the same few query texts over and over, and parsing one costs more
//! than running a small page. A remembered document is checked like a fresh
//! one.
//!
//! The guard wraps the schema as the [`Executor`] that HTTP and websockets
//! run operations through ([`GuardedExecutor`]) rather than being an async-graphql
//! extension: with any extension registered, async-graphql resolves every
//! field through a slower path (a registry lookup by type name, a
//! `ResolveInfo` and a boxed future per extension, for each field), which
//! the benchmarks measured at 15–20 % of the server's CPU on a tray page.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::parser::types::{ExecutableDocument, OperationType};
use async_graphql::{Data, Executor, Request, Response, ServerError};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use lru::LruCache;
use sha2::{Digest, Sha256};

use super::AppSchema;
use crate::error::{Code, INTERNAL_MESSAGE};
use crate::throttle::ClientAddr;

/// Marks a request that came over HTTP GET, where only queries are allowed.
#[derive(Clone, Copy, Debug)]
pub struct ViaGet;

/// How many parsed documents are remembered.
pub const PARSED_DOCUMENTS: usize = 256;

/// Longer query texts are parsed every time (they are rare, and this bounds
/// the memory the cache can hold).
pub const CACHED_QUERY_MAX: usize = 8 * 1024;

/// The limits the guard enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bounds on the raw text.
    pub document: super::document::Limits,
    /// Most fields with fragments expanded.
    pub max_fields: usize,
    pub max_depth: usize,
    pub max_complexity: usize,
    pub max_aliases: usize,
    /// Registrations of new persisted queries one client address may make
    /// (the cache is this instance's, and so is this count).
    pub persisted_per_address: crate::throttle::Rate,
}

/// Parsed documents by query text.
type Documents = Mutex<LruCache<String, ExecutableDocument>>;

/// How many persisted queries (Apollo's automatic persisted queries) are
/// remembered by hash.
pub const PERSISTED_QUERIES: usize = 1024;

/// The message with which a GET carrying a mutation is refused (HTTP
/// answers it 405).
pub const NOT_OVER_GET: &str = "mutations and subscriptions are not allowed over GET; use POST";

/// The guard: the limits, the documents parsed so far, and the persisted
/// queries.
struct Guard {
    limits: Limits,
    documents: Documents,
    persisted: Mutex<LruCache<String, String>>,
    /// Registrations per client address, so that no one client can flush
    /// the persisted queries of everyone else.
    registrations: Registrations,
}

type Registrations = governor::RateLimiter<
    std::net::IpAddr,
    governor::state::keyed::DefaultKeyedStateStore<std::net::IpAddr>,
    governor::clock::DefaultClock,
>;

/// A GCRA limiter at `rate`.
fn limiter_of(rate: crate::throttle::Rate) -> Registrations {
    let n = std::num::NonZeroU32::new(rate.n).unwrap_or(std::num::NonZeroU32::MIN);
    let burst = std::num::NonZeroU32::new(rate.burst).unwrap_or(n);
    let quota = governor::Quota::with_period(rate.per / rate.n.max(1))
        .unwrap_or_else(|| governor::Quota::per_second(n))
        .allow_burst(burst);
    governor::RateLimiter::keyed(quota)
}

impl Guard {
    fn new(limits: Limits) -> Self {
        let size = NonZeroUsize::new(PARSED_DOCUMENTS).unwrap_or(NonZeroUsize::MIN);
        let persisted = NonZeroUsize::new(PERSISTED_QUERIES).unwrap_or(NonZeroUsize::MIN);
        Self {
            registrations: limiter_of(limits.persisted_per_address),
            limits,
            documents: Mutex::new(LruCache::new(size)),
            persisted: Mutex::new(LruCache::new(persisted)),
        }
    }

    /// Apollo's automatic persisted queries: a request whose
    /// `extensions.persistedQuery.sha256Hash` names a query the guard knows
    /// may leave `query` out; one that sends both has the query remembered
    /// (if the hash is the query's: otherwise `BAD_USER_INPUT`) once it has
    /// passed every check of the guard, so a refused document is never
    /// remembered. Returns the hash to remember the query under. A hash
    /// alone that is not known answers `PERSISTED_QUERY_NOT_FOUND`, and the
    /// client sends the query with it. Queries over [`CACHED_QUERY_MAX`]
    /// bytes are not remembered.
    fn persisted_query(
        &self,
        request: &mut Request,
        client: Option<ClientAddr>,
    ) -> Result<Option<String>, ServerError> {
        let Some(pq) = request.extensions.get("persistedQuery") else {
            return Ok(None);
        };
        let hash = match pq {
            async_graphql::Value::Object(o) => match (o.get("version"), o.get("sha256Hash")) {
                (Some(async_graphql::Value::Number(v)), Some(async_graphql::Value::String(h)))
                    if v.as_u64() == Some(1) && h.len() == 64 =>
                {
                    h.to_ascii_lowercase()
                }
                _ => return Err(bad_input("persistedQuery needs version 1 and a sha256Hash")),
            },
            _ => return Err(bad_input("persistedQuery must be an object")),
        };
        if request.query.is_empty() {
            let known = self
                .persisted
                .lock()
                .ok()
                .and_then(|mut p| p.get(&hash).cloned());
            return match known {
                Some(query) => {
                    request.query = query;
                    Ok(None)
                }
                None => {
                    let mut e = ServerError::new("PersistedQueryNotFound", None);
                    e.extensions
                        .get_or_insert_with(Default::default)
                        .set("code", "PERSISTED_QUERY_NOT_FOUND");
                    Err(e)
                }
            };
        }
        let actual: String = Sha256::digest(request.query.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if actual != hash {
            return Err(bad_input("provided sha256Hash does not match the query"));
        }
        let known = self
            .persisted
            .lock()
            .ok()
            .is_some_and(|p| p.contains(&hash));
        if !known
            && let Some(ClientAddr(ip)) = client
            && let Err(not_until) = self.registrations.check_key(&ip)
        {
            use governor::clock::Clock;
            let wait = not_until.wait_time_from(governor::clock::DefaultClock::default().now());
            tracing::info!(%ip, "persisted query registration refused: rate limit");
            let mut e = ServerError::new(
                format!(
                    "too many persisted queries registered from this address; the limit is {}",
                    self.limits.persisted_per_address
                ),
                None,
            );
            let ext = e.extensions.get_or_insert_with(Default::default);
            ext.set("code", Code::RateLimited.as_str());
            ext.set("retryAfter", wait.as_secs().max(1));
            return Err(e);
        }
        Ok((request.query.len() <= CACHED_QUERY_MAX).then_some(hash))
    }

    fn remember_persisted(&self, hash: String, query: &str) {
        if let Ok(mut p) = self.persisted.lock() {
            p.put(hash, query.to_owned());
        }
    }

    fn recall(&self, query: &str) -> Option<ExecutableDocument> {
        if query.len() > CACHED_QUERY_MAX {
            return None;
        }
        let mut documents = self.documents.lock().ok()?;
        documents.get(query).cloned()
    }

    fn remember(&self, query: String, doc: &ExecutableDocument) {
        if let Ok(mut documents) = self.documents.lock() {
            documents.put(query, doc.clone());
        }
    }

    /// Parses (or recalls) the request's document and refuses it if it breaks
    /// a limit; otherwise hands the parsed document on with the request, and
    /// lets a query hold one database connection.
    fn check(&self, request: &mut Request, session: Option<&Data>) -> Result<(), ServerError> {
        let client = data_of::<ClientAddr>(request, session).copied();
        let persist = self.persisted_query(request, client)?;
        let remembered = match self.recall(&request.query) {
            Some(doc) => {
                request.set_parsed_query(doc);
                true
            }
            None => false,
        };
        let via_get = request.data.contains_key(&std::any::TypeId::of::<ViaGet>());
        // Longer texts are not remembered (nor copied to be).
        let to_remember =
            (!remembered && request.query.len() <= CACHED_QUERY_MAX).then(|| request.query.clone());
        let limits = &self.limits;
        if !remembered {
            super::document::scan(&request.query, limits.document)
                .map_err(|refused| bad_input(refused.message()))?;
        }
        let doc = request.parsed_query().map_err(syntax_error)?;
        let measure = super::document::measure(doc, limits.document.max_nesting)
            .map_err(|invalid| bad_input(invalid.message()))?;
        if measure.fields > limits.max_fields {
            return Err(bad_input(format!(
                "query selects {} fields with its fragments expanded; the limit is {}",
                measure.fields, limits.max_fields
            )));
        }
        // Spreads and inline fragments are walked too; each set holds at
        // least one field, so a document within the field limit has at most
        // about twice as many selections, unless it stacks spreads.
        let max_selections = limits.max_fields.saturating_mul(2);
        if measure.selections > max_selections {
            return Err(bad_input(format!(
                "query makes {} selections with its fragments expanded; the limit is {}",
                measure.selections, max_selections
            )));
        }
        if measure.aliases > limits.max_aliases {
            return Err(bad_input(format!(
                "query uses {} aliases; the limit is {}",
                measure.aliases, limits.max_aliases
            )));
        }
        if measure.depth > limits.max_depth
            || measure.depth_all > limits.max_depth.max(INTROSPECTION_DEPTH)
        {
            return Err(bad_input(format!(
                "query is nested too deep; the depth limit is {}",
                limits.max_depth
            )));
        }
        if let Some(query) = to_remember {
            self.remember(query, doc);
        }
        let query_only = is_query_only(doc);
        if via_get && !query_only {
            return Err(bad_input(NOT_OVER_GET));
        }
        if query_only {
            super::loaders::pin_query(request);
        }
        if let Some(hash) = persist {
            self.remember_persisted(hash, &request.query);
        }
        Ok(())
    }

    /// A response as clients see it: the complexity limit named, and a code
    /// on every error.
    fn finish(&self, mut response: Response) -> Response {
        for e in &mut response.errors {
            if e.message == "Query is too complex." {
                *e = bad_input(format!(
                    "query is too complex; the complexity limit is {}",
                    self.limits.max_complexity
                ));
            }
        }
        ensure_codes(response)
    }
}

/// The schema behind the guard: what HTTP requests and websocket operations
/// are run through.
#[derive(Clone)]
pub struct GuardedExecutor {
    schema: AppSchema,
    guard: Arc<Guard>,
    /// For the loaders (and the database budget) of a websocket's queries
    /// and mutations.
    state: crate::state::AppState,
}

impl GuardedExecutor {
    pub fn new(schema: AppSchema, state: crate::state::AppState, limits: Limits) -> Self {
        Self {
            schema,
            guard: Arc::new(Guard::new(limits)),
            state,
        }
    }
}

impl GuardedExecutor {
    /// Whose work a request is: its account, else its address.
    fn client_of(request: &Request, session: Option<&Data>) -> Option<String> {
        if let Some(id) = data_of::<crate::auth::Viewer>(request, session).and_then(|v| v.id()) {
            return Some(format!("account:{id}"));
        }
        data_of::<ClientAddr>(request, session).map(|ClientAddr(ip)| format!("address:{ip}"))
    }

    /// The request's database handle, whose budget says what it spent.
    fn request_db(request: &Request) -> Option<Arc<crate::db::RequestDb>> {
        data_of::<super::loaders::Loaders>(request, None).map(|l| l.db.clone())
    }

    /// Charges to `client` what its request spent: `busy`, the time it
    /// kept a thread busy, and the database time of `db`'s statements.
    fn charge(&self, client: Option<&str>, db: Option<&crate::db::RequestDb>, busy: Duration) {
        let Some(client) = client else { return };
        let waited = db
            .and_then(|d| d.budget())
            .map(|b| b.spent())
            .unwrap_or_default();
        self.state.work.charge(client, busy + waited);
    }
}

/// Runs `work`; its output and the time it was being polled, that is the
/// time it kept a thread busy (its waits, on the database or on other
/// requests, left out).
async fn busy<F: Future>(work: F) -> (F::Output, Duration) {
    let mut work = std::pin::pin!(work);
    let mut spent = Duration::ZERO;
    let output = std::future::poll_fn(|cx| {
        let started = std::time::Instant::now();
        let poll = work.as_mut().poll(cx);
        spent += started.elapsed();
        poll
    })
    .await;
    (output, spent)
}

/// A value of type `T` the request carries, or else its websocket session.
fn data_of<'a, T: std::any::Any>(request: &'a Request, session: Option<&'a Data>) -> Option<&'a T> {
    let id = std::any::TypeId::of::<T>();
    request
        .data
        .get(&id)
        .or_else(|| session.and_then(|d| d.get(&id)))
        .and_then(|v| v.downcast_ref::<T>())
}

impl Executor for GuardedExecutor {
    async fn execute(&self, mut request: Request) -> Response {
        // A client past its share is refused before its document is even
        // parsed; what parsing costs is charged, valid or not.
        let client = Self::client_of(&request, None);
        if let Some(client) = &client
            && let Err(e) = self.state.work.admit(client).await
        {
            return Response::from_errors(vec![refusal(e)]);
        }
        let (checked, parsing) = busy(async { self.guard.check(&mut request, None) }).await;
        if let Err(e) = checked {
            self.charge(client.as_deref(), None, parsing);
            return Response::from_errors(vec![e]);
        }
        let db = Self::request_db(&request);
        let (response, executing) = busy(self.schema.execute(request)).await;
        let response = self.guard.finish(response);
        self.charge(client.as_deref(), db.as_deref(), parsing + executing);
        response
    }

    fn execute_stream(
        &self,
        mut request: Request,
        session_data: Option<Arc<Data>>,
    ) -> BoxStream<'static, Response> {
        let this = self.clone();
        async_stream::stream! {
            // A client past its share is refused before its document is
            // even parsed; what parsing costs is charged, valid or not.
            let client = Self::client_of(&request, session_data.as_deref());
            if let Some(client) = &client
                && let Err(e) = this.state.work.admit(client).await
            {
                yield Response::from_errors(vec![refusal(e)]);
                return;
            }
            let started = std::time::Instant::now();
            let checked = this.guard.check(&mut request, session_data.as_deref());
            let parsing = started.elapsed();
            if let Err(e) = checked {
                this.charge(client.as_deref(), None, parsing);
                yield Response::from_errors(vec![e]);
                return;
            }
            // A query or mutation over a websocket gets loaders of its own,
            // as over HTTP: cached for it alone, its statements under the
            // request budget, its work charged when it ends. A subscription
            // keeps the shared, uncached ones (it lives long; each event is
            // read fresh).
            let (one_shot, query_only) = request.parsed_query().map_or((false, false), |doc| {
                (!has_subscription(doc), is_query_only(doc))
            });
            if !one_shot {
                this.charge(client.as_deref(), None, parsing);
                let mut events = Executor::execute_stream(&this.schema, request, session_data);
                while let Some(r) = events.next().await {
                    yield this.guard.finish(r);
                }
                return;
            }
            if data_of::<super::loaders::Loaders>(&request, None).is_none() {
                request = request.data(super::loaders::Loaders::per_request(&this.state));
                if query_only {
                    super::loaders::pin_query(&request);
                }
            }
            let db = Self::request_db(&request);
            let mut responses = Executor::execute_stream(&this.schema, request, session_data);
            let mut spent = parsing;
            loop {
                let (next, executing) = busy(responses.next()).await;
                spent += executing;
                let Some(r) = next else { break };
                yield this.guard.finish(r);
            }
            this.charge(client.as_deref(), db.as_deref(), spent);
        }
        .boxed()
    }
}

/// A refusal decided before the request ran, as the client sees it: the
/// error's message, code and `retryAfter`, and no location.
fn refusal(err: crate::error::AppError) -> ServerError {
    let retry_after = err.retry_after();
    let mut e = ServerError::new(err.message(), None);
    set_code(&mut e, err.code());
    if let Some(secs) = retry_after {
        e.extensions
            .get_or_insert_with(Default::default)
            .set("retryAfter", secs);
    }
    e
}

fn bad_input(message: impl Into<String>) -> ServerError {
    let mut e = ServerError::new(message, None);
    set_code(&mut e, Code::BadUserInput);
    e
}

/// A parse error as clients see it: where, and what was expected, without
/// the document's text (which the parser's message quotes, a whole line of
/// it, however long).
fn syntax_error(e: ServerError) -> ServerError {
    let expected = e
        .message
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("= "))
        .map(|x| x.chars().take(120).collect::<String>());
    let place = e
        .locations
        .first()
        .map(|p| format!(" at line {}, column {}", p.line, p.column))
        .unwrap_or_default();
    let message = match expected {
        Some(x) => format!("syntax error{place}: {x}"),
        None => format!("syntax error{place}"),
    };
    let mut refused = ServerError::new(message, None);
    refused.locations = e.locations;
    set_code(&mut refused, Code::BadUserInput);
    refused
}

fn set_code(e: &mut ServerError, code: Code) {
    e.extensions
        .get_or_insert_with(Default::default)
        .set("code", code.as_str());
}

fn has_code(e: &ServerError) -> bool {
    e.extensions
        .as_ref()
        .is_some_and(|x| x.get("code").is_some())
}

/// Gives every code-less error a code: client mistakes (no path: parsing,
/// validation, argument coercion) are `BAD_USER_INPUT`; anything raised while
/// resolving without a code is an internal failure, whose text is logged
/// rather than sent.
fn ensure_codes(mut response: Response) -> Response {
    for e in &mut response.errors {
        if has_code(e) {
            continue;
        }
        let is_input_error = e.path.is_empty()
            || e.message.starts_with("Invalid value for argument")
            || e.message.starts_with("Failed to parse")
            // A variable of the wrong shape for an input object or list
            // (`{"i": 5}`), found while coercing the field's arguments.
            || e.message.starts_with("Expected input type ")
            // A required variable the request did not send.
            || (e.message.starts_with("Variable ") && e.message.ends_with(" is not defined."));
        if is_input_error {
            set_code(e, Code::BadUserInput);
        } else {
            tracing::error!(message = %e.message, path = ?e.path, "uncoded resolver error");
            e.message = INTERNAL_MESSAGE.to_owned();
            set_code(e, Code::Internal);
        }
    }
    response
}

/// How deep introspection may nest. GraphiQL's schema query nests deeper than
/// any API query needs (chains of `ofType`), so introspection has a limit of
/// its own; it is still bounded, since nested introspection can explode.
const INTROSPECTION_DEPTH: usize = 20;

fn has_subscription(doc: &ExecutableDocument) -> bool {
    doc.operations
        .iter()
        .any(|(_, op)| op.node.ty == OperationType::Subscription)
}

fn is_query_only(doc: &ExecutableDocument) -> bool {
    doc.operations
        .iter()
        .all(|(_, op)| op.node.ty == OperationType::Query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_kinds() {
        let q = async_graphql::parser::parse_query("query { a: viewer { id } }").unwrap();
        assert!(is_query_only(&q));
        let m = async_graphql::parser::parse_query("mutation { signIn }").unwrap();
        assert!(!is_query_only(&m));
    }

    #[test]
    fn syntax_errors_name_the_place_not_the_text() {
        let text = format!("{{ viewer {{ id {} ", "x ".repeat(500));
        let e = async_graphql::parser::parse_query(&text).unwrap_err();
        let e = syntax_error(e.into());
        assert!(
            e.message.starts_with("syntax error at line 1, column"),
            "{}",
            e.message
        );
        assert!(e.message.len() < 200, "{}", e.message);
    }
}
