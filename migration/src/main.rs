//! The migration CLI: `cargo run -p migration -- up|down|status|fresh`,
//! reading `DATABASE_URL`.

use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() {
    cli::run_cli(migration::Migrator).await;
}
