// mixpar-plan's flags (ch08_full_3d/layout_plan/plan_flags.h): the model from a Hugging Face
// GPT-2 config.json, a preset's numbers overridden by flags, the degree filters, and a model
// given twice refused.
#include "plan_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/gpt_config.h"
#include "util/errors.h"

namespace mixpar::plan {
namespace {

PlanFlags parse(std::vector<std::string> args) {
  args.insert(args.begin(), "mixpar-plan");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return parse_plan_flags(static_cast<int>(argv.size()), argv.data());
}

TEST(PlanFlags, ReadsTheModelFromAHuggingFaceConfig) {
  const std::string path = ::testing::TempDir() + "/plan_flags_config.json";
  HfGpt2Config h;
  h.n_layer = 6;
  h.n_head = 4;
  h.n_embd = 128;
  h.n_positions = 256;
  h.vocab_size = 1000;
  write_gpt2_config(path, h);
  const PlanFlags f = parse({"--config", path, "--seq", "128", "--global-batch", "16"});
  EXPECT_EQ(f.model.shape, (GptConfig{6, 4, 128, 256, 1000}));
  EXPECT_THROW(parse({"--config", path, "--seq", "512", "--global-batch", "16"}), InputError);
}

TEST(PlanFlags, FlagsOverrideThePresetAndFilterTheDegrees) {
  const PlanFlags f = parse({"--model", "gpt2-124m", "--seq", "1024", "--global-batch", "64",
                             "--devices", "16", "--inter-gbps", "25", "--tp", "2,4", "--no-cp"});
  EXPECT_EQ(f.cluster.devices, 16);
  EXPECT_DOUBLE_EQ(f.cluster.inter.bandwidth, 25e9);
  EXPECT_EQ(f.space.tp_degrees, (std::vector<int>{2, 4}));
  EXPECT_FALSE(f.space.context_parallel);
  for (const Candidate& c : all_candidates(f.space, f.cluster)) {
    EXPECT_TRUE(c.tp == 2 || c.tp == 4) << c.text();
    EXPECT_EQ(c.cp, 1) << c.text();
  }
}

TEST(PlanFlags, AModelGivenTwiceIsRefused) {
  EXPECT_THROW(parse({"--model", "8b", "--n-layer", "4", "--seq", "64", "--global-batch", "8"}),
               InputError);
  EXPECT_THROW(parse({"--seq", "64", "--global-batch", "8"}), InputError);
}

}  // namespace
}  // namespace mixpar::plan
