// The GPT layers of common/model/layers.h: every backward against central finite differences of
// its own forward in FP64 (h = 1e-6), forwards against independent loops or the scalar ops they
// replace, the sharded forms (a subset of heads, vocabulary slices) against the whole layer,
// and 16-bit tensors computed in FP32 and rounded exactly once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "model/layers.h"
#include "ops/activations.h"
#include "ops/loss.h"
#include "ops_test_util.h"

namespace mixpar {
namespace {

using testing::finite_difference;
using testing::random_tensor;
using testing::to_doubles;
using testing::weighted_sum;

constexpr double kFdTol = 1e-7;  // relative to max(1, |grad|): truncation ~1e-12, rounding ~1e-10

void expect_grad_near(const std::vector<double>& analytic, const std::vector<double>& numeric,
                      const char* what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    ASSERT_NEAR(analytic[i], numeric[i], kFdTol * std::max(1.0, std::fabs(numeric[i])))
        << what << " element " << i;
  }
}

Tensor f64(Shape s) { return Tensor::zeros(std::move(s), DType::kF64); }

// Columns [begin, begin + n) of a [rows, cols] view of t, as a new [rows, n] tensor of t's dtype.
Tensor columns(const Tensor& t, std::int64_t cols, std::int64_t begin, std::int64_t n) {
  const std::vector<float> v = t.to_floats();
  const std::int64_t rows = t.numel() / cols;
  std::vector<float> out;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = begin; c < begin + n; ++c) out.push_back(v[r * cols + c]);
  }
  return Tensor::from_floats(out, {rows, n}, t.dtype());
}

// ---- LayerNorm

