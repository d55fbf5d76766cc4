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
// From host memory a host mapped (the ABI's host_memory table,
// src/host_memory.cc), which is page-locked, both copies are asynchronous
// copies on a stream of the plugin's own, which the copy engine runs at the
// bus's speed; the call waits for that stream only.
//
// The driver is already loaded in such a process (the CUDA libmlx needs
// `libcuda.so.1`), so it is looked up with RTLD_NOLOAD and never loaded
// here. `RLX_MLX_CUDA_COPY=0` turns these copies off (MLX's own path).
#include "rlx-mlx-shim/include/cuda_copy.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "rlx-mlx-shim/include/host_memory.h"

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

constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_MEMHOSTREGISTER_PORTABLE = 0x1;

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
  CUresult (*memcpy_dtoh_async)(void*, CUdeviceptr, std::size_t, CUstream) = nullptr;
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, std::size_t, CUstream) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*host_register)(void*, std::size_t, unsigned) = nullptr;
  CUresult (*host_unregister)(void*) = nullptr;
  bool ok = false;
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
        resolve(lib, "cuGetErrorString", d.get_error_string) &&
        resolve(lib, "cuMemcpyDtoHAsync_v2", d.memcpy_dtoh_async) &&
        resolve(lib, "cuMemcpyHtoDAsync_v2", d.memcpy_htod_async) &&
        resolve(lib, "cuStreamCreate", d.stream_create) &&
        resolve(lib, "cuMemHostRegister_v2", d.host_register) &&
        resolve(lib, "cuMemHostUnregister", d.host_unregister);
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

// The stream the copies of mapped memory run on, one per device, created
// on first use and kept for the process. Non-blocking: it waits for no
// other stream, and a copy's caller waits for it alone.
CUstream copy_stream(const Driver& d, int device) {
  static std::mutex lock;
  static CUstream streams[64] = {};
  int i = device < 0 ? 0 : device;
  if (i >= 64) {
    throw std::runtime_error("[rlx shim] GPU ordinal " + std::to_string(i) + " out of range");
  }
  std::lock_guard g(lock);
  if (streams[i] == nullptr) {
    check(d, d.stream_create(&streams[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  return streams[i];
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
  if (host_memory::pinned(dst, n)) {
    CUstream s = copy_stream(d, buf->device);
    check(d, d.memcpy_dtoh_async(dst, src, n, s), "cuMemcpyDtoHAsync");
    check(d, d.stream_synchronize(s), "cuStreamSynchronize");
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
  if (host_memory::pinned(src, n)) {
    CUstream s = copy_stream(d, buf->device);
    check(d, d.memcpy_htod_async(dst, src, n, s), "cuMemcpyHtoDAsync");
    check(d, d.stream_synchronize(s), "cuStreamSynchronize");
    return true;
  }
  check(d, d.memcpy_htod(dst, src, n), "cuMemcpyHtoD");
  // From pageable memory the call may return before the DMA into the
  // buffer is done, and MLX's streams do not wait for the legacy stream the
  // copy ran on: wait here, so that no kernel reads a half-written input.
  check(d, d.stream_synchronize(nullptr), "cuStreamSynchronize");
  return true;
}

Pinned pin(void* p, std::size_t n) {
  const Driver& d = driver();
  if (!d.ok) {
    return Pinned::kOff;
  }
  ensure_context(d, 0);
  CUresult r = d.host_register(p, n, CU_MEMHOSTREGISTER_PORTABLE);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    return Pinned::kOutOfMemory;
  }
  check(d, r, "cuMemHostRegister");
  return Pinned::kYes;
}

void unpin(void* p) {
  const Driver& d = driver();
  ensure_context(d, 0);
  check(d, d.host_unregister(p), "cuMemHostUnregister");
}

}  // namespace rlx::cuda_copy
