// Gradient buckets: they tile the flat gradient buffer in reverse registration order, the
// reducer leaves every rank with the mean over ranks and micro-steps (backend, ring, naive;
// with and without its thread), a bucket is reduced while later parameters are still pending
// (the overlap), and 16-bit gradients are summed in FP32 unless the fp16-reduce bug asks not.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ch04_ddp/bucket_reducer.h"
#include "comm/local_backend.h"
#include "model/gpt.h"

namespace mixpar::ch04 {
namespace {

// Four parameters of 3, 5, 2 and 6 elements, allocated in `dtype`.
ParamRegistry small_registry(DType dtype) {
  ParamRegistry r;
  r.add("a", {3}, false, ParamInit::kZeros);
  r.add("b", {5}, false, ParamInit::kZeros);
  r.add("c", {2}, false, ParamInit::kZeros);
  r.add("d", {6}, false, ParamInit::kZeros);
  r.allocate(dtype);
  return r;
}

TEST(Buckets, TileTheFlatGradientsInReverseRegistrationOrder) {
  const ParamRegistry r = small_registry(DType::kF32);
  // 12 bytes cap: d (24 B) alone, then c + b (8 + 20 B), then a.
  const std::vector<Bucket> b = make_buckets(r.entries(), DType::kF32, 12);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].entries, (std::vector<std::size_t>{3}));
  EXPECT_EQ(b[1].entries, (std::vector<std::size_t>{2, 1}));
  EXPECT_EQ(b[2].entries, (std::vector<std::size_t>{0}));
  EXPECT_EQ(b[0].begin, 10);
  EXPECT_EQ(b[0].count, 6);
  EXPECT_EQ(b[1].begin, 3);
  EXPECT_EQ(b[1].count, 7);
  EXPECT_EQ(b[2].begin, 0);
  EXPECT_EQ(b[2].count, 3);
  EXPECT_EQ(make_buckets(r.entries(), DType::kF32, 0).size(), 4u) << "cap 0: one per parameter";
  EXPECT_EQ(make_buckets(r.entries(), DType::kF32, 25 << 20).size(), 1u);
}

TEST(Buckets, GptBucketsStartWithTheLastLayersAndEndWithTheEmbeddings) {
  const GptModel m({.n_layer = 3, .n_head = 2, .n_embd = 16, .n_positions = 8, .vocab_size = 64});
  const auto entries = m.registry().entries();
  const std::vector<Bucket> b = make_buckets(entries, DType::kF32, 4096);
  ASSERT_GT(b.size(), 2u);
  EXPECT_EQ(entries[b.front().entries.front()].name, "ln_f.bias");
  EXPECT_EQ(entries[b.back().entries.back()].name, "wte.weight");
  std::int64_t covered = 0;
  for (const Bucket& k : b) covered += k.count;
  EXPECT_EQ(covered, m.num_parameters());
}

