//! Tensors in plain Rust: owned (`HostTensor`), borrowed (`HostTensorRef`),
//! and an output handed over with its keeper (`OwnedTensor`).

use super::*;

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
        let shape = &mut (*kept).shape;
        let mut raw = RlxTensor::compact(
            dtype,
            data as *mut c_void,
            shape.as_mut_ptr(),
            shape.len(),
            ownership::OWNED,
        );
        raw.manager_ctx = kept as *mut c_void;
        raw.deleter = Some(drop_kept::<K>);
        OwnedTensor(raw)
    }

    /// A view of its elements, for a plugin that copies them on (into a
    /// caller's buffer, say) before handing the tensor over or dropping it.
    pub fn view(&self) -> PluginResult<TensorRef<'_>> {
        // SAFETY: the descriptor is ours and describes memory its keeper
        // holds while `self` lives.
        unsafe { TensorRef::from_raw(&self.0) }
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

/// The bytes of a compact row-major tensor of `dtype` and `shape`; None
/// when that overflows `usize`.
fn compact_len(dtype: DType, shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(dtype.size_bytes(), |n, &d| n.checked_mul(d))
}
