// The demo's flags as ch02_loss_scaling reads them (loss_scaling_demo_flags.h): the defaults
// are the lesson's configuration, and a scale "2^E" means 2 to the E or is refused.
#include "ch02_loss_scaling/loss_scaling_demo_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/errors.h"

namespace mixpar::ch02 {
namespace {

LossScalingDemoFlags parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ch02_loss_scaling");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return parse_loss_scaling_demo_flags(static_cast<int>(args.size()), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LossScalingDemoFlags, NoFlagsGiveTheLessonsDefaults) {
  const LossScalingDemoFlags f = parse({});
  const LessonConfig d;
  EXPECT_EQ(f.lesson.steps, d.steps);
  EXPECT_EQ(f.lesson.loss_weight, d.loss_weight);
  EXPECT_EQ(f.lesson.static_scale, d.static_scale);
  EXPECT_EQ(f.lesson.too_large_scale, d.too_large_scale);
  EXPECT_EQ(f.lesson.dynamic_growth_interval, d.dynamic_growth_interval);
  EXPECT_EQ(f.lesson.lr, d.lr);
  EXPECT_EQ(f.json_path, "");
}

TEST(LossScalingDemoFlags, APowerOfTwoScaleIsTwoToThatPower) {
  const LossScalingDemoFlags f = parse({"--static-scale", "2^12", "--loss-weight", "2^-30"});
  EXPECT_EQ(f.lesson.static_scale, 4096.0);
  EXPECT_EQ(f.lesson.loss_weight, 0x1p-30);
}

// 2^32 + 1 and -(2^32 - 1) are 1 when cut to 32 bits: both used to be taken as 2^1.
TEST(LossScalingDemoFlags, AnExponentPastADoublesRangeIsRefusedNotCutTo32Bits) {
  EXPECT_EQ(error_of({"--too-large-scale", "2^4294967297"}),
            "--too-large-scale must be a positive finite number, got '2^4294967297'");
  EXPECT_EQ(error_of({"--loss-weight", "2^-4294967295"}),
            "--loss-weight must be a positive finite number, got '2^-4294967295'");
  EXPECT_EQ(error_of({"--static-scale", "2^2000"}),
            "--static-scale must be a positive finite number, got '2^2000'");
}

}  // namespace
}  // namespace mixpar::ch02
