// ReLU and tanh-GELU forward/backward as chunked elementwise kernels (ops/chunked.h).
#include "ops/activations.h"

#include <cmath>
#include <numbers>

#include "ops/checks.h"
#include "ops/chunked.h"

namespace mixpar::ops {

std::string_view activation_name(Activation a) {
  return a == Activation::kRelu ? "relu" : "gelu";
}

namespace {

// 0.5 (1 + tanh u) = sigmoid(2u): the tanh form evaluated with one exp (libm's tanh costs
// several times more), and 1 - tanh^2 u = 4 s (1 - s) with s = sigmoid(2u), so the backward
// has no cancellation. exp is only ever taken of -2|u| <= 0: no overflow for any x.
template <class C> struct Sigmoid2u {
  C s, one_minus_s;
};
template <class C> Sigmoid2u<C> gelu_sigmoid(C x) {
  const C s2pi = std::sqrt(C(2) / std::numbers::pi_v<C>);
  const C u = s2pi * (x + C(0.044715) * x * x * x);
  const C e = std::exp(C(-2) * std::fabs(u));  // in (0, 1]
  const C big = C(1) / (C(1) + e), small = e * big;
  return u >= 0 ? Sigmoid2u<C>{big, small} : Sigmoid2u<C>{small, big};
}

template <class C> C gelu(C x) { return x * gelu_sigmoid(x).s; }  // 0.5 x (1 + tanh u)

template <class C> C gelu_grad(C x) {
  const C s2pi = std::sqrt(C(2) / std::numbers::pi_v<C>);
  const C du_dx = s2pi * (C(1) + C(3) * C(0.044715) * x * x);
  const Sigmoid2u<C> g = gelu_sigmoid(x);
  // 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx  =  s + 2 x s (1 - s) du/dx. In the far
  // tails s (1 - s) is exactly 0 while x du/dx may be inf (x^3 overflows): the term is 0.
  const C tail = g.s * g.one_minus_s;
  return tail == C(0) ? g.s : g.s + C(2) * x * tail * du_dx;
}

// y[i] = f(x[i]) for any dtypes; y may be x.
template <class F> void unary(const char* op, const Tensor& x, Tensor& y, F f) {
  check_operand(x, op, "x");
  check_operand(y, op, "y");
  check_same_numel(y, x, op, "y", "x");
  with_compute_type(any_f64({&x, &y}), [&](auto tag) {
    using C = decltype(tag);
    ChunkReader<C> rx;
    ChunkWriter<C> wy;
    for_chunks(x.numel(), [&](std::int64_t begin, std::int64_t n) {
      const C* px = rx.read(x, begin, n);
      C* py = wy.open(y, begin, n);
      for (std::int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
      wy.commit();
    });
  });
}

// dx[i] = f(x[i], dy[i]); dx may be dy.
template <class F>
void unary_backward(const char* op, const Tensor& x, const Tensor& dy, Tensor& dx, F df) {
  binary_elementwise(op, {"x", "dy", "dx"}, x, dy, dx, df);
}

}  // namespace

// As PyTorch: NaN passes through forward (clamp_min) and backward (threshold_backward selects
// dy unless x <= 0), and the backward selects rather than multiplies, so an inf in dy where
// x <= 0 gives 0, not inf * 0 = NaN. A NaN must never be hidden from the overflow check.
void relu_forward(const Tensor& x, Tensor& y) {
  unary("relu_forward", x, y, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
}

void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  unary_backward("relu_backward", x, dy, dx,
                 [](auto v, auto g) { return v <= 0 ? decltype(g)(0) : g; });
}

void gelu_forward(const Tensor& x, Tensor& y) {
  unary("gelu_forward", x, y, [](auto v) { return gelu(v); });
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  unary_backward("gelu_backward", x, dy, dx, [](auto v, auto g) { return g * gelu_grad(v); });
}

void activation_forward(Activation a, const Tensor& x, Tensor& y) {
  if (a == Activation::kRelu) relu_forward(x, y);
  else gelu_forward(x, y);
}

void activation_backward(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx) {
  if (a == Activation::kRelu) relu_backward(x, dy, dx);
  else gelu_backward(x, dy, dx);
}

}  // namespace mixpar::ops
