// The pre-flight checklist: what the source articles (docs/SOURCES.md, "Pre-flight items")
// ask to check before a distributed run spends compute, computed from the configuration alone
// (no model is allocated, no rank started), so that `train_gpt --dry-run` prints it and exits 0
// and a run that cannot fit stops with its bill instead of std::bad_alloc:
//
//   grid      the dp x tp x pp grid and every group of it (common/comm/parallel_grid.h)
//   divides   heads and MLP width by tp, the vocabulary by tp (padded), blocks by pp, the
//             global batch as dp x B x m
//   batch     global batch = dp x B x m sequences, tokens per step
//   memory    per rank by category, chapter 3's calculator (memory_calculator.h) applied to the
//             rank's exact parameter count, against --device-memory and this machine's
//             MemAvailable (all the ranks this machine runs)
//   traffic   each group's bytes sent per rank and step (ring volumes, REFERENCE.md)
//   pipeline  the bubble of the schedule, played by chapter 7's simulator
//   positions seq <= n_positions
//   data      whether the steps fit in one epoch of windows, or how many epochs they take
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "numerics/dtype.h"
#include "tensor/ledger.h"
#include "trainer_config.h"

namespace mixpar::ch08 {

// One rank's estimated bill, by ledger category (kParameters, kGradients, kMasterParams,
// kOptimizerState, kActivations), of the pipeline stage whose total is largest. Activations:
// one block's for one micro-batch (Korthikanti et al. 2022, chapter 3's calculator) times the
// peak of the blocks the schedule's action list keeps in flight on that rank (preflight.cpp).
struct RankBill {
  int stage = 0;                 // the worst stage (its pp rank)
  int virtual_stages = 1;        // the model chunks the rank holds (interleaved: v)
  std::int64_t parameters = 0;   // its rank's parameter elements (its tp shard, every chunk)
  // Of them, the MoE blocks' (--n-experts): the routers and this ep rank's experts. Their
  // states, activations and one block's all-to-all buffers are in the categories below, as
  // chapter 3's calculator bills them (ch03_master_weights/moe_memory.h, mixpar-mem's).
  std::int64_t moe_parameters = 0;
  std::int64_t moe_dispatch_bytes = 0;  // transient: one block's send and receive buffers
  std::int64_t micro_batches_in_flight = 1;  // (chunk) micro-batches held at once, at most
  std::int64_t blocks_held = 0;  // the peak of their blocks (a chunk: 1/v of the rank's)
  std::int64_t param_bytes = 0, grad_bytes = 0, master_bytes = 0, optimizer_bytes = 0;
  // A 16-bit run's FP32 copy of the gradients the optimizer steps (chapter 3: unscaled,
  // checked and clipped in FP32), as many elements as the masters; 0 in an fp32 run. The
  // ledger counts it with the gradients.
  std::int64_t fp32_grad_bytes = 0;
  std::int64_t activation_bytes = 0;
  // --offload-optimizer: the masters, the FP32 gradient copy and the optimizer state are host
  // memory (ZeRO-Offload).
  bool offloaded = false;
  std::int64_t total() const {
    return param_bytes + grad_bytes + fp32_grad_bytes + master_bytes + optimizer_bytes +
           activation_bytes + moe_dispatch_bytes;
  }
  // What --device-memory is compared with: everything but what is offloaded to the host.
  std::int64_t host_total() const {
    return offloaded ? master_bytes + fp32_grad_bytes + optimizer_bytes : 0;
  }
  std::int64_t device_total() const { return total() - host_total(); }
  // "parameters 1.67 MiB, gradients ..., activations ... = total 9.1 MiB (stage 0)"; offloaded:
  // "device: parameters ..., gradients ..., activations ... = D; host: master weights ...,
  // optimizer state ... = H (stage 0, ...)"
  std::string text() const;
};
RankBill estimate_rank_bill(const TrainerConfig& c);
// The parameter elements pipeline rank `stage` holds (its tp shard of every chunk), in closed
// form: equal to the numel() of the registry it allocates (ch07::make_chunks_registry), found
// without naming a tensor, so the bill of any shape costs microseconds. InputError when the
// count overflows 64 bits.
std::int64_t rank_parameter_count(const TrainerConfig& c, int stage);
// Every pipeline rank's bill, by pp rank (one without a pipeline).
std::vector<RankBill> estimate_rank_bills(const TrainerConfig& c);

// Bytes each group sends from its busiest rank in one optimizer step (0 where the group is
// one rank): dp (DDP's all-reduce or ZeRO-1's reduce-scatter + all-gather), tp (Megatron's
// all-reduces of [B, T, C]), pp (activations and gradients at the stage boundaries),
// embedding (the tied wte's gradient between the first and last stage).
struct GroupTraffic {
  std::int64_t dp = 0, tp = 0, pp = 0, embedding = 0;
  std::int64_t cp = 0;  // context parallel: attention's K/V (or all-to-all) and the cp sums
};
GroupTraffic estimate_group_traffic(const TrainerConfig& c);

// The checklist lines, each "  ok  <item>: <numbers>". data_tokens: the stream's length;
// ranks_here: the ranks this machine runs (threads of this process, or mpirun's on it).
std::vector<std::string> preflight_checklist(const TrainerConfig& c, std::int64_t data_tokens,
                                             int ranks_here);

// /proc/meminfo's MemAvailable in bytes; -1 when unknown (no /proc).
std::int64_t mem_available_bytes();

// InputError with the bill when one rank's estimate exceeds --device-memory, or when the
// ranks this machine runs together exceed available_bytes (MemAvailable; < 0: not checked).
void check_memory(const TrainerConfig& c, int ranks_on_this_machine,
                  std::int64_t available_bytes);

}  // namespace mixpar::ch08
