// A CPU graph evaluated on the caller's thread.
//
// Why: MLX evaluates every CPU op as tasks queued to its stream's thread
// (mx::eval: a tape built with hash maps, then per op eval_cpu, a task with
// the work, a second task holding the buffers), and the caller waits for
// the last one. At the size of a small model's run (the demo transformer:
// 23 ops, a few microseconds of arithmetic) that hand-over, 2 to 4 us an
// op, was the run: 100 us where rlx-runtime's CPU backend, computing on
// the caller's thread, took 25 (docs/PERFORMANCE.md). Under load it is
// worse: the stream's thread must win a CPU for every run.
//
// So when every op left to compute is one the shim can run itself, the
// caller's thread runs them in order: the plugin's kernels (their eval_cpu
// with `caller_runs_tasks` set runs the task at once), float32 add,
// subtract, multiply, divide and negation (below; IEEE single arithmetic,
// the same values as MLX's), concatenations (copies of bytes), and views
// (MLX's eval_cpu, which only shares a buffer). Up to four of MLX's other ops (a concatenation of weights too
// large to be computed once) are each evaluated by MLX in their turn; a
// graph with more of them, or on a GPU, is left to mx::eval, untouched.

#include "rlx-mlx-shim/src/inline_eval.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "mlx/allocator.h"
#include "mlx/primitives.h"
#include "mlx/scheduler.h"
#include "mlx/stream.h"
#include "mlx/transforms.h"
#include "rlx-mlx-shim/include/array.h"
#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/src/elementwise.h"
#include "rlx-mlx-shim/src/simd.h"

