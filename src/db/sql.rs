//! Statements built, not counted: an [`Sql`] is SQL text with its bound
//! values in order, and the placeholders are numbered only when the whole
//! statement is built for a database ([`Sql::build`]). Fragments (a
//! liveness rule, a visibility rule, a page's keyset bounds) are `Sql`
//! values of their own and compose with [`Sql::append`] wherever they fall,
//! without knowing how many values came before them.
//!
//! ```
//! use ephemera::db::{Dialect, Sql};
//! let live = Sql::new("s.expires_at > ").bind(1_000i64);
//! let q = Sql::new("SELECT s.id FROM statuses s WHERE s.author_id = ")
//!     .bind(7i64)
//!     .push(" AND ")
//!     .append(live);
//! assert_eq!(
//!     q.build(Dialect::Postgres).sql,
//!     "SELECT s.id FROM statuses s WHERE s.author_id = $1 AND s.expires_at > $2"
//! );
//! assert_eq!(q.build(Dialect::Sqlite).sql, "SELECT s.id FROM statuses s WHERE s.author_id = ?1 AND s.expires_at > ?2");
//! ```

use sea_orm::{Statement, Value, Values};

use super::Dialect;

/// Stands in the text for the next bound value until the statement is built.
/// No SQL we write contains it (it is a control character).
const BIND: char = '\u{1}';

/// SQL text and its bound values (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sql {
    text: String,
    values: Vec<Value>,
}

impl Sql {
    /// A fragment of plain SQL text (no values yet).
    pub fn new(text: &str) -> Self {
        Self::default().push(text)
    }

    /// Appends plain SQL text.
    pub fn push(mut self, text: &str) -> Self {
        debug_assert!(!text.contains(BIND), "SQL text holds the bind marker");
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for `value`.
    pub fn bind(mut self, value: impl Into<Value>) -> Self {
        self.text.push(BIND);
        self.values.push(value.into());
        self
    }

    /// Appends another fragment, its values after these.
    pub fn append(mut self, other: Sql) -> Self {
        self.text.push_str(&other.text);
        self.values.extend(other.values);
        self
    }

    /// Appends `(a, b, ...)`'s inside: one placeholder per item, separated
    /// by commas (for `IN (...)` lists and `VALUES` rows).
    pub fn list<V: Into<Value>>(mut self, items: impl IntoIterator<Item = V>) -> Self {
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self = self.bind(item);
        }
        self
    }

    /// The fragments one after another, `separator` between them.
    pub fn join(parts: impl IntoIterator<Item = Sql>, separator: &str) -> Self {
        let mut out = Sql::default();
        for (i, part) in parts.into_iter().enumerate() {
            if i > 0 {
                out = out.push(separator);
            }
            out = out.append(part);
        }
        out
    }

    /// `(` this `)`.
    pub fn parens(self) -> Self {
        Sql::new("(").append(self).push(")")
    }

    /// How many values are bound.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no value is bound.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The statement for `dialect`: each placeholder numbered in order, as
    /// the dialect writes it.
    pub fn build(&self, dialect: Dialect) -> Statement {
        let mut sql = String::with_capacity(self.text.len() + 2 * self.values.len());
        let mut n = 0;
        for c in self.text.chars() {
            if c == BIND {
                n += 1;
                sql.push_str(&dialect.placeholder(n));
            } else {
                sql.push(c);
            }
        }
        Statement {
            sql,
            values: Some(Values(self.values.clone())),
            db_backend: dialect.backend(),
        }
    }
}

impl From<&str> for Sql {
    fn from(text: &str) -> Self {
        Sql::new(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment() -> Sql {
        Sql::new("a = ")
            .bind(1i64)
            .push(" AND b IN (")
            .list([2i64, 3])
            .push(")")
    }

    #[test]
    fn postgres_numbers_binds_in_order() {
        let q = Sql::new("SELECT x WHERE ")
            .append(fragment())
            .push(" AND c = ")
            .bind("x");
        let s = q.build(Dialect::Postgres);
        assert_eq!(s.sql, "SELECT x WHERE a = $1 AND b IN ($2, $3) AND c = $4");
        assert_eq!(s.values.map(|v| v.0.len()), Some(4));
        assert_eq!(q.len(), 4);
    }

    #[test]
    fn sqlite_numbers_binds_in_order() {
        let q = Sql::join([fragment(), fragment()], " OR ").parens();
        assert_eq!(
            q.build(Dialect::Sqlite).sql,
            "(a = ?1 AND b IN (?2, ?3) OR a = ?4 AND b IN (?5, ?6))"
        );
    }

    #[test]
    fn text_alone_binds_nothing() {
        let q = Sql::from("SELECT 1");
        assert!(q.is_empty());
        assert_eq!(q.build(Dialect::Postgres).sql, "SELECT 1");
        assert_eq!(Sql::new("").list(Vec::<i64>::new()), Sql::default());
    }
}
