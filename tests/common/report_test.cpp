// mixpar_report: numbers as text (fmt, num, exact_num, pct), TextTable's alignment, and the
// ClaimTable every chapter demo ends with.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "report/claim_table.h"
#include "report/format.h"
#include "report/text_table.h"

namespace mixpar {
namespace {

TEST(Format, FmtIsPrintfIntoAString) {
  EXPECT_EQ(fmt("%.2f%%", 12.5), "12.50%");
  EXPECT_EQ(fmt("%s-%d", "a", 3), "a-3");
  EXPECT_EQ(fmt("%s", ""), "");
  const std::string longer(300, 'x');
  EXPECT_EQ(fmt("%s!", longer.c_str()), longer + "!");  // no fixed-size buffer
}

TEST(Format, NumIsPrintfG) {
  EXPECT_EQ(num(0.000123456), "0.000123456");
  EXPECT_EQ(num(3e-4), "0.0003");
  EXPECT_EQ(num(1e-5), "1e-05");
  EXPECT_EQ(num(3.14159, 4), "3.142");
  EXPECT_EQ(num(1234567.0), "1.23457e+06");
  EXPECT_EQ(num(1024.0, 4), "1024");
}

TEST(Format, NumOfAnIntegerIsExact) {
  EXPECT_EQ(num(std::int64_t{7'000'000'000}), "7000000000");
  EXPECT_EQ(num(-3), "-3");
  EXPECT_EQ(num(std::size_t{50257}), "50257");
}

TEST(Format, ExactNumIsShortestAndReadsBackExactly) {
  EXPECT_EQ(exact_num(3.140625), "3.140625");
  EXPECT_EQ(exact_num(65504), "65504");
  const double tiny = std::ldexp(1.0, -24);
  EXPECT_EQ(std::strtod(exact_num(tiny).c_str(), nullptr), tiny);
  EXPECT_EQ(exact_num(INFINITY), "inf");
  EXPECT_EQ(exact_num(-INFINITY), "-inf");
  EXPECT_EQ(exact_num(-NAN), "nan");
}

TEST(Format, PctHasThreeDigitsAndADashForNaN) {
  EXPECT_EQ(pct(0.125), "12.5%");
  EXPECT_EQ(pct(0.5), "50%");
  EXPECT_EQ(pct(1.0 / 3.0), "33.3%");
  EXPECT_EQ(pct(NAN), "-");
}

TEST(TextTable, ColumnsAlignWithoutTrailingBlanks) {
  TextTable t({"a", "long header", "c"});
  t.add({"wide cell", "x"}).add({"", "", "z"});
  EXPECT_EQ(t.str(),
            "  a          long header  c\n"
            "  wide cell  x\n"
            "                          z\n");
  EXPECT_EQ(TextTable({"h"}, 0).add({"v"}).str(), "h\nv\n");
}

TEST(ClaimTable, CountsFailedClaims) {
  const Claim yes = yes_claim("it holds", true);
  EXPECT_EQ(yes.expected, "yes");
  EXPECT_EQ(yes.measured, "yes");
  EXPECT_TRUE(yes.ok);
  EXPECT_FALSE(yes_claim("it holds", false).ok);
  const Claim within = tolerance_claim("small error", 1e-6, 1e-5);
  EXPECT_EQ(within.expected, "<= 1e-05");
  EXPECT_EQ(within.measured, "1.00e-06");
  EXPECT_TRUE(within.ok);
  EXPECT_FALSE(tolerance_claim("small error", 1e-4, 1e-5).ok);

  ClaimTable table;
  table.add({yes, within, yes_claim("fails", false)});
  testing::internal::CaptureStdout();
  const int failures = table.print();
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(failures, 1);
  EXPECT_NE(out.find("== Checks"), std::string::npos);
  EXPECT_NE(out.find("FAIL   fails"), std::string::npos);  // "check" is 5 wide
  EXPECT_NE(out.find("1 claim(s) FAILED"), std::string::npos);
}

// The --bug convention: a claim broken_by the bug the table runs prints "FAIL (expected)" and
// is no surprise; broken_by another bug it is not shown; one that holds, or an unmarked
// failure, is a surprise (exit code 1); a --bug that breaks nothing is one too.
TEST(ClaimTable, ABugsExpectedFailuresAreTheLessonAndAnythingElseIsASurprise) {
  const Claim holds = yes_claim("it holds", true);
  const Claim broken = claim_broken_by("same-data", yes_claim("replicas agree", false));
  const Claim other = claim_broken_by("different-init", yes_claim("other bug's claim", false));
  const auto printed = [](const ClaimTable& t, int* surprises) {
    testing::internal::CaptureStdout();
    *surprises = t.print();
    return testing::internal::GetCapturedStdout();
  };
  int surprises = -1;

  ClaimTable lesson("same-data");
  lesson.add({holds, broken, other});
  std::string out = printed(lesson, &surprises);
  EXPECT_EQ(surprises, 0);
  EXPECT_NE(out.find("FAIL (expected)  replicas agree"), std::string::npos) << out;
  EXPECT_EQ(out.find("other bug's claim"), std::string::npos) << out;
  EXPECT_NE(out.find("--bug same-data breaks 1 claim(s), as expected: \"replicas agree\""),
            std::string::npos) << out;
  EXPECT_NE(out.find("the FAIL lines are the lesson (exit code 0)"), std::string::npos) << out;

  ClaimTable overview("all");  // the overview shows no bug's correctness claims
  overview.add({holds, broken, other});
  out = printed(overview, &surprises);
  EXPECT_EQ(surprises, 0);
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
  EXPECT_NE(out.find("all claims hold"), std::string::npos) << out;

  ClaimTable fixed("same-data");  // the bug no longer breaks its claim
  fixed.add({claim_broken_by("same-data", yes_claim("replicas agree", true))});
  out = printed(fixed, &surprises);
  EXPECT_EQ(surprises, 1);
  EXPECT_NE(out.find("ok (expected FAIL)"), std::string::npos) << out;
  EXPECT_NE(out.find("(exit code 1)"), std::string::npos) << out;

  ClaimTable worse("same-data");  // it breaks another claim too
  worse.add({broken, yes_claim("loss falls", false)});
  out = printed(worse, &surprises);
  EXPECT_EQ(surprises, 1);
  EXPECT_NE(out.find("1 other claim(s) FAILED"), std::string::npos) << out;

  ClaimTable silent("same-data");  // a bug with no claim to break teaches nothing
  silent.add({holds});
  out = printed(silent, &surprises);
  EXPECT_EQ(surprises, 1);
}

}  // namespace
}  // namespace mixpar
