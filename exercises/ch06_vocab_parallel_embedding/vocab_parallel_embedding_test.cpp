// vocab_shard and vocab_parallel_embedding against the model's code: padded_vocab (what a
// tensor-parallel GptModel's wte holds) and layers::embedding_forward on each rank's shard (what
// it runs), and, summed by an all-reduce over a local tp group, the unsplit model's embedding.
// Integer-valued tables keep every sum exact.
#include "ch06_vocab_parallel_embedding/vocab_parallel_embedding.h"

#include <gtest/gtest.h>

#include <cstddef>

#include "comm/local_backend.h"
#include "model/gpt_params.h"
#include "model/layers.h"

namespace mixpar::exercises {
namespace {

constexpr std::int64_t kB = 2, kT = 5, kC = 3, kP = 8;

std::vector<float> table(std::int64_t rows, std::int64_t vocab_rows, int salt) {
  std::vector<float> v(static_cast<std::size_t>(rows * kC), 0.0f);
  for (std::int64_t r = 0; r < vocab_rows; ++r) {  // rows past vocab_rows: padding, zeros
    for (std::int64_t c = 0; c < kC; ++c) {
      v[static_cast<std::size_t>(r * kC + c)] = static_cast<float>((r * 5 + c * 3 + salt) % 11 - 5);
    }
  }
  return v;
}

void check(std::int64_t vocab, int tp) {
  SCOPED_TRACE(testing::Message() << "vocabulary " << vocab << ", tp " << tp);
  const std::int64_t padded = padded_vocab(vocab, tp);
  const std::vector<float> wte = table(padded, vocab, 1), wpe = table(kP, kP, 4);
  std::vector<std::int32_t> tokens;
  for (std::int64_t i = 0; i < kB * kT; ++i) {
    tokens.push_back(static_cast<std::int32_t>((i * 7 + 3) % vocab));
  }
  tokens.back() = static_cast<std::int32_t>(vocab - 1);  // the last id, next to the padding
  const Tensor wte_t = Tensor::from_floats(wte, {padded, kC});
  const Tensor wpe_t = Tensor::from_floats(wpe, {kP, kC});
  Tensor whole = Tensor::empty({kB, kT, kC}, DType::kF32);
  layers::embedding_forward(tokens, wte_t, 0, &wpe_t, whole);

  std::int64_t next_begin = 0;
  for (int r = 0; r < tp; ++r) {
    const VocabShard s = vocab_shard(vocab, tp, r);
    EXPECT_EQ(s.rows, padded / tp) << "rank " << r << ": the model's wte rows per rank";
    EXPECT_EQ(s.begin, next_begin) << "rank " << r;
    next_begin += s.rows;
  }
  EXPECT_EQ(next_begin, padded) << "the shards cover padded_vocab(V, tp)";
  if (::testing::Test::HasFailure()) return;

  run_local(tp, [&](Communicator& comm) {
    const int r = comm.rank();
    const VocabShard s = vocab_shard(vocab, tp, r);
    const std::vector<float> shard(wte.begin() + s.begin * kC, wte.begin() + (s.begin + s.rows) * kC);
    const std::vector<float> mine = vocab_parallel_embedding(tokens, kT, shard, s, wpe, kC, r);
    Tensor want = Tensor::empty({kB, kT, kC}, DType::kF32);
    layers::embedding_forward(tokens, Tensor::from_floats(shard, {s.rows, kC}), s.begin,
                              r == 0 ? &wpe_t : nullptr, want);
    EXPECT_EQ(mine, want.to_floats()) << "rank " << r << "'s addend";
    if (mine.size() != want.to_floats().size()) return;
    Tensor sum = Tensor::from_floats(mine, {kB, kT, kC});
    comm.all_reduce(sum, ReduceOp::kSum);
    EXPECT_EQ(sum.to_floats(), whole.to_floats()) << "rank " << r << ": the summed embedding";
  });
}

TEST(VocabParallelEmbedding, OneRankIsTheWholeEmbedding) { check(13, 1); }
TEST(VocabParallelEmbedding, RanksSumToTheWholeEmbedding) {
  check(12, 2);
  check(12, 4);
}
TEST(VocabParallelEmbedding, PadsAVocabularyTpDoesNotDivide) {
  check(13, 2);
  check(13, 4);
  check(61, 4);
}

}  // namespace
}  // namespace mixpar::exercises
