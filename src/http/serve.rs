//! The accept loop: HTTP/1.1 connections (websocket upgrades included)
//! served by hyper, with a deadline for each request head and each request
//! body, and caps on connections overall and per client address.
//!
//! `axum::serve` gives hyper no timer, so a client could hold a connection
//! open forever by sending a request head a byte at a time, or by opening a
//! connection and sending nothing; enough of them exhaust the server's
//! sockets. Here every request head (the first on a connection and each
//! later one on a kept-alive connection) must arrive within
//! `EPHEMERA_HTTP_HEADER_TIMEOUT`, or the connection is closed; that also
//! closes idle kept-alive connections after that long. A request body must
//! arrive whole within `EPHEMERA_HTTP_BODY_TIMEOUT` of its head (bodies are
//! bounded by size elsewhere): one trickled a byte at a time fails its read
//! when the time is up, and the connection closes with the response.
//!
//! A connection over `EPHEMERA_MAX_CONNECTIONS`, or over
//! `EPHEMERA_MAX_CONNECTIONS_PER_ADDRESS` from one peer address, is closed
//! as soon as it is accepted, so that one client cannot take every socket
//! the process may open. Each request carries its peer's address
//! ([`Peer`]) for the limits that count per client.
//!
//! Writes must make progress too: a response (or websocket message) that
//! waits `EPHEMERA_HTTP_WRITE_TIMEOUT` for a client that does not read it
//! closes the connection. A request head is buffered up to
//! `EPHEMERA_HTTP_MAX_HEAD_BYTES`; a larger one is refused (431).
//!
//! Shutdown works as `axum::serve`'s: stop accepting, let each connection
//! finish the requests it has begun, then return.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

/// The address a request's connection comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub IpAddr);

/// Limits of the accept loop.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    /// How long a write to the client may wait for the client to read.
    pub write_timeout: Duration,
    /// The most bytes of a request head buffered (hyper's read buffer).
    pub max_head_bytes: usize,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
}

/// Open things (connections, websockets), counted overall and per peer
/// address, each admitted only under both caps.
#[derive(Clone, Default)]
pub struct Counter {
    open: Arc<Mutex<Open>>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

impl Counter {
    /// Counts one more from `addr` while the returned guard lives, or
    /// `None` if that would pass `max_total` or `max_per_address`.
    pub fn admit(
        &self,
        addr: IpAddr,
        max_total: usize,
        max_per_address: usize,
    ) -> Option<Admitted> {
        let mut o = self.open.lock().ok()?;
        let from_addr = o.by_address.get(&addr).copied().unwrap_or(0);
        if o.total >= max_total || from_addr >= max_per_address {
            return None;
        }
        o.total += 1;
        o.by_address.insert(addr, from_addr + 1);
        Some(Admitted {
            open: self.open.clone(),
            addr,
        })
    }
}

/// One admitted by a [`Counter`], counted until dropped.
pub struct Admitted {
    open: Arc<Mutex<Open>>,
    addr: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut o) = self.open.lock() {
            o.total = o.total.saturating_sub(1);
            if let Some(n) = o.by_address.get_mut(&self.addr) {
                *n -= 1;
                if *n == 0 {
                    o.by_address.remove(&self.addr);
                }
            }
        }
    }
}

/// A request body that fails once its deadline has passed.
struct Deadline {
    inner: Incoming,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

/// The error a body past its deadline reads as.
#[derive(Debug)]
pub struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

impl hyper::body::Body for Deadline {
    type Data = axum::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `router` on `listener` until `signal` completes, then waits for
/// the connections' requests in progress.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    signal: impl Future<Output = ()> + Send + 'static,
) {
    // Dropped when the signal comes: each connection then shuts down
    // gracefully, and the loop stops accepting.
    let (signal_tx, signal_rx) = watch::channel(());
    tokio::spawn(async move {
        signal.await;
        drop(signal_rx);
    });
    // Each connection holds a receiver; `closed` resolves when all are gone.
    let (close_tx, close_rx) = watch::channel(());
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // A head larger than this is refused (431) before more is read:
        // a connection holds at most this much of one.
        .max_buf_size(limits.max_head_bytes.max(8192));
    let open = Counter::default();

    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = signal_tx.closed() => break,
        };
        let admitted = open.admit(
            peer.ip(),
            limits.max_connections,
            limits.max_connections_per_address,
        );
        let Some(admitted) = admitted else {
            tracing::debug!(%peer, "connection refused: connection cap reached");
            continue;
        };
        // A response goes out in one write; don't hold its last segment
        // back waiting for an acknowledgement.
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let body_timeout = limits.body_timeout;
        let service = hyper::service::service_fn(move |request| {
            router.clone().oneshot(prepare(request, peer, body_timeout))
        });
        let builder = builder.clone();
        let signal_tx = signal_tx.clone();
        let close_rx = close_rx.clone();
        let stream = WriteDeadline::new(stream, limits.write_timeout);
        tokio::spawn(async move {
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            let mut stopping = std::pin::pin!(signal_tx.closed());
            let mut told = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!("connection ended: {e}");
                        }
                        break;
                    }
                    () = &mut stopping, if !told => {
                        conn.as_mut().graceful_shutdown();
                        told = true;
                    }
                }
            }
            drop(close_rx);
            drop(admitted);
        });
    }
    drop(close_rx);
    drop(listener);
    close_tx.closed().await;
}

/// A connection whose writes must make progress within a deadline: a client
/// that stops reading its responses (or its websocket's messages) makes a
/// write wait; once one has waited `timeout`, the write fails and the
/// connection closes, instead of holding its socket and buffers forever.
struct WriteDeadline<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write waits.
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            waiting: None,
        }
    }

    /// What a pending write becomes: still pending, or failed once it has
    /// waited too long.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                tracing::info!("connection closed: the client stopped reading");
                Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client read nothing for the write timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn done<T>(
        &mut self,
        result: Poll<std::io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<T>> {
        match result {
            Poll::Pending => self.pending(cx),
            ready => {
                self.waiting = None;
                ready
            }
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.done(result, cx)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        self.done(result, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.done(result, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.done(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request as the router takes it: tagged with its peer, its body under
/// a deadline.
fn prepare(
    request: hyper::Request<Incoming>,
    peer: SocketAddr,
    body_timeout: Duration,
) -> axum::extract::Request {
    let mut request = request.map(|inner| {
        Body::new(Deadline {
            inner,
            sleep: Box::pin(tokio::time::sleep(body_timeout)),
        })
    });
    request.extensions_mut().insert(Peer(peer.ip()));
    request
}

/// After a failed `accept`: a failed connection is the client's business;
/// anything else (out of file descriptors, most often) gets a pause, so the
/// loop does not spin while it lasts.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!("accepting a connection failed: {e}");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
