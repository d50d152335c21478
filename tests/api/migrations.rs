//! Every migration reverses, and re-applies cleanly, on both databases.

use migration::{Migrator, MigratorTrait};

use crate::both_backends;
use crate::support::TestApp;

both_backends!(migrations_reverse);

async fn migrations_reverse(app: &TestApp) {
    let db = &app.state.db;
    let applied = Migrator::get_applied_migrations(db).await.unwrap().len();
    assert!(applied > 0);
    Migrator::down(db, None).await.unwrap();
    assert!(
        Migrator::get_applied_migrations(db)
            .await
            .unwrap()
            .is_empty()
    );
    Migrator::up(db, None).await.unwrap();
    assert_eq!(
        Migrator::get_applied_migrations(db).await.unwrap().len(),
        applied
    );
    // The server works on the re-created schema.
    app.sign_up("again").await;
}
