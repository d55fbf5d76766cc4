//! The manifest this library carries (docs/ABI.md §19), read by hosts
//! without loading it: `rlx-host plugins inspect --static`, and discovery,
//! which refuses a library of another ABI major before `dlopen`.

use rlx_plugin_api::manifest::Manifest;

/// The name and devices are the same for every plugin directory: the one
/// library serves them all, and which MLX (CPU, CUDA, Metal) it runs is
/// decided at load by the libmlx beside it. A CUDA directory's copy loads
/// as `mlx-cuda` (`devices::Build::plugin_name`), and a load finds GPUs
/// only where that libmlx and the machine have them.
pub const MANIFEST: Manifest = Manifest::new("mlx", env!("CARGO_PKG_VERSION"))
    .devices(&["cpu", "gpu"])
    .ops(OPS)
    // The MLX release the plugin was built against (every directory's
    // libmlx is that release's): `cargo xtask package` writes it into a
    // release archive's manifest.json without loading the library.
    .other(&[("mlx.version", rlx_mlx_shim::MLX_VERSION)]);

// `OPS`: the lowering table's op kinds, read from its source by the build
// script (build/ops.rs), since the table itself is built at load.
include!(concat!(env!("OUT_DIR"), "/mlx_ops.rs"));
