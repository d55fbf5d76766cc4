// Array handle, dtype mapping, construction from host memory, read-out.
#pragma once

#include "rlx-mlx-shim/include/common.h"

namespace rlx {

// Shared enum, defined by the cxx bridge in src/array.rs (the generated
// header repeats this declaration with its enumerators).
enum class DType : std::uint8_t;

// A CPU graph's evaluation on the calling thread recorded once and run
// again on new leaves (src/inline_eval.cc).
struct InlinePlan {
  struct Impl;
  std::unique_ptr<Impl> impl;
  explicit InlinePlan(std::unique_ptr<Impl> i);
  ~InlinePlan();
};

// One MLX array (a refcounted graph node). Copying the handle is cheap.
struct Array {
  mx::array a;
  explicit Array(mx::array x) : a(std::move(x)) {}
};

// An ordered list of arrays (inputs/outputs of multi-array functions).
struct ArrayList {
  std::vector<mx::array> v;

  ArrayList() = default;
  explicit ArrayList(std::vector<mx::array> xs) : v(std::move(xs)) {}

  void push(const Array& a) { v.push_back(a.a); }
  std::size_t len() const { return v.size(); }
  std::unique_ptr<Array> get(std::size_t i) const {
    if (i >= v.size()) {
      throw std::out_of_range(
          "[rlx shim] ArrayList index " + std::to_string(i) +
          " out of range for length " + std::to_string(v.size()));
    }
    return std::make_unique<Array>(v[i]);
  }
  void clear() { v.clear(); }
};

inline std::unique_ptr<Array> wrap(mx::array x) {
  return std::make_unique<Array>(std::move(x));
}

inline std::unique_ptr<ArrayList> wrap_list(std::vector<mx::array> xs) {
  return std::make_unique<ArrayList>(std::move(xs));
}

mx::Dtype to_mlx(DType d);
DType from_mlx(mx::Dtype d);

void init();
bool default_device_is_cpu();

// This thread's device for shim ops (see thread_device()). Throws if MLX
// cannot run on it.
void set_thread_device(bool gpu, int32_t index);
bool thread_device_is_gpu();
int32_t thread_device_index();
// The GPU backend the bound libmlx was built with: 0 none, 1 CUDA, 2 Metal.
// A build with a GPU backend may still see no device (gpu_device_count).
int32_t gpu_backend();
// GPUs MLX can use now (0 for the CPU-only build, or no device/driver).
int32_t gpu_device_count();
// What MLX says of a device: its name ("" if none) and total memory (0 if
// unknown).
rust::String device_name(bool gpu, int32_t index);
uint64_t device_memory(bool gpu, int32_t index);

std::unique_ptr<ArrayList> new_array_list();

// Construction.
std::unique_ptr<Array> array_from_bytes(
    rust::Slice<const uint8_t> data,
    rust::Slice<const int32_t> shape,
    DType dtype);
bool array_overwrite(const Array& a, rust::Slice<const uint8_t> data);
std::unique_ptr<Array> array_from_borrowed(
    std::size_t ptr,
    std::size_t nbytes,
    rust::Slice<const int32_t> shape,
    DType dtype);
bool borrow_is_zero_copy();
std::unique_ptr<Array> scalar_f64(double v, DType dtype);
std::unique_ptr<Array> full(
    rust::Slice<const int32_t> shape,
    double v,
    DType dtype);
std::unique_ptr<Array> arange(double start, double stop, double step, DType dtype);
std::unique_ptr<Array> array_clone(const Array& a);

// Metadata (never throws: reads the array descriptor only).
rust::Vec<int32_t> array_shape(const Array& a);
rust::Vec<int64_t> array_strides(const Array& a);
DType array_dtype(const Array& a);
std::size_t array_size(const Array& a);
std::size_t array_nbytes(const Array& a);
std::size_t array_ndim(const Array& a);
std::size_t array_itemsize(const Array& a);
std::size_t array_id(const Array& a);
rust::Vec<rust::String> graph_ops(const ArrayList& outs, const ArrayList& stop);
std::size_t array_data_ptr(const Array& a);
std::size_t array_row_major_ptr(const Array& a);

// Evaluation and read-out.
void eval(const Array& a);
void eval_list(const ArrayList& l);
void eval_list_spinning(const ArrayList& l, uint32_t spin_us);
void eval_spinning(const Array& a, uint32_t spin_us);
bool last_eval_inline();
void set_eval_inline(bool on);
bool eval_inline_enabled();
std::unique_ptr<InlinePlan> inline_plan(const ArrayList& leaves, const ArrayList& outs);
std::unique_ptr<ArrayList> run_inline_plan(const InlinePlan& plan, const ArrayList& leaves);
std::size_t inline_plan_len(const InlinePlan& plan);
std::size_t inline_plan_fusable(const InlinePlan& plan);
void async_eval_list(const ArrayList& l);
void array_copy_into(const Array& a, rust::Slice<uint8_t> out);
void array_copy_to(const Array& a, uint8_t* out, std::size_t len);
double array_item_f64(const Array& a);

}  // namespace rlx
