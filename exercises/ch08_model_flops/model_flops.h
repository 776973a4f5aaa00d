// Exercise (chapter 8): the model FLOPs of one optimizer step of a dp x tp layout, and the MFU
// (model FLOPs utilisation, Chowdhery et al. 2022, PaLM appendix B) they give: the count
// train_gpt's start-up line ("model GFLOP/step"), its log's `flops` and its MFU all use.
//
// Model FLOPs count the multiply-adds the model needs, not what the run happens to do
// (recomputed forwards are not model FLOPs). Per token, forward and backward together
// (mixpar's model FLOPs, docs/REFERENCE.md "FLOPs per token and MFU"):
//   - 6 per weight that takes part in a GEMM (2 forward, 4 backward: the input's and the
//     weight's gradient): each block's four projections (c_attn [C, 3C], attn c_proj [C, C],
//     c_fc [C, 4C], mlp c_proj [4C, C]) and the LM head, tied to wte: [V', C], V' the vocabulary
//     padded for tensor parallelism (padded_vocab, common/model/gpt_params.h: V rounded up to a
//     multiple of tp, since every tp rank multiplies its equal share of rows). Biases,
//     LayerNorms and the position embedding do no multiply-add per weight and are left out;
//   - the attention's 6 L C T (T the sequence length).
// Tokens per step: every replica's batch x seq x grad_accum, dp replicas (tp and pp split the
// work of one replica, they add no tokens).
// MFU = model FLOPs per step / step time / the peak FLOP/s of the hardware.
// See ch08_full_3d/README.md and ch08_full_3d/model_flops.h, which the tests compare with.
#pragma once

#include <cstdint>

namespace mixpar::exercises {

struct FlopsLayout {
  std::int64_t n_layer = 0, n_embd = 0, vocab = 0;
  std::int64_t seq = 0, batch = 0, grad_accum = 1;
  int dp = 1, tp = 1;
};

double step_model_flops(const FlopsLayout& l);
double mfu(double flops_per_step, double step_seconds, double peak_flops_per_s);

}  // namespace mixpar::exercises
