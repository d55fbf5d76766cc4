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
    /// An output slot of `executable_run_into` or `wait` whose output the
    /// caller does not want (its data null): nothing is written there and
    /// nothing is copied off the device for it. A plugin whose minor is below 9
    /// hands an `OWNED` tensor over in it instead: a caller checks the slot's
    /// ownership after the call and releases such a tensor.
    pub const SKIP: u32 = 3;
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

    /// A compact row-major descriptor of `data`, with `ownership` and no
    /// manager: its `ndim` sizes are read at `shape`, which the caller
    /// keeps alive (and in place) as long as the descriptor is used.
    pub fn compact(
        dtype: DType,
        data: *mut c_void,
        shape: *mut i64,
        ndim: usize,
        ownership: u32,
    ) -> RlxTensor {
        let mut raw = RlxTensor::empty();
        raw.ownership = ownership;
        raw.dl.data = data;
        raw.dl.ndim = ndim as i32;
        raw.dl.dtype = dtype.to_dl();
        raw.dl.shape = shape;
        raw
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

mod borrow;
mod host;
mod view;

pub use borrow::*;
pub use host::*;
pub use view::*;

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
