// The start-up check of the build's ISA (util/cpu_features.h): a program built for features
// this CPU lacks says which ones and exits 2, rather than dying on an illegal instruction.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "util/cpu_features.h"

namespace mixpar {
namespace {

TEST(CpuFeatures, MissingFeaturesAreTheNeedsTheCpuLacksInOrder) {
  const auto has = [](std::string_view f) { return f == "avx" || f == "fma"; };
  EXPECT_EQ(missing_cpu_features("avx avx2 fma  f16c", has),
            (std::vector<std::string>{"avx2", "f16c"}));
  EXPECT_TRUE(missing_cpu_features("", has).empty());
  EXPECT_TRUE(missing_cpu_features("avx fma", has).empty());
}

TEST(CpuFeatures, TheRefusalNamesTheIsaTheMissingFeaturesAndTheWayOut) {
  EXPECT_EQ(cpu_check_message("x86-64-v3", {}), "");
  const std::string m = cpu_check_message("x86-64-v3", {"avx2", "fma"});
  EXPECT_EQ(m.rfind("error: ", 0), 0u) << m;
  EXPECT_NE(m.find("built for x86-64-v3"), std::string::npos) << m;
  EXPECT_NE(m.find("lacks avx2 fma"), std::string::npos) << m;
  EXPECT_NE(m.find("-DMIXPAR_ISA=x86-64"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
}

#if defined(__x86_64__)
// CPUID and XGETBV agree with the compiler's own detection where both know the feature.
TEST(CpuFeatures, DetectionAgreesWithTheCompilersBuiltin) {
  if (std::getenv("MIXPAR_PRETEND_CPU_LACKS") != nullptr) {
    GTEST_SKIP() << "MIXPAR_PRETEND_CPU_LACKS is set: cpu_has hides what it lists";
  }
  EXPECT_EQ(cpu_has("avx"), static_cast<bool>(__builtin_cpu_supports("avx")));
  EXPECT_EQ(cpu_has("avx2"), static_cast<bool>(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(cpu_has("fma"), static_cast<bool>(__builtin_cpu_supports("fma")));
  EXPECT_EQ(cpu_has("bmi2"), static_cast<bool>(__builtin_cpu_supports("bmi2")));
  EXPECT_EQ(cpu_has("avx512f"), static_cast<bool>(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(cpu_has("avx512bw"), static_cast<bool>(__builtin_cpu_supports("avx512bw")));
  EXPECT_FALSE(cpu_has("no-such-feature"));
  EXPECT_TRUE(cpu_has("sse4.2")) << "every x86-64-v2 CPU";
}
#endif

// What MIXPAR_PRETEND_CPU_LACKS lists, cpu_has reports absent (so kernels chosen at run time
// take the narrower path); the other features stay as detected.
TEST(CpuFeatures, PretendedFeaturesAreAbsentForRunTimeChoicesToo) {
  const char* before = std::getenv("MIXPAR_PRETEND_CPU_LACKS");
  const std::string saved = before != nullptr ? before : "";
  unsetenv("MIXPAR_PRETEND_CPU_LACKS");
  const bool sse42 = cpu_has("sse4.2"), avx512 = cpu_has("avx512f");
  setenv("MIXPAR_PRETEND_CPU_LACKS", "avx512bw sse4.2 avx512", 1);
  EXPECT_FALSE(cpu_has("sse4.2"));
  EXPECT_FALSE(cpu_has("avx512bw"));
  EXPECT_EQ(cpu_has("avx512f"), avx512) << "a listed prefix (avx512) hides nothing else";
  unsetenv("MIXPAR_PRETEND_CPU_LACKS");
  EXPECT_EQ(cpu_has("sse4.2"), sse42);
  if (before != nullptr) setenv("MIXPAR_PRETEND_CPU_LACKS", saved.c_str(), 1);
}

// This test program itself passed the check (it is running); every feature the build needs is
// on this CPU.
TEST(CpuFeatures, ThisBuildsNeedsAreOnThisCpu) {
  EXPECT_TRUE(missing_cpu_features(build_isa_needs(), cpu_has).empty()) << build_isa_needs();
  EXPECT_FALSE(build_isa().empty());
}

// The whole path: this test program started again with a feature it needs pretended absent
// exits 2 before running anything, with the one-line refusal.
TEST(CpuFeatures, AProgramBuiltForAFeatureTheCpuLacksExitsTwoSayingWhich) {
  const std::string needs(build_isa_needs());
  if (needs.empty()) GTEST_SKIP() << "this build (" << build_isa() << ") needs no ISA extension";
  const std::string first = needs.substr(0, needs.find(' '));
  std::array<char, 4096> self{};
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  ASSERT_GT(n, 0);
  const std::string cmd = "MIXPAR_PRETEND_CPU_LACKS='" + first + "' '" +
                          std::string(self.data(), static_cast<std::size_t>(n)) +
                          "' --gtest_list_tests 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) out += buf.data();
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_EQ(out, cpu_check_message(build_isa(), {first}) + "\n");
}

}  // namespace
}  // namespace mixpar
