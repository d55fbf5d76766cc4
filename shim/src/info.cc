#include "rlx-mlx-shim/include/info.h"
#include "rlx-mlx-shim/include/symbols.h"

#include <dlfcn.h>

#include <fstream>
#include <sstream>

#include "rlx-mlx-shim/src/info.rs.h"

namespace rlx {

namespace {

std::string path_of_address(const void* addr) {
  Dl_info info{};
  if (addr != nullptr && dladdr(addr, &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return {};
}

// Handle of the loaded libmlx (found through an MLX function's address), so
// that symbol look-ups search libmlx and its dependencies even when the
// plugin was loaded with RTLD_LOCAL.
void* mlx_handle() {
  static void* handle = [] () -> void* {
    auto path = path_of_address(reinterpret_cast<const void*>(&mx::version));
    if (path.empty()) {
      return nullptr;
    }
    return dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  }();
  return handle;
}

std::string library_of_symbols(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto p = path_of_address(find_symbol(n));
    if (!p.empty()) {
      return p;
    }
  }
  return {};
}

// Fallback: the first mapped file whose name contains `needle`.
std::string from_proc_maps(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) {
      continue;
    }
    std::string path = line.substr(slash);
    auto base = path.substr(path.rfind('/') + 1);
    if (base.find(needle) != std::string::npos) {
      return path;
    }
  }
  return {};
}

}  // namespace

void* find_symbol(const char* name) {
  if (void* h = mlx_handle()) {
    if (void* p = dlsym(h, name)) {
      return p;
    }
  }
  return dlsym(RTLD_DEFAULT, name);
}

rust::String mlx_version() {
  return rust::String::lossy(mx::version());
}

rust::String mlx_library_path() {
  return rust::String::lossy(
      path_of_address(reinterpret_cast<const void*>(&mx::version)));
}

rust::String blas_library_path() {
  auto p = library_of_symbols({"cblas_sgemm", "sgemm_", "cblas_dgemm"});
  if (p.empty()) {
    p = from_proc_maps("blas");
  }
  return rust::String::lossy(p);
}

rust::String lapack_library_path() {
  auto p = library_of_symbols({"sgetrf_", "ssyevd_", "LAPACKE_sgetrf"});
  if (p.empty()) {
    p = from_proc_maps("lapack");
  }
  return rust::String::lossy(p);
}

rust::String blas_info() {
  std::ostringstream out;
  out << "blas=" << std::string(blas_library_path());
  out << "; lapack=" << std::string(lapack_library_path());
  using cfg_fn = const char* (*)();
  using threads_fn = int (*)();
  if (auto cfg = reinterpret_cast<cfg_fn>(find_symbol("openblas_get_config"))) {
    out << "; vendor=OpenBLAS (" << cfg() << ")";
    if (auto nt = reinterpret_cast<threads_fn>(
            find_symbol("openblas_get_num_threads"))) {
      out << "; threads=" << nt();
    }
  } else if (find_symbol("mkl_get_version") != nullptr) {
    out << "; vendor=MKL";
  } else if (find_symbol("bli_info_get_version_str") != nullptr) {
    using ver_fn = const char* (*)();
    auto v = reinterpret_cast<ver_fn>(find_symbol("bli_info_get_version_str"));
    out << "; vendor=BLIS " << v();
  } else {
    out << "; vendor=unknown (no OpenBLAS/MKL/BLIS entry points; likely "
           "reference BLAS)";
  }
  return rust::String::lossy(out.str());
}

}  // namespace rlx
