// The signals to watch from step one (source article B, docs/SOURCES.md): loss, gradient norm, learning rate, memory,
// throughput, plus loss scale and skipped steps. One short progress line per step for people,
// one JSON object per step (JSONL) for plots and tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <span>
#include <string>

#include "tensor/ledger.h"
#include "trainer.h"
#include "util/json.h"

namespace mixpar::ch08 {

// Live bytes per ledger category after the step, and the peak of their sum so far.
struct MemorySnapshot {
  std::array<std::size_t, kNumMemCategories> live{};
  std::size_t peak_total = 0;
  // The ledger's host side (--offload-optimizer): zero in a run that offloads nothing.
  std::array<std::size_t, kNumMemCategories> host_live{};
  std::size_t host_peak_total = 0;
};
MemorySnapshot memory_snapshot(const MemoryLedger& ledger);

// Keys: step, loss, grad_norm, clip_coef, lr, loss_scale, skipped, tokens_per_s, step_ms,
// data_position, epoch, and in a distributed run ranks, compute_ms, comm_ms, exposed_comm_ms,
// comm_ms_by_group (comm_times.h: per group ms, exposed_ms, and pp's waiting_ms),
// mem_bytes {parameters, gradients, master_params, optimizer_state, activations, comm_buffers,
// other} (this rank's), mem_peak_bytes; heldout_accuracy (built-in data) and val_loss
// (--val-data) when the step was evaluated; with
// by_rank (Trainer::gather_rank_metrics) mem_bytes_by_rank (a list by rank of objects like
// mem_bytes) and comm_bytes_by_rank (a list by rank of the bytes each sent in the step, over
// all its groups). mem_bytes are the device's; a run that bills bytes to the host
// (--offload-optimizer) adds host_mem_bytes and host_mem_peak_bytes, and host_mem_bytes_by_rank.
Json step_json(const StepStats& s, const MemorySnapshot& mem,
               std::optional<double> heldout_accuracy = std::nullopt,
               std::span<const RankMetrics> by_rank = {},
               std::optional<double> val_loss = std::nullopt);

// "step   12/1500 | loss 2.1034 | norm 0.532 | lr 2.00e-03 | 48.1k tok/s | ETA 1m52s", plus
// "| scale 65536" under fp16, "| compute 65 ms, comm 9.7 ms (3.1 exposed): tp 2.0 ms, dp 7.7 ms
// (1.1 exposed)" when distributed (comm_times.h: the step's communication by group),
// and "| SKIPPED (inf/nan)" for a skipped step.
std::string progress_line(const StepStats& s, std::int64_t total_steps, bool show_scale,
                          double eta_seconds);
std::string format_duration(double seconds);  // "42s", "3m05s", "1h02m"
std::string format_rate(double per_second);   // "950", "48.1k", "1.25M"
// Bytes a model wrote, safe on one terminal line: printable ASCII as it is, a backslash as
// "\\", newline and tab as "\n" and "\t", every other byte (control bytes, and bytes >= 0x80,
// which need not form valid UTF-8) as "\xHH".
std::string escape_bytes(const std::string& bytes);

// Seconds per step, smoothed, for the ETA (the first steps are slower: buffers, caches).
class EtaClock {
 public:
  void add(double seconds);
  double eta(std::int64_t steps_left) const;

 private:
  double avg_ = 0.0;
  std::int64_t n_ = 0;
};

// A JSONL file. Fresh runs truncate it; a resumed run keeps the lines of steps up to the
// checkpoint's (rewritten atomically) and appends, so steps run after that checkpoint by the
// interrupted run do not appear twice.
class JsonlLog {
 public:
  JsonlLog(const std::string& path, std::optional<std::int64_t> resume_step);
  void write(const Json& record);  // one line, flushed: a crash loses nothing already logged

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace mixpar::ch08
