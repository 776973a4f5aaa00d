// The lesson's training loop: a tiny GPT trained with DistributedDataParallel, AdamW and an
// optional loss scaler, logging per step what the chapter compares across ranks and layouts
// (global loss, gradient norm, weights hash, rows read, time split). It runs on any
// Communicator: N threads of the local backend, or N processes under MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ch02_loss_scaling/loss_scaler.h"
#include "ch04_ddp/ddp.h"
#include "comm/communicator.h"
#include "model/gpt.h"
#include "optim/adamw.h"

namespace mixpar::ch04 {

// Where the loss scaler reads the gradients.
enum class ScalerOrder : std::uint8_t {
  // All-reduce the scaled gradients, then unscale and check (PyTorch DDP + GradScaler).
  kReduceThenUnscale,
  // Unscale and check each rank's own gradients, then all-reduce (what source article A
  // section 7.1 asks for; docs/SOURCES.md). Harmless with one shared scale and an agreed
  // decision; the failure mode is the decision NOT being agreed.
  kUnscaleThenReduce,
};

struct LessonConfig {
  GptConfig model{.n_layer = 2, .n_head = 2, .n_embd = 32, .n_positions = 16, .vocab_size = 256};
  DType dtype = DType::kF32;
  std::int64_t B = 2, T = 16;  // per rank and micro-step
  int accum = 1;               // micro-steps per optimizer step
  int steps = 10;
  std::uint64_t seed = 1;              // model init (every rank, unless seed_per_rank)
  bool seed_per_rank = false;          // rank r uses seed + r (the different-init bug)
  bool same_data = false;              // every rank reads rank 0's rows (the same-data bug)
  std::uint64_t data_seed = 1234;      // the built-in addition dataset
  AdamWConfig adamw{.lr = 3e-3};
  ch02::LossScalerConfig scaler = ch02::no_scaling_config();
  ScalerOrder order = ScalerOrder::kReduceThenUnscale;
  bool agree_found_inf = true;         // false: the local-scaler bug
  int overflow_step = -1;              // this step's backward on overflow_rank overflows
  int overflow_rank = 1;
  bool check_replicas_each_step = true;  // hash compare after every step (logged, not thrown)
  // OpenMP threads of each rank's compute; 0: ops::share_cores(). The lesson's tiny models
  // gain nothing from threads, and spinning thread teams of N ranks on few cores lose a lot.
  int threads_per_rank = 1;
  DdpConfig ddp;
};

struct StepLog {
  double loss = 0;        // mean over the global batch: identical on every rank
  double local_loss = 0;  // this rank's own micro-batches
  double grad_norm = 0;   // of the averaged, unscaled gradients; NaN on a skipped step
  bool taken = true;
  float scale = 1.0f;  // the scale this step's backward used
  std::uint64_t weights_hash = 0;
  bool replicas_agree = true;        // the replica check after the step
  std::vector<std::int64_t> rows;    // stream position of every row this rank read
  StepTimes times;
};

struct RankRun {
  int rank = 0;
  std::vector<StepLog> steps;
  std::vector<float> final_weights;  // the flat parameters after the last step
  std::vector<TraceSpan> spans;
  int buckets = 0;                   // gradient buckets of this rank's DDP
};

// The training stream every lesson run reads (the built-in addition dataset, byte tokens).
using Tokens = std::shared_ptr<const std::vector<std::uint16_t>>;
Tokens lesson_tokens(std::uint64_t data_seed);

// One rank's training (collective over comm). Each rank reads its rows of the global batch
// (TokenLoader's data-parallel view), unless c.same_data.
RankRun train_rank(Communicator& comm, const LessonConfig& c, const Tokens& tokens);
RankRun train_rank(Communicator& comm, const LessonConfig& c);  // builds the tokens itself

// The same on a local world of `ranks` threads; results by rank.
std::vector<RankRun> run_local_ddp(int ranks, const LessonConfig& c);

// max |a - b| / max(1, |b|) over two equal-length vectors (and over steps' losses).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b);
std::vector<double> losses(const RankRun& r);

}  // namespace mixpar::ch04
