// What a resumed run must keep, and what it may change: the run's identity a checkpoint
// records (run_identity), and every train_gpt flag in one of two lists, the flags the identity
// (or the state's other checks) compares and the flags a resume is free to change, each with
// why. tests/ch08/flag_coverage_test.cpp fails when a flag of make_trainer_args() is in
// neither list; trainer_state.cpp compares the identity on --resume.
#include <string>
#include <utility>
#include <vector>

#include "trainer_config.h"

namespace mixpar::ch08 {

namespace {

// "fp8 delayed (amax history 16, margin 0)", "fp8 tensorwise": what a resume must share.
std::string fp8_dtype_name(const fp8::Fp8LinearConfig& f) {
  std::string s = "fp8 " + std::string(fp8::name(f.recipe));
  if (f.recipe == fp8::Recipe::kDelayed) {
    s += " (amax history " + std::to_string(f.amax_history) + ", margin " +
         std::to_string(f.margin) + ")";
  }
  return s;
}

}  // namespace

Json run_identity(const TrainerConfig& c) {
  Json j = Json::object();
  j.set("n_layer", c.model.n_layer);
  j.set("n_head", c.model.n_head);
  j.set("n_embd", c.model.n_embd);
  j.set("n_positions", c.model.n_positions);
  j.set("vocab_size", c.model.vocab_size);
  j.set("dtype", c.fp8 ? fp8_dtype_name(*c.fp8) : std::string(dtype_name(c.dtype)));
  j.set("batch", c.batch);
  j.set("seq", c.seq);
  j.set("grad_accum", c.grad_accum);
  j.set("data_order", std::string(data_order_name(c.data_order)));
  j.set("seed", c.seed);
  // The replicas: recorded; a resume compares dp x batch x grad_accum, the samples of a step
  // (the loader's place is a global sample, trainer_state.cpp's check_identity).
  j.set("dp", static_cast<std::int64_t>(c.dp));
  // AdamW's and the clipping's numbers: another value continues the run with other losses.
  j.set("weight_decay", c.weight_decay);
  j.set("beta1", c.beta1);
  j.set("beta2", c.beta2);
  j.set("eps", c.eps);
  j.set("grad_clip", c.grad_clip);
  // Chapter 9's MoE blocks (absent from a dense run's identity).
  if (c.uses_moe()) {
    Json m = Json::object();
    m.set("n_experts", static_cast<std::int64_t>(c.moe.n_experts));
    m.set("top_k", static_cast<std::int64_t>(c.moe.top_k));
    m.set("moe_every", static_cast<std::int64_t>(c.moe_every));
    m.set("capacity_factor", c.moe.capacity_factor);
    m.set("drop_policy", ch09::drop_policy_name(c.moe.drop_policy));
    m.set("gates", std::string(c.moe.normalize_gates ? "normalized" : "softmax"));
    m.set("aux_loss_coef", c.moe.aux_loss_coef);
    m.set("z_loss_coef", c.moe.z_loss_coef);
    m.set("expert_bias_rate", c.moe.bias_update_rate);
    j.set("moe", std::move(m));
  }
  return j;
}

std::vector<std::pair<std::string, std::string>> resume_identity_flags() {
  return {
      {"--n-layer", "n_layer"},           {"--n-head", "n_head"},
      {"--n-embd", "n_embd"},             {"--n-positions", "n_positions"},
      {"--vocab-size", "vocab_size"},     {"--dtype", "dtype"},
      {"--fp8-recipe", "dtype"},          {"--fp8-amax-history", "dtype"},
      {"--fp8-margin", "dtype"},          {"--batch", "batch"},
      {"--seq", "seq"},                   {"--grad-accum", "grad_accum"},
      {"--global-batch", "grad_accum"},   {"--data-order", "data_order"},
      {"--seed", "seed"},                 {"--dp", "dp"},
      {"--weight-decay", "weight_decay"}, {"--beta1", "beta1"},
      {"--beta2", "beta2"},               {"--eps", "eps"},
      {"--grad-clip", "grad_clip"},
      // Held by the state's other checks (trainer_state.cpp): the schedule's rates from the
      // checkpoint's step on, and the tokens' fingerprint.
      {"--lr", "lr_schedule"},            {"--min-lr-frac", "lr_schedule"},
      {"--warmup", "lr_schedule"},        {"--lr-schedule", "lr_schedule"},
      {"--steps", "lr_schedule"},         {"--data", "data_fingerprint"},
      // The MoE blocks' shape and balancing: another value is another model.
      {"--n-experts", "moe"},             {"--top-k", "moe"},
      {"--moe-every", "moe"},             {"--capacity-factor", "moe"},
      {"--drop-policy", "moe"},           {"--moe-gates", "moe"},
      {"--aux-loss-coef", "moe"},         {"--z-loss-coef", "moe"},
      {"--expert-bias-rate", "moe"},
  };
}

std::vector<std::pair<std::string, std::string>> resume_free_flags() {
  const std::string layout = "the layout: a checkpoint's pieces reshard to any grid (README.md, "
                             "Checkpoints)";
  const std::string output = "an output or its cadence: it changes what is written, not what "
                             "is trained";
  return {
      {"--init-from", "refused with --resume: the weights come from the checkpoint"},
      {"--loss-scale", "fp16's initial scale only: a resume continues the checkpoint's scaler"},
      {"--recompute", "re-runs each block's forward: bit-identical activations, less memory"},
      {"--offload-optimizer", "where the optimizer state is placed: the step is bit-identical"},
      {"--init-sync", "how fresh weights reach every rank: a resume reads them"},
      {"--backend", layout},
      {"--ranks", layout},
      {"--tp", layout},
      {"--pp", layout},
      {"--cp", layout},
      {"--sequence-parallel", layout},
      {"--cp-algo", layout},
      {"--schedule", layout},
      {"--virtual-stages", layout},
      {"--zero-stage", layout},
      {"--zero3-prefetch", layout},
      {"--bucket-mb", layout},
      {"--allreduce", layout},
      {"--no-overlap", layout},
      {"--ep", layout},
      {"--moe-dispatch", "how tokens reach their experts: the same rows and sums either way"},
      {"--threads", "each process's compute threads: the kernels' sums do not depend on them"},
      {"--comm-timeout", "the watchdog's limit: it changes no value computed"},
      {"--check-replicas-every", "a check of the replicas' weights, which changes none of them"},
      {"--device-memory", "the pre-flight's budget: it refuses a run, never changes one"},
      {"--dry-run", "prints the pre-flight and trains nothing"},
      {"--resume", "the flag itself"},
      {"--save", output},
      {"--overwrite", output},
      {"--checkpoint-dir", output},
      {"--checkpoint-every", output},
      {"--checkpoint-keep", output},
      {"--checkpoint-async", output},
      {"--log-jsonl", output},
      {"--print-every", output},
      {"--eval-every", output},
      {"--val-data", output},
      {"--val-batches", output},
      {"--tokenizer", output},
      {"--sample", output},
      {"--temperature", output},
      {"--sample-top-k", output},
      {"--sample-seed", output},
      {"--prompt", output},
      {"--dump-logits", output},
      {"--trace", output},
  };
}

}  // namespace mixpar::ch08
