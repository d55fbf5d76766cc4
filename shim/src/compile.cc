#include "rlx-mlx-shim/include/compile.h"

#include "rlx-mlx-shim/src/compile.rs.h"

namespace rlx {

namespace {
struct Callback {
  // Shared so that copies of the std::function (MLX keeps some) drop the
  // Rust closure exactly once, after the last copy is gone.
  std::shared_ptr<rust::Box<GraphFn>> f;

  std::vector<mx::array> operator()(const std::vector<mx::array>& in) const {
    ArrayList inputs(in);
    // An Err from Rust comes back as a thrown rust::Error (a
    // std::exception): it unwinds through MLX's tracing and out of the
    // compiled call, where the bridge turns it into Err again.
    std::unique_ptr<ArrayList> out = call_graph_fn(**f, inputs);
    if (!out) {
      throw std::runtime_error("[rlx shim] compiled closure returned null");
    }
    return std::move(out->v);
  }
};
}  // namespace

std::unique_ptr<CompiledFn> compile_fn(rust::Box<GraphFn> f, bool shapeless) {
  ensure_init();
  Callback cb{std::make_shared<rust::Box<GraphFn>>(std::move(f))};
  auto out = std::make_unique<CompiledFn>();
  out->raw = ArrayFn(cb);
  out->fn = mx::compile(ArrayFn(cb), shapeless);
  out->shapeless = shapeless;
  return out;
}

std::unique_ptr<ArrayList> compiled_call(
    const CompiledFn& f,
    const ArrayList& inputs) {
  return std::make_unique<ArrayList>(f.fn(inputs.v));
}

std::unique_ptr<ArrayList> uncompiled_call(
    const CompiledFn& f,
    const ArrayList& inputs) {
  return std::make_unique<ArrayList>(f.raw(inputs.v));
}

}  // namespace rlx
