//! Profiles and finding people.
//!
//! `users.bio` is what a user wrote about themselves; `users.avatar_media_id`
//! their picture, an upload attached to the account as a status's media is
//! to its status (replacing or removing it deletes the old media through the
//! outbox). `user_words` is the search index: one row per word a user's
//! username or display name begins a word with, normalised (transliterated
//! to ASCII, lower-cased, split on everything but letters and digits), so a
//! prefix of a word is a range of one btree, on either database. Words hold
//! only `a-z` and `0-9`, whose order is the same under every collation, so
//! the range `[p, successor(p))` is exact on PostgreSQL whatever the
//! database's locale. Rows are filled by the server (`domain::search`): at
//! sign-up, on a change of display name, and for accounts whose
//! `words_indexed_at` is unset (older than this table, or seeded by hand)
//! by a backfill at start.

use sea_orm_migration::prelude::*;

sql_migration!("m20261202_000009_people");

const UP: &str = r#"
ALTER TABLE users ADD COLUMN bio TEXT;
ALTER TABLE users ADD COLUMN avatar_media_id BIGINT;
CREATE UNIQUE INDEX users_avatar ON users (avatar_media_id);
ALTER TABLE users ADD COLUMN words_indexed_at BIGINT;
CREATE INDEX users_unindexed ON users (id) WHERE words_indexed_at IS NULL;
CREATE TABLE user_words (
    word TEXT NOT NULL,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    PRIMARY KEY (word, user_id)
);
CREATE INDEX user_words_user ON user_words (user_id, word)
"#;

const DOWN: &str = r#"
DROP INDEX user_words_user;
DROP TABLE user_words;
DROP INDEX users_unindexed;
ALTER TABLE users DROP COLUMN words_indexed_at;
DROP INDEX users_avatar;
ALTER TABLE users DROP COLUMN avatar_media_id;
ALTER TABLE users DROP COLUMN bio
"#;
