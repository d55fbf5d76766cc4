// Looking up a symbol of the libraries MLX loaded (its BLAS), also when
// the plugin was loaded with RTLD_LOCAL.
#pragma once

namespace rlx {

// The address of `name` in libmlx and its dependencies, else in the
// process's global scope; null when none has it.
void* find_symbol(const char* name);

}  // namespace rlx
