// Host <-> GPU copies for the CUDA build of MLX, through the CUDA driver.
//
// Why: MLX 0.32.4's CUDA allocator hands the host `cudaMallocManaged`
// memory (`allocator::malloc`) and keeps kernel outputs in device memory.
// Reading an output through `array::data()` first moves its buffer into a
// fresh managed allocation (`move_to_unified_memory`: a cudaMallocManaged
// and a copy per output), and the host's read of that memory then migrates
// it page by page; an input written by the host is likewise migrated page by
// page when the first kernel touches it. Measured on an H200 that path ran at
// about 2.5 GB/s and dominated every run. Here an output whose buffer is in
// device memory is copied straight into the caller's buffer with one DMA
// (`cuMemcpyDtoH`), and an input is written into its managed buffer with one
// DMA (`cuMemcpyHtoD`), so its pages start on the GPU.
//
// Those DMAs can go through pinned staging memory of the plugin's own: the
// driver's copy from pageable memory bounces through a small pinned buffer
// of its own and returns only when done, so a batch enters at the speed
// of that bounce (docs/PERFORMANCE.md, "How tensors cross"). There the
// bytes are copied by the CPU into one of a few pinned chunks while the
// GPU's copy engine takes the chunk before from another, on a stream of
// the plugin's own: the CPU's copy and the DMA overlap. A thread that finds the staging memory busy (another
// thread's run copying) takes the driver's copy instead of waiting.
// `RLX_MLX_CUDA_STAGING=1` turns it on; it is off by default (slower
// than the driver's copy from pageable memory on an H100: 0.34 against
// 0.30 ms for 1.3 MB in and out).
//
// The driver is already loaded in such a process (the CUDA libmlx needs
// `libcuda.so.1`), so it is looked up with RTLD_NOLOAD and never loaded
// here. `RLX_MLX_CUDA_COPY=0` turns these copies off (MLX's own path).
#include "rlx-mlx-shim/include/cuda_copy.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace mlx::core::cu {
bool is_available();
}

namespace rlx::cuda_copy {
namespace {

// The CUDA driver API's types, as `cuda.h` defines them (that header is
// not part of MLX's wheel).
using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUdevice = int;
using CUstream = void*;
using CUevent = void*;

// Flags of `cuda.h`.
constexpr unsigned kMemHostAllocPortable = 0x01;
constexpr unsigned kStreamNonBlocking = 0x01;
constexpr unsigned kEventDisableTiming = 0x02;

// The layout of `mlx::core::cu::CudaBuffer` in MLX 0.32.4
// (mlx/backend/cuda/allocator.h: `void* data; size_t size; int device;`,
// device -1 for managed memory). The plugin is pinned to that MLX version;
// the header itself cannot be included without CUDA's.
struct CudaBufferLayout {
  void* data;
  std::size_t size;
  int device;
};

struct Driver {
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  bool ok = false;
  // For the staging memory (optional: without them the copies above run
  // from pageable memory).
  CUresult (*mem_host_alloc)(void**, std::size_t, unsigned) = nullptr;
  CUresult (*mem_free_host)(void*) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_synchronize)(CUevent) = nullptr;
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, std::size_t, CUstream) = nullptr;
  CUresult (*memcpy_dtoh_async)(void*, CUdeviceptr, std::size_t, CUstream) = nullptr;
  bool staging = false;
};

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver d;
    const char* env = std::getenv("RLX_MLX_CUDA_COPY");
    if (env != nullptr && std::strcmp(env, "0") == 0) {
      return d;
    }
    if (!mx::cu::is_available()) {
      return d;
    }
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) {
      return d;
    }
    d.ok = resolve(lib, "cuMemcpyDtoH_v2", d.memcpy_dtoh) &&
        resolve(lib, "cuMemcpyHtoD_v2", d.memcpy_htod) &&
        resolve(lib, "cuStreamSynchronize", d.stream_synchronize) &&
        resolve(lib, "cuCtxGetCurrent", d.ctx_get_current) &&
        resolve(lib, "cuCtxSetCurrent", d.ctx_set_current) &&
        resolve(lib, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain) &&
        resolve(lib, "cuGetErrorString", d.get_error_string);
    const char* staging = std::getenv("RLX_MLX_CUDA_STAGING");
    // Opt-in: on an H100 it was slower than the driver's own bounce
    // (docs/PERFORMANCE.md), the CPU's copy into the chunks costing more
    // than the overlap saved.
    d.staging = d.ok && staging != nullptr && std::strcmp(staging, "1") == 0 &&
        resolve(lib, "cuMemHostAlloc", d.mem_host_alloc) &&
        resolve(lib, "cuMemFreeHost", d.mem_free_host) &&
        resolve(lib, "cuStreamCreate", d.stream_create) &&
        resolve(lib, "cuEventCreate", d.event_create) &&
        resolve(lib, "cuEventRecord", d.event_record) &&
        resolve(lib, "cuEventSynchronize", d.event_synchronize) &&
        resolve(lib, "cuMemcpyHtoDAsync_v2", d.memcpy_htod_async) &&
        resolve(lib, "cuMemcpyDtoHAsync_v2", d.memcpy_dtoh_async);
    return d;
  }();
  return d;
}

