// Two tables held to train_gpt's flag table (make_trainer_args()), so that a flag added
// without deciding its role fails here instead of shipping unchecked:
//  - under MPI every rank must agree on a flag (config_agreement.h's fields) or the flag is
//    declared rank-local with a reason: a flag the agreement missed (fp8 recorded as bf16, its
//    recipe, --dry-run on one rank) hung the job until the watchdog, which named no flag;
//  - a resume compares a flag with the checkpoint's run (trainer_config.h's
//    resume_identity_flags) or lists it as one a resume may change, with a reason: another
//    --grad-clip, --weight-decay or --eps continued silently with other losses.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ch08_test_util.h"
#include "config_agreement.h"
#include "trainer_config.h"

namespace mixpar::ch08 {
namespace {

std::vector<std::string> flag_table() {
  std::vector<std::string> out;
  const ArgParser args = make_trainer_args();
  for (const std::string& name : args.names()) out.push_back("--" + name);
  return out;
}

// The flag a field names: its first word ("--data (its tokens)" is --data's).
std::string flag_of(const std::string& field) { return field.substr(0, field.find(' ')); }

// A config that sets every optional part, so that no field is left out for being off.
TrainerConfig everything_on() {
  TrainerConfig c = test::tiny_config();
  c.dtype = DType::kBF16;
  c.fp8 = fp8::Fp8LinearConfig{};
  c.cp = 2;
  c.zero_stage = 3;
  c.moe.n_experts = 4;  // chapter 9: the MoE flags in the identity
  return c;
}

TEST(FlagCoverage, EveryFlagIsAgreedByTheRanksOrDeclaredRankLocalWithAReason) {
  std::set<std::string> agreed, local;
  for (const auto& [field, value] : agreement_fields(everything_on(), 0)) {
    agreed.insert(flag_of(field));
  }
  for (const auto& [flag, why] : rank_local_flags()) {
    EXPECT_FALSE(why.empty()) << flag;
    EXPECT_FALSE(agreed.count(flag)) << flag << " is both agreed and rank-local";
    local.insert(flag);
  }
  const std::vector<std::string> table = flag_table();
  ASSERT_GT(table.size(), 60u);
  for (const std::string& flag : table) {
    EXPECT_TRUE(agreed.count(flag) || local.count(flag))
        << flag << " is neither agreed by the ranks (config_agreement.cpp) nor declared "
                   "rank-local with a reason";
  }
  const std::set<std::string> known(table.begin(), table.end());
  for (const std::string& flag : agreed) EXPECT_TRUE(known.count(flag)) << flag << ": no such flag";
  for (const std::string& flag : local) EXPECT_TRUE(known.count(flag)) << flag << ": no such flag";
}

// fp8 runs a bf16 working copy; the agreement recorded it as bf16, so one rank in fp8 and one
// in bf16 agreed and then waited in different collectives. Each fp8 setting is its own field.
TEST(FlagCoverage, TheAgreementTellsFp8FromBf16AndEveryRecipeSetting) {
  const auto value = [](const TrainerConfig& c, const std::string& flag) {
    for (const auto& [field, v] : agreement_fields(c, 0)) {
      if (field == flag) return v;
    }
    return std::string("(missing)");
  };
  TrainerConfig bf16 = test::tiny_config();
  bf16.dtype = DType::kBF16;
  TrainerConfig fp8 = bf16;
  fp8.fp8 = fp8::Fp8LinearConfig{};
  EXPECT_EQ(value(fp8, "--dtype"), "fp8");
  EXPECT_NE(value(fp8, "--dtype"), value(bf16, "--dtype"));
  TrainerConfig margin = fp8;
  margin.fp8->margin = 1;
  EXPECT_NE(value(margin, "--fp8-margin"), value(fp8, "--fp8-margin"));
  TrainerConfig history = fp8;
  history.fp8->amax_history = 32;
  EXPECT_NE(value(history, "--fp8-amax-history"), value(fp8, "--fp8-amax-history"));
  TrainerConfig recipe = fp8;
  recipe.fp8->recipe = fp8.fp8->recipe == fp8::Recipe::kBlockwise ? fp8::Recipe::kDelayed
                                                              : fp8::Recipe::kBlockwise;
  EXPECT_NE(value(recipe, "--fp8-recipe"), value(fp8, "--fp8-recipe"));
  TrainerConfig dry = bf16;
  dry.dry_run = true;
  EXPECT_NE(value(dry, "--dry-run"), value(bf16, "--dry-run"));
}

TEST(FlagCoverage, EveryFlagIsPartOfTheResumedRunsIdentityOrFreeToChangeWithAReason) {
  const Json identity = run_identity(everything_on());
  std::set<std::string> compared, free;
  for (const auto& [flag, held_by] : resume_identity_flags()) {
    EXPECT_TRUE(identity.contains(held_by) || held_by == "lr_schedule" ||
                held_by == "data_fingerprint")
        << flag << " is said to be held by '" << held_by << "', which no resume compares";
    compared.insert(flag);
  }
  for (const auto& [flag, why] : resume_free_flags()) {
    EXPECT_FALSE(why.empty()) << flag;
    EXPECT_FALSE(compared.count(flag)) << flag << " is both compared and free";
    free.insert(flag);
  }
  const std::vector<std::string> table = flag_table();
  for (const std::string& flag : table) {
    EXPECT_TRUE(compared.count(flag) || free.count(flag))
        << flag << " is neither compared on --resume (trainer_config.cpp, "
                   "resume_identity_flags) nor listed as free to change with a reason";
  }
  const std::set<std::string> known(table.begin(), table.end());
  for (const std::string& flag : compared) EXPECT_TRUE(known.count(flag)) << flag << ": no such flag";
  for (const std::string& flag : free) EXPECT_TRUE(known.count(flag)) << flag << ": no such flag";
}

}  // namespace
}  // namespace mixpar::ch08
