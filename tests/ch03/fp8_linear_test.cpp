// FP8 linear layers (ch03_master_weights/fp8_linear.h) through the GPT blocks' GEMM seam: each
// product equals the exact reference of the operands cast as its recipe casts them (the bias
// added, one rounding into bf16), the weight-gradient GEMM tiles along the tokens, delayed
// scaling updates after the step and its state round-trips, and a GPT trained through the seam
// stays close to bf16 without being it.
#include "ch03_master_weights/fp8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "numerics/formats.h"
#include "util/errors.h"
#include "fp8_test_util.h"

namespace mixpar::fp8 {
namespace {

using test_util::normal;

std::vector<float> transposed(const std::vector<float>& m, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(m.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) t[std::size_t(c * rows + r)] = m[std::size_t(r * cols + c)];
  }
  return t;
}

Tensor bf16(const std::vector<float>& v, Shape s) { return Tensor::from_floats(v, s, DType::kBF16); }

// The operand cast the way `r` casts `role` (weights in 128x128 blocks under blockwise).
Fp8Matrix cast_like(Recipe r, const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                    bool grad, bool weight) {
  if (r == Recipe::kBlockwise) return quantize_current(x, rows, cols, DType::kE4M3, weight ? 128 : 1, 128);
  // Delayed starts from scale 1 (no history yet), tensorwise from the tensor's amax.
  const DType f = grad ? DType::kE5M2 : DType::kE4M3;
  if (r == Recipe::kDelayed) return quantize_with_scale(x, rows, cols, f, 1.0f);
  return quantize_current(x, rows, cols, f, rows, cols);
}

void expect_equal_bf16(const Tensor& got, const std::vector<float>& want32) {
  const std::vector<float> g = got.to_floats();
  ASSERT_EQ(g.size(), want32.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i], round_to(DType::kBF16, want32[i])) << "element " << i;
  }
}

TEST(Fp8Linear, EachProductIsTheExactGemmOfItsRecipesCastOperands) {
  const std::int64_t n = 160, in = 136, out = 200;  // edge tiles on every dimension
  const std::vector<float> x = normal(std::size_t(n * in), 1);
  const std::vector<float> w = normal(std::size_t(in * out), 2, 0.05f);
  const std::vector<float> b = normal(std::size_t(out), 3, 0.1f);
  const std::vector<float> dy = normal(std::size_t(n * out), 4, 1e-3f);
  for (Recipe r : {Recipe::kDelayed, Recipe::kTensorwise, Recipe::kBlockwise}) {
    SCOPED_TRACE(std::string(name(r)));
    Fp8BlockGemms g({r, 4, 0}, 1);
    g.begin_step();
    const GemmConfig gc = recipe_gemm(r);
    Tensor y = Tensor::zeros({n, out}, DType::kBF16);
    g.forward(0, BlockGemms::Linear::kFc, bf16(x, {n, in}), bf16(w, {in, out}), bf16(b, {out}), y);
    // The reference reads the bf16 operands, as the seam does.
    const std::vector<float> xb = bf16(x, {n, in}).to_floats(), wb = bf16(w, {in, out}).to_floats();
    const std::vector<float> bb = bf16(b, {out}).to_floats(), dyb = bf16(dy, {n, out}).to_floats();
    std::vector<float> want = gemm_reference(cast_like(r, xb, n, in, false, false),
                                             cast_like(r, transposed(wb, in, out), out, in, false, true), gc);
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < out; ++j) want[std::size_t(i * out + j)] += bb[std::size_t(j)];
    }
    expect_equal_bf16(y, want);
    // dx = dy w^T: the gradient cast as a gradient (E5M2, or E4M3 tiles), w as a weight.
    Tensor dx = Tensor::zeros({n, in}, DType::kBF16);
    g.backward_input(0, BlockGemms::Linear::kFc, bf16(dy, {n, out}), bf16(w, {in, out}), dx);
    expect_equal_bf16(dx, gemm_reference(cast_like(r, dyb, n, out, true, false),
                                         cast_like(r, wb, in, out, false, true), gc));
    // dw = x^T dy: K is the tokens; blockwise tiles both along them (128x1 of the activations).
    Tensor dw = Tensor::zeros({in, out}, DType::kBF16);
    g.backward_weight(0, BlockGemms::Linear::kFc, bf16(x, {n, in}), bf16(dy, {n, out}), dw, false);
    expect_equal_bf16(dw, gemm_reference(cast_like(r, transposed(xb, n, in), in, n, false, false),
                                         cast_like(r, transposed(dyb, n, out), out, n, true, false), gc));
    const Fp8StepStats s = g.end_step();
    EXPECT_EQ(s.input.values, 2 * n * in);  // forward and weight gradient
    EXPECT_EQ(s.weight.values, 2 * in * out);
    EXPECT_EQ(s.grad.values, 2 * n * out);
  }
}

