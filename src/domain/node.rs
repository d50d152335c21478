//! Which table holds each of a set of ids (ids are unique across tables:
//! one generator makes them all), in one statement of primary-key lookups,
//! so that refetching by id (`node`, `nodes`) then reads only the tables
//! that hold some of them. It says nothing of visibility: each table's
//! read applies its own rules, and an id it hides answers as one that
//! does not exist.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::{self, Sql};
use crate::error::AppResult;

/// A table that holds nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    User,
    Status,
    Moment,
    Location,
    Media,
}

impl Table {
    const ALL: [Table; 5] = [
        Table::User,
        Table::Status,
        Table::Moment,
        Table::Location,
        Table::Media,
    ];

    fn name(self) -> &'static str {
        match self {
            Table::User => "users",
            Table::Status => "statuses",
            Table::Moment => "moments",
            Table::Location => "locations",
            Table::Media => "media",
        }
    }
}

#[derive(Debug, FromQueryResult)]
struct Found {
    id: i64,
    t: i64,
}

/// The table of each of `ids` that is in one; none asked, no statement.
pub async fn tables<C: ConnectionTrait>(db: &C, ids: &[i64]) -> AppResult<HashMap<i64, Table>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let arms = Table::ALL.iter().enumerate().map(|(i, table)| {
        Sql::new(&format!(
            "SELECT id, CAST({i} AS BIGINT) AS t FROM {} WHERE id IN (",
            table.name()
        ))
        .list(ids.iter().copied())
        .push(")")
    });
    let rows: Vec<Found> = db::fetch_all(db, Sql::join(arms, " UNION ALL ")).await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let table = Table::ALL.get(usize::try_from(r.t).ok()?)?;
            Some((r.id, *table))
        })
        .collect())
}
