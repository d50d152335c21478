//! A websocket GraphQL client speaking `graphql-transport-ws` or the legacy
//! `graphql-ws` subprotocol.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Which subprotocol a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    TransportWs,
    LegacyWs,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::TransportWs => "graphql-transport-ws",
            Protocol::LegacyWs => "graphql-ws",
        }
    }
}

pub struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    protocol: Protocol,
    /// Whether the `events` subscription's tray events are read (skipped
    /// unless asked for: the tests of the other events count theirs).
    trays: bool,
}

impl WsClient {
    /// Connects and sends `connection_init` with `payload`; returns the
    /// client and the server's first answer (`connection_ack` or an error).
    pub async fn connect(url: &str, protocol: Protocol, payload: Value) -> (Self, Value) {
        let mut request = url.into_client_request().expect("ws request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            protocol.name().parse().expect("header"),
        );
        let (socket, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("ws connect");
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok()),
            Some(protocol.name())
        );
        let mut client = Self {
            socket,
            protocol,
            trays: false,
        };
        client
            .send(json!({ "type": "connection_init", "payload": payload }))
            .await;
        let first = client.next_message().await.unwrap_or(Value::Null);
        (client, first)
    }

    /// Sends a message; false when the server has closed the connection.
    pub async fn try_send(&mut self, message: Value) -> bool {
        self.socket
            .send(Message::Text(message.to_string().into()))
            .await
            .is_ok()
    }

    pub async fn send(&mut self, message: Value) {
        self.socket
            .send(Message::Text(message.to_string().into()))
            .await
            .expect("ws send");
    }

    /// Reads the `events` subscription's tray events too.
    pub fn hear_trays(&mut self) {
        self.trays = true;
    }

    /// Starts a subscription with id `id`.
    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        let kind = match self.protocol {
            Protocol::TransportWs => "subscribe",
            Protocol::LegacyWs => "start",
        };
        self.send(json!({ "id": id, "type": kind, "payload": { "query": query, "variables": variables } }))
            .await;
    }

    /// The next JSON message (keep-alives skipped); `None` when the socket
    /// closed or nothing came within 10 seconds.
    pub async fn next_message(&mut self) -> Option<Value> {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(10), self.socket.next())
                .await
                .ok()??;
            match msg {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(&t).expect("JSON message");
                    if v["type"] == "ka" || v["type"] == "ping" {
                        continue;
                    }
                    let kind = v["payload"]["data"]["events"]["__typename"].as_str();
                    if !self.trays && kind.is_some_and(|k| k.starts_with("StoryTrayEntry")) {
                        continue;
                    }
                    return Some(v);
                }
                Ok(Message::Close(frame)) => {
                    return Some(
                        json!({ "type": "closed", "code": frame.map(|f| u16::from(f.code)) }),
                    );
                }
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    /// The payload of the next data message (`next` or `data`).
    pub async fn next_payload(&mut self) -> Value {
        let msg = self.next_message().await.expect("a message");
        assert!(
            msg["type"] == "next" || msg["type"] == "data",
            "expected data, got {msg}"
        );
        msg["payload"].clone()
    }
}
