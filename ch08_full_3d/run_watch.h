// The silent killers of source article B (section 5.3; docs/SOURCES.md), watched while a run
// goes, on rank 0, from each step's StepStats: none of them stops a run by itself, all of them
// spoil it.
//
//   repeated batches   a data position read twice within one epoch (the loader's windows are a
//                      permutation per epoch, so this is a loader or resume bug)
//   loss spike         loss > k x the running median of the last W steps: the step and its data
//                      position are logged, so the batch can be replayed (TokenLoader::batch_at)
//   effective batch    accumulation multiplies the global batch while --lr stays: the warning
//                      gives the numbers (preflight, effective_batch_warning)
//   non-finite         without a loss scaler (fp32, bf16) a NaN/inf loss halts the run before
//                      the optimizer steps, naming the first layer whose output is not finite
//                      (Trainer::train_step; first_non_finite_layer); fp16's scaler skips it
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "trainer_config.h"

namespace mixpar::ch08 {

struct StepStats;

struct WatchConfig {
  double spike_factor = 3.0;      // k
  std::size_t spike_window = 50;  // W: the running median's steps
  std::size_t min_history = 20;   // no spike is called before this many steps
};

class RunWatch {
 public:
  explicit RunWatch(WatchConfig config = {}) : config_(config) {}
  // The warnings this step raises, one line each (empty: nothing to say).
  std::vector<std::string> observe(const StepStats& s);
  std::int64_t spikes() const { return spikes_; }

 private:
  WatchConfig config_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> seen_;  // (epoch, position) -> step
  std::deque<double> recent_;
  std::int64_t spikes_ = 0;
};

// The pre-flight warning for accumulation: m > 1 makes the global batch m times B x dp at the
// same learning rate. Empty when m == 1.
std::string effective_batch_warning(const TrainerConfig& c);

// The first layer of `model` (a whole model) whose output on (inputs, B, T) is not finite:
// "the embedding (wte + wpe)", "block 3 (h.3)", "the final LayerNorm and head (ln_f, logits)";
// empty when every output is finite. Runs the model's prefix stage by stage.
std::string first_non_finite_layer(const GptModel& model, std::span<const std::int32_t> inputs,
                                   std::int64_t B, std::int64_t T);

}  // namespace mixpar::ch08