TEST(LayerNorm, ForwardNormalisesEachRow) {
  Tensor x = random_tensor({3, 2, 8}, DType::kF64, 1, -2, 5);
  Tensor w = random_tensor({8}, DType::kF64, 2), b = random_tensor({8}, DType::kF64, 3);
  Tensor out = f64({3, 2, 8}), mean = f64({6}), rstd = f64({6});
  layers::layernorm_forward(x, w, b, out, mean, rstd);
  const auto xv = to_doubles(x), wv = to_doubles(w), bv = to_doubles(b), ov = to_doubles(out);
  for (int r = 0; r < 6; ++r) {
    double mu = 0, var = 0;
    for (int c = 0; c < 8; ++c) mu += xv[r * 8 + c] / 8;
    for (int c = 0; c < 8; ++c) var += (xv[r * 8 + c] - mu) * (xv[r * 8 + c] - mu) / 8;
    const double rs = 1 / std::sqrt(var + 1e-5);  // eps in float, as torch's 1e-5 default
    EXPECT_NEAR(to_doubles(mean)[r], mu, 1e-12);
    EXPECT_NEAR(to_doubles(rstd)[r], rs, 1e-9);
    for (int c = 0; c < 8; ++c) {
      EXPECT_NEAR(ov[r * 8 + c], (xv[r * 8 + c] - mu) * rs * wv[c] + bv[c], 1e-9);
    }
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({2, 3, 5}, DType::kF64, 4, -2, 2);
  Tensor w = random_tensor({5}, DType::kF64, 5), b = random_tensor({5}, DType::kF64, 6);
  Tensor out = f64({2, 3, 5}), mean = f64({6}), rstd = f64({6});
  Tensor dout = random_tensor({2, 3, 5}, DType::kF64, 7);
  const auto r = to_doubles(dout);
  auto loss = [&] {
    layers::layernorm_forward(x, w, b, out, mean, rstd);
    return weighted_sum(out, r);
  };
  loss();
  Tensor dx = f64({2, 3, 5}), dw = f64({5}), db = f64({5});
  layers::layernorm_backward(dout, x, w, mean, rstd, dx, dw, db);
  expect_grad_near(to_doubles(dx), finite_difference(x, loss), "dx");
  expect_grad_near(to_doubles(dw), finite_difference(w, loss), "dw");
  expect_grad_near(to_doubles(db), finite_difference(b, loss), "db");
}

TEST(LayerNorm, BackwardAddsIntoDxAndAccumulatesParameterGradients) {
  Tensor x = random_tensor({4, 6}, DType::kF32, 8), w = random_tensor({6}, DType::kF32, 9);
  Tensor b = random_tensor({6}, DType::kF32, 10), dout = random_tensor({4, 6}, DType::kF32, 11);
  Tensor out = Tensor::empty({4, 6}, DType::kF32), mean = Tensor::empty({4}, DType::kF32);
  Tensor rstd = Tensor::empty({4}, DType::kF32);
  layers::layernorm_forward(x, w, b, out, mean, rstd);
  Tensor dx = Tensor::zeros({4, 6}, DType::kF32), dw = Tensor::empty({6}, DType::kF32);
  Tensor db = Tensor::empty({6}, DType::kF32);
  layers::layernorm_backward(dout, x, w, mean, rstd, dx, dw, db);
  const auto dx1 = dx.to_floats(), dw1 = dw.to_floats(), db1 = db.to_floats();
  layers::layernorm_backward(dout, x, w, mean, rstd, dx, dw, db, /*accumulate=*/true);
  for (std::size_t i = 0; i < dx1.size(); ++i) EXPECT_EQ(dx.to_floats()[i], 2 * dx1[i]);
  for (std::size_t i = 0; i < dw1.size(); ++i) {
    EXPECT_EQ(dw.to_floats()[i], 2 * dw1[i]);
    EXPECT_EQ(db.to_floats()[i], 2 * db1[i]);
  }
}

TEST(LayerNorm, Bf16IsTheFp32ResultRoundedOnce) {
  Tensor x = random_tensor({5, 16}, DType::kBF16, 12, -3, 3);
  Tensor w = random_tensor({16}, DType::kBF16, 13), b = random_tensor({16}, DType::kBF16, 14);
  Tensor out16 = Tensor::empty({5, 16}, DType::kBF16), out32 = Tensor::empty({5, 16}, DType::kF32);
  Tensor mean = Tensor::empty({5}, DType::kF32), rstd = Tensor::empty({5}, DType::kF32);
  layers::layernorm_forward(x, w, b, out16, mean, rstd);
  layers::layernorm_forward(x.to(DType::kF32), w.to(DType::kF32), b.to(DType::kF32), out32, mean,
                            rstd);
  EXPECT_EQ(out16.to_floats(), out32.to(DType::kBF16).to_floats());
}

// ---- Attention

// out[b, t, h*hd + e] = sum_{s <= t} softmax_s(q_t . k_s / sqrt(hd)) v_s[e], in plain loops.
std::vector<double> naive_attention(const std::vector<double>& qkv, int B, int T, int H, int hd) {
  const int ch = H * hd;
  std::vector<double> out(static_cast<std::size_t>(B * T * ch));
  auto at = [&](int b, int t, int part, int h, int e) {
    return qkv[((b * T + t) * 3 + part) * ch + h * hd + e];
  };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300, sum = 0;
        for (int u = 0; u <= t; ++u) {
          for (int e = 0; e < hd; ++e)
            s[u] += at(b, t, 0, h, e) * at(b, u, 1, h, e) / std::sqrt(hd);
          mx = std::max(mx, s[u]);
        }
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int e = 0; e < hd; ++e) {
          double o = 0;
          for (int u = 0; u <= t; ++u) o += s[u] / sum * at(b, u, 2, h, e);
          out[(b * T + t) * ch + h * hd + e] = o;
        }
      }
    }
  }
  return out;
}

