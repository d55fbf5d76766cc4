// A Rust function run inside MLX's graph as a primitive, so that a kernel
// registered by the plugin's host stays an ordinary node of the lazy graph
// and of mx::compile's trace: nothing is split, and the kernel reads its
// inputs in place and writes straight into the output MLX allocated.
//
// The work is a task as the shim's own kernels' are (`run_task`): run on
// the caller's thread when it evaluates the graph itself (inline_eval.cc),
// else dispatched on the CPU stream like MLX's own CPU kernels (at
// eval_cpu time the inputs may still be in flight). A C++ exception thrown
// on the stream would end the process, so the Rust side never throws: it
// reports a failure through the HostCall's own error slot (read by the
// plugin after evaluation) and the output is left zeroed.

#include "rlx-mlx-shim/include/host_kernel.h"

#include <cstring>

#include "mlx/allocator.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/src/host_kernel.rs.h"

namespace rlx {

namespace {

class HostKernel : public mx::UnaryPrimitive, public RunsInline {
 public:
  HostKernel(mx::Stream stream, rust::Box<HostCall> call)
      : mx::UnaryPrimitive(stream), call_(std::move(call)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    for (const auto& in : inputs) {
      if (!in.flags().row_contiguous) {
        throw std::invalid_argument("[rlx host kernel] inputs must be row-contiguous");
      }
    }
    out.set_data(mx::allocator::malloc(out.nbytes()));
    // The task holds the primitive (and so the call): MLX may detach the
    // graph before the stream runs it.
    run_task(stream(), inputs, out,
             [prim = out.primitive_ptr(), dst = out.data<void>(),
              n = out.nbytes()](const std::vector<mx::array>& in) {
               const HostCall& call = *static_cast<const HostKernel&>(*prim).call_;
               std::vector<std::size_t> addrs;
               std::vector<std::size_t> lens;
               for (const auto& a : in) {
                 addrs.push_back(reinterpret_cast<std::size_t>(a.data<void>()));
                 lens.push_back(a.nbytes());
               }
               std::memset(dst, 0, n);
               // The host's code is not part of this evaluation: a graph it
               // evaluates queues its ops as any other caller's would.
               CallerRunsTasks host_code(false);
               host_call_run(call, rust::Slice<const std::size_t>(addrs.data(), addrs.size()),
                             rust::Slice<const std::size_t>(lens.data(), lens.size()),
                             reinterpret_cast<std::size_t>(dst), n);
             });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[rlx host kernel] runs on the CPU stream only");
  }

  const char* name() const override { return "RlxHostKernel"; }
  // Two nodes are never merged: a kernel may have effects MLX cannot see.
  bool is_equivalent(const mx::Primitive&) const override { return false; }

 private:
  rust::Box<HostCall> call_;
};

}  // namespace

std::unique_ptr<Array> host_kernel_node(const ArrayList& inputs, rust::Box<HostCall> call,
                                        rust::Slice<const int32_t> shape, DType dtype) {
  auto s = mx::default_stream(mx::Device(mx::Device::DeviceType::cpu));
  std::vector<mx::array> ins;
  for (const auto& a : inputs.v) ins.push_back(mx::contiguous(a, false, s));
  mx::Shape out_shape(shape.begin(), shape.end());
  return wrap(mx::array(std::move(out_shape), to_mlx(dtype),
                        std::make_shared<HostKernel>(s, std::move(call)), std::move(ins)));
}

}  // namespace rlx
