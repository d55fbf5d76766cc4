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
  // Our own key (see CompiledFn): the object's address, erased from every
  // caller's cache by the destructor before the address can be reused.
  out->fn = mx::detail::compile(
      ArrayFn(cb), reinterpret_cast<std::uintptr_t>(out.get()), shapeless);
  out->shapeless = shapeless;
  return out;
}

void CompiledFn::note_caller() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto me = std::this_thread::get_id();
  if (me == last_caller_) {
    return;
  }
  last_caller_ = me;
  auto cache = mx::detail::compile_cache();
  for (const auto& c : caches_) {
    // The same cache (owner comparison: equal when neither orders first).
    if (!c.owner_before(cache) && !cache.owner_before(c)) {
      return;
    }
  }
  caches_.push_back(std::move(cache));
}

CompiledFn::~CompiledFn() {
  auto key = reinterpret_cast<std::uintptr_t>(this);
  for (const auto& c : caches_) {
    // A cache whose thread has ended is gone already (the weak pointer
    // says so).
    mx::detail::compile_erase(c, key);
  }
}

std::unique_ptr<ArrayList> compiled_call(
    const CompiledFn& f,
    const ArrayList& inputs) {
  f.note_caller();
  return std::make_unique<ArrayList>(f.fn(inputs.v));
}

std::unique_ptr<ArrayList> uncompiled_call(
    const CompiledFn& f,
    const ArrayList& inputs) {
  return std::make_unique<ArrayList>(f.raw(inputs.v));
}

}  // namespace rlx
