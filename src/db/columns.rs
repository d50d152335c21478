//! Rows decoded by position: a hot row type lists its columns once (a
//! `..._COLUMNS` constant its statements select) and reads them back in that
//! order with [`Columns`], so decoding formats no column names and looks
//! none up (the derived `FromQueryResult` does both, per column per row).

use sea_orm::{DbErr, QueryResult, TryGetable};

/// The columns of one row, read in the order the statement selected them.
pub struct Columns<'a> {
    row: &'a QueryResult,
    at: usize,
}

impl<'a> Columns<'a> {
    /// The row's columns from the first.
    pub fn of(row: &'a QueryResult) -> Self {
        Self { row, at: 0 }
    }

    /// The next column's value.
    pub fn take<T: TryGetable>(&mut self) -> Result<T, DbErr> {
        let value = self.row.try_get_by_index(self.at)?;
        self.at += 1;
        Ok(value)
    }
}
