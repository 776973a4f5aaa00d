// train_gpt's interleaved pipeline (chapter 7, Megatron's interleaved 1F1B): each rank holds v
// model chunks (chunk c of rank r = virtual stage c p + r) in one registry, and the step's
// gradient sync, found-inf vote, count-once norm and tied-embedding sum cover every chunk. The
// chunks train like one device accumulating the same micro-batches and like 1F1B on the same
// ranks; every rank traces its F and B spans per chunk; --save gathers every chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "train_gpt_cli.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::TempDir;
using test::tiny_config;

TrainerConfig pipeline(int pp, std::int64_t n_layer, const std::string& schedule, int v,
                       std::int64_t m) {
  TrainerConfig c = tiny_config();
  c.model = GptConfig{n_layer, 2, 16, 8, 256};
  c.data_order = DataOrder::kSequential;
  c.steps = 4;
  c.grad_accum = m;
  c.threads = 1;
  c.ranks = c.pp = pp;
  c.dp = 1;
  c.pipeline_schedule = schedule;
  c.virtual_stages = v;
  return c;
}

TrainerConfig one_device(TrainerConfig c) {
  c.ranks = c.pp = c.dp = c.tp = 1;
  c.pipeline_schedule = "1f1b";
  c.virtual_stages = 1;
  return c;
}

struct TrainedRun {
  std::vector<std::vector<StepStats>> logs;             // by rank
  std::map<std::string, std::vector<float>> weights;    // rank 0's whole model after the steps
  std::vector<std::vector<std::string>> spans;          // by rank, the first step's
};

TrainedRun run(const TrainerConfig& c, const TrainingData& data) {
  TrainedRun out;
  out.logs.resize(static_cast<std::size_t>(c.ranks));
  out.spans.resize(static_cast<std::size_t>(c.ranks));
  std::mutex mu;
  auto train = [&](Trainer& t, std::size_t r) {
    while (t.step() < c.steps) {
      out.logs[r].push_back(t.train_step());
      if (t.step() == 1) {
        for (const TraceSpan& s : t.take_spans()) out.spans[r].push_back(s.name);
      }
    }
    t.prepare_eval_model();  // collective: the chunks gathered on rank 0
    if (r != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    for (const ParamEntry& e : t.eval_model().registry().entries()) {
      out.weights[e.name] = e.param.to_floats();
    }
  };
  test::train_on_each_rank(c, data,
                           [&](Trainer& t, int rank) { train(t, static_cast<std::size_t>(rank)); });
  return out;
}

double max_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double gap = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, std::abs(double(a[i]) - double(b[i])));
  }
  return gap;
}

// p = 2 (4 blocks, v = 2) and p = 4 (8 blocks, v = 2), m = p and 2p. Against 1F1B on the same
// ranks: the same blocks accumulate the same micro-batches in the same order (0 .. m - 1 on
// every chunk) and the tied wte's halves are summed once per step in both, so every gradient is
// 1F1B's bit for bit; the norm's FP64 sum adds the same squares grouped by rank (each rank's
// chunks, then over the world), another grouping: within 1e-12. The clip coefficient it gives
// scales the FP32 gradients to the same values here: the losses and final weights are 1F1B's
// bit for bit. Against one device: the first step's loss bit for bit (the same forward), then
// the wte rounding of PipelineTrainer (its halves summed once per step instead of in place per
// micro-batch) carried through AdamW: losses within 1e-6 and norms within 1e-5 relative, every
// final weight within 1e-5 (measured: 4.4e-6 at most, after 4 steps at lr up to 1e-2).
TEST(InterleavedTrainer, ChunksTrainLikeOneDeviceAccumulatingTheSameMicroBatches) {
  const TrainingData data = random_data(4096);
  for (auto [p, layers] : {std::pair<int, std::int64_t>{2, 4}, {4, 8}}) {
    for (std::int64_t m : {std::int64_t(p), std::int64_t(2 * p)}) {
      const TrainerConfig il = pipeline(p, layers, "interleaved", 2, m);
      const TrainedRun ref = run(one_device(il), data);
      const TrainedRun ofob = run(pipeline(p, layers, "1f1b", 1, m), data);
      const TrainedRun got = run(il, data);
      const std::string at = "p " + std::to_string(p) + " m " + std::to_string(m);
      for (std::size_t r = 0; r < got.logs.size(); ++r) {
        for (std::size_t i = 0; i < ref.logs[0].size(); ++i) {
          const StepStats& g = got.logs[r][i];
          const StepStats& one = ref.logs[0][i];
          const std::string step = at + " rank " + std::to_string(r) + " step " +
                                   std::to_string(i + 1);
          EXPECT_EQ(g.loss, ofob.logs[r][i].loss) << step;
          EXPECT_LE(std::abs(g.grad_norm - ofob.logs[r][i].grad_norm), 1e-12 * g.grad_norm)
              << step;
          if (i == 0) {
            EXPECT_EQ(g.loss, one.loss) << step;
          }
          EXPECT_LE(std::abs(g.loss - one.loss), 1e-6 * std::abs(one.loss)) << step;
          EXPECT_LE(std::abs(g.grad_norm - one.grad_norm), 1e-5 * one.grad_norm) << step;
        }
      }
      ASSERT_EQ(got.weights.size(), ref.weights.size()) << at;
      for (const auto& [name, w] : ref.weights) {
        EXPECT_EQ(got.weights.at(name), ofob.weights.at(name)) << at << " " << name;
        EXPECT_LE(max_gap(got.weights.at(name), w), 1e-5) << at << " " << name;
      }
    }
  }
}

