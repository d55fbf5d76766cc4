// Array handle: dtype mapping, construction, read-out.
#include "rlx-mlx-shim/include/array.h"
#include "rlx-mlx-shim/include/cuda_copy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <variant>

#include "mlx/primitives.h"
#include "mlx/scheduler.h"
#include "rlx-mlx-shim/src/array.rs.h"
#include "rlx-mlx-shim/src/inline_eval.h"

namespace rlx {

namespace {
// Bumped by every evaluation: a lingering stream thread (below) stops
// waiting when it changes. A spinning evaluation bumps it once its tasks
// are queued, so the awake thread takes them at once.
std::atomic<std::uint64_t> evaluations{0};

// One step of a polling loop. It yields the CPU rather than only pausing:
// when the thread it waits for was woken onto this CPU (the scheduler
// likes to place a woken thread beside its waker), a pure spin would keep
// that thread from running until the whole window had passed; with the
// other CPU idle, yielding returns at once.
inline void cpu_relax() {
  std::this_thread::yield();
}

// Keep the CPU stream's thread awake for up to `us` after a run: a task that
// polls until the next spinning evaluation has queued its work behind it (so
// the thread takes that work without going to sleep) or the time is up.
void linger(uint32_t us) {
  const std::uint64_t seen = evaluations.load(std::memory_order_relaxed);
  mx::scheduler::scheduler().enqueue(
      mx::default_stream(mx::Device::cpu), [seen, us]() {
        const auto end =
            std::chrono::steady_clock::now() + std::chrono::microseconds(us);
        while (evaluations.load(std::memory_order_relaxed) == seen &&
               std::chrono::steady_clock::now() < end) {
          cpu_relax();
        }
      });
}

// Every other evaluation the shim starts: a lingering stream thread lets go
// first when the evaluation schedules work (which then waits for nothing,
// though it may find the thread asleep, as without lingering). One whose
// arrays are all scheduled already, such as a run's output read after the
// run, only waits for them, and leaves the thread lingering for the next
// run: letting go there put the thread to sleep after every CPU run that
// hands its outputs over in place.
void evaluate(const std::vector<mx::array>& xs) {
  if (!thread_device_is_gpu() && eval_inline(xs)) return;
  if (std::any_of(xs.begin(), xs.end(), [](const mx::array& x) {
        return x.status() == mx::array::Status::unscheduled;
      })) {
    evaluations.fetch_add(1, std::memory_order_relaxed);
  }
  mx::eval(xs);
}
}  // namespace

void ensure_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      mx::set_default_device(mx::Device(mx::Device::DeviceType::cpu));
    } catch (...) {
      // Ops name the CPU device explicitly, so a failure here is harmless.
    }
  });
}

void init() {
  ensure_init();
  mx::set_default_device(mx::Device(mx::Device::DeviceType::cpu));
}

bool default_device_is_cpu() {
  return mx::default_device() == mx::Device::DeviceType::cpu;
}

mx::Device& thread_device() {
  thread_local mx::Device d(mx::Device::DeviceType::cpu);
  return d;
}

namespace {
mx::Device device_of(bool gpu, int32_t index) {
  return mx::Device(gpu ? mx::Device::DeviceType::gpu : mx::Device::DeviceType::cpu, index);
}
}  // namespace

void set_thread_device(bool gpu, int32_t index) {
  auto d = device_of(gpu, index);
  // Every run sets its device, so the GPUs are counted once: asking the
  // driver each time cost tens of microseconds a run. (A process does not
  // gain GPUs; one lost later fails when MLX uses it.)
  static const int32_t gpus = gpu_device_count();
  if (gpu && (index < 0 || index >= gpus)) {
    throw std::invalid_argument("[rlx shim] no such GPU: gpu:" + std::to_string(index));
  }
  thread_device() = d;
}

bool thread_device_is_gpu() { return thread_device().type == mx::Device::DeviceType::gpu; }

int32_t thread_device_index() { return thread_device().index; }

