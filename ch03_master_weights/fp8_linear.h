// FP8 linear layers: the GEMM seam of the GPT blocks (model/block_gemms.h) run in FP8 under one
// of the three recipes. Inputs and weights are cast to E4M3 for the forward GEMM, the output
// gradient to E5M2 for the two backward GEMMs (the hybrid format of Micikevicius et al. 2022;
// blockwise casts it to E4M3 too, as DeepSeek-V3 does with its 1x128 tiles), every product
// summed as fp8_gemm.h models the hardware, the bias added and the result rounded once into
// the working dtype (bf16). Masters, optimizer, communication and the other layers are
// unchanged. Each GEMM's three tensors (input, weight, output gradient) have their own scale:
//   delayed     a DelayedScaler per tensor (amax history, margin), updated by end_step();
//   tensorwise  the tensor's own amax at each cast;
//   blockwise   the 1x128 tiles of activations and gradients along each GEMM's reduction
//               dimension (128x1 for the weight-gradient GEMM, DeepSeek-V3 Figure 7a) and the
//               128x128 blocks of the weights.
// Under tensor parallelism (chapter 6) each rank runs the seam on its shard: it casts its own
// columns or rows of the weight and its own input and output gradient. A per-tensor scale must
// be the whole tensor's, so every amax is the max over the tp group (Transformer Engine's
// amax reduction over the tensor-parallel group): tensorwise reduces each cast's amax before
// the cast (set_tp_amax_reduction), delayed reduces the recorded amaxes after the step (the
// trainer, over the world, which holds the tp group). Blockwise tiles and blocks stay local:
// they are one device's when every shard boundary falls on a multiple of 128 along the split
// dimension (the trainer's pre-flight requires n_embd / tp to be one).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "ch03_master_weights/fp8_gemm.h"
#include "ch03_master_weights/fp8_scaling.h"
#include "model/block_gemms.h"

namespace mixpar::fp8 {

struct Fp8LinearConfig {
  Recipe recipe = Recipe::kTensorwise;
  int amax_history = 16;  // delayed only
  int margin = 0;         // delayed only
};

// The casts of one step by role, summed over the GEMMs, and by tensor (the JSONL's fields).
struct Fp8StepStats {
  CastStats input, weight, grad;
  // By tensor, in state()'s order (layer, linear, role); a tensor this rank did not cast (another
  // pipeline stage's) has no values. scale: the per-tensor scale of its last cast (delayed and
  // tensorwise; 0 for blockwise, whose scales are per tile).
  std::vector<CastStats> tensors;
  std::vector<float> scales;
  // Delayed: layer 0's attn.c_attn input scaler after the update (the figure's series).
  float first_input_scale = 0, first_input_history_max = 0;
};

class Fp8BlockGemms final : public BlockGemms {
 public:
  // n_layer: the model's blocks (every layer index a GEMM may name).
  Fp8BlockGemms(Fp8LinearConfig config, std::int64_t n_layer);

  void forward(std::int64_t layer, Linear which, const Tensor& x, const Tensor& w,
               const Tensor& b, Tensor& y) override;
  void backward_input(std::int64_t layer, Linear which, const Tensor& dy, const Tensor& w,
                      Tensor& dx) override;
  void backward_weight(std::int64_t layer, Linear which, const Tensor& x, const Tensor& dy,
                       Tensor& dw, bool accumulate) override;

  // A training step's casts lie between begin_step() and end_step(): only they record amaxes
  // (delayed) and statistics. Casts outside one (evaluation, sampling between steps) use the
  // current scales and leave the state alone, so a run that evaluates now and then follows
  // the one that does not, and resumes as it would have gone on.
  void begin_step() { in_step_ = true; }
  // After the optimizer step: delayed scalers take the step's amaxes into their histories.
  // Returns the step's statistics and starts the next step's.
  Fp8StepStats end_step();

  const Fp8LinearConfig& config() const { return config_; }
  // Tensor parallelism: the max of a local amax over the tp group (collective: every tp rank
  // calls it at the same casts, in the same order). Tensorwise casts scale by the reduced
  // amax; unset (one tp rank), by their own.
  void set_tp_amax_reduction(std::function<float(float)> reduce) { tp_amax_ = std::move(reduce); }
  // Delayed: the amax each scaler recorded this step, in state()'s order, and the same after
  // a reduction over ranks (the max: Transformer Engine's amax reduction), before end_step().
  std::vector<float> pending_amaxes() const;
  void set_pending_amaxes(std::span<const float> amaxes);
  // The delayed scalers' state, flattened in a fixed order (layer, linear, role: history,
  // scale, pending amax) for checkpoints; empty for the stateless recipes.
  std::vector<float> state() const;
  // InputError when the values do not fit this configuration (another recipe, history or
  // model depth).
  void restore(std::span<const float> values);

 private:
  enum Role { kInput = 0, kWeight = 1, kGrad = 2 };
  DelayedScaler& scaler(std::int64_t layer, Linear which, Role role);
  // x [rows x cols], K-major, cast for its role under the recipe; tile_rows x tile_cols is the
  // blockwise tile (1 x 128 or 128 x 128).
  Fp8Matrix cast(std::int64_t layer, Linear which, Role role, std::span<const float> x,
                 std::int64_t rows, std::int64_t cols, bool weight_block);
  void check_layer(std::int64_t layer) const;

  Fp8LinearConfig config_;
  std::int64_t n_layer_;
  std::vector<DelayedScaler> scalers_;  // delayed: n_layer x 4 x 3
  Fp8StepStats stats_;
  bool in_step_ = false;
  std::function<float(float)> tp_amax_;
};

}  // namespace mixpar::fp8
