// train_gpt's flags. Defaults come from TrainerConfig{} so the help text and the code agree;
// the default model and schedule learn the built-in addition task in about two minutes on two
// laptop cores (README.md has the run).
#include "trainer_config.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "model/gpt_hf.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
std::string num(std::int64_t v) { return std::to_string(v); }

bool is_shard_path(const std::string& path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
}

void add_model_flags(ArgParser& a, const TrainerConfig& d) {
  a.option("init-from", "",
           "Hugging Face GPT-2 directory (config.json + model.safetensors) to "
           "start from; its config.json gives the shape")
      .option("n-layer", num(d.model.n_layer), "transformer blocks")
      .option("n-head", num(d.model.n_head), "attention heads (must divide --n-embd)")
      .option("n-embd", num(d.model.n_embd), "model width C")
      .option("n-positions", "", "position table size (default: --seq)")
      .option("vocab-size", "", "vocabulary (default 256 for bytes, 50257 for a .bin shard)");
}

void add_data_flags(ArgParser& a, const TrainerConfig& d) {
  a.option("data", "",
           "a .bin token shard (llm.c format) or any other file read as bytes "
           "(default: the built-in addition dataset)")
      .option("data-order", "shuffled", "sequential|shuffled order of the batch windows")
      .option("batch", num(d.batch), "sequences per micro-batch B")
      .option("seq", num(d.seq), "sequence length T (<= --n-positions)")
      .option("grad-accum", num(d.grad_accum), "micro-batches per optimizer step")
      .option("steps", num(d.steps),
              "optimizer steps (the total, when resuming; 0 with "
              "--init-from: evaluate, sample or dump only)");
}

void add_optim_flags(ArgParser& a, const TrainerConfig& d) {
  a.option("lr", num(d.schedule.lr), "peak learning rate (AdamW)")
      .option("min-lr-frac", "0.1", "cosine: final learning rate as a fraction of --lr")
      .option("warmup", num(d.schedule.warmup_steps), "linear warmup steps")
      .option("lr-schedule", "cosine", "constant|cosine (after the warmup)")
      .option("weight-decay", num(d.weight_decay),
              "AdamW decoupled weight decay, applied to 2-D weights only (linear weights and "
              "embeddings; never biases or LayerNorm)")
      .option("beta1", num(d.beta1), "AdamW beta1")
      .option("beta2", num(d.beta2), "AdamW beta2")
      .option("eps", num(d.eps), "AdamW epsilon")
      .option("grad-clip", num(d.grad_clip), "max global gradient norm (0 = no clipping)")
      .option("dtype", "fp32",
              "fp32|bf16|fp16 working precision; 16-bit keeps FP32 master "
              "weights, fp16 adds the dynamic loss scaler")
      .option("loss-scale", "65536",
              "fp16: initial dynamic loss scale (x2 after 2000 clean steps, x0.5 and skip on "
              "inf/NaN)")
      .flag("recompute",
            "activation recompute: keep only each block's input, redo its "
            "forward during backward")
      .option("seed", num(static_cast<std::int64_t>(d.seed)),
              "initial weights and shuffled data order");
}

void add_output_flags(ArgParser& a, const TrainerConfig& d) {
  a.option("save", "", "write the final model as a Hugging Face directory")
      .option("checkpoint-dir", "", "directory of full training checkpoints")
      .option("checkpoint-every", "0", "save a checkpoint every K steps (0: only at the end)")
      .option("checkpoint-keep", num(d.checkpoint_keep), "checkpoints kept (older ones removed)")
      .flag("resume", "continue from the latest checkpoint in --checkpoint-dir (bit-exact)")
      .option("log-jsonl", "",
              "one JSON object per step (loss, grad_norm, lr, loss_scale, "
              "skipped, tokens_per_s, memory by category)")
      .option("print-every", num(d.print_every), "progress line every K steps")
      .option("eval-every", "",
              "built-in dataset: exact-match accuracy on held-out problems "
              "every K steps (default 100; 0: only at the end)")
      .option("sample", "0", "generate N bytes of text at the end")
      .option("temperature", "0", "sampling temperature (0 = greedy)")
      .option("prompt", "",
              "sampling prompt (default: a newline and a held-out problem, or a newline)")
      .option("dump-logits", "",
              "write the final model's logits on --prompt to FILE "
              "(safetensors; see scripts/check_hf_roundtrip.py)")
      .option("threads", "0", "CPU threads (0 = the OpenMP default)");
}