void check(const Driver& d, CUresult r, const char* what) {
  if (r == 0) {
    return;
  }
  const char* msg = nullptr;
  d.get_error_string(r, &msg);
  throw std::runtime_error(
      std::string("[rlx shim] ") + what + " failed: " +
      (msg != nullptr ? msg : "CUDA error " + std::to_string(r)));
}

// The driver API needs a current context on the calling thread. MLX works
// in the device's primary context, which the runtime makes current on the
// threads it runs on; a thread that never called into it gets it here.
void ensure_context(const Driver& d, int device) {
  CUcontext ctx = nullptr;
  check(d, d.ctx_get_current(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) {
    return;
  }
  // Retained for the life of the process, as the runtime does.
  check(d, d.primary_ctx_retain(&ctx, device < 0 ? 0 : device),
        "cuDevicePrimaryCtxRetain");
  check(d, d.ctx_set_current(ctx), "cuCtxSetCurrent");
}

// Pinned host memory in `kSlots` chunks of `kChunk` bytes and a stream,
// per device, made on first use and kept for the life of the process (as
// MLX keeps its own streams). 512 KiB chunks: a 1.3 MB batch is three, so
// the CPU's copy of one overlaps the DMA of the one before, and each
// chunk's few driver calls (a few microseconds) stay small beside its
// copy (tens of microseconds).
constexpr std::size_t kChunk = 512 * 1024;
constexpr int kSlots = 3;

struct Staging {
  std::mutex busy;
  CUstream stream = nullptr;
  std::array<char*, kSlots> slot{};
  std::array<CUevent, kSlots> done{};
  // Whether `done[i]` was recorded since the slot was last waited for.
  std::array<bool, kSlots> pending{};
};

// The staging memory for `device` in the current context, or null when
// it cannot be had (no memory to pin: the pageable copies still serve).
Staging* staging_for(const Driver& d, int device) {
  static std::mutex m;
  static std::map<int, std::unique_ptr<Staging>> made;
  std::lock_guard<std::mutex> lock(m);
  auto it = made.find(device);
  if (it != made.end()) {
    return it->second.get();
  }
  auto s = std::make_unique<Staging>();
  bool ok = d.stream_create(&s->stream, kStreamNonBlocking) == 0;
  for (int i = 0; ok && i < kSlots; ++i) {
    void* p = nullptr;
    ok = d.mem_host_alloc(&p, kChunk, kMemHostAllocPortable) == 0 &&
        d.event_create(&s->done[i], kEventDisableTiming) == 0;
    s->slot[i] = static_cast<char*>(p);
  }
  if (!ok) {
    // Kept as null, so that a device without it is not asked again. What
    // was made stays (a few pinned chunks at most).
    made.emplace(device, nullptr);
    return nullptr;
  }
  return made.emplace(device, std::move(s)).first->second.get();
}

// The slot is free once the DMA last queued from or into it is done.
void drain(const Driver& d, Staging& s, int i) {
  if (s.pending[i]) {
    s.pending[i] = false;
    check(d, d.event_synchronize(s.done[i]), "cuEventSynchronize");
  }
}

// The staging memory of `device`, locked for this thread, or an empty lock
// when there is none or another thread holds it.
std::unique_lock<std::mutex> take_staging(const Driver& d, int device, Staging*& s) {
  s = d.staging ? staging_for(d, device) : nullptr;
  if (s == nullptr) {
    return {};
  }
  std::unique_lock<std::mutex> lock(s->busy, std::try_to_lock);
  if (!lock.owns_lock()) {
    s = nullptr;
  }
  return lock;
}

// Every pending DMA of `s` waited for, also when a copy failed half way:
// the next user of the slots must find them idle.
struct DrainAll {
  const Driver& d;
  Staging& s;
  ~DrainAll() {
    for (int i = 0; i < kSlots; ++i) {
      if (s.pending[i]) {
        s.pending[i] = false;
        d.event_synchronize(s.done[i]);
      }
    }
  }
};

void staged_to_device(const Driver& d, Staging& s, CUdeviceptr dst, const char* src, std::size_t n) {
  DrainAll idle{d, s};
  for (std::size_t off = 0, k = 0; off < n; off += kChunk, ++k) {
    const int i = static_cast<int>(k % kSlots);
    const std::size_t len = std::min(kChunk, n - off);
    drain(d, s, i);
    std::memcpy(s.slot[i], src + off, len);
    check(d, d.memcpy_htod_async(dst + off, s.slot[i], len, s.stream), "cuMemcpyHtoDAsync");
    check(d, d.event_record(s.done[i], s.stream), "cuEventRecord");
    s.pending[i] = true;
  }
  // MLX's streams do not wait for this one: the input is whole before
  // any kernel can read it (DrainAll waits for the last chunks).
}

void staged_to_host(const Driver& d, Staging& s, char* dst, CUdeviceptr src, std::size_t n) {
  DrainAll idle{d, s};
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  auto queue = [&](std::size_t k) {
    const int i = static_cast<int>(k % kSlots);
    const std::size_t off = k * kChunk;
    check(d, d.memcpy_dtoh_async(s.slot[i], src + off, std::min(kChunk, n - off), s.stream),
          "cuMemcpyDtoHAsync");
    check(d, d.event_record(s.done[i], s.stream), "cuEventRecord");
    s.pending[i] = true;
  };
  for (std::size_t k = 0; k < std::min<std::size_t>(chunks, kSlots); ++k) {
    queue(k);
  }
  // Each chunk copied out by the CPU while the next ones are in flight.
  for (std::size_t k = 0; k < chunks; ++k) {
    const int i = static_cast<int>(k % kSlots);
    const std::size_t off = k * kChunk;
    drain(d, s, i);
    std::memcpy(dst + off, s.slot[i], std::min(kChunk, n - off));
    if (k + kSlots < chunks) {
      queue(k + kSlots);
    }
  }
}

const CudaBufferLayout* cuda_buffer(const mx::array& x) {
  return static_cast<const CudaBufferLayout*>(x.buffer().ptr());
}

}  // namespace

