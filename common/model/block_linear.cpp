// DenseLinear: a block's linear layer on one rank, common/ops' (or the seam's) y = x w + b.
#include "model/block_linear.h"

namespace mixpar {

void DenseLinear::forward(const Tensor& x, Tensor& y) const { p_.site.forward(x, p_.w, &p_.b, y); }

void DenseLinear::backward_input(const Tensor& dy, Tensor& dx) const {
  p_.site.backward_input(dy, p_.w, dx);
}

void DenseLinear::backward_weight(const Tensor& x, const Tensor& dy, bool accumulate) {
  p_.site.backward(x, p_.w, dy, nullptr, p_.dw, &p_.db, accumulate);  // dx: backward_input's
}

void DenseLinear::rebind(const Tensor& w, const Tensor& b) {
  p_.w = w;
  p_.b = b;
}

}  // namespace mixpar
