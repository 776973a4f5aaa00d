// TokenLoader: window arithmetic and the per-epoch permutation. The permutation is a
// Fisher-Yates shuffle driven by Philox(seed, stream kShuffleStream + epoch), so any epoch's
// order is computed directly, without replaying the epochs before it (exact resume).
#include "io/token_loader.h"

#include <algorithm>
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
  if (s.samples >= 0) {
    j.set("samples", s.samples);
    j.set("order_rows", s.order_rows);
  }
  return j;
}

LoaderState loader_state_from_json(const Json& json) {
  try {
    LoaderState s{json.at("step").as_int(), json.at("epoch").as_int()};
    if (s.step < 0 || s.epoch < 0) throw InputError("step and epoch must be >= 0");
    if (json.contains("samples") || json.contains("order_rows")) {
      s.samples = json.at("samples").as_int();
      s.order_rows = json.at("order_rows").as_int();
      if (s.samples < 0 || s.order_rows < 1) {
        throw InputError("samples must be >= 0 and order_rows >= 1");
      }
    }
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
  set_order_rows(world_ * B_);
}

void TokenLoader::set_order_rows(std::int64_t rows) {
  order_rows_ = rows;
  windows_ = (static_cast<std::int64_t>(tokens_->size()) - 1) / (rows * T_);
  cached_epoch_ = -1;  // the permutation is over windows of `rows`
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

std::int64_t TokenLoader::sample_start(std::int64_t g) const {
  if (g < 0) throw std::invalid_argument("TokenLoader: negative sample " + std::to_string(g));
  const std::int64_t per_epoch = windows_ * order_rows_;
  const std::int64_t epoch = g / per_epoch;
  const std::int64_t in_epoch = g % per_epoch;
  std::int64_t window = in_epoch / order_rows_;
  if (order_ == DataOrder::kShuffled) window = permutation(epoch)[static_cast<std::size_t>(window)];
  return (window * order_rows_ + in_epoch % order_rows_) * T_;
}

std::int64_t TokenLoader::window_start(std::int64_t step) const {
  if (step < 0) throw std::invalid_argument("TokenLoader: negative step " + std::to_string(step));
  return sample_start(step * world_ * B_);
}

TokenBatch TokenLoader::batch_at(std::int64_t step) const {
  if (step < 0) throw std::invalid_argument("TokenLoader: negative step " + std::to_string(step));
  return rows_from(step * world_ * B_, step);
}

TokenBatch TokenLoader::rows_from(std::int64_t first_sample, std::int64_t step) const {
  TokenBatch b;
  b.B = B_;
  b.T = T_;
  b.step = step;
  b.epoch = first_sample / (windows_ * order_rows_);
  const auto t = static_cast<std::size_t>(T_);
  b.inputs.resize(static_cast<std::size_t>(B_) * t);
  b.targets.resize(static_cast<std::size_t>(B_) * t);
  // This rank's rows of the global batch, each from its own place in the stream: in the order
  // the batch was first drawn in they are consecutive rows of one window, one copy each.
  for (std::int64_t row = 0; row < B_; ++row) {
    const std::int64_t start = sample_start(first_sample + rank_ * B_ + row);
    if (row == 0) b.position = start;
    const std::uint16_t* src = tokens_->data() + start;
    const auto at = static_cast<std::size_t>(row) * t;
    std::copy(src, src + T_, b.inputs.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy(src + 1, src + T_ + 1, b.targets.begin() + static_cast<std::ptrdiff_t>(at));
  }
  return b;
}

TokenBatch TokenLoader::next() {
  TokenBatch b = rows_from(samples_, step_++);
  samples_ += world_ * B_;
  return b;
}

LoaderState TokenLoader::state() const {
  return {step_, samples_ / (windows_ * order_rows_), samples_, order_rows_};
}

void TokenLoader::restore(const LoaderState& s) {
  const std::int64_t rows = world_ * B_;
  const bool has_samples = s.samples >= 0;
  if (has_samples && s.order_rows != order_rows_) {
    if (s.order_rows < 1 || (static_cast<std::int64_t>(tokens_->size()) - 1) / T_ < s.order_rows) {
      throw InputError("data loader state: a window of " + std::to_string(s.order_rows) +
                       " rows of " + std::to_string(T_) + " tokens does not fit this data");
    }
    set_order_rows(s.order_rows);
  }
  const std::int64_t samples = has_samples ? s.samples : s.step * rows;
  if (s.step < 0 || s.epoch != samples / (windows_ * order_rows_)) {
    throw InputError(
        "data loader state (step " + std::to_string(s.step) + ", epoch " + std::to_string(s.epoch) +
        ") does not fit this data: " + std::to_string(windows_) +
        " windows per epoch would put step " + std::to_string(s.step) + " in epoch " +
        std::to_string(samples / (windows_ * order_rows_)) +
        "; did the data, B, T or the ranks change?");
  }
  // Batches of another N*B count from where this loader's own would have been.
  step_ = has_samples && s.order_rows != rows ? samples / rows : s.step;
  samples_ = samples;
}

}  // namespace mixpar
