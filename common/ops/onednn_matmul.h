// BF16 and FP16 GEMMs through oneDNN (Intel's deep-learning kernel library, Debian's
// libdnnl-dev), behind the same ops::matmul every layer calls: 16-bit operands multiplied by
// the CPU's own 16-bit dot-product instructions (AVX512-BF16, AMX, AVX512-FP16) with FP32
// accumulation, alpha and beta applied in FP32 and the result rounded once into out's dtype,
// as the software path does (matmul.h) in another order of the FP32 sums. Used only where oneDNN
// creates a native matmul primitive for the dtype on this CPU; oneDNN 2.6 creates none on a
// CPU without AVX-512 (an AVX2 AMD EPYC: it refuses bf16 and f16 matmuls), and a reference
// ("ref:") primitive would be slower than the software path, so it is not used either.
// The software path stays selectable: MIXPAR_ONEDNN=0 in the environment, or
// set_onednn_matmul(false). Compiled only when CMake finds libdnnl (MIXPAR_WITH_ONEDNN, on by
// default); otherwise every query below answers "not built".
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace mixpar::ops {

// Whether this build links oneDNN.
bool onednn_built();

// Whether oneDNN has a native matmul on this CPU for operands of `dtype` (kBF16 or kF16) with
// FP32 accumulation; when not, *why_not (if given) says why. Checked once per dtype.
bool onednn_matmul_available(DType dtype, std::string* why_not = nullptr);

// oneDNN's name for the matmul kernel it runs for `dtype` on this CPU ("brg:avx512_core_amx",
// "brg:avx512_core_bf16", ...), which says which unit multiplies: empty when none is available.
std::string onednn_matmul_kernel(DType dtype);

// The switch: on unless MIXPAR_ONEDNN=0 (or "off") was in the environment at the first GEMM.
void set_onednn_matmul(bool enabled);
bool onednn_matmul_enabled();

namespace detail {
// out = alpha op(a) op(b) + beta out through oneDNN when the switch is on, a and b are 2-D
// tensors of one 16-bit dtype oneDNN is available for and out is f32 or that dtype; returns
// false (nothing done) otherwise. Arguments are checked by matmul.
bool onednn_matmul(const Tensor& a, const Tensor& b, Tensor& out, bool ta, bool tb, float alpha,
                   float beta);
// The same GEMM on any dtypes oneDNN takes (f32 included), ignoring the switch and the check
// for a native kernel; false when oneDNN has none at all. For tests: on a CPU without 16-bit
// units the descriptors (transposes as strides, alpha, beta) are still checked on f32.
bool onednn_gemm(const Tensor& a, const Tensor& b, Tensor& out, bool ta, bool tb, float alpha,
                 float beta);
// linear_forward's y [m, n] = x [m, k] w [k, n] + b [n] in one oneDNN primitive: the bias is
// its bias argument, added in FP32 to each product before the one rounding into y, as the
// software path's fused epilogue does (linear.h). Taken under the conditions of onednn_matmul,
// with b f32 or the operands' dtype; false (nothing done) otherwise.
bool onednn_linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// The same on any dtypes oneDNN takes, f32 included, ignoring the switch (for tests, as
// onednn_gemm).
bool onednn_gemm_bias(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
}  // namespace detail

}  // namespace mixpar::ops
