// Executable tests: fpx and the demo run as a user runs them. fpx accepts negative numbers,
// inf and nan, rejects non-numbers with exit code 2, and its JSON is well formed with every
// format; the demo's claims all hold, and a broken claim makes it exit 1.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "util/json.h"

namespace {

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

CommandResult run(const std::string& command) {
  CommandResult r{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

CommandResult fpx(const std::string& args) {
  return run(std::string(MIXPAR_FPX_PATH) + " " + args);
}

// The JSON fpx prints, parsed strictly (RFC 8259): a stray NaN or comma fails here.
mixpar::Json parse_json(const CommandResult& r) {
  return mixpar::Json::parse(r.output, "fpx output");
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Fpx, NonNumberExitsWithCode2) {
  const CommandResult r = fpx("3.14 abc");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "fpx: error: value: 'abc' is not a number\n");  // one line
  EXPECT_EQ(fpx("1.5x").exit_code, 2);
  EXPECT_EQ(fpx("").exit_code, 2);  // nothing to show
  EXPECT_EQ(fpx("--bogus 1").exit_code, 2);
  EXPECT_EQ(fpx("1e400").exit_code, 2);
}

TEST(Fpx, JsonHasEveryFormat) {
  const CommandResult r = fpx("--json 3.14159");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const mixpar::Json j = parse_json(r);
  const mixpar::Json& v = j.at("values").at(0);
  EXPECT_EQ(v.at("input").as_string(), "3.14159");
  for (const char* key : {"fp32", "fp16", "bf16", "e4m3", "e5m2"}) {
    ASSERT_TRUE(v.contains(key)) << key;
    for (const char* field : {"bits", "value", "error", "rel_error", "exponent_field"}) {
      EXPECT_TRUE(v.at(key).contains(field)) << key << "." << field;
    }
  }
  EXPECT_EQ(v.at("fp16").at("bits").as_string(), "0x4248");
  EXPECT_EQ(v.at("bf16").at("bits").as_string(), "0x4049");
  EXPECT_EQ(v.at("fp32").at("bits").as_string(), "0x40490fd0");
  EXPECT_EQ(v.at("fp16").at("value").as_double(), 3.140625);
  EXPECT_EQ(v.at("fp16").at("mantissa_field").as_string(), "1001001000");
  EXPECT_FALSE(j.contains("table"));
}

TEST(Fpx, JsonTableHasTheComputedRanges) {
  const CommandResult r = fpx("--table --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const mixpar::Json t = parse_json(r).at("table");
  EXPECT_EQ(t.at("e4m3").at("max").as_double(), 448);
  EXPECT_EQ(t.at("e5m2").at("max").as_double(), 57344);
  EXPECT_EQ(t.at("fp16").at("max").as_double(), 65504);
  EXPECT_EQ(t.at("fp16").at("min_subnormal").as_double(), std::ldexp(1.0, -24));
  EXPECT_EQ(t.at("bf16").at("epsilon").as_double(), std::ldexp(1.0, -7));
  EXPECT_FALSE(t.at("e4m3").at("has_infinity").as_bool());
  for (const char* key : {"fp32", "fp16", "bf16", "e4m3", "e5m2"}) {
    for (const char* field : {"max", "min_normal", "min_subnormal", "epsilon", "decimal_digits"}) {
      EXPECT_TRUE(t.at(key).at(field).is_number()) << key << "." << field;
    }
  }
}

TEST(Fpx, JsonShowsNonSaturatingFp8WhereItDiffers) {
  const CommandResult r = fpx("--json 500 inf nan -- -70000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const mixpar::Json values = parse_json(r).at("values");
  ASSERT_EQ(values.size(), 4u);
  const mixpar::Json& e4m3 = values.at(0).at("e4m3");  // 500
  EXPECT_EQ(e4m3.at("bits").as_string(), "0x7e");      // saturates to 448
  EXPECT_EQ(e4m3.at("value").as_double(), 448);
  EXPECT_EQ(e4m3.at("bits_nosat").as_string(), "0x7f");
  EXPECT_EQ(e4m3.at("value_nosat").as_string(), "nan");
  EXPECT_FALSE(values.at(0).at("e5m2").contains("bits_nosat"));  // 512 either way
  EXPECT_EQ(values.at(1).at("value").as_string(), "inf");
  EXPECT_TRUE(values.at(2).at("fp16").at("error").is_null());
  EXPECT_EQ(values.at(3).at("fp16").at("value").as_string(), "-inf");
}

TEST(Fpx, NegativeNumbersAfterDoubleDash) {
  const CommandResult r = fpx("-- -2.5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "0xc100"));  // FP16 -2.5
  EXPECT_TRUE(has(r.output, "-1.25 x 2^1"));
}

TEST(Fpx, NegativeNumbersWithoutDoubleDash) {
  const CommandResult r = fpx("-2.5 -inf -1e-8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "0xc100"));
  EXPECT_TRUE(has(r.output, "0xfc00"));  // FP16 -inf
}

TEST(Fpx, TextShowsFieldsStoredValueAndError) {
  const CommandResult r = fpx("3.14159");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "fp16    0x4248      0  10000     1001001000"));
  EXPECT_TRUE(has(r.output, "3.140625"));
  EXPECT_TRUE(has(r.output, "3.07e-04"));  // relative error of FP16 and BF16
}

TEST(Fpx, Fp8ShowsNonSaturatingResultBeside) {
  const CommandResult r = fpx("500");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "e4m3     0x7e"));
  EXPECT_TRUE(has(r.output, "  nosat  0x7f"));
}

TEST(Fpx, TableShowsComputedMaxima) {
  const CommandResult r = fpx("--table");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "448"));
  EXPECT_TRUE(has(r.output, "57344"));
  EXPECT_TRUE(has(r.output, "2^-24 = 5.960464477539063e-08"));
  EXPECT_TRUE(has(r.output, "no (NaN only)"));
}

