// Gathering a tensor-parallel model's shards gives back the full model it was cut from, with
// the vocabulary's padding rows dropped.
#include <gtest/gtest.h>

#include "ch06_tensor_parallel/tp_collectives.h"
#include "ch06_tensor_parallel/tp_gather.h"
#include "comm/local_backend.h"
#include "model/gpt.h"

namespace mixpar::ch06 {
namespace {

TEST(TpGather, ShardsGatherIntoTheFullUnpaddedModel) {
  const GptConfig c{2, 4, 32, 16, 61};  // 61 tokens: tp 2 pads wte to 62 rows
  GptModel whole(c);
  run_local(2, [&](Communicator& comm) {
    TpCollectives ops(comm);
    GptOptions o;
    o.tp = TensorShard{comm.rank(), 2};
    o.tp_ops = &ops;
    GptModel mine(c, o);
    EXPECT_EQ(mine.param("wte.weight").dim(0), 31);
    const std::vector<NamedTensor> full =
        gather_full_tensors(comm, mine.registry(), tensors_of(mine.parameters()), c.vocab_size);
    ASSERT_EQ(full.size(), whole.parameters().size());
    for (const NamedTensor& t : full) {
      const Tensor& want = whole.param(t.name);
      ASSERT_EQ(t.tensor.shape(), want.shape()) << t.name;
      EXPECT_EQ(t.tensor.to_floats(), want.to_floats()) << t.name;
    }
  });
}

}  // namespace
}  // namespace mixpar::ch06
