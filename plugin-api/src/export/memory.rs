//! Header §5: the plugin's memory figures.

use super::args::{non_null_mut, write_out};
use super::loaded::loaded;
use super::status::guard;
use crate::error::RlxStatus;
use crate::sized::AbiStruct;
use crate::tables::RlxMemoryUsage;

pub(super) unsafe extern "C" fn memory_usage(out: *mut RlxMemoryUsage) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        let m = loaded()?.plugin.memory_usage()?;
        write_out(
            out,
            RlxMemoryUsage {
                struct_size: RlxMemoryUsage::STRUCT_SIZE,
                active_bytes: m.active_bytes,
                peak_bytes: m.peak_bytes,
                cached_bytes: m.cached_bytes,
            },
        );
        Ok(())
    })
}