// Declared here rather than included: the CPU wheel's headers leave out
// mlx/backend/{cuda,metal}, but every libmlx build exports both functions
// (true only in the build of that backend), so one plugin binary can ask
// which build it is bound to.
namespace mlx::core::cu {
bool is_available();
}
namespace mlx::core::metal {
bool is_available();
}

int32_t gpu_backend() {
  if (mx::cu::is_available()) return 1;
  if (mx::metal::is_available()) return 2;
  return 0;
}

int32_t gpu_device_count() {
  try {
    if (!mx::is_available(mx::Device(mx::Device::DeviceType::gpu))) return 0;
    return mx::device_count(mx::Device::DeviceType::gpu);
  } catch (...) {
    // A GPU build without a usable driver or device: no GPU.
    return 0;
  }
}

rust::String device_name(bool gpu, int32_t index) {
  if (!gpu) return rust::String("cpu");
  const auto& info = mx::device_info(device_of(gpu, index));
  for (const char* key : {"device_name", "name"}) {
    auto it = info.find(key);
    if (it != info.end() && std::holds_alternative<std::string>(it->second)) {
      return rust::String::lossy(std::get<std::string>(it->second));
    }
  }
  return rust::String("gpu");
}

uint64_t device_memory(bool gpu, int32_t index) {
  if (!gpu) return 0;
  const auto& info = mx::device_info(device_of(gpu, index));
  for (const char* key : {"total_memory", "memory_size"}) {
    auto it = info.find(key);
    if (it != info.end() && std::holds_alternative<size_t>(it->second)) {
      return std::get<size_t>(it->second);
    }
  }
  return 0;
}

namespace {
// Makes the CPU the default device as soon as the shim is loaded, so that
// even MLX entry points without a device argument use it.
const bool kInitAtLoad = [] {
  ensure_init();
  return true;
}();
}  // namespace

mx::Dtype to_mlx(DType d) {
  switch (d) {
    case DType::Bool:
      return mx::bool_;
    case DType::U8:
      return mx::uint8;
    case DType::U16:
      return mx::uint16;
    case DType::U32:
      return mx::uint32;
    case DType::U64:
      return mx::uint64;
    case DType::I8:
      return mx::int8;
    case DType::I16:
      return mx::int16;
    case DType::I32:
      return mx::int32;
    case DType::I64:
      return mx::int64;
    case DType::F16:
      return mx::float16;
    case DType::BF16:
      return mx::bfloat16;
    case DType::F32:
      return mx::float32;
    case DType::F64:
      return mx::float64;
    case DType::C64:
      return mx::complex64;
  }
  throw std::invalid_argument(
      "[rlx shim] unknown DType code " +
      std::to_string(static_cast<int>(static_cast<std::uint8_t>(d))));
}

DType from_mlx(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_:
      return DType::Bool;
    case mx::Dtype::Val::uint8:
      return DType::U8;
    case mx::Dtype::Val::uint16:
      return DType::U16;
    case mx::Dtype::Val::uint32:
      return DType::U32;
    case mx::Dtype::Val::uint64:
      return DType::U64;
    case mx::Dtype::Val::int8:
      return DType::I8;
    case mx::Dtype::Val::int16:
      return DType::I16;
    case mx::Dtype::Val::int32:
      return DType::I32;
    case mx::Dtype::Val::int64:
      return DType::I64;
    case mx::Dtype::Val::float16:
      return DType::F16;
    case mx::Dtype::Val::float32:
      return DType::F32;
    case mx::Dtype::Val::float64:
      return DType::F64;
    case mx::Dtype::Val::bfloat16:
      return DType::BF16;
    case mx::Dtype::Val::complex64:
      return DType::C64;
  }
  // Unreachable for MLX 0.32.4; keep the compiler happy.
  return DType::U8;
}

std::unique_ptr<ArrayList> new_array_list() {
  return std::make_unique<ArrayList>();
}

