// train_gpt's flags. Defaults come from TrainerConfig{} so the help text and the code agree;
// the default model and schedule learn the built-in addition task in about two minutes on two
// laptop cores (README.md has the run).
#include "trainer_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ch02_loss_scaling/loss_scaler.h"
#include "ch04_ddp/ring_allreduce.h"
#include "ch07_pipeline/pipeline_schedule.h"
#include "comm/communicator.h"
#include "mesh_rules.h"
#include "moe_flags.h"
#include "model/gpt_hf.h"
#include "report/format.h"
#include "run_checks.h"
#include "training_data.h"
#include "util/checked_math.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

using mixpar::num;  // report/format.h: %g for doubles, integers exactly

bool is_shard_path(const std::string& path) { return is_token_shard_path(path); }

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
      .option("val-data", "",
              "held-out text (a .bin shard or a file of bytes): its loss every --eval-every "
              "steps and at the end")
      .option("val-batches", num(d.val_batches),
              "windows of --batch x --seq tokens from the start of --val-data per validation")
      .option("tokenizer", "",
              "folder with GPT-2's encoder.json and vocab.bpe: --prompt encoded and samples "
              "printed as text (scripts/prepare_text.sh)")
      .option("data-order", "shuffled", "sequential|shuffled order of the batch windows")
      .option("batch", num(d.batch), "sequences per micro-batch B")
      .option("seq", num(d.seq), "sequence length T (<= --n-positions)")
      .option("grad-accum", num(d.grad_accum), "micro-batches per optimizer step")
      .option("global-batch", "",
              "sequences per optimizer step over all ranks; sets --grad-accum to "
              "global / (batch x dp)")
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
              "fp32|bf16|fp16|fp8 working precision; 16-bit keeps FP32 master "
              "weights, fp16 adds the dynamic loss scaler, fp8 is bf16 with the blocks' GEMMs "
              "in FP8 (E4M3 forward, E5M2 gradients; --fp8-recipe)")
      .option("fp8-recipe", "delayed",
              "with --dtype fp8: delayed (Transformer Engine: scale from an amax history) | "
              "tensorwise (torchao: each tensor's own amax) | blockwise (DeepSeek-V3: 1x128 "
              "and 128x128 tiles, promotion every 128)")
      .option("fp8-amax-history", "16",
              "with --fp8-recipe delayed: steps of amax history a scale is computed from (at "
              "most 1024, Transformer Engine's default)")
      .option("fp8-margin", "0",
              "with --fp8-recipe delayed: scale = fp8_max / amax / 2^margin")
      .option("loss-scale", "65536",
              "fp16: initial dynamic loss scale (x2 after 2000 clean steps, x0.5 and skip on "
              "inf/NaN)")
      .flag("recompute",
            "activation recompute: keep only each block's input, redo its "
            "forward during backward")
      .option("seed", num(static_cast<std::int64_t>(d.seed)),
              "initial weights and shuffled data order")
      .flag("offload-optimizer",
            "ZeRO-Offload: FP32 master weights and AdamW moments (this rank's ZeRO shard) in "
            "host memory, the device keeping parameters, gradients and activations; "
            "--device-memory budgets the device's share only. On this CPU engine the step is "
            "unchanged, bit for bit (where the bytes are billed and placed)");
}

