// Everything a single-device training run is told: model shape (or a Hugging Face directory to
// start from), data, batch, optimizer, precision, outputs. Parsed from train_gpt's flags and
// validated before any compute; every bad value is an InputError naming the flag (exit 2).
#pragma once

#include <cstdint>
#include <string>

#include "io/token_loader.h"
#include "lr_schedule.h"
#include "model/gpt_params.h"
#include "numerics/dtype.h"
#include "util/cli.h"
#include "util/json.h"

namespace mixpar::ch08 {

struct TrainerConfig {
  // Model: the shape flags, or the shape of init_from's config.json.
  std::string init_from;  // HF directory to start from ("" = GPT-2 init with `seed`)
  GptConfig model{2, 8, 128, 64, 256};
  // Data: "" = the built-in addition dataset; a .bin token shard; any other file as bytes.
  std::string data;
  DataOrder data_order = DataOrder::kShuffled;
  std::int64_t batch = 32, seq = 64, grad_accum = 1, steps = 1500;
  // Optimizer (AdamW) and schedule; weight decay on 2-D weights only.
  LrSchedule schedule{LrScheduleKind::kCosine, 2e-3, 2e-4, 100, 1500};
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  DType dtype = DType::kF32;
  double loss_scale = 65536.0;  // fp16: the dynamic scaler's initial scale (PyTorch's 2^16)
  bool recompute = false;
  std::uint64_t seed = 1337;
  // Outputs.
  std::string save;            // HF directory written at the end
  std::string checkpoint_dir;  // full training checkpoints
  std::int64_t checkpoint_every = 0, checkpoint_keep = 2;
  bool resume = false;
  std::string log_jsonl;
  std::int64_t print_every = 1;
  std::int64_t sample = 0;      // bytes to generate at the end
  double temperature = 0.0;     // 0: greedy
  std::string prompt;           // sampling prompt ("" = a held-out problem or a newline)
  std::int64_t eval_every = 0;  // held-out accuracy of the built-in dataset every K steps
  std::string dump_logits;      // safetensors of the final model's logits on the prompt
  int threads = 0;              // 0: the OpenMP default

  bool builtin_data() const { return data.empty(); }
  std::int64_t tokens_per_step() const { return batch * seq * grad_accum; }
};

// The flags of train_gpt, with their defaults and help.
ArgParser make_trainer_args();
// Reads and validates the parsed flags (InputError on the first bad one). A shape from
// --init-from is read here, so seq > n_positions is caught before any compute.
TrainerConfig trainer_config_from_args(const ArgParser& args);
// The same checks on a config built in code (tests, benchmarks).
void validate(const TrainerConfig& c);

// What a resumed run must share with the run that wrote the checkpoint (shape, dtype, batch
// layout, data order, seed): anything else makes the saved state mean something different.
// The data itself is compared by fingerprint, so a moved file still resumes.
Json run_identity(const TrainerConfig& c);
// Every field, for the record in a checkpoint and at the top of a log.
Json to_json(const TrainerConfig& c);

}  // namespace mixpar::ch08
