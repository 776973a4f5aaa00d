// The trainer as one rank of a pipeline (chapter 7's schedules on the local backend): p stages
// with m micro-batches per step train like one device accumulating the same m micro-batches,
// AFAB and 1F1B bit for bit alike, every rank logs the same loss and norm, and train_gpt
// refuses a pipeline it cannot run with one line and exit code 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ch08_test_util.h"
#include "strategy_factory.h"
#include "train_gpt_cli.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::TempDir;
using test::tiny_config;

TrainerConfig pipeline_config(int pp, const std::string& schedule, std::int64_t m) {
  TrainerConfig c = tiny_config();
  c.model = GptConfig{4, 2, 16, 8, 256};
  c.data_order = DataOrder::kSequential;
  c.steps = 4;
  c.grad_accum = m;
  c.threads = 1;
  c.ranks = c.pp = pp;
  c.dp = 1;
  c.pipeline_schedule = schedule;
  return c;
}

// Every rank's steps, by rank (a single device when c.ranks == 1).
std::vector<std::vector<StepStats>> run(const TrainerConfig& c, const TrainingData& data) {
  return test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    std::vector<StepStats> log;
    while (t.step() < c.steps) log.push_back(t.train_step());
    return log;
  });
}

using test::expect_close_step;
using test::expect_one_device_step;

TEST(PipelineTrainer, StagesTrainLikeOneDeviceAccumulatingTheSameMicroBatches) {
  const TrainingData data = random_data(4096);
  for (int pp : {2, 4}) {
    for (std::int64_t m : {1, 3, 8}) {
      TrainerConfig one = pipeline_config(1, "1f1b", m);
      one.ranks = one.pp = 1;
      const auto ref = run(one, data)[0];
      const auto afab = run(pipeline_config(pp, "afab", m), data);
      const auto ofob = run(pipeline_config(pp, "1f1b", m), data);
      const auto zb = run(pipeline_config(pp, "zb-h1", m), data);
      for (std::size_t r = 0; r < afab.size(); ++r) {
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const std::string at = "pp " + std::to_string(pp) + " m " + std::to_string(m) +
                                 " rank " + std::to_string(r) + " step " + std::to_string(i + 1);
          // The same accumulation order on every stage: AFAB and 1F1B bit for bit alike, and
          // ZB-H1, whose delayed W's run in micro-batch order.
          EXPECT_EQ(afab[r][i].loss, ofob[r][i].loss) << at;
          EXPECT_EQ(afab[r][i].grad_norm, ofob[r][i].grad_norm) << at;
          EXPECT_EQ(zb[r][i].loss, ofob[r][i].loss) << at;
          EXPECT_EQ(zb[r][i].grad_norm, ofob[r][i].grad_norm) << at;
          // Every rank logs the last stage's loss.
          EXPECT_EQ(afab[r][i].loss, afab.back()[i].loss) << at;
          // Against one device (the tied wte's two halves summed once per step).
          expect_one_device_step(afab[r][i], ref[i], i, at);
        }
      }
    }
  }
}

// The V schedules (two chunks per rank, stages r and 2p - 1 - r): every rank logs one device's
// losses and norms, to the rounding of the tied wte (rank 0's embedding and head add to one
// gradient in another order than one device's), and the first step's loss bit for bit.
TEST(PipelineTrainer, VSchedulesTrainLikeOneDeviceAccumulatingTheSameMicroBatches) {
  const TrainingData data = random_data(4096);
  struct Case {
    const char* schedule;
    int pp;
    std::int64_t layers, m;
  };
  for (const Case& k : {Case{"zb-v", 2, 4, 3}, Case{"zb-v", 2, 4, 8}, Case{"zb-v", 4, 8, 8},
                        Case{"dualpipev", 2, 4, 4}, Case{"dualpipev", 4, 8, 8}}) {
    TrainerConfig one = pipeline_config(1, "1f1b", k.m);
    one.model.n_layer = k.layers;
    const auto ref = run(one, data)[0];
    TrainerConfig v = pipeline_config(k.pp, k.schedule, k.m);
    v.model.n_layer = k.layers;
    v.virtual_stages = 2;
    const auto got = run(v, data);
    for (std::size_t r = 0; r < got.size(); ++r) {
      for (std::size_t i = 0; i < ref.size(); ++i) {
        const std::string at = std::string(k.schedule) + " pp " + std::to_string(k.pp) +
                               " m " + std::to_string(k.m) + " rank " + std::to_string(r) +
                               " step " + std::to_string(i + 1);
        expect_one_device_step(got[r][i], ref[i], i, at);
      }
    }
  }
}

