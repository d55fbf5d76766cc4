// mx::compile of a Rust closure.
#pragma once

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "mlx/compile_impl.h"

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// Defined by the cxx bridge in src/compile.rs (a Rust type).
struct GraphFn;

using ArrayFn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

// A compiled function: the result of mx::compile over a std::function that
// calls back into a Rust closure.
//
// MLX keeps a compiled function's traces in the compile cache of the thread
// that *calls* it (a thread_local), but `mx::compile` erases them, when the
// function goes, only from the cache of the thread that *compiled* it. A
// function called on another thread (a background kernel build, a runtime
// that compiles on one thread and runs on a pool) would leave its traces,
// and the arrays they hold, behind for the life of that thread. So the
// function is compiled under a key of its own (this object's address,
// unique while it lives), every thread cache that traced it is recorded,
// and the destructor erases the key from each.
struct CompiledFn {
  ArrayFn fn;   // compiled
  ArrayFn raw;  // the closure itself, uncompiled
  bool shapeless;

  CompiledFn() = default;
  CompiledFn(const CompiledFn&) = delete;
  CompiledFn& operator=(const CompiledFn&) = delete;
  ~CompiledFn();

  // Record the calling thread's compile cache (before a call).
  void note_caller() const;

 private:
  mutable std::mutex mu_;
  mutable std::thread::id last_caller_;
  mutable std::vector<mx::detail::CompileCacheWeakPtr> caches_;
};

std::unique_ptr<CompiledFn> compile_fn(rust::Box<GraphFn> f, bool shapeless);
std::unique_ptr<ArrayList> compiled_call(
    const CompiledFn& f,
    const ArrayList& inputs);
// Calls the Rust closure directly (no compilation); for debugging and
// comparison.
std::unique_ptr<ArrayList> uncompiled_call(
    const CompiledFn& f,
    const ArrayList& inputs);

}  // namespace rlx