void add_output_flags(ArgParser& a, const TrainerConfig& d) {
  a.option("save", "", "write the final model as a Hugging Face directory")
      .flag("overwrite",
            "replace outputs that exist already (--save's model, --log-jsonl, --trace, "
            "--dump-logits); without it they are refused. Never a checkpoint's files")
      .option("checkpoint-dir", "", "directory of full training checkpoints")
      .option("checkpoint-every", "0", "save a checkpoint every K steps (0: only at the end)")
      .option("checkpoint-keep", num(d.checkpoint_keep), "checkpoints kept (older ones removed)")
      .flag("checkpoint-async",
            "stage each checkpoint in host memory and write it in the background while "
            "training goes on (the same files, committed as atomically)")
      .flag("resume", "continue from the latest checkpoint in --checkpoint-dir (bit-exact)")
      .option("log-jsonl", "",
              "one JSON object per step (loss, grad_norm, lr, loss_scale, "
              "skipped, tokens_per_s, memory by category)")
      .option("print-every", "",
              "progress line every K steps (default: --steps / 20, at least 1; skipped steps "
              "always)")
      .option("eval-every", "",
              "built-in dataset: exact-match accuracy on held-out problems; --val-data: the "
              "validation loss; every K steps (default 100; 0: only at the end)")
      .option("sample", "0", "generate N tokens of text at the end")
      .option("temperature", "0", "sampling temperature (0 = greedy)")
      .option("sample-top-k", "0", "sample among the K likeliest tokens only (0 = all)")
      .option("sample-seed", "", "seed of the sampling draws (default: --seed)")
      .option("prompt", "",
              "sampling prompt (default: a newline and a held-out problem, or a newline)")
      .option("dump-logits", "",
              "write the final model's logits on --prompt to FILE "
              "(safetensors; see scripts/check_hf_roundtrip.py)")
      .option("threads", "0",
              "CPU threads per rank (0 = the OpenMP default; with --ranks N the cores shared "
              "out)")
      .flag("dry-run", "print the pre-flight checklist (grid, divisibility, batch, memory, "
                       "traffic, bubble, data) and exit without training")
      .option("device-memory", "",
              "one rank's device memory budget (80GiB, 24GB, ...): a run whose device bill is "
              "over it stops before any compute with the bill (--offload-optimizer moves the "
              "masters and optimizer state off the device's bill)");
}

void add_parallel_flags(ArgParser& a, const TrainerConfig& d) {
  a.option("backend", "local",
           "local|mpi: ranks as threads of this process, or one process per rank under "
           "mpirun -np N")
      .option("ranks", "", "local: rank threads to start (default 1); mpi: must equal -np")
      .option("dp", "",
              "data-parallel degree (default: the ranks / (tp x cp x pp); dp x tp x cp x pp "
              "must equal the ranks)")
      .option("tp", "1", "tensor-parallel degree (chapter 6)")
      .flag("sequence-parallel",
            "with --tp > 1: LayerNorm and residual regions split along the sequence (chapter 6)")
      .option("pp", "1", "pipeline-parallel degree: stages (chapter 7)")
      .option("cp", "1",
              "context-parallel degree: each sequence split over cp ranks (chapter 6, part 2; "
              "--seq must divide by 2 x cp)")
      .option("cp-algo", d.cp_algo,
              "ring|all-to-all: context parallelism's attention (K/V blocks round a ring, or "
              "DeepSpeed-Ulysses' head split: --cp must divide n_head)")
      .option("schedule", d.pipeline_schedule,
              "afab|1f1b|interleaved|zb-h1|zb-v|dualpipev: the pipeline schedule of --pp > 1, "
              "with --grad-accum micro-batches per step (zb-v, dualpipev: --virtual-stages 2, "
              "the V; dualpipev: --grad-accum >= 2 x pp)")
      .option("virtual-stages", num(static_cast<std::int64_t>(d.virtual_stages)),
              "model chunks per rank of an interleaved or V pipeline")
      .option("bucket-mb", num(d.bucket_mb), "gradient bucket cap in MiB (PyTorch's 25)")
      .option("init-sync", "broadcast",
              "broadcast|seed: rank 0's initial weights broadcast, or one seed trusted and "
              "checked by hash")
      .option("allreduce", "backend",
              "backend|ring|naive: the communicator's all-reduce or chapter 4's hand-built ones")
      .flag("no-overlap", "reduce every bucket after backward, on the compute thread")
      .option("zero-stage", "0",
              "0|1|2|3: ZeRO (chapter 5); 0 = DDP, 1 = masters and moments sharded over dp, "
              "2 = the gradients too, 3 = the parameters too")
      .option("zero3-prefetch", "1",
              "ZeRO-3: units (blocks) whose parameters are gathered ahead of the one computing "
              "(0: none)")
      .option("trace", "", "write every rank's compute and communication spans as Chrome trace "
                           "JSON (Perfetto opens it)")
      .option("check-replicas-every", num(d.check_replicas_every),
              "compare a hash of every rank's weights every K steps (0: only at the start)")
      .option("comm-timeout", num(d.comm_timeout),
              "seconds a rank may wait in one communication call before the run is aborted");
}