// The V beside the other dimensions: tp 2 x pp 2 ZB-V trains like tp 2 alone, dp 2 x pp 2
// DualPipeV under ZeRO-1 like dp 2 ZeRO-1 alone.
TEST(PipelineTrainer, VSchedulesBesideTensorParallelAndZeroTrainLikeTheirReplicas) {
  const TrainingData data = random_data(4096);
  TrainerConfig tp2 = pipeline_config(2, "1f1b", 3);
  tp2.pp = 1;
  tp2.tp = 2;
  TrainerConfig tp2pp2 = pipeline_config(4, "zb-v", 3);
  tp2pp2.pp = 2;
  tp2pp2.tp = 2;
  tp2pp2.virtual_stages = 2;
  TrainerConfig dp2 = pipeline_config(2, "1f1b", 4);
  dp2.pp = 1;
  dp2.dp = 2;
  dp2.zero_stage = 1;
  TrainerConfig dp2pp2 = pipeline_config(4, "dualpipev", 4);
  dp2pp2.pp = 2;
  dp2pp2.dp = 2;
  dp2pp2.zero_stage = 1;
  dp2pp2.virtual_stages = 2;
  for (const auto& [ref_config, config] :
       {std::pair{tp2, tp2pp2}, std::pair{dp2, dp2pp2}}) {
    const auto ref = run(ref_config, data)[0];
    const auto both = run(config, data);
    for (std::size_t r = 0; r < both.size(); ++r) {
      for (std::size_t i = 0; i < ref.size(); ++i) {
        const std::string at = config.pipeline_schedule + " rank " + std::to_string(r) +
                               " step " + std::to_string(i + 1);
        expect_close_step(both[r][i], ref[i], at);
      }
    }
  }
}

// DualPipeV's overlapped pair is one span ("F mb2 c1 & B mb0 c0"), its forward then backward.
TEST(PipelineTrainer, DualPipeVTracesItsOverlappedPairAsOneAction) {
  const TrainingData data = random_data(4096);
  TrainerConfig c = pipeline_config(2, "dualpipev", 4);
  c.virtual_stages = 2;
  std::vector<std::vector<std::string>> names(2);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.train_step();
    for (const TraceSpan& s : t.take_spans()) names[std::size_t(rank)].push_back(s.name);
  });
  for (int r = 0; r < 2; ++r) {
    const auto& v = names[std::size_t(r)];
    EXPECT_NE(std::find(v.begin(), v.end(), "F mb2 c1 & B mb0 c0"), v.end()) << "rank " << r;
  }
}

// dp 2 x pp 2: the pipeline under chapter 4's bucketed all-reduce trains like dp 2 alone.
TEST(PipelineTrainer, DataParallelPipelinesTrainLikeTheirReplicas) {
  const TrainingData data = random_data(4096);
  TrainerConfig dp2 = pipeline_config(2, "1f1b", 4);
  dp2.pp = 1;
  dp2.dp = 2;
  TrainerConfig dp2pp2 = pipeline_config(4, "1f1b", 4);
  dp2pp2.pp = 2;
  dp2pp2.dp = 2;
  const auto ref = run(dp2, data)[0];
  const auto both = run(dp2pp2, data);
  for (std::size_t r = 0; r < both.size(); ++r) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      EXPECT_LE(std::abs(both[r][i].loss - ref[i].loss), 1e-6 * std::abs(ref[i].loss))
          << "rank " << r << " step " << i + 1;
    }
  }
}

// dp 2 x pp 2: ZeRO-1 gives DDP's bits beside a pipeline too (the tied wte's two copies meet
// before the dp reduction under both, strategy_factory.cpp), on a plain and an interleaved
// placement: every step's loss and norm on every rank, and every rank's working copy.
TEST(PipelineTrainer, ZeroOneBesideAPipelineGivesDdpsBitsWithTheTiedEmbedding) {
  const TrainingData data = random_data(4096);
  for (const std::string schedule : {"1f1b", "interleaved"}) {
    TrainerConfig ddp = pipeline_config(4, schedule, 4);
    ddp.pp = 2;
    ddp.dp = 2;
    if (schedule == "interleaved") ddp.virtual_stages = 2;
    TrainerConfig zero = ddp;
    zero.zero_stage = 1;
    const auto steps_and_weights = [&](const TrainerConfig& c) {
      return test::train_on_each_rank(c, data, [&](Trainer& t, int) {
        std::vector<StepStats> log;
        while (t.step() < c.steps) log.push_back(t.train_step());
        return std::pair{log, test::bytes_of(rank_params(t.model()).flat_params())};
      });
    };
    const auto a = steps_and_weights(ddp);
    const auto b = steps_and_weights(zero);
    for (std::size_t r = 0; r < a.size(); ++r) {
      for (std::size_t i = 0; i < a[r].first.size(); ++i) {
        const std::string at = schedule + " rank " + std::to_string(r) + " step " +
                               std::to_string(i + 1);
        EXPECT_EQ(a[r].first[i].loss, b[r].first[i].loss) << at;
        EXPECT_EQ(a[r].first[i].grad_norm, b[r].first[i].grad_norm) << at;
      }
      EXPECT_EQ(a[r].second, b[r].second) << schedule << " rank " << r << ": working copies";
    }
  }
}

