// The single-device trainer: a GptModel in the working dtype, chapter 3's mixed-precision AdamW
// (FP32 masters, chapter 2's loss scaler for fp16), the token loader and the LR schedule. One
// call of train_step() is one optimizer step over grad_accum micro-batches. Checkpoints hold
// everything that changes while training, so a resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ch03_master_weights/mixed_precision_optimizer.h"
#include "io/token_loader.h"
#include "model/gpt.h"
#include "trainer_config.h"
#include "training_data.h"

namespace mixpar::ch08 {

struct StepStats {
  std::int64_t step = 0;   // 1-based: the step just finished
  double loss = 0.0;       // mean over the step's micro-batches
  double grad_norm = 0.0;  // global L2 norm of the unscaled gradients, before clipping
  double clip_coef = 1.0;
  double lr = 0.0;
  float loss_scale = 1.0f;  // the scale this step's gradients carried
  bool skipped = false;     // inf/NaN: the optimizer did not step
  double seconds = 0.0;     // wall time of the step
  std::int64_t tokens = 0;  // tokens processed by the step
  // Where the step's first micro-batch starts in the token stream, and in which epoch: a
  // repeated position within an epoch is the "repeated batches" silent killer of seed 003.
  std::int64_t data_position = 0, epoch = 0;
};

// Sets the threads of OpenMP loops and Eigen GEMMs (0: leave the default).
void set_cpu_threads(int threads);

class Trainer {
 public:
  // Builds the model (GPT-2 init from config.seed, or config.init_from's weights), the
  // optimizer and the loader. InputError when the data is shorter than one step's batches.
  Trainer(TrainerConfig config, TrainingData data);

  StepStats train_step();
  // The optimizer half of a step, from the gradients now in the model: learning rate of the
  // schedule at step(), 2-D weight decay, then chapter 3's step. Does not advance step();
  // train_step() calls it (public so tests can step on gradients they set).
  ch03::StepReport optimizer_step(double lr);
  std::int64_t step() const { return step_; }  // steps finished

  const TrainerConfig& config() const { return config_; }
  const TrainingData& data() const { return data_; }
  GptModel& model() { return model_; }
  const ch03::MixedPrecisionOptimizer& optimizer() const { return optimizer_; }
  const TokenLoader& loader() const { return loader_; }

  // FP32 weights under their HF names: the masters (16-bit runs) or the model itself (fp32).
  std::vector<NamedTensor> master_weights() const;
  // The final model as a Hugging Face directory (FP32 masters: no precision thrown away).
  void save_hf(const std::string& dir) const;

  // Writes a checkpoint of the current step into config.checkpoint_dir; returns its path.
  std::string save_checkpoint();
  // Continues from the latest checkpoint in config.checkpoint_dir: InputError if it is corrupt
  // or was written by a run with another shape, dtype, batch layout, data or seed.
  void resume();

 private:
  AdamW& mutable_adamw();
  void load_initial_weights();
  void recast_working_copy();
  void apply_weight_decay(double lr);
  void write_checkpoint_files(const std::string& dir) const;

  TrainerConfig config_;
  TrainingData data_;
  GptModel model_;
  ch03::MixedPrecisionOptimizer optimizer_;
  TokenLoader loader_;
  std::vector<bool> decays_;  // per registry entry: weight decay applies (2-D weights)
  std::int64_t step_ = 0;
};

}  // namespace mixpar::ch08