void check_range(bool ok, const std::string& what);  // below

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
    // Refused before its config.json is read: a resume takes its weights from the checkpoint,
    // so --init-from would do nothing.
    if (a.get_flag("resume")) {
      throw InputError(
          "--init-from needs a fresh run (without it the flag does nothing): --resume takes the "
          "weights from the checkpoint; give the model's shape with --n-layer, --n-head, "
          "--n-embd, --n-positions and --vocab-size");
    }
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


// --dtype fp8 and its recipe's options (refused without it: they would change nothing).
void read_fp8(const ArgParser& a, bool fp8, TrainerConfig& c) {
  for (const char* flag : {"fp8-recipe", "fp8-amax-history", "fp8-margin"}) {
    if (!fp8 && a.given(flag)) throw InputError(std::string("--") + flag + " needs --dtype fp8");
  }
  if (!fp8) return;
  fp8::Fp8LinearConfig f;
  f.recipe = fp8::parse_recipe(a.get_choice("fp8-recipe", {"delayed", "tensorwise", "blockwise"}));
  // Every FP8 GEMM tensor of every layer keeps this many amaxes on every rank, and every
  // checkpoint writes them all as JSON numbers: 1048576 was billed at nothing, wrote a 176 MB
  // trainer_state.json and ran out of memory at the final checkpoint. Transformer Engine's
  // default history is 1024 steps; longer ones are refused, named with why.
  const std::int64_t history = a.get_int("fp8-amax-history");
  if (history < 1 || history > kMaxFp8AmaxHistory) {
    throw InputError("--fp8-amax-history " + num(history) + " is outside [1, " +
                     num(kMaxFp8AmaxHistory) + "]: every FP8 tensor of every layer keeps that many "
                     "amaxes on every rank and each checkpoint writes them all (Transformer "
                     "Engine's default history is 1024)");
  }
  f.amax_history = static_cast<int>(history);
  f.margin = static_cast<int>(a.get_int("fp8-margin", 0, 64));
  if (f.recipe != fp8::Recipe::kDelayed) {
    for (const char* flag : {"fp8-amax-history", "fp8-margin"}) {
      if (a.given(flag)) throw InputError(std::string("--") + flag + " needs --fp8-recipe delayed");
    }
  }
  c.fp8 = f;
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
  const std::string dtype = a.get_choice("dtype", {"fp32", "bf16", "fp16", "fp8"});
  c.dtype = dtype == "fp32" ? DType::kF32 : dtype == "fp16" ? DType::kF16 : DType::kBF16;
  read_fp8(a, dtype == "fp8", c);
  c.loss_scale = a.get_double("loss-scale");
  c.recompute = a.get_flag("recompute");
  c.seed = static_cast<std::uint64_t>(non_negative(a, "seed"));
  c.offload_optimizer = a.get_flag("offload-optimizer");
}

