//! A moment: an image with a caption at a place, live until `expires_at`
//! (never, when journaled) unless soft-deleted (`deleted_at`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "moments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i64,
    pub author_id: i64,
    pub media_id: i64,
    pub caption: Option<String>,
    pub latitude: f64,
    pub longitude: f64,
    /// The 0.1-degree grid cell of the coordinates (see `domain::map`).
    pub map_cell: i64,
    pub location_id: Option<i64>,
    /// `PUBLIC` or `FRIENDS_ONLY`.
    pub visibility: String,
    pub is_journaled: bool,
    pub duration_hours: i32,
    pub expires_at: Option<i64>,
    pub created_at: i64,
    pub deleted_at: Option<i64>,
    pub likes_count: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