// On each rank: gradients = (rank + 1) * (index + 1); after the reducer: their mean / micro.
void fill_rank_grads(const ParamRegistry& r, int rank) {
  Tensor g = r.flat_grads();
  std::vector<float> v(static_cast<std::size_t>(g.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(rank + 1) * float(i + 1);
  g.copy_from(Tensor::from_floats(v, {g.numel()}));
}

TEST(BucketReducer, LeavesTheMeanOverRanksAndMicroStepsForEveryAlgorithm) {
  for (AllReduceAlgo algo :
       {AllReduceAlgo::kBackend, AllReduceAlgo::kRing, AllReduceAlgo::kNaive}) {
    for (bool overlap : {true, false}) {
      constexpr int n = 4;
      run_local(n, [&](Communicator& c) {
        const ParamRegistry r = small_registry(DType::kF32);
        fill_rank_grads(r, c.rank());
        ReducerConfig cfg;
        cfg.bucket_cap_bytes = 8;
        cfg.algo = algo;
        cfg.overlap = overlap;
        BucketReducer reducer(c, r, cfg);
        reducer.begin(n * 2.0);  // 2 micro-steps accumulated
        for (std::size_t e = 4; e-- > 0;) reducer.mark_ready(e);
        reducer.finish();
        const std::vector<float> got = r.flat_grads().to_floats();
        for (std::size_t i = 0; i < got.size(); ++i) {
          // sum over ranks of (r+1)(i+1) = 10 (i+1); divided by 8.
          EXPECT_FLOAT_EQ(got[i], 10.0f * float(i + 1) / 8.0f)
              << algo_name(algo) << " overlap " << overlap << " element " << i;
        }
      });
    }
  }
}

TEST(BucketReducer, ReducesABucketWhileLaterParametersArePending) {
  run_local(2, [&](Communicator& c) {
    const ParamRegistry r = small_registry(DType::kF32);
    fill_rank_grads(r, c.rank());
    ReducerConfig cfg;
    cfg.bucket_cap_bytes = 8;
    BucketReducer reducer(c, r, cfg);
    reducer.begin(2.0);
    reducer.mark_ready(3);       // bucket 0 (d) complete: the thread takes it
    reducer.wait_for_bucket(0);  // returns with a, b, c still pending: overlap
    const std::vector<float> g = r.flat_grads().to_floats();
    EXPECT_FLOAT_EQ(g[10], 1.5f * 11.0f) << "d is averaged: (1 + 2) / 2 x 11";
    EXPECT_FLOAT_EQ(g[0], float(c.rank() + 1)) << "a is still this rank's own";
    for (std::size_t e : {2u, 1u, 0u}) reducer.mark_ready(e);
    reducer.finish();
    EXPECT_FLOAT_EQ(r.flat_grads().to_floats()[0], 1.5f);
  });
}

TEST(BucketReducer, FinishMarksWhatBackwardDidNotReport) {
  run_local(3, [&](Communicator& c) {
    const ParamRegistry r = small_registry(DType::kF32);
    fill_rank_grads(r, c.rank());
    ReducerConfig cfg;
    cfg.bucket_cap_bytes = 0;
    BucketReducer reducer(c, r, cfg);
    reducer.begin(3.0);
    reducer.finish();  // the post-backward fallback: every bucket, in order
    EXPECT_FLOAT_EQ(r.flat_grads().to_floats()[15], 2.0f * 16.0f);
  });
}

TEST(BucketReducer, MarkingAnEntryTwiceIsALogicError) {
  run_local(1, [&](Communicator& c) {
    const ParamRegistry r = small_registry(DType::kF32);
    BucketReducer reducer(c, r, {});
    reducer.begin(1.0);
    reducer.mark_ready(1);
    EXPECT_THROW(reducer.mark_ready(1), std::logic_error);
    reducer.finish();
    EXPECT_THROW(reducer.mark_ready(0), std::logic_error) << "outside begin/finish";
  });
}

TEST(BucketReducer, SixteenBitGradientsSumInFp32UnlessAskedNotTo) {
  for (bool fp32 : {true, false}) {
    run_local(2, [&](Communicator& c) {
      const ParamRegistry r = small_registry(DType::kF16);
      Tensor g = r.flat_grads();
      g.fill(40000.0f);  // fits in FP16; two of them do not (65504)
      ReducerConfig cfg;
      cfg.reduce_in_fp32 = fp32;
      BucketReducer reducer(c, r, cfg);
      reducer.begin(2.0);
      reducer.finish();
      const float v = r.flat_grads().to_floats()[0];
      if (fp32)
        EXPECT_EQ(v, 40000.0f) << "averaged in FP32, rounded once";
      else
        EXPECT_TRUE(std::isinf(v)) << "the FP16 sum overflowed before the division: " << v;
    });
  }
}

TEST(BucketReducer, StagingBuffersAreChargedAsCommunicationBuffers) {
  LocalWorld world(2);
  world.run([&](Communicator& c) {
    const ParamRegistry r = small_registry(DType::kBF16);
    BucketReducer reducer(c, r, {});
    EXPECT_EQ(current_ledger().live(MemCategory::kCommBuffers), 16u * 4u) << "16 params x FP32";
  });
}

}  // namespace
}  // namespace mixpar::ch04
