//! Tensor descriptors: DLPack's layout, with ownership written down.
//!
//! [`RlxDlTensor`] is field for field DLPack's `DLTensor` (so `&t.dl` can be
//! handed to any DLPack consumer), [`RlxDataType`] is `DLDataType` and
//! [`RlxDevice`] is `DLDevice`. [`RlxTensor`] wraps it with the struct size
//! every ABI struct starts with, an ownership tag, and DLPack's
//! `manager_ctx` / `deleter` pair. Unlike DLPack, the deleter takes
//! `manager_ctx` (not the struct's address), so an `RlxTensor` may be copied
//! freely: the struct is plain data, the buffer belongs to the manager.

use crate::error::{PluginError, PluginResult};
use abi_stable::StableAbi;
use std::ffi::c_void;
use std::fmt;

/// DLPack `DLDataType`: type code, bits per lane, lanes.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RlxDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// DLPack type codes (`DLDataTypeCode`).
pub mod dl_code {
    pub const INT: u8 = 0;
    pub const UINT: u8 = 1;
    pub const FLOAT: u8 = 2;
    pub const BFLOAT: u8 = 4;
    pub const COMPLEX: u8 = 5;
    pub const BOOL: u8 = 6;
}

/// DLPack `DLDevice`. Only the host CPU (`device_type == 1`, `kDLCPU`)
/// crosses this ABI today: plugins copy device memory to the host.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlxDevice {
    pub device_type: i32,
    pub device_id: i32,
}

impl RlxDevice {
    pub const CPU: RlxDevice = RlxDevice {
        device_type: 1,
        device_id: 0,
    };
}

/// DLPack `DLTensor`, field for field.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RlxDlTensor {
    /// Start of the buffer; the first element is at `data + byte_offset`.
    pub data: *mut c_void,
    pub device: RlxDevice,
    pub ndim: i32,
    pub dtype: RlxDataType,
    /// `ndim` sizes. Owned like `data`.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or null for compact row-major.
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// How the receiver of an [`RlxTensor`] may treat its memory.
pub mod ownership {
    /// Valid only during the call that receives it; the receiver copies
    /// whatever it keeps.
    pub const BORROWED: u32 = 0;
    /// Borrowed, and the sender guarantees the memory outlives whatever the
    /// receiver binds it to (for `executable_bind_param`: the executable).
    /// The receiver may alias it without copying.
    pub const BORROWED_PERSISTENT: u32 = 1;
    /// Ownership moves to the receiver, which calls `deleter(manager_ctx)`
    /// exactly once when it no longer needs `data`, `shape` and `strides`.
    pub const OWNED: u32 = 2;
}

/// A tensor crossing the ABI. See [`ownership`] for who frees what.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RlxTensor {
    pub struct_size: usize,
    /// One of [`ownership`].
    pub ownership: u32,
    pub dl: RlxDlTensor,
    /// The manager's state; passed to `deleter`. Null when borrowed.
    pub manager_ctx: *mut c_void,
    /// Frees `data`/`shape`/`strides` when `ownership == OWNED`.
    pub deleter: Option<unsafe extern "C" fn(manager_ctx: *mut c_void)>,
}

impl RlxTensor {
    /// An all-null slot to be filled by a callee (outputs).
    pub fn empty() -> RlxTensor {
        RlxTensor {
            struct_size: std::mem::size_of::<RlxTensor>(),
            ownership: ownership::BORROWED,
            dl: RlxDlTensor {
                data: std::ptr::null_mut(),
                device: RlxDevice::CPU,
                ndim: 0,
                dtype: DType::F32.to_dl(),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: None,
        }
    }
}

/// A named tensor (run inputs).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RlxNamedTensor {
    pub struct_size: usize,
    /// Borrowed for the call.
    pub name: crate::RlxStr,
    pub tensor: RlxTensor,
}

