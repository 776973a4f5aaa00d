// The hostile-input corpus of train_gpt: command lines a careless or hostile user types, each
// refused before any work with exit code 2 and one line naming what is wrong. Every case was
// once accepted (a flag swallowing the next one, a seed rounded, a number that cannot train,
// a flag that does nothing); the table keeps them refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train_gpt_cli.h"

namespace mixpar::ch08 {
namespace {

using test::expect_one_line_error;
using test::TempDir;
using test::train_gpt;

const std::string kTiny = "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 ";

struct HostileCase {
  std::string args;    // after train_gpt; kTiny is prepended
  std::string phrase;  // the one line must contain it
};

void expect_all_refused(const std::vector<HostileCase>& cases) {
  TempDir d;
  for (const HostileCase& c : cases) expect_one_line_error(d, kTiny + c.args, c.phrase);
}

// A flag missing its value no longer swallows the next flag (`--save --overwrite` saved into a
// directory named "--overwrite", `--checkpoint-dir --resume` started a fresh run in "--resume").
TEST(HostileInput, AFlagMissingItsValueNamesItselfInsteadOfSwallowingTheNext) {
  expect_all_refused({
      {"--save --overwrite", "--save needs a value, but is followed by the flag '--overwrite'"},
      {"--checkpoint-dir --resume", "--checkpoint-dir needs a value, but is followed by the flag '--resume'"},
      {"--data --recompute", "--data needs a value, but is followed by the flag '--recompute'"},
      {"--log-jsonl --dry-run", "--log-jsonl needs a value"},
      {"--prompt --", "--prompt needs a value"},
  });
  TempDir d;
  EXPECT_FALSE(std::filesystem::exists(d.file("--overwrite")));
  EXPECT_FALSE(std::filesystem::exists(d.file("--resume")));
}

// Whole numbers are taken exactly or refused: 9007199254740993 was trained as ...992, and an
// odd --global-batch of that size was refused naming --grad-accum, which the user never gave.
TEST(HostileInput, WholeNumbersAreExactAndErrorsNameTheFlagsGiven) {
  TempDir d;
  const test::CliRun seed = train_gpt(d, kTiny + "--seed 9007199254740993 --dry-run");
  EXPECT_EQ(seed.code, 0) << seed.err;
  EXPECT_NE(seed.out.find("seed 9007199254740993"), std::string::npos) << seed.out;
  for (const std::string gb : {"9007199254740993", "9007199254740992"}) {
    const test::CliRun r = train_gpt(d, kTiny + "--global-batch " + gb + " --dry-run");
    EXPECT_EQ(r.code, 2) << gb;
    EXPECT_NE(r.err.find("--global-batch " + gb), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--grad-accum"), std::string::npos) << r.err;
  }
  expect_all_refused({
      {"--seed 1e30", "--seed: '1e30' is out of range"},
      {"--seed 1.00000000000000001", "--seed: '1.00000000000000001' is not a whole number"},
      {"--lr 9007199254740993", "--lr: '9007199254740993' is not exactly a double"},
  });
}

}  // namespace
}  // namespace mixpar::ch08