// 16-bit attention backward runs one head at a time on widened slices (layers_attention.cpp);
// its outputs have the bits of the FP32 backward on the widened tensors, rounded once, for bf16
// and fp16, on one thread (small) and on the OpenMP threads (large enough to split).
TEST(Attention, SixteenBitBackwardHasTheBitsOfTheFp32BackwardRounded) {
  for (const DType dt : {DType::kBF16, DType::kF16}) {
    for (const std::int64_t T : {7, 64}) {
      const std::int64_t B = 2, H = 4, hd = 16;
      const Tensor qkv = random_tensor({B, T, 3 * H * hd}, dt, 40, -2, 2);
      const Tensor dout = random_tensor({B, T, H * hd}, dt, 41);
      const Tensor att = random_tensor({B, H, T, T}, dt, 42, 0, 1);
      Tensor dqkv = Tensor::empty(qkv.shape(), dt), datt = Tensor::empty(att.shape(), dt);
      layers::attention_backward(dout, qkv, att, H, dqkv, datt);
      Tensor dqkv32 = Tensor::empty(qkv.shape(), DType::kF32);
      Tensor datt32 = Tensor::empty(att.shape(), DType::kF32);
      layers::attention_backward(dout.to(DType::kF32), qkv.to(DType::kF32), att.to(DType::kF32), H,
                                 dqkv32, datt32);
      const Tensor want_dqkv = dqkv32.to(dt), want_datt = datt32.to(dt);
      EXPECT_EQ(std::memcmp(dqkv.data(), want_dqkv.data(), dqkv.nbytes()), 0)
          << dtype_name(dt) << " T " << T << ": dqkv";
      EXPECT_EQ(std::memcmp(datt.data(), want_datt.data(), datt.nbytes()), 0)
          << dtype_name(dt) << " T " << T << ": datt";
    }
  }
}