/// Element types the ABI names. Anything else DLPack can describe is
/// refused with a clear error rather than misread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U32,
    Bool,
    C64,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::Bool,
        DType::C64,
    ];

    /// A real floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// Lower-case name, as rlx writes dtypes in `.rlxmodel` (`f32`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::C64 => "c64",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        let lower = name.to_ascii_lowercase();
        Self::ALL.into_iter().find(|d| d.name() == lower)
    }

    pub fn size_bytes(self) -> usize {
        self.to_dl().bits as usize / 8
    }

    pub fn to_dl(self) -> RlxDataType {
        use dl_code::*;
        let (code, bits) = match self {
            DType::F32 => (FLOAT, 32),
            DType::F16 => (FLOAT, 16),
            DType::BF16 => (BFLOAT, 16),
            DType::F64 => (FLOAT, 64),
            DType::I8 => (INT, 8),
            DType::I16 => (INT, 16),
            DType::I32 => (INT, 32),
            DType::I64 => (INT, 64),
            DType::U8 => (UINT, 8),
            DType::U32 => (UINT, 32),
            DType::Bool => (BOOL, 8),
            DType::C64 => (COMPLEX, 64),
        };
        RlxDataType {
            code,
            bits,
            lanes: 1,
        }
    }

    pub fn from_dl(dt: RlxDataType) -> PluginResult<DType> {
        Self::ALL
            .into_iter()
            .find(|d| d.to_dl() == dt)
            .ok_or_else(|| {
                PluginError::unsupported(format!(
                    "DLPack dtype (code {}, bits {}, lanes {}) is not an RLX dtype",
                    dt.code, dt.bits, dt.lanes
                ))
            })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor in plain Rust: dtype, shape, compact row-major little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl HostTensor {
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> PluginResult<HostTensor> {
        HostTensorRef::new(dtype, &shape, &data)?;
        Ok(HostTensor { dtype, shape, data })
    }

    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> PluginResult<HostTensor> {
        Self::new(DType::F32, shape, crate::convert::f32_to_le(values))
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The values as f32, converting from any float or integer dtype.
    pub fn to_f32_vec(&self) -> PluginResult<Vec<f32>> {
        crate::convert::bytes_to_f32(self.dtype, &self.data)
    }

    /// A borrowed descriptor of this tensor. The returned value borrows
    /// `self`; the descriptor inside is valid while it lives.
    pub fn as_raw(&self, own: u32) -> RawView<'_> {
        RawView::of(self.dtype, &self.shape, &self.data, own)
    }

    /// Move this tensor into an owned descriptor whose deleter frees it.
    pub fn into_raw_owned(self) -> RlxTensor {
        OwnedTensor::from_host(self).into_raw()
    }

    /// Copy a descriptor's elements into a `HostTensor` (any strides and
    /// byte offset; the result is compact). Does not take ownership.
    ///
    /// # Safety
    /// `raw` must describe readable memory as DLPack defines it.
    pub unsafe fn copy_from_raw(raw: &RlxTensor) -> PluginResult<HostTensor> {
        let view = TensorRef::from_raw(raw)?;
        Ok(HostTensor {
            dtype: view.dtype,
            shape: view.shape.to_vec(),
            data: view.to_compact_bytes()?,
        })
    }

    /// Take an owned descriptor: copy it, then release it through its
    /// deleter. A borrowed descriptor is only copied.
    ///
    /// # Safety
    /// As for [`HostTensor::copy_from_raw`]; an owned `raw` must not be
    /// used again.
    pub unsafe fn take_raw(raw: RlxTensor) -> PluginResult<HostTensor> {
        let out = Self::copy_from_raw(&raw);
        release(raw);
        out
    }
}

/// An output a plugin hands over: an `OWNED` descriptor whose deleter
/// frees whatever backs it. Dropped without being handed over, it is
/// released.
#[derive(Debug)]
pub struct OwnedTensor(RlxTensor);

impl OwnedTensor {
    /// A tensor that owns its bytes.
    pub fn from_host(t: HostTensor) -> OwnedTensor {
        let ptr = t.data.as_ptr();
        // SAFETY: `ptr` is the bytes of `t.data`, which the descriptor keeps
        // (moving a Vec does not move its heap buffer). Their length is not
        // checked again here: the fields are public, and a mismatch is the
        // receiver's to report, as before.
        unsafe { Self::kept(t.dtype, &t.shape, ptr, t.data) }
    }

    /// `len` compact row-major bytes at `data`, kept alive by `keeper` (an
    /// array of the plugin's own, say), which is dropped when the receiver
    /// releases the descriptor, on whatever thread it does so.
    ///
    /// # Safety
    /// `data` must point at `len` readable bytes, the compact row-major
    /// elements of `dtype` and `shape`, that stay valid and unmodified while
    /// `keeper` lives.
    pub unsafe fn kept_by<K: Send + 'static>(
        dtype: DType,
        shape: &[usize],
        data: *const u8,
        len: usize,
        keeper: K,
    ) -> PluginResult<OwnedTensor> {
        if compact_len(dtype, shape) != Some(len) {
            return Err(PluginError::internal(format!(
                "tensor {dtype}{shape:?} cannot be {len} bytes"
            )));
        }
        Ok(Self::kept(dtype, shape, data, keeper))
    }

    /// The descriptor of `kept_by`, unchecked.
    ///
    /// # Safety
    /// As for [`OwnedTensor::kept_by`], except that the length is not known.
    unsafe fn kept<K: Send + 'static>(
        dtype: DType,
        shape: &[usize],
        data: *const u8,
        keeper: K,
    ) -> OwnedTensor {
        struct Kept<K> {
            _keeper: K,
            shape: Dims<i64>,
        }
        unsafe extern "C" fn drop_kept<K>(ctx: *mut c_void) {
            if !ctx.is_null() {
                drop(Box::from_raw(ctx as *mut Kept<K>));
            }
        }
        // One allocation: the shape (inline up to rank 4) lives in the box
        // with the keeper, and the box does not move until it is dropped.
        let kept = Box::into_raw(Box::new(Kept {
            _keeper: keeper,
            shape: shape.iter().map(|&d| d as i64).collect(),
        }));
        let mut raw = RlxTensor::empty();
        raw.ownership = ownership::OWNED;
        raw.dl.data = data as *mut c_void;
        raw.dl.ndim = (*kept).shape.len() as i32;
        raw.dl.dtype = dtype.to_dl();
        raw.dl.shape = (*kept).shape.as_mut_ptr();
        raw.manager_ctx = kept as *mut c_void;
        raw.deleter = Some(drop_kept::<K>);
        OwnedTensor(raw)
    }

    /// The descriptor, for the receiver, who now releases it.
    pub fn into_raw(self) -> RlxTensor {
        let raw = self.0;
        std::mem::forget(self);
        raw
    }
}