bool enabled() { return driver().ok; }

bool in_device_memory(const mx::array& x) {
  const CudaBufferLayout* buf = driver().ok ? cuda_buffer(x) : nullptr;
  return buf != nullptr && buf->data != nullptr && buf->device >= 0;
}

bool to_host(const mx::array& x, void* dst, std::size_t n) {
  const Driver& d = driver();
  if (!d.ok || n == 0) {
    return false;
  }
  const CudaBufferLayout* buf = cuda_buffer(x);
  // Managed memory (device -1) is where the host can read it in place.
  if (buf == nullptr || buf->data == nullptr || buf->device < 0) {
    return false;
  }
  ensure_context(d, buf->device);
  auto src = reinterpret_cast<CUdeviceptr>(static_cast<char*>(buf->data) + x.offset());
  Staging* s = nullptr;
  if (auto lock = take_staging(d, buf->device, s); s != nullptr) {
    staged_to_host(d, *s, static_cast<char*>(dst), src, n);
    return true;
  }
  // To pageable memory the copy returns once it is complete.
  check(d, d.memcpy_dtoh(dst, src, n), "cuMemcpyDtoH");
  return true;
}

bool from_host(const mx::array& x, const void* src, std::size_t n) {
  const Driver& d = driver();
  if (!d.ok || n == 0) {
    return false;
  }
  const CudaBufferLayout* buf = cuda_buffer(x);
  if (buf == nullptr || buf->data == nullptr) {
    return false;
  }
  ensure_context(d, buf->device);
  auto dst = reinterpret_cast<CUdeviceptr>(static_cast<char*>(buf->data) + x.offset());
  Staging* s = nullptr;
  if (auto lock = take_staging(d, buf->device, s); s != nullptr) {
    staged_to_device(d, *s, dst, static_cast<const char*>(src), n);
    return true;
  }
  check(d, d.memcpy_htod(dst, src, n), "cuMemcpyHtoD");
  // From pageable memory the call may return before the DMA into the
  // buffer is done, and MLX's streams do not wait for the legacy stream the
  // copy ran on: wait here, so that no kernel reads a half-written input.
  check(d, d.stream_synchronize(nullptr), "cuStreamSynchronize");
  return true;
}

}  // namespace rlx::cuda_copy
