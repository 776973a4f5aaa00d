// The built-in addition dataset: deterministic per seed, answers correct and reversed,
// training and held-out problems disjoint in either operand order, every size class still
// in training, and the scorer reading 1.0 for an oracle and ~0 for a constant.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>

#include "expect.h"
#include "io/addition_data.h"
#include "io/tokenizer.h"

namespace mixpar {
namespace {

using test_support::input_error_of;
using ::testing::HasSubstr;

// 3-digit operands at a 2% split: many problems, and a held-out share small enough that the
// 55 one-digit pairs keep most of theirs in training.
AdditionConfig small_config() {
  AdditionConfig c;
  c.max_digits = 3;
  c.heldout_fraction = 0.02;
  c.train_tokens = 200000;
  c.heldout_problems = 300;
  return c;
}

// (a, b) of "a+b=" (the prompt, or the start of a training line).
std::pair<std::int64_t, std::int64_t> operands(const std::string& line) {
  const auto plus = line.find('+'), eq = line.find('=');
  return {std::stoll(line.substr(0, plus)), std::stoll(line.substr(plus + 1, eq - plus - 1))};
}

TEST(BuiltinData, ProblemsReadAsTextWithTheAnswerReversed) {
  EXPECT_EQ((AdditionProblem{12, 345, true}).text(), "12+345=753\n");
  EXPECT_EQ((AdditionProblem{12, 345, false}).text(), "12+345=357\n");
  EXPECT_EQ((AdditionProblem{999, 1, true}).answer(), "0001");  // the carries come first
  EXPECT_EQ((AdditionProblem{0, 0, true}).prompt(), "0+0=");
}

TEST(BuiltinData, DefaultsBuildAStreamAndAnEvaluationSet) {
  const AdditionDataset ds = make_addition_dataset(AdditionConfig{});
  EXPECT_GE(ds.train_tokens.size(), std::size_t{1} << 20);
  EXPECT_EQ(ds.heldout.size(), 200u);
  for (const AdditionProblem& p : ds.heldout) EXPECT_LT(std::max(p.a, p.b), 100);
}

TEST(BuiltinData, IsDeterministicPerSeed) {
  const AdditionDataset a = make_addition_dataset(small_config());
  const AdditionDataset b = make_addition_dataset(small_config());
  EXPECT_EQ(a.train_tokens, b.train_tokens);
  ASSERT_EQ(a.heldout.size(), b.heldout.size());
  for (std::size_t i = 0; i < a.heldout.size(); ++i) {
    EXPECT_EQ(a.heldout[i].text(), b.heldout[i].text());
  }
  AdditionConfig other = small_config();
  other.seed = 99;
  EXPECT_NE(make_addition_dataset(other).train_tokens, a.train_tokens);
}

TEST(BuiltinData, TrainStreamIsCorrectProblemsDisjointFromHeldout) {
  const AdditionConfig cfg = small_config();
  const AdditionDataset ds = make_addition_dataset(cfg);
  ASSERT_GE(static_cast<std::int64_t>(ds.train_tokens.size()), cfg.train_tokens);
  std::set<std::pair<std::int64_t, std::int64_t>> heldout;
  for (const AdditionProblem& p : ds.heldout) {
    EXPECT_TRUE(addition_pair_is_heldout(cfg, p.a, p.b));
    heldout.insert({std::min(p.a, p.b), std::max(p.a, p.b)});
  }
  const std::string text = ByteTokenizer::decode(ds.train_tokens);
  ASSERT_EQ(text.back(), '\n');
  std::istringstream lines(text);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    const auto [a, b] = operands(line);
    ASSERT_EQ(line + "\n", (AdditionProblem{a, b, true}.text())) << line;
    ASSERT_FALSE(addition_pair_is_heldout(cfg, a, b)) << line;
    ASSERT_EQ(heldout.count({std::min(a, b), std::max(a, b)}), 0u) << line;
    ++count;
  }
  EXPECT_GT(count, 15000);
}

TEST(BuiltinData, HeldoutProblemsAreDistinctAndOfEverySize) {
  const AdditionDataset ds = make_addition_dataset(small_config());
  std::set<std::string> prompts;
  std::set<std::size_t> lengths;
  for (const AdditionProblem& p : ds.heldout) {
    prompts.insert(p.prompt());
    lengths.insert(std::to_string(p.a).size());  // operand sizes, not pair classes: the
    lengths.insert(std::to_string(p.b).size());  // 55 one-digit pairs may have none held out
  }
  EXPECT_EQ(prompts.size(), ds.heldout.size());
  EXPECT_EQ(lengths, (std::set<std::size_t>{1, 2, 3}));
}

TEST(BuiltinData, EverySizeClassKeepsMostOfItsProblemsInTraining) {
  // The split is by a hash of the pair, so the 55 one-digit pairs are held out at ~2% too.
  const AdditionDataset ds = make_addition_dataset(small_config());
  std::set<std::pair<std::int64_t, std::int64_t>> one_digit;
  std::istringstream lines(ByteTokenizer::decode(ds.train_tokens));
  std::string line;
  while (std::getline(lines, line)) {
    const auto [a, b] = operands(line);
    if (a < 10 && b < 10) one_digit.insert({std::min(a, b), std::max(a, b)});
  }
  EXPECT_GE(one_digit.size(), 50u);
}

TEST(BuiltinData, ScorerGivesOneForAnOracleAndZeroForAConstant) {
  const AdditionDataset ds = make_addition_dataset(small_config());
  const CompleteFn oracle = [](const std::string& prompt) {
    const auto [a, b] = operands(prompt);
    return AdditionProblem{a, b, true}.answer() + "\n12+";  // what follows the newline is ignored
  };
  const AdditionScore best = score_addition(ds.heldout, oracle);
  EXPECT_EQ(best.correct, best.total);
  EXPECT_DOUBLE_EQ(best.accuracy, 1.0);
  EXPECT_TRUE(best.mistakes.empty());

  const AdditionScore worst = score_addition(ds.heldout, [](const std::string&) { return "0"; });
  EXPECT_LE(worst.accuracy, 0.01);
  ASSERT_EQ(worst.mistakes.size(), 5u);
  EXPECT_THAT(worst.mistakes[0], HasSubstr("= -> 0 (want "));
}

TEST(BuiltinData, ScorerWorksWithGreedyDecodingOfAByteModel) {
  const AdditionDataset ds = make_addition_dataset(small_config());
  // A "model" that knows addition: reads the prompt from its context, emits the answer.
  const NextTokenFn model = [](std::span<const std::uint16_t> ctx) -> int {
    const std::string s = ByteTokenizer::decode(ctx);
    const auto eq = s.find('=');
    const std::string answer =
        AdditionProblem{operands(s).first, operands(s).second, true}.answer() + "\n";
    return static_cast<unsigned char>(answer[s.size() - eq - 1]);
  };
  const CompleteFn complete = [&](const std::string& p) { return complete_greedy(model, p, 8); };
  EXPECT_DOUBLE_EQ(score_addition(ds.heldout, complete).accuracy, 1.0);
}

TEST(BuiltinData, RefusesImpossibleConfigurations) {
  AdditionConfig c = small_config();
  c.max_digits = 0;
  EXPECT_THAT(input_error_of([&] { make_addition_dataset(c); }),
              HasSubstr("max_digits must be in [1, 9]"));
  c = small_config();
  c.heldout_fraction = 0.0;
  EXPECT_THAT(input_error_of([&] { make_addition_dataset(c); }), HasSubstr("heldout_fraction"));
  c = small_config();
  c.max_digits = 1;  // 55 pairs, ~1 held out at 2%: 300 distinct held-out problems do not exist
  EXPECT_THAT(input_error_of([&] { make_addition_dataset(c); }), HasSubstr("found only"));
}

}  // namespace
}  // namespace mixpar
