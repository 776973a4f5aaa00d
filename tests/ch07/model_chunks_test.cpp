// The model chunks of an interleaved pipeline's rank: chunk c of rank r is virtual stage
// c p + r; the chunks' parameters live in one registry under their global names, start as the
// same parameters of one device, and each chunk's GptModel computes on views of it. The chunks
// of every rank gather into the whole model on rank 0, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "ch07_pipeline/model_chunks.h"
#include "ch07_pipeline/stage_gather.h"
#include "comm/local_backend.h"
#include "model/gpt.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(ModelChunks, ChunkCOfRankRIsVirtualStageCPPlusRAndMoreStagesThanBlocksIsAnInputError) {
  const GptConfig c{8, 2, 16, 8, 32};
  const std::vector<GptStage> r1 = rank_chunk_stages(c, 1, 2, 2);  // stages 1 and 3 of 4
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].index, 1);
  EXPECT_EQ(r1[1].index, 3);
  EXPECT_EQ(r1[0].count, 4);
  EXPECT_EQ(r1[0].first_block, 2);
  EXPECT_EQ(r1[1].first_block, 6);
  EXPECT_TRUE(r1[1].is_last());
  EXPECT_TRUE(rank_chunk_stages(c, 0, 2, 2).front().is_first());
  try {
    rank_chunk_stages(c, 0, 4, 3);
    ADD_FAILURE() << "12 stages for 8 blocks ran";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("12 stages for 8 blocks"), std::string::npos) << e.what();
  }
}

TEST(ModelChunks, OneRegistryUnderGlobalNamesStartsAsOneDeviceAndTheChunksComputeOnIt) {
  const GptConfig c{8, 2, 16, 8, 32};
  GptOptions o;
  o.seed = 5;
  const GptModel whole(c, o);
  const int p = 2, v = 2;
  for (int r = 0; r < p; ++r) {
    const std::vector<GptStage> stages = rank_chunk_stages(c, r, p, v);
    ParamRegistry reg = make_chunks_registry(c, stages);
    reg.allocate(o.dtype);
    reg.initialize(o.seed);
    // Every parameter under its Hugging Face name, bit for bit the whole model's.
    for (const ParamEntry& e : reg.entries()) {
      EXPECT_TRUE(same_bits(e.param, whole.param(e.name))) << "rank " << r << " " << e.name;
    }
    EXPECT_TRUE(reg.contains(r == 0 ? "h.0.ln_1.weight" : "h.2.ln_1.weight"));
    EXPECT_TRUE(reg.contains(r == 0 ? "h.4.mlp.c_fc.weight" : "h.7.mlp.c_proj.bias"));
    EXPECT_EQ(reg.contains("wpe.weight"), r == 0);
    EXPECT_EQ(reg.contains("ln_f.weight"), r == p - 1);
    if (r == p - 1) {
      EXPECT_TRUE(reg.at("wte.weight").holding.tied_copy);  // the head's copy
    }
    std::int64_t held = 0;
    for (int k = 0; k < v; ++k) {
      GptOptions co = o;
      co.stage = stages[std::size_t(k)];
      co.params = &reg;
      GptModel chunk(c, co);
      held += chunk.num_parameters();
      // The chunk's tensors are views of the registry's: what the optimizer writes there is
      // what the chunk computes with.
      for (const ParamEntry& e : chunk.registry().entries()) {
        EXPECT_EQ(e.param.data(), reg.at(e.name).param.data()) << e.name;
        EXPECT_EQ(e.grad.data(), reg.at(e.name).grad.data()) << e.name;
      }
    }
    EXPECT_EQ(held, reg.numel());
  }
}

TEST(StageGather, InterleavedChunksGatherIntoTheWholeModelBitForBit) {
  const GptConfig c{6, 2, 16, 8, 32};
  GptOptions o;
  o.seed = 11;
  const GptModel whole(c, o);
  for (const auto& pv : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}}) {
    // Plain variables, not structured bindings: clang before 16 cannot capture those.
    const int p = pv.first, v = pv.second;
    std::vector<NamedTensor> got;
    std::mutex mu;
    run_local(p, [&](Communicator& pp) {
      ParamRegistry reg = make_chunks_registry(c, rank_chunk_stages(c, pp.rank(), p, v));
      reg.allocate(o.dtype);
      reg.initialize(o.seed);
      std::vector<Tensor> values;
      for (const ParamEntry& e : reg.entries()) values.push_back(e.param);
      std::vector<NamedTensor> full = gather_stages(pp, c, reg, values, v);
      std::lock_guard<std::mutex> lock(mu);
      if (pp.rank() == 0) got = std::move(full);
      else EXPECT_TRUE(full.empty());
    });
    ASSERT_EQ(got.size(), whole.registry().entries().size()) << "p " << p << " v " << v;
    for (const NamedTensor& w : got) {
      EXPECT_TRUE(same_bits(w.tensor, whole.param(w.name))) << "p " << p << " v " << v << " "
                                                            << w.name;
    }
  }
}

}  // namespace
}  // namespace mixpar::ch07
