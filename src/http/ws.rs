//! GraphQL over websockets, both `graphql-transport-ws` and the legacy
//! `graphql-ws` (subscriptions-transport-ws), served by our own loop over
//! the guarded executor rather than async-graphql's, for four properties
//! that loop lacks:
//! - **O(1) work per delivered event.** The operations of a socket are one
//!   `SelectAll`, which polls only the streams that were woken; async-graphql
//!   polls every stream of the socket for each message it sends, so one
//!   event to N subscriptions on a socket cost N² polls.
//! - **Bounded operations**: at most `max_operations` at once per socket;
//!   one more is answered with an `error` message (`RATE_LIMITED`).
//! - **A real init deadline**: only `connection_init` ends the wait for it;
//!   pings before it are answered at once (never buffered), and more than
//!   [`MAX_BEFORE_INIT`] messages before it close the socket (4400).
//! - **Keepalive and session checks**: a websocket ping every `keepalive`;
//!   a socket silent for three of them is closed (4408), and so is one whose
//!   session ends (4403: signed out, password changed, account deleted), at
//!   once on this instance and at the next keepalive on any other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_graphql::http::{ClientMessage, WebSocketProtocols as Protocols};
use async_graphql::{Data, Executor, Response};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::future::BoxFuture;
use futures_util::stream::{AbortHandle, Abortable, BoxStream, SelectAll};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::auth::{Bearer, Viewer};
use crate::error::AppError;
use crate::events::Ended;
use crate::graphql::executor::GuardedExecutor;
use crate::throttle::{ClientAddr, PasswordBudget};

/// Messages a client may send before `connection_init` (pings, mostly).
pub const MAX_BEFORE_INIT: usize = 8;

/// How a socket is served.
#[derive(Clone, Copy, Debug)]
pub struct WsLimits {
    pub init_timeout: Duration,
    pub keepalive: Duration,
    pub max_operations: usize,
}

/// Checks `connection_init`'s payload: the viewer and its token, or why not.
pub type Authenticate =
    Box<dyn FnOnce(Value) -> BoxFuture<'static, Result<(Viewer, Option<Bearer>), AppError>> + Send>;

/// Whether a token's session still lasts (asked at every keepalive).
pub type StillValid = Box<dyn Fn(Bearer) -> BoxFuture<'static, bool> + Send + Sync>;

/// What the socket's session needs from the rest of the server.
pub struct Session {
    pub authenticate: Authenticate,
    pub still_valid: StillValid,
    /// Sessions ended on this instance, as they end.
    pub ended: tokio::sync::broadcast::Receiver<Ended>,
    pub client: Option<ClientAddr>,
}

/// The socket's output, in the socket's protocol.
struct Out {
    protocol: Protocols,
}

impl Out {
    /// A `next` (`data`) message, written straight from the response (not
    /// through a `Value` tree: one per delivered event).
    fn next(&self, id: &str, payload: &Response) -> Message {
        #[derive(serde::Serialize)]
        struct Next<'a> {
            r#type: &'static str,
            id: &'a str,
            payload: &'a Response,
        }
        let r#type = match self.protocol {
            Protocols::GraphQLWS => "next",
            Protocols::SubscriptionsTransportWS => "data",
        };
        match serde_json::to_string(&Next {
            r#type,
            id,
            payload,
        }) {
            Ok(s) => Message::Text(s.into()),
            Err(e) => self.error(id, &AppError::internal("writing a response", e)),
        }
    }

    fn complete(id: &str) -> Message {
        text(&json!({ "type": "complete", "id": id }))
    }

    fn error(&self, id: &str, e: &AppError) -> Message {
        let error = &e.to_graphql_json()["errors"][0];
        let payload = match self.protocol {
            Protocols::GraphQLWS => json!([error]),
            Protocols::SubscriptionsTransportWS => error.clone(),
        };
        text(&json!({ "type": "error", "id": id, "payload": payload }))
    }
}

fn text(v: &Value) -> Message {
    Message::Text(v.to_string().into())
}

