// The stages of a pipeline gathered on the first stage: the whole model, every parameter bit
// for bit, so rank 0 can evaluate, sample and save a pipeline run.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "ch07_pipeline/stage_gather.h"
#include "comm/local_backend.h"
#include "model/gpt.h"

namespace mixpar::ch07 {
namespace {

TEST(StageGather, TheFirstStageGetsTheWholeModelBitForBit) {
  const GptConfig c{5, 2, 16, 8, 32};
  GptOptions o;
  o.seed = 9;
  const GptModel whole(c, o);
  for (int p : {2, 3}) {
    std::vector<NamedTensor> got;
    std::mutex mu;
    run_local(p, [&](Communicator& pp) {
      GptOptions so = o;
      so.stage = gpt_stage(c, pp.rank(), p);
      const GptModel stage(c, so);
      std::vector<Tensor> values;
      for (const ParamEntry& e : stage.registry().entries()) values.push_back(e.param);
      std::vector<NamedTensor> full = gather_stages(pp, c, stage.registry(), values);
      std::lock_guard<std::mutex> lock(mu);
      if (pp.rank() == 0) got = std::move(full);
      else EXPECT_TRUE(full.empty());
    });
    ASSERT_EQ(got.size(), whole.registry().entries().size());
    for (const NamedTensor& w : got) {
      const Tensor& want = whole.param(w.name);
      ASSERT_EQ(w.tensor.nbytes(), want.nbytes()) << w.name;
      EXPECT_EQ(std::memcmp(w.tensor.data(), want.data(), want.nbytes()), 0) << w.name;
    }
  }
}

}  // namespace
}  // namespace mixpar::ch07