// ZB-H1's B and W are spans of their own.
TEST(PipelineTrainer, ZeroBubbleH1TracesItsInputAndWeightGradientsApart) {
  const TrainingData data = random_data(4096);
  const TrainerConfig c = pipeline_config(2, "zb-h1", 2);
  std::vector<std::vector<std::string>> names(2);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.train_step();
    for (const TraceSpan& s : t.take_spans()) names[std::size_t(rank)].push_back(s.name);
  });
  for (int r = 0; r < 2; ++r) {
    const auto& v = names[std::size_t(r)];
    for (const std::string n : {"F mb1", "B(input) mb1", "W mb1"}) {
      EXPECT_NE(std::find(v.begin(), v.end(), n), v.end()) << "rank " << r << " " << n;
    }
    EXPECT_EQ(std::find(v.begin(), v.end(), "B mb0"), v.end()) << "rank " << r;
  }
  // Rank 1's B sends its input gradient back (fused with the next receive when one follows).
  EXPECT_NE(std::find_if(names[1].begin(), names[1].end(),
                         [](const std::string& n) { return n.starts_with("send grad mb0 to r0"); }),
            names[1].end());
}

// Each rank's F, B, send and receive spans, for the Chrome trace.
TEST(PipelineTrainer, EveryRankTracesItsForwardsBackwardsSendsAndReceives) {
  const TrainingData data = random_data(4096);
  const TrainerConfig c = pipeline_config(2, "1f1b", 2);
  std::vector<std::vector<std::string>> names(2);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.train_step();
    for (const TraceSpan& s : t.take_spans()) {
      names[std::size_t(rank)].push_back(s.name);
    }
  });
  auto has = [&](int r, const std::string& n) {
    const auto& v = names[std::size_t(r)];
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(has(r, "F mb0") && has(r, "F mb1") && has(r, "B mb0") && has(r, "B mb1")) << r;
  }
  EXPECT_TRUE(has(0, "send act mb0 to r1"));
  EXPECT_TRUE(has(1, "recv act mb0 from r0"));
  EXPECT_TRUE(has(1, "send grad mb1 to r0"));
}

TEST(PipelineTrainer, PipelinesThatCannotRunAreOneLineAndExitCode2) {
  TempDir d;
  const std::string tiny = "--n-layer 4 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--ranks 8 --pp 8", "--pp 8 x --virtual-stages 1 = 8 stages for 4 blocks"},
      {"--ranks 4 --pp 4 --schedule interleaved --virtual-stages 2 --grad-accum 4",
       "8 stages for 4 blocks"},
      {"--ranks 2 --pp 2 --schedule interleaved --virtual-stages 2 --grad-accum 3",
       "3 micro-batches, pp 2"},
      {"--ranks 2 --pp 2 --schedule zb-h1 --recompute", "--schedule zb-h1 with --recompute"},
      {"--ranks 2 --pp 2 --virtual-stages 2", "needs --schedule interleaved"},
      {"--ranks 2 --pp 2 --schedule gpipe", "not one of afab|1f1b|interleaved|zb-h1"},
      {"--ranks 2 --pp 2 --schedule zb-v", "it needs --virtual-stages 2, got 1"},
      {"--ranks 2 --pp 2 --schedule dualpipev --virtual-stages 2 --grad-accum 3",
       "dualpipev needs at least 2 x pp micro-batches: 3 micro-batches, pp 2"},
      {"--ranks 2 --pp 2 --schedule zb-v --virtual-stages 2 --recompute",
       "--schedule zb-v with --recompute"},
  };
  for (const auto& [args, part] : cases) {
    const test::CliRun r = test::train_gpt(d, tiny + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << "want '" << part << "' in: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

#if defined(MIXPAR_MPIEXEC)
// Two processes under mpirun, one stage each, ZB-H1: the losses and norms of the same pipeline
// on two threads, bit for bit (the same arithmetic; only the transport differs).
TEST(PipelineTrainer, ZeroBubbleH1OverMpiLogsTheThreadsRunBitForBit) {
  TempDir d;
  const std::string args = "--n-layer 4 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 "
                           "--steps 3 --pp 2 --schedule zb-h1 --grad-accum 4 --eval-every 0 "
                           "--data-order sequential --log-jsonl ";
  const test::CliRun t = test::train_gpt(d, "--ranks 2 " + args + d.file("threads.jsonl"));
  ASSERT_EQ(t.code, 0) << t.err;
  const test::CliRun m =
      test::run_shell(d, test::mpirun_train_gpt(2) + args + d.file("mpi.jsonl"));
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

// m < p runs, and the pre-flight summary states what it costs.
TEST(PipelineTrainer, FewerMicroBatchesThanStagesRunsAndThePreflightStatesTheBubble) {
  TempDir d;
  const std::string args = "--n-layer 4 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 "
                           "--steps 2 --ranks 4 --pp 4 --grad-accum 2 --eval-every 0";
  const test::CliRun r = test::train_gpt(d, args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fewer micro-batches than stages: each rank idles 60%"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace mixpar::ch08
