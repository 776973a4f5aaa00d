// TokenLoader: batches of next-token prediction from one token stream, for one data-parallel
// rank. Step k's global batch is a window of N*B*T+1 consecutive tokens (N ranks): inputs
// are its first N*B*T tokens as N*B rows of T, targets the same shifted by one; rank r takes
// rows r*B .. (r+1)*B-1. So the N ranks' rows, concatenated, are exactly the batch one rank
// with N*B rows would read, in both orders, and changing N at fixed N*B changes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace mixpar {

// sequential: llm.c's loader. Window k starts at token k*N*B*T; when the next window would not
// fit, the stream wraps to 0 (the tail shorter than a window is never read).
// shuffled: the same window starts, visited in a seeded permutation that is redrawn for each
// epoch (a pass over all windows), like llm.c's shuffled mode. Deterministic per seed.
enum class DataOrder : std::uint8_t { kSequential, kShuffled };
DataOrder parse_data_order(std::string_view name);  // "sequential" | "shuffled", else InputError
std::string_view data_order_name(DataOrder order);

struct TokenBatch {
  std::int64_t B = 0, T = 0;
  std::vector<std::int32_t> inputs;   // [B, T]
  std::vector<std::int32_t> targets;  // [B, T]: targets[b][t] is the token after inputs[b][t]
  std::int64_t step = 0;              // the step this batch belongs to
  std::int64_t epoch = 0;             // completed passes over the windows before this step
  std::int64_t position = 0;          // index in the stream of inputs[0][0]
};

// Where a loader stands: `step` batches were handed out; `epoch` = the pass over the windows
// its next batch is in, stored too so that resuming on a different dataset is caught.
// `samples`: the global samples (rows of T tokens, over every rank) consumed, and
// `order_rows`: the rows per window of the order they are drawn in (the N*B of the run that
// started it). The two place the loader in the stream of samples whatever its own N*B: a run
// saved at dp 4 resumes at dp 2, or with another gradient accumulation, and reads exactly the
// samples that follow. -1 and 0 (a state saved before they were stored): step * N*B and N*B of
// the loader that restores it, whose N*B must then be the saver's.
struct LoaderState {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t samples = -1;
  std::int64_t order_rows = 0;
  bool operator==(const LoaderState&) const = default;
};
// {"step": 12, "epoch": 0, "samples": 96, "order_rows": 8}
Json loader_state_to_json(const LoaderState& s);
LoaderState loader_state_from_json(const Json& json);  // InputError on missing/bad fields

class TokenLoader {
 public:
  using Tokens = std::shared_ptr<const std::vector<std::uint16_t>>;

  // InputError if B, T or world < 1, or the stream is shorter than one global batch
  // (N*B*T+1 tokens); std::invalid_argument if rank is not in [0, world).
  TokenLoader(Tokens tokens, std::int64_t B, std::int64_t T, DataOrder order, std::uint64_t seed,
              int rank = 0, int world = 1);
  TokenLoader(std::vector<std::uint16_t> tokens, std::int64_t B, std::int64_t T, DataOrder order,
              std::uint64_t seed, int rank = 0, int world = 1);

  TokenBatch next();                             // the batch at the cursor, then N*B rows on
  TokenBatch batch_at(std::int64_t step) const;  // a pure function of step (from sample 0)
  // First token of step's global window (rank 0's rows start there), from sample 0 in the
  // loader's own order.
  std::int64_t window_start(std::int64_t step) const;
  // First token of global sample g (its row of T inputs; the targets are one token on).
  // Sample g is row g % R of window (g / R) % W of epoch g / (R*W), R the order's rows per
  // window and W its windows per epoch: the stream of samples that every N*B reads in turn.
  std::int64_t sample_start(std::int64_t g) const;

  std::int64_t windows_per_epoch() const { return windows_; }
  std::int64_t global_batch_tokens() const { return world_ * B_ * T_; }  // N*B*T
  DataOrder order() const { return order_; }

  LoaderState state() const;
  // Continues exactly where `s` was taken, at the same global sample, in the order it was
  // drawn in (its order_rows). InputError if s.epoch disagrees with the order's windows per
  // epoch (the data or T changed since the state was saved), or if a state without samples
  // comes from another N*B.
  void restore(const LoaderState& s);

 private:
  // The window order of `epoch` (shuffled only); cached, so a loader is not thread-safe.
  const std::vector<std::int64_t>& permutation(std::int64_t epoch) const;
  // Sets the order's rows per window and the windows per epoch that follow.
  void set_order_rows(std::int64_t rows);
  // This rank's B rows of the global batch whose first sample is first_sample.
  TokenBatch rows_from(std::int64_t first_sample, std::int64_t step) const;

  Tokens tokens_;
  std::int64_t B_, T_;
  DataOrder order_;
  std::uint64_t seed_;
  std::int64_t rank_, world_;
  std::int64_t order_rows_ = 0;  // rows per window of the order: N*B unless restored
  std::int64_t windows_ = 0;     // windows per epoch: floor((n - 1) / (order_rows*T))
  std::int64_t step_ = 0;        // batches handed out by this loader (from the restored step)
  std::int64_t samples_ = 0;     // global samples consumed: the cursor
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::int64_t> cached_perm_;
};

}  // namespace mixpar
