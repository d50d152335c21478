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

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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
        debug_assert!(!text.contains(BIND), "SQL text holds the bind marker");
        Self {
            text: text.to_owned(),
            values: Vec::new(),
        }
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
        if self.text.is_empty() && self.values.is_empty() {
            return other;
        }
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

    /// The statement for `dialect`: each placeholder numbered in order, as
    /// the dialect writes it. A value bound more than once (the viewer, the
    /// time, a box's edges in each arm of the map's query) is sent once and
    /// its number written at each place: the drivers' cost grows with the
    /// values sent (sqlx looks each SQLite parameter up by name), and the
    /// map's statement binds its box in every cell's arm.
    pub fn build(&self, dialect: Dialect) -> Statement {
        let mut sql = String::with_capacity(self.text.len() + 3 * self.values.len());
        let mut sent: Vec<Value> = Vec::with_capacity(self.values.len());
        let mut numbers: HashMap<Same<'_>, usize, BuildHasherDefault<Fnv>> =
            HashMap::with_capacity_and_hasher(self.values.len(), BuildHasherDefault::default());
        let mut values = self.values.iter();
        let mut rest = self.text.as_str();
        while let Some(at) = rest.find(BIND) {
            sql.push_str(&rest[..at]);
            rest = &rest[at + BIND.len_utf8()..];
            let Some(value) = values.next() else {
                break;
            };
            let n = match Same::of(value) {
                Some(key) => *numbers.entry(key).or_insert_with(|| {
                    sent.push(value.clone());
                    sent.len()
                }),
                None => {
                    sent.push(value.clone());
                    sent.len()
                }
            };
            dialect.write_placeholder(&mut sql, n);
        }
        sql.push_str(rest);
        Statement {
            sql,
            values: Some(Values(sent)),
            db_backend: dialect.backend(),
        }
    }
}

/// FNV-1a: a few small keys per statement, hashed on the request path
/// (SipHash cost more than the rest of building a large statement).
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A bound value by which two binds are known to be the same (type and
/// value); other values are sent once per bind.
#[derive(Hash, PartialEq, Eq)]
enum Same<'a> {
    I64(i64),
    I32(i32),
    F64(u64),
    Bool(bool),
    Str(&'a str),
}

impl<'a> Same<'a> {
    fn of(value: &'a Value) -> Option<Self> {
        Some(match value {
            Value::BigInt(Some(v)) => Same::I64(*v),
            Value::Int(Some(v)) => Same::I32(*v),
            Value::Double(Some(v)) => Same::F64(v.to_bits()),
            Value::Bool(Some(v)) => Same::Bool(*v),
            Value::String(Some(v)) => Same::Str(v.as_str()),
            _ => return None,
        })
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
    }

    #[test]
    fn sqlite_numbers_binds_in_order() {
        let other = Sql::new("a = ")
            .bind(4i64)
            .push(" AND b IN (")
            .list([5i64, 6])
            .push(")");
        let q = Sql::join([fragment(), other], " OR ").parens();
        assert_eq!(
            q.build(Dialect::Sqlite).sql,
            "(a = ?1 AND b IN (?2, ?3) OR a = ?4 AND b IN (?5, ?6))"
        );
    }

    #[test]
    fn a_value_bound_twice_is_sent_once() {
        let q = Sql::new("a = ")
            .bind(7i64)
            .push(" AND b = ")
            .bind(7i32)
            .push(" AND c = ")
            .bind(7i64)
            .push(" AND d = ")
            .bind("x")
            .push(" AND e = ")
            .bind("x")
            .push(" AND f = ")
            .bind(Option::<i64>::None)
            .push(" AND g = ")
            .bind(Option::<i64>::None);
        let s = q.build(Dialect::Postgres);
        assert_eq!(
            s.sql,
            "a = $1 AND b = $2 AND c = $1 AND d = $3 AND e = $3 AND f = $4 AND g = $5"
        );
        let sent = s.values.map(|v| v.0).unwrap_or_default();
        assert_eq!(
            sent,
            vec![
                Value::from(7i64),
                Value::from(7i32),
                Value::from("x"),
                Value::BigInt(None),
                Value::BigInt(None)
            ]
        );
        assert_eq!(q.build(Dialect::Sqlite).sql.matches("?1").count(), 2);
    }

    #[test]
    fn text_alone_binds_nothing() {
        let q = Sql::new("SELECT 1").build(Dialect::Postgres);
        assert_eq!(q.sql, "SELECT 1");
        assert_eq!(q.values.map(|v| v.0.len()), Some(0));
        assert_eq!(Sql::new("").list(Vec::<i64>::new()), Sql::default());
    }
}
