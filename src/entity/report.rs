//! A report: who flagged what, why and when, and how a moderator resolved it
//! (see `domain::moderation`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "reports")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i64,
    /// `None` once the reporter's account is deleted.
    pub reporter_id: Option<i64>,
    /// `STATUS`, `MOMENT` or `USER`.
    pub subject_kind: String,
    pub subject_id: i64,
    /// Whose content it is (the user, for a reported user).
    pub subject_author_id: Option<i64>,
    /// The reported text as the reporter saw it.
    pub excerpt: Option<String>,
    pub reason: String,
    pub details: Option<String>,
    pub created_at: i64,
    pub resolved_at: Option<i64>,
    pub resolved_by: Option<i64>,
    pub resolution: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
