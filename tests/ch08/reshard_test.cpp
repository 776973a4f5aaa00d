// Resharding checkpoints (checkpoint_pieces.h): tensors stored in pieces under their global
// names and shapes read back on any other layout. The piece mapping of every holding (tp's
// boxes, the padded vocabulary, ZeRO's flat ranges) returns each global element to its place;
// a checkpoint of a 2 x 2 x 2 ZeRO-1 1F1B run resumes on one device, on a 4 x 1 x 2 grid
// without ZeRO, a dp 2 ZeRO-2 one on one device and one device's on the 3-D grid, each
// continuing one device's trajectory within the 3-D tolerance; a same-layout ZeRO resume stays
// bit-exact; --init-from loads every rank's own pieces of a Hugging Face directory exactly. A
// checkpoint records every dimension of the mesh (cp and any other) and resumes across a cp
// change; one of state version 3 (no cp, model-dpD-tpT-ppP files) still resumes; a mesh with an
// extra dimension of size 1 trains as the four-dimensional one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ch04_ddp/ddp_tolerances.h"
#include "ch08_test_util.h"
#include "checkpoint.h"
#include "checkpoint_pieces.h"
#include "io/safetensors.h"
#include "train_gpt_cli.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

namespace fs = std::filesystem;
using test::random_data;
using test::TempDir;
using test::tiny_config;
using test::train_gpt;

// ---- the piece mapping, on registries alone ------------------------------------------------

// The value every test tensor holds at global element g of key: distinct per key and element.
float value_at(const std::string& key, std::int64_t g) {
  std::uint32_t h = 2166136261u;
  for (char ch : key) h = (h ^ static_cast<unsigned char>(ch)) * 16777619u;
  return static_cast<float>(h % 1000) + 0.001f * static_cast<float>(g);
}