fn close(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// A message's JSON, or `None` for what is not a protocol message.
fn client_message(message: &Message) -> Option<serde_json::Result<ClientMessage>> {
    match message {
        Message::Text(t) => Some(ClientMessage::from_bytes(t.as_bytes())),
        Message::Binary(b) => Some(ClientMessage::from_bytes(b)),
        _ => None,
    }
}

/// Messages of operations that were ready together written at once, at
/// most, after a message of the loop's (then flushed).
const MAX_COALESCED: usize = 64;

/// The message for an operation's item: its next response, or, when its
/// stream ended, `complete` (the operation forgotten). `None` for an
/// operation stopped meanwhile.
fn operation_message(
    out: &Out,
    key: u64,
    item: Option<Response>,
    by_id: &mut HashMap<String, (u64, AbortHandle)>,
    by_key: &mut HashMap<u64, String>,
) -> Option<Message> {
    match item {
        Some(response) => by_key.get(&key).map(|id| out.next(id, &response)),
        None => by_key.remove(&key).map(|id| {
            by_id.remove(&id);
            Out::complete(&id)
        }),
    }
}

/// Serves one upgraded socket until either side ends it.
pub async fn serve(
    socket: WebSocket,
    protocol: Protocols,
    executor: GuardedExecutor,
    limits: WsLimits,
    mut session: Session,
) {
    let (mut sink, mut stream) = socket.split();
    let out = Out { protocol };

    // Until connection_init.
    let deadline = tokio::time::sleep(limits.init_timeout);
    tokio::pin!(deadline);
    let mut early = 0usize;
    let (viewer, bearer) = loop {
        let message = tokio::select! {
            () = &mut deadline => {
                let _ = sink.send(close(4408, "Connection initialisation timeout")).await;
                return;
            }
            m = stream.next() => match m {
                Some(Ok(m)) => m,
                _ => return,
            },
        };
        if matches!(message, Message::Close(_)) {
            return;
        }
        early += 1;
        if early > MAX_BEFORE_INIT {
            let _ = sink
                .send(close(4400, "Too many messages before connection_init"))
                .await;
            return;
        }
        match client_message(&message) {
            None => {}
            Some(Err(_)) => {
                let _ = sink.send(close(4400, "Invalid message")).await;
                return;
            }
            Some(Ok(ClientMessage::ConnectionInit { payload })) => {
                match (session.authenticate)(payload.unwrap_or_default()).await {
                    Ok(found) => break found,
                    Err(e) => {
                        if protocol == Protocols::SubscriptionsTransportWS {
                            let error = &e.to_graphql_json()["errors"][0];
                            let refused = json!({ "type": "connection_error", "payload": error });
                            let _ = sink.send(text(&refused)).await;
                        }
                        let _ = sink.send(close(4403, "Forbidden")).await;
                        return;
                    }
                }
            }
            Some(Ok(ClientMessage::Ping { .. }))
                if sink.send(text(&json!({ "type": "pong" }))).await.is_err() =>
            {
                return;
            }
            Some(Ok(ClientMessage::Ping { .. } | ClientMessage::Pong { .. })) => {}
            Some(Ok(ClientMessage::ConnectionTerminate)) => return,
            Some(Ok(_)) => {
                let _ = sink.send(close(4401, "Unauthorized")).await;
                return;
            }
        }
    };
    if sink
        .send(text(&json!({ "type": "connection_ack" })))
        .await
        .is_err()
    {
        return;
    }

    let mut data = Data::default();
    data.insert(viewer);
    if let Some(bearer) = bearer {
        data.insert(bearer);
    }
    if let Some(client) = session.client {
        data.insert(client);
    }
    let data = Arc::new(data);
    let mut operations: SelectAll<BoxStream<'static, (u64, Option<Response>)>> = SelectAll::new();
    // Client id → (key, abort handle); key → client id. Keys tell a stream
    // that ended after its id was reused from the one now under that id.
    let mut by_id: HashMap<String, (u64, AbortHandle)> = HashMap::new();
    let mut by_key: HashMap<u64, String> = HashMap::new();
    let mut next_key = 0u64;
    let mut keepalive = tokio::time::interval(limits.keepalive);
    keepalive.tick().await;
    let mut heard = Instant::now();
    let mut watch_ended = bearer.is_some();

    loop {
        let reply = tokio::select! {
            m = stream.next() => {
                let Some(Ok(message)) = m else { return };
                heard = Instant::now();
                if matches!(message, Message::Close(_)) {
                    return;
                }
                match client_message(&message) {
                    None => None,
                    Some(Err(_)) => {
                        let _ = sink.send(close(4400, "Invalid message")).await;
                        return;
                    }
                    Some(Ok(ClientMessage::Start { id, payload })) => {
                        if by_id.contains_key(&id) {
                            let reason = format!("Subscriber for {id} already exists");
                            let _ = sink.send(close(4409, &reason)).await;
                            return;
                        }
                        if by_id.len() >= limits.max_operations {
                            let e = AppError::rate_limited(
                                format!(
                                    "at most {} operations at once on one socket",
                                    limits.max_operations
                                ),
                                Duration::from_secs(1),
                            );
                            Some(out.error(&id, &e))
                        } else {
                            let key = next_key;
                            next_key += 1;
                            let request = payload.data(PasswordBudget::default());
                            let responses = executor.execute_stream(request, Some(data.clone()));
                            let (handle, registration) = AbortHandle::new_pair();
                            let stream = Abortable::new(responses, registration)
                                .map(move |r| (key, Some(r)))
                                .chain(futures_util::stream::once(async move { (key, None) }));
                            operations.push(stream.boxed());
                            by_id.insert(id.clone(), (key, handle));
                            by_key.insert(key, id);
                            None
                        }
                    }
                    Some(Ok(ClientMessage::Stop { id })) => match by_id.remove(&id) {
                        Some((key, handle)) => {
                            handle.abort();
                            by_key.remove(&key);
                            // The legacy protocol confirms a stop.
                            (protocol == Protocols::SubscriptionsTransportWS)
                                .then(|| Out::complete(&id))
                        }
                        None => None,
                    },
                    Some(Ok(ClientMessage::Ping { .. })) => Some(text(&json!({ "type": "pong" }))),
                    Some(Ok(ClientMessage::Pong { .. })) => None,
                    Some(Ok(ClientMessage::ConnectionInit { .. })) => {
                        let _ = sink
                            .send(close(4429, "Too many initialisation requests"))
                            .await;
                        return;
                    }
                    Some(Ok(ClientMessage::ConnectionTerminate)) => return,
                }
            }
            Some((key, item)) = operations.next(), if !operations.is_empty() => {
                operation_message(&out, key, item, &mut by_id, &mut by_key)
            }
            _ = keepalive.tick() => {
                if heard.elapsed() > limits.keepalive * 3 {
                    let _ = sink.send(close(4408, "Keepalive timeout")).await;
                    return;
                }
                if let Some(bearer) = bearer
                    && !(session.still_valid)(bearer).await
                {
                    let _ = sink.send(close(4403, "Session ended")).await;
                    return;
                }
                if protocol == Protocols::SubscriptionsTransportWS {
                    let _ = sink.send(text(&json!({ "type": "ka" }))).await;
                }
                Some(Message::Ping(Default::default()))
            }
            ended = session.ended.recv(), if watch_ended => {
                let mine = |e: &Ended| match (e, bearer) {
                    (Ended::User(u), Some(b)) => *u == b.user,
                    (Ended::Session(s), Some(b)) => *s == b.session,
                    _ => false,
                };
                match ended {
                    Ok(e) if mine(&e) => {
                        let _ = sink.send(close(4403, "Session ended")).await;
                        return;
                    }
                    // Missed some: re-checking each is the keepalive's job;
                    // close to be safe (clients reconnect).
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let _ = sink.send(close(4403, "Session ended")).await;
                        return;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        watch_ended = false;
                        None
                    }
                    Ok(_) => None,
                }
            }
        };
        if let Some(message) = reply
            && sink.feed(message).await.is_err()
        {
            return;
        }
        // What the operations have ready now goes out in the same write: a
        // page of the log often holds several events for one socket (a
        // status and the tray entry it changed).
        for _ in 0..MAX_COALESCED {
            let Some(Some((key, item))) = operations.next().now_or_never() else {
                break;
            };
            if let Some(message) = operation_message(&out, key, item, &mut by_id, &mut by_key)
                && sink.feed(message).await.is_err()
            {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
}
