//! A stored media object (an uploaded image).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "media")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i64,
    pub owner_id: i64,
    pub storage_key: String,
    pub content_type: String,
    pub byte_size: i64,
    pub width: Option<i32>,
    pub height: Option<i32>,
    pub created_at: i64,
    /// When the bytes were judged and measured; `None` while a direct upload waits.
    pub ready_at: Option<i64>,
    /// When a status or moment took the media; `None` while it is free.
    pub attached_at: Option<i64>,
    /// Until when a direct-upload ticket may write `storage_key`.
    pub upload_expires_at: Option<i64>,
    /// When a direct upload's PUT claimed the ticket (a ticket takes bytes once).
    pub upload_received_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
