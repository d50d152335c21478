//! A persisted place that moments attach to.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "locations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i64,
    pub name: String,
    /// `name` lower-cased with whitespace runs collapsed.
    pub name_key: String,
    pub latitude: f64,
    pub longitude: f64,
    /// The 0.1-degree grid cell of the coordinates (see `domain::map`).
    pub map_cell: i64,
    pub created_at: i64,
    /// Not-deleted PUBLIC moments here, kept by every write in the same
    /// transaction (see `domain::location::visible_counts`).
    pub public_moments: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