// bf16 and fp16 (the loss scaler and its found-inf vote over every chunk of every rank): the
// interleaved run logs 1F1B's losses, loss scales and skipped steps bit for bit, its norms
// within 1e-12 (the squares grouped by rank, as above).
TEST(InterleavedTrainer, SixteenBitRunsLogOneFOneBsLossesNormsAndScales) {
  const TrainingData data = random_data(4096);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    TrainerConfig il = pipeline(2, 4, "interleaved", 2, 4);
    TrainerConfig ofob = pipeline(2, 4, "1f1b", 1, 4);
    il.dtype = ofob.dtype = dt;
    const TrainedRun a = run(il, data), b = run(ofob, data);
    for (std::size_t r = 0; r < a.logs.size(); ++r) {
      for (std::size_t i = 0; i < a.logs[r].size(); ++i) {
        const std::string at = std::string(dtype_name(dt)) + " rank " + std::to_string(r) +
                               " step " + std::to_string(i + 1);
        EXPECT_EQ(a.logs[r][i].loss, b.logs[r][i].loss) << at;
        EXPECT_LE(std::abs(a.logs[r][i].grad_norm - b.logs[r][i].grad_norm),
                  1e-12 * b.logs[r][i].grad_norm)
            << at;
        EXPECT_EQ(a.logs[r][i].loss_scale, b.logs[r][i].loss_scale) << at;
        EXPECT_EQ(a.logs[r][i].skipped, b.logs[r][i].skipped) << at;
      }
    }
  }
}

// The other dimensions over the chunks' one registry: dp 2 x pp 2 under chapter 4's all-reduce
// and under ZeRO-1 (the tied wte summed before the reduce-scatter), and tp 2 x pp 2 (each
// chunk a tp shard): each logs the same grid's 1F1B losses and final weights bit for bit, its
// norms within 1e-12.
TEST(InterleavedTrainer, DataTensorParallelAndZeroOneCoverEveryChunk) {
  const TrainingData data = random_data(4096);
  for (const char* what : {"dp", "zero1", "tp"}) {
    TrainerConfig il = pipeline(4, 4, "interleaved", 2, 4);
    TrainerConfig ofob = pipeline(4, 4, "1f1b", 1, 4);
    for (TrainerConfig* c : {&il, &ofob}) {
      c->pp = 2;
      c->steps = 3;
      if (std::string(what) == "tp") {
        c->tp = 2;
      } else {
        c->dp = 2;
        c->zero_stage = std::string(what) == "zero1" ? 1 : 0;
      }
    }
    const TrainedRun a = run(il, data), b = run(ofob, data);
    for (std::size_t r = 0; r < a.logs.size(); ++r) {
      for (std::size_t i = 0; i < a.logs[r].size(); ++i) {
        const std::string at = std::string(what) + " rank " + std::to_string(r) + " step " +
                               std::to_string(i + 1);
        EXPECT_EQ(a.logs[r][i].loss, b.logs[r][i].loss) << at;
        EXPECT_LE(std::abs(a.logs[r][i].grad_norm - b.logs[r][i].grad_norm),
                  1e-12 * b.logs[r][i].grad_norm)
            << at;
      }
    }
    for (const auto& [name, w] : b.weights) {
      EXPECT_EQ(a.weights.at(name), w) << what << " " << name;
    }
  }
}

