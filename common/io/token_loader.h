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

// Where a loader stands: `step` batches were handed out; `epoch` = step / windows per epoch,
// stored too so that resuming on a different dataset or batch size is caught.
struct LoaderState {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  bool operator==(const LoaderState&) const = default;
};
Json loader_state_to_json(const LoaderState& s);       // {"step": 12, "epoch": 0}
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

  TokenBatch next();                             // batch_at(state().step), then step + 1
  TokenBatch batch_at(std::int64_t step) const;  // a pure function of step
  // First token of step's global window (rank 0's rows start there).
  std::int64_t window_start(std::int64_t step) const;

  std::int64_t windows_per_epoch() const { return windows_; }
  std::int64_t global_batch_tokens() const { return world_ * B_ * T_; }  // N*B*T
  DataOrder order() const { return order_; }

  LoaderState state() const { return {step_, step_ / windows_}; }
  // Continues exactly where `s` was taken. InputError if s.epoch disagrees with this loader's
  // windows per epoch (the data, B, T or N*B changed since the state was saved).
  void restore(const LoaderState& s);

 private:
  // The window order of `epoch` (shuffled only); cached, so a loader is not thread-safe.
  const std::vector<std::int64_t>& permutation(std::int64_t epoch) const;

  Tokens tokens_;
  std::int64_t B_, T_;
  DataOrder order_;
  std::uint64_t seed_;
  std::int64_t rank_, world_;
  std::int64_t windows_;  // windows per epoch: floor((n - 1) / (N*B*T))
  std::int64_t step_ = 0;
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::int64_t> cached_perm_;
};

}  // namespace mixpar
