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
        let mut raw = RlxTensor::empty();
        raw.ownership = own;
        raw.dl.data = data;
        raw.dl.ndim = shape.len() as i32;
        raw.dl.dtype = dtype.to_dl();
        raw.dl.shape = shape.as_mut_ptr();
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

/// Borrowed named descriptors (run inputs), with the shape arrays they
/// point at kept alive alongside.
pub struct BorrowedNamed<'a> {
    _views: Vec<RawView<'a>>,
    pub named: Vec<RlxNamedTensor>,
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
    let views: Vec<RawView<'a>> = inputs
        .iter()
        .map(|(_, t)| RawView::of(t.dtype, t.shape, t.data, ownership::BORROWED))
        .collect();
    let named = inputs
        .iter()
        .zip(&views)
        .map(|((n, _), v)| RlxNamedTensor {
            struct_size: std::mem::size_of::<RlxNamedTensor>(),
            name: crate::RlxStr::from_str(n),
            tensor: v.raw,
        })
        .collect();
    BorrowedNamed {
        _views: views,
        named,
    }
}