// One simulated rank's tensors of a tp shard, split further into `flat_parts` flat ranges of
// each held tensor (ZeRO's pieces: `part` of them on this rank).
std::vector<HeldTensor> rank_tensors(const GptConfig& config, int tp_rank, int tp, int flat_parts,
                                     int part, bool fill) {
  const ParamRegistry reg = make_gpt2_registry(config, {}, TensorShard{tp_rank, tp});
  std::vector<HeldTensor> out;
  for (const ParamEntry& e : reg.entries()) {
    const std::int64_t n = shape_numel(held_shape(e.shape, e.holding));
    const std::int64_t begin = n * part / flat_parts, end = n * (part + 1) / flat_parts;
    HeldTensor t{e.name, global_shape(e), held_boxes(e), flat_runs(e, begin, end - begin),
                 Tensor::zeros({end - begin}, DType::kF32), tp_rank == 0 || is_tp_part(e.holding)};
    if (fill) {
      float* v = t.data.data_as<float>();
      for (const PieceRun& r : t.runs) {
        for (std::int64_t k = 0; k < r.count; ++k) v[r.local + k] = value_at(e.name, r.global + k);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

TEST(CheckpointPieces, BoxRunsWalkABoxRowByRowAndMergeWholeRows) {
  // Columns 2..3 of a [3, 5] tensor: one run per row.
  EXPECT_EQ(box_runs({3, 5}, {{0, 2}, {3, 2}, 0, 6}),
            (std::vector<PieceRun>{{2, 0, 2}, {7, 2, 2}, {12, 4, 2}}));
  // Rows 1..2 whole: one run; a flat range of it starts where it says.
  EXPECT_EQ(box_runs({3, 5}, {{1, 0}, {2, 5}, 3, 4}), (std::vector<PieceRun>{{8, 0, 4}}));
  // A flat range of a 3-D box: its 4th to 6th elements, (0, 1, 1), (1, 0, 0) and (1, 0, 1).
  EXPECT_EQ(box_runs({2, 3, 4}, {{0, 1, 1}, {2, 2, 2}, 3, 3}),
            (std::vector<PieceRun>{{10, 0, 1}, {17, 1, 2}}));
  EXPECT_THROW(box_runs({3, 5}, {{2, 0}, {2, 5}, 0, 10}), std::invalid_argument);
  EXPECT_THROW(box_runs({3, 5}, {{1, 0}, {INT64_MAX, 5}, 0, 5}), std::invalid_argument);
  EXPECT_THROW(box_runs({3, 5}, {{0, 0}, {1, 5}, 2, 4}), std::invalid_argument);
}

TEST(CheckpointPieces, HeldRunsAreTheHeldElementsWithoutTheVocabularyPadding) {
  const GptConfig config{2, 2, 16, 8, 65};  // vocab 65 over tp 2: one padding row
  for (int r = 0; r < 2; ++r) {
    const ParamRegistry reg = make_gpt2_registry(config, {}, TensorShard{r, 2});
    const ParamEntry& wte = reg.at("wte.weight");
    EXPECT_EQ(global_shape(wte), (Shape{65, 16}));
    std::int64_t n = 0;
    for (const PieceRun& run : held_runs(wte)) n += run.count;
    EXPECT_EQ(n, r == 0 ? 33 * 16 : 32 * 16) << "tp rank " << r;  // 66 rows, the last padding
    const ParamEntry& attn = reg.at("h.0.attn.c_attn.weight");
    ASSERT_EQ(held_boxes(attn).size(), 3u);  // q, k and v columns of this rank's head
    EXPECT_EQ(held_boxes(attn)[1].offset, (Shape{0, 16 + 8 * r}));
  }
}

// Written by every rank of one layout (tp shards, each split in ZeRO flat ranges), read by
// every rank of another: each element of each tensor comes back to its place, exactly once.
TEST(CheckpointPieces, EveryElementReadsBackOnAnyOtherTpAndFlatSplit) {
  const GptConfig config{2, 2, 16, 8, 65};
  struct Split { int tp, flat; };
  for (const Split from : {Split{1, 1}, Split{2, 1}, Split{2, 3}, Split{1, 2}}) {
    TempDir dir;
    std::vector<std::string> files;
    for (int t = 0; t < from.tp; ++t) {
      for (int f = 0; f < from.flat; ++f) {
        files.push_back(dir.file("r" + std::to_string(t) + "-" + std::to_string(f)));
        write_pieces(files.back(), rank_tensors(config, t, from.tp, from.flat, f, true));
      }
    }
    for (const Split to : {Split{1, 1}, Split{2, 1}, Split{2, 2}, Split{1, 3}}) {
      for (int t = 0; t < to.tp; ++t) {
        for (int f = 0; f < to.flat; ++f) {
          std::vector<HeldTensor> mine = rank_tensors(config, t, to.tp, to.flat, f, false);
          read_pieces(files, mine);
          for (const HeldTensor& h : mine) {
            const float* v = h.data.data_as<float>();
            for (const PieceRun& r : h.runs) {
              for (std::int64_t k = 0; k < r.count; ++k) {
                ASSERT_EQ(v[r.local + k], value_at(h.key, r.global + k))
                    << h.key << " element " << r.global + k << ": tp " << from.tp << " x "
                    << from.flat << " -> tp " << to.tp << " x " << to.flat;
              }
            }
          }
        }
      }
    }
  }
}

TEST(CheckpointPieces, AMissingPieceOrAnotherShapeIsRefusedNamingTheTensor) {
  const GptConfig config{2, 2, 16, 8, 64};
  TempDir dir;
  write_pieces(dir.file("a"), rank_tensors(config, 0, 2, 1, 0, true));
  write_pieces(dir.file("b"), rank_tensors(config, 1, 2, 1, 0, true));
  std::vector<HeldTensor> whole = rank_tensors(config, 0, 1, 1, 0, false);
  const std::vector<std::string> half = {dir.file("a")};
  const std::string msg = test::input_error_of([&] { read_pieces(half, whole); });
  EXPECT_NE(msg.find("wte.weight: the checkpoint holds 512 of the 1024 elements"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pieces missing"), std::string::npos) << msg;
  std::vector<HeldTensor> wider = rank_tensors(GptConfig{2, 2, 32, 8, 64}, 0, 1, 1, 0, false);
  const std::vector<std::string> both = {dir.file("a"), dir.file("b")};
  const std::string shape = test::input_error_of([&] { read_pieces(both, wider); });
  EXPECT_NE(shape.find("is [64, 16] in the checkpoint, this run's model has [64, 32]"),
            std::string::npos)
      << shape;
}

// ---- the trainer on threads: resume on another layout ------------------------------------

struct Trajectory {
  std::vector<StepStats> steps;            // rank 0's
  std::vector<std::vector<float>> weights;  // the whole model at the end, HF order
};

std::vector<std::vector<float>> weights_of(GptModel& m) {
  std::vector<std::vector<float>> out;
  for (const NamedTensor& p : m.parameters()) out.push_back(p.tensor.to_floats());
  return out;
}

// Trains c to c.steps (from its latest checkpoint when `resume`) and, given a checkpoint
// directory and no resume, saves there at the end.
Trajectory train(const TrainerConfig& c, const TrainingData& data, bool resume) {
  Trajectory out;
  auto body = [&](Trainer& t, int rank) {
    if (resume) t.resume();
    while (t.step() < c.steps) {
      const StepStats s = t.train_step();
      if (rank == 0) out.steps.push_back(s);
    }
    if (!resume && !c.checkpoint_dir.empty()) t.save_checkpoint();
    t.prepare_eval_model();  // collective: the whole model on rank 0
    if (rank == 0) out.weights = weights_of(t.eval_model());
  };
  test::train_on_each_rank(c, data, body);
  return out;
}

// dp x tp x pp ranks reading `rows` sequences per micro-batch in all (dp x batch), 2
// micro-batches; vocab 255, so a tp grid pads its wte and the padding must stay out of it.
TrainerConfig layout(int dp, int tp, int pp, int zero, std::int64_t rows) {
  TrainerConfig c = tiny_config();
  c.model.vocab_size = 255;
  c.data_order = DataOrder::kSequential;
  c.threads = 1;
  c.dp = dp;
  c.tp = tp;
  c.pp = pp;
  c.ranks = dp * tp * pp;
  c.zero_stage = zero;
  c.batch = rows / dp;
  c.grad_accum = 2;
  c.pipeline_schedule = "1f1b";
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 2, 10};
  c.steps = 10;
  return c;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// The 3-D trainer's tolerances (full_3d_test.cpp derives them): losses and norms within
// chapter 4's 1e-5 relative, each weight tensor within 1e-3 of its largest element.
constexpr double kWeightTol = 1e-3;

// The largest difference of a weight tensor from one device's, over that tensor's largest
// element.
double weight_distance(const Trajectory& a, const Trajectory& one) {
  double worst = 0;
  for (std::size_t p = 0; p < one.weights.size(); ++p) {
    double diff = 0, scale = 0;
    for (std::size_t k = 0; k < one.weights[p].size(); ++k) {
      diff = std::max(diff, std::abs(double(a.weights[p][k]) - one.weights[p][k]));
      scale = std::max(scale, std::abs(double(one.weights[p][k])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

// `from` trains 4 of the 10 steps and saves; `to` resumes there and trains the other 6, which
// must follow one device's 10 straight steps (the same global batches).
void expect_resume_follows_one_device(const TrainerConfig& from_layout,
                                      const TrainerConfig& to_layout, const std::string& what,
                                      TrainerConfig reference = layout(1, 1, 1, 0, 4),
                                      double weight_tol = kWeightTol) {
  const TrainingData data = random_data(1 << 13);
  TempDir dir;
  TrainerConfig from = from_layout, to = to_layout;
  from.checkpoint_dir = to.checkpoint_dir = dir.str();
  from.steps = 4;
  to.resume = true;
  reference.batch = from.dp * from.batch;
  const Trajectory one = train(reference, data, false);
  const Trajectory before = train(from, data, false);
  const Trajectory after = train(to, data, true);
  ASSERT_EQ(before.steps.size(), 4u);
  ASSERT_EQ(after.steps.size(), 6u) << what;
  for (std::size_t i = 0; i < 6; ++i) {
    const StepStats& got = after.steps[i];
    const StepStats& want = one.steps[i + 4];
    EXPECT_EQ(got.step, want.step);
    EXPECT_LE(rel(got.loss, want.loss), ch04::kLossTolerance)
        << what << " step " << got.step << ": " << got.loss << " vs " << want.loss;
    EXPECT_LE(rel(got.grad_norm, want.grad_norm), ch04::kLossTolerance)
        << what << " step " << got.step << ": " << got.grad_norm << " vs " << want.grad_norm;
  }
  ASSERT_EQ(after.weights.size(), one.weights.size());
  for (std::size_t p = 0; p < one.weights.size(); ++p) {
    ASSERT_EQ(after.weights[p].size(), one.weights[p].size()) << what << " parameter " << p;
  }
  const double worst = weight_distance(after, one);
  EXPECT_LE(worst, weight_tol) << what;
  double loss_diff = 0;
  for (std::size_t i = 0; i < 6; ++i) {
    loss_diff = std::max(loss_diff, rel(after.steps[i].loss, one.steps[i + 4].loss));
  }
  std::printf("%s: steps 5-10 within %.2e of one device's losses, weights within %.2e\n",
              what.c_str(), loss_diff, worst);
}

TEST(Reshard, A2x2x2Zero1OneFOneBCheckpointResumesOnOneDevice) {
  expect_resume_follows_one_device(layout(2, 2, 2, 1, 4), layout(1, 1, 1, 0, 4),
                                   "dp 2 x tp 2 x pp 2 ZeRO-1 -> 1 x 1 x 1");
}

TEST(Reshard, A2x2x2Zero1CheckpointResumesOnA4x1x2GridWithoutZero) {
  expect_resume_follows_one_device(layout(2, 2, 2, 1, 4), layout(4, 1, 2, 0, 4),
                                   "dp 2 x tp 2 x pp 2 ZeRO-1 -> dp 4 x tp 1 x pp 2");
}

TEST(Reshard, ADp2Zero2CheckpointResumesOnOneDevice) {
  expect_resume_follows_one_device(layout(2, 1, 1, 2, 4), layout(1, 1, 1, 0, 4),
                                   "dp 2 ZeRO-2 -> 1 x 1 x 1");
}

TEST(Reshard, AOneDeviceCheckpointResumesOnThe3dGrid) {
  TrainerConfig to = layout(2, 2, 2, 1, 4);
  to.pipeline_schedule = "afab";
  expect_resume_follows_one_device(layout(1, 1, 1, 0, 4), to,
                                   "1 x 1 x 1 -> dp 2 x tp 2 x pp 2 ZeRO-1 AFAB");
}

// ZeRO-3's ranks keep only their flat shard of the working parameters, the same partition as
// ZeRO-1's masters: its pieces map the same way (zero_piece_runs).
TEST(Reshard, AZero3CheckpointResumesOnOneDeviceAndOneDevicesOnIt) {
  expect_resume_follows_one_device(layout(2, 1, 1, 3, 4), layout(1, 1, 1, 0, 4),
                                   "dp 2 ZeRO-3 -> 1 x 1 x 1");
  expect_resume_follows_one_device(layout(1, 1, 1, 0, 4), layout(4, 1, 1, 3, 4),
                                   "1 x 1 x 1 -> dp 4 ZeRO-3");
}

// ZeRO-2 and 3 over tensor-parallel shards: each rank's pieces are of its tp shard's flat
// partition, mapped to the global tensors like ZeRO-1's (zero_piece_runs over held_boxes), so a
// tp 2 x dp 2 checkpoint resumes on one device and on another layout, and one device's on it.
TEST(Reshard, ATpZero2And3CheckpointResumesOnOneDeviceAndOtherLayouts) {
  expect_resume_follows_one_device(layout(2, 2, 1, 2, 4), layout(1, 1, 1, 0, 4),
                                   "dp 2 x tp 2 ZeRO-2 -> 1 x 1 x 1");
  expect_resume_follows_one_device(layout(2, 2, 1, 3, 4), layout(4, 1, 1, 1, 4),
                                   "dp 2 x tp 2 ZeRO-3 -> dp 4 ZeRO-1");
  expect_resume_follows_one_device(layout(1, 1, 1, 0, 4), layout(2, 2, 1, 3, 4),
                                   "1 x 1 x 1 -> dp 2 x tp 2 ZeRO-3");
}

// An interleaved pipeline's rank holds v model chunks in one registry under global names: its
// pieces map like any stage's, so its checkpoint resumes on one device and one device's on it.
TEST(Reshard, AnInterleavedCheckpointResumesOnOneDeviceAndOneDevicesOnIt) {
  const auto interleaved = [](int dp, int zero) {
    TrainerConfig c = layout(dp, 1, 2, zero, 4);
    c.model.n_layer = 4;  // 2 ranks x 2 chunks, one block each
    c.pipeline_schedule = "interleaved";
    c.virtual_stages = 2;
    return c;
  };
  const auto one = [] {
    TrainerConfig c = layout(1, 1, 1, 0, 4);
    c.model.n_layer = 4;
    return c;
  };
  // Four blocks at lr 1e-2 part from one device's weights by more than the 2-block model's
  // 1e-3 on this grid itself (measured 2.0e-3 straight, losses within 1e-7): the resumed run
  // must add nothing to what the layout departs by.
  const TrainingData data = random_data(1 << 13);
  const double own = weight_distance(train(interleaved(2, 1), data, false), train(one(), data, false));
  expect_resume_follows_one_device(interleaved(2, 1), one(),
                                   "dp 2 x pp 2 x v 2 interleaved ZeRO-1 -> 1 x 1 x 1", one(),
                                   std::max(kWeightTol, 1.25 * own));
  expect_resume_follows_one_device(one(), interleaved(1, 0),
                                   "1 x 1 x 1 -> pp 2 x v 2 interleaved", one());
}

// Resharding does not cost the same-layout resume its exactness: under ZeRO-1, 2 and 3 (whose
// shards were not checkpointed before), over tp shards too, 4 + 6 steps are 10 straight steps
// bit for bit.
TEST(Reshard, ASameLayoutZeroResumeIsBitExact) {
  const TrainingData data = random_data(1 << 13);
  // bf16 too: the working copy is recast from the loaded masters, piece by piece, then
  // gathered (ZeRO-1), or kept as this rank's shard (ZeRO-3).
  const auto bf16 = [](TrainerConfig c) {
    c.dtype = DType::kBF16;
    return c;
  };
  for (const TrainerConfig& c : {layout(2, 2, 2, 1, 4), layout(2, 1, 1, 2, 4), layout(2, 1, 1, 3, 4),
                                 bf16(layout(2, 2, 2, 1, 4)), bf16(layout(2, 1, 1, 3, 4)),
                                 layout(2, 2, 1, 2, 4), bf16(layout(2, 2, 1, 3, 4))}) {
    TempDir dir;
    TrainerConfig first = c, second = c;
    first.checkpoint_dir = second.checkpoint_dir = dir.str();
    first.steps = 4;
    second.resume = true;
    const Trajectory straight = train(c, data, false);
    train(first, data, false);
    const Trajectory resumed = train(second, data, true);
    ASSERT_EQ(resumed.steps.size(), 6u);
    for (std::size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(resumed.steps[i].loss, straight.steps[i + 4].loss) << "step " << i + 5;
      EXPECT_EQ(resumed.steps[i].grad_norm, straight.steps[i + 4].grad_norm) << "step " << i + 5;
    }
    EXPECT_EQ(resumed.weights, straight.weights);
  }
}

// The loader's place is a global sample (token_loader.h): a checkpoint of dp 4 resumes at dp 2
// with twice the micro-batches, or at dp 8 with twice the rows per micro-batch, and reads
// exactly the samples one device reads (in the shuffled order, which is drawn per window of
// the saver's rows), so its losses follow one device's.
TEST(Reshard, ADp4CheckpointResumesAtDp2OrDp8WithTheSameSamplesPerStep) {
  const auto shuffled = [](TrainerConfig c, std::int64_t accum) {
    c.data_order = DataOrder::kShuffled;
    c.grad_accum = accum;
    return c;
  };
  const TrainerConfig from = shuffled(layout(4, 1, 1, 0, 8), 2);  // 4 x 2 rows x 2 = 16
  const TrainerConfig one = shuffled(layout(1, 1, 1, 0, 8), 2);
  expect_resume_follows_one_device(from, shuffled(layout(2, 1, 1, 0, 4), 4),
                                   "dp 4 x batch 2 x accum 2 -> dp 2 x batch 2 x accum 4", one);
  expect_resume_follows_one_device(from, shuffled(layout(8, 1, 1, 0, 16), 1),
                                   "dp 4 x batch 2 x accum 2 -> dp 8 x batch 2 x accum 1", one);
}

TEST(Reshard, ALayoutThatChangesTheSamplesPerStepIsRefusedNamingBoth) {
  const TrainingData data = random_data(1 << 13);
  TempDir dir;
  TrainerConfig from = layout(2, 1, 1, 1, 4);
  from.checkpoint_dir = dir.str();
  from.steps = 2;
  train(from, data, false);
  TrainerConfig to = layout(1, 1, 1, 0, 2);  // 2 rows instead of 4
  to.checkpoint_dir = dir.str();
  const std::string msg = test::input_error_of([&] { Trainer(to, data).resume(); });
  EXPECT_NE(msg.find("dp 2 x batch 2 x grad-accum 2 = 8 sequences per step, this run has dp 1 x "
                     "batch 2 x grad-accum 2 = 4"),
            std::string::npos)
      << msg;
}

// ---- every dimension of the mesh in the checkpoint ----------------------------------------

TrainerConfig with_cp(TrainerConfig c, int cp) {
  c.cp = cp;
  c.ranks *= cp;
  return c;
}

Json state_of(const std::string& checkpoint_dir) {
  const std::string path = latest_checkpoint(checkpoint_dir) + "/trainer_state.json";
  return Json::parse(test::read_bytes(path), path);
}

// A tp 2 x cp 2 checkpoint records every dimension of its mesh, cp included, outermost first,
// and each file names its writer's coordinate on every one (the cp ranks hold the same
// parameters: cp rank 0 writes); it resumes with another cp (dp 2 x cp 1, the same rows per
// micro-batch), and one device's checkpoint resumes on dp 2 x cp 2, each following one device.
TEST(Reshard, ACheckpointRecordsCpAndResumesAcrossACpChange) {
  {
    const TrainingData data = random_data(1 << 13);
    TempDir dir;
    TrainerConfig c = with_cp(layout(1, 2, 1, 0, 4), 2);
    c.checkpoint_dir = dir.str();
    c.steps = 2;
    train(c, data, false);
    const Json st = state_of(dir.str());
    EXPECT_EQ(st.at("version").as_int(), 4);
    std::vector<std::string> keys;
    for (const auto& [key, value] : st.at("layout").as_object()) keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"pp", "dp", "cp", "tp", "zero_stage"}));
    EXPECT_EQ(st.at("layout").at("cp").as_int(), 2);
    std::vector<std::string> files;
    for (const Json& shard : st.at("shards").as_array()) {
      EXPECT_EQ(shard.at("cp").as_int(), 0);
      files.push_back(shard.at("parameters").as_string());
    }
    EXPECT_EQ(files, (std::vector<std::string>{"model-pp0-dp0-cp0-tp0.safetensors",
                                               "model-pp0-dp0-cp0-tp1.safetensors"}));
  }
  expect_resume_follows_one_device(with_cp(layout(1, 2, 1, 0, 4), 2), layout(2, 1, 1, 0, 4),
                                   "tp 2 x cp 2 -> dp 2");
  expect_resume_follows_one_device(layout(1, 1, 1, 0, 4), with_cp(layout(2, 1, 1, 1, 4), 2),
                                   "1 x 1 x 1 -> dp 2 x cp 2 ZeRO-1");
}

// A checkpoint written before the mesh (state version 3: a layout of dp, tp, pp without cp,
// files model-dpD-tpT-ppP.safetensors) still resumes, bit for bit on its own layout. Made here
// from a fresh one by writing its state and file names as version 3 wrote them, under a
// manifest over the files as they then are.
TEST(Reshard, AVersion3CheckpointWithoutCpStillResumesBitForBit) {
  const TrainingData data = random_data(1 << 13);
  const TrainerConfig c = layout(2, 2, 1, 1, 4);
  TempDir dir;
  TrainerConfig first = c, second = c;
  first.checkpoint_dir = second.checkpoint_dir = dir.str();
  first.steps = 4;
  second.resume = true;
  const Trajectory straight = train(c, data, false);
  train(first, data, false);
  const std::string ck = latest_checkpoint(dir.str());
  Json st = state_of(dir.str());
  const auto old_name = [](const char* what, const Json& shard) {
    return std::string(what) + "-dp" + std::to_string(shard.at("dp").as_int()) + "-tp" +
           std::to_string(shard.at("tp").as_int()) + "-pp" +
           std::to_string(shard.at("pp").as_int()) + ".safetensors";
  };
  Json shards = Json::array();
  for (const Json& shard : st.at("shards").as_array()) {
    Json old = Json::object();
    for (const char* key : {"rank", "dp", "tp", "pp"}) old.set(key, shard.at(key));
    for (const auto& [key, what] : {std::pair<const char*, const char*>{"parameters", "model"},
                                    {"moments", "optimizer"}}) {
      fs::rename(ck + "/" + shard.at(key).as_string(), ck + "/" + old_name(what, shard));
      old.set(key, old_name(what, shard));
    }
    shards.push_back(std::move(old));
  }
  Json layout3 = Json::object();
  for (const char* key : {"dp", "tp", "pp", "zero_stage"}) layout3.set(key, st.at("layout").at(key));
  st.set("version", std::int64_t{3});
  st.set("layout", std::move(layout3));
  st.set("shards", std::move(shards));
  test::write_bytes(ck + "/trainer_state.json", st.dump(2) + "\n");
  Json manifest = Json::parse(test::read_bytes(ck + "/manifest.json"), "manifest");
  Json files = Json::array();
  for (const auto& entry : fs::directory_iterator(ck)) {
    const std::string name = entry.path().filename().string();
    if (name == "manifest.json") continue;
    Json f = Json::object();
    f.set("name", name);
    f.set("bytes", static_cast<std::int64_t>(fs::file_size(entry.path())));
    f.set("fnv1a64", file_checksum(entry.path().string()));
    files.push_back(std::move(f));
  }
  manifest.set("files", std::move(files));
  test::write_bytes(ck + "/manifest.json", manifest.dump(2) + "\n");
  ASSERT_TRUE(fs::exists(ck + "/model-dp1-tp1-pp0.safetensors"));

  const Trajectory resumed = train(second, data, true);
  ASSERT_EQ(resumed.steps.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[i + 4].loss) << "step " << i + 5;
  }
  EXPECT_EQ(resumed.weights, straight.weights);
}

// "Adding a dimension touches the mesh, its chapter and the factory": a mesh with a fifth
// named dimension of size 1 ("ep", placed inside dp) trains, checkpoints and resumes exactly as
// the four-dimensional one (the same losses, norms and weights bit for bit), and the
// checkpoint records it; a degree above 1, which no strategy splits over yet, is refused.
TEST(Reshard, AMeshWithAnExtraDimensionOfSizeOneTrainsAndResumesUnchanged) {
  const TrainingData data = random_data(1 << 13);
  const TrainerConfig four = with_cp(layout(2, 1, 1, 1, 4), 2);
  TrainerConfig five = four;
  five.extra_dims.push_back({{"ep", 1, false}, "dp"});
  const Trajectory want = train(four, data, false);
  const Trajectory got = train(five, data, false);
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t i = 0; i < want.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].loss, want.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(got.steps[i].grad_norm, want.steps[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_EQ(got.weights, want.weights);
  // Its checkpoint names ep, and the four-dimensional run resumes it bit for bit.
  TempDir dir;
  TrainerConfig first = five, second = four;
  first.checkpoint_dir = second.checkpoint_dir = dir.str();
  first.steps = 4;
  second.resume = true;
  train(first, data, false);
  EXPECT_EQ(state_of(dir.str()).at("layout").at("ep").as_int(), 1);
  const Trajectory resumed = train(second, data, true);
  ASSERT_EQ(resumed.steps.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(resumed.steps[i].loss, want.steps[i + 4].loss) << "step " << i + 5;
  }
  EXPECT_EQ(resumed.weights, want.weights);
  TrainerConfig two = five;
  two.extra_dims[0].dim.size = 2;
  two.ranks *= 2;
  EXPECT_EQ(test::input_error_of([&] { validate(two); }),
            "mesh rule unused-dimension: ep 2: no strategy of this trainer splits over ep (its "
            "degree must be 1)");
}

// ---- --init-from on sharded layouts ------------------------------------------------------

// A Hugging Face directory of a trained model (vocab 255), and its tensors.
std::string trained_hf(const TempDir& dir) {
  TrainerConfig c = layout(1, 1, 1, 0, 4);
  c.steps = 3;
  Trainer t(c, random_data(1 << 13));
  for (int i = 0; i < 3; ++i) t.train_step();
  t.save_hf(dir.file("hf"));
  return dir.file("hf");
}

// Every rank of the grid loads its own pieces of the directory: the model it gathers before
// any step is the directory's, bit for bit, and its training follows --tp 1 --pp 1's from the
// same directory within the 3-D tolerance.
TEST(Reshard, InitFromLoadsEachRanksPiecesOfAHuggingFaceDirectory) {
  TempDir dir;
  const std::string hf = trained_hf(dir);
  const SafetensorsReader file(hf + "/model.safetensors");
  const TrainingData data = random_data(1 << 13);
  TrainerConfig one = layout(1, 1, 1, 0, 4);
  one.init_from = hf;
  one.steps = 4;
  const Trajectory ref = train(one, data, false);
  for (TrainerConfig c : {layout(1, 2, 2, 0, 4), layout(2, 2, 2, 1, 4), layout(2, 1, 1, 2, 4),
                          layout(2, 1, 1, 3, 4)}) {
    c.init_from = hf;
    const std::string what = "dp " + std::to_string(c.dp) + " x tp " + std::to_string(c.tp) +
                             " x pp " + std::to_string(c.pp) + " ZeRO-" +
                             std::to_string(c.zero_stage);
    // Before any step: the gathered model is the file's.
    c.steps = 0;
    const Trajectory start = train(c, data, false);
    const ParamRegistry whole = make_gpt2_registry(c.model);
    const auto entries = whole.entries();
    ASSERT_EQ(start.weights.size(), entries.size());
    for (std::size_t p = 0; p < entries.size(); ++p) {
      const Tensor stored = file.load("transformer." + entries[p].name, MemCategory::kOther);
      EXPECT_EQ(start.weights[p], stored.to_floats()) << what << ": " << entries[p].name;
    }
    c.steps = 4;
    const Trajectory run = train(c, data, false);
    ASSERT_EQ(run.steps.size(), ref.steps.size());
    for (std::size_t i = 0; i < ref.steps.size(); ++i) {
      EXPECT_LE(rel(run.steps[i].loss, ref.steps[i].loss), ch04::kLossTolerance)
          << what << " step " << i + 1 << ": " << run.steps[i].loss << " vs "
          << ref.steps[i].loss;
    }
  }
}

// ---- the command line --------------------------------------------------------------------

const std::string kRun = "--n-layer 2 --n-head 2 --n-embd 16 --seq 8 --threads 1 --warmup 1 "
                         "--grad-accum 2 --lr-schedule constant ";

// A checkpoint of train_gpt on a dp 2 x tp 2 x pp 2 ZeRO-1 grid resumes on one process, and
// --save from any layout writes the one Hugging Face directory: the same file either way.
TEST(TrainGptReshard, ACheckpointOfThe3dGridResumesOnOneRankAndSavesOneHfDirectory) {
  TempDir d;
  const std::string grid = "--ranks 8 --dp 2 --tp 2 --pp 2 --zero-stage 1 --batch 2 ";
  const test::CliRun first =
      train_gpt(d, kRun + grid + "--steps 2 --checkpoint-dir " + d.file("ck"));
  ASSERT_EQ(first.code, 0) << first.err;
  const test::CliRun on_one = train_gpt(d, kRun + "--batch 4 --steps 4 --resume --checkpoint-dir " +
                                               d.file("ck") + " --save " + d.file("one"));
  ASSERT_EQ(on_one.code, 0) << on_one.err;
  EXPECT_TRUE(fs::exists(d.file("one") + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(d.file("one") + "/config.json"));
}

#if defined(MIXPAR_MPIEXEC)
using test::mpirun_train_gpt;

// Processes write their own pieces: a dp 2 x pp 2 ZeRO-1 checkpoint of mpirun -np 4 resumed on
// threads of another layout (tp 2 x pp 2) logs what the threads log resuming the threads'
// checkpoint of the same run.
TEST(TrainGptReshardMpi, ProcessesCheckpointResumesOnThreadsOfAnotherLayout) {
  TempDir d;
  const std::string grid = "--dp 2 --pp 2 --zero-stage 1 --batch 2 --steps 2 ";
  const test::CliRun mpi =
      test::run_shell(d, mpirun_train_gpt(4) + kRun + grid + "--checkpoint-dir " + d.file("mpi"));
  ASSERT_EQ(mpi.code, 0) << mpi.err;
  ASSERT_EQ(train_gpt(d, kRun + "--ranks 4 " + grid + "--checkpoint-dir " + d.file("thr")).code,
            0);
  const std::string resume = kRun + "--ranks 4 --tp 2 --pp 2 --batch 4 --steps 4 --resume ";
  ASSERT_EQ(train_gpt(d, resume + "--checkpoint-dir " + d.file("mpi") + " --log-jsonl " +
                             d.file("mpi.jsonl")).code,
            0);
  ASSERT_EQ(train_gpt(d, resume + "--checkpoint-dir " + d.file("thr") + " --log-jsonl " +
                             d.file("thr.jsonl")).code,
            0);
  const std::vector<Json> a = test::read_jsonl(d.file("mpi.jsonl"));
  const std::vector<Json> b = test::read_jsonl(d.file("thr.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  int steps = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].contains("loss") || !a[i].contains("step")) continue;
    EXPECT_EQ(a[i].at("loss").as_double(), b[i].at("loss").as_double()) << "line " << i;
    ++steps;
  }
  EXPECT_EQ(steps, 2);
}
#endif

}  // namespace
}  // namespace mixpar::ch08
