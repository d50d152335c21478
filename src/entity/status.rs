//! A status (story): lives until `expires_at`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "statuses")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i64,
    pub author_id: i64,
    pub media_id: Option<i64>,
    pub caption: Option<String>,
    pub bg_color: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    /// Who may see it: `PUBLIC`, `FRIENDS` or `CLOSE_FRIENDS`.
    pub audience: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
