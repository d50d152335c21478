//! Inserting rows, one way per table for everyone who inserts: the domain,
//! the tests' seeding and the benchmark seeder. The columns come from the
//! table's SeaORM entity, so a column added to an entity (and its migration)
//! is written by every insert without touching a column list anywhere.
//!
//! - [`row`]: one row from its entity model.
//! - [`select_into`]: every row a `SELECT` (or `VALUES`) yields, its
//!   columns in the entity's order ([`columns`]).

use sea_orm::{
    ActiveModelTrait, ConnectionTrait, DbErr, EntityTrait, IdenStatic, IntoActiveModel, Iterable,
};

use super::Sql;

/// Inserts one row of `model`'s table (every column of the model).
pub async fn row<E, A, M, C>(db: &C, model: M) -> Result<(), DbErr>
where
    E: EntityTrait,
    A: ActiveModelTrait<Entity = E>,
    M: IntoActiveModel<A>,
    C: ConnectionTrait,
{
    E::insert(model.into_active_model())
        .exec_without_returning(db)
        .await?;
    Ok(())
}

/// The columns of `E`'s table, in the entity's order, comma-separated.
pub fn columns<E: EntityTrait>() -> String {
    E::Column::iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `INSERT INTO <table> (<every column>) <rows>`: `rows` yields the
/// columns in the entity's order ([`columns`]).
pub fn select_into<E: EntityTrait>(rows: Sql) -> Sql {
    Sql::new(&format!(
        "INSERT INTO {} ({}) ",
        E::default().table_name(),
        columns::<E>()
    ))
    .append(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Dialect;
    use crate::entity::status;

    #[test]
    fn columns_come_from_the_entity() {
        assert_eq!(
            columns::<status::Entity>(),
            "id, author_id, media_id, caption, bg_color, created_at, expires_at, audience"
        );
        let sql =
            select_into::<status::Entity>(Sql::new("SELECT * FROM old WHERE id > ").bind(1i64));
        assert_eq!(
            sql.build(Dialect::Postgres).sql,
            "INSERT INTO statuses (id, author_id, media_id, caption, bg_color, created_at, \
             expires_at, audience) SELECT * FROM old WHERE id > $1"
        );
    }
}
