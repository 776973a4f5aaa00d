// Argument checks for the ops: one place that words the errors.
#include "ops/checks.h"

#include <stdexcept>
#include <string>

namespace mixpar::ops {
namespace {
[[noreturn]] void fail(const char* op, const char* name, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": '" + name + "' " + what);
}
}  // namespace

void check_operand(const Tensor& t, const char* op, const char* name) {
  if (!t.defined()) fail(op, name, "is an undefined tensor");
  if (!t.is_cpu()) {
    fail(op, name, "is on " + std::string(device_name(t.device())) +
                       "; the ops take CPU tensors only (the CUDA engine has its own)");
  }
  switch (t.dtype()) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kF64: return;
    default:
      fail(op, name, "has dtype " + std::string(dtype_name(t.dtype())) +
                         "; the ops compute on f32, f16, bf16 and f64 tensors");
  }
}

void check_shape(const Tensor& t, const Shape& want, const char* op, const char* name) {
  if (t.shape() != want) {
    fail(op, name, "has shape " + shape_str(t.shape()) + ", expected " + shape_str(want));
  }
}

void check_2d(const Tensor& t, const char* op, const char* name) {
  if (t.ndim() != 2) fail(op, name, "has shape " + shape_str(t.shape()) + ", expected 2-D");
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* op, const char* a_name,
                      const char* b_name) {
  if (a.numel() != b.numel()) {
    fail(op, a_name, "has shape " + shape_str(a.shape()) + " but '" + b_name + "' has " +
                         shape_str(b.shape()) + " (element counts differ)");
  }
}

void check_no_overlap(const Tensor& out, const Tensor& in, const char* op, const char* out_name,
                      const char* in_name) {
  const char* o = static_cast<const char*>(out.data());
  const char* i = static_cast<const char*>(in.data());
  if (o < i + in.nbytes() && i < o + out.nbytes()) {
    fail(op, out_name, std::string("overlaps input '") + in_name + "'; write to another tensor");
  }
}

bool any_f64(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t && t->defined() && t->dtype() == DType::kF64) return true;
  }
  return false;
}

}  // namespace mixpar::ops
