// The built-in dataset: addition problems written as text, generated from a seed, so a
// trainer can learn something measurable with no download. "12+345=753\n": the answer
// (357) is written least-significant digit first, the order in which carries are computed,
// which small transformers learn far faster than the usual order (Lee et al. 2023, "Teaching
// Arithmetic to Small Transformers"; minGPT's adder reverses it too). Success is exact-match
// accuracy on held-out problems.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace mixpar {

struct AdditionProblem {
  std::int64_t a = 0, b = 0;
  bool reverse_answer = true;
  std::string prompt() const;  // "12+345="
  std::string answer() const;  // "753" (reversed) or "357"
  std::string text() const;    // prompt + answer + "\n"
};

// The defaults aim at a tiny byte-level GPT on a laptop CPU within minutes (2-digit operands,
// like minGPT's adder); max_digits = 3 is the harder, slower setting.
struct AdditionConfig {
  int max_digits = 2;                   // operands have 1..max_digits digits
  bool reverse_answer = true;           // see the file comment
  std::int64_t train_tokens = 1 << 20;  // the training stream holds at least this many
  // The share of operand pairs {a, b} kept out of training, chosen by a seeded hash of the
  // pair: the same share of every size class (a split by sampling would swallow most of the
  // few one-digit problems, which are drawn often). Held-out problems are drawn from them.
  double heldout_fraction = 0.05;
  std::int64_t heldout_problems = 200;  // distinct problems in the evaluation set
  std::uint64_t seed = 1234;
};

struct AdditionDataset {
  AdditionConfig config;
  // Problem texts back to back, byte tokens. A training window starts anywhere in it: the
  // operand digits are random and cannot be learned, so the loss floor is well above zero;
  // the answers are what accuracy measures.
  std::vector<std::uint16_t> train_tokens;
  // Distinct problems whose pair is held out: none appears in training, in either operand
  // order (a+b or b+a), drawn from the same operand distribution as training.
  std::vector<AdditionProblem> heldout;
};

// Whether the pair {a, b} is kept out of training under `config` (its seed and fraction).
bool addition_pair_is_heldout(const AdditionConfig& config, std::int64_t a, std::int64_t b);

// Operands: a digit count drawn uniformly from 1..max_digits, then a value uniformly among
// the numbers with that many digits (0..9 for one digit), so short problems are not rare.
// InputError if max_digits is outside [1, 9], heldout_fraction outside (0, 0.5], or fewer
// than heldout_problems distinct held-out problems can be found (small max_digits).
AdditionDataset make_addition_dataset(const AdditionConfig& config);

struct AdditionScore {
  std::int64_t correct = 0, total = 0;
  double accuracy = 0.0;              // correct / total
  std::vector<std::string> mistakes;  // the first few, "12+345= -> 75 (want 753)"
};

// Exact-match accuracy: complete(prompt) is the model's greedy continuation (see
// complete_greedy); it is right when its text up to the first newline equals the answer.
using CompleteFn = std::function<std::string(const std::string& prompt)>;
AdditionScore score_addition(std::span<const AdditionProblem> problems, const CompleteFn& complete,
                             std::size_t max_mistakes = 5);

}  // namespace mixpar
