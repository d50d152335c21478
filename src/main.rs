//! The `ephemera` binary: parse settings, set up logging, then serve, migrate,
//! print the schema, or run a job, as the command line asks.

use std::process::ExitCode;

use clap::Parser;
use tokio::sync::watch;

use ephemera::app::{App, AppState};
use ephemera::clock::Clock;
use ephemera::config::{Cli, Command, JobsCommand, UsersCommand};
use ephemera::error::AppError;
use ephemera::{graphql, jobs};

/// mimalloc instead of glibc's malloc: the benchmarks spent about a fifth of
/// the server's time in malloc and free (every request builds and drops many
/// small values).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.config.server.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.log();
            eprintln!("ephemera: {}", e.message());
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), AppError> {
    let config = cli.config;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = App::build(config, Clock::system()).await?;
            tracing::info!("listening on http://{}", app.local_addr()?);
            let (stop, stopped) = watch::channel(false);
            tokio::spawn(async move {
                shutdown_signal().await;
                tracing::info!("shutting down");
                let _ = stop.send(true);
            });
            app.run_until(stopped).await
        }
        Command::Migrate => {
            let stats = std::sync::Arc::new(ephemera::db::DbStats::default());
            if config.dialect().is_embedded() {
                std::fs::create_dir_all(&config.server.data_dir)
                    .map_err(|e| AppError::internal("creating the data dir", e))?;
            }
            let db = ephemera::db::connect(&config.effective_database_url(), 1, stats).await?;
            ephemera::db::migrate(&db).await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Schema => {
            print!("{}", graphql::schema_sdl());
            Ok(())
        }
        Command::Jobs {
            command: JobsCommand::Run { name },
        } => {
            let state = AppState::connect(config, Clock::system()).await?;
            let done = jobs::run_by_name(&state, name).await;
            state.release_node().await;
            println!("{}", done?);
            Ok(())
        }
        Command::Users { command } => {
            let state = AppState::connect(config, Clock::system()).await?;
            let moderation = async {
                use ephemera::domain::moderation;
                Ok::<_, ephemera::error::AppError>(match &command {
                    UsersCommand::GrantModerator { username } => {
                        moderation::set_moderator(&state.db, username, true).await?;
                        format!("{username} is now a moderator")
                    }
                    UsersCommand::RevokeModerator { username } => {
                        moderation::set_moderator(&state.db, username, false).await?;
                        format!("{username} is no longer a moderator")
                    }
                    UsersCommand::Reinstate { username } => {
                        moderation::reinstate_by_name(&state.db, username).await?;
                        format!("{username} is reinstated")
                    }
                })
            };
            let done = moderation.await;
            state.release_node().await;
            println!("{}", done?);
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
