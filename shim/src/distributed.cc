// MLX's distributed group and collectives (see distributed.h).

#include "rlx-mlx-shim/include/distributed.h"

#include <mutex>
#include <optional>

#include "mlx/distributed/distributed.h"
#include "mlx/distributed/ops.h"

namespace rlx {

namespace dist = mx::distributed;

namespace {
std::mutex& group_mutex() {
  static std::mutex m;
  return m;
}
std::optional<dist::Group>& group_slot() {
  static std::optional<dist::Group> g;
  return g;
}

// The group, which must be set up.
dist::Group group() {
  std::lock_guard<std::mutex> lock(group_mutex());
  if (!group_slot()) {
    throw std::runtime_error(
        "[rlx shim] MLX's distributed group is not set up (dist_init)");
  }
  return *group_slot();
}
}  // namespace

rust::Vec<int32_t> dist_init(rust::Str backend, bool strict) {
  std::lock_guard<std::mutex> lock(group_mutex());
  if (!group_slot()) {
    group_slot() = dist::init(strict, std::string(backend));
  }
  rust::Vec<int32_t> out;
  out.push_back(group_slot()->rank());
  out.push_back(group_slot()->size());
  return out;
}

bool dist_ready() {
  std::lock_guard<std::mutex> lock(group_mutex());
  return group_slot().has_value();
}

std::unique_ptr<Array> dist_all_sum(const Array& x) {
  return wrap(dist::all_sum(x.a, group(), target()));
}
std::unique_ptr<Array> dist_all_max(const Array& x) {
  return wrap(dist::all_max(x.a, group(), target()));
}
std::unique_ptr<Array> dist_all_min(const Array& x) {
  return wrap(dist::all_min(x.a, group(), target()));
}
std::unique_ptr<Array> dist_all_gather(const Array& x) {
  return wrap(dist::all_gather(x.a, group(), target()));
}
std::unique_ptr<Array> dist_sum_scatter(const Array& x) {
  return wrap(dist::sum_scatter(x.a, group(), target()));
}

}  // namespace rlx
