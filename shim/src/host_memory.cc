// Host memory mapped for transfers (the ABI's host_memory table): ranges a host
// maps once (a batch buffer it refills each step, an output buffer it lends
// each run) so that the GPU copies them with its DMA engine. The driver copies
// pageable memory through staging buffers of its own, at about half the bus's
// speed (measured on an H100: about 10 GB/s for a 1.3 MB input and its output);
// page-locked memory is read and written by the copy engine directly. Locking
// costs far more than one copy, so it is done once per mapping, never per run.
// On the CPU, or with the driver copies off, a mapping only records its range
// (the contract's checks stay the same).
#include "rlx-mlx-shim/include/host_memory.h"

#include <atomic>
#include <iterator>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "rlx-mlx-shim/include/cuda_copy.h"

namespace rlx {
namespace {

struct Mapped {
  std::size_t len;
  bool pinned;
};

struct Ranges {
  std::shared_mutex lock;
  // By start address; ranges never overlap.
  std::map<std::uintptr_t, Mapped> by_start;
  // How many of them are page-locked: every GPU copy asks `pinned`, and
  // while none is (no program mapped anything) it answers without the lock.
  std::atomic<std::size_t> n_pinned{0};
};

// Never destroyed: a host may unmap from its own static destructors.
Ranges& ranges() {
  static Ranges* r = new Ranges;
  return *r;
}

}  // namespace

std::uint32_t dma_map(std::size_t data, std::size_t len) {
  Ranges& r = ranges();
  std::unique_lock g(r.lock);
  auto next = r.by_start.lower_bound(data);
  if (next != r.by_start.end() && next->first - data < len) {
    return 1;
  }
  if (next != r.by_start.begin()) {
    auto prev = std::prev(next);
    if (data - prev->first < prev->second.len) {
      return 1;
    }
  }
  const cuda_copy::Pinned pinned = cuda_copy::pin(reinterpret_cast<void*>(data), len);
  if (pinned == cuda_copy::Pinned::kOutOfMemory) {
    return 2;
  }
  r.by_start.emplace(data, Mapped{len, pinned == cuda_copy::Pinned::kYes});
  if (pinned == cuda_copy::Pinned::kYes) {
    r.n_pinned.fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
}

std::uint32_t dma_unmap(std::size_t data) {
  Ranges& r = ranges();
  std::unique_lock g(r.lock);
  auto it = r.by_start.find(data);
  if (it == r.by_start.end()) {
    return 1;
  }
  if (it->second.pinned) {
    cuda_copy::unpin(reinterpret_cast<void*>(data));
    r.n_pinned.fetch_sub(1, std::memory_order_relaxed);
  }
  r.by_start.erase(it);
  return 0;
}

namespace host_memory {

bool pinned(const void* p, std::size_t n) {
  Ranges& r = ranges();
  if (r.n_pinned.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  auto at = reinterpret_cast<std::uintptr_t>(p);
  std::shared_lock g(r.lock);
  auto it = r.by_start.upper_bound(at);
  if (it == r.by_start.begin()) {
    return false;
  }
  --it;
  return it->second.pinned && at - it->first <= it->second.len &&
      n <= it->second.len - (at - it->first);
}

}  // namespace host_memory
}  // namespace rlx
