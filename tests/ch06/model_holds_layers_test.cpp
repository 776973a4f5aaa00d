// A tensor-parallel GptModel's blocks hold this chapter's ColumnParallelLinear and
// RowParallelLinear themselves, built once on the model's shards (handles on the registry's
// tensors): the same objects the lesson builds by hand, and on the same input they give the
// lesson's layer's output and gradients bit for bit. One rank holds common/model's
// DenseLinear behind the same interface (model/block_linear.h).
#include <gtest/gtest.h>

#include "ch06_tensor_parallel/column_parallel_linear.h"
#include "ch06_tensor_parallel/row_parallel_linear.h"
#include "ch06_tensor_parallel/tp_collectives.h"
#include "comm/local_backend.h"
#include "model/gpt.h"
#include "random/philox.h"

namespace mixpar::ch06 {
namespace {

constexpr std::int64_t kN = 6;  // rows of the layers' input

Tensor normal(Shape s, std::uint64_t seed) {
  Tensor t = Tensor::empty(std::move(s), DType::kF32);
  Philox gen(seed);
  fill_normal(t, gen, 0.0f, 1.0f);
  return t;
}

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }

// The layer's tensors are the registry's own (not copies).
bool same_storage(const Tensor& a, const Tensor& b) {
  return a.data_as<float>() == b.data_as<float>() && a.numel() == b.numel();
}

TEST(TpModel, OneRankBlocksHoldADenseLinear) {
  const GptModel whole(GptConfig{2, 4, 32, 16, 61});
  const BlockLinears& l = whole.block_linears(1);
  for (const BlockLinear* layer : {l.attn.get(), l.attn_proj.get(), l.fc.get(), l.fc_proj.get()}) {
    EXPECT_NE(dynamic_cast<const DenseLinear*>(layer), nullptr);
  }
}

TEST(TpModel, BlocksHoldChapter6sLayersThatEqualTheLessonsLayerBitForBit) {
  const GptConfig c{2, 4, 32, 16, 61};
  const std::int64_t C = c.n_embd, tp = 2;
  const GptModel whole(c);  // the unsplit model, the same seed
  const Tensor x = normal({kN, C}, 11), dh = normal({kN, 4 * C / tp}, 12);
  const Tensor dy = normal({kN, C}, 13);
  run_local(static_cast<int>(tp), [&](Communicator& comm) {
    const int r = comm.rank();
    TpCollectives group(comm);
    GptOptions o;
    o.tp = TensorShard{r, static_cast<int>(tp)};
    o.tp_ops = &group;
    const GptModel mine(c, o);
    const BlockLinears& l = mine.block_linears(1);
    const auto* attn = dynamic_cast<const ColumnParallelLinear*>(l.attn.get());
    const auto* fc = dynamic_cast<const ColumnParallelLinear*>(l.fc.get());
    const auto* attn_proj = dynamic_cast<const RowParallelLinear*>(l.attn_proj.get());
    const auto* fc_proj = dynamic_cast<const RowParallelLinear*>(l.fc_proj.get());
    ASSERT_NE(attn, nullptr) << "attn.c_attn is chapter 6's ColumnParallelLinear";
    ASSERT_NE(fc, nullptr) << "mlp.c_fc is chapter 6's ColumnParallelLinear";
    ASSERT_NE(attn_proj, nullptr) << "attn.c_proj is chapter 6's RowParallelLinear";
    ASSERT_NE(fc_proj, nullptr) << "mlp.c_proj is chapter 6's RowParallelLinear";
    EXPECT_TRUE(same_storage(fc->w, mine.param("h.1.mlp.c_fc.weight")));
    EXPECT_TRUE(same_storage(fc->dw, mine.grad("h.1.mlp.c_fc.weight")));
    EXPECT_TRUE(same_storage(fc_proj->b, mine.param("h.1.mlp.c_proj.bias")));
    EXPECT_TRUE(same_storage(attn->w, mine.param("h.1.attn.c_attn.weight")));
    EXPECT_TRUE(same_storage(attn_proj->db, mine.grad("h.1.attn.c_proj.bias")));

    // The lesson's pair, built by hand from the unsplit model's weights (Megatron's split:
    // this rank's columns of c_fc, its rows of c_proj, the whole bias).
    ColumnParallelLinear lesson_fc{group, column_block(whole.param("h.1.mlp.c_fc.weight"), r, 2),
                                   column_block(whole.param("h.1.mlp.c_fc.bias"), r, 2),
                                   empty_like(fc->dw), empty_like(fc->db)};
    RowParallelLinear lesson_proj{group, row_block(whole.param("h.1.mlp.c_proj.weight"), r, 2),
                                  whole.param("h.1.mlp.c_proj.bias").clone(),
                                  empty_like(fc_proj->dw), empty_like(fc_proj->db)};
    EXPECT_EQ(fc->w.to_floats(), lesson_fc.w.to_floats()) << "the model's shard is the block";
    EXPECT_EQ(fc_proj->w.to_floats(), lesson_proj.w.to_floats());

    // Forward: the held layer and the lesson's on the same input (f, g collective: both ranks
    // run every call in the same order).
    Tensor h_model = Tensor::empty({kN, 4 * C / tp}, DType::kF32), h_lesson = empty_like(h_model);
    Tensor y_model = Tensor::empty({kN, C}, DType::kF32), y_lesson = empty_like(y_model);
    l.fc->forward(x, h_model);
    lesson_fc.forward(x, h_lesson);
    l.fc_proj->forward(h_model, y_model);
    lesson_proj.forward(h_lesson, y_lesson);
    EXPECT_EQ(h_model.to_floats(), h_lesson.to_floats()) << "rank " << r << ": c_fc forward";
    EXPECT_EQ(y_model.to_floats(), y_lesson.to_floats()) << "rank " << r << ": c_proj forward";

    // Backward, B then W through the interface, against the lesson's joint backward: the
    // input gradients (f's all-reduce included) and the weight gradients, which the held
    // layer writes into the model's registry.
    Tensor dx_model = Tensor::empty({kN, C}, DType::kF32), dx_lesson = empty_like(dx_model);
    l.fc->backward_input(dh, dx_model);
    l.fc->backward_weight(x, dh, false);
    lesson_fc.backward(x, dh, &dx_lesson);
    EXPECT_EQ(dx_model.to_floats(), dx_lesson.to_floats()) << "rank " << r << ": c_fc dx";
    EXPECT_EQ(mine.grad("h.1.mlp.c_fc.weight").to_floats(), lesson_fc.dw.to_floats());
    EXPECT_EQ(mine.grad("h.1.mlp.c_fc.bias").to_floats(), lesson_fc.db.to_floats());
    l.fc_proj->backward_weight(h_model, dy, false);
    lesson_proj.backward(h_lesson, dy, nullptr);
    EXPECT_EQ(mine.grad("h.1.mlp.c_proj.weight").to_floats(), lesson_proj.dw.to_floats());
    EXPECT_EQ(mine.grad("h.1.mlp.c_proj.bias").to_floats(), lesson_proj.db.to_floats());
  });
}

TEST(TpModel, SequenceParallelBlocksHoldChapter6sLayers) {
  const GptConfig c{2, 4, 32, 16, 61};
  run_local(2, [&](Communicator& comm) {
    TpCollectives group(comm);
    GptOptions o;
    o.tp = TensorShard{comm.rank(), 2};
    o.tp_ops = &group;
    o.sequence_parallel = true;
    const GptModel mine(c, o);
    const SpBlockLinears& l = mine.sp_block_linears(0);
    EXPECT_NE(dynamic_cast<const ColumnParallelLinear*>(l.attn.get()), nullptr);
    EXPECT_NE(dynamic_cast<const RowParallelLinear*>(l.attn_proj.get()), nullptr);
    EXPECT_NE(dynamic_cast<const ColumnParallelLinear*>(l.fc.get()), nullptr);
    EXPECT_NE(dynamic_cast<const RowParallelLinear*>(l.fc_proj.get()), nullptr);
  });
}

}  // namespace
}  // namespace mixpar::ch06