impl Drop for OwnedTensor {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned and was never handed over.
        unsafe { release(self.0) }
    }
}

/// Release an owned descriptor (no-op for borrowed ones).
///
/// # Safety
/// `raw` must not be used afterwards if it was owned.
pub unsafe fn release(raw: RlxTensor) {
    if raw.ownership == ownership::OWNED {
        if let Some(del) = raw.deleter {
            del(raw.manager_ctx);
        }
    }
}

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

/// The bytes of a compact row-major tensor of `dtype` and `shape`; None
/// when that overflows `usize`.
fn compact_len(dtype: DType, shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(dtype.size_bytes(), |n, &d| n.checked_mul(d))
}

/// A borrowed host tensor: dtype, shape and compact row-major
/// little-endian bytes that someone else owns (a run's input, passed to the
/// plugin without a copy).
#[derive(Clone, Copy, Debug)]
pub struct HostTensorRef<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl<'a> HostTensorRef<'a> {
    /// A view of `data`, which must hold exactly the bytes of `shape`.
    pub fn new(dtype: DType, shape: &'a [usize], data: &'a [u8]) -> PluginResult<Self> {
        let want = compact_len(dtype, shape);
        if want != Some(data.len()) {
            return Err(PluginError::invalid_argument(format!(
                "tensor {dtype}{shape:?} needs {} bytes, got {}",
                want.map_or("more than usize::MAX".to_string(), |w| w.to_string()),
                data.len()
            )));
        }
        Ok(HostTensorRef { dtype, shape, data })
    }
}

impl<'a> From<&'a HostTensor> for HostTensorRef<'a> {
    fn from(t: &'a HostTensor) -> Self {
        HostTensorRef {
            dtype: t.dtype,
            shape: &t.shape,
            data: &t.data,
        }
    }
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

/// A shape or strides: up to rank 4 inline, without a heap allocation.
pub type Dims<T> = smallvec::SmallVec<[T; 4]>;

