//! Sign-in sessions: each token names its session (`sid`), and a token is
//! good only while its session row exists, so a token can be revoked
//! (`signOut`), and all of an account's at once (`signOutEverywhere`,
//! `changePassword`). Deleting the account deletes its sessions.
//! Media quotas read an account's recent uploads by `(owner_id, created_at)`.

use sea_orm_migration::prelude::*;

sql_migration!("m20261201_000005_sessions");

const UP: &str = r#"
CREATE TABLE sessions (
    id BIGINT PRIMARY KEY,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX media_owner_recent ON media (owner_id, created_at)
"#;

const DOWN: &str = r#"
DROP INDEX media_owner_recent;
DROP TABLE sessions
"#;
