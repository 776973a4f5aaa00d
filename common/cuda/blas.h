// GEMMs through cuBLAS and cuBLASLt with ops::matmul's row-major semantics (gemm_args.h maps
// them): f32, f16 or bf16 operands, FP32 accumulation (CUBLAS_COMPUTE_32F, or _32F_FAST_TF32 for
// f32 when asked), outputs in the operands' dtype or f32; cuBLASLt epilogues for bias, bias +
// GELU (keeping the pre-activation), GELU gradient + bias gradient, and the bias gradient of b.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>

#include "cuda/device_tensor.h"
#include "cuda/epilogue_stats.h"
#include "cuda/gemm_args.h"

namespace mixpar::cuda {

enum class MathMode : std::uint8_t {
  kFp32,  // f32 operands multiplied in full FP32 (16-bit operands: tensor cores, FP32 sums)
  kTf32,  // f32 operands rounded to TF32 (10-bit mantissa) on the tensor cores, FP32 sums
};

struct GemmCall {
  RowMajorGemm shape;  // out [M, N] = alpha op(a) op(b) + beta out
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  DType in_type = DType::kF32;   // a and b
  DType out_type = DType::kF32;  // in_type or f32
  float alpha = 1.0f, beta = 0.0f;  // beta == 0: out is never read (may hold NaN)
  MathMode math = MathMode::kFp32;
  // cuBLAS (classic) only: `batch` products, operands `stride_*` elements apart.
  std::int64_t batch = 1, stride_a = 0, stride_b = 0, stride_out = 0;
  // cuBLASLt only.
  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;  // [N], out_type
  void* bias_grad = nullptr;   // [N], out_type
  void* aux = nullptr;         // [M, N] row-major, row stride = out's, out_type
};

// The call out = op(a) op(b) on device tensors: shape as given, pointers and dtypes from the
// tensors, everything else GemmCall's defaults (alpha 1, beta 0, FP32 math, one product).
inline GemmCall gemm_call(const RowMajorGemm& shape, const DeviceTensor& a, const DeviceTensor& b,
                          DeviceTensor& out) {
  GemmCall c;
  c.shape = shape;
  c.a = a.data();
  c.b = b.data();
  c.out = out.data();
  c.in_type = a.dtype();
  c.out_type = out.dtype();
  return c;
}

// Owns a cuBLAS and a cuBLASLt handle bound to one stream and one 32 MiB workspace (the size
// cuBLAS documents for Hopper), allocated once and shared: both handles run on the same stream,
// so they never use it at the same time. cuBLASLt's algorithm choice is cached per shape.
class Blas {
 public:
  explicit Blas(cudaStream_t stream);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  cudaStream_t stream() const { return stream_; }
  // Binds the handles to `stream` and sets the workspace again (cublasSetStream drops it).
  void set_stream(cudaStream_t stream);

  // cublasGemmStridedBatchedEx; the epilogue must be kNone. Throws CudaError on failure.
  void gemm(const GemmCall& call);
  // cublasLtMatmul with call.epilogue (batch must be 1). Returns false, having run nothing,
  // when cuBLASLt offers no algorithm for this combination (CUBLAS_STATUS_NOT_SUPPORTED, or
  // no heuristic result: dtype, epilogue, alignment); the caller then runs the unfused
  // sequence. Every call is counted in epilogue_stats(), and the first decline is written to
  // stderr with its status. Argument errors (CUBLAS_STATUS_INVALID_VALUE) and other failures
  // throw: they are bugs, not a missing fusion.
  bool gemm_lt(const GemmCall& call);
  EpilogueStats::Counts epilogue_stats() const { return epilogue_stats_.counts(); }
  void reset_epilogue_stats() { epilogue_stats_.reset(); }

  cublasHandle_t handle() const { return handle_; }
  cublasLtHandle_t lt_handle() const { return lt_; }
  void* workspace() const { return workspace_.data(); }  // kWorkspaceBytes, for cuBLASLt calls
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

 private:
  void bind_stream_and_workspace();
  struct CachedAlgo {
    bool tried = false;  // the heuristic ran for this key
    bool found = false;  // and offered an algorithm (false: the caller falls back, every time)
    cublasLtMatmulAlgo_t algo{};
    std::string why;  // when not found: the status that declined it
  };
  bool decline(const GemmCall& c, const ColumnMajorGemm& g, const std::string& why);
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DeviceTensor workspace_;
  std::map<std::string, CachedAlgo> algo_cache_;
  EpilogueStats epilogue_stats_;
};

// ops::matmul on 2-D device tensors: out [M, N] = alpha op(a) op(b) + beta out; a and b of one
// dtype, out of that dtype or f32. Shapes are checked like the CPU's.
void matmul(Blas& blas, const DeviceTensor& a, const DeviceTensor& b, DeviceTensor& out,
            bool trans_a = false, bool trans_b = false, float alpha = 1.0f, float beta = 0.0f,
            MathMode math = MathMode::kFp32);

}  // namespace mixpar::cuda
