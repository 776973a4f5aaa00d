// Context parallelism: one causal attention layer split over cp ranks by sequence (ring
// attention, all-to-all) equals the unsplit layer on one device, forward and backward; the
// zigzag split balances the ring's work; the traffic per layer is the formula's; and each
// failure mode shows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "ch06_tensor_parallel/cp_lesson.h"
#include "ch06_tensor_parallel/ring_attention.h"
#include "util/errors.h"

namespace mixpar::ch06 {
namespace {

void expect_equals_one_device(const CpCase& c, const char* what) {
  const CpCaseResult r = run_cp_case(c);
  const double to = cp_output_tolerance(c, r.out_scale), tg = cp_grad_tolerance(c, r.grad_scale);
  std::printf(
      "%s cp %d %s: output error %.2e (tolerance %.2e), input-gradient error %.2e "
      "(tolerance %.2e)\n",
      what, c.cp, std::string(cp_split_name(c.split)).c_str(), r.out_error, to, r.grad_error, tg);
  EXPECT_LE(r.out_error, to) << what << " cp " << c.cp;
  EXPECT_LE(r.grad_error, tg) << what << " cp " << c.cp;
}

TEST(ContextSplit, ZigzagGivesRankChunksRAndTwoCpMinusOneMinusR) {
  const std::vector<SeqChunk> z = cp_chunks(32, 4, 1, CpSplit::kZigzag);
  ASSERT_EQ(z.size(), 2u);
  EXPECT_EQ(z[0].begin, 4);   // chunk 1 of 8 chunks of 4
  EXPECT_EQ(z[1].begin, 24);  // chunk 2cp - 1 - r = 6
  EXPECT_EQ(z[0].count + z[1].count, 8);
  const std::vector<SeqChunk> k = cp_chunks(32, 4, 3, CpSplit::kContiguous);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].begin, 24);
  EXPECT_EQ(k[0].count, 8);
  // Every position held exactly once over the ranks.
  std::vector<int> seen(32, 0);
  for (int r = 0; r < 4; ++r) {
    for (std::int64_t p : chunk_positions(cp_chunks(32, 4, r, CpSplit::kZigzag))) ++seen[p];
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(ContextSplit, LengthNotDivisibleByTwoCpIsRefusedNamingTheNumbers) {
  try {
    cp_chunks(36, 4, 0, CpSplit::kZigzag);
    FAIL() << "36 positions split into 8 chunks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length 36 is not divisible by 2 x cp = 8"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(cp_chunks(36, 4, 0, CpSplit::kContiguous));
}

TEST(ContextSplit, TakeThenPutRestoresTheSequence) {
  std::vector<float> v(2 * 16 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  const Tensor full = Tensor::from_floats(v, {2, 16, 3});
  Tensor back = Tensor::zeros({2, 16, 3}, DType::kF32);
  for (int r = 0; r < 4; ++r) {
    const std::vector<std::int64_t> pos = chunk_positions(cp_chunks(16, 4, r, CpSplit::kZigzag));
    put_positions(take_positions(full, pos), pos, back);
  }
  EXPECT_EQ(back.to_floats(), v);
}

// The merge rule: softmax over keys {1, 2, 3, 4} = the merge of the softmaxes over {1, 2} and
// {3, 4} with their log-sum-exps.
TEST(RingAttention, MergeOfTwoPartialsEqualsSoftmaxOverBoth) {
  const std::vector<float> s = {0.3f, -1.2f, 2.0f, 0.7f};  // one query's scores
  const std::vector<float> v = {1.0f, -2.0f, 0.5f, 3.0f};  // one value channel
  auto partial = [&](int lo, int hi, float& lse) {
    float mx = -INFINITY, sum = 0, o = 0;
    for (int j = lo; j < hi; ++j) mx = std::max(mx, s[j]);
    for (int j = lo; j < hi; ++j) sum += std::exp(s[j] - mx);
    for (int j = lo; j < hi; ++j) o += std::exp(s[j] - mx) / sum * v[j];
    lse = mx + std::log(sum);
    return o;
  };
  float l1 = 0, l2 = 0, lall = 0;
  const float o1 = partial(0, 2, l1), o2 = partial(2, 4, l2), all = partial(0, 4, lall);
  Tensor out = Tensor::from_floats(std::vector<float>{o1}, {1, 1});
  Tensor lse = Tensor::from_floats(std::vector<float>{l1}, {1});
  merge_partial_attention(out, lse, Tensor::from_floats(std::vector<float>{o2}, {1, 1}),
                          Tensor::from_floats(std::vector<float>{l2}, {1}));
  EXPECT_NEAR(out.item(), all, 1e-6);
  EXPECT_NEAR(lse.item(), lall, 1e-6);
  // A row with no key yet (lse -inf) takes the other side whole.
  Tensor empty_out = Tensor::zeros({1, 1}, DType::kF32);
  Tensor empty_lse = Tensor::from_floats(std::vector<float>{-INFINITY}, {1});
  merge_partial_attention(empty_out, empty_lse, Tensor::from_floats(std::vector<float>{o2}, {1, 1}),
                          Tensor::from_floats(std::vector<float>{l2}, {1}));
  EXPECT_EQ(empty_out.item(), o2);
  EXPECT_EQ(empty_lse.item(), l2);
}

TEST(RingAttention, ForwardAndBackwardEqualOneDeviceCp2And4BothSplits) {
  for (int cp : {2, 4}) {
    for (CpSplit split : {CpSplit::kContiguous, CpSplit::kZigzag}) {
      expect_equals_one_device(CpCase::of(cp, CpAlgo::kRing, split), "ring");
    }
  }
}

TEST(RingAttention, CpOneEqualsOneDevice) {
  expect_equals_one_device(CpCase::of(1, CpAlgo::kRing, CpSplit::kZigzag), "ring");
}

// Sends that wait for their receiver (NCCL's): the ring exchanges before computing instead of
// overlapping, and neither deadlocks nor changes a bit.
TEST(RingAttention, SynchronousSendsGiveTheSameResult) {
  CpCase c = CpCase::of(4, CpAlgo::kRing, CpSplit::kZigzag);
  const CpCaseResult buffered = run_cp_case(c);
  c.synchronous_sends = true;
  const CpCaseResult sync = run_cp_case(c);
  EXPECT_EQ(buffered.out, sync.out);
  EXPECT_EQ(buffered.dqkv, sync.dqkv);
}

TEST(RingAttention, Bf16EqualsOneDeviceWithinBf16Rounding) {
  CpCase c = CpCase::of(2, CpAlgo::kRing, CpSplit::kZigzag);
  c.dtype = DType::kBF16;
  const CpCaseResult r = run_cp_case(c);
  // Both round their output once to bf16 (2^-8 relative): two roundings apart at most.
  const double tol_out = 2 * std::ldexp(1.0, -8) * r.out_scale;
  std::printf("bf16 cp 2: output error %.2e (tolerance %.2e), gradient error %.2e\n", r.out_error,
              tol_out, r.grad_error);
  EXPECT_LE(r.out_error, tol_out);
  EXPECT_LE(r.grad_error, 4 * std::ldexp(1.0, -8) * r.grad_scale);
}

TEST(RingAttention, ZigzagSplitBalancesBlockPairs) {
  for (int cp : {2, 4}) {
    const CpCaseResult contiguous = run_cp_case(CpCase::of(cp, CpAlgo::kRing, CpSplit::kContiguous));
    const CpCaseResult zigzag = run_cp_case(CpCase::of(cp, CpAlgo::kRing, CpSplit::kZigzag));
    const CpLayout lc = cp_layout(32, cp, CpSplit::kContiguous),
                   lz = cp_layout(32, cp, CpSplit::kZigzag);
    for (int r = 0; r < cp; ++r) {  // what the ring computed is what the split predicts
      EXPECT_EQ(contiguous.work[r].scores, expected_work(lc, r).scores);
      EXPECT_EQ(contiguous.work[r].full, r);
      EXPECT_EQ(contiguous.work[r].diagonal, 1);
      EXPECT_EQ(zigzag.work[r].full, 2 * cp - 1);
      EXPECT_EQ(zigzag.work[r].diagonal, 2);
      EXPECT_EQ(zigzag.work[r].scores, expected_work(lz, r).scores);
    }
    const double ic = work_imbalance(contiguous.work), iz = work_imbalance(zigzag.work);
    std::printf("cp %d: max/mean work contiguous %.3f (2cp/(cp+1) = %.3f), zigzag %.3f\n", cp, ic,
                2.0 * cp / (cp + 1), iz);
    EXPECT_DOUBLE_EQ(ic, 2.0 * cp / (cp + 1));
    EXPECT_DOUBLE_EQ(iz, 1.0);
  }
}

TEST(RingAttention, BytesSentPerLayerEqualTheFormula) {
  for (CpAlgo algo : {CpAlgo::kRing, CpAlgo::kAllToAll}) {
    for (int cp : {2, 4}) {
      const CpCase c = CpCase::of(cp, algo, CpSplit::kZigzag);
      const CpCaseResult r = run_cp_case(c);
      const CpTraffic f = cp_traffic_formula(algo, cp, c.B, c.T / cp, c.C, 4);
      for (int rank = 0; rank < cp; ++rank) {
        EXPECT_EQ(double(r.forward_bytes[rank]), f.forward) << cp_algo_name(algo) << " cp " << cp;
        EXPECT_EQ(double(r.backward_bytes[rank]), f.backward) << cp_algo_name(algo) << " cp " << cp;
      }
    }
  }
}

// The ring keeps its rows' q, k, v, output and log-sum-exp: 1/cp of the one device's
// activations without the B H T T probabilities.
TEST(RingAttention, ActivationBytesPerRankAreOneCpthWithoutTheScores) {
  for (int cp : {2, 4}) {
    const CpCase c = CpCase::of(cp, CpAlgo::kRing, CpSplit::kZigzag);
    const CpCaseResult r = run_cp_case(c);
    const std::size_t per_rank = std::size_t(4) * (4 * c.B * c.T * c.C + c.B * c.n_head * c.T) / cp;
    const std::size_t one = std::size_t(4) * (4 * c.B * c.T * c.C + c.B * c.n_head * c.T * c.T);
    EXPECT_EQ(r.one_device_activation_bytes, one);
    for (std::size_t bytes : r.activation_bytes) EXPECT_EQ(bytes, per_rank) << "cp " << cp;
  }
}

TEST(UlyssesAttention, ForwardAndBackwardEqualOneDeviceCp2And4BothSplits) {
  for (int cp : {2, 4}) {
    for (CpSplit split : {CpSplit::kContiguous, CpSplit::kZigzag}) {
      const CpCase c = CpCase::of(cp, CpAlgo::kAllToAll, split);
      const CpCaseResult r = run_cp_case(c);
      // Heads are independent: each rank runs the one device's kernel on whole heads, so
      // nothing is summed in another order.
      EXPECT_EQ(r.out, r.ref_out) << "cp " << cp;
      EXPECT_EQ(r.dqkv, r.ref_dqkv) << "cp " << cp;
    }
  }
}

TEST(UlyssesAttention, CpNotDividingTheHeadsIsRefused) {
  CpCase c = CpCase::of(4, CpAlgo::kAllToAll, CpSplit::kZigzag);
  c.n_head = 2;
  c.C = 16;
  try {
    run_cp_case(c);
    FAIL() << "all-to-all over 4 ranks with 2 heads";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cp 4 does not divide n_head = 2"), std::string::npos)
        << e.what();
  }
}

// The failure modes. The diagonal block computed like a full one: a row sees keys after it.
TEST(RingAttentionBugs, UnmaskedDiagonalLetsARowSeeTheFuture) {
  for (bool bug : {false, true}) {
    CpCase c = CpCase::of(2, CpAlgo::kRing, CpSplit::kZigzag);
    c.bugs.unmasked_diagonal = bug;
    const CpCaseResult base = run_cp_case(c);
    c.perturb_position = 1;  // change token 1's key and value
    const CpCaseResult changed = run_cp_case(c);
    // Row 0 (batch 0) must not move when token 1 changes.
    double moved = 0;
    for (std::int64_t i = 0; i < c.C; ++i) {
      moved = std::max(moved, double(std::fabs(base.out[i] - changed.out[i])));
    }
    if (bug) {
      EXPECT_GT(moved, 1e-3) << "the unmasked diagonal should let position 0 see position 1";
    } else {
      EXPECT_EQ(moved, 0.0);
    }
  }
}

TEST(RingAttentionBugs, SkippedLogSumExpMergeGivesAWrongOutput) {
  CpCase c = CpCase::of(2, CpAlgo::kRing, CpSplit::kZigzag);
  c.bugs.skip_lse_merge = true;
  const CpCaseResult r = run_cp_case(c);
  EXPECT_GT(r.out_error, 100 * cp_output_tolerance(c, r.out_scale));
}

TEST(RingAttentionBugs, ZigzagPositionsTakenAsContiguousGiveAWrongOutput) {
  CpCase c = CpCase::of(2, CpAlgo::kRing, CpSplit::kZigzag);
  c.positions_as_contiguous = true;
  const CpCaseResult r = run_cp_case(c);
  EXPECT_GT(r.out_error, 100 * cp_output_tolerance(c, r.out_scale));
}

}  // namespace
}  // namespace mixpar::ch06

namespace mixpar::ch06 {
namespace {

// Ten SGD steps of the q|k|v projection through cp attention: with the gradients summed over
// cp the replicas stay bit-identical and equal one device (the tolerance: weights of order 1
// after ten steps, each adding lr x a gradient whose cp-split sums differ from one device's in
// rounding only: 1e-5 is about a hundred f32 ulps); without, the replica hash parts at step 1.
TEST(CpTraining, GradientsSummedOverCpEqualOneDeviceAndKeepReplicasIdentical) {
  CpTrainConfig c;
  c.cp = 1;
  const CpTrainResult one = train_cp_attention(c);
  EXPECT_LT(one.loss.back(), one.loss.front());
  for (CpAlgo algo : {CpAlgo::kRing, CpAlgo::kAllToAll}) {
    for (int cp : {2, 4}) {
      c.cp = cp;
      c.algo = algo;
      const CpTrainResult r = train_cp_attention(c);
      const double dw = max_abs_diff(r.weight, one.weight);
      std::printf("%s cp %d: weights after 10 steps differ from one device by %.2e (tol 1e-5)\n",
                  std::string(cp_algo_name(algo)).c_str(), cp, dw);
      EXPECT_LE(dw, 1e-5);
      EXPECT_EQ(r.first_drift_step, 0);
      EXPECT_EQ(r.replica_drift, 0.0);
    }
  }
}

TEST(CpTrainingBugs, UnsummedGradientsMakeReplicasDriftFromStepOne) {
  CpTrainConfig c;
  c.sum_gradients = false;
  const CpTrainResult r = train_cp_attention(c);
  EXPECT_EQ(r.first_drift_step, 1);
  EXPECT_GT(r.replica_drift, 1e-3);
}

}  // namespace
}  // namespace mixpar::ch06
