// GptModel's backward split into B (backward_input: the input gradient) and W
// (backward_weight: the weight gradients), the zero-bubble pipelines' split (chapter 7): B then
// W, with other micro-batches' B's and W's in between, gives the joint backward's gradients and
// input gradient bit for bit in every working dtype and on every kind of stage, and a slot
// waiting for its W holds no more activation memory than after its forward.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "model/gpt.h"
#include "random/philox.h"
#include "tensor/ledger.h"

namespace mixpar {
namespace {

// 3 blocks, 16 wide, 2 heads, 8 positions, 32 tokens.
GptConfig three_blocks() { return {3, 2, 16, 8, 32}; }
constexpr std::int64_t kB = 2, kT = 8;

struct MicroBatch {
  std::vector<std::int32_t> tokens, targets;
  Tensor stage_input, output_grad;  // f32 [B, T, C]: a non-first stage's input, a non-last's seed
};

MicroBatch micro_batch(const GptConfig& c, std::uint64_t seed) {
  MicroBatch mb;
  Philox g(seed);
  for (std::int64_t i = 0; i < kB * kT; ++i) {
    mb.tokens.push_back(static_cast<std::int32_t>(g.next_u32() % c.vocab_size));
    mb.targets.push_back(static_cast<std::int32_t>(g.next_u32() % c.vocab_size));
  }
  for (Tensor* t : {&mb.stage_input, &mb.output_grad}) {
    *t = Tensor::empty({kB, kT, c.n_embd}, DType::kF32, MemCategory::kOther);
    float* p = t->data_as<float>();
    for (std::int64_t i = 0; i < t->numel(); ++i) p[i] = 0.5f * g.next_normal();
  }
  return mb;
}

GptModel make(const GptConfig& c, DType dt, int stage, int stages) {
  GptOptions o;
  o.dtype = dt;
  o.seed = 5;
  o.stage = gpt_stage(c, stage, stages);
  return GptModel(c, o);
}

void forward(GptModel& m, const MicroBatch& mb, int slot) {
  m.prepare(kB, kT, slot);
  if (!m.stage().is_first()) m.stage_input(slot).copy_from(mb.stage_input);
  m.forward(mb.tokens, mb.targets, kB, kT, slot);
}

void seed_output_grad(GptModel& m, const MicroBatch& mb, int slot) {
  m.prepare(kB, kT, slot);
  if (!m.stage().is_last()) m.output_grad().copy_from(mb.output_grad);
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data());
  return {p, p + t.nbytes()};
}

TEST(GptSplitBackward, InputThenWeightIsTheJointBackwardBitForBitInEveryDtypeAndStage) {
  const GptConfig c = three_blocks();
  const std::vector<std::pair<int, int>> stages = {{0, 1}, {0, 3}, {1, 3}, {2, 3}};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [s, count] : stages) {
      GptModel joint = make(c, dt, s, count), split = make(c, dt, s, count);
      const std::vector<MicroBatch> mbs = {micro_batch(c, 1), micro_batch(c, 2),
                                           micro_batch(c, 3)};
      // One device: forward, backward, one micro-batch after another.
      std::vector<std::vector<unsigned char>> joint_dx;
      for (std::size_t k = 0; k < mbs.size(); ++k) {
        forward(joint, mbs[k], 0);
        seed_output_grad(joint, mbs[k], 0);
        joint.backward(0.25f, k > 0, 0);
        if (!joint.stage().is_first()) joint_dx.push_back(bytes_of(joint.input_grad()));
      }
      // Split, a pipeline's order: F0 F1 B0 B1 W0 F2 (into slot 0) W1 B2 W2.
      std::vector<std::vector<unsigned char>> split_dx;
      auto b = [&](int k, int slot) {
        seed_output_grad(split, mbs[std::size_t(k)], slot);
        split.backward_input(0.25f, k > 0, slot);
        if (!split.stage().is_first()) split_dx.push_back(bytes_of(split.input_grad()));
      };
      forward(split, mbs[0], 0);
      forward(split, mbs[1], 1);
      b(0, 0);
      b(1, 1);
      split.backward_weight(false, 0);
      forward(split, mbs[2], 0);
      split.backward_weight(true, 1);
      b(2, 0);
      split.backward_weight(true, 0);
      const std::string at = std::string(dtype_name(dt)) + " stage " + std::to_string(s) +
                             " of " + std::to_string(count);
      EXPECT_EQ(split_dx, joint_dx) << at;
      for (const ParamEntry& e : joint.registry().entries()) {
        EXPECT_EQ(bytes_of(split.grad(e.name)), bytes_of(e.grad)) << at << " " << e.name;
      }
    }
  }
}

// W reads what B wrote over the activations it consumed: the slot grows by nothing.
TEST(GptSplitBackward, ASlotWaitingForItsWeightGradientHoldsWhatItsForwardHeld) {
  const GptConfig c = three_blocks();
  for (auto [s, count] : std::vector<std::pair<int, int>>{{0, 1}, {0, 3}, {1, 3}, {2, 3}}) {
    GptModel m = make(c, DType::kF32, s, count);
    const MicroBatch mb = micro_batch(c, 1);
    forward(m, mb, 0);
    seed_output_grad(m, mb, 0);
    MemoryLedger& ledger = current_ledger();
    const std::size_t after_forward = ledger.live(MemCategory::kActivations);
    ledger.reset_peaks();
    m.backward_input(1.0f, false, 0);
    EXPECT_EQ(ledger.live(MemCategory::kActivations), after_forward) << "stage " << s;
    EXPECT_EQ(ledger.peak(MemCategory::kActivations), after_forward) << "stage " << s;
    m.backward_weight(false, 0);
    EXPECT_EQ(ledger.peak(MemCategory::kActivations), after_forward) << "stage " << s;
  }
}

TEST(GptSplitBackward, OutOfOrderUseIsRefused) {
  const GptConfig c = three_blocks();
  GptModel m = make(c, DType::kF32, 0, 1);
  const MicroBatch mb = micro_batch(c, 1);
  forward(m, mb, 0);
  EXPECT_THROW(m.backward_weight(false, 0), std::logic_error);  // no B yet
  m.backward_input(1.0f, false, 0);
  EXPECT_THROW(forward(m, mb, 0), std::logic_error);  // the slot still holds W's inputs
  m.backward_weight(false, 0);
  EXPECT_THROW(m.backward_weight(false, 0), std::logic_error);  // W twice
  GptOptions o;
  o.recompute = true;  // recompute shares one set of activations between the blocks
  GptModel rc(c, o);
  forward(rc, mb, 0);
  EXPECT_THROW(rc.backward_input(1.0f, false, 0), std::invalid_argument);
}

}  // namespace
}  // namespace mixpar
