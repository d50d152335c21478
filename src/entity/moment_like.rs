//! A like: one row per (moment, user); `moments.likes_count` is kept in the
//! same transaction (see `domain::like`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "moment_likes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub moment_id: i64,
    #[sea_orm(primary_key, auto_increment = false)]
    pub user_id: i64,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
