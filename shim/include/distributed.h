// MLX's distributed communication (mlx::core::distributed): one group per
// process, set up once from MLX's own environment variables (ring:
// MLX_RANK, MLX_HOSTFILE; nccl: MLX_RANK, MLX_WORLD_SIZE, NCCL_HOST_IP,
// NCCL_PORT), and the collectives as graph ops on this thread's device.
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// Sets up the group with `backend` ("ring", "nccl", "mpi", "jaccl" or
// "any"). Strict: a backend that cannot start throws with its cause; not
// strict: a group of this process alone when none starts. Later calls
// return the group already set up. Returns {rank, size}.
rust::Vec<int32_t> dist_init(rust::Str backend, bool strict);
// Whether the group is set up.
bool dist_ready();

std::unique_ptr<Array> dist_all_sum(const Array& x);
std::unique_ptr<Array> dist_all_max(const Array& x);
std::unique_ptr<Array> dist_all_min(const Array& x);
std::unique_ptr<Array> dist_all_gather(const Array& x);
std::unique_ptr<Array> dist_sum_scatter(const Array& x);

}  // namespace rlx