TEST(Attention, ForwardMatchesNaiveLoopsAndKeepsCausalProbabilities) {
  const int B = 2, T = 5, H = 3, hd = 4;
  Tensor qkv = random_tensor({B, T, 3 * H * hd}, DType::kF64, 20, -2, 2);
  Tensor out = f64({B, T, H * hd}), att = f64({B, H, T, T});
  layers::attention_forward(qkv, H, out, att);
  const auto want = naive_attention(to_doubles(qkv), B, T, H, hd), got = to_doubles(out);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  const auto p = to_doubles(att);
  for (int row = 0; row < B * H * T; ++row) {
    const int t = row % T;
    double sum = 0;
    for (int u = 0; u < T; ++u) {
      if (u > t) {
        EXPECT_EQ(p[row * T + u], 0.0) << "above the diagonal";
      }
      sum += p[row * T + u];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 4, H = 2, hd = 3;
  Tensor qkv = random_tensor({B, T, 3 * H * hd}, DType::kF64, 21, -1.5, 1.5);
  Tensor out = f64({B, T, H * hd}), att = f64({B, H, T, T});
  Tensor dout = random_tensor({B, T, H * hd}, DType::kF64, 22);
  const auto r = to_doubles(dout);
  auto loss = [&] {
    layers::attention_forward(qkv, H, out, att);
    return weighted_sum(out, r);
  };
  loss();
  Tensor dqkv = f64({B, T, 3 * H * hd}), datt = f64({B, H, T, T});
  layers::attention_backward(dout, qkv, att, H, dqkv, datt);
  expect_grad_near(to_doubles(dqkv), finite_difference(qkv, loss), "dqkv");
}

// A tensor-parallel rank holding heads [h0, h0 + n) passes [q_r | k_r | v_r]: its columns of
// each third of qkv. Its output must be exactly those heads' columns of the full output.
TEST(Attention, SubsetOfHeadsOnItsQkvSliceMatchesTheFullLayer) {
  const int B = 2, T = 6, H = 4, hd = 8, ch = H * hd;
  Tensor qkv = random_tensor({B, T, 3 * ch}, DType::kF32, 23, -2, 2);
  Tensor out = Tensor::empty({B, T, ch}, DType::kF32),
         att = Tensor::empty({B, H, T, T}, DType::kF32);
  layers::attention_forward(qkv, H, out, att);
  Tensor dout = random_tensor({B, T, ch}, DType::kF32, 24);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::kF32), datt = att.clone();
  layers::attention_backward(dout, qkv, att, H, dqkv, datt);
  for (int rank = 0; rank < 2; ++rank) {
    const int c0 = rank * ch / 2, n = ch / 2;
    std::vector<float> slice;  // rows of [q_r | k_r | v_r]
    const auto q = columns(qkv, 3 * ch, c0, n).to_floats();
    const auto k = columns(qkv, 3 * ch, ch + c0, n).to_floats();
    const auto v = columns(qkv, 3 * ch, 2 * ch + c0, n).to_floats();
    for (int r = 0; r < B * T; ++r) {
      for (const auto* part : {&q, &k, &v})
        slice.insert(slice.end(), part->begin() + r * n, part->begin() + (r + 1) * n);
    }
    Tensor qkv_r = Tensor::from_floats(slice, {B, T, 3 * n});
    Tensor out_r = Tensor::empty({B, T, n}, DType::kF32),
           att_r = Tensor::empty({B, H / 2, T, T}, DType::kF32);
    layers::attention_forward(qkv_r, H / 2, out_r, att_r);
    EXPECT_EQ(out_r.to_floats(), columns(out, ch, c0, n).to_floats()) << "rank " << rank;
    Tensor dout_r = columns(dout, ch, c0, n).view({B, T, n}),
           dqkv_r = Tensor::empty(qkv_r.shape(), DType::kF32);
    Tensor datt_r = att_r.clone();
    layers::attention_backward(dout_r, qkv_r, att_r, H / 2, dqkv_r, datt_r);
    for (int part = 0; part < 3; ++part) {
      EXPECT_EQ(columns(dqkv_r, 3 * n, part * n, n).to_floats(),
                columns(dqkv, 3 * ch, part * ch + c0, n).to_floats())
          << "rank " << rank << " part " << part;
    }
  }
}

TEST(Attention, RejectsChannelsThatDoNotSplitIntoHeads) {
  Tensor qkv = Tensor::zeros({1, 2, 3 * 10}, DType::kF32),
         out = Tensor::zeros({1, 2, 10}, DType::kF32);
  Tensor att = Tensor::zeros({1, 3, 2, 2}, DType::kF32);
  EXPECT_THROW(layers::attention_forward(qkv, 3, out, att), std::invalid_argument);
}

// ---- GELU

TEST(LayerGelu, MatchesTheScalarOpsReferenceToFloatPrecision) {
  Tensor x = random_tensor({40000}, DType::kF32, 30, -8, 8);  // several threaded blocks
  Tensor dy = random_tensor({40000}, DType::kF32, 31);
  Tensor y = x.clone(), y_ref = x.clone(), dx = x.clone(), dx_ref = x.clone();
  layers::gelu_forward(x, y);
  ops::gelu_forward(x, y_ref);
  layers::gelu_backward(x, dy, dx);
  ops::gelu_backward(x, dy, dx_ref);
  const auto a = y.to_floats(), b = y_ref.to_floats(), da = dx.to_floats(), db = dx_ref.to_floats();
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Same formula with Eigen's vectorised exp (within 1 ulp of libm's): both lie within
    // 2e-7 of the f64 value relative to max(1, |value|), so they differ by less than 1e-6.
    ASSERT_NEAR(a[i], b[i], 1e-6f * std::max(1.0f, std::fabs(b[i]))) << "y at " << i;
    ASSERT_NEAR(da[i], db[i], 1e-6f * std::max(1.0f, std::fabs(db[i]))) << "dx at " << i;
  }
}

TEST(LayerGelu, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({3, 7}, DType::kF64, 32, -4, 4), y = f64({3, 7});
  Tensor dy = random_tensor({3, 7}, DType::kF64, 33), dx = f64({3, 7});
  const auto r = to_doubles(dy);
  auto loss = [&] {
    layers::gelu_forward(x, y);
    return weighted_sum(y, r);
  };
  layers::gelu_backward(x, dy, dx);
  expect_grad_near(to_doubles(dx), finite_difference(x, loss), "dx");
}

