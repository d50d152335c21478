//! A user account.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "users")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i64,
    pub username: String,
    /// The lower-cased username, unique.
    pub username_key: String,
    pub display_name: Option<String>,
    pub password_hash: String,
    pub created_at: i64,
    /// May page through reports and act on them (`ephemera users grant-moderator`).
    pub is_moderator: bool,
    /// Set while the account is suspended: it cannot sign in and its content is gone from every path.
    pub suspended_at: Option<i64>,
    /// Why, for the account's owner.
    pub suspension_reason: Option<String>,
    /// What the user wrote about themselves.
    pub bio: Option<String>,
    /// The user's picture: an upload attached to the account.
    pub avatar_media_id: Option<i64>,
    /// When the account's name words were last written to `user_words`
    /// (the search index); unset: not yet, the start-up backfill does it.
    pub words_indexed_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
