// ops::matmul's 16-bit GEMMs on oneDNN's matmul primitive (onednn_matmul.h). Each call
// describes its GEMM (shapes, transposes as strides, alpha as the output scale, beta as a sum
// post-op, which reads out, scales it in FP32 and adds it before the one rounding) and lets
// oneDNN's primitive cache return the compiled kernel; the primitive runs on the calling
// thread's OpenMP team (Debian's libdnnl uses the OpenMP runtime), the team compute_threads.h
// sets.
#include "ops/onednn_matmul.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

namespace mixpar::ops {
namespace {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

bool env_enabled() {
  const char* v = std::getenv("MIXPAR_ONEDNN");
  return v == nullptr || !(std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0);
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{env_enabled()};
  return on;
}

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::kBF16: return dnnl::memory::data_type::bf16;
    case DType::kF16: return dnnl::memory::data_type::f16;
    case DType::kF32: return dnnl::memory::data_type::f32;
    default: return dnnl::memory::data_type::undef;
  }
}

// An m x k matrix stored row-major as [m, k], or, transposed, as [k, m].
dnnl::memory::desc matrix_desc(std::int64_t rows, std::int64_t cols, DType t, bool transposed) {
  const dnnl::memory::dims strides =
      transposed ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1};
  return dnnl::memory::desc({rows, cols}, dnnl_type(t), strides);
}

// bias: the dtype of a bias row [1, n] added to every output row before the rounding (oneDNN's
// bias argument, in FP32 like the sum), or kF64 for none.
dnnl::matmul::primitive_desc describe(std::int64_t m, std::int64_t n, std::int64_t k, DType in,
                                      DType out, bool ta, bool tb, float alpha, float beta,
                                      DType bias = DType::kF64) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  if (bias != DType::kF64) {
    const dnnl::matmul::desc d(matrix_desc(m, k, in, ta), matrix_desc(k, n, in, tb),
                               matrix_desc(1, n, bias, false), matrix_desc(m, n, out, false));
    return dnnl::matmul::primitive_desc(d, attr, cpu_engine());
  }
  const dnnl::matmul::desc d(matrix_desc(m, k, in, ta), matrix_desc(k, n, in, tb),
                             matrix_desc(m, n, out, false));
  return dnnl::matmul::primitive_desc(d, attr, cpu_engine());
}

struct Availability {
  bool ok = false;
  std::string why_not;
  std::string kernel;  // impl_info_str() of the probe's primitive
};

Availability probe(DType dtype) {
  Availability a;
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    a.why_not = "oneDNN is used for bf16 and f16 GEMMs only";
    return a;
  }
  try {
    const dnnl::matmul::primitive_desc pd = describe(64, 64, 64, dtype, DType::kF32, false, false, 1.0f, 0.0f);
    const std::string impl = pd.impl_info_str();
    a.kernel = impl;
    if (impl.starts_with("ref")) {
      a.why_not = "oneDNN's only " + std::string(dtype_name(dtype)) + " matmul on this CPU is its "
                  "reference kernel (" + impl + "), slower than the software path";
      return a;
    }
    a.ok = true;
  } catch (const dnnl::error& e) {
    a.why_not = "oneDNN " + std::to_string(dnnl_version()->major) + "." +
                std::to_string(dnnl_version()->minor) + " creates no " +
                std::string(dtype_name(dtype)) + " matmul on this CPU (" + e.what() +
                "; its 16-bit matmuls need AVX512-BF16, AMX or AVX512-FP16)";
  }
  return a;
}

const Availability& availability(DType dtype) {
  static std::once_flag once;
  static Availability bf16, f16;
  std::call_once(once, [] {
    bf16 = probe(DType::kBF16);
    f16 = probe(DType::kF16);
  });
  static const Availability other = probe(DType::kF32);
  return dtype == DType::kBF16 ? bf16 : dtype == DType::kF16 ? f16 : other;
}

}  // namespace

bool onednn_built() { return true; }

bool onednn_matmul_available(DType dtype, std::string* why_not) {
  const Availability& a = availability(dtype);
  if (!a.ok && why_not != nullptr) *why_not = a.why_not;
  return a.ok;
}

std::string onednn_matmul_kernel(DType dtype) {
  const Availability& a = availability(dtype);
  return a.ok ? a.kernel : std::string();
}

void set_onednn_matmul(bool enabled) { enabled_flag().store(enabled); }
bool onednn_matmul_enabled() { return enabled_flag().load(); }

namespace detail {

bool onednn_matmul(const Tensor& a, const Tensor& b, Tensor& out, bool ta, bool tb, float alpha,
                   float beta) {
  const DType in = a.dtype();
  if (!onednn_matmul_enabled() || (in != DType::kBF16 && in != DType::kF16) || b.dtype() != in ||
      (out.dtype() != DType::kF32 && out.dtype() != in) || !onednn_matmul_available(in)) {
    return false;
  }
  return onednn_gemm(a, b, out, ta, tb, alpha, beta);
}

bool onednn_gemm(const Tensor& a, const Tensor& b, Tensor& out, bool ta, bool tb, float alpha,
                 float beta) {
  const DType in = a.dtype();
  if (b.dtype() != in || dnnl_type(in) == dnnl::memory::data_type::undef ||
      dnnl_type(out.dtype()) == dnnl::memory::data_type::undef) {
    return false;
  }
  const std::int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const std::int64_t n = tb ? b.dim(0) : b.dim(1);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = describe(m, n, k, in, out.dtype(), ta, tb, alpha, beta);
  } catch (const dnnl::error&) {
    return false;  // no kernel for these dtypes on this CPU
  }
  const dnnl::memory ma(pd.src_desc(), cpu_engine(), a.data());
  const dnnl::memory mb(pd.weights_desc(), cpu_engine(), b.data());
  const dnnl::memory mc(pd.dst_desc(), cpu_engine(), out.data());
  dnnl::stream s(cpu_engine());
  dnnl::matmul(pd).execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  s.wait();
  return true;
}

bool onednn_linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const DType in = x.dtype();
  if (!onednn_matmul_enabled() || (in != DType::kBF16 && in != DType::kF16) || w.dtype() != in ||
      (y.dtype() != DType::kF32 && y.dtype() != in) ||
      (b.dtype() != DType::kF32 && b.dtype() != in) || !onednn_matmul_available(in)) {
    return false;
  }
  return onednn_gemm_bias(x, w, b, y);
}

bool onednn_gemm_bias(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const DType in = x.dtype();
  if (w.dtype() != in || dnnl_type(in) == dnnl::memory::data_type::undef ||
      dnnl_type(b.dtype()) == dnnl::memory::data_type::undef ||
      dnnl_type(y.dtype()) == dnnl::memory::data_type::undef) {
    return false;
  }
  const std::int64_t m = x.dim(0), k = x.dim(1), n = w.dim(1);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = describe(m, n, k, in, y.dtype(), false, false, 1.0f, 0.0f, b.dtype());
  } catch (const dnnl::error&) {
    return false;  // no kernel with this bias on this CPU
  }
  const dnnl::memory mx(pd.src_desc(), cpu_engine(), x.data());
  const dnnl::memory mw(pd.weights_desc(), cpu_engine(), w.data());
  const dnnl::memory mb(pd.bias_desc(), cpu_engine(), b.data());
  const dnnl::memory my(pd.dst_desc(), cpu_engine(), y.data());
  dnnl::stream s(cpu_engine());
  dnnl::matmul(pd).execute(s, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb},
                               {DNNL_ARG_DST, my}});
  s.wait();
  return true;
}

}  // namespace detail
}  // namespace mixpar::ops