namespace rlx {

namespace {

std::atomic<bool>& enabled() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("RLX_MLX_INLINE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// This thread's last evaluation that computed anything: here (but for a
// few of MLX's ops) or by MLX.
bool& ran_inline() {
  thread_local bool yes = false;
  return yes;
}

// How an array is computed: `Mlx` by MLX's own evaluation of that one op
// (its inputs computed), the rest on this thread; `None`: it cannot be.
enum class Step : uint8_t {
  None,
  Mlx,
  Kernel,
  View,
  Reshape,
  Contiguous,
  Concatenate,
  Negative,
  Add,
  Subtract,
  Multiply,
  Divide
};

bool named(const char* n, const char* want) { return std::strcmp(n, want) == 0; }

// What the caller's thread does for `a` (an array still to compute).
Step step_for(const mx::array& a) {
  if (!a.has_primitive()) return Step::None;
  // (MLX's accessors are not const.)
  auto& p = const_cast<mx::array&>(a).primitive();
  if (p.device() != mx::Device::cpu) return Step::None;
  if (!a.siblings().empty()) return Step::Mlx;
  const char* n = p.name();
  // The plugin's kernels are named Rlx...: the cast only confirms one.
  if (std::strncmp(n, "Rlx", 3) == 0 && dynamic_cast<const RunsInline*>(&p) != nullptr) {
    return Step::Kernel;
  }
  // Views: eval_cpu shares the input's buffer with new strides, queueing
  // nothing.
  for (const char* v : {"Broadcast", "ExpandDims", "Squeeze", "Transpose", "Slice", "Copy",
                        "StopGradient"}) {
    if (named(n, v)) return Step::View;
  }
  if (named(n, "Reshape")) return Step::Reshape;
  // What a kernel's inputs pass through (a host kernel reads them
  // row-major): most are row-major already and only share the buffer.
  if (named(n, "Contiguous")) return Step::Contiguous;
  // Copies of bytes: any dtype, its inputs already of the output's (MLX
  // casts them first, as ops of their own).
  if (named(n, "Concatenate")) {
    for (const auto& in : a.inputs()) {
      if (in.dtype() != a.dtype()) return Step::Mlx;
    }
    return Step::Concatenate;
  }
  if (named(n, "Negative") && a.dtype() == mx::float32 && a.inputs()[0].dtype() == mx::float32) {
    return Step::Negative;
  }
  bool f32 = a.dtype() == mx::float32 && a.inputs().size() == 2 &&
             a.inputs()[0].dtype() == mx::float32 && a.inputs()[1].dtype() == mx::float32;
  if (!f32) return Step::Mlx;
  if (named(n, "Add")) return Step::Add;
  if (named(n, "Subtract")) return Step::Subtract;
  if (named(n, "Multiply")) return Step::Multiply;
  if (named(n, "Divide")) return Step::Divide;
  return Step::Mlx;
}

// From how many elements a binary op is split over the plugin's threads.
// It is memory bound: on the 2-core machine of docs/PERFORMANCE.md two
// threads made x [256, 4096] + b [4096] no faster and less steady than one,
// so only an op of 16 MiB or more is split.
constexpr size_t kBinaryPerPart = size_t(1) << 22;

enum class BinOp { Add, Sub, Mul, Div };

template <BinOp O>
inline float apply(float x, float y) {
  switch (O) {
    case BinOp::Add: return x + y;
    case BinOp::Sub: return x - y;
    case BinOp::Mul: return x * y;
    case BinOp::Div: return x / y;
  }
  return 0.0f;
}

#if RLX_X86
template <BinOp O>
__attribute__((target("avx2"))) inline __m256 apply8(__m256 x, __m256 y) {
  switch (O) {
    case BinOp::Add: return _mm256_add_ps(x, y);
    case BinOp::Sub: return _mm256_sub_ps(x, y);
    case BinOp::Mul: return _mm256_mul_ps(x, y);
    case BinOp::Div: return _mm256_div_ps(x, y);
  }
  return x;
}

// y[j] = x[j * sx] op z[j * sz] with unit or zero strides, eight at a time.
template <BinOp O>
__attribute__((target("avx2"))) void row_avx2(const float* x, int64_t sx, const float* z,
                                              int64_t sz, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 a = sx == 0 ? _mm256_set1_ps(*x) : _mm256_loadu_ps(x + j);
    __m256 b = sz == 0 ? _mm256_set1_ps(*z) : _mm256_loadu_ps(z + j);
    _mm256_storeu_ps(y + j, apply8<O>(a, b));
  }
  for (; j < n; ++j) y[j] = apply<O>(x[j * sx], z[j * sz]);
}
#endif

#if RLX_NEON
// The same four at a time (GCC 12 does not vectorise the strided portable
// loop for aarch64; each lane is the scalar operation, the same bits).
template <BinOp O>
void row_neon(const float* x, int64_t sx, const float* z, int64_t sz, float* y, int64_t n) {
  using neon::F4;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    F4 a = sx == 0 ? F4(*x) : F4::load(x + j);
    F4 b = sz == 0 ? F4(*z) : F4::load(z + j);
    F4 r = O == BinOp::Add ? a + b : O == BinOp::Sub ? a - b : O == BinOp::Mul ? a * b : a / b;
    r.store(y + j);
  }
  for (; j < n; ++j) y[j] = apply<O>(x[j * sx], z[j * sz]);
}
#endif

// One row of `n` outputs from operands read with strides `sx`, `sz`.
template <BinOp O>
void binary_row(const float* x, int64_t sx, const float* z, int64_t sz, float* y, int64_t n) {
#if RLX_X86
  if ((sx == 0 || sx == 1) && (sz == 0 || sz == 1) && has_avx2_fma()) {
    return row_avx2<O>(x, sx, z, sz, y, n);
  }
#elif RLX_NEON
  if ((sx == 0 || sx == 1) && (sz == 0 || sz == 1) && has_neon()) {
    return row_neon<O>(x, sx, z, sz, y, n);
  }
#endif
  for (int64_t j = 0; j < n; ++j) y[j] = apply<O>(x[j * sx], z[j * sz]);
}

// out = a op b elementwise: a and b have out's shape (MLX broadcasts them
// first, as views), read through their strides.
template <BinOp O>
void binary(const mx::array& a, const mx::array& b, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  float* y = out.data<float>();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for_elementwise(out.shape(), out.size(), {&a, &b}, kBinaryPerPart,
                  [&](const int64_t* off, const int64_t* st, size_t first, int64_t len) {
                    binary_row<O>(pa + off[0], st[0], pb + off[1], st[1], y + first, len);
                  });
}

// The arrays met so far: a small graph's few dozen are scanned (hashing
// them cost more than the scan), a large one's hashed.
class Seen {
 public:
  // Whether `id` is new (and now seen).
  bool insert(std::uintptr_t id) {
    if (!many_.empty()) return many_.insert(id).second;
    for (auto s : few_) {
      if (s == id) return false;
    }
    few_.push_back(id);
    if (few_.size() > kFew) many_.insert(few_.begin(), few_.end());
    return true;
  }