void read_outputs(const ArgParser& a, TrainerConfig& c) {
  c.save = a.given("save") ? a.get("save") : "";
  c.overwrite = a.get_flag("overwrite");
  c.checkpoint_dir = a.given("checkpoint-dir") ? a.get("checkpoint-dir") : "";
  c.checkpoint_every = non_negative(a, "checkpoint-every");
  c.checkpoint_keep = positive(a, "checkpoint-keep");
  c.checkpoint_async = a.get_flag("checkpoint-async");
  c.resume = a.get_flag("resume");
  c.log_jsonl = a.given("log-jsonl") ? a.get("log-jsonl") : "";
  // 20 lines or so a run: the default 1,500 steps print every 75th.
  c.print_every =
      a.given("print-every") ? positive(a, "print-every") : std::max<std::int64_t>(1, c.steps / 20);
  c.eval_every = a.given("eval-every")                    ? non_negative(a, "eval-every")
                 : c.builtin_data() || !c.val_data.empty() ? 100
                                                           : 0;
  c.sample = non_negative(a, "sample");
  // One forward per byte over the whole context (kMaxSampleTokens says how long).
  if (c.sample > kMaxSampleTokens) {
    throw InputError("--sample " + num(c.sample) + " is more than " + num(kMaxSampleTokens) +
                     " tokens (each one a forward pass of the model)");
  }
  c.temperature = a.get_double("temperature");
  c.sample_top_k = non_negative(a, "sample-top-k");
  c.sample_seed = a.given("sample-seed") ? static_cast<std::uint64_t>(non_negative(a, "sample-seed")) : c.seed;
  c.prompt = a.given("prompt") ? a.get("prompt") : "";
  c.dump_logits = a.given("dump-logits") ? a.get("dump-logits") : "";
  const std::int64_t threads = non_negative(a, "threads");
  if (threads > 1024) throw InputError("--threads: " + num(threads) + " is not a thread count");
  c.threads = static_cast<int>(threads);
  c.dry_run = a.get_flag("dry-run");
  if (a.given("device-memory")) {
    c.device_memory = parse_bytes("--device-memory", a.get("device-memory"));
    if (!(c.device_memory > 0)) {
      throw InputError("--device-memory must be a positive size, like 80GiB");
    }
  }
}

void check_range(bool ok, const std::string& what) {
  if (!ok) throw InputError(what);
}

// Without --dp: the ranks the mesh's other dimensions leave (at least 1; a product that does
// not come out is mesh rule world's error).
int default_dp(const TrainerConfig& c) {
  std::int64_t others = 1;
  for (const MeshDim& d : mesh_dims(c)) {
    if (d.name != "dp") others *= std::max(1, d.size);
  }
  return static_cast<int>(std::max<std::int64_t>(1, c.ranks / others));
}

void read_parallel(const ArgParser& a, TrainerConfig& c) {
  const std::string backend = a.get_choice("backend", {"local", "mpi"});
  c.backend = backend == "mpi" ? CommBackend::kMpi : CommBackend::kLocal;
  c.ranks = 1;
  if (a.given("ranks")) {
    const std::int64_t ranks = positive(a, "ranks");
    check_range(ranks <= 1024, "--ranks " + num(ranks) + " is not a rank count");
    c.ranks = static_cast<int>(ranks);
  }
  for (const auto& [flag, degree] :
       {std::pair<const char*, int*>{"tp", &c.tp}, {"pp", &c.pp}, {"cp", &c.cp}}) {
    const std::int64_t v = positive(a, flag);
    check_range(v <= 1024, std::string("--") + flag + " " + num(v) + " is not a rank count");
    *degree = static_cast<int>(v);
  }
  c.sequence_parallel = a.get_flag("sequence-parallel");
  c.cp_algo = a.get_choice("cp-algo", {"ring", "all-to-all"});
  c.pipeline_schedule = a.get_choice("schedule", ch07::schedule_names());
  const std::int64_t chunks = positive(a, "virtual-stages");
  check_range(chunks <= 64, "--virtual-stages " + num(chunks) + " is not a chunk count");
  c.virtual_stages = static_cast<int>(chunks);
  c.dp = default_dp(c);
  if (a.given("dp")) {
    const std::int64_t dp = positive(a, "dp");
    check_range(dp <= 1024, "--dp " + num(dp) + " is not a rank count");
    c.dp = static_cast<int>(dp);
  }
  c.bucket_mb = a.get_double("bucket-mb");
  const std::string init = a.get_choice("init-sync", {"broadcast", "seed"});
  c.init_sync = init == "seed" ? ch04::InitSync::kSameSeed : ch04::InitSync::kBroadcast;
  const std::string algo = a.get_choice("allreduce", {"backend", "ring", "naive"});
  c.allreduce = algo == "ring"    ? ch04::AllReduceAlgo::kRing
                : algo == "naive" ? ch04::AllReduceAlgo::kNaive
                                  : ch04::AllReduceAlgo::kBackend;
  c.overlap = !a.get_flag("no-overlap");
  const std::int64_t zero = a.get_int("zero-stage");
  check_range(zero >= 0 && zero <= 3,
              "--zero-stage " + num(zero) + " is not a ZeRO stage: one of 0, 1, 2, 3");
  c.zero_stage = static_cast<int>(zero);
  const std::int64_t prefetch = a.get_int("zero3-prefetch");
  check_range(prefetch >= 0 && prefetch <= 1024,
              "--zero3-prefetch " + num(prefetch) + " is not a number of units in [0, 1024]");
  check_range(!a.given("zero3-prefetch") || zero == 3,
              "--zero3-prefetch needs --zero-stage 3 (it gathers parameters ahead)");
  c.zero3_prefetch = static_cast<int>(prefetch);
  c.trace = a.given("trace") ? a.get("trace") : "";
  c.comm_timeout = a.get_double("comm-timeout");
  c.check_replicas_every = non_negative(a, "check-replicas-every");
}

