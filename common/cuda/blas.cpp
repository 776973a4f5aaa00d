// Blas: the cuBLAS / cuBLASLt calls behind every GEMM of the engine. Descriptors are created
// per call (host-side structs, microseconds); the algorithm cuBLASLt's heuristic picks is
// cached per (shape, dtypes, epilogue, alignment), so the heuristic runs once per shape.
#include "cuda/blas.h"

#include <climits>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/cublaslt_handles.h"

namespace mixpar::cuda {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default:
      throw std::invalid_argument("gemm: dtype " + std::string(dtype_name(t)) +
                                  " is not one of f32, f16, bf16");
  }
}

cublasComputeType_t compute_type(const GemmCall& c) {
  return c.in_type == DType::kF32 && c.math == MathMode::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                : CUBLAS_COMPUTE_32F;
}

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

int to_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(v) +
                                " does not fit cuBLAS's int");
  }
  return static_cast<int>(v);
}

void check_call(const GemmCall& c) {
  if (c.out_type != c.in_type && c.out_type != DType::kF32) {
    throw std::invalid_argument("gemm: output dtype must be the inputs' or f32");
  }
  cuda_type(c.in_type);
  if (c.batch < 1) throw std::invalid_argument("gemm: batch must be >= 1");
}

// The largest power of two (up to 256) dividing every pointer the call hands to cuBLASLt: the
// heuristic's choice depends on it, so it is part of the cache key.
std::size_t common_alignment(const GemmCall& c) {
  std::uintptr_t bits = 256;
  for (const void* p : {c.a, c.b, static_cast<const void*>(c.out), c.bias,
                        static_cast<const void*>(c.bias_grad), static_cast<const void*>(c.aux)}) {
    if (p != nullptr) bits |= reinterpret_cast<std::uintptr_t>(p);
  }
  return static_cast<std::size_t>(bits & (~bits + 1));  // lowest set bit
}

using lt::Layout;
using lt::MatmulDesc;
using lt::Preference;
using lt::set_attr;

Layout make_layout(DType t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return lt::make_layout(cuda_type(t), rows, cols, ld);
}

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGeluBGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case Epilogue::kBiasGradOfB: return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The epilogue's pointers, as cuBLASLt wants them; throws when the call lacks one.
void set_epilogue(cublasLtMatmulDesc_t d, const GemmCall& c, const ColumnMajorGemm& g) {
  set_attr(d, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(c.epilogue));
  const bool needs_bias = c.epilogue == Epilogue::kBias || c.epilogue == Epilogue::kGeluAuxBias;
  const bool needs_grad =
      c.epilogue == Epilogue::kDGeluBGrad || c.epilogue == Epilogue::kBiasGradOfB;
  const bool needs_aux =
      c.epilogue == Epilogue::kGeluAuxBias || c.epilogue == Epilogue::kDGeluBGrad;
  if ((needs_bias && !c.bias) || (needs_grad && !c.bias_grad) || (needs_aux && !c.aux)) {
    throw std::invalid_argument("gemm_lt: the epilogue's bias, bias_grad or aux pointer is null");
  }
  if (needs_bias) set_attr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  if (needs_grad) set_attr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias_grad);
  if (needs_aux) {
    set_attr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
    set_attr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ld_out);  // aux is laid out like out
  }
}

std::string cache_key(const GemmCall& c, const ColumnMajorGemm& g) {
  std::string k;
  for (std::int64_t v : {g.m, g.n, g.k, g.ld_first, g.ld_second, g.ld_out}) {
    k += std::to_string(v) + ",";
  }
  k += std::to_string(g.trans_first) + std::to_string(g.trans_second) + "," +
       std::to_string(static_cast<int>(c.in_type)) + std::to_string(static_cast<int>(c.out_type)) +
       std::to_string(static_cast<int>(c.math)) + std::to_string(static_cast<int>(c.epilogue)) +
       "," + std::to_string(c.beta != 0.0f) + "," + std::to_string(common_alignment(c));
  return k;
}

// The status with which cuBLASLt says "not this combination": the caller falls back. Any
// other failure (INVALID_VALUE: null or conflicting arguments) is a bug and throws.
bool unsupported(cublasStatus_t s) { return s == CUBLAS_STATUS_NOT_SUPPORTED; }

std::string describe(const GemmCall& c, const ColumnMajorGemm& g) {
  return "m " + std::to_string(g.m) + ", n " + std::to_string(g.n) + ", k " +
         std::to_string(g.k) + ", " + std::string(dtype_name(c.in_type)) + " -> " +
         std::string(dtype_name(c.out_type)) + ", alignment " +
         std::to_string(common_alignment(c)) + " B";
}

}  // namespace

Blas::Blas(cudaStream_t stream) : stream_(stream) {
  MIXPAR_CUBLAS_CHECK(cublasCreate(&handle_));
  MIXPAR_CUBLASLT_CHECK(cublasLtCreate(&lt_));
  workspace_ = DeviceTensor::empty({static_cast<std::int64_t>(kWorkspaceBytes)}, DType::kE4M3,
                                   MemCategory::kOther);  // 1-byte elements: raw bytes
  bind_stream_and_workspace();
}

// cublasSetStream resets the handle's workspace to cuBLAS's own pool (cuBLAS documentation,
// cublasSetStream), so the stream goes first and our workspace after it, every time: otherwise
// cuBLAS allocates behind the caching allocator and the ledger.
void Blas::bind_stream_and_workspace() {
  MIXPAR_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
  MIXPAR_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), kWorkspaceBytes));
}

Blas::~Blas() {
  if (lt_) cublasLtDestroy(lt_);
  if (handle_) cublasDestroy(handle_);
}