  // Forget every id, keeping the memory for the next walk.
  void clear() {
    few_.clear();
    if (!many_.empty()) many_.clear();
  }

 private:
  static constexpr size_t kFew = 64;
  std::vector<std::uintptr_t> few_;
  std::unordered_set<std::uintptr_t> many_;
};

// `RLX_MLX_INLINE_WHY=1`: which op sent a graph to MLX's own evaluation
// (stderr), to see why a small graph did not run on the caller's thread.
void say_why(const mx::array& a) {
  static const bool on = std::getenv("RLX_MLX_INLINE_WHY") != nullptr;
  if (!on) return;
  const char* what = "a graph input without data";
  if (a.has_primitive()) what = const_cast<mx::array&>(a).primitive().name();
  std::fprintf(stderr, "[rlx mlx] evaluated by MLX, not on the calling thread: %s (%s)\n", what,
               a.siblings().empty() ? "one output" : "several outputs");
}

// Whether MLX reshapes `in` into `out`'s shape without a copy: MLX 0.32.4's
// prepare_reshape (backend/common/common.cpp, not exported), ported: the
// input's contiguous runs of axes must split into the output's axes.
bool reshape_shares(const mx::array& in, const mx::array& out) {
  if (in.size() == 0 || in.ndim() == 0 || in.flags().row_contiguous) return true;
  std::vector<int64_t> shape, strides;
  for (int i = 0; i < static_cast<int>(in.ndim()); ++i) {
    const int64_t n = in.shape(i), st = in.strides()[i];
    if (n == 1) continue;
    if (!shape.empty() && strides.back() == n * st) {
      shape.back() *= n;
      strides.back() = st;
    } else {
      shape.push_back(n);
      strides.push_back(st);
    }
  }
  size_t j = 0;
  for (int i = 0; i < static_cast<int>(out.ndim()); ++i) {
    const int64_t n = out.shape(i);
    if (j < shape.size() && shape[j] % n == 0) {
      shape[j] /= n;
      j += shape[j] == 1;
    } else if (n != 1) {
      return false;
    }
  }
  return true;
}

// `count` items of `Item` bytes, read every `src_step` bytes from `src`
// and written every `dst_step` bytes to `dst`: one memcpy where both lie
// packed, else a move of that size per item, not a call to memcpy (a
// strided view's elements; the real and imaginary halves of complex
// values interleaved by a concatenation).
template <size_t Item>
void copy_items(const char* src, int64_t src_step, char* dst, int64_t dst_step, int64_t count) {
  if (src_step == int64_t(Item) && dst_step == int64_t(Item)) {
    std::memcpy(dst, src, size_t(count) * Item);
    return;
  }
  for (int64_t j = 0; j < count; ++j) std::memcpy(dst + j * dst_step, src + j * src_step, Item);
}

// copy_items for items of `item` bytes.
void copy_items(size_t item, const char* src, int64_t src_step, char* dst, int64_t dst_step,
                int64_t count) {
  switch (item) {
    case 1: return copy_items<1>(src, src_step, dst, dst_step, count);
    case 2: return copy_items<2>(src, src_step, dst, dst_step, count);
    case 4: return copy_items<4>(src, src_step, dst, dst_step, count);
    case 8: return copy_items<8>(src, src_step, dst, dst_step, count);
    case 16: return copy_items<16>(src, src_step, dst, dst_step, count);
    default:
      for (int64_t j = 0; j < count; ++j) std::memcpy(dst + j * dst_step, src + j * src_step, item);
  }
}

// `in`'s elements, row-major, written to `dst` (in.nbytes() bytes): a row
// of the view's collapsed axes at a time, as the elementwise kernels walk
// it (an element at a time, with its index carried across every axis,
// this was most of a run whose concatenation read strided halves).
void gather_row_major(const mx::array& in, char* dst) {
  if (in.size() == 0) return;
  const int64_t item = int64_t(in.itemsize());
  const auto* src = static_cast<const char*>(in.data<void>());
  for_elementwise(in.shape(), in.size(), {&in}, kBinaryPerPart,
                  [&](const int64_t* off, const int64_t* st, size_t first, int64_t len) {
                    copy_items(size_t(item), src + off[0] * item, st[0] * item,
                               dst + int64_t(first) * item, item, len);
                  });
}

// `out` (of `in`'s elements, any shape) as a row-major copy of the view `in`.
void copy_row_major(const mx::array& in, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  gather_row_major(in, static_cast<char*>(out.data<void>()));
}

// `a`'s bytes row-major: its own buffer when it lies that way, else
// gathered into `tmp`.
const char* bytes_row_major(const mx::array& a, std::vector<char>& tmp) {
  if (a.flags().row_contiguous) return static_cast<const char*>(a.data<void>());
  tmp.resize(a.nbytes());
  gather_row_major(a, tmp.data());
  return tmp.data();
}

// MLX's Concatenate along `axis`: each input's block of rows copied into
// its place in every row of the axes before it.
void concatenate(int axis, const std::vector<mx::array>& in, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  if (out.size() == 0) return;
  const int nd = static_cast<int>(out.ndim());
  if (axis < 0) axis += nd;
  size_t outer = 1, after = out.itemsize();
  for (int d = 0; d < axis; ++d) outer *= static_cast<size_t>(out.shape(d));
  for (int d = axis + 1; d < nd; ++d) after *= static_cast<size_t>(out.shape(d));
  const size_t out_row = static_cast<size_t>(out.shape(axis)) * after;
  auto* dst = static_cast<char*>(out.data<void>());
  std::vector<char> tmp;
  size_t at = 0;
  for (const auto& x : in) {
    const size_t row = static_cast<size_t>(x.shape(axis)) * after;
    if (row == 0) continue;
    const char* src = bytes_row_major(x, tmp);
    copy_items(row, src, int64_t(row), dst + at, int64_t(out_row), int64_t(outer));
    at += row;
  }
}

// float32 negation (exact: the sign bit flipped, NaN's too, as MLX's).
void negative(const mx::array& x, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  std::vector<float> tmp;
  const float* src = row_major(x, tmp);
  float* y = out.data<float>();
  for (size_t i = 0, n = out.size(); i < n; ++i) y[i] = -src[i];
}

// MLX's own evaluation of `a` (its inputs computed), queued on its stream
// as MLX queues it, waited for.
void eval_by_mlx(mx::array& a) {
  // An op of several outputs is evaluated with its first: the others
  // are computed (and let go of their graph) by then.
  if (a.status() != mx::array::Status::unscheduled) return;
  auto stream = a.primitive().stream();
  {
    CallerRunsTasks mlx_queues(false);
    mx::eval({a});
  }
  // A task that failed leaves its error on the stream.
  mx::scheduler::check_error(stream);
}

// MLX 0.32.4's Contiguous::eval_cpu (backend/cpu/primitives.cpp) shares a
// row-major input's buffer when it is at most 16 KiB larger than the
// output (a view of a few rows of a large buffer is copied, so the rest
// can be freed), and otherwise copies on the stream's encoder. The same
// here, the copy of a row-major input a memcpy on this thread; another
// layout goes to MLX's copy (a hand-over to its thread, as before).
void contiguous(mx::array& a, std::vector<mx::array>& outs) {
  const auto& in = a.inputs()[0];
  if (!in.flags().row_contiguous) {
    eval_by_mlx(a);
    // Done before the caller marks it computed, as a step of its own is.
    a.wait();
    return;
  }
  if (in.buffer_size() <= a.nbytes() + 16384) {
    outs[0] = a;
    a.primitive().eval_cpu(a.inputs(), outs);
    // (Had it copied after all, the copy was queued: wait for it.)
    if (a.data<void>() != in.data<void>()) mx::synchronize(a.primitive().stream());
    return;
  }
  a.set_data(mx::allocator::malloc(a.nbytes()));
  if (a.nbytes() > 0) std::memcpy(a.data<void>(), in.data<void>(), a.nbytes());
}

// `outs`: a one-element vector the caller keeps, so that a step does not
// allocate one.
void run_step(Step step, mx::array& a, std::vector<mx::array>& outs) {
  auto& in = a.inputs();
  switch (step) {
    case Step::Kernel:
    case Step::View:
      outs[0] = a;
      a.primitive().eval_cpu(in, outs);
      return;
    case Step::Reshape:
      if (reshape_shares(in[0], a)) {
        // MLX's reshape then only shares the buffer with new strides.
        outs[0] = a;
        a.primitive().eval_cpu(in, outs);
        // (Had it copied after all, the copy was queued: wait for it.)
        if (a.data<void>() != in[0].data<void>()) mx::synchronize(a.primitive().stream());
        return;
      }
      // Else it is copied row-major here (MLX would queue the copy on the
      // encoder of the thread that made the op's stream).
      copy_row_major(in[0], a);
      return;
    case Step::Mlx: return eval_by_mlx(a);
    case Step::Contiguous: return contiguous(a, outs);
    case Step::Concatenate:
      // The name told it apart (step_for); the class is not exported
      // from libmlx, but its axis accessor is inline.
      return concatenate(static_cast<const mx::Concatenate&>(a.primitive()).state(), in, a);
    case Step::Negative: return negative(in[0], a);
    case Step::Add: return binary<BinOp::Add>(in[0], in[1], a);
    case Step::Subtract: return binary<BinOp::Sub>(in[0], in[1], a);
    case Step::Multiply: return binary<BinOp::Mul>(in[0], in[1], a);
    case Step::Divide: return binary<BinOp::Div>(in[0], in[1], a);
    case Step::None: break;
  }
  throw std::logic_error("[rlx inline eval] a step it cannot run");
}

}  // namespace

