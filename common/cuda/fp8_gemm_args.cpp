// fp8_lt_args and the FP8 GEMM's device rule: pure functions, tested without a GPU.
#include "cuda/fp8_gemm_args.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mixpar::cuda {

namespace {

bool is_fp8(DType t) { return t == DType::kE4M3 || t == DType::kE5M2; }

void check_size(std::int64_t v, const char* name) {
  if (v <= 0 || v % kFp8Multiple != 0) {
    throw std::invalid_argument("fp8 gemm: " + std::string(name) + " = " + std::to_string(v) +
                                " must be a positive multiple of " +
                                std::to_string(kFp8Multiple) + " (cuBLASLt FP8 layout rule)");
  }
}

}  // namespace

Fp8LtArgs fp8_lt_args(const Fp8GemmShape& s) {
  check_size(s.M, "M");
  check_size(s.N, "N");
  check_size(s.K, "K");
  if (!is_fp8(s.a_format) || !is_fp8(s.b_format)) {
    throw std::invalid_argument("fp8 gemm: operands must be e4m3 or e5m2, not " +
                                std::string(dtype_name(s.a_format)) + " and " +
                                std::string(dtype_name(s.b_format)));
  }
  if (s.a_format == DType::kE5M2 && s.b_format == DType::kE5M2) {
    throw std::invalid_argument(
        "fp8 gemm: e5m2 x e5m2 is not a cuBLASLt FP8 combination (one operand must be e4m3)");
  }
  if (s.out_type != DType::kF32 && s.out_type != DType::kBF16) {
    throw std::invalid_argument("fp8 gemm: output must be f32 or bf16, not " +
                                std::string(dtype_name(s.out_type)));
  }
  Fp8LtArgs a;
  a.m = s.N;
  a.n = s.M;
  a.k = s.K;
  // Row-major b [N, K] read column-major: [K, N], ld K; TRANSA = T makes it [N, K].
  a.first_format = s.b_format;
  a.first_rows = s.K;
  a.first_cols = s.N;
  a.ld_first = s.K;
  // Row-major a [M, K] read column-major: [K, M], ld K; TRANSB = N.
  a.second_format = s.a_format;
  a.second_rows = s.K;
  a.second_cols = s.M;
  a.ld_second = s.K;
  // Column-major D [N, M], ld N: the row-major out [M, N].
  a.ld_out = s.N;
  return a;
}

void check_fp8_alignment(const void* p, const char* what) {
  if (p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {
    throw std::invalid_argument(std::string("fp8 gemm: ") + what +
                                (p == nullptr ? " is null" : " is not 16-byte aligned"));
  }
}

bool fp8_gemm_supported(int cc_major, int cc_minor) {
  return cc_major > 8 || (cc_major == 8 && cc_minor >= 9);
}

std::string fp8_gemm_unsupported_reason(int cc_major, int cc_minor) {
  if (fp8_gemm_supported(cc_major, cc_minor)) return "";
  return "FP8 GEMMs need FP8 tensor cores, compute capability 8.9 (Ada) or 9.0 (Hopper) or "
         "later; this GPU is sm_" +
         std::to_string(cc_major) + std::to_string(cc_minor);
}

}  // namespace mixpar::cuda
