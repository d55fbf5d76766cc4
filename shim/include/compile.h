// mx::compile of a Rust closure.
#pragma once

#include <functional>

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// Defined by the cxx bridge in src/compile.rs (a Rust type).
struct GraphFn;

using ArrayFn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

// A compiled function: the result of mx::compile over a std::function that
// calls back into a Rust closure.
struct CompiledFn {
  ArrayFn fn;   // compiled
  ArrayFn raw;  // the closure itself, uncompiled
  bool shapeless;
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
