//! The accept loop: HTTP/1.1 connections (websocket upgrades included)
//! served by hyper, with a deadline for each request head.
//!
//! `axum::serve` gives hyper no timer, so a client could hold a connection
//! open forever by sending a request head a byte at a time, or by opening a
//! connection and sending nothing; enough of them exhaust the server's
//! sockets. Here every request head (the first on a connection and each
//! later one on a kept-alive connection) must arrive within
//! `EPHEMERA_HTTP_HEADER_TIMEOUT`, or the connection is closed; that also
//! closes idle kept-alive connections after that long. Bodies are bounded
//! by size elsewhere; uploads may be slow, so they have no deadline here.
//!
//! Shutdown works as `axum::serve`'s: stop accepting, let each connection
//! finish the requests it has begun, then return.

use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `router` on `listener` until `signal` completes, then waits for
/// the connections' requests in progress.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
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
        .header_read_timeout(header_timeout);

    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = signal_tx.closed() => break,
        };
        // A response goes out in one write; don't hold its last segment
        // back waiting for an acknowledgement.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let signal_tx = signal_tx.clone();
        let close_rx = close_rx.clone();
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
        });
    }
    drop(close_rx);
    drop(listener);
    close_tx.closed().await;
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