// ---- Residual

TEST(LayerResidual, ForwardAddsAndBackwardFeedsBothBranches) {
  Tensor a = random_tensor({2, 3}, DType::kF32, 34), b = random_tensor({2, 3}, DType::kF32, 35);
  Tensor out = Tensor::empty({2, 3}, DType::kF32);
  layers::residual_forward(a, b, out);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.to_floats()[i], a.to_floats()[i] + b.to_floats()[i]);
  Tensor da = Tensor::zeros({2, 3}, DType::kF32), db = Tensor::zeros({2, 3}, DType::kF32);
  layers::residual_backward(out, da, db);
  EXPECT_EQ(da.to_floats(), out.to_floats());
  EXPECT_EQ(db.to_floats(), out.to_floats());
}

// ---- Embedding

TEST(Embedding, BackwardMatchesFiniteDifferencesWithRepeatedTokens) {
  const std::vector<std::int32_t> tokens = {3, 1, 3, 0, 4, 3};  // B 2, T 3; token 3 three times
  Tensor wte = random_tensor({5, 4}, DType::kF64, 40), wpe = random_tensor({7, 4}, DType::kF64, 41);
  Tensor out = f64({2, 3, 4}), dout = random_tensor({2, 3, 4}, DType::kF64, 42);
  const auto r = to_doubles(dout);
  auto loss = [&] {
    layers::embedding_forward(tokens, wte, 0, &wpe, out);
    return weighted_sum(out, r);
  };
  Tensor dwte = f64({5, 4}), dwpe = f64({7, 4});
  layers::embedding_backward(tokens, dout, 0, dwte, &dwpe);
  expect_grad_near(to_doubles(dwte), finite_difference(wte, loss), "dwte");
  expect_grad_near(to_doubles(dwpe), finite_difference(wpe, loss), "dwpe");
}

TEST(Embedding, VocabSlicesSumToTheFullEmbedding) {
  const std::vector<std::int32_t> tokens = {0, 5, 2, 7, 7, 3, 6, 1};  // B 2, T 4, V 8
  Tensor wte = random_tensor({8, 6}, DType::kF32, 43), wpe = random_tensor({4, 6}, DType::kF32, 44);
  Tensor full = Tensor::empty({2, 4, 6}, DType::kF32),
         dout = random_tensor({2, 4, 6}, DType::kF32, 45);
  layers::embedding_forward(tokens, wte, 0, &wpe, full);
  Tensor dwte = Tensor::empty({8, 6}, DType::kF32);
  layers::embedding_backward(tokens, dout, 0, dwte, nullptr);
  // Rank 0 holds ids [0, 3) and adds positions; rank 1 holds [3, 8).
  Tensor lo = Tensor::empty({2, 4, 6}, DType::kF32), hi = Tensor::empty({2, 4, 6}, DType::kF32);
  layers::embedding_forward(tokens, wte.rows(0, 3).clone(), 0, &wpe, lo);
  layers::embedding_forward(tokens, wte.rows(3, 5).clone(), 3, nullptr, hi);
  const auto f = full.to_floats(), a = lo.to_floats(), b = hi.to_floats();
  for (std::size_t i = 0; i < f.size(); ++i) EXPECT_EQ(a[i] + b[i], f[i]) << i;  // one term is 0
  Tensor dlo = Tensor::empty({3, 6}, DType::kF32), dhi = Tensor::empty({5, 6}, DType::kF32);
  layers::embedding_backward(tokens, dout, 0, dlo, nullptr);
  layers::embedding_backward(tokens, dout, 3, dhi, nullptr);
  EXPECT_EQ(dlo.to_floats(), dwte.rows(0, 3).to_floats());
  EXPECT_EQ(dhi.to_floats(), dwte.rows(3, 5).to_floats());
}

// ---- Cross-entropy