TEST(Demo, EveryClaimHolds) {
#ifdef NDEBUG
  const std::string args = "";  // the demo exactly as shipped (about a second)
#else
  const std::string args = " --gemm 64x64x4096";  // unoptimised builds: a smaller GEMM
#endif
  const CommandResult r = run(MIXPAR_CH01_DEMO_PATH + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(has(r.output, "FAIL")) << r.output;
  EXPECT_TRUE(has(r.output, "claims hold"));
}

TEST(Demo, ABrokenClaimExitsWithCode1) {
  // An update of 1e-3 is larger than half an FP16 ulp at 0.5: it no longer vanishes.
  const CommandResult r =
      run(std::string(MIXPAR_CH01_DEMO_PATH) + " --update 1e-3 --gemm 16x16x1024");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "FAIL   0.5 + 0.001 in fp16")) << r.output;
}

TEST(Demo, BadFlagExitsWithCode2) {
  EXPECT_EQ(run(std::string(MIXPAR_CH01_DEMO_PATH) + " --gemm 12x34").exit_code, 2);
  EXPECT_EQ(run(std::string(MIXPAR_CH01_DEMO_PATH) + " --gemm-inputs both").exit_code, 2);
}

// The demo's --json follows train_gpt's output rules, checked before the lesson runs: a FIFO
// (the lesson used to run and then block forever on it), a device, an existing file without
// --overwrite (replaced silently before) and a directory it cannot write in (found only after
// the whole lesson, without a reason) are each one line and exit code 2, and nothing is written.
TEST(Demo, JsonOutputsFollowTheTrainersRulesBeforeTheLessonRuns) {
  char tmpl[] = "/tmp/mixpar-ch01-json-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  {
    FILE* f = std::fopen((dir + "/old.json").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("keep", f);
    std::fclose(f);
  }
  const std::string demo = MIXPAR_CH01_DEMO_PATH;
  const std::pair<std::string, std::string> cases[] = {
      {" --json " + dir + "/fifo", "is a FIFO: outputs are regular files only"},
      {" --json /dev/full --overwrite", "'/dev/full' is a character device"},
      {" --json " + dir + "/old.json", "exists: pass --overwrite to replace it"},
      {" --json /proc/x.json", "--json: cannot write in '/proc': "},
      // --overwrite alone has nothing to replace: refused, as train_gpt refuses such flags.
      {" --overwrite", "--overwrite replaces an existing output file: it needs --json"},
  };
  for (const auto& [args, phrase] : cases) {
    const CommandResult r = run("cd " + dir + " && " + demo + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_TRUE(r.output.starts_with("ch01_fp_formats: error: ")) << r.output;
    EXPECT_TRUE(has(r.output, phrase)) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  FILE* f = std::fopen((dir + "/old.json").c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[16] = {};
  EXPECT_EQ(std::fread(buf, 1, sizeof buf, f), 4u);
  std::fclose(f);
  EXPECT_EQ(std::string(buf), "keep");
  std::remove((dir + "/fifo").c_str());
  std::remove((dir + "/old.json").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
