//! `BORROWED` descriptors of host tensors for one call, with the shape
//! arrays they point at kept alive alongside.

use super::*;

/// A borrowed descriptor of a [`HostTensor`], keeping its shape array alive.
pub struct RawView<'a> {
    pub raw: RlxTensor,
    _shape: Vec<i64>,
    _data: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> RawView<'a> {
    /// A compact row-major descriptor of `data`. The descriptor's data
    /// pointer is `*mut` as DLPack's is; it is written through only when
    /// the receiver is allowed to (a kernel's outputs).
    pub fn of(dtype: DType, shape: &[usize], data: &'a [u8], own: u32) -> RawView<'a> {
        Self::at(dtype, shape, data.as_ptr() as *mut c_void, own)
    }

    /// A writable descriptor of `data` (a kernel's output).
    pub fn of_mut(dtype: DType, shape: &[usize], data: &'a mut [u8], own: u32) -> RawView<'a> {
        Self::at(dtype, shape, data.as_mut_ptr() as *mut c_void, own)
    }

    fn at(dtype: DType, shape: &[usize], data: *mut c_void, own: u32) -> RawView<'a> {
        let mut shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let raw = RlxTensor::compact(dtype, data, shape.as_mut_ptr(), shape.len(), own);
        RawView {
            raw,
            _shape: shape,
            _data: std::marker::PhantomData,
        }
    }
}

/// Borrowed descriptors of several tensors (`raws`), with the shape arrays
/// they point at kept alive alongside.
pub struct BorrowedTensors<'a> {
    _views: Vec<RawView<'a>>,
    pub raws: Vec<RlxTensor>,
}

/// `BORROWED` descriptors of `tensors`, in order, for one call.
pub fn borrow_all(tensors: &[HostTensor]) -> BorrowedTensors<'_> {
    let views: Vec<RawView<'_>> = tensors
        .iter()
        .map(|t| t.as_raw(ownership::BORROWED))
        .collect();
    let raws = views.iter().map(|v| v.raw).collect();
    BorrowedTensors {
        _views: views,
        raws,
    }
}

/// Borrowed named descriptors (run inputs), with the shapes they point at
/// kept alive alongside: every shape in one buffer, and the descriptors
/// inline for up to four inputs (a run of a tiny graph makes no other
/// allocation here).
pub struct BorrowedNamed<'a> {
    /// Never grown after the descriptors point into it.
    _dims: Vec<i64>,
    pub named: smallvec::SmallVec<[RlxNamedTensor; 4]>,
    _data: std::marker::PhantomData<&'a [u8]>,
}

/// `BORROWED` named descriptors of `inputs`, in order, for one run. The
/// names are borrowed from `inputs`.
pub fn borrow_named<'a>(inputs: &[(&'a str, &'a HostTensor)]) -> BorrowedNamed<'a> {
    let views: Vec<(&'a str, HostTensorRef<'a>)> = inputs
        .iter()
        .map(|(n, t)| (*n, HostTensorRef::from(*t)))
        .collect();
    borrow_named_refs(&views)
}

/// As [`borrow_named`], for borrowed tensors.
pub fn borrow_named_refs<'a>(inputs: &[(&'a str, HostTensorRef<'a>)]) -> BorrowedNamed<'a> {
    // All shapes first, at their final size: the descriptors point into
    // this buffer, which must not move afterwards.
    let mut dims: Vec<i64> = Vec::with_capacity(inputs.iter().map(|(_, t)| t.shape.len()).sum());
    for (_, t) in inputs {
        dims.extend(t.shape.iter().map(|&d| d as i64));
    }
    let mut at = 0;
    let named = inputs
        .iter()
        .map(|(n, t)| {
            // SAFETY: `at + ndim <= dims.len()`: the shapes were pushed in
            // this order. The pointer stays valid while `dims` is neither
            // grown nor dropped, which BorrowedNamed guarantees.
            let shape = unsafe { dims.as_mut_ptr().add(at) };
            at += t.shape.len();
            RlxNamedTensor {
                struct_size: std::mem::size_of::<RlxNamedTensor>(),
                name: crate::RlxStr::from_str(n),
                // `*mut` as DLPack's is; a run's inputs are never written.
                tensor: RlxTensor::compact(
                    t.dtype,
                    t.data.as_ptr() as *mut c_void,
                    shape,
                    t.shape.len(),
                    ownership::BORROWED,
                ),
            }
        })
        .collect();
    BorrowedNamed {
        _dims: dims,
        named,
        _data: std::marker::PhantomData,
    }
}