TEST(Fp8Linear, DelayedScalingUpdatesAfterTheStepAndItsStateRoundTrips) {
  Fp8BlockGemms g({Recipe::kDelayed, 3, 1}, 2);
  g.begin_step();
  const std::vector<float> x = normal(64 * 32, 5);
  Tensor y = Tensor::zeros({64, 16}, DType::kBF16);
  const Tensor w = bf16(normal(32 * 16, 6, 0.1f), {32, 16}), b = bf16(std::vector<float>(16, 0), {16});
  g.forward(1, BlockGemms::Linear::kAttnProj, bf16(x, {64, 32}), w, b, y);
  const float amax = fp8::amax(bf16(x, {64, 32}).to_floats());
  EXPECT_EQ(g.pending_amaxes()[std::size_t((1 * 4 + 1) * 3)], amax);
  g.end_step();
  const std::vector<float> st = g.state();
  ASSERT_EQ(st.size(), std::size_t(2 * 4 * 3 * (3 + 2)));
  // Layer 1's attn.c_proj input: history [0, 0, amax], scale 448 / amax / 2^1.
  const std::size_t at = std::size_t((1 * 4 + 1) * 3) * 5;
  EXPECT_EQ(st[at + 2], amax);
  EXPECT_EQ(st[at + 3], 448.0f / amax / 2.0f);
  Fp8BlockGemms r({Recipe::kDelayed, 3, 1}, 2);
  r.restore(st);
  EXPECT_EQ(r.state(), st);
  Fp8BlockGemms other({Recipe::kDelayed, 4, 1}, 2);
  EXPECT_THROW(other.restore(st), InputError);
  EXPECT_TRUE(Fp8BlockGemms({Recipe::kTensorwise, 3, 0}, 2).state().empty());
  // A cast between steps (evaluation) uses the scale and records nothing.
  Tensor y2 = Tensor::zeros({64, 16}, DType::kBF16);
  const std::vector<float> big(64 * 32, 1000.0f);
  r.forward(0, BlockGemms::Linear::kFc, bf16(big, {64, 32}), w, b, y2);
  EXPECT_EQ(r.state(), st);
  EXPECT_EQ(r.end_step().input.values, 0);
}

TEST(Fp8Linear, AGptThroughTheSeamStaysCloseToBf16WithoutBeingIt) {
  const GptConfig cfg{2, 2, 32, 16, 64};
  std::vector<std::int32_t> tokens(4 * 16), targets(4 * 16);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = std::int32_t((i * 7 + 3) % 64);
    targets[i] = std::int32_t((i * 5 + 1) % 64);
  }
  GptOptions o;
  o.dtype = DType::kBF16;
  GptModel plain(cfg, o);
  const double want = plain.forward(tokens, targets, 4, 16);
  for (Recipe r : {Recipe::kDelayed, Recipe::kTensorwise, Recipe::kBlockwise}) {
    Fp8BlockGemms g({r, 4, 0}, cfg.n_layer);
    o.gemms = &g;
    GptModel m(cfg, o);
    g.begin_step();
    const double got = m.forward(tokens, targets, 4, 16);
    m.backward();
    EXPECT_NE(got, want) << name(r);
    EXPECT_LT(std::fabs(got - want) / want, 0.01) << name(r) << ": " << got << " vs " << want;
    EXPECT_GT(g.end_step().grad.values, 0) << name(r);
  }
}

}  // namespace
}  // namespace mixpar::fp8
