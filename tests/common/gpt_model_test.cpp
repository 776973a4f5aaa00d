// GptModel and its parameter registry: config checks and counts, Hugging Face names, GPT-2
// initialisation, the whole model's gradient against finite differences (f64), 16-bit working
// copies against FP32, loss scaling, recompute (bit-identical), determinism, gradient
// accumulation, and the activation memory bill on the ledger.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/gpt.h"
#include "ops/reductions.h"
#include "ops_test_util.h"
#include "random/philox.h"
#include "util/errors.h"

namespace mixpar {
namespace {

using testing::to_doubles;

// 2 layers, 8 wide, 2 heads of 4, 11 tokens, 6 positions: 1,896 parameters.
GptConfig tiny() { return {2, 2, 8, 6, 11}; }
// Big enough for real GEMM blocking and several threads' work; still fast.
GptConfig small() { return {2, 4, 64, 32, 128}; }

struct Batch {
  std::int64_t B, T;
  std::vector<std::int32_t> tokens, targets;
};

Batch random_batch(const GptConfig& c, std::int64_t B, std::int64_t T, std::uint64_t seed) {
  Batch b{B, T, {}, {}};
  Philox g(seed);
  for (std::int64_t i = 0; i < B * T; ++i) {
    b.tokens.push_back(static_cast<std::int32_t>(g.next_u32() % c.vocab_size));
    b.targets.push_back(static_cast<std::int32_t>(g.next_u32() % c.vocab_size));
  }
  return b;
}

double run_forward(GptModel& m, const Batch& b) { return m.forward(b.tokens, b.targets, b.B, b.T); }

GptModel make_model(const GptConfig& c, DType dtype, bool recompute = false,
                    std::uint64_t seed = 1) {
  GptOptions o;
  o.dtype = dtype;
  o.recompute = recompute;
  o.seed = seed;
  return GptModel(c, o);
}

// ---- Config and registry

TEST(GptModelConfig, RejectsSizesThatCannotWork) {
  GptConfig c = tiny();
  c.n_head = 3;  // 8 channels do not split into 3 heads
  EXPECT_THROW(c.validate(), InputError);
  EXPECT_THROW(GptModel{c}, InputError);
  c = tiny();
  c.vocab_size = 0;
  EXPECT_THROW(c.validate(), InputError);
  GptOptions o;
  o.dtype = DType::kE4M3;
  EXPECT_THROW(GptModel(tiny(), o), InputError);
}

TEST(GptModelConfig, CountsGpt2SmallParametersAndFlops) {
  const GptConfig c = GptConfig::gpt2_small();
  EXPECT_EQ(c.num_parameters(), 124'439'808);  // GPT-2 124M with the LM head tied
  // llm.c: 6 N + 6 L C T = 746,638,848 + 56,623,104 at T = 1024.
  EXPECT_EQ(c.flops_per_token(1024), 803'261'952);
  EXPECT_EQ(make_gpt2_registry(c).numel(), c.num_parameters());
}

TEST(GptRegistry, HoldsHuggingFaceNamesShapesAndDecayOnce) {
  const GptConfig c = tiny();
  const ParamRegistry r = make_gpt2_registry(c);
  ASSERT_EQ(r.entries().size(), 2 + 12 * 2 + 2u);
  const std::vector<std::string> first = {"wte.weight", "wpe.weight", "h.0.ln_1.weight",
                                          "h.0.ln_1.bias", "h.0.attn.c_attn.weight"};
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(r.entries()[i].name, first[i]);
  EXPECT_EQ(r.entries().back().name, "ln_f.bias");
  EXPECT_EQ(r.at("wte.weight").shape, (Shape{11, 8}));
  EXPECT_EQ(r.at("wpe.weight").shape, (Shape{6, 8}));
  EXPECT_EQ(r.at("h.1.attn.c_attn.weight").shape, (Shape{8, 24}));
  EXPECT_EQ(r.at("h.1.attn.c_attn.bias").shape, (Shape{24}));
  EXPECT_EQ(r.at("h.1.attn.c_proj.weight").shape, (Shape{8, 8}));
  EXPECT_EQ(r.at("h.1.mlp.c_fc.weight").shape, (Shape{8, 32}));
  EXPECT_EQ(r.at("h.1.mlp.c_proj.weight").shape, (Shape{32, 8}));
  std::int64_t offset = 0;
  for (const ParamEntry& e : r.entries()) {
    EXPECT_EQ(e.weight_decay, e.shape.size() == 2) << e.name;
    EXPECT_EQ(e.holding.split, ParamSplit::kReplicated) << e.name;
    EXPECT_EQ(e.offset, offset) << e.name;  // the flat buffer, in registry order
    offset += shape_numel(e.shape);
  }
  EXPECT_THROW(r.at("lm_head.weight"), InputError);  // tied: there is no separate head
}

TEST(GptRegistry, InitialisesLikeGpt2) {
  const GptConfig c{8, 4, 64, 64, 512};
  GptModel m(c);
  auto stddev = [](const Tensor& t) {
    return std::sqrt(ops::sum_of_squares(t) / double(t.numel()));
  };
  EXPECT_NEAR(stddev(m.param("wte.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(m.param("h.3.attn.c_attn.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(m.param("h.3.mlp.c_proj.weight")), 0.02 / std::sqrt(16.0), 0.0003);
  EXPECT_NEAR(stddev(m.param("h.3.attn.c_proj.weight")), 0.02 / std::sqrt(16.0), 0.0003);
  EXPECT_EQ(ops::max_abs(m.param("h.3.mlp.c_fc.bias")), 0.0);
  EXPECT_EQ(ops::sum(m.param("ln_f.weight")), 64.0);
  EXPECT_EQ(ops::max_abs(m.param("ln_f.bias")), 0.0);
  EXPECT_EQ(ops::max_abs(m.registry().flat_grads()), 0.0);
}

TEST(GptModel, SameSeedGivesTheSameWeightsAndLoss) {
  const Batch b = random_batch(small(), 2, 16, 3);
  GptModel a = make_model(small(), DType::kF32, false, 7),
           c = make_model(small(), DType::kF32, false, 7);
  GptModel other = make_model(small(), DType::kF32, false, 8);
  EXPECT_EQ(a.registry().flat_params().to_floats(), c.registry().flat_params().to_floats());
  EXPECT_NE(a.registry().flat_params().to_floats(), other.registry().flat_params().to_floats());
  EXPECT_EQ(run_forward(a, b), run_forward(c, b));
  // A 16-bit model of the same seed holds exactly the rounded FP32 weights.
  GptModel h = make_model(small(), DType::kBF16, false, 7);
  EXPECT_EQ(h.registry().flat_params().to_floats(),
            a.registry().flat_params().to(DType::kBF16).to_floats());
}

// ---- Gradients

// Weights large enough that every path matters (N(0, 0.02) would leave the logits uniform).
void randomise(GptModel& m, std::uint64_t seed) {
  Philox g(seed);
  for (ParamEntry& e : m.registry().entries()) {
    const bool ln_weight = e.name.find("ln_") != std::string::npos && e.name.ends_with(".weight");
    fill_normal(e.param, g, ln_weight ? 1.0f : 0.0f, 0.3f);
  }
}

// Up to 8 elements of every parameter tensor, spread over it (all of the small ones).
TEST(GptModel, GradientMatchesFiniteDifferencesInFp64) {
  GptModel m = make_model(tiny(), DType::kF64);
  randomise(m, 11);
  const Batch b = random_batch(tiny(), 2, 5, 12);
  run_forward(m, b);
  m.backward();
  constexpr double kH = 1e-6;
  for (const ParamEntry& e : m.registry().entries()) {
    double* p = e.param.data_as<double>();
    const auto analytic = to_doubles(e.grad);
    const std::int64_t n = e.param.numel(), stride = std::max<std::int64_t>(1, n / 8);
    for (std::int64_t i = stride / 2; i < n; i += stride) {
      const double keep = p[i];
      p[i] = keep + kH;
      const double up = run_forward(m, b);
      p[i] = keep - kH;
      const double down = run_forward(m, b);
      p[i] = keep;
      const double numeric = (up - down) / (2 * kH);
      ASSERT_NEAR(analytic[i], numeric, 1e-7 * std::max(1.0, std::fabs(numeric)))
          << e.name << " element " << i;
    }
  }
}

// ||a - b|| / ||b|| over all gradients, b the reference.
double relative_grad_error(const GptModel& a, const GptModel& b, double a_scale = 1.0) {
  const auto x = to_doubles(a.registry().flat_grads()), y = to_doubles(b.registry().flat_grads());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (x[i] / a_scale - y[i]) * (x[i] / a_scale - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / den);
}

// Same seed, same batch: the 16-bit working copies track FP32, from GPT-2's initialisation and
// from larger random weights (wider activations, larger logits). Measured: loss differences
// 4e-6 / 1e-5 (bf16 / fp16) at init and 5e-3 / 5e-4 with random weights; gradient errors
// (relative L2 over all) 0.6% / 0.08% and 4.7% / 0.8%. The bounds are ~3-10x those; a wrong
// layer would be off by O(1).
TEST(GptModel, SixteenBitWorkingCopiesTrackFp32) {
  struct Case {
    bool random_weights;
    double loss_bf16, loss_fp16, grad_bf16, grad_fp16;
  };
  const Batch b = random_batch(small(), 4, 32, 13);
  for (const Case& c :
       {Case{false, 1e-4, 1e-4, 0.02, 0.003}, Case{true, 0.03, 0.003, 0.15, 0.03}}) {
    GptModel m32 = make_model(small(), DType::kF32), mbf = make_model(small(), DType::kBF16);
    GptModel mh = make_model(small(), DType::kF16);
    if (c.random_weights) {
      randomise(m32, 5);
      for (GptModel* m : {&mbf, &mh}) {
        Tensor p = m->registry().flat_params();
        p.copy_from(m32.registry().flat_params());  // rounded once into the 16-bit copy
      }
    }
    const double l32 = run_forward(m32, b);
    EXPECT_NEAR(run_forward(mbf, b), l32, c.loss_bf16) << "random weights " << c.random_weights;
    EXPECT_NEAR(run_forward(mh, b), l32, c.loss_fp16) << "random weights " << c.random_weights;
    m32.backward();
    mbf.backward();
    mh.backward(1024.0f);  // fp16 gradients need the loss scale; bf16 has fp32's range
    EXPECT_LT(relative_grad_error(mbf, m32), c.grad_bf16) << "random weights " << c.random_weights;
    EXPECT_LT(relative_grad_error(mh, m32, 1024.0), c.grad_fp16)
        << "random weights " << c.random_weights;
  }
}

// Chapter 2's failure mode, at this scale: with B*T = 512, d(logits) ~ 1 / (128 * 512) sits in
// fp16's subnormal range, and some gradient elements round to zero. Scaling the loss by 1024
// moves them into the normal range. Measured: 27 zero elements unscaled, 2 scaled.
TEST(GptModel, Fp16GradientsUnderflowWithoutLossScaling) {
  const Batch b = random_batch(small(), 16, 32, 14);
  GptModel mh = make_model(small(), DType::kF16);
  run_forward(mh, b);
  mh.backward(1.0f);
  const std::int64_t zeros_unscaled = ops::count_zeros(mh.registry().flat_grads());
  run_forward(mh, b);
  mh.backward(1024.0f);
  const std::int64_t zeros_scaled = ops::count_zeros(mh.registry().flat_grads());
  EXPECT_GT(zeros_unscaled, 4 * std::max<std::int64_t>(zeros_scaled, 2));
}

TEST(GptModel, LossScaleMultipliesEveryFp32GradientExactly) {
  const Batch b = random_batch(small(), 2, 16, 15);
  GptModel m = make_model(small(), DType::kF32);
  run_forward(m, b);
  m.backward(1.0f);
  const std::vector<float> g1 = m.registry().flat_grads().to_floats();
  run_forward(m, b);
  m.backward(256.0f);  // a power of two: every rounding scales with it
  const std::vector<float> g256 = m.registry().flat_grads().to_floats();
  for (std::size_t i = 0; i < g1.size(); ++i) ASSERT_EQ(g256[i], 256.0f * g1[i]) << i;
}

TEST(GptModel, RecomputeGivesBitIdenticalGradients) {
  const Batch b = random_batch(small(), 2, 32, 16);
  GptModel plain = make_model(small(), DType::kF32), rc = make_model(small(), DType::kF32, true);
  EXPECT_EQ(run_forward(plain, b), run_forward(rc, b));
  plain.backward();
  rc.backward();
  EXPECT_EQ(plain.registry().flat_grads().to_floats(), rc.registry().flat_grads().to_floats());
}

TEST(GptModel, AccumulateAddsGradientsOfMicroBatches) {
  const Batch b1 = random_batch(small(), 2, 16, 17), b2 = random_batch(small(), 2, 16, 18);
  GptModel m = make_model(small(), DType::kF32);
  run_forward(m, b1);
  m.backward();
  const auto g1 = to_doubles(m.registry().flat_grads());
  run_forward(m, b2);
  m.backward();
  const auto g2 = to_doubles(m.registry().flat_grads());
  run_forward(m, b1);
  m.backward();
  run_forward(m, b2);
  m.backward(1.0f, /*accumulate=*/true);
  const auto sum = to_doubles(m.registry().flat_grads());
  // Adding into a gradient rounds differently from summing two: FP32 agreement, not bits.
  // Elements are sums of many terms of either sign, so the bound is on the magnitude of the
  // largest element (1e-5 of it), which a missing or doubled micro-batch exceeds by far.
  double scale = 0;
  for (std::size_t i = 0; i < sum.size(); ++i) scale = std::max(scale, std::fabs(g1[i] + g2[i]));
  for (std::size_t i = 0; i < sum.size(); ++i)
    ASSERT_NEAR(sum[i], g1[i] + g2[i], 1e-5 * scale) << i;
}

// The hook DDP overlaps communication with: every entry once, each gradient already final.
TEST(GptModel, ReportsEachGradientOnceWhenItIsFinal) {
  const Batch b = random_batch(small(), 2, 16, 24);
  GptModel m(small());
  std::vector<std::size_t> order;
  std::vector<std::vector<float>> at_report(m.registry().entries().size());
  m.set_grad_ready_hook([&](std::size_t i) {
    order.push_back(i);
    at_report[i] = m.registry().entries()[i].grad.to_floats();
  });
  run_forward(m, b);
  m.backward();
  const auto entries = m.registry().entries();
  ASSERT_EQ(order.size(), entries.size());
  EXPECT_EQ(entries[order.front()].name, "ln_f.weight");
  EXPECT_EQ(entries[order[2]].name, "h.1.ln_1.weight");  // the last block comes next
  EXPECT_EQ(entries[order.back()].name, "wte.weight");   // tied: final after the embedding
  for (std::size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(at_report[i], entries[i].grad.to_floats()) << entries[i].name << " changed later";
  }
  m.set_grad_ready_hook({});
  run_forward(m, b);
  m.backward();
  EXPECT_EQ(order.size(), entries.size()) << "removed hook not called";
}

TEST(GptModel, RejectsBadBatchesAndBackwardWithoutForward) {
  GptModel m(tiny());
  EXPECT_THROW(m.backward(), std::logic_error);
  Batch b = random_batch(tiny(), 1, 4, 19);
  b.tokens[2] = 11;  // == vocab_size
  EXPECT_THROW(run_forward(m, b), InputError);
  const Batch too_long = random_batch(tiny(), 1, 7, 20);  // T > n_positions = 6
  EXPECT_THROW(run_forward(m, too_long), InputError);
  const Batch ok = random_batch(tiny(), 1, 4, 21);
  EXPECT_TRUE(std::isnan(m.forward(ok.tokens, {}, 1, 4)));  // inference: logits only
  EXPECT_EQ(m.logits().shape(), (Shape{1, 4, 11}));
  EXPECT_THROW(m.backward(), std::logic_error);
}

// ---- Memory

// Top-of-stack activations: L + 1 residuals, ln_f with its statistics, logits, lse.
std::size_t top_bytes(const GptConfig& c, std::int64_t B, std::int64_t T) {
  const std::int64_t bt = B * T;
  return static_cast<std::size_t>(4 *
                                  ((c.n_layer + 2) * bt * c.n_embd + bt * c.vocab_size + 3 * bt));
}

TEST(GptModel, ActivationBytesFollowTheFormulaAndRecomputeKeepsOneBlock) {
  const GptConfig c{3, 4, 32, 16, 64};
  const std::int64_t B = 2, T = 16;
  const std::size_t block = GptBlockActs::bytes(B, T, c.n_embd, c.n_head, DType::kF32);
  EXPECT_EQ(block, 4u * (B * T * 15 * 32 + B * 4 * T * T) + 4u * 4 * B * T);
  for (bool recompute : {false, true}) {
    MemoryLedger ledger;
    LedgerScope scope(ledger);
    GptOptions o;
    o.recompute = recompute;
    o.keep_buffers = false;
    GptModel m(c, o);
    const Batch b = random_batch(c, B, T, 22);
    run_forward(m, b);
    const std::size_t want = top_bytes(c, B, T) + (recompute ? 1 : c.n_layer) * block;
    EXPECT_EQ(ledger.live(MemCategory::kActivations), want) << "recompute " << recompute;
    m.backward();
    EXPECT_EQ(ledger.peak(MemCategory::kActivations), want) << "recompute " << recompute;
    EXPECT_EQ(ledger.live(MemCategory::kActivations), 0u) << "freed after backward";
    EXPECT_EQ(ledger.live(MemCategory::kOther), 0u) << "workspaces freed too";
    EXPECT_EQ(ledger.live(MemCategory::kParameters), 4u * c.num_parameters());
    EXPECT_EQ(ledger.live(MemCategory::kGradients), 4u * c.num_parameters());
  }
}

TEST(GptModel, ReusesItsBuffersAcrossSteps) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  GptModel m(small());
  const Batch b = random_batch(small(), 2, 16, 23);
  run_forward(m, b);
  m.backward();
  const std::int64_t allocations = ledger.allocations();
  for (int step = 0; step < 3; ++step) {
    run_forward(m, b);
    m.backward();
  }
  EXPECT_EQ(ledger.allocations(), allocations) << "an FP32 step allocates nothing";
}

}  // namespace
}  // namespace mixpar
