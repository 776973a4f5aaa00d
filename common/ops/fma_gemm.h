// The FP32 GEMM of the CPU engine: every output element is one chain of fused multiply-adds
// over k in order,
//
//   acc = 0;  for k = 0, 1, ..., K-1:  acc = fma(a_ik, b_kj, acc)      (one rounding per step)
//
// followed by the epilogue  o_ij = alpha * acc (+ bias_j) (+ beta * o_ij), each operation an
// FP32 operation rounded to nearest, in that order (alpha == 1 skips the multiply, beta == 0
// never reads o). The kernels vectorise across j only: lane j of a register holds element
// (i, j) and adds that element's terms in the order above, so a 16-lane AVX-512 kernel, an
// 8-lane AVX2 kernel and a scalar loop with std::fma compute the same bits. The order does not
// follow the vector width, the cache sizes or the threads (each thread takes whole output
// blocks, parallel_gemm.h, never part of a sum), so an FP32 GEMM gives the same result on every
// x86-64 CPU and in every build, and the fastest kernel the CPU has can run it.
//
// Eigen's kernels, which this replaces for FP32, keep several partial sums per element whose
// number follows the vector width (and a panel of k whose length followed the L1 size): to
// print the same digits on an AVX2-only and an AVX-512 CPU, a build had to run AVX2 kernels
// everywhere, half of what an AVX-512 core does (ch08_full_3d/PERFORMANCE.md).
//
// The kernels are register-blocked as in BLIS (Van Zee & van de Geijn 2015; Goto & van de
// Geijn 2008): op(A) is packed into micro-panels of MR rows ([kc][MR]), op(B) into panels of
// NR columns ([kc][NR]), and an MR x NR block of accumulators stays in registers for a k-panel
// of kc steps: 12 x 32 on AVX-512 (24 of its 32 registers), 6 x 16 on AVX2 (12 of 16). Between
// k-panels an element's accumulator is stored as the FP32 number it is and loaded back, so its
// chain goes on unchanged: the panel sizes (fma_gemm.cpp) set the speed, never a bit.
// docs/REFERENCE.md, "Which results are bit-identical where".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mixpar::ops {

enum class GemmKernel : unsigned char { kPortable, kAvx2Fma, kAvx512 };
// "portable (std::fma)", "avx2+fma 6x16", "avx512f 12x32".
std::string_view gemm_kernel_name(GemmKernel kernel);

// The kernel FP32 GEMMs take on this CPU: AVX-512 F where the CPU and OS have it, else AVX2
// with FMA, else the portable loop (the same bits, slowly). bench_gemm runs each kernel the
// CPU has side by side (detail::fma_gemm_with).
GemmKernel gemm_kernel();

// An operand's element type: FP32, or BF16, widened exactly (a bf16 number is the top half of
// an FP32 one) while the kernels pack it, so a bf16 GEMM on a CPU without 16-bit units reads
// half the bytes and needs no widened copy of its operands; the bits are those of the FP32
// GEMM on the widened values.
enum class GemmOperand : unsigned char { kF32, kBF16 };

namespace detail {

// o = alpha * op(a) op(b) (+ bias on every row) + beta * o, op(a) [m, k], op(b) [k, n], o
// [m, n], dense row-major (a is [k, m] when ta, b is [n, k] when tb), bias [n] or null. Split
// over the OpenMP threads by output blocks (parallel_gemm.h). The caller has checked shapes and
// that o overlaps neither operand.
void fma_gemm(const float* a, const float* b, const float* bias, float* o, std::int64_t m,
              std::int64_t n, std::int64_t k, bool ta, bool tb, float alpha, float beta);

// The same product on one kernel and one thread, for tests: false (o untouched) when this CPU
// lacks the kernel, with *why_not saying what is missing.
// The same with operands of either element type (GemmOperand).
void fma_gemm(const void* a, GemmOperand a_type, const void* b, GemmOperand b_type,
              const float* bias, float* o, std::int64_t m, std::int64_t n, std::int64_t k, bool ta,
              bool tb, float alpha, float beta);

bool fma_gemm_with(GemmKernel kernel, const float* a, const float* b, const float* bias, float* o,
                   std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, float alpha,
                   float beta, std::string* why_not = nullptr);

}  // namespace detail
}  // namespace mixpar::ops
