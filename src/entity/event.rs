//! A row of the change log behind subscriptions (see `events`): one change,
//! at position `(tx, seq)`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "events")]
pub struct Model {
    /// Orders the writing transactions as they become final.
    #[sea_orm(primary_key, auto_increment = false)]
    pub tx: i64,
    /// Orders the events of one transaction (the subject's id).
    #[sea_orm(primary_key, auto_increment = false)]
    pub seq: i64,
    /// What happened: `STATUS_CREATED`, `STATUS_DELETED`, `STATUS_SEEN`,
    /// `MOMENT_CREATED`, `MOMENT_DELETED`, `MOMENT_RESTORED`.
    pub kind: String,
    /// The status or moment.
    pub subject_id: i64,
    /// Its author.
    pub author_id: i64,
    /// Its audience (a status's) or visibility (a moment's) when it happened.
    pub audience: String,
    /// For `STATUS_SEEN`: who saw it (the event is theirs alone).
    pub viewer_id: Option<i64>,
    /// When it was written (the server's clock): what retention counts from.
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