// --global-batch sets grad_accum from batch and dp (dp may be known only under MPI).
void resolve_global_batch(TrainerConfig& c) {
  if (c.global_batch == 0) return;
  const std::int64_t per_micro_step =
      checked_product("--global-batch", {{"--batch", c.batch}, {"--dp", c.dp}});
  check_range(c.global_batch % per_micro_step == 0,
              "--global-batch " + num(c.global_batch) + " is not a multiple of --batch x --dp = " +
                  num(c.batch) + " x " + num(static_cast<std::int64_t>(c.dp)) + " = " +
                  num(per_micro_step) + " sequences");
  c.grad_accum = c.global_batch / per_micro_step;
}

void validate_single(const TrainerConfig& c);  // below, beside validate()

// Pipeline parallel (chapter 7): the schedule's constraints on m (--grad-accum), and what
// train_gpt's pipeline does not run yet. (The pipeline's rules with the other dimensions and
// the model, a block for every stage among them, are mesh rules: mesh_rules.cpp.)
void validate_pipeline(const TrainerConfig& c) {
  if (c.pp == 1) return;
  check_range(c.grad_accum <= 1024, "--grad-accum " + num(c.grad_accum) +
                                        ": more micro-batches than a pipeline step plans");
  // The schedule's own constraints (interleaved: v >= 2, m a multiple of pp), named.
  const ch07::ScheduleKind kind = ch07::parse_schedule(c.pipeline_schedule);
  ch07::check_layout(kind,
                     ch07::layout_for(kind, c.pp, static_cast<int>(c.grad_accum), c.virtual_stages));
  // ZB-H1, ZB-V and DualPipeV keep each block's activations from B to W; recompute keeps one
  // shared set.
  check_range(!ch07::splits_backward(kind) || !c.recompute,
              "--schedule " + c.pipeline_schedule + " with --recompute: W needs every block's "
              "activations after B, recompute keeps only the blocks' inputs; drop one of them");
}

void validate_parallel(const TrainerConfig& c) {
  // Every rule between the mesh's dimensions and the model, in one table.
  check_mesh_rules(c);
  validate_pipeline(c);
  check_range(c.global_batch == 0 || c.global_batch == c.sequences_per_step(),
              "--global-batch " + num(c.global_batch) + " is not --batch x --grad-accum x --dp");
  check_range(c.bucket_mb > 0 && c.bucket_mb <= 65536, "--bucket-mb must be in (0, 65536]");
  check_range(c.comm_timeout > 0 && std::isfinite(c.comm_timeout),
              "--comm-timeout must be a positive number of seconds");
  const std::string zero = "--zero-stage " + num(static_cast<std::int64_t>(c.zero_stage));
  check_range(c.zero_stage >= 0 && c.zero_stage <= 3, zero + " is not a ZeRO stage: 0-3");
  check_range(c.trace.empty() || c.distributed(),
              "--trace records the ranks' compute and communication: it needs --ranks N > 1 "
              "or --backend mpi");
}

}  // namespace