bool last_eval_inline() { return ran_inline(); }

void set_eval_inline(bool on) { enabled().store(on, std::memory_order_relaxed); }

bool eval_inline_enabled() { return enabled().load(std::memory_order_relaxed); }

// A few of MLX's ops (a concatenation of weights) are evaluated one by one,
// each a hand-over to MLX's thread and a wait (tens of microseconds),
// between the ops run here; a graph with more (a backward pass, a
// recurrence: the LSTM's 256 steps took 40 % longer with each step's MLX
// ops handed over alone) goes to MLX whole, where its ops follow one
// another on MLX's thread.
constexpr size_t kFewMlxOps = 4;

namespace {

// What one walk and run of a graph needs: kept per thread between
// evaluations, so that evaluating one node at a time (eager mode: thousands
// a run) allocates nothing for it.
struct Scratch {
  // The arrays to compute in an order where inputs come first (a
  // depth-first post-order), and the computed arrays they read.
  std::vector<std::pair<mx::array, Step>> tape;
  std::vector<mx::array> ready;
  Seen seen;
  std::vector<std::pair<mx::array, size_t>> stack;
  // A step's one output (see run_step).
  std::vector<mx::array> outs;

  // Let go of every array (so no buffer outlives the evaluation), keeping
  // the memory.
  void clear() {
    tape.clear();
    ready.clear();
    seen.clear();
    stack.clear();
    outs.clear();
  }
};

// This thread's spare scratch, taken for one evaluation and given back
// after it: an evaluation inside another (a kernel that evaluates) takes
// a fresh one instead of the one in use.
class ScratchLease {
 public:
  ScratchLease() : s_(spare() ? std::move(spare()) : std::make_unique<Scratch>()) {}
  ~ScratchLease() {
    s_->clear();
    if (!spare()) spare() = std::move(s_);
  }
  Scratch& operator*() { return *s_; }

