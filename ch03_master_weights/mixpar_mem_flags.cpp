#include "ch03_master_weights/mixpar_mem_flags.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/cli.h"
#include "util/errors.h"

namespace mixpar::mem {
namespace {

const char* const kShapeFlags[] = {"n-layer",    "n-embd", "n-head",
                                   "vocab-size", "seq",    "micro-batch"};

ArgParser make_parser() {
  ArgParser a("mixpar-mem",
              "Per-device memory bill of training: model states (and activations when a GPT-2\n"
              "shape is given) under mixed precision, ZeRO, tensor and pipeline parallelism.");
  a.option("params", "", "parameter count, e.g. 7e9 (or give the shape flags instead)")
      .option("n-layer", "", "transformer layers L")
      .option("n-embd", "", "hidden size h")
      .option("n-head", "", "attention heads a")
      .option("vocab-size", "", "vocabulary size v (GPT-2: 50257)")
      .option("seq", "", "sequence length s")
      .option("micro-batch", "", "micro-batch size b (sequences per device per micro-step)")
      .option("n-positions", "", "position-table length (default: --seq)")
      .option("precision", "bf16",
              "fp32 | fp16 | bf16 (16-bit = mixed, with fp32 masters) | fp8 (bf16 mixed "
              "precision with FP8 GEMMs: each recipe's bill beside bf16's)")
      .option("fp8-recipe", "all", "with --precision fp8: all | delayed | tensorwise | blockwise")
      .option("amax-history", "1024",
              "with --precision fp8: the delayed recipe's amax history length (steps)")
      .option("optimizer", "adamw", "adamw | sgd (with momentum)")
      .option("zero-stage", "0", "0 | 1 (optimizer state) | 2 (+ gradients) | 3 (+ parameters)")
      .option("dp", "1", "data-parallel degree (ZeRO shards over it)")
      .option("tp", "1", "tensor-parallel degree")
      .option("pp", "1", "pipeline-parallel degree (1F1B schedule)")
      .option("recompute", "none", "none | selective | full activation recomputation")
      .flag("sequence-parallel", "Megatron sequence parallelism (with --tp)")
      .option("n-experts", "0",
              "MoE blocks (chapter 9, as train_gpt): experts of each MoE block (0: dense)")
      .option("top-k", "2", "with --n-experts: experts each token is sent to")
      .option("moe-every", "1", "with --n-experts: every K-th block is an MoE block")
      .option("capacity-factor", "0",
              "with --n-experts: each expert takes ceil(factor x tokens x top-k / experts) of a "
              "rank's assignments; 0: no limit (the dispatch billed at its worst case)")
      .option("ep", "1", "with --n-experts: expert-parallel degree, ranks borrowed from --dp")
      .option("device-memory", "80GB", "memory of one device: 80GB, 141GB, 24GiB, ...")
      .flag("offload-optimizer",
            "ZeRO-Offload: FP32 masters and optimizer state (the ZeRO shard) in host memory; "
            "the device keeps parameters, gradients and activations")
      .flag("json", "print the bill as JSON (bytes) instead of a table");
  return a;
}

std::optional<GptShape> read_shape(const ArgParser& a) {
  std::vector<std::string> given, missing;
  for (const char* f : kShapeFlags) (a.given(f) ? given : missing).push_back(f);
  if (given.empty()) {
    if (a.given("n-positions")) throw InputError("--n-positions needs the other shape flags");
    return std::nullopt;
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "--" : ", --") + m;
    throw InputError("a GPT shape also needs " + list);
  }
  GptShape s;
  s.n_layer = a.get_int("n-layer");
  s.n_embd = a.get_int("n-embd");
  s.n_head = a.get_int("n-head");
  s.vocab_size = a.get_int("vocab-size");
  s.seq = a.get_int("seq");
  s.micro_batch = a.get_int("micro-batch");
  if (a.given("n-positions")) {
    s.n_positions = a.get_int("n-positions");
    if (s.n_positions <= 0) throw InputError("--n-positions must be positive");
  }
  return s;
}

int read_int(const ArgParser& a, const char* name) {
  const std::int64_t v = a.get_int(name);
  if (v < -1000000000 || v > 1000000000) {
    throw InputError(std::string("--") + name + ": " + std::to_string(v) + " is out of range");
  }
  return static_cast<int>(v);
}

// The MoE flags (train_gpt's, moe_flags.cpp there); without --n-experts the others are
// refused, not ignored.
MoeShape read_moe(const ArgParser& a) {
  MoeShape m;
  m.n_experts = a.get_int("n-experts", 0, 4096);
  if (m.n_experts == 0) {
    for (const char* flag : {"top-k", "moe-every", "capacity-factor", "ep"}) {
      if (a.given(flag)) throw InputError(std::string("--") + flag + " needs --n-experts");
    }
    return m;
  }
  m.top_k = a.get_int("top-k", 1, 4096);
  m.moe_every = a.get_int("moe-every", 1, 1 << 20);
  m.ep = a.get_int("ep", 1, 1 << 20);
  m.capacity_factor = a.get_double("capacity-factor");
  return m;
}

TrainingSetup read_setup(const ArgParser& a) {
  TrainingSetup t;
  t.shape = read_shape(a);
  if (a.given("params")) {
    if (t.shape) throw InputError("give either --params or the shape flags, not both");
    t.params = a.get_int("params");
    if (t.params <= 0) throw InputError("--params must be positive, got " + a.get("params"));
  } else if (!t.shape) {
    throw InputError(
        "give --params (e.g. 7e9) or a shape (--n-layer --n-embd --n-head "
        "--vocab-size --seq --micro-batch)");
  }
  // get_choice names the flag in its error; the parse_* then map the word to the enum.
  // fp8 bills the BF16 mixed-precision run its GEMMs are cast from (read_fp8 adds the rest).
  const std::string precision = a.get_choice("precision", {"fp32", "fp16", "bf16", "fp8"});
  t.precision = parse_precision(precision == "fp8" ? "bf16" : precision);
  t.optimizer = parse_optimizer(a.get_choice("optimizer", {"adamw", "sgd"}));
  t.layout.zero_stage = read_int(a, "zero-stage");
  // Ranges a real layout stays inside, so that no degree is cut to 32 bits on the way (a tp of
  // 2^32 + 1 used to bill like tp 1).
  t.layout.dp = a.get_int("dp", 1, 1 << 20);
  t.layout.tp = a.get_int("tp", 1, 4096);
  t.layout.pp = a.get_int("pp", 1, 4096);
  t.layout.recompute = parse_recompute(a.get_choice("recompute", {"none", "selective", "full"}));
  t.layout.sequence_parallel = a.get_flag("sequence-parallel");
  // Flags that would change nothing are refused, not ignored.
  if (t.layout.sequence_parallel && t.layout.tp == 1) {
    throw InputError("--sequence-parallel splits activations over the tp group: it needs --tp 2 or more");
  }
  if (!t.shape && a.given("recompute")) {
    throw InputError("--recompute changes the activations, which need a GPT shape "
                     "(--n-layer --n-embd ...), not --params");
  }
  t.layout.moe = read_moe(a);
  t.device_memory_bytes = parse_bytes("--device-memory", a.get("device-memory"));
  t.offload_optimizer = a.get_flag("offload-optimizer");
  return t;
}

void read_fp8(const ArgParser& a, MixparMemFlags& f) {
  f.fp8 = a.get("precision") == "fp8";
  for (const char* flag : {"fp8-recipe", "amax-history"}) {
    if (!f.fp8 && a.given(flag)) {
      throw InputError(std::string("--") + flag + " needs --precision fp8");
    }
  }
  if (!f.fp8) return;
  const std::string r = a.get_choice("fp8-recipe", {"all", "delayed", "tensorwise", "blockwise"});
  if (r == "all") {
    f.fp8_recipes = {fp8::Recipe::kDelayed, fp8::Recipe::kTensorwise, fp8::Recipe::kBlockwise};
  } else {
    f.fp8_recipes = {fp8::parse_recipe(r)};
  }
  f.amax_history = static_cast<int>(a.get_int("amax-history", 1, 1 << 20));
}

}  // namespace

MixparMemFlags parse_mixpar_mem_flags(int argc, char** argv) {
  ArgParser args = make_parser();
  args.parse(argc, argv);
  MixparMemFlags f;
  f.setup = read_setup(args);
  // The layout's own checks (a degree that does not divide the shape, ...) are flag checks
  // too: here, before anything is billed or printed.
  validate(f.setup);
  f.json = args.get_flag("json");
  read_fp8(args, f);
  return f;
}

}  // namespace mixpar::mem
