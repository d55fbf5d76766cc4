//! A validated, read-only view of a descriptor's memory (what a plugin
//! reads its inputs through, and a host its outputs).

use super::*;

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

    /// The addresses of the smallest byte range holding every element
    /// (empty for an empty tensor), strided or not: what an overlap test
    /// against another buffer compares.
    pub fn byte_range(&self) -> std::ops::Range<usize> {
        let base = self.base as usize;
        base.wrapping_add_signed(self.span.0)..base.wrapping_add_signed(self.span.1)
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
