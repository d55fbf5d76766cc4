//! Executable state (header §9) in plain Rust: how a state follows the runs
//! ([`Feed`]) and which rows a row feed copies ([`RowFeed`]), checked once here
//! for every plugin and host.

use crate::error::{PluginError, PluginResult};
use crate::tables::{feed_kind, RlxRowFeed};

/// The most batches one row feed copies (a count beyond it is a corrupt
/// feed, not an allocation of that size).
pub const MAX_FEED_BATCH: usize = 1 << 20;

/// How a state follows the runs. The output is named by its position in
/// the executable's outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed {
    /// Changes only when bound again.
    None,
    /// After each run that succeeds, the state is this output.
    Replace(usize),
    /// `feed_rows` copies rows of this output into the state.
    Rows(usize),
}

impl Feed {
    /// The ABI kind (`feed_kind`).
    pub fn kind(self) -> u32 {
        match self {
            Feed::None => feed_kind::NONE,
            Feed::Replace(_) => feed_kind::REPLACE,
            Feed::Rows(_) => feed_kind::ROWS,
        }
    }
    pub fn output(self) -> Option<usize> {
        match self {
            Feed::None => None,
            Feed::Replace(o) | Feed::Rows(o) => Some(o),
        }
    }
}

/// Which rows a row feed copies (the Rust form of [`RlxRowFeed`]; the
/// layout is explained there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowFeed {
    pub row_elems: usize,
    pub n_rows: usize,
    pub src_row: usize,
    pub dst_row: usize,
    pub batch: usize,
    pub src_batch_rows: usize,
    pub dst_batch_rows: usize,
    /// One first destination row per batch, in place of `dst_row`.
    pub dst_rows: Option<Vec<usize>>,
}

/// One copy of a row feed: `len` elements from `src` (an element index
/// of the output) to `dst` (of the state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowCopy {
    pub src: usize,
    pub dst: usize,
    pub len: usize,
}

impl RowFeed {
    /// `n_rows` rows of `row_elems` elements, output row `src_row` on to
    /// state row `dst_row`, one batch (rlx-runtime's `feed_kv_row`).
    pub fn rows(row_elems: usize, src_row: usize, dst_row: usize, n_rows: usize) -> RowFeed {
        RowFeed {
            row_elems,
            n_rows,
            src_row,
            dst_row,
            batch: 1,
            src_batch_rows: 0,
            dst_batch_rows: 0,
            dst_rows: None,
        }
    }

    /// The ABI form; its `dst_rows` points into `self`.
    pub fn to_raw(&self) -> RlxRowFeed {
        RlxRowFeed {
            struct_size: <RlxRowFeed as crate::sized::AbiStruct>::STRUCT_SIZE,
            row_elems: self.row_elems as u64,
            n_rows: self.n_rows as u64,
            src_row: self.src_row as u64,
            dst_row: self.dst_row as u64,
            batch: self.batch as u64,
            src_batch_rows: self.src_batch_rows as u64,
            dst_batch_rows: self.dst_batch_rows as u64,
            dst_rows: self
                .dst_rows
                .as_ref()
                .map_or(std::ptr::null(), |r| r.as_ptr() as *const u64),
        }
    }

    /// Read a caller's feed (by the size rule), refusing what cannot be a
    /// feed before anything is copied.
    ///
    /// # Safety
    /// `p` is null or points at a feed readable for its `struct_size`,
    /// whose `dst_rows` is null or points at `batch` readable `u64`s.
    pub unsafe fn from_raw(p: *const RlxRowFeed) -> PluginResult<RowFeed> {
        // SAFETY: the caller's promise.
        let Some(size) = (unsafe { crate::sized::declared_size(p) }) else {
            return Err(PluginError::invalid_argument("`rows` is null"));
        };
        let want = <RlxRowFeed as crate::sized::AbiStruct>::STRUCT_SIZE;
        if size < want {
            return Err(PluginError::invalid_argument(format!(
                "row feed struct_size {size} is smaller than RlxRowFeed's {want}: every field \
                 is required"
            )));
        }
        // SAFETY: readable for its whole size, checked above.
        let r = unsafe { std::ptr::read_unaligned(p) };
        let n = |v: u64, what: &str| {
            usize::try_from(v).map_err(|_| {
                PluginError::invalid_argument(format!("row feed {what} {v} is too large"))
            })
        };
        let batch = n(r.batch, "batch")?;
        let dst_rows = if r.dst_rows.is_null() {
            None
        } else {
            if batch > MAX_FEED_BATCH {
                return Err(PluginError::invalid_argument(format!(
                    "row feed batch {batch} is more than {}",
                    MAX_FEED_BATCH
                )));
            }
            // SAFETY: the caller's promise: `batch` readable u64s.
            let raw = unsafe { std::slice::from_raw_parts(r.dst_rows, batch) };
            Some(
                raw.iter()
                    .map(|&v| n(v, "dst_rows entry"))
                    .collect::<PluginResult<Vec<_>>>()?,
            )
        };
        let feed = RowFeed {
            row_elems: n(r.row_elems, "row_elems")?,
            n_rows: n(r.n_rows, "n_rows")?,
            src_row: n(r.src_row, "src_row")?,
            dst_row: n(r.dst_row, "dst_row")?,
            batch,
            src_batch_rows: n(r.src_batch_rows, "src_batch_rows")?,
            dst_batch_rows: n(r.dst_batch_rows, "dst_batch_rows")?,
            dst_rows,
        };
        feed.check_shape()?;
        Ok(feed)
    }