 private:
  static std::unique_ptr<Scratch>& spare() {
    thread_local std::unique_ptr<Scratch> s;
    return s;
  }
  std::unique_ptr<Scratch> s_;
};

}  // namespace

bool eval_inline(const mx::array* xs, size_t n) {
  if (!enabled().load(std::memory_order_relaxed)) {
    ran_inline() = false;
    return false;
  }
  ScratchLease lease;
  auto& [tape, ready, seen, stack, outs] = *lease;
  size_t by_mlx = 0;
  for (const auto& x : std::span(xs, n)) {
    if (!seen.insert(x.id())) continue;
    if (x.status() != mx::array::Status::unscheduled) {
      ready.push_back(x);
      continue;
    }
    stack.emplace_back(x, 0);
    while (!stack.empty()) {
      auto& [a, next] = stack.back();
      if (next < a.inputs().size()) {
        const auto& in = a.inputs()[next++];
        if (!seen.insert(in.id())) continue;
        if (in.status() != mx::array::Status::unscheduled) {
          ready.push_back(in);
        } else {
          stack.emplace_back(in, 0);
        }
        continue;
      }
      Step step = step_for(a);
      if (step == Step::None) {
        say_why(a);
        ran_inline() = false;
        return false;
      }
      if (step == Step::Mlx) {
        say_why(a);
        // Past a few, the graph goes to MLX whole (below): stop walking.
        if (++by_mlx > kFewMlxOps) {
          ran_inline() = false;
          return false;
        }
      }
      tape.emplace_back(a, step);
      stack.pop_back();
    }
  }
  // An earlier run's array may still be computing (an asynchronous run).
  for (auto& r : ready) r.wait();
  if (tape.empty()) return true;
  ran_inline() = true;
  CallerRunsTasks here(true);
  outs.assign(1, tape.front().first);
  for (auto& [computed, step] : tape) {
    // Moved out: an intermediate is freed once its last reader has run.
    mx::array a = std::move(computed);
    run_step(step, a, outs);
    if (step == Step::Mlx) {
      a.wait();
      continue;
    }
    a.set_status(mx::array::Status::available);
    // As mx::eval does: the graph behind a computed array is let go.
    a.detach();
  }
  return true;
}

