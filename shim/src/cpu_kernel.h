// The plugin's own float32 CPU kernels as MLX primitives: a task on the CPU
// stream that reads every input row-major, whatever its layout (views,
// broadcast, transposed, sliced, are taken without a copy op in the graph),
// and writes the one output.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/include/common.h"

namespace rlx {

// Whether this thread is evaluating a graph itself (inline_eval.cc): the
// plugin's kernels then run their task at once instead of queueing it on
// MLX's stream thread.
inline bool& caller_runs_tasks() {
  thread_local bool on = false;
  return on;
}

// Sets `caller_runs_tasks` for a scope and restores what it was (on an
// exception too): an evaluation nested in another (a host kernel that
// evaluates a graph) leaves the outer one as it found it.
class CallerRunsTasks {
 public:
  explicit CallerRunsTasks(bool on) : was_(caller_runs_tasks()) { caller_runs_tasks() = on; }
  ~CallerRunsTasks() { caller_runs_tasks() = was_; }
  CallerRunsTasks(const CallerRunsTasks&) = delete;
  CallerRunsTasks& operator=(const CallerRunsTasks&) = delete;

 private:
  bool was_;
};

// What marks a primitive whose eval_cpu queues its work only through
// `run_task`, so that the caller's thread can run it (inline_eval.cc).
struct RunsInline {
  virtual ~RunsInline() = default;
};

// `task(in)` run now on the caller's thread when it evaluates the graph
// itself, else queued on stream `s` as MLX's own ops queue theirs: the
// queued task holds its inputs and `out`'s primitive (whose params it may
// read), since it runs after this call returns. Run now, it touches no
// encoder: MLX keeps a stream's encoder on the thread that made the stream,
// and a recorded plan runs on whichever thread calls it.
template <class F>
void run_task(mx::Stream s, const std::vector<mx::array>& in, mx::array& out, F&& task) {
  if (caller_runs_tasks()) {
    task(in);
    return;
  }
  auto& enc = mx::cpu::get_command_encoder(s);
  for (const auto& a : in) enc.set_input_array(a);
  enc.set_output_array(out);
  enc.dispatch([in, keep = out.primitive_ptr(), task = std::forward<F>(task)]() { task(in); });
}

// `a`'s elements row-major: its own buffer when it lies that way, else
// copied into `tmp` (a view: broadcast, transposed, sliced). Called inside
// a task, when `a`'s data is computed.
template <class T>
inline const T* row_major(const mx::array& a, std::vector<T>& tmp) {
  if (a.flags().row_contiguous) return a.data<T>();
  const T* src = a.data<T>();
  const auto& shape = a.shape();
  const auto& st = a.strides();
  int nd = a.ndim();
  tmp.resize(a.size());
  if (tmp.empty()) return tmp.data();
  // Row by row over the last axis (a slice's rows are contiguous runs; a
  // broadcast row repeats one value).
  const int64_t inner = shape[nd - 1], step = st[nd - 1];
  std::vector<int> idx(nd, 0);
  for (size_t k = 0; k < tmp.size(); k += inner) {
    int64_t off = 0;
    for (int d = 0; d < nd - 1; ++d) off += int64_t(idx[d]) * st[d];
    const T* row = src + off;
    T* out = tmp.data() + k;
    if (step == 1) {
      std::memcpy(out, row, size_t(inner) * sizeof(T));
    } else {
      for (int64_t j = 0; j < inner; ++j) out[j] = row[j * step];
    }
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return tmp.data();
}

// One kernel `run(inputs, output, output size, params)` as a primitive
// named `name`.
// Two calls are equivalent (mx::compile merges them) when they run the same
// function with equal params. `same_shape`: the output has the first
// input's shape (what a shapeless trace asks); otherwise the kernel has no
// shapeless form.
template <class P>
class CpuKernel : public mx::Primitive, public RunsInline {
 public:
  // `n`: the output's element count.
  using Run = void (*)(const float* const* in, float* out, size_t n, const P& p);

  CpuKernel(mx::Stream s, const char* name, Run run, P p, bool same_shape)
      : mx::Primitive(s), name_(name), run_(run), p_(std::move(p)), same_shape_(same_shape) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& out = outs[0];
    // A fresh buffer: the kernels read their inputs while writing.
    out.set_data(mx::allocator::malloc(out.nbytes()));
    run_task(stream(), in, out,
             [this, y = out.data<float>(), n = out.size()](const std::vector<mx::array>& in) {
               // A few inputs (every kernel but a scan's) need no allocation
               // unless one is a view to copy.
               constexpr size_t kFew = 8;
               if (in.size() <= kFew) {
                 std::vector<float> tmp[kFew];
                 const float* src[kFew];
                 for (size_t i = 0; i < in.size(); ++i) src[i] = row_major(in[i], tmp[i]);
                 run_(src, y, n, p_);
                 return;
               }
               std::vector<std::vector<float>> tmp(in.size());
               std::vector<const float*> src(in.size());
               for (size_t i = 0; i < in.size(); ++i) src[i] = row_major(in[i], tmp[i]);
               run_(src.data(), y, n, p_);
             });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error(std::string("[") + name_ +
                             "] is a CPU kernel; the GPU lowering uses MLX's ops");
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    if (!same_shape_) throw std::runtime_error(std::string("[") + name_ + "] has no shapeless form");
    return {in[0].shape()};
  }
  const char* name() const override { return name_; }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const CpuKernel&>(other);
    return run_ == o.run_ && p_ == o.p_;
  }

 private:
  const char* name_;
  Run run_;
  P p_;
  bool same_shape_;
};

// `run` over `in` as a float32 array of `shape` on the CPU stream.
template <class P>
mx::array cpu_kernel(const char* name, typename CpuKernel<P>::Run run, P p, mx::Shape shape,
                     std::vector<mx::array> in, bool same_shape) {
  auto s = mx::default_stream(mx::Device(mx::Device::DeviceType::cpu));
  return mx::array(std::move(shape), mx::float32,
                   std::make_shared<CpuKernel<P>>(s, name, run, std::move(p), same_shape),
                   std::move(in));
}

}  // namespace rlx
