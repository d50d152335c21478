//! The wiring: [`App`] assembles the state ([`AppState::connect`]: settings
//! checked, database connected and migrated, node id leased, store opened),
//! builds the schema and the router, starts the jobs, the change-log reader
//! and the node lease keeper, binds, and serves until told to
//! stop. Nothing imports this module but the binary and the tests.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::Config;
use crate::domain::live;
use crate::error::{AppError, AppResult};
use crate::events::{Decide, ReaderSettings};
pub use crate::state::AppState;
use crate::{graphql, http, jobs};

/// The rules the event bus decides with: `domain::live` on this state's
/// database, at its clock's time; the reader's pages on its own connection
/// (`AppState::reader_db`), with the circles of friends it keeps from one
/// page to the next (`live::Circles`); a subscriber catching up, on the
/// main pool.
fn decide(state: &AppState) -> Decide {
    let (db, reader_db) = (state.db.clone(), state.reader_db.clone());
    let clock = state.clock.clone();
    let circles = Arc::new(tokio::sync::Mutex::new(live::Circles::default()));
    Arc::new(move |events, asked| {
        let db = if asked.reader { &reader_db } else { &db }.clone();
        let (now, circles) = (clock.now(), circles.clone());
        Box::pin(async move {
            let mut kept = if asked.reader {
                Some(circles.lock().await)
            } else {
                None
            };
            live::admit(&db, &events, &asked, now, kept.as_deref_mut()).await
        })
    })
}

/// A running server.
pub struct App {
    state: AppState,
    listener: TcpListener,
    router: axum::Router,
    scheduler: Option<jobs::Scheduler>,
    /// Stops the change-log reader and the node lease keeper.
    background: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Writes the search words of accounts that have none yet (older than the
/// index, or seeded around the server), in the background: searches find
/// them once it is done.
async fn index_names(state: AppState) {
    match crate::domain::search::backfill(&state.db, state.clock.now()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(accounts = n, "indexed the names of accounts for search"),
        Err(e) => tracing::warn!(
            error = e.message(),
            "indexing names for search failed; retried at the next start"
        ),
    }
}

impl App {
    /// Connects, migrates, builds the schema and router, binds the listen
    /// address (port 0 picks a free port) and starts the jobs if enabled.
    pub async fn build(config: Config, clock: Clock) -> AppResult<Self> {
        let listen = config.server.listen;
        let state = AppState::connect(config, clock).await?;
        let schema = graphql::build_schema(state.clone());
        let router = http::router(state.clone(), schema);
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| AppError::internal("binding the listen address", e))?;
        let scheduler = if state.config.jobs.enabled {
            Some(jobs::Scheduler::start(state.clone()).await?)
        } else {
            None
        };
        state.events.set_decide(decide(&state));
        state.events.start_at_end(&state.log_db).await?;
        let (background, stop) = watch::channel(false);
        let reader = state.events.clone().run_reader(
            state.log_db.clone(),
            ReaderSettings {
                poll: state.config.ws.event_poll,
                page: state.config.ws.event_page,
            },
            stop.clone(),
        );
        let tasks = vec![
            tokio::spawn(reader),
            tokio::spawn(state.clone().keep_node(stop)),
            tokio::spawn(index_names(state.clone())),
        ];
        Ok(Self {
            state,
            listener,
            router,
            scheduler,
            background,
            tasks,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> AppResult<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| AppError::internal("reading the listen address", e))
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` turns true (or its sender is dropped).
    pub async fn run_until(self, mut shutdown: watch::Receiver<bool>) -> AppResult<()> {
        let signal = async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        };
        let config = &self.state.config;
        let limits = http::ServeLimits {
            header_timeout: config.http.header_timeout,
            body_timeout: config.http.body_timeout,
            write_timeout: config.http.write_timeout,
            max_head_bytes: config.http.max_head_bytes as usize,
            max_connections: config.http.max_connections,
            max_connections_per_address: config.http.max_connections_per_address,
        };
        http::serve(self.listener, self.router, limits, signal).await;
        if let Some(scheduler) = self.scheduler {
            scheduler.stop().await;
        }
        let _ = self.background.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.state.query_conns.close().await;
        self.state.db.clone().close().await.ok();
        self.state.log_db.clone().close().await.ok();
        self.state.reader_db.clone().close().await.ok();
        Ok(())
    }
}