// ---- a recorded plan ------------------------------------------------------

namespace {

// Where an op's operand comes from.
struct Ref {
  enum Kind : uint8_t { Leaf, Const, Op } kind;
  uint32_t i;
};

struct PlanOp {
  Step step;
  std::shared_ptr<mx::Primitive> prim;
  mx::Shape shape;
  mx::Dtype dtype;
  std::vector<Ref> in;
};

}  // namespace

struct InlinePlan::Impl {
  size_t n_leaves = 0;
  // Arrays the graph holds with their data (constants), kept.
  std::vector<mx::array> consts;
  std::vector<PlanOp> ops;
  std::vector<Ref> outs;
  // For each op, the ops whose values are last read by it (freed then).
  std::vector<std::vector<uint32_t>> frees;
};

InlinePlan::InlinePlan(std::unique_ptr<Impl> i) : impl(std::move(i)) {}
InlinePlan::~InlinePlan() = default;

std::unique_ptr<InlinePlan> inline_plan(const ArrayList& leaves, const ArrayList& outs) {
  auto p = std::make_unique<InlinePlan::Impl>();
  p->n_leaves = leaves.v.size();
  std::unordered_map<std::uintptr_t, Ref> at;
  for (size_t i = 0; i < leaves.v.size(); ++i) at[leaves.v[i].id()] = {Ref::Leaf, uint32_t(i)};
  auto ref_of = [&](const mx::array& a) -> Ref {
    if (auto it = at.find(a.id()); it != at.end()) return it->second;
    if (a.status() == mx::array::Status::unscheduled) {
      throw std::invalid_argument("[rlx inline plan] an operand is neither a leaf nor computed");
    }
    Ref r{Ref::Const, uint32_t(p->consts.size())};
    p->consts.push_back(a);
    at[a.id()] = r;
    return r;
  };
  std::vector<std::pair<mx::array, size_t>> stack;
  for (const auto& x : outs.v) {
    if (at.count(x.id()) != 0 || x.status() != mx::array::Status::unscheduled) continue;
    stack.emplace_back(x, 0);
    while (!stack.empty()) {
      auto& [a, next] = stack.back();
      if (next < a.inputs().size()) {
        const auto& in = a.inputs()[next++];
        if (at.count(in.id()) == 0 && in.status() == mx::array::Status::unscheduled) {
          stack.emplace_back(in, 0);
        }
        continue;
      }
      Step step = step_for(a);
      if (step == Step::None || step == Step::Mlx) {
        throw std::invalid_argument(std::string("[rlx inline plan] an op the plugin does not run: ") +
                                    (a.has_primitive() ? const_cast<mx::array&>(a).primitive().name()
                                                       : "(none)"));
      }
      PlanOp op{step, const_cast<mx::array&>(a).primitive_ptr(), a.shape(), a.dtype(), {}};
      for (const auto& in : a.inputs()) op.in.push_back(ref_of(in));
      at[a.id()] = {Ref::Op, uint32_t(p->ops.size())};
      p->ops.push_back(std::move(op));
      stack.pop_back();
    }
  }
  for (const auto& x : outs.v) p->outs.push_back(ref_of(x));
  // Free each op's value after its last reader (outputs are kept).
  std::vector<int64_t> last(p->ops.size(), -1);
  for (size_t k = 0; k < p->ops.size(); ++k) {
    for (const auto& r : p->ops[k].in) {
      if (r.kind == Ref::Op) last[r.i] = int64_t(k);
    }
  }
  for (const auto& r : p->outs) {
    if (r.kind == Ref::Op) last[r.i] = int64_t(p->ops.size());
  }
  p->frees.resize(p->ops.size());
  for (size_t i = 0; i < last.size(); ++i) {
    if (last[i] >= 0 && last[i] < int64_t(p->ops.size())) p->frees[last[i]].push_back(uint32_t(i));
  }
  return std::make_unique<InlinePlan>(std::move(p));
}

