//! Where a run's outputs go on the host: into a `Vec` lent to the plugin, read
//! from the buffer the plugin hands over, or (a skipped slot) not copied off
//! the device at all.

use rlx_plugin_api::ValueInfo;
use rlx_plugin_loader::{LentBuffer, OutputDest};
use smallvec::SmallVec;

/// Room for `n` elements of an output the plugin writes whole: a `Vec`
/// of length 0 whose capacity is lent for the run (nothing reads it before
/// it is written, so no fill is paid for, and its length is set only once
/// the run has written it), or None when the memory cannot be had (the
/// output is then handed over by the plugin, and a copy that cannot be
/// made is an error there, never an abort).
fn room<T>(n: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    Some(v)
}

/// The element count of an output whose signature fixes every size: the
/// outputs whose buffers the host can allocate before a run.
pub(super) fn fixed_numel(v: &ValueInfo) -> Option<usize> {
    v.shape
        .iter()
        .try_fold(1usize, |n, d| d.and_then(|d| n.checked_mul(d)))
}

/// `v`'s spare capacity for `n` elements as the buffer an output is
/// written into.
fn lend<T>(v: &mut Vec<T>, n: usize) -> LentBuffer {
    debug_assert!(v.capacity() >= n && v.is_empty());
    LentBuffer {
        ptr: v.as_mut_ptr().cast(),
        len: n * std::mem::size_of::<T>(),
    }
}

/// A lent room and its element count, when the output was lent one.
type Room<T> = Option<(Vec<T>, usize)>;

/// One run's (or wait's) destinations, and the rooms lent for them.
pub(super) struct Plan<T> {
    /// Per output: its room and its element count, when lent.
    rooms: SmallVec<[Room<T>; 4]>,
    dests: SmallVec<[OutputDest; 4]>,
}

impl<T> Plan<T> {
    /// Per output: skipped unless `want(i)`; else lent when `lend` and
    /// `elems` sizes it (and the memory can be had); else read.
    pub(super) fn new(
        outputs: &[ValueInfo],
        want: impl Fn(usize) -> bool,
        lend_outputs: bool,
        elems: impl Fn(&ValueInfo) -> Option<usize>,
    ) -> Plan<T> {
        let mut rooms: SmallVec<[Room<T>; 4]> = outputs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                (want(i) && lend_outputs)
                    .then(|| elems(v))
                    .flatten()
                    .and_then(|n| room::<T>(n).map(|r| (r, n)))
            })
            .collect();
        let dests = rooms
            .iter_mut()
            .enumerate()
            .map(|(i, r)| match r {
                Some((v, n)) => OutputDest::Lend(lend(v, *n)),
                None if want(i) => OutputDest::Read,
                None => OutputDest::Skip,
            })
            .collect();
        Plan { rooms, dests }
    }

    pub(super) fn dests(&self) -> &[OutputDest] {
        &self.dests
    }

    /// The outputs: each written into its room (whose length is now set),
    /// read by the call's reader, or `None` when skipped.
    ///
    /// # Safety
    /// The dests were given to a call that succeeded and returned `read`,
    /// so each lent room's first `n` elements are written.
    pub(super) unsafe fn finish<U>(
        self,
        read: Vec<Option<U>>,
        mut filled: impl FnMut(usize, Vec<T>) -> U,
    ) -> Vec<Option<U>> {
        read.into_iter()
            .zip(self.rooms)
            .enumerate()
            .map(|(i, (r, m))| match (r, m) {
                (Some(r), _) => Some(r),
                (None, Some((mut v, n))) => {
                    // SAFETY: the caller's promise: the call wrote n elements.
                    unsafe { v.set_len(n) };
                    Some(filled(i, v))
                }
                (None, None) => None,
            })
            .collect()
    }
}
