// Everything a training run is told, on one device or a dp x tp x pp grid of ranks: model
// shape (or a Hugging Face directory to start from), data, batch, optimizer, precision,
// parallel layout, outputs. Parsed from train_gpt's flags and
// validated before any compute; every bad value is an InputError naming the flag (exit 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ch04_ddp/ddp.h"
#include "ch09_expert_parallel/expert_dispatch.h"
#include "ch09_expert_parallel/moe_config.h"
#include "io/token_loader.h"
#include "lr_schedule.h"
#include "model/gpt_params.h"
#include "ch03_master_weights/fp8_linear.h"
#include "comm/device_mesh.h"
#include "numerics/dtype.h"
#include "util/cli.h"
#include "util/json.h"

namespace mixpar::ch08 {

// The longest --fp8-amax-history accepted: Transformer Engine's default history. Each FP8 GEMM
// tensor of each layer keeps that many amaxes on every rank, and each checkpoint writes them.
inline constexpr std::int64_t kMaxFp8AmaxHistory = 1024;

// Where the ranks of a data-parallel run live (chapter 4).
enum class CommBackend : std::uint8_t {
  kLocal,  // --ranks N threads of this process, talking through shared memory
  kMpi,    // one process per rank under mpirun; the world size is mpirun's -np
};
std::string_view comm_backend_name(CommBackend b);  // "local" | "mpi"

// --sample's bound: each token is a forward pass over the context (1e9 ran for days; 2,000
// take about 5 s on 2 cores with the default model, so this bound is under a minute there).
inline constexpr std::int64_t kMaxSampleTokens = 10000;

struct TrainerConfig {
  // Model: the shape flags, or the shape of init_from's config.json.
  std::string init_from;  // HF directory to start from ("" = GPT-2 init with `seed`)
  GptConfig model{2, 8, 128, 64, 256};
  // Data: "" = the built-in addition dataset; a .bin token shard; any other file as bytes.
  std::string data;
  // Held-out text (a shard or a file of bytes, like --data): its loss every eval_every steps
  // over its first val_batches windows of batch x seq tokens ("" = none).
  std::string val_data;
  std::int64_t val_batches = 8;
  // GPT-2's encoder.json and vocab.bpe (scripts/prepare_text.sh writes them): --prompt encoded
  // and samples printed as text ("" = bytes, or ids for a shard).
  std::string tokenizer;
  DataOrder data_order = DataOrder::kShuffled;
  std::int64_t batch = 32, seq = 64, grad_accum = 1, steps = 1500;
  // Sequences per optimizer step over all replicas (0: not given). When given it sets
  // grad_accum = global_batch / (batch x dp), which must be a whole number.
  std::int64_t global_batch = 0;
  // Optimizer (AdamW) and schedule; weight decay on 2-D weights only.
  LrSchedule schedule{LrScheduleKind::kCosine, 2e-3, 2e-4, 100, 1500};
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  DType dtype = DType::kF32;
  // --dtype fp8 (chapter 3's last part): dtype is bf16 and the blocks' GEMMs run in FP8 under
  // this recipe (ch03_master_weights/fp8_linear.h); nullopt otherwise.
  std::optional<fp8::Fp8LinearConfig> fp8;
  double loss_scale = 65536.0;  // fp16: the dynamic scaler's initial scale (PyTorch's 2^16)
  bool recompute = false;
  std::uint64_t seed = 1337;
  // Outputs.
  std::string save;            // HF directory written at the end
  bool overwrite = false;      // replace existing outputs (--save, --log-jsonl, ...; never a checkpoint)
  std::string checkpoint_dir;  // full training checkpoints
  std::int64_t checkpoint_every = 0, checkpoint_keep = 2;
  // Checkpoints staged in host memory and written by a background thread (async_checkpoint.h).
  bool checkpoint_async = false;
  bool resume = false;
  std::string log_jsonl;
  std::int64_t print_every = 1;
  std::int64_t sample = 0;      // bytes to generate at the end (at most kMaxSampleTokens)
  double temperature = 0.0;     // 0: greedy
  std::int64_t sample_top_k = 0;  // sample among the k likeliest tokens only (0: all)
  std::uint64_t sample_seed = 0;  // the sampling stream's seed (default: seed)
  std::string prompt;           // sampling prompt ("" = a held-out problem or a newline)
  // Every K steps: the built-in dataset's held-out accuracy, and val_data's loss.
  std::int64_t eval_every = 0;
  std::string dump_logits;      // safetensors of the final model's logits on the prompt
  int threads = 0;              // 0: the OpenMP default (per rank: the cores shared out)
  // Pre-flight (preflight.h): print the checklist and exit 0; one rank's memory budget in
  // bytes (0: none), refused with the bill when the estimate is over it.
  bool dry_run = false;
  double device_memory = 0;

