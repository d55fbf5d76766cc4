// A Rust function run inside MLX's graph as a primitive, so that a kernel
// registered by the plugin's host stays an ordinary node of the lazy graph
// and of mx::compile's trace: nothing is split, and the kernel reads its
// inputs in place and writes straight into the output MLX allocated.
//
// The work is dispatched on the CPU stream like MLX's own CPU kernels (at
// eval_cpu time the inputs may still be in flight). A C++ exception thrown
// there would end the process, so the Rust side never throws: it reports a
// failure through the HostCall's own error slot (read by the plugin after
// evaluation) and the output is left zeroed.

#include "rlx-mlx-shim/include/host_kernel.h"

#include <cstring>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/src/host_kernel.rs.h"

namespace rlx {

namespace {

class HostKernel : public mx::UnaryPrimitive {
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
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& in : inputs) enc.set_input_array(in);
    enc.set_output_array(out);
    std::vector<const void*> srcs;
    std::vector<std::size_t> lens;
    for (const auto& in : inputs) {
      srcs.push_back(in.data<void>());
      lens.push_back(in.nbytes());
    }
    // The task holds the primitive (and so the call): MLX may detach the
    // graph before the stream runs it.
    enc.dispatch([prim = out.primitive_ptr(), srcs = std::move(srcs), lens = std::move(lens),
                  dst = out.data<void>(), n = out.nbytes()]() {
      const HostCall& call = *static_cast<const HostKernel&>(*prim).call_;
      std::vector<std::size_t> addrs;
      for (auto* p : srcs) addrs.push_back(reinterpret_cast<std::size_t>(p));
      std::memset(dst, 0, n);
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
