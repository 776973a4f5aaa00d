// The linear layers: each tries its cuBLASLt epilogue once per call when fusion is on, and
// runs the plain GEMM followed by the matching kernel when cuBLASLt declines (dtype, alignment,
// or a leading dimension the epilogue cannot take).
#include "cuda/linear.h"

#include <stdexcept>
#include <string>

#include "cuda/kernels.h"

namespace mixpar::cuda {

namespace {

void check_linear(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y,
                  const char* op) {
  if (x.ndim() != 2 || w.ndim() != 2 || y.ndim() != 2 || x.dim(1) != w.dim(0) ||
      y.dim(0) != x.dim(0) || y.dim(1) != w.dim(1) || x.dtype() != w.dtype() ||
      y.dtype() != x.dtype()) {
    throw std::invalid_argument(std::string(op) + ": x " + shape_str(x.shape()) + ", w " +
                                shape_str(w.shape()) + ", y " + shape_str(y.shape()) +
                                " (x [R, in], w [in, out], y [R, out], one dtype)");
  }
}

void check_vector(const DeviceTensor& v, std::int64_t n, DType dt, const char* op,
                  const char* name) {
  if (v.numel() != n || v.dtype() != dt) {
    throw std::invalid_argument(std::string(op) + ": '" + name + "' must have " +
                                std::to_string(n) + " elements of " + std::string(dtype_name(dt)));
  }
}

GemmCall make_call(const RowMajorGemm& shape, const DeviceTensor& a, const DeviceTensor& b,
                   DeviceTensor& out, const LinearOptions& o) {
  GemmCall c = gemm_call(shape, a, b, out);
  c.math = o.math;
  return c;
}

// cuBLASLt wants the leading dimension of an aux matrix to be a multiple of 8.
bool aux_ld_ok(std::int64_t ld) { return ld % 8 == 0; }

}  // namespace

void linear_forward(Blas& blas, const DeviceTensor& x, const DeviceTensor& w,
                    const DeviceTensor* b, DeviceTensor& y, const LinearOptions& o) {
  const char* op = "cuda::linear_forward";
  check_linear(x, w, y, op);
  if (b) check_vector(*b, w.dim(1), y.dtype(), op, "b");
  GemmCall c = make_call({x.dim(0), w.dim(1), x.dim(1)}, x, w, y, o);
  if (b && o.fuse) {
    c.epilogue = Epilogue::kBias;
    c.bias = b->data();
    if (blas.gemm_lt(c)) return;
    c.epilogue = Epilogue::kNone;
    c.bias = nullptr;
  }
  blas.gemm(c);
  if (b) bias_add(y, *b, blas.stream());
}

void linear_gelu_forward(Blas& blas, const DeviceTensor& x, const DeviceTensor& w,
                         const DeviceTensor& b, DeviceTensor& pre, DeviceTensor& out,
                         const LinearOptions& o) {
  const char* op = "cuda::linear_gelu_forward";
  check_linear(x, w, pre, op);
  check_linear(x, w, out, op);
  check_vector(b, w.dim(1), out.dtype(), op, "b");
  if (o.fuse && aux_ld_ok(w.dim(1))) {
    GemmCall c = make_call({x.dim(0), w.dim(1), x.dim(1)}, x, w, out, o);
    c.epilogue = Epilogue::kGeluAuxBias;
    c.bias = b.data();
    c.aux = pre.data();
    if (blas.gemm_lt(c)) return;
  }
  linear_forward(blas, x, w, &b, pre, o);
  gelu_forward(pre, out, blas.stream());
}

void linear_backward(Blas& blas, const DeviceTensor& x, const DeviceTensor& w,
                     const DeviceTensor& dy, DeviceTensor* dx, DeviceTensor& dw, DeviceTensor* db,
                     bool accumulate, const LinearOptions& o) {
  const char* op = "cuda::linear_backward";
  check_linear(x, w, dy, op);
  if (dx) check_linear(*dx, w, dy, op);  // dx is shaped like x
  if (dw.shape() != w.shape() || dw.dtype() != w.dtype()) {
    throw std::invalid_argument(std::string(op) + ": dw must match w");
  }
  if (db) check_vector(*db, w.dim(1), dy.dtype(), op, "db");
  if (dx) matmul(blas, dy, w, *dx, false, true, 1.0f, 0.0f, o.math);  // dy w^T
  // dw [in, out] (+)= x^T dy
  GemmCall c = make_call({w.dim(0), w.dim(1), x.dim(0), true, false}, x, dy, dw, o);
  c.beta = accumulate ? 1.0f : 0.0f;
  if (db && o.fuse && !accumulate) {
    c.epilogue = Epilogue::kBiasGradOfB;
    c.bias_grad = db->data();
    if (blas.gemm_lt(c)) return;
    c.epilogue = Epilogue::kNone;
    c.bias_grad = nullptr;
  }
  blas.gemm(c);
  if (db) bias_grad(dy, *db, accumulate, blas.stream());
}

void linear_backward_input_dgelu(Blas& blas, const DeviceTensor& w, const DeviceTensor& dy,
                                 const DeviceTensor& pre, DeviceTensor& dpre,
                                 DeviceTensor* db_pre, bool accumulate, const LinearOptions& o) {
  const char* op = "cuda::linear_backward_input_dgelu";
  check_linear(pre, w, dy, op);
  check_linear(dpre, w, dy, op);
  if (db_pre) check_vector(*db_pre, w.dim(0), dy.dtype(), op, "db_pre");
  if (o.fuse && db_pre && !accumulate && aux_ld_ok(w.dim(0))) {
    // dpre [R, in] = dy [R, out] . w^T, then gelu'(pre) and the column sums in the epilogue.
    GemmCall c = make_call({dy.dim(0), w.dim(0), w.dim(1), false, true}, dy, w, dpre, o);
    c.epilogue = Epilogue::kDGeluBGrad;
    c.aux = pre.data();  // read, not written, by this epilogue
    c.bias_grad = db_pre->data();
    if (blas.gemm_lt(c)) return;
  }
  matmul(blas, dy, w, dpre, false, true, 1.0f, 0.0f, o.math);
  gelu_backward(pre, dpre, dpre, blas.stream());
  if (db_pre) bias_grad(dpre, *db_pre, accumulate, blas.stream());
}

}  // namespace mixpar::cuda