  // Data parallelism (chapter 4): dp replicas, each reading its `batch` rows of every
  // micro-batch, gradients all-reduced in buckets during backward. ranks == dp == 1 is the
  // single-device trainer, with no communicator at all.
  CommBackend backend = CommBackend::kLocal;
  int ranks = 1;  // local: rank threads to start; mpi: the world size mpirun gave
  // The rank mesh (mesh_rules.h, common/comm/device_mesh.h): [pp, dp, cp, tp] from these
  // flags, tp fastest, its degrees' product == ranks and its rules checked in one table.
  int dp = 1;     // data-parallel degree: model replicas
  int tp = 1;     // tensor-parallel degree (chapter 6)
  // Sequence parallelism (chapter 6, with tp > 1): LayerNorm and residual regions split along
  // the batch x sequence rows.
  bool sequence_parallel = false;
  int pp = 1;     // pipeline stages (chapter 7)
  // Context parallelism (chapter 6, part 2): each sequence split over cp ranks (zigzag: chunks
  // r and 2cp-1-r of 2cp), attention by "ring" (K/V blocks round the cp ring) or "all-to-all"
  // (DeepSpeed-Ulysses' head split); gradients summed over dp x cp. The grid is tp-cp-dp-pp.
  int cp = 1;
  std::string cp_algo = "ring";
  // Dimensions of the mesh beyond the four flags, each placed directly inside the dimension
  // `outer` names (a config built in code: no flag makes one). A new parallelism starts as one
  // entry here; until a strategy splits over it its degree must be 1 (mesh rule
  // unused-dimension), where it changes no rank and no group.
  struct ExtraDim {
    MeshDim dim;
    std::string outer;
  };
  std::vector<ExtraDim> extra_dims;
  // Chapter 7: the schedule of a pp > 1 run (afab|1f1b|interleaved|zb-h1), grad_accum being
  // its micro-batches m per step, and the model chunks per rank (1: train_gpt holds one).
  std::string pipeline_schedule = "1f1b";
  int virtual_stages = 1;
  double bucket_mb = 25.0;  // gradient bucket cap (PyTorch's bucket_cap_mb)
  ch04::InitSync init_sync = ch04::InitSync::kBroadcast;
  ch04::AllReduceAlgo allreduce = ch04::AllReduceAlgo::kBackend;
  bool overlap = true;        // reduce buckets on a communication thread during backward
  // ZeRO (chapter 5): 0 = DDP; 1 = FP32 masters and Adam moments sharded over the dp ranks,
  // gradients reduce-scattered into their owner's shard, parameters all-gathered after the
  // step. With dp = 1 every stage is stage 0.
  int zero_stage = 0;
  // ZeRO-3: units whose parameter all-gather starts ahead of the one computing (0: none).
  int zero3_prefetch = 1;
  // Optimizer offload (ZeRO-Offload, chapter 5): the FP32 masters, the FP32 gradient copy and
  // the AdamW moments (this rank's ZeRO shard of them) allocated as host memory, on the
  // ledger's host side; the device keeps the working parameters, gradients and activations,
  // and --device-memory is compared with those. On this CPU engine the step's arithmetic is
  // unchanged (bit-identical): offload is where the bytes are billed and placed.
  bool offload_optimizer = false;
  // Mixture of Experts (chapter 9): n_experts 0 is the dense model. Otherwise every
  // moe_every-th block (blocks moe_every - 1, 2 moe_every - 1, ...) runs chapter 9's MoE layer
  // in place of its MLP: moe.n_experts experts of GPT-2's MLP shape, moe.top_k per token,
  // the capacity, drop policy, gate normalisation and balancing coefficients of moe (its
  // d_model, d_hidden and seed are the model's, set when the layer is built). The experts are
  // sharded over ep ranks borrowed from dp x cp (ch09_expert_parallel/expert_mesh.h), their
  // tokens sent there by all-to-all or all-gather.
  ch09::MoeConfig moe{.n_experts = 0};
  int moe_every = 1;
  int ep = 1;
  ch09::DispatchKind moe_dispatch = ch09::DispatchKind::kAllToAll;
  bool uses_moe() const { return moe.n_experts > 0; }
  std::string trace;          // Chrome trace JSON of every rank's spans, written at the end
  std::int64_t check_replicas_every = 100;  // compare every rank's weights hash (0: at start)
  double comm_timeout = 300;  // a rank blocked this long in one call aborts the run

  bool distributed() const { return ranks > 1 || backend == CommBackend::kMpi; }

  bool builtin_data() const { return data.empty(); }
  // Over all replicas: the global batch of one optimizer step.
  std::int64_t sequences_per_step() const { return batch * grad_accum * dp; }
  std::int64_t tokens_per_step() const { return sequences_per_step() * seq; }
};

// The flags of train_gpt, with their defaults and help.
ArgParser make_trainer_args();
// Reads and validates the parsed flags (InputError on the first bad one). A shape from
// --init-from is read here, so seq > n_positions is caught before any compute.
TrainerConfig trainer_config_from_args(const ArgParser& args);
// The same checks on a config built in code (tests, benchmarks).
void validate(const TrainerConfig& c);
// Under MPI the world size is known only once MPI is up: sets c.ranks (and c.dp, unless --dp
// was given) from it and validates again. InputError when --ranks or --dp disagree with it.
void set_world_size(TrainerConfig& c, int world_size, bool dp_given, bool ranks_given);

// What a resumed run must share with the run that wrote the checkpoint (resume_identity.cpp:
// shape, dtype, batch layout, data order, seed, the optimizer's numbers): anything else makes
// the saved state mean something different. The data itself is compared by fingerprint, so a
// moved file still resumes.
Json run_identity(const TrainerConfig& c);
// Every flag a resume compares with the run that wrote the checkpoint, with what holds it: a
// key of run_identity(), or "lr_schedule" (the schedule's rates from the checkpoint's step on)
// or "data_fingerprint" (the tokens), the state's other checks. A difference is refused naming
// the flag.
std::vector<std::pair<std::string, std::string>> resume_identity_flags();
// The flags a resume may change, each with why (the layout, outputs, threads, ...). Every flag
// of make_trainer_args() is in one of the two lists (flag_coverage_test.cpp enumerates them).
std::vector<std::pair<std::string, std::string>> resume_free_flags();
// Every field, for the record in a checkpoint and at the top of a log.
Json to_json(const TrainerConfig& c);

}  // namespace mixpar::ch08