std::size_t inline_plan_len(const InlinePlan& plan) { return plan.impl->ops.size(); }

// MLX 0.32.4's compile fuses unary, binary and ternary elementwise ops and
// broadcasts (compile.cpp, is_fusable) and drops no-op copies: of what a
// plan runs, the arithmetic steps and those views.
std::size_t inline_plan_fusable(const InlinePlan& plan) {
  std::size_t n = 0;
  for (const auto& op : plan.impl->ops) {
    switch (op.step) {
      case Step::Negative:
      case Step::Add:
      case Step::Subtract:
      case Step::Multiply:
      case Step::Divide:
        ++n;
        break;
      case Step::View: {
        const char* name = op.prim->name();
        n += named(name, "Broadcast") || named(name, "Copy") || named(name, "StopGradient");
        break;
      }
      default:
        break;
    }
  }
  return n;
}

std::unique_ptr<ArrayList> run_inline_plan(const InlinePlan& plan, const ArrayList& leaves) {
  const auto& p = *plan.impl;
  if (leaves.v.size() != p.n_leaves) {
    throw std::invalid_argument("[rlx inline plan] " + std::to_string(leaves.v.size()) +
                                " leaves given for " + std::to_string(p.n_leaves));
  }
  // An earlier run's array may still be computing (an asynchronous run).
  for (const auto& l : leaves.v) const_cast<mx::array&>(l).wait();
  std::vector<std::optional<mx::array>> vals(p.ops.size());
  auto get = [&](Ref r) -> const mx::array& {
    switch (r.kind) {
      case Ref::Leaf: return leaves.v[r.i];
      case Ref::Const: return p.consts[r.i];
      case Ref::Op: return *vals[r.i];
    }
    throw std::logic_error("[rlx inline plan] bad operand");
  };
  CallerRunsTasks here(true);
  std::vector<mx::array> outs;
  for (size_t k = 0; k < p.ops.size(); ++k) {
    const auto& op = p.ops[k];
    std::vector<mx::array> in;
    in.reserve(op.in.size());
    for (const auto& r : op.in) in.push_back(get(r));
    mx::array a(op.shape, op.dtype, op.prim, std::move(in));
    if (outs.empty()) outs.push_back(a);
    run_step(op.step, a, outs);
    a.set_status(mx::array::Status::available);
    a.detach();
    vals[k] = std::move(a);
    for (uint32_t f : p.frees[k]) vals[f].reset();
  }
  ran_inline() = true;
  auto out = std::make_unique<ArrayList>();
  for (const auto& r : p.outs) out->v.push_back(get(r));
  return out;
}

}  // namespace rlx