TEST(CrossEntropy, MatchesTheOpsLossAndItsGradient) {
  Tensor logits = random_tensor({6, 9}, DType::kF32, 50, -4, 4);
  const std::vector<std::int32_t> targets = {0, 8, 3, 3, 5, 1};
  Tensor lse, dlogits = Tensor::empty({6, 9}, DType::kF32), dref = dlogits.clone();
  const double loss = layers::crossentropy_forward(logits, targets, lse);
  EXPECT_NEAR(loss, ops::cross_entropy_loss(logits, targets, &dref, 8.0f), 1e-6);
  layers::crossentropy_backward(logits, targets, 0, lse, 8.0f, dlogits);
  const auto a = dlogits.to_floats(), b = dref.to_floats();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  // In place: the gradient overwrites the logits.
  Tensor inplace = logits.clone();
  layers::crossentropy_backward(inplace, targets, 0, lse, 8.0f, inplace);
  EXPECT_EQ(inplace.to_floats(), a);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  Tensor logits = random_tensor({4, 7}, DType::kF64, 51, -3, 3);
  const std::vector<std::int32_t> targets = {6, 0, 2, 2};
  Tensor lse, dlogits = f64({4, 7});
  auto loss = [&] { return layers::crossentropy_forward(logits, targets, lse); };
  loss();
  layers::crossentropy_backward(logits, targets, 0, lse, 1.0f, dlogits);
  expect_grad_near(to_doubles(dlogits), finite_difference(logits, loss), "dlogits");
}

// Vocab parallel: each rank's statistics on its own columns, merged, give the full loss; each
// rank's gradient is its columns of the full gradient.
TEST(CrossEntropy, VocabSlicesMergeToTheFullLossAndGradient) {
  const std::int64_t n = 5, v = 12, split = 7;
  Tensor logits = random_tensor({n, v}, DType::kF32, 52, -6, 6);
  const std::vector<std::int32_t> targets = {0, 11, 6, 7, 3};  // both sides of the split
  Tensor lse, dfull = Tensor::empty({n, v}, DType::kF32);
  const double loss = layers::crossentropy_forward(logits, targets, lse);
  layers::crossentropy_backward(logits, targets, 0, lse, 1.0f, dfull);
  Tensor lo = columns(logits, v, 0, split), hi = columns(logits, v, split, v - split);
  layers::CrossEntropyStats a, b;
  layers::crossentropy_stats(lo, targets, 0, a);
  layers::crossentropy_stats(hi, targets, split, b);
  layers::crossentropy_merge_stats(a, b);
  Tensor lse_merged;
  EXPECT_NEAR(layers::crossentropy_loss(a, lse_merged), loss, 1e-6);
  Tensor dlo = Tensor::empty(lo.shape(), DType::kF32), dhi = Tensor::empty(hi.shape(), DType::kF32);
  layers::crossentropy_backward(lo, targets, 0, lse_merged, 1.0f, dlo);
  layers::crossentropy_backward(hi, targets, split, lse_merged, 1.0f, dhi);
  const auto want_lo = columns(dfull, v, 0, split).to_floats(), got_lo = dlo.to_floats();
  const auto want_hi = columns(dfull, v, split, v - split).to_floats(), got_hi = dhi.to_floats();
  for (std::size_t i = 0; i < got_lo.size(); ++i) EXPECT_NEAR(got_lo[i], want_lo[i], 1e-7);
  for (std::size_t i = 0; i < got_hi.size(); ++i) EXPECT_NEAR(got_hi[i], want_hi[i], 1e-7);
}

TEST(CrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  Tensor logits = Tensor::zeros({2, 4}, DType::kF32), lse;
  EXPECT_THROW(layers::crossentropy_forward(logits, std::vector<std::int32_t>{0, 4}, lse),
               std::invalid_argument);
  EXPECT_THROW(layers::crossentropy_forward(logits, std::vector<std::int32_t>{-1, 0}, lse),
               std::invalid_argument);
}

}  // namespace
}  // namespace mixpar