std::int64_t positive(const ArgParser& a, const char* name) {
  const std::int64_t v = a.get_int(name);
  if (v < 1) throw InputError(std::string("--") + name + " must be at least 1, got " + num(v));
  return v;
}

std::int64_t non_negative(const ArgParser& a, const char* name) {
  const std::int64_t v = a.get_int(name);
  if (v < 0) throw InputError(std::string("--") + name + " must be >= 0, got " + num(v));
  return v;
}

void read_model(const ArgParser& a, TrainerConfig& c) {
  c.init_from = a.given("init-from") ? a.get("init-from") : "";
  if (!c.init_from.empty()) {
    for (const char* flag : {"n-layer", "n-head", "n-embd", "n-positions", "vocab-size"}) {
      if (a.given(flag)) {
        throw InputError(std::string("--") + flag +
                         " conflicts with --init-from (the shape comes from its config.json)");
      }
    }
    c.model = read_gpt_hf_config(c.init_from);
    return;
  }
  c.model.n_layer = positive(a, "n-layer");
  c.model.n_head = positive(a, "n-head");
  c.model.n_embd = positive(a, "n-embd");
  c.model.n_positions = a.given("n-positions") ? positive(a, "n-positions") : c.seq;
  c.model.vocab_size = a.given("vocab-size")   ? positive(a, "vocab-size")
                       : is_shard_path(c.data) ? 50257
                                               : 256;
}

void read_optim(const ArgParser& a, TrainerConfig& c) {
  c.schedule.kind = parse_lr_schedule(a.get("lr-schedule"));
  c.schedule.lr = a.get_double("lr");
  c.schedule.min_lr = c.schedule.lr * a.get_double("min-lr-frac");
  c.schedule.warmup_steps = non_negative(a, "warmup");
  c.schedule.total_steps = c.steps;
  c.weight_decay = a.get_double("weight-decay");
  c.beta1 = a.get_double("beta1");
  c.beta2 = a.get_double("beta2");
  c.eps = a.get_double("eps");
  c.grad_clip = a.get_double("grad-clip");
  const std::string dtype = a.get_choice("dtype", {"fp32", "bf16", "fp16"});
  c.dtype = dtype == "fp32" ? DType::kF32 : dtype == "bf16" ? DType::kBF16 : DType::kF16;
  c.loss_scale = a.get_double("loss-scale");
  c.recompute = a.get_flag("recompute");
  c.seed = static_cast<std::uint64_t>(non_negative(a, "seed"));
}

void read_outputs(const ArgParser& a, TrainerConfig& c) {
  c.save = a.given("save") ? a.get("save") : "";
  c.checkpoint_dir = a.given("checkpoint-dir") ? a.get("checkpoint-dir") : "";
  c.checkpoint_every = non_negative(a, "checkpoint-every");
  c.checkpoint_keep = positive(a, "checkpoint-keep");
  c.resume = a.get_flag("resume");
  c.log_jsonl = a.given("log-jsonl") ? a.get("log-jsonl") : "";
  c.print_every = positive(a, "print-every");
  c.eval_every = a.given("eval-every") ? non_negative(a, "eval-every") : c.builtin_data() ? 100 : 0;
  c.sample = non_negative(a, "sample");
  c.temperature = a.get_double("temperature");
  c.prompt = a.given("prompt") ? a.get("prompt") : "";
  c.dump_logits = a.given("dump-logits") ? a.get("dump-logits") : "";
  const std::int64_t threads = non_negative(a, "threads");
  if (threads > 1024) throw InputError("--threads: " + num(threads) + " is not a thread count");
  c.threads = static_cast<int>(threads);
}

void check_range(bool ok, const std::string& what) {
  if (!ok) throw InputError(what);
}

}  // namespace

ArgParser make_trainer_args() {
  const TrainerConfig d;
  ArgParser a("train_gpt",
              "Trains a GPT-2 on one CPU device: AdamW with warmup + cosine, fp32/bf16/fp16 with "
              "FP32 master weights,\ngradient clipping, checkpoints with bit-exact resume, and "
              "Hugging Face model directories in and out.\nWith no flags it learns the built-in "
              "addition dataset (\"12+34=64\\n\", answers reversed) in a couple of minutes.");
  add_model_flags(a, d);
  add_data_flags(a, d);
  add_optim_flags(a, d);
  add_output_flags(a, d);
  return a;
}

