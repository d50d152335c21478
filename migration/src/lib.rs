//! Database migrations for ephemera, shared by SQLite (the embedded default)
//! and PostgreSQL (production). Each migration is plain SQL that both engines
//! accept, so the two schemas cannot drift apart. Migrations never import the
//! application's entities.

pub use sea_orm_migration::prelude::*;

/// Defines `Migration`, named `$name`, whose `up` and `down` run the module's
/// `UP` and `DOWN` scripts.
macro_rules! sql_migration {
    ($name:literal) => {
        pub struct Migration;

        impl MigrationName for Migration {
            fn name(&self) -> &str {
                $name
            }
        }

        #[async_trait::async_trait]
        impl MigrationTrait for Migration {
            // In one transaction on SQLite too: all or nothing, and every
            // statement on one connection, so a statement never runs against
            // a schema another pooled connection has not seen change yet.
            fn use_transaction(&self) -> Option<bool> {
                Some(true)
            }

            async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                crate::run_script(manager, UP).await
            }

            async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                crate::run_script(manager, DOWN).await
            }
        }
    };
}

mod m20261129_000001_foundation;
mod m20261129_000002_media_lifecycle;
mod m20261129_000003_moments;
mod m20261129_000004_map_counts;
mod m20261201_000005_sessions;
mod m20261202_000006_safety;
mod m20261202_000007_events;
mod m20261202_000008_limits;
mod m20261202_000009_people;
mod m20261207_000010_accepted_friends;

/// The ordered list of migrations.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261129_000001_foundation::Migration),
            Box::new(m20261129_000002_media_lifecycle::Migration),
            Box::new(m20261129_000003_moments::Migration),
            Box::new(m20261129_000004_map_counts::Migration),
            Box::new(m20261201_000005_sessions::Migration),
            Box::new(m20261202_000006_safety::Migration),
            Box::new(m20261202_000007_events::Migration),
            Box::new(m20261202_000008_limits::Migration),
            Box::new(m20261202_000009_people::Migration),
            Box::new(m20261207_000010_accepted_friends::Migration),
        ]
    }
}

/// Runs each statement of a `;`-separated SQL script in order.
pub(crate) async fn run_script(manager: &SchemaManager<'_>, script: &str) -> Result<(), DbErr> {
    let db = manager.get_connection();
    for statement in script.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        db.execute_unprepared(statement).await?;
    }
    Ok(())
}