// Every rank's F and B spans name their chunk, and the sends between chunk 0 on the last rank
// and chunk 1 on the first (virtual stage p - 1 to p) are traced on both.
TEST(InterleavedTrainer, EveryRankTracesItsForwardsAndBackwardsPerChunk) {
  const TrainingData data = random_data(4096);
  TrainerConfig c = pipeline(2, 4, "interleaved", 2, 2);
  c.steps = 1;
  const TrainedRun got = run(c, data);
  auto has = [&](std::size_t r, const std::string& part) {
    const auto& v = got.spans[r];
    return std::any_of(v.begin(), v.end(),
                       [&](const std::string& n) { return n.find(part) != std::string::npos; });
  };
  for (std::size_t r = 0; r < 2; ++r) {
    for (const std::string n : {"F mb0 c0", "F mb1 c0", "F mb0 c1", "F mb1 c1", "B mb0 c0",
                                "B mb1 c0", "B mb0 c1", "B mb1 c1"}) {
      EXPECT_TRUE(has(r, n)) << "rank " << r << " " << n;
    }
  }
  // Rank 1's chunk 0 (stage 1) sends its activation to rank 0's chunk 1 (stage 2), which
  // sends the gradient back.
  EXPECT_TRUE(has(1, "send act mb0 of stage 1 to r0"));
  EXPECT_TRUE(has(0, "recv act mb0 of stage 1 from r1"));
  EXPECT_TRUE(has(0, "send grad mb0 of stage 2 to r1"));
  EXPECT_TRUE(has(1, "recv grad mb0 of stage 2 from r0"));
}

const std::string kTiny = "--n-layer 4 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 "
                          "--steps 3 --eval-every 0 --data-order sequential --pp 2 --schedule "
                          "interleaved --virtual-stages 2 --grad-accum 4 ";

// train_gpt itself: the pre-flight line names the chunks, and --save writes the whole model
// (every chunk of both ranks, gathered on rank 0) as a Hugging Face directory.
TEST(InterleavedTrainer, TrainGptRunsTheChunksAndSavesTheWholeModel) {
  TempDir d;
  const test::CliRun r = test::train_gpt(d, "--ranks 2 " + kTiny + "--save " + d.file("hf"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("interleaved pipeline: 2 stages x 4 micro-batches x 2 virtual stages"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(test::read_bytes(d.file("hf/model.safetensors")).empty());
  EXPECT_NE(test::read_bytes(d.file("hf/config.json")).find("n_layer"), std::string::npos);
}

#if defined(MIXPAR_MPIEXEC)
// Two processes under mpirun, two chunks each: the losses and norms of the same run on two
// threads, bit for bit (the same arithmetic; only the transport differs).
TEST(InterleavedTrainer, OverMpiLogsTheThreadsRunBitForBit) {
  TempDir d;
  const test::CliRun t =
      test::train_gpt(d, "--ranks 2 " + kTiny + "--log-jsonl " + d.file("threads.jsonl"));
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  const test::CliRun m =
      test::run_shell(d, test::mpirun_train_gpt(2) + kTiny + "--log-jsonl " + d.file("mpi.jsonl"));
  ASSERT_EQ(m.code, 0) << m.out << m.err;
  const std::string threads = test::read_bytes(d.file("threads.jsonl"));
  const std::string mpi = test::read_bytes(d.file("mpi.jsonl"));
  auto field = [](const std::string& log, const std::string& key) {
    std::vector<std::string> out;
    for (std::size_t at = log.find("\"" + key + "\":"); at != std::string::npos;
         at = log.find("\"" + key + "\":", at + 1)) {
      out.push_back(log.substr(at, log.find(',', at) - at));
    }
    return out;
  };
  for (const char* key : {"loss", "grad_norm"}) {
    EXPECT_EQ(field(mpi, key).size(), 3u) << key;
    EXPECT_EQ(field(mpi, key), field(threads, key)) << key;
  }
}
#endif

}  // namespace
}  // namespace mixpar::ch08
