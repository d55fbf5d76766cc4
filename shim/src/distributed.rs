//! MLX's distributed communication (`mlx::core::distributed`): the
//! process's group and the collectives as graph ops.
//!
//! The group is set up once per process by [`init`] from MLX's own
//! environment (ring: `MLX_RANK`, `MLX_HOSTFILE`; nccl: `MLX_RANK`,
//! `MLX_WORLD_SIZE`, `NCCL_HOST_IP`, `NCCL_PORT`). Setting it up is itself
//! collective: each rank waits for its peers to connect.

use crate::{Array, ResultExt, ShimError};
use cxx::UniquePtr;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/distributed.h");
        type Array = crate::array::ffi::Array;

        fn dist_init(backend: &str, strict: bool) -> Result<Vec<i32>>;
        fn dist_ready() -> bool;
        fn dist_all_sum(x: &Array) -> Result<UniquePtr<Array>>;
        fn dist_all_max(x: &Array) -> Result<UniquePtr<Array>>;
        fn dist_all_min(x: &Array) -> Result<UniquePtr<Array>>;
        fn dist_all_gather(x: &Array) -> Result<UniquePtr<Array>>;
        fn dist_sum_scatter(x: &Array) -> Result<UniquePtr<Array>>;
    }
}

/// Set up the process's group with `backend` (`ring`, `nccl`, `mpi`,
/// `jaccl`, `any`); `(rank, size)`. Strict: an error when the backend
/// cannot start; not strict: a group of this process alone then. Once set
/// up, later calls return it.
pub fn init(backend: &str, strict: bool) -> Result<(i32, i32), ShimError> {
    let v = ffi::dist_init(backend, strict).op("distributed::init")?;
    Ok((v[0], v[1]))
}

/// Whether the group is set up.
pub fn ready() -> bool {
    ffi::dist_ready()
}

macro_rules! collective {
    ($($(#[$m:meta])* $name:ident => $raw:ident, $op:literal;)*) => {$(
        $(#[$m])*
        pub fn $name(x: &Array) -> Result<UniquePtr<Array>, ShimError> {
            ffi::$raw(x).op($op)
        }
    )*};
}

collective! {
    /// The sum over the group, on every rank.
    all_sum => dist_all_sum, "distributed::all_sum";
    /// The elementwise max over the group.
    all_max => dist_all_max, "distributed::all_max";
    /// The elementwise min over the group.
    all_min => dist_all_min, "distributed::all_min";
    /// Every rank's array, concatenated along axis 0 in rank order.
    all_gather => dist_all_gather, "distributed::all_gather";
    /// The sum over the group, split along axis 0: rank r keeps part r.
    sum_scatter => dist_sum_scatter, "distributed::sum_scatter";
}
