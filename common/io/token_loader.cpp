// TokenLoader: window arithmetic and the per-epoch permutation. The permutation is a
// Fisher-Yates shuffle driven by Philox(seed, stream kShuffleStream + epoch), so any epoch's
// order is computed directly, without replaying the epochs before it (exact resume).
#include "io/token_loader.h"

#include <stdexcept>
#include <string>

#include "random/philox.h"
#include "util/errors.h"

namespace mixpar {

namespace {

// Far from the small stream numbers (ranks, layers) other users of a seed pick.
constexpr std::uint64_t kShuffleStream = std::uint64_t{0x5348554646} << 20;  // "SHUFF"

// Uniform in [0, n): 64-bit draws, rejecting the top partial range so there is no modulo bias.
std::uint64_t uniform_below(Philox& g, std::uint64_t n) {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  while (true) {
    const std::uint64_t hi = g.next_u32();
    const std::uint64_t x = (hi << 32) | g.next_u32();
    if (x < limit) return x % n;
  }
}

}  // namespace

DataOrder parse_data_order(std::string_view name) {
  if (name == "sequential") return DataOrder::kSequential;
  if (name == "shuffled") return DataOrder::kShuffled;
  throw InputError("--data-order: '" + std::string(name) + "' is not one of sequential|shuffled");
}

std::string_view data_order_name(DataOrder order) {
  return order == DataOrder::kSequential ? "sequential" : "shuffled";
}

Json loader_state_to_json(const LoaderState& s) {
  Json j = Json::object();
  j.set("step", s.step);
  j.set("epoch", s.epoch);
  return j;
}

LoaderState loader_state_from_json(const Json& json) {
  try {
    LoaderState s{json.at("step").as_int(), json.at("epoch").as_int()};
    if (s.step < 0 || s.epoch < 0) throw InputError("step and epoch must be >= 0");
    return s;
  } catch (const InputError& e) {
    throw InputError(std::string("data loader state: ") + e.what());
  }
}

TokenLoader::TokenLoader(Tokens tokens, std::int64_t B, std::int64_t T, DataOrder order,
                         std::uint64_t seed, int rank, int world)
    : tokens_(std::move(tokens)),
      B_(B),
      T_(T),
      order_(order),
      seed_(seed),
      rank_(rank),
      world_(world) {
  if (B < 1 || T < 1 || world < 1) {
    throw InputError(
        "data loader: B, T and the number of ranks must be >= 1 (got B=" + std::to_string(B) +
        ", T=" + std::to_string(T) + ", ranks=" + std::to_string(world) + ")");
  }
  if (rank < 0 || rank >= world) {
    throw std::invalid_argument("TokenLoader: rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(world) + ")");
  }
  const auto n = static_cast<std::int64_t>(tokens_->size());
  const std::int64_t need = global_batch_tokens() + 1;
  if (n < need) {
    throw InputError("data loader: the stream has " + std::to_string(n) +
                     " tokens, fewer than the " + std::to_string(need) +
                     " one global batch reads (ranks*B*T+1 = " + std::to_string(world) + "*" +
                     std::to_string(B) + "*" + std::to_string(T) + "+1)");
  }
  windows_ = (n - 1) / global_batch_tokens();
}

TokenLoader::TokenLoader(std::vector<std::uint16_t> tokens, std::int64_t B, std::int64_t T,
                         DataOrder order, std::uint64_t seed, int rank, int world)
    : TokenLoader(std::make_shared<const std::vector<std::uint16_t>>(std::move(tokens)), B, T,
                  order, seed, rank, world) {}

const std::vector<std::int64_t>& TokenLoader::permutation(std::int64_t epoch) const {
  if (epoch == cached_epoch_) return cached_perm_;
  cached_perm_.resize(static_cast<std::size_t>(windows_));
  for (std::int64_t i = 0; i < windows_; ++i) cached_perm_[static_cast<std::size_t>(i)] = i;
  Philox g(seed_, kShuffleStream + static_cast<std::uint64_t>(epoch));
  for (std::int64_t i = windows_ - 1; i > 0; --i) {
    const auto j = uniform_below(g, static_cast<std::uint64_t>(i) + 1);
    std::swap(cached_perm_[static_cast<std::size_t>(i)], cached_perm_[j]);
  }
  cached_epoch_ = epoch;
  return cached_perm_;
}

std::int64_t TokenLoader::window_start(std::int64_t step) const {
  if (step < 0) throw std::invalid_argument("TokenLoader: negative step " + std::to_string(step));
  const std::int64_t epoch = step / windows_;
  std::int64_t window = step % windows_;
  if (order_ == DataOrder::kShuffled) window = permutation(epoch)[static_cast<std::size_t>(window)];
  return window * global_batch_tokens();
}

TokenBatch TokenLoader::batch_at(std::int64_t step) const {
  TokenBatch b;
  b.B = B_;
  b.T = T_;
  b.step = step;
  b.epoch = step / windows_;
  b.position = window_start(step) + rank_ * B_ * T_;  // this rank's rows of the window
  const std::size_t n = static_cast<std::size_t>(B_ * T_);
  const std::uint16_t* src = tokens_->data() + b.position;
  b.inputs.assign(src, src + n);
  b.targets.assign(src + 1, src + n + 1);
  return b;
}

TokenBatch TokenLoader::next() { return batch_at(step_++); }

void TokenLoader::restore(const LoaderState& s) {
  if (s.step < 0 || s.epoch != s.step / windows_) {
    throw InputError(
        "data loader state (step " + std::to_string(s.step) + ", epoch " + std::to_string(s.epoch) +
        ") does not fit this data: " + std::to_string(windows_) +
        " windows per epoch would put step " + std::to_string(s.step) + " in epoch " +
        std::to_string(s.step / windows_) + "; did the data, B, T or the ranks change?");
  }
  step_ = s.step;
}

}  // namespace mixpar
