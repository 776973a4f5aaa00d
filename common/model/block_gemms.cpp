// GemmSite: a linear layer's three products through the block's GEMM seam when it has one
// (--dtype fp8: chapter 3's FP8 GEMMs, ch03_master_weights/fp8_linear.h), else common/ops'.
#include "model/block_gemms.h"

#include "ops/linear.h"
#include "ops/matmul.h"

namespace mixpar {

void GemmSite::forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) const {
  if (gemms == nullptr) {
    ops::linear_forward(x, w, b, y);
  } else {
    gemms->forward(layer, which, x, w, b != nullptr ? *b : Tensor(), y);
  }
}

void GemmSite::backward_input(const Tensor& dy, const Tensor& w, Tensor& dx) const {
  if (gemms == nullptr) {
    ops::matmul(dy, w, dx, false, true);
  } else {
    gemms->backward_input(layer, which, dy, w, dx);
  }
}

void GemmSite::backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                        Tensor& dw, Tensor* db, bool accumulate) const {
  if (gemms == nullptr) {
    ops::linear_backward(x, w, dy, dx, dw, db, accumulate);
    return;
  }
  if (dx != nullptr) gemms->backward_input(layer, which, dy, w, *dx);
  gemms->backward_weight(layer, which, x, dy, dw, accumulate);
  if (db != nullptr) ops::bias_grad(dy, *db, accumulate);
}

}  // namespace mixpar
