// Built-in addition dataset: problem sampling, the held-out/training split and the scorer.
// Philox streams: 1 for drawing the evaluation problems, 2 for the training stream, so the
// evaluation set does not change when only train_tokens changes.
#include "io/addition_data.h"

#include <algorithm>
#include <unordered_set>

#include "io/tokenizer.h"
#include "random/philox.h"
#include "util/errors.h"

namespace mixpar {

namespace {

constexpr std::uint64_t kHeldoutStream = 1;
constexpr std::uint64_t kTrainStream = 2;

std::int64_t pow10(int d) {
  std::int64_t p = 1;
  for (int k = 0; k < d; ++k) p *= 10;
  return p;
}

// Uniform in [0, n) for n < 2^32 by rejection (no modulo bias).
std::int64_t uniform_below(Philox& g, std::uint32_t n) {
  const std::uint32_t limit = UINT32_MAX - UINT32_MAX % n;
  while (true) {
    const std::uint32_t x = g.next_u32();
    if (x < limit) return x % n;
  }
}

std::int64_t sample_operand(Philox& g, int max_digits) {
  const int digits = 1 + static_cast<int>(uniform_below(g, static_cast<std::uint32_t>(max_digits)));
  const std::int64_t lo = digits == 1 ? 0 : pow10(digits - 1);
  const std::int64_t hi = pow10(digits);
  return lo + uniform_below(g, static_cast<std::uint32_t>(hi - lo));
}

// The pair hash: Philox's bijection keyed by the seed, on the counter {min, max}. Unordered,
// because a+b and b+a are the same problem to a learner.
std::uint64_t pair_hash(std::uint64_t seed, std::int64_t a, std::int64_t b) {
  const auto lo = static_cast<std::uint64_t>(std::min(a, b));
  const auto hi = static_cast<std::uint64_t>(std::max(a, b));
  const PhiloxCounter c =
      philox4x32({static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(lo >> 32),
                  static_cast<std::uint32_t>(hi), static_cast<std::uint32_t>(hi >> 32)},
                 {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return (static_cast<std::uint64_t>(c[0]) << 32) | c[1];
}

void validate(const AdditionConfig& c) {
  if (c.max_digits < 1 || c.max_digits > 9) {
    throw InputError("addition data: max_digits must be in [1, 9], got " +
                     std::to_string(c.max_digits));
  }
  if (!(c.heldout_fraction > 0.0 && c.heldout_fraction <= 0.5)) {
    throw InputError("addition data: heldout_fraction must be in (0, 0.5], got " +
                     std::to_string(c.heldout_fraction));
  }
  if (c.heldout_problems < 1) throw InputError("addition data: heldout_problems must be >= 1");
  if (c.train_tokens < 1) throw InputError("addition data: train_tokens must be >= 1");
}

AdditionProblem draw_problem(Philox& g, const AdditionConfig& c) {
  const std::int64_t a = sample_operand(g, c.max_digits);
  const std::int64_t b = sample_operand(g, c.max_digits);
  return {a, b, c.reverse_answer};
}

// Distinct held-out problems by rejection. Held-out pairs are a fraction f of all pairs, so
// about one draw in 1/f is one; the budget allows 64 times that before concluding there are
// not enough (only with few digits: 1-digit operands have 55 pairs in all).
std::vector<AdditionProblem> draw_heldout(const AdditionConfig& c) {
  std::vector<AdditionProblem> out;
  std::unordered_set<std::uint64_t> seen;  // ordered problems already taken
  Philox g(c.seed, kHeldoutStream);
  const double expected_draws = static_cast<double>(c.heldout_problems) / c.heldout_fraction;
  const auto budget = static_cast<std::int64_t>(64.0 * expected_draws) + 100000;
  for (std::int64_t tries = 0; static_cast<std::int64_t>(out.size()) < c.heldout_problems;
       ++tries) {
    if (tries > budget) {
      throw InputError("addition data: found only " + std::to_string(out.size()) +
                       " distinct held-out problems with " + std::to_string(c.max_digits) +
                       "-digit operands at heldout_fraction " + std::to_string(c.heldout_fraction) +
                       "; ask for fewer heldout_problems or a larger fraction");
    }
    const AdditionProblem p = draw_problem(g, c);
    const auto key =
        static_cast<std::uint64_t>(p.a) * 1000000000u + static_cast<std::uint64_t>(p.b);
    if (addition_pair_is_heldout(c, p.a, p.b) && seen.insert(key).second) out.push_back(p);
  }
  return out;
}

}  // namespace

std::string AdditionProblem::prompt() const {
  return std::to_string(a) + "+" + std::to_string(b) + "=";
}

std::string AdditionProblem::answer() const {
  std::string s = std::to_string(a + b);
  if (reverse_answer) std::reverse(s.begin(), s.end());
  return s;
}

std::string AdditionProblem::text() const { return prompt() + answer() + "\n"; }

bool addition_pair_is_heldout(const AdditionConfig& config, std::int64_t a, std::int64_t b) {
  // f * 2^64 as the threshold; f <= 0.5 keeps it well inside uint64.
  const auto threshold = static_cast<std::uint64_t>(config.heldout_fraction * 0x1p64);
  return pair_hash(config.seed, a, b) < threshold;
}

AdditionDataset make_addition_dataset(const AdditionConfig& config) {
  validate(config);
  AdditionDataset ds;
  ds.config = config;
  ds.heldout = draw_heldout(config);
  Philox g(config.seed, kTrainStream);
  std::string text;
  while (static_cast<std::int64_t>(text.size()) < config.train_tokens) {
    const AdditionProblem p = draw_problem(g, config);
    if (!addition_pair_is_heldout(config, p.a, p.b)) text += p.text();
  }
  ds.train_tokens = ByteTokenizer::encode(text);
  return ds;
}

AdditionScore score_addition(std::span<const AdditionProblem> problems, const CompleteFn& complete,
                             std::size_t max_mistakes) {
  AdditionScore s;
  for (const AdditionProblem& p : problems) {
    std::string got = complete(p.prompt());
    got = got.substr(0, got.find('\n'));
    const std::string want = p.answer();
    ++s.total;
    if (got == want) {
      ++s.correct;
    } else if (s.mistakes.size() < max_mistakes) {
      s.mistakes.push_back(p.prompt() + " -> " + got + " (want " + want + ")");
    }
  }
  s.accuracy = s.total ? static_cast<double>(s.correct) / static_cast<double>(s.total) : 0.0;
  return s;
}

}  // namespace mixpar