    /// The rules that do not depend on the tensors.
    pub fn check_shape(&self) -> PluginResult<()> {
        let bad = |m: String| Err(PluginError::invalid_argument(format!("row feed: {m}")));
        if self.row_elems == 0 {
            return bad("row_elems is 0".into());
        }
        if self.n_rows == 0 {
            return bad("n_rows is 0".into());
        }
        if self.batch == 0 {
            return bad("batch is 0".into());
        }
        if self.batch > MAX_FEED_BATCH {
            return bad(format!(
                "batch {} is more than {}",
                self.batch, MAX_FEED_BATCH
            ));
        }
        if let Some(r) = &self.dst_rows {
            if r.len() != self.batch {
                return bad(format!("{} dst_rows for {} batches", r.len(), self.batch));
            }
        }
        if self.batch > 1 {
            // Each batch's rows stay inside its own block.
            let end = |first: usize| first.checked_add(self.n_rows);
            if end(self.src_row).is_none_or(|e| e > self.src_batch_rows) {
                return bad(format!(
                    "rows {}..{} of each batch are past its {} output rows",
                    self.src_row,
                    self.src_row.saturating_add(self.n_rows),
                    self.src_batch_rows
                ));
            }
            for first in self.dst_firsts() {
                if end(first).is_none_or(|e| e > self.dst_batch_rows) {
                    return bad(format!(
                        "rows {first}..{} of a batch are past its {} state rows",
                        first.saturating_add(self.n_rows),
                        self.dst_batch_rows
                    ));
                }
            }
        }
        Ok(())
    }

    /// Each batch's first destination row.
    fn dst_firsts(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.batch).map(|b| self.dst_rows.as_ref().map_or(self.dst_row, |r| r[b]))
    }

    /// The copies this feed makes from an output of `src_elems` elements
    /// into a state of `dst_elems`, one per batch (its rows are
    /// consecutive), or an error naming the first range that does not fit.
    pub fn copies(&self, src_elems: usize, dst_elems: usize) -> PluginResult<Vec<RowCopy>> {
        self.check_shape()?;
        let len = self.n_rows.checked_mul(self.row_elems).ok_or_else(|| {
            PluginError::invalid_argument("row feed: n_rows * row_elems overflows")
        })?;
        let elem = |block: usize, block_rows: usize, row: usize| -> Option<usize> {
            block
                .checked_mul(block_rows)?
                .checked_add(row)?
                .checked_mul(self.row_elems)
        };
        let rows_of = |elems: usize| elems / self.row_elems;
        let mut out = Vec::with_capacity(self.batch);
        for (b, first) in self.dst_firsts().enumerate() {
            let src = elem(b, self.src_batch_rows, self.src_row)
                .filter(|s| s.checked_add(len).is_some_and(|e| e <= src_elems))
                .ok_or_else(|| {
                    PluginError::invalid_argument(format!(
                        "row feed: output rows {}..{} of batch {b} are out of range: the output \
                         has {} rows of {} elements",
                        self.src_row,
                        self.src_row.saturating_add(self.n_rows),
                        rows_of(src_elems),
                        self.row_elems
                    ))
                })?;
            let dst = elem(b, self.dst_batch_rows, first)
                .filter(|d| d.checked_add(len).is_some_and(|e| e <= dst_elems))
                .ok_or_else(|| {
                    PluginError::invalid_argument(format!(
                        "row feed: state rows {first}..{} of batch {b} are out of range: the \
                         state has {} rows of {} elements",
                        first.saturating_add(self.n_rows),
                        rows_of(dst_elems),
                        self.row_elems
                    ))
                })?;
            out.push(RowCopy { src, dst, len });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_copies_one_range() {
        let f = RowFeed::rows(4, 2, 5, 1);
        assert_eq!(
            f.copies(12, 32).unwrap(),
            vec![RowCopy {
                src: 8,
                dst: 20,
                len: 4
            }]
        );
    }

    #[test]
    fn batch_major_copies_one_range_per_batch() {
        // new [B=3, 1, 2] into past [3, 4, 2] at row 1
        let f = RowFeed {
            batch: 3,
            src_batch_rows: 1,
            dst_batch_rows: 4,
            ..RowFeed::rows(2, 0, 1, 1)
        };
        let c = f.copies(6, 24).unwrap();
        assert_eq!(
            c.iter().map(|c| (c.src, c.dst)).collect::<Vec<_>>(),
            vec![(0, 2), (2, 10), (4, 18)]
        );
    }

    #[test]
    fn ragged_rows_and_range_errors_name_the_rows() {
        let f = RowFeed {
            batch: 2,
            src_batch_rows: 1,
            dst_batch_rows: 3,
            dst_rows: Some(vec![0, 2]),
            ..RowFeed::rows(2, 0, 0, 1)
        };
        let c = f.copies(4, 12).unwrap();
        assert_eq!(c[1].dst, (3 + 2) * 2);
        let e = RowFeed::rows(2, 0, 6, 1).copies(4, 12).unwrap_err();
        assert!(e.message.contains("state rows 6..7"), "{}", e.message);
        let e = RowFeed::rows(2, 2, 0, 1).copies(4, 12).unwrap_err();
        assert!(e.message.contains("output rows 2..3"), "{}", e.message);
        let e = RowFeed {
            batch: 2,
            src_batch_rows: 1,
            dst_batch_rows: 3,
            ..RowFeed::rows(2, 0, 3, 1)
        }
        .check_shape()
        .unwrap_err();
        assert!(e.message.contains("past its 3 state rows"), "{}", e.message);
        assert!(RowFeed::rows(0, 0, 0, 1).check_shape().is_err());
        assert!(RowFeed::rows(usize::MAX, 3, 0, 1).copies(4, 4).is_err());
    }
}