/// A validated, read-only view of a descriptor's memory.
#[derive(Debug)]
pub struct TensorRef<'a> {
    pub dtype: DType,
    pub shape: Dims<usize>,
    /// Element strides (compact row-major when the descriptor had none).
    pub strides: Dims<i64>,
    /// Base of element 0.
    base: *const u8,
    /// The smallest byte range containing every element, relative to base.
    span: (isize, isize),
    _life: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> TensorRef<'a> {
    /// Validate a descriptor: non-null shape when ndim > 0, non-negative
    /// sizes, a known dtype, host memory, non-null data when non-empty.
    ///
    /// # Safety
    /// `raw` must describe readable memory for `'a`.
    pub unsafe fn from_raw(raw: &RlxTensor) -> PluginResult<TensorRef<'a>> {
        if raw.struct_size != std::mem::size_of::<RlxTensor>() {
            return Err(PluginError::invalid_argument(format!(
                "tensor descriptor struct_size {} is not {}: RlxTensor is frozen in ABI 1 \
                 (tensors travel in arrays)",
                raw.struct_size,
                std::mem::size_of::<RlxTensor>()
            )));
        }
        let dl = &raw.dl;
        if dl.device.device_type != RlxDevice::CPU.device_type {
            return Err(PluginError::unsupported(format!(
                "tensor on DLPack device type {}: only host memory (kDLCPU) crosses this ABI",
                dl.device.device_type
            )));
        }
        let dtype = DType::from_dl(dl.dtype)?;
        if dl.ndim < 0 || (dl.ndim > 0 && dl.shape.is_null()) {
            return Err(PluginError::invalid_argument(format!(
                "tensor has ndim {} and {} shape pointer",
                dl.ndim,
                if dl.shape.is_null() { "a null" } else { "a" }
            )));
        }
        let ndim = dl.ndim as usize;
        let dims: &[i64] = if ndim == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(dl.shape, ndim)
        };
        if let Some(d) = dims.iter().find(|d| **d < 0) {
            return Err(PluginError::invalid_argument(format!(
                "tensor shape {dims:?} has a negative size {d}"
            )));
        }
        let shape: Dims<usize> = dims.iter().map(|&d| d as usize).collect();
        let strides: Dims<i64> = if dl.strides.is_null() {
            compact_strides(&shape)
        } else {
            Dims::from_slice(std::slice::from_raw_parts(dl.strides, ndim))
        };
        // Checked: a shape or strides from a peer may be anything, and a
        // wrapped product would describe memory that is not there.
        let too_big = || {
            PluginError::invalid_argument(format!(
                "tensor {dtype}{dims:?} is larger than the address space"
            ))
        };
        let numel = shape
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(*d))
            .filter(|n| {
                n.checked_mul(dtype.size_bytes())
                    .is_some_and(|b| b <= isize::MAX as usize)
            })
            .ok_or_else(too_big)?;
        let esize = dtype.size_bytes() as i128;
        let mut lo = 0i128;
        let mut hi = 0i128;
        if numel > 0 {
            for (d, s) in shape.iter().zip(&strides) {
                let ext = (*d as i128 - 1) * (*s as i128) * esize;
                if ext < 0 {
                    lo += ext;
                } else {
                    hi += ext;
                }
                if lo < isize::MIN as i128 || hi > isize::MAX as i128 {
                    return Err(PluginError::invalid_argument(format!(
                        "tensor {dtype}{dims:?} with strides {strides:?} addresses more than \
                         the address space"
                    )));
                }
            }
            hi += esize;
            if dl.data.is_null() {
                return Err(PluginError::invalid_argument(format!(
                    "tensor {dtype}{shape:?} has a null data pointer"
                )));
            }
        }
        Ok(TensorRef {
            dtype,
            shape,
            strides,
            base: (dl.data as *const u8).wrapping_add(dl.byte_offset as usize),
            span: (lo as isize, hi as isize),
            _life: std::marker::PhantomData,
        })
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_compact(&self) -> bool {
        self.numel() <= 1 || self.strides == compact_strides(&self.shape)
    }

    /// The elements compact row-major: the view's own bytes when it is
    /// compact (no copy), else gathered into a new buffer.
    pub fn compact_cow(&self) -> PluginResult<std::borrow::Cow<'a, [u8]>> {
        match self.compact_bytes() {
            Some(b) => Ok(std::borrow::Cow::Borrowed(b)),
            None => self.to_compact_bytes().map(std::borrow::Cow::Owned),
        }
    }

    /// The bytes when the view is compact row-major, without a copy.
    pub fn compact_bytes(&self) -> Option<&'a [u8]> {
        if !self.is_compact() {
            return None;
        }
        let n = self.numel() * self.dtype.size_bytes();
        if n == 0 {
            return Some(&[]);
        }
        // SAFETY: from_raw's contract: `base` addresses numel elements.
        Some(unsafe { std::slice::from_raw_parts(self.base, n) })
    }

    /// The elements in row-major order, gathered through the strides. A
    /// broadcast view (zero strides) may describe far more elements than
    /// its memory holds: the copy is reserved fallibly, and a copy that
    /// cannot be made is RESOURCE_EXHAUSTED, not an abort.
    pub fn to_compact_bytes(&self) -> PluginResult<Vec<u8>> {
        let es = self.dtype.size_bytes();
        let numel = self.numel();
        let n = numel * es; // checked in from_raw
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| {
            PluginError::resource_exhausted(format!(
                "cannot allocate {n} bytes for a compact copy of a {}{:?} tensor",
                self.dtype, self.shape
            ))
        })?;
        if let Some(b) = self.compact_bytes() {
            out.extend_from_slice(b);
            return Ok(out);
        }
        let mut idx = vec![0usize; self.shape.len()];
        for _ in 0..numel {
            let off: isize = idx
                .iter()
                .zip(&self.strides)
                .map(|(i, s)| *i as isize * *s as isize)
                .sum::<isize>()
                * es as isize;
            debug_assert!(off >= self.span.0 && off + es as isize <= self.span.1);
            // SAFETY: off lies within the span validated in from_raw.
            let p = unsafe { self.base.offset(off) };
            // SAFETY: `off` is within the span validated by from_raw, so `p..p+es` is readable.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, es) });
            for ax in (0..idx.len()).rev() {
                idx[ax] += 1;
                if idx[ax] < self.shape[ax] {
                    break;
                }
                idx[ax] = 0;
            }
        }
        Ok(out)
    }
}