namespace {
std::size_t checked_nbytes(const mx::Shape& shape, mx::Dtype dt) {
  std::size_t n = mx::size_of(dt);
  for (auto d : shape) {
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

// From how many bytes an array made from host bytes for a GPU run lives
// in device memory (below) and is written with the driver's copy; a
// smaller one stays in MLX's managed memory and is written by the host.
// `RLX_MLX_DEVICE_INPUT_BYTES`, read once, sets it. Measured on an H200
// (docs/CUDA.md "How tensors cross to the GPU"), exp of an f32 vector
// through `Session`: from 16 KiB on, device memory won (72 against 198 us
// at 16 KiB, 166 against 305 at 256 KiB, 727 against 810 at 1 MiB); at
// 16 bytes the managed buffer won, written in 0.9 us, and the result then
// lands in managed memory too and is read in place (0.4 us against an
// 11 us copy out).
std::size_t device_input_bytes() {
  static const std::size_t n = [] {
    const char* v = std::getenv("RLX_MLX_DEVICE_INPUT_BYTES");
    if (v != nullptr && *v != 0) {
      char* end = nullptr;
      const unsigned long long x = std::strtoull(v, &end, 10);
      if (end != nullptr && *end == 0) {
        return static_cast<std::size_t>(x);
      }
    }
    return static_cast<std::size_t>(4096);
  }();
  return n;
}

// Whether `n` host bytes for this thread's run are worth the driver's
// copy: a GPU run's, from `device_input_bytes()` on.
bool large_for_gpu(std::size_t n) {
  return thread_device_is_gpu() && n >= device_input_bytes();
}

// Whether host bytes for the GPU array `x` go in with the driver's copy:
// always into device memory; into managed memory only when large for the
// GPU (a few bytes the host writes in place, as MLX's own path does,
// without the copy's round trip to the driver).
bool copy_in(const mx::array& x, const void* src, std::size_t n) {
  return (large_for_gpu(n) ||
          (thread_device_is_gpu() && cuda_copy::in_device_memory(x))) &&
      cuda_copy::from_host(x, src, n);
}
}  // namespace

std::unique_ptr<Array> array_from_bytes(
    rust::Slice<const uint8_t> data,
    rust::Slice<const int32_t> shape,
    DType dtype) {
  auto dt = to_mlx(dtype);
  auto sh = to_shape(shape);
  auto n = checked_nbytes(sh, dt);
  if (data.size() != n) {
    throw std::invalid_argument(
        "[rlx shim] array_from_bytes: got " + std::to_string(data.size()) +
        " bytes, shape and dtype need " + std::to_string(n));
  }
  // MLX gives an array made on the host managed memory, whose pages move
  // between host and GPU when the one and then the other touches them. So
  // a GPU run's array of `device_input_bytes()` or more gets the device
  // memory MLX gives its kernels' outputs instead (a zeros array evaluated
  // on the GPU: once per buffer, as runs write into it again through
  // `array_overwrite`), and its bytes go there with one DMA. A CPU run
  // (the CPU device of the CUDA build too) reads them where the host
  // wrote them. float64 has no GPU kernels.
  if (n > 0 && large_for_gpu(n) && dt != mx::float64 &&
      cuda_copy::enabled()) {
    std::optional<mx::array> x;
    try {
      x = mx::zeros(sh, dt, target());
      evaluate({*x});
    } catch (const std::exception&) {
      // No GPU fill for this dtype (or no memory for it there): MLX's own
      // managed buffer below still serves.
      x.reset();
    }
    if (x && cuda_copy::from_host(*x, data.data(), n)) {
      return wrap(std::move(*x));
    }
  }
  mx::array x(mx::allocator::malloc(n), std::move(sh), dt);
  if (n > 0 && !copy_in(x, data.data(), n)) {
    std::memcpy(x.data<uint8_t>(), data.data(), n);
  }
  return wrap(std::move(x));
}

bool array_overwrite(const Array& a, rust::Slice<const uint8_t> data) {
  const mx::array& x = a.a;
  // Only an evaluated array whose buffer nothing else can see: this handle
  // is the only one (no graph, view, output or pending task holds it or its
  // data), so writing into it changes no value anyone can read.
  if (!x.is_available() || !x.is_donatable() || x.nbytes() != data.size() ||
      !x.flags().row_contiguous || x.offset() != 0 || data.size() == 0) {
    return false;
  }
  const std::size_t n = data.size();
  if (!copy_in(x, data.data(), n)) {
    // `data()` of a const array: the buffer is ours to write (see above).
    std::memcpy(const_cast<mx::array&>(x).data<uint8_t>(), data.data(), n);
  }
  return true;
}

std::unique_ptr<Array> array_from_borrowed(
    std::size_t ptr,
    std::size_t nbytes,
    rust::Slice<const int32_t> shape,
    DType dtype) {
  auto dt = to_mlx(dtype);
  auto sh = to_shape(shape);
  auto n = checked_nbytes(sh, dt);
  if (nbytes != n) {
    throw std::invalid_argument(
        "[rlx shim] array_from_borrowed: buffer has " + std::to_string(nbytes) +
        " bytes, shape and dtype need " + std::to_string(n));
  }
  if (ptr == 0 && n > 0) {
    throw std::invalid_argument("[rlx shim] array_from_borrowed: null pointer");
  }
  if (n == 0) {
    // Nothing to borrow: MLX would still hand the (possibly null) pointer to
    // its allocator, so build an empty owned array instead.
    return wrap(mx::array(mx::allocator::malloc(0), std::move(sh), dt));
  }
  // The deleter does nothing: the caller owns the buffer and guarantees it
  // outlives every array built from it.
  return wrap(mx::array(
      reinterpret_cast<void*>(ptr), std::move(sh), dt, [](void*) {}));
}

bool borrow_is_zero_copy() {
  static const bool zero_copy = [] {
    alignas(16) float probe[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    mx::array x(static_cast<void*>(probe), mx::Shape{4}, mx::float32,
                [](void*) {});
    evaluate({x});
    return static_cast<const void*>(x.data<float>()) ==
        static_cast<const void*>(probe);
  }();
  return zero_copy;
}

std::unique_ptr<Array> scalar_f64(double v, DType dtype) {
  return wrap(mx::array(v, to_mlx(dtype)));
}

std::unique_ptr<Array> full(
    rust::Slice<const int32_t> shape,
    double v,
    DType dtype) {
  auto dt = to_mlx(dtype);
  if (shape.empty()) {
    // A 0-d constant is a leaf holding its value, as MLX makes a Python
    // scalar: no Full primitive to evaluate on every run (inside an
    // `mx::compile`d graph, MLX inlines such a leaf into the fused kernel;
    // a Full node was evaluated on each call instead, two of them 13 % of
    // a tiny graph's instructions).
    return wrap(mx::array(v, dt));
  }
  return wrap(mx::full(to_shape(shape), mx::array(v, dt), dt, target()));
}

std::unique_ptr<Array> arange(
    double start,
    double stop,
    double step,
    DType dtype) {
  return wrap(mx::arange(start, stop, step, to_mlx(dtype), target()));
}

std::unique_ptr<Array> array_clone(const Array& a) {
  return wrap(a.a);
}

rust::Vec<int32_t> array_shape(const Array& a) {
  rust::Vec<int32_t> out;
  out.reserve(a.a.ndim());
  for (auto d : a.a.shape()) {
    out.push_back(d);
  }
  return out;
}

rust::Vec<int64_t> array_strides(const Array& a) {
  rust::Vec<int64_t> out;
  out.reserve(a.a.ndim());
  for (auto s : a.a.strides()) {
    out.push_back(s);
  }
  return out;
}

DType array_dtype(const Array& a) {
  return from_mlx(a.a.dtype());
}

std::size_t array_size(const Array& a) {
  return a.a.size();
}

std::size_t array_nbytes(const Array& a) {
  return a.a.nbytes();
}

std::size_t array_ndim(const Array& a) {
  return a.a.ndim();
}

std::size_t array_itemsize(const Array& a) {
  return a.a.itemsize();
}

std::size_t array_id(const Array& a) {
  return static_cast<std::size_t>(a.a.id());
}

rust::Vec<rust::String> graph_ops(const ArrayList& outs, const ArrayList& stop) {
  std::unordered_set<std::uintptr_t> seen;
  for (const auto& s : stop.v) {
    seen.insert(s.id());
  }
  rust::Vec<rust::String> names;
  std::vector<mx::array> todo(outs.v.begin(), outs.v.end());
  while (!todo.empty()) {
    mx::array x = std::move(todo.back());
    todo.pop_back();
    // An array evaluated (or made from data) has no primitive: a leaf.
    if (!seen.insert(x.id()).second || !x.has_primitive()) {
      continue;
    }
    names.push_back(rust::String(x.primitive().name()));
    // Siblings (the other outputs of a multi-output op) share the node.
    for (const auto& s : x.siblings()) {
      seen.insert(s.id());
    }
    for (const auto& i : x.inputs()) {
      todo.push_back(i);
    }
  }
  return names;
}

std::size_t array_data_ptr(const Array& a) {
  mx::array x = a.a;
  evaluate({x});
  return reinterpret_cast<std::size_t>(x.data<uint8_t>());
}

std::size_t array_row_major_ptr(const Array& a) {
  const mx::array& x = a.a;
  // Already scheduled (a run's output): this only waits for it.
  evaluate({x});
  // MLX's own flag: row-major strides, a dimension of size 1 with any.
  if (!x.flags().row_contiguous) {
    return 0;
  }
  return reinterpret_cast<std::size_t>(
      const_cast<mx::array&>(x).data<std::uint8_t>());
}

void eval(const Array& a) {
  evaluate({a.a});
}

void eval_list(const ArrayList& l) {
  evaluate(l.v);
}

// MLX's eval blocks the caller until the graph is done: on the CPU on a
// condition variable that the stream's thread signals when the graph's
// last task is done; on a CUDA GPU in cudaEventSynchronize on an event MLX
// creates with cudaEventBlockingSync, so the caller sleeps until the
// driver's interrupt wakes it. When the work takes a few microseconds,
// being woken again (a futex wake; on a VM an inter-processor interrupt)
// costs more than the work. So the graph is scheduled with async_eval and
// the caller polls its outputs (on a GPU, each poll a cudaEventQuery) for
// up to `spin_us` before it blocks as eval does. A task that failed on the
// CPU stream leaves its error on the stream; eval reports it only when it
// had to block (a signalled event is not checked), so it is checked here
// after every run, whichever way the run ended.

// Evaluations left to run without polling (see eval_list_spinning).
std::atomic<std::uint32_t> quiet_evaluations{0};
// How many: at a few microseconds a run, a few milliseconds of plain
// waiting before polling is tried again.
constexpr std::uint32_t kBackOff = 256;

namespace {

// `xs` evaluated by MLX's streams (the caller's thread could not run the
// graph): polling for up to `spin_us`, then waiting.
void eval_on_streams(const std::vector<mx::array>& xs, uint32_t spin_us);

}  // namespace

void eval_list_spinning(const ArrayList& l, uint32_t spin_us) {
  // A graph the caller's thread can run needs neither thread nor wait.
  if (!thread_device_is_gpu() && eval_inline(l.v)) return;
  eval_on_streams(l.v, spin_us);
}

void eval_spinning(const Array& a, uint32_t spin_us) {
  // One node's graph (eager mode) is run here without a list made for it.
  if (!thread_device_is_gpu() && eval_inline(&a.a, 1)) return;
  eval_on_streams({a.a}, spin_us);
}

namespace {

void eval_on_streams(const std::vector<mx::array>& xs, uint32_t spin_us) {
  // Polling pays only while the stream's thread gets a CPU at once. When a
  // window passed without the work done, the CPUs are taken (other
  // processes, busy loops): the two polling threads then only crowd the
  // stream's thread off its CPU, and a run waited for a whole scheduler
  // slice (3.5 ms medians in eager mode beside two busy loops). So back
  // off: the next runs wait as MLX's eval does, then polling is tried again.
  if (spin_us != 0 && quiet_evaluations.load(std::memory_order_relaxed) > 0) {
    quiet_evaluations.fetch_sub(1, std::memory_order_relaxed);
    spin_us = 0;
  }
  if (spin_us == 0) {
    evaluate(xs);
    return;
  }
  const bool gpu = thread_device_is_gpu();
  mx::async_eval(xs);
  evaluations.fetch_add(1, std::memory_order_relaxed);
  // Queued behind this run's tasks, before they can finish: the stream's
  // thread goes from the run's last task straight into lingering, instead
  // of finding its queue empty, going to sleep, and being woken by a
  // linger queued after the run (that wake cost the caller a futex
  // syscall every run). A GPU run's next graph is built and launched on
  // the caller's thread: only the CPU stream's thread is worth keeping.
  if (!gpu) {
    linger(spin_us);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (const auto& x : xs) {
    while (!x.is_available() && std::chrono::steady_clock::now() < deadline) {
      cpu_relax();
    }
  }
  if (std::any_of(xs.begin(), xs.end(), [](const mx::array& x) { return !x.is_available(); })) {
    quiet_evaluations.store(kBackOff, std::memory_order_relaxed);
  }
  std::exception_ptr failed;
  try {
    mx::eval(xs);
  } catch (...) {
    failed = std::current_exception();
  }
  // The stream keeps a task's error until it is checked: report it when
  // eval did not (and clear it either way, or the next run would fail
  // with it). A GPU graph has CPU tasks too (float64 nodes).
  try {
    mx::scheduler::scheduler().check_error(mx::default_stream(mx::Device::cpu));
  } catch (...) {
    if (!failed) {
      failed = std::current_exception();
    }
  }
  if (failed) {
    std::rethrow_exception(failed);
  }
}

}  // namespace

void async_eval_list(const ArrayList& l) {
  if (std::any_of(l.v.begin(), l.v.end(), [](const mx::array& x) {
        return x.status() == mx::array::Status::unscheduled;
      })) {
    evaluations.fetch_add(1, std::memory_order_relaxed);
  }
  mx::async_eval(l.v);
}

void array_copy_into(const Array& a, rust::Slice<uint8_t> out) {
  array_copy_to(a, out.data(), out.size());
}

void array_copy_to(const Array& a, uint8_t* out, std::size_t len) {
  mx::array x = a.a;
  const std::size_t n = x.nbytes();
  if (len != n) {
    throw std::invalid_argument(
        "[rlx shim] array_copy_into: output buffer has " +
        std::to_string(len) + " bytes, array has " + std::to_string(n));
  }
  evaluate({x});
  if (n == 0) {
    return;
  }
  if (!x.flags().row_contiguous) {
    // Transposed, sliced with strides, broadcast...: materialise a
    // row-major copy first, on the CPU for float64 (MLX's GPU backends
    // have none: a reversed f64 view failed to read out on CUDA).
    const auto s = x.dtype() == mx::float64 ? cpu() : target();
    x = mx::contiguous(x, /*allow_col_major=*/false, s);
    evaluate({x});
    if (!x.flags().row_contiguous) {
      x = mx::copy(mx::reshape(x, {-1}, s), s);
      evaluate({x});
      if (!x.flags().row_contiguous) {
        throw std::runtime_error(
            "[rlx shim] array_copy_into: could not obtain a row-contiguous "
            "copy");
      }
    }
  }
  if (!cuda_copy::to_host(x, out, n)) {
    std::memcpy(out, x.data<uint8_t>(), n);
  }
}

double array_item_f64(const Array& a) {
  mx::array x = a.a;
  if (x.size() != 1) {
    throw std::invalid_argument(
        "[rlx shim] item: array has " + std::to_string(x.size()) +
        " elements, expected 1");
  }
  if (x.dtype() == mx::complex64) {
    throw std::invalid_argument("[rlx shim] item: complex arrays have no f64 value");
  }
  x = mx::astype(mx::reshape(x, {}, cpu()), mx::float64, cpu());
  evaluate({x});
  return *x.data<double>();
}

}  // namespace rlx
