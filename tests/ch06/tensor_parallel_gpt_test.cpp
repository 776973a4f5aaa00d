// A tensor-parallel GPT (Megatron's split of every block, vocab-parallel embedding and loss)
// trained for 10 steps equals the same model on one device, and each failure mode shows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "ch06_tensor_parallel/tp_lesson.h"
#include "model/gpt_params.h"
#include "util/errors.h"

namespace mixpar::ch06 {
namespace {

// The tolerance: every tp run differs from one device only in the order of its sums (each
// all-reduce adds tp partial sums of a dot product, one rounding each, 2^-24 relative in f32,
// about 6e-8). Ten AdamW steps of lr 1e-3 move a weight by at most 10 lr = 1e-2 whatever the
// gradient, so a rounding-level difference in a gradient moves a weight by much less than
// that; 1e-4 absolute on weights of order 1 (LayerNorm gains) and on losses of order
// log V ~ 4 is a thousand f32 ulps: order-of-summation noise, never a wrong gradient (the
// skipped f backward below moves them by 1e-3 and more).
constexpr double kWeightTol = 1e-4, kLossTol = 1e-4, kNormTol = 1e-4;

TpRunConfig base(int tp) {
  TpRunConfig c;
  c.tp = tp;
  return c;
}

void expect_equal_runs(const TpRunResult& one, const TpRunResult& split, const char* what) {
  const double dl = max_abs_difference(one.loss, split.loss);
  const double dn = max_abs_difference(one.grad_norm, split.grad_norm);
  const double dw = max_weight_difference(one, split);
  std::printf("%s: tolerance loss %.0e norm %.0e weights %.0e; measured %.2e %.2e %.2e\n", what,
              kLossTol, kNormTol, kWeightTol, dl, dn, dw);
  EXPECT_LE(dl, kLossTol) << what;
  EXPECT_LE(dn, kNormTol) << what;
  EXPECT_LE(dw, kWeightTol) << what;
}

TEST(TensorParallelGpt, Tp2And4EqualOneDeviceOverTenSteps) {
  const TpRunResult one = train_tensor_parallel(base(1));
  ASSERT_EQ(one.loss.size(), 10u);
  EXPECT_LT(one.loss.back(), one.loss.front()) << "the model learns";
  for (int tp : {2, 4}) {
    const TpRunResult split = train_tensor_parallel(base(tp));
    expect_equal_runs(one, split, tp == 2 ? "tp 2" : "tp 4");
    EXPECT_EQ(split.replica_drift, 0.0) << "replicated parameters stay bit-identical over tp";
  }
}

TEST(TensorParallelGpt, AVocabularyTpDoesNotDivideIsPaddedAndMaskedAndEqualsOneDevice) {
  TpRunConfig c = base(1);
  c.model.vocab_size = 61;  // prime: tp 2 pads to 62, tp 4 to 64
  const TpRunResult one = train_tensor_parallel(c);
  for (int tp : {2, 4}) {
    c.tp = tp;
    EXPECT_EQ(padded_vocab(61, tp), tp == 2 ? 62 : 64);
    expect_equal_runs(one, train_tensor_parallel(c), tp == 2 ? "V 61, tp 2" : "V 61, tp 4");
  }
}

TEST(TensorParallelGpt, EveryShardStartsFromTheFullModelsInitialisation) {
  TpRunConfig c = base(1);
  c.steps = 0;
  const TpRunResult one = train_tensor_parallel(c);
  for (int tp : {2, 4}) {
    c.tp = tp;
    EXPECT_EQ(max_weight_difference(one, train_tensor_parallel(c)), 0.0) << "tp " << tp;
  }
}

TEST(TensorParallelTraffic, TwoAllReducesOfBTCPerBlockForwardAndTwoBackward) {
  const TpRunConfig c = base(2);
  const TpRunResult r = train_tensor_parallel(c);
  const std::int64_t btc = c.B * c.T * c.model.n_embd, L = c.model.n_layer;
  EXPECT_EQ(r.traffic.at("block forward").calls, 2 * L);
  EXPECT_EQ(r.traffic.at("block forward").elements, 2 * L * btc);
  EXPECT_EQ(r.traffic.at("block backward").calls, 2 * L);
  EXPECT_EQ(r.traffic.at("block backward").elements, 2 * L * btc);
  // Ring all-reduce bytes per rank: 2 (tp - 1) / tp of the buffer.
  const std::size_t per_call = static_cast<std::size_t>(btc) * 4 * 2 * (c.tp - 1) / c.tp;
  EXPECT_EQ(r.traffic.at("block forward").bytes_sent, 2 * L * per_call);
  EXPECT_EQ(r.traffic.at("embedding").elements, btc);
  EXPECT_EQ(r.traffic.at("head backward").elements, btc);
  EXPECT_EQ(r.traffic.at("loss").calls, 3) << "max, target logit, sum of exponentials";
  EXPECT_EQ(r.traffic.at("loss").elements, 3 * c.B * c.T) << "never B x T x V";
}

TEST(TensorParallelMemory, BlockActivationsFollowTheTpSplit) {
  // Per layer 4 C whole + 11 C / tp split values per token, and the attention maps / tp.
  TpRunConfig c = base(1);
  c.steps = 1;
  const std::size_t one = train_tensor_parallel(c).activation_peak;
  c.tp = 2;
  const std::size_t two = train_tensor_parallel(c).activation_peak;
  EXPECT_LT(two, one);
  EXPECT_GT(two, one / 2) << "LayerNorm and residual activations are not split without SP";
}

TEST(TensorParallelFailure, FWithoutItsBackwardAllReduceDriftsFromOneDevice) {
  const TpRunResult one = train_tensor_parallel(base(1));
  TpRunConfig c = base(2);
  c.bugs.skip_f_backward = true;
  const TpRunResult bad = train_tensor_parallel(c);
  const double dw = max_weight_difference(one, bad);
  std::printf("f without backward all-reduce: weights drift by %.2e (tolerance %.0e); loss "
              "%.4f -> %.4f\n",
              dw, kWeightTol, bad.loss.front(), bad.loss.back());
  EXPECT_LT(bad.loss.back(), bad.loss.front()) << "the loss still falls";
  EXPECT_GT(dw, 10 * kWeightTol);
}

TEST(TensorParallelFailure, UnmaskedPaddedVocabularyNoLongerEqualsOneDevice) {
  TpRunConfig c = base(1);
  c.model.vocab_size = 61;
  const TpRunResult one = train_tensor_parallel(c);
  c.tp = 2;
  c.bugs.unmasked_padding = true;
  const TpRunResult bad = train_tensor_parallel(c);
  EXPECT_GT(std::fabs(bad.loss.front() - one.loss.front()), 1e-3)
      << "a padded logit of 0 joins the softmax";
}

TEST(TensorParallelFailure, NormCountingReplicasOnEveryTpRankIsTooLargeAndClipsEarly) {
  TpRunConfig c = base(2);
  c.steps = 1;
  const TpRunResult r = train_tensor_parallel(c);
  const TpRunResult one = train_tensor_parallel(base(1));
  EXPECT_LE(std::fabs(r.grad_norm[0] - one.grad_norm[0]), kNormTol) << "count-once";
  EXPECT_GT(r.naive_norm[0], r.grad_norm[0] * 1.01);
  // A clip threshold between the two: the naive norm clips, the count-once norm does not.
  c.max_grad_norm = 0.5 * (r.grad_norm[0] + r.naive_norm[0]);
  EXPECT_EQ(train_tensor_parallel(c).clipped[0], 0);
  c.norm_counts_replicas = true;
  EXPECT_EQ(train_tensor_parallel(c).clipped[0], 1);
}

TEST(TensorParallelFailure, HeadsThatDoNotDivideByTpAreRefusedBeforeAnyCompute) {
  TpRunConfig c = base(3);  // 4 heads
  try {
    train_tensor_parallel(c);
    FAIL() << "tp 3 with 4 heads accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tp 3 does not divide n_head = 4"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mixpar::ch06

namespace mixpar::ch06 {
namespace {

// Sequence parallelism: the LayerNorm and residual regions split along the B x T rows.
TEST(SequenceParallelGpt, Tp2And4WithSequenceParallelEqualOneDeviceOverTenSteps) {
  const TpRunResult one = train_tensor_parallel(base(1));
  for (int tp : {2, 4}) {
    TpRunConfig c = base(tp);
    c.sequence_parallel = true;
    const TpRunResult split = train_tensor_parallel(c);
    expect_equal_runs(one, split, tp == 2 ? "tp 2 + SP" : "tp 4 + SP");
    EXPECT_EQ(split.replica_drift, 0.0) << "the replicated gradients are summed over tp";
  }
}

TEST(SequenceParallelTraffic, AllGathersAndReduceScattersMoveWhatTheAllReducesDid) {
  TpRunConfig c = base(2);
  const TpRunResult plain = train_tensor_parallel(c);
  c.sequence_parallel = true;
  const TpRunResult sp = train_tensor_parallel(c);
  const std::int64_t btc = c.B * c.T * c.model.n_embd, L = c.model.n_layer;
  for (const char* region : {"block forward", "block backward"}) {
    // One all-gather and one reduce-scatter of B T C in place of each all-reduce.
    EXPECT_EQ(sp.traffic.at(region).calls, 2 * plain.traffic.at(region).calls) << region;
    EXPECT_EQ(sp.traffic.at(region).elements, 4 * L * btc) << region;
    EXPECT_EQ(sp.traffic.at(region).bytes_sent, plain.traffic.at(region).bytes_sent) << region;
  }
  EXPECT_EQ(sp.traffic.at("embedding").bytes_sent, plain.traffic.at("embedding").bytes_sent / 2)
      << "a reduce-scatter is half an all-reduce";
  EXPECT_EQ(sp.traffic.at("block backward re-gather").calls, 2 * L);
}

// The replicated parameters' partial gradients (6 C a block, 2 C of ln_f) wait for the last
// block and are summed in one all-reduce per micro-batch, not one per block.
TEST(SequenceParallelTraffic, TheReplicatedGradientsAreOneAllReducePerMicroBatch) {
  for (std::int64_t layers : {1, 3}) {
    TpRunConfig c = base(2);
    c.sequence_parallel = true;
    c.steps = 1;
    c.model.n_layer = layers;
    const TpRunResult sp = train_tensor_parallel(c);
    const TpRegionTraffic& r = sp.traffic.at("replicated gradients");
    EXPECT_EQ(r.calls, 1) << layers << " blocks";
    EXPECT_EQ(r.elements, 6 * c.model.n_embd * layers + 2 * c.model.n_embd) << layers << " blocks";
  }
}

TEST(SequenceParallelMemory, ActivationsPerLayerAreDividedByTp) {
  // bf16, per layer (2 blocks minus 1): sbh(32 + 2as/h) / t + 16 sb / t exactly.
  for (int tp : {2, 4}) {
    TpRunConfig c = base(tp);
    c.sequence_parallel = true;
    c.steps = 1;
    c.dtype = DType::kBF16;
    const std::size_t two = train_tensor_parallel(c).activation_peak;
    c.model.n_layer = 1;
    const std::size_t one = train_tensor_parallel(c).activation_peak;
    const double s = c.T, b = c.B, h = c.model.n_embd, a = c.model.n_head;
    EXPECT_EQ(double(two - one), (s * b * h * 32 + 2 * a * s * s * b + 16 * s * b) / tp)
        << "tp " << tp;
  }
}

TEST(SequenceParallelFailure, LayerNormGradientsNotSummedMakeTheTpReplicasDriftApart) {
  TpRunConfig c = base(2);
  c.sequence_parallel = true;
  c.bugs.unsummed_replicated = true;
  const TpRunResult bad = train_tensor_parallel(c);
  std::printf("SP without the LayerNorm gradient sum: tp replicas differ by %.2e\n",
              bad.replica_drift);
  EXPECT_GT(bad.replica_drift, 10 * kWeightTol);
}

}  // namespace
}  // namespace mixpar::ch06