ArgParser make_trainer_args() {
  const TrainerConfig d;
  ArgParser a("train_gpt",
              "Trains a GPT-2 on CPU: AdamW with warmup + cosine, fp32/bf16/fp16 with FP32 master "
              "weights,\ngradient clipping, checkpoints with bit-exact resume, Hugging Face model "
              "directories in and out,\non a grid of data, tensor, context and pipeline parallelism (--dp, --tp, --cp, --pp; "
              "ZeRO 1-3 over dp)\nover --ranks N threads or --backend mpi processes.\nWith no flags it learns the built-in addition dataset "
              "(\"12+34=64\\n\", answers reversed) in a couple of minutes.");
  add_model_flags(a, d);
  add_data_flags(a, d);
  add_optim_flags(a, d);
  add_output_flags(a, d);
  add_parallel_flags(a, d);
  add_moe_flags(a);
  return a;
}

namespace {

// A flag that changes nothing in the configuration given is refused, naming what it needs:
// accepted silently, it let a user believe the run did what it did not.
void refuse_flags_without_effect(const ArgParser& a, const TrainerConfig& c) {
  const auto need = [&](const char* flag, bool has_effect, const std::string& what) {
    if (a.given(flag) && !has_effect) {
      throw InputError(std::string("--") + flag + " needs " + what + " (without it the flag does "
                       "nothing)");
    }
  };
  need("cp-algo", c.cp > 1, "--cp > 1: it chooses context parallelism's attention");
  need("schedule", c.pp > 1, "--pp > 1: it orders a pipeline's micro-batches");
  need("loss-scale", c.dtype == DType::kF16 && !c.fp8, "--dtype fp16: only fp16 scales the loss");
  need("temperature", c.sample > 0, "--sample N: it shapes the sampling");
  need("sample-top-k", c.sample > 0, "--sample N: it shapes the sampling");
  need("sample-seed", c.sample > 0, "--sample N: it seeds the sampling");
  need("val-batches", !c.val_data.empty(), "--val-data FILE: it sizes the validation");
  need("tokenizer", c.sample > 0 || !c.dump_logits.empty(),
       "--sample N or --dump-logits FILE: it encodes the prompt and prints the sample");
  need("prompt", c.sample > 0 || !c.dump_logits.empty(),
       "--sample N or --dump-logits FILE: they read it");
  for (const char* moe : {"top-k", "moe-every", "capacity-factor", "drop-policy", "moe-gates",
                          "aux-loss-coef", "z-loss-coef", "expert-bias-rate", "moe-dispatch"}) {
    need(moe, c.uses_moe(), "--n-experts > 0: it shapes the MoE blocks");
  }
  need("drop-policy", c.moe.capacity_factor > 0,
       "--capacity-factor > 0: without a capacity nothing is dropped");
}

}  // namespace

TrainerConfig trainer_config_from_args(const ArgParser& a) {
  refuse_empty_paths(a);
  TrainerConfig c;
  c.data = a.given("data") ? a.get("data") : "";
  c.val_data = a.given("val-data") ? a.get("val-data") : "";
  c.val_batches = positive(a, "val-batches");
  c.tokenizer = a.given("tokenizer") ? a.get("tokenizer") : "";
  c.data_order = parse_data_order(a.get("data-order"));
  c.batch = positive(a, "batch");
  c.seq = positive(a, "seq");
  c.grad_accum = positive(a, "grad-accum");
  if (a.given("global-batch")) {
    check_range(!a.given("grad-accum"),
                "--grad-accum conflicts with --global-batch (which sets it to global / (batch "
                "x dp))");
    c.global_batch = positive(a, "global-batch");
  }
  c.steps = non_negative(a, "steps");
  read_model(a, c);
  read_optim(a, c);
  read_outputs(a, c);
  read_parallel(a, c);
  read_moe(a, c);
  refuse_flags_without_effect(a, c);
  if (c.backend == CommBackend::kMpi) {
    // The world size is mpirun's: set_world_size finishes the parallel part once MPI is up.
    validate_single(c);
    return c;
  }
  resolve_global_batch(c);
  validate(c);
  return c;
}

std::string_view comm_backend_name(CommBackend b) {
  return b == CommBackend::kMpi ? "mpi" : "local";
}

