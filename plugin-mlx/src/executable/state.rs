//! Executable state: graph inputs held as MLX arrays across
//! runs, and how each follows the runs.
//!
//! A state is an `mx::array` like any other: binding copies the host's
//! bytes once to the executable's device, a run reads it where it lies, a
//! `Replace` feed makes the run's output the next value (no copy: the
//! output array itself), and a row feed writes rows of an output into it
//! with `slice_update`, which MLX performs in place when nothing else
//! holds the old value (a clone that shares it gets its own copy
//! instead). Arrays are immutable once evaluated, so clones and pending
//! runs that hold an old value keep seeing it.

use crate::lower::A;
use rlx_mlx_shim::{array, ops};
use rlx_plugin_api::{Feed, PluginError, PluginResult, RowFeed};
use std::collections::BTreeMap;

/// One held input.
pub(super) struct Held {
    pub(super) value: A,
    pub(super) feed: Feed,
}

/// The state of one executable: by input slot (the position in its
/// inputs), and the outputs of its last run.
#[derive(Default)]
pub(super) struct States {
    pub(super) held: BTreeMap<usize, Held>,
    /// The outputs of the last run that succeeded (or was submitted), where
    /// row feeds and output reads find them; empty before the first. They
    /// stay on the device until the next run replaces them.
    pub(super) last: Vec<A>,
}

/// What a run may have to put back if it fails after its feeds took
/// effect (a submitted run): the values before it.
pub(super) struct Snapshot {
    held: Vec<(usize, A)>,
    last: Vec<A>,
}

impl States {
    pub(super) fn is_held(&self, slot: usize) -> bool {
        self.held.contains_key(&slot)
    }

    pub(super) fn value(&self, slot: usize) -> Option<&A> {
        self.held.get(&slot).map(|h| &h.value)
    }

    /// A copy for a clone: the same values (arrays are immutable) and
    /// feeds; no last run.
    pub(super) fn cloned(&self) -> States {
        States {
            held: self
                .held
                .iter()
                .map(|(s, h)| {
                    (
                        *s,
                        Held {
                            value: h.value.clone_handle(),
                            feed: h.feed,
                        },
                    )
                })
                .collect(),
            last: Vec::new(),
        }
    }

    /// After a run succeeded (or was submitted): each `Replace` state
    /// becomes its output, and the outputs are kept as the last run's.
    pub(super) fn follow(&mut self, outs: &[A]) {
        for h in self.held.values_mut() {
            if let Feed::Replace(o) = h.feed {
                h.value = outs[o].clone_handle();
            }
        }
        self.last = outs.iter().map(|a| a.clone_handle()).collect();
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            held: self
                .held
                .iter()
                .map(|(s, h)| (*s, h.value.clone_handle()))
                .collect(),
            last: self.last.iter().map(|a| a.clone_handle()).collect(),
        }
    }

    /// Put back what `snap` saw (a state bound or unbound since stays so).
    pub(super) fn restore(&mut self, snap: Snapshot) {
        for (slot, value) in snap.held {
            if let Some(h) = self.held.get_mut(&slot) {
                h.value = value;
            }
        }
        self.last = snap.last;
    }

    /// Copy `rows` from the kept outputs into each state in `slots` (every
    /// one fed rows), all ranges checked before any is written. `name`
    /// names a slot for messages.
    pub(super) fn feed_rows(
        &mut self,
        slots: &[usize],
        rows: &RowFeed,
        name: &dyn Fn(usize) -> String,
    ) -> PluginResult<()> {
        let mut plans = Vec::with_capacity(slots.len());
        for &slot in slots {
            let h = &self.held[&slot];
            let Feed::Rows(o) = h.feed else {
                return Err(PluginError::invalid_argument(format!(
                    "state {:?} is not fed rows (set_feed it with kind ROWS first)",
                    name(slot)
                )));
            };
            let src = self.last.get(o).ok_or_else(|| {
                PluginError::invalid_argument(format!(
                    "state {:?}: no run has completed yet, so there are no rows to copy",
                    name(slot)
                ))
            })?;
            let copies = rows
                .copies(src.size(), h.value.size())
                .map_err(|e| e.context(format!("state {:?}", name(slot))))?;
            plans.push((slot, o, copies));
        }
        for (slot, o, copies) in plans {
            let src = flat(&self.last[o])?;
            let h = self.held.get_mut(&slot).expect("planned");
            let shape = h.value.shape();
            let mut dst = flat(&h.value)?;
            for c in copies {
                let piece = ops::slice(&src, &[idx(c.src)?], &[idx(c.src + c.len)?], &[1])
                    .map_err(internal)?;
                dst = ops::slice_update(&dst, &piece, &[idx(c.dst)?], &[idx(c.dst + c.len)?], &[1])
                    .map_err(internal)?;
            }
            let next = ops::reshape(&dst, &shape).map_err(internal)?;
            drop(dst);
            // The executable's own handle on the old value is let go before
            // the update runs: MLX writes a slice in place only into a
            // buffer nothing else holds, and a kept handle would make every
            // feed a copy of the whole state (2 MiB a cache a token at a
            // 1,024-row bucket). A clone or a pending run that holds the
            // old value still makes it a copy, as it must. Evaluated now,
            // so that updates do not chain until the next run; should the
            // evaluation fail, the state is the update, and its next use
            // evaluates it again.
            h.value = next;
            h.value.eval().map_err(internal)?;
        }
        Ok(())
    }
}

/// The array as one row-major axis.
pub(super) fn flat(a: &A) -> PluginResult<A> {
    ops::reshape(a, &[-1]).map_err(internal)
}

/// An element index as MLX's `i32`: a state too large to index so is an
/// error, not a wrapped index.
pub(super) fn idx(i: usize) -> PluginResult<i32> {
    i32::try_from(i).map_err(|_| {
        PluginError::invalid_argument(format!(
            "element {i} is past what MLX indexes (2^31 elements per tensor)"
        ))
    })
}

fn internal(e: impl std::fmt::Display) -> PluginError {
    PluginError::internal(e.to_string())
}

/// Copy `n` elements of `a` from `first` into `out` (`n` elements of its
/// dtype).
pub(super) fn read_range(a: &A, first: usize, out: &mut [u8]) -> PluginResult<()> {
    let item = a.nbytes() / a.size().max(1);
    if item > 0 && !out.len().is_multiple_of(item) {
        return Err(PluginError::invalid_argument(format!(
            "a buffer of {} bytes is not a whole number of {item}-byte elements",
            out.len()
        )));
    }
    let n = out.len() / item.max(1);
    let total = a.size();
    if first.checked_add(n).is_none_or(|end| end > total) {
        return Err(PluginError::invalid_argument(format!(
            "elements {first}..{} are out of range: the tensor has {total}",
            first.saturating_add(n)
        )));
    }
    if first == 0 && n == total {
        return array::array_copy_into(a, out).map_err(internal);
    }
    let part =
        ops::slice(&*flat(a)?, &[idx(first)?], &[idx(first + n)?], &[1]).map_err(internal)?;
    array::array_copy_into(&part, out).map_err(internal)
}