void Blas::set_stream(cudaStream_t stream) {
  stream_ = stream;
  bind_stream_and_workspace();
}

void Blas::gemm(const GemmCall& c) {
  check_call(c);
  if (c.epilogue != Epilogue::kNone) {
    throw std::invalid_argument("Blas::gemm: epilogues need gemm_lt");
  }
  const ColumnMajorGemm g = to_column_major(c.shape);
  if (g.m == 0 || g.n == 0) return;
  // The first operand is the row-major b, the second the row-major a (gemm_args.h).
  MIXPAR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle_, op(g.trans_first), op(g.trans_second), to_int(g.m, "m"), to_int(g.n, "n"),
      to_int(g.k, "k"), &c.alpha, c.b, cuda_type(c.in_type), to_int(g.ld_first, "ldb"),
      c.stride_b, c.a, cuda_type(c.in_type), to_int(g.ld_second, "lda"), c.stride_a, &c.beta,
      c.out, cuda_type(c.out_type), to_int(g.ld_out, "ldc"), c.stride_out,
      to_int(c.batch, "batch"), compute_type(c), CUBLAS_GEMM_DEFAULT));
}

bool Blas::gemm_lt(const GemmCall& c) {
  check_call(c);
  if (c.batch != 1) throw std::invalid_argument("Blas::gemm_lt: batch must be 1");
  const ColumnMajorGemm g = to_column_major(c.shape);
  if (g.m == 0 || g.n == 0 || g.k == 0) return false;  // nothing for an epilogue to fuse into
  cublasLtMatmulDesc_t raw = nullptr;
  MIXPAR_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&raw, compute_type(c), CUDA_R_32F));
  MatmulDesc desc(raw);
  set_attr(raw, CUBLASLT_MATMUL_DESC_TRANSA, op(g.trans_first));
  set_attr(raw, CUBLASLT_MATMUL_DESC_TRANSB, op(g.trans_second));
  set_epilogue(raw, c, g);
  const Layout la = make_layout(c.in_type, g.first_rows, g.first_cols, g.ld_first);
  const Layout lb = make_layout(c.in_type, g.second_rows, g.second_cols, g.ld_second);
  const Layout lc = make_layout(c.out_type, g.m, g.n, g.ld_out);

  CachedAlgo& cached = algo_cache_[cache_key(c, g)];
  if (!cached.tried) {
    cached.tried = true;
    cublasLtMatmulPreference_t pref_raw = nullptr;
    MIXPAR_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    const Preference pref(pref_raw);
    const std::size_t ws = kWorkspaceBytes;
    MIXPAR_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt_, raw, la.get(), lb.get(), lc.get(),
                                                            lc.get(), pref_raw, 1, &result,
                                                            &returned);
    if (!unsupported(s)) MIXPAR_CUBLASLT_CHECK(s);
    cached.found = s == CUBLAS_STATUS_SUCCESS && returned > 0;
    if (cached.found) {
      cached.algo = result.algo;
    } else {
      cached.why = "the heuristic returned " +
                   std::string(s == CUBLAS_STATUS_SUCCESS ? "no algorithm (CUBLAS_STATUS_SUCCESS)"
                                                          : cublasGetStatusName(s));
    }
  }
  if (!cached.found) return decline(c, g, cached.why);
  const cublasStatus_t s =
      cublasLtMatmul(lt_, raw, &c.alpha, c.b, la.get(), c.a, lb.get(), &c.beta, c.out, lc.get(),
                     c.out, lc.get(), &cached.algo, workspace_.data(), kWorkspaceBytes, stream_);
  if (unsupported(s)) {
    // Rejected before anything ran: this key is not tried again.
    cached.found = false;
    cached.why = std::string("cublasLtMatmul returned ") + cublasGetStatusName(s);
    return decline(c, g, cached.why);
  }
  MIXPAR_CUBLASLT_CHECK(s);
  epilogue_stats_.on_fused(c.epilogue);
  return true;
}

bool Blas::decline(const GemmCall& c, const ColumnMajorGemm& g, const std::string& why) {
  const std::string what = describe(c, g) + ": " + why;
  if (epilogue_stats_.on_declined(c.epilogue, what)) {
    std::fprintf(stderr,
                 "mixpar cuda: cuBLASLt declined the %s epilogue (%s); the unfused path runs "
                 "instead (further declines are counted, not printed)\n",
                 epilogue_name(c.epilogue), what.c_str());
  }
  return false;
}

void matmul(Blas& blas, const DeviceTensor& a, const DeviceTensor& b, DeviceTensor& out,
            bool trans_a, bool trans_b, float alpha, float beta, MathMode math) {
  if (a.ndim() != 2 || b.ndim() != 2 || out.ndim() != 2) {
    throw std::invalid_argument("cuda::matmul: a " + shape_str(a.shape()) + ", b " +
                                shape_str(b.shape()) + ", out " + shape_str(out.shape()) +
                                " must all be 2-D");
  }
  const std::int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const std::int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  if (K != Kb || out.dim(0) != M || out.dim(1) != N || a.dtype() != b.dtype()) {
    throw std::invalid_argument("cuda::matmul: op(a) " + std::to_string(M) + "x" +
                                std::to_string(K) + ", op(b) " + std::to_string(Kb) + "x" +
                                std::to_string(N) + ", out " + shape_str(out.shape()) +
                                " (a and b of one dtype)");
  }
  GemmCall c = gemm_call({M, N, K, trans_a, trans_b, 0, 0, 0}, a, b, out);
  c.alpha = alpha;
  c.beta = beta;
  c.math = math;
  blas.gemm(c);
}

}  // namespace mixpar::cuda
