// Linear layers in GPT-2's Conv1D layout (ops::linear_forward / linear_backward: y = x W + b,
// W [in, out]) on the GPU, with cuBLASLt's fused epilogues where it offers them and the
// unfused GEMM + kernel sequence otherwise (or when options.fuse is false). Both paths compute
// the same function and are tested against the same CPU reference.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/blas.h"
#include "cuda/device_tensor.h"

namespace mixpar::cuda {

struct LinearOptions {
  bool fuse = true;                 // try the cuBLASLt epilogues first
  MathMode math = MathMode::kFp32;  // f32 operands: kTf32 runs them on the tensor cores
};

// ops::linear_forward: y [R, out] = x [R, in] . w [in, out] + b [out] (b may be null).
void linear_forward(Blas& blas, const DeviceTensor& x, const DeviceTensor& w,
                    const DeviceTensor* b, DeviceTensor& y, const LinearOptions& options = {});

// The MLP's first layer: pre [R, out] = x w + b (the GELU input backward needs) and
// out = gelu(pre) (layers::gelu_forward). Fused: one GEMM with CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
// which applies GELU to the FP32 sum before rounding; unfused: the GELU of the rounded pre.
void linear_gelu_forward(Blas& blas, const DeviceTensor& x, const DeviceTensor& w,
                         const DeviceTensor& b, DeviceTensor& pre, DeviceTensor& out,
                         const LinearOptions& options = {});

// ops::linear_backward: dx [R, in] = dy w^T (skipped when null), dw (+)= x^T dy, db (+)=
// colsum(dy) (skipped when null). Fused (accumulate false): db comes out of the dW GEMM
// (CUBLASLT_EPILOGUE_BGRADA); when accumulating, a deterministic column-sum kernel adds it.
void linear_backward(Blas& blas, const DeviceTensor& x, const DeviceTensor& w,
                     const DeviceTensor& dy, DeviceTensor* dx, DeviceTensor& dw, DeviceTensor* db,
                     bool accumulate, const LinearOptions& options = {});

// The input gradient of a linear layer whose input went through GELU, fused with the GELU
// backward and with the bias gradient of the layer before the GELU:
//   dpre [R, in] = gelu'(pre) * (dy . w^T)      (layers::gelu_backward of linear_backward's dx)
//   db_pre [in] (+)= colsum(dpre)               (ops::bias_grad; skipped when null)
// Fused (accumulate false): CUBLASLT_EPILOGUE_DGELU_BGRAD, no rounding of dy w^T in between.
void linear_backward_input_dgelu(Blas& blas, const DeviceTensor& w, const DeviceTensor& dy,
                                 const DeviceTensor& pre, DeviceTensor& dpre,
                                 DeviceTensor* db_pre, bool accumulate,
                                 const LinearOptions& options = {});

}  // namespace mixpar::cuda
