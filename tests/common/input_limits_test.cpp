// What user-sized input cannot do to common/: wrap a size (checked products and sums), make
// the parameter registry quadratic in the number of layers, or hand memcpy a null pointer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
#include <string>

#include "expect.h"
#include "io/token_shard.h"
#include "model/gpt_params.h"
#include "temp_dir.h"
#include "util/checked_math.h"
#include "util/errors.h"

namespace mixpar {
namespace {

using test_support::input_error_of;
using test_support::TempDir;

TEST(CheckedMath, ProductsAndSumsThatFitAreExact) {
  EXPECT_EQ(checked_product("x", {{"--batch", 32}, {"--seq", 1024}, {"--grad-accum", 8}}), 262144);
  EXPECT_EQ(checked_product("x", {{"a", std::int64_t{1} << 31}, {"b", std::int64_t{1} << 31}}),
            std::int64_t{1} << 62);
  EXPECT_EQ(checked_product("x", {}), 1);
  EXPECT_EQ(checked_sum("x", std::numeric_limits<std::int64_t>::max() - 1, 1),
            std::numeric_limits<std::int64_t>::max());
}

TEST(CheckedMath, AnOverflowIsAnInputErrorNamingTheProductAndItsFactors) {
  const std::string e = input_error_of([] {
    checked_product("tokens per step", {{"--batch", std::int64_t{1} << 40}, {"", 4}, {"--seq", std::int64_t{1} << 30}});
  });
  EXPECT_EQ(e, "tokens per step: --batch 1099511627776 x 4 x --seq 1073741824 overflows a 64-bit integer");
  EXPECT_NE(input_error_of([] { checked_product("n", {{"a", -1}}); }).find("overflows"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              checked_sum("total", std::numeric_limits<std::int64_t>::max(), 1);
            }).find("total: "),
            std::string::npos);
}

TEST(GptConfig, AShapeWhoseParameterCountOverflowsIsRefused) {
  const GptConfig wide{1, 1, std::int64_t{1} << 32, 8, 256};
  EXPECT_NE(input_error_of([&] { wide.validate(); }).find("GptConfig: the parameter count"),
            std::string::npos);
  const GptConfig deep{std::int64_t{1} << 50, 1, 1024, 8, 256};
  EXPECT_NE(input_error_of([&] { deep.validate(); }).find("n_layer 1125899906842624"),
            std::string::npos);
}

// A registry that compared each new name with every earlier one took 19 s for 4,000 layers
// (48,000 entries); for these 25,000 layers (300,000 entries) it would take about 39 times as
// long, over ctest's 300 s timeout, where the hash index takes a few seconds.
TEST(ParamRegistry, TwentyFiveThousandLayersRegisterInLinearTime) {
  const GptConfig c{25000, 1, 1, 1, 1};
  const ParamRegistry r = make_gpt2_registry(c);
  EXPECT_EQ(r.entries().size(), 12u * 25000u + 4u);
  EXPECT_EQ(r.index_of("h.24999.mlp.c_proj.bias") + 1, 12u * 25000u + 2u);
  EXPECT_EQ(r.numel(), c.num_parameters());
}

TEST(RunMain, OutOfMemoryIsOneLineAndExitCode2) {
  char prog[] = "tool";
  char* argv[] = {prog, nullptr};
  testing::internal::CaptureStderr();
  const int code = run_main(1, argv, [](int, char**) -> int { throw std::bad_alloc(); });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(err.starts_with("tool: error: out of memory (std::bad_alloc): ")) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(TokenShard, AnEmptyShardIsRefusedWithoutCopyingItsNoTokens) {
  TempDir d;
  write_token_shard(d.file("empty.bin"), {});
  const std::string e = input_error_of([&] { read_token_shard(d.file("empty.bin"), 256, 9); });
  EXPECT_NE(e.find("too few tokens: 0"), std::string::npos) << e;
  EXPECT_TRUE(read_token_shard(d.file("empty.bin"), 256, 0).empty());
}

}  // namespace
}  // namespace mixpar
