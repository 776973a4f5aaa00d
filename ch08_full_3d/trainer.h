// The trainer: a GptModel in the working dtype, chapter 3's mixed-precision AdamW (FP32
// masters, chapter 2's loss scaler for fp16), the token loader and the LR schedule; given a
// communicator, it is one replica of chapter 4's DistributedDataParallel. One call of
// train_step() is one optimizer step over grad_accum micro-batches. Checkpoints hold everything
// that changes while training, so a resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "ch03_master_weights/mixed_precision_optimizer.h"
#include "ch04_ddp/chrome_trace.h"
#include "ch04_ddp/ddp.h"
#include "comm/communicator.h"
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
  std::int64_t tokens = 0;  // tokens processed by the step, over all replicas
  // Data parallel only (ranks > 0): this rank's split of the step (chapter 4's StepTimes).
  int ranks = 0;
  ch04::StepTimes times;
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
  // comm: this rank's communicator when the trainer is one of config.dp replicas (collective:
  // every rank constructs its trainer together; rank 0's weights are broadcast or checked as
  // config.init_sync says); null: a single device, no communication at all.
  Trainer(TrainerConfig config, TrainingData data, Communicator* comm = nullptr);

  // Collective when data parallel: every rank calls it, and every rank returns the same
  // global loss and gradient norm.
  StepStats train_step();
  // The optimizer half of a step, from the gradients now in the model: the learning rate, then
  // chapter 3's step (weight decay on 2-D weights only). Does not advance step(); train_step()
  // calls it (public so tests can step on gradients they set).
  ch03::StepReport optimizer_step(double lr);
  std::int64_t step() const { return step_; }  // steps finished

  // 0 and 1 on a single device.
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world() const { return comm_ ? comm_->size() : 1; }
  ch04::DistributedDataParallel* ddp() { return ddp_.get(); }
  // The compute and communication spans recorded since the last call (data parallel only).
  std::vector<ch04::TraceSpan> take_spans();

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
  // Replicas hold the same state: in a data-parallel run rank 0 alone calls it.
  std::string save_checkpoint();
  // Continues from the latest checkpoint in config.checkpoint_dir: InputError if it is corrupt
  // or was written by a run with another shape, dtype, batch layout, data or seed. Data
  // parallel: every rank reads the same checkpoint (a shared directory), then the replicas
  // are checked.
  void resume();

 private:
  void load_initial_weights();
  void recast_working_copy();
  void write_checkpoint_files(const std::string& dir) const;

  TrainerConfig config_;
  TrainingData data_;
  Communicator* comm_;
  GptModel model_;
  // Before the optimizer: the broadcast of rank 0's weights must reach the working copy before
  // the optimizer copies it into the FP32 masters.
  std::unique_ptr<ch04::DistributedDataParallel> ddp_;
  ch03::MixedPrecisionOptimizer optimizer_;
  TokenLoader loader_;
  std::int64_t step_ = 0;
};

}  // namespace mixpar::ch08