/// Row-major strides, in elements.
pub fn compact_strides(shape: &[usize]) -> Dims<i64> {
    // Saturating: only an empty tensor's strides can get that large
    // (a non-empty one fits in memory), and they address nothing.
    let mut strides: Dims<i64> = smallvec::smallvec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1].min(i64::MAX as usize) as i64);
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_round_trip_through_dlpack_codes() {
        for d in DType::ALL {
            assert_eq!(DType::from_dl(d.to_dl()).unwrap(), d);
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(
            DType::BF16.to_dl(),
            RlxDataType {
                code: 4,
                bits: 16,
                lanes: 1
            }
        );
        let err = DType::from_dl(RlxDataType {
            code: 2,
            bits: 32,
            lanes: 4,
        })
        .unwrap_err();
        assert!(err.message.contains("lanes 4"), "{err}");
    }

    #[test]
    fn owned_descriptor_round_trips_and_frees() {
        let t = HostTensor::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let raw = t.clone().into_raw_owned();
        assert_eq!(raw.ownership, ownership::OWNED);
        // SAFETY: `raw` is an OWNED descriptor made just above.
        let back = unsafe { HostTensor::take_raw(raw) }.unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn strided_view_is_gathered_row_major() {
        // A 2x3 buffer read as its 3x2 transpose via strides.
        let t = HostTensor::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
        let mut view = t.as_raw(ownership::BORROWED);
        let mut shape = [3i64, 2];
        let mut strides = [1i64, 3];
        view.raw.dl.shape = shape.as_mut_ptr();
        view.raw.dl.strides = strides.as_mut_ptr();
        // SAFETY: the descriptor points into `t`, `strides`, alive here.
        let tt = unsafe { HostTensor::copy_from_raw(&view.raw) }.unwrap();
        assert_eq!(tt.shape, vec![3, 2]);
        assert_eq!(tt.to_f32_vec().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    }

    #[test]
    fn malformed_descriptors_are_refused() {
        let t = HostTensor::from_f32(vec![2], &[1., 2.]).unwrap();
        let mut view = t.as_raw(ownership::BORROWED);
        view.raw.dl.data = std::ptr::null_mut();
        // SAFETY: from_raw only reads the descriptor's fields here (it fails on the null data).
        let e = unsafe { TensorRef::from_raw(&view.raw) }.unwrap_err();
        assert!(e.message.contains("null data"), "{e}");
        let mut view = t.as_raw(ownership::BORROWED);
        view.raw.dl.device.device_type = 2;
        // SAFETY: from_raw refuses the device before touching data.
        assert!(unsafe { TensorRef::from_raw(&view.raw) }.is_err());
        assert!(HostTensor::new(DType::F32, vec![3], vec![0; 8]).is_err());
    }
}