TrainerConfig trainer_config_from_args(const ArgParser& a) {
  TrainerConfig c;
  c.data = a.given("data") ? a.get("data") : "";
  c.data_order = parse_data_order(a.get("data-order"));
  c.batch = positive(a, "batch");
  c.seq = positive(a, "seq");
  c.grad_accum = positive(a, "grad-accum");
  c.steps = non_negative(a, "steps");
  read_model(a, c);
  read_optim(a, c);
  read_outputs(a, c);
  validate(c);
  return c;
}

void validate(const TrainerConfig& c) {
  c.model.validate();
  check_range(c.seq <= c.model.n_positions, "--seq " + num(c.seq) +
                                                " is longer than the position table (n_positions " +
                                                num(c.model.n_positions) + ")");
  check_range(c.model.vocab_size <= 65536,
              "vocab_size " + num(c.model.vocab_size) + " does not fit uint16 token ids");
  check_range(c.schedule.lr > 0 && std::isfinite(c.schedule.lr), "--lr must be positive");
  check_range(c.schedule.min_lr >= 0 && c.schedule.min_lr <= c.schedule.lr,
              "--min-lr-frac must be in [0, 1]");
  check_range(c.weight_decay >= 0 && c.weight_decay * c.schedule.lr < 1,
              "--weight-decay must be >= 0 and below 1 / lr");
  check_range(c.beta1 >= 0 && c.beta1 < 1, "--beta1 must be in [0, 1)");
  check_range(c.beta2 >= 0 && c.beta2 < 1, "--beta2 must be in [0, 1)");
  check_range(c.eps > 0, "--eps must be positive");
  check_range(c.loss_scale > 0 && c.loss_scale <= 3.0e38, "--loss-scale must be a positive float");
  check_range(c.grad_clip >= 0, "--grad-clip must be >= 0 (0 = off)");
  check_range(c.temperature >= 0 && std::isfinite(c.temperature), "--temperature must be >= 0");
  check_range(c.steps >= 1 || !c.init_from.empty() || c.resume,
              "--steps 0 trains nothing: it is for evaluating, sampling or dumping a model given "
              "by --init-from");
  check_range(!c.resume || !c.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  check_range(c.checkpoint_every == 0 || !c.checkpoint_dir.empty(),
              "--checkpoint-every needs --checkpoint-dir");
  check_range(c.eval_every == 0 || c.builtin_data(),
              "--eval-every scores the built-in addition dataset; it cannot be used with --data");
  check_range(!c.builtin_data() || c.model.vocab_size >= 256,
              "the built-in dataset is byte tokens: --vocab-size must be at least 256");
}

Json run_identity(const TrainerConfig& c) {
  Json j = Json::object();
  j.set("n_layer", c.model.n_layer);
  j.set("n_head", c.model.n_head);
  j.set("n_embd", c.model.n_embd);
  j.set("n_positions", c.model.n_positions);
  j.set("vocab_size", c.model.vocab_size);
  j.set("dtype", std::string(dtype_name(c.dtype)));
  j.set("batch", c.batch);
  j.set("seq", c.seq);
  j.set("grad_accum", c.grad_accum);
  j.set("data_order", std::string(data_order_name(c.data_order)));
  j.set("seed", c.seed);
  return j;
}

Json to_json(const TrainerConfig& c) {
  Json j = run_identity(c);
  j.set("data", c.data.empty() ? "built-in addition" : c.data);
  j.set("init_from", c.init_from);
  j.set("steps", c.steps);
  j.set("lr", c.schedule.lr);
  j.set("min_lr", c.schedule.min_lr);
  j.set("warmup", c.schedule.warmup_steps);
  j.set("lr_schedule", std::string(lr_schedule_name(c.schedule.kind)));
  j.set("weight_decay", c.weight_decay);
  j.set("beta1", c.beta1);
  j.set("beta2", c.beta2);
  j.set("eps", c.eps);
  j.set("grad_clip", c.grad_clip);
  j.set("loss_scale", c.loss_scale);
  j.set("recompute", c.recompute);
  return j;
}

}  // namespace mixpar::ch08
