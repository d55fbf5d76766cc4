/* rlx-mlx-kernel-builder: builds a compiled graph's kernels in a process of
 * its own, so that they are in MLX's on-disk kernel cache when the process
 * that asked for them switches to its compiled function.
 *
 *   rlx-mlx-kernel-builder <plugin library> <arguments for the plugin>
 *
 * It only loads the plugin library beside it and hands over: the work is
 * the plugin's `rlx_mlx_kernel_builder_main` (plugin-mlx's
 * src/kernel_builder.rs), which reads the graph from standard input. The
 * library is loaded RTLD_LOCAL, as a host loads it, so that its own
 * definitions (NVRTC's options) bind before the libraries MLX pulls in.
 * Exit status: the plugin's, or 2 when the library or its entry point
 * cannot be found (an older plugin library beside a newer builder). */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*builder_main)(int argc, const char* const* argv);

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <plugin library> [arguments]\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "rlx-mlx-kernel-builder: %s\n", dlerror());
    return 2;
  }
  builder_main entry = (builder_main)dlsym(lib, "rlx_mlx_kernel_builder_main");
  if (entry == NULL) {
    fprintf(stderr, "rlx-mlx-kernel-builder: %s has no kernel builder: %s\n",
            argv[1], dlerror());
    return 2;
  }
  return entry(argc - 2, (const char* const*)(argv + 2));
}
