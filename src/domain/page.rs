//! Keyset pagination for every connection: arguments checked as the contract
//! says (cursors are `crate::cursor`'s), newest first, and the SQL that
//! fetches one page plus one row to know whether there is more.

pub use crate::cursor::{CursorKind, Cursors, Key, List};
use crate::db::Sql;
use crate::error::{AppError, AppResult};

/// Connection arguments as the client sent them.
#[derive(Clone, Debug, Default)]
pub struct PageArgs {
    pub first: Option<i32>,
    pub after: Option<String>,
    pub last: Option<i32>,
    pub before: Option<String>,
}

/// A checked page request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageQuery {
    pub limit: u64,
    pub backward: bool,
    pub after: Option<Key>,
    pub before: Option<Key>,
}

/// One page of items, each with its key.
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<(Key, T)>,
    pub has_next: bool,
    pub has_previous: bool,
}

impl<T> Page<T> {
    pub fn empty() -> Self {
        Self {
            items: Vec::new(),
            has_next: false,
            has_previous: false,
        }
    }

    /// The same page with each item mapped by `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(|(k, t)| (k, f(t))).collect(),
            has_next: self.has_next,
            has_previous: self.has_previous,
        }
    }
}

impl PageQuery {
    /// Checks connection arguments: no negative sizes, not both `first` and
    /// `last`, cursors of this list only; sizes are clamped to `max`, and with
    /// neither size given the page is `default` long, forward.
    pub fn from_args(
        cursors: &Cursors,
        list: impl Into<List>,
        args: &PageArgs,
        default: u32,
        max: u32,
    ) -> AppResult<PageQuery> {
        if args.first.is_some() && args.last.is_some() {
            return Err(AppError::bad_input("pass first or last, not both"));
        }
        for (name, value) in [("first", args.first), ("last", args.last)] {
            if value.is_some_and(|v| v < 0) {
                return Err(AppError::bad_input(format!("{name} must not be negative")));
            }
        }
        let list = list.into();
        let decode = |c: &Option<String>| c.as_deref().map(|c| cursors.decode(list, c)).transpose();
        let after = decode(&args.after)?;
        let before = decode(&args.before)?;
        let (size, backward) = match (args.first, args.last) {
            (_, Some(last)) => (last, true),
            (Some(first), None) => (first, false),
            (None, None) => (i32::try_from(default).unwrap_or(i32::MAX), false),
        };
        Ok(PageQuery {
            limit: u64::try_from(size).unwrap_or(0).min(u64::from(max)),
            backward,
            after,
            before,
        })
    }

    /// The keyset bounds, order and limit that follow a statement whose
    /// `WHERE` is open: ` AND (ts, id) < (..) ... ORDER BY ... LIMIT n`.
    pub fn bounds(&self, ts_col: &str, id_col: &str) -> Sql {
        let mut sql = Sql::default();
        for (bound, op) in [(self.after, "<"), (self.before, ">")] {
            if let Some(k) = bound {
                sql = sql
                    .push(&format!(" AND ({ts_col}, {id_col}) {op} ("))
                    .list([k.ts, k.id])
                    .push(")");
            }
        }
        let dir = if self.backward { "ASC" } else { "DESC" };
        sql.push(&format!(
            " ORDER BY {ts_col} {dir}, {id_col} {dir} LIMIT {}",
            self.limit + 1
        ))
    }

    /// Turns the fetched rows (at most `limit + 1`, in query order) into a
    /// page in newest-first order.
    pub fn page<T>(&self, rows: Vec<T>, key: impl Fn(&T) -> Key) -> Page<T> {
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        let more = rows.len() > limit;
        let mut items: Vec<(Key, T)> = rows.into_iter().take(limit).map(|r| (key(&r), r)).collect();
        if self.backward {
            items.reverse();
            Page {
                items,
                has_next: self.before.is_some(),
                has_previous: more,
            }
        } else {
            Page {
                items,
                has_next: more,
                has_previous: self.after.is_some(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursors() -> Cursors {
        Cursors::new(b"test secret")
    }

    #[test]
    fn cursors_round_trip_and_refuse_forgeries() {
        let c = cursors();
        let key = Key {
            ts: 1_700_000_000_123,
            id: 987_654_321,
        };
        let s = c.encode(CursorKind::Status, key);
        assert_eq!(c.decode(CursorKind::Status, &s).unwrap(), key);
        assert!(c.decode(CursorKind::Tray, &s).is_err());
        assert!(
            Cursors::new(b"other")
                .decode(CursorKind::Status, &s)
                .is_err()
        );
        assert!(c.decode(CursorKind::Status, "not a cursor").is_err());
        assert!(c.decode(CursorKind::Status, "").is_err());
    }

    #[test]
    fn arguments_are_checked_and_clamped() {
        let c = cursors();
        let q = |args: PageArgs| PageQuery::from_args(&c, CursorKind::Status, &args, 10, 50);
        assert_eq!(q(PageArgs::default()).unwrap().limit, 10);
        assert_eq!(
            q(PageArgs {
                first: Some(500),
                ..Default::default()
            })
            .unwrap()
            .limit,
            50
        );
        assert!(
            q(PageArgs {
                first: Some(-1),
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            q(PageArgs {
                last: Some(-1),
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            q(PageArgs {
                first: Some(1),
                last: Some(1),
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            q(PageArgs {
                after: Some("x".into()),
                ..Default::default()
            })
            .is_err()
        );
        let back = q(PageArgs {
            last: Some(3),
            ..Default::default()
        })
        .unwrap();
        assert!(back.backward);
    }

    #[test]
    fn pages_know_what_lies_beyond() {
        let q = PageQuery {
            limit: 2,
            backward: false,
            after: None,
            before: None,
        };
        let p = q.page(vec![3, 2, 1], |n| Key { ts: *n, id: *n });
        assert_eq!(p.items.len(), 2);
        assert!(p.has_next && !p.has_previous);
        let q = PageQuery {
            limit: 2,
            backward: true,
            after: None,
            before: None,
        };
        let p = q.page(vec![1, 2, 3], |n| Key { ts: *n, id: *n });
        assert_eq!(p.items.iter().map(|i| i.1).collect::<Vec<_>>(), vec![2, 1]);
        assert!(!p.has_next && p.has_previous);
    }
}