void set_world_size(TrainerConfig& c, int world_size, bool dp_given, bool ranks_given) {
  check_range(!ranks_given || c.ranks == world_size,
              "--ranks " + num(static_cast<std::int64_t>(c.ranks)) + " but mpirun started " +
                  num(static_cast<std::int64_t>(world_size)) +
                  " processes (under --backend mpi the ranks are mpirun's -np)");
  c.ranks = world_size;
  if (!dp_given) c.dp = default_dp(c);
  resolve_global_batch(c);
  validate(c);
}

namespace {

// Everything but what depends on the number of ranks.
void validate_single(const TrainerConfig& c) {
  c.model.validate();
  check_range(c.seq <= c.model.n_positions, "--seq " + num(c.seq) +
                                                " is longer than the position table (n_positions " +
                                                num(c.model.n_positions) + ")");
  check_range(c.model.vocab_size <= 65536,
              "vocab_size " + num(c.model.vocab_size) + " does not fit uint16 token ids");
  check_range(c.schedule.lr > 0 && std::isfinite(c.schedule.lr), "--lr must be positive");
  check_range(c.schedule.min_lr >= 0 && c.schedule.min_lr <= c.schedule.lr,
              "--min-lr-frac must be in [0, 1]");
  check_range(c.weight_decay >= 0, "--weight-decay must be >= 0");
  // AdamW's decoupled decay multiplies each weight by 1 - lr x wd: at 1 or more it flips the
  // weights' signs. Named by --lr first, the flag a user reaches for (--lr 1e30 was reported as
  // a --weight-decay problem).
  check_range(c.weight_decay * c.schedule.lr < 1,
              "--lr " + num(c.schedule.lr) + " with --weight-decay " + num(c.weight_decay) +
                  ": lr x weight_decay = " + num(c.schedule.lr * c.weight_decay) +
                  " must be below 1 (each step multiplies the weights by 1 - lr x "
                  "weight_decay); lower --lr or --weight-decay");
  check_range(c.beta1 >= 0 && c.beta1 < 1, "--beta1 must be in [0, 1)");
  check_range(c.beta2 >= 0 && c.beta2 < 1, "--beta2 must be in [0, 1)");
  // An infinite epsilon turns every Adam update into zero: a run that trains nothing.
  check_range(c.eps > 0 && std::isfinite(c.eps), "--eps must be positive and finite");
  // Adam divides by sqrt(v) + eps with sqrt(v) about the gradients' size: an eps of 1 or more
  // swamps it and the update shrinks to lr x m / eps, a run that barely moves (1e30 trained
  // nothing, silently).
  check_range(c.eps < 1, "--eps " + num(c.eps) +
                             " is not below 1: it would swamp sqrt(v) in Adam's denominator "
                             "(PyTorch's default is 1e-8)");
  // FP32 holds the scale, and unscaling multiplies by its FP32 inverse: both must be finite
  // (below about 2.9e-39 the inverse is infinite and zeros unscale to NaN).
  check_range(c.loss_scale > 0 && c.loss_scale <= 3.0e38 &&
                  ch02::has_finite_inverse(static_cast<float>(c.loss_scale)),
              "--loss-scale " + num(c.loss_scale) + " is outside [" +
                  num(static_cast<double>(ch02::min_loss_scale())) +
                  ", 3e38]: the scale and its inverse must be finite FP32 values");
  check_range(c.grad_clip >= 0 && !std::isnan(c.grad_clip), "--grad-clip must be >= 0 (0 = off)");
  check_range(c.temperature >= 0 && std::isfinite(c.temperature), "--temperature must be >= 0");
  // The watchdog's limit, range-checked for every backend (1e10 overflowed MPI's deadline).
  if (c.comm_timeout > kMaxWatchdogSeconds) {
    char given[32];
    std::snprintf(given, sizeof given, "%.15g", c.comm_timeout);
    throw InputError("--comm-timeout " + std::string(given) +
                     " is out of range: at most 1e6 seconds (about 11.6 days)");
  }
  check_range(c.steps >= 1 || !c.init_from.empty() || c.resume || c.sample > 0 ||
                  !c.dump_logits.empty(),
              "--steps 0 trains nothing: it is for evaluating a model given by --init-from, or "
              "sampling or dumping one (--sample, --dump-logits: the initialization before "
              "training)");
  check_range(!c.resume || !c.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  check_range(c.checkpoint_every == 0 || !c.checkpoint_dir.empty(),
              "--checkpoint-every needs --checkpoint-dir");
  check_range(!c.checkpoint_async || !c.checkpoint_dir.empty(),
              "--checkpoint-async needs --checkpoint-dir (it writes checkpoints in the "
              "background)");
  check_range(c.eval_every == 0 || c.builtin_data() || !c.val_data.empty(),
              "--eval-every scores the built-in addition dataset or --val-data; with --data it "
              "needs --val-data");
  check_range(!c.builtin_data() || c.model.vocab_size >= 256,
              "the built-in dataset is byte tokens: --vocab-size must be at least 256");
}

}  // namespace

// FP8 GEMMs (chapter 3's last part) cast a bf16 working copy, through the blocks' GEMM seam;
// with --tp each rank casts its shard (chapter 6's split layers run their local products
// through the seam, per-tensor amaxes max-reduced over tp). Blockwise tiles (1x128) and blocks
// (128x128) are local to a shard: they are one device's only when every shard boundary falls
// on a multiple of 128 along the split dimension, n_embd / tp (attn.c_proj's rows; 3 and 4
// times it are the other splits).
static void validate_fp8(const TrainerConfig& c) {
  if (!c.fp8) return;
  check_range(c.dtype == DType::kBF16, "FP8 GEMMs cast a bf16 working copy (dtype bf16)");
  if (c.fp8->recipe == fp8::Recipe::kBlockwise && c.tp > 1) {
    const std::int64_t per = c.model.n_embd / c.tp;
    check_range(per % 128 == 0,
                "--fp8-recipe blockwise with --tp " + num(static_cast<std::int64_t>(c.tp)) +
                    ": n_embd / tp = " + num(per) +
                    " is not a multiple of 128, so the 1x128 tiles and 128x128 blocks would "
                    "straddle the shards (n_embd must be a multiple of 128 x tp = " +
                    num(128 * static_cast<std::int64_t>(c.tp)) + ")");
  }
}

void validate(const TrainerConfig& c) {
  validate_single(c);
  check_derived_sizes(c);  // run_checks.h: before validate_parallel forms any product
  validate_parallel(c);
  validate_fp8(c);
  validate_moe(c);
}

Json to_json(const TrainerConfig& c) {
  Json j = run_identity(c);
  j.set("data", c.data.empty() ? "built-in addition" : c.data);
  if (!c.val_data.empty()) j.set("val_data", c.val_data);
  if (!c.tokenizer.empty()) j.set("tokenizer", c.tokenizer);
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
  j.set("backend", std::string(comm_backend_name(c.backend)));
  j.set("ranks", static_cast<std::int64_t>(c.ranks));
  j.set("tp", static_cast<std::int64_t>(c.tp));
  if (c.sequence_parallel) j.set("sequence_parallel", true);
  j.set("pp", static_cast<std::int64_t>(c.pp));
  if (c.cp > 1) {
    j.set("cp", static_cast<std::int64_t>(c.cp));
    j.set("cp_algo", c.cp_algo);
  }
  j.set("bucket_mb", c.bucket_mb);
  j.set("allreduce", ch04::algo_name(c.allreduce));
  if (c.zero_stage != 0) j.set("zero_stage", static_cast<std::int64_t>(c.zero_stage));
  if (c.zero_stage == 3) j.set("zero3_prefetch", static_cast<std::int64_t>(c.zero3_prefetch));
  if (c.offload_optimizer) j.set("offload_optimizer", true);
  if (c.uses_moe()) {
    j.set("ep", static_cast<std::int64_t>(c.ep));
    j.set("moe_dispatch", std::string(ch09::dispatch_name(c.moe_dispatch)));
  }
  return j;
}

}  // namespace mixpar::ch08
