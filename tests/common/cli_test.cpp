// ArgParser, the parse_* helpers and run_main: the behaviour every mixpar tool shares.
// Negative numbers are values, `--` ends options, every bad input is an InputError that
// run_main turns into one line on stderr and exit code 2.
#include "util/cli.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/errors.h"

namespace mixpar {
namespace {

// argv for ArgParser::parse, owning its strings; argv[0] is the program name.
class Argv {
 public:
  Argv(std::initializer_list<std::string> args) : strings_(args) {
    strings_.insert(strings_.begin(), "/usr/local/bin/tool");
    for (std::string& s : strings_) pointers_.push_back(s.data());
  }
  Argv(const Argv&) = delete;  // pointers_ point into strings_
  int argc() { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

ArgParser make_parser() {
  ArgParser p("tool", "A tool for tests.");
  p.flag("json", "print JSON")
      .option("lr", "0.001", "learning rate")
      .option("out", "", "output file (required when used)")
      .option("mode", "fast", "fast|exact")
      .positional("value", "numbers", false, true);
  return p;
}

void parse(ArgParser& p, std::initializer_list<std::string> args) {
  Argv a(args);
  p.parse(a.argc(), a.argv());
}

TEST(Cli, NegativeNumbersArePositionalsWithoutDoubleDash) {
  ArgParser p = make_parser();
  parse(p, {"-2.5", "-inf", "-1e-8", "-.5", "-nan"});
  EXPECT_EQ(p.positionals(), (std::vector<std::string>{"-2.5", "-inf", "-1e-8", "-.5", "-nan"}));
}

TEST(Cli, DoubleDashEndsOptions) {
  ArgParser p = make_parser();
  parse(p, {"--json", "--", "-2.5", "--lr", "-x"});
  EXPECT_TRUE(p.get_flag("json"));
  EXPECT_EQ(p.positionals(), (std::vector<std::string>{"-2.5", "--lr", "-x"}));
  EXPECT_FALSE(p.given("lr"));
}

TEST(Cli, UnknownOptionsAreInputErrors) {
  ArgParser p = make_parser();
  EXPECT_THROW(parse(p, {"--bogus"}), InputError);
  EXPECT_THROW(parse(p, {"-x"}), InputError);
  EXPECT_THROW(parse(p, {"-abc"}), InputError);  // not a number, so an option
}

TEST(Cli, OptionValuesBySpaceOrEquals) {
  ArgParser p = make_parser();
  parse(p, {"--lr", "0.5"});
  EXPECT_EQ(p.get_double("lr"), 0.5);
  parse(p, {"--lr=0.25"});
  EXPECT_EQ(p.get_double("lr"), 0.25);
  parse(p, {"--lr", "-1"});  // a negative value after an option is its value
  EXPECT_EQ(p.get_double("lr"), -1.0);
}

TEST(Cli, ParsingAgainForgetsThePreviousArguments) {
  ArgParser p = make_parser();
  parse(p, {"--json", "1", "2"});
  parse(p, {"3"});
  EXPECT_FALSE(p.get_flag("json"));
  EXPECT_EQ(p.positionals(), std::vector<std::string>{"3"});
}

TEST(Cli, MalformedOptionsAreInputErrors) {
  ArgParser p = make_parser();
  EXPECT_THROW(parse(p, {"--json=1"}), InputError);  // a flag takes no value
  EXPECT_THROW(parse(p, {"--lr"}), InputError);      // value missing at the end
}

TEST(Cli, DefaultsAndRequiredOptions) {
  ArgParser p = make_parser();
  parse(p, {});
  EXPECT_EQ(p.get_double("lr"), 0.001);
  EXPECT_FALSE(p.given("lr"));
  EXPECT_THROW(p.get("out"), InputError);           // no default and not given
  EXPECT_THROW(p.given("nope"), std::logic_error);  // a programming error, not the user's
}

TEST(Cli, PositionalCounts) {
  ArgParser p("tool", "");
  p.positional("input", "file", true);
  EXPECT_THROW(parse(p, {}), InputError);
  EXPECT_THROW(parse(p, {"a", "b"}), InputError);
  parse(p, {"a"});
  EXPECT_EQ(p.positionals(), std::vector<std::string>{"a"});
}

TEST(Cli, ChoicesNameTheAlternatives) {
  ArgParser p = make_parser();
  parse(p, {"--mode", "slow"});
  try {
    p.get_choice("mode", {"fast", "exact"});
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--mode: 'slow' is not one of fast|exact");
  }
  parse(p, {"--mode", "exact"});
  EXPECT_EQ(p.get_choice("mode", {"fast", "exact"}), "exact");
}

TEST(Cli, HelpPrintsUsageAndExitsZero) {
  ArgParser p = make_parser();
  EXPECT_NE(p.usage().find("--lr VALUE (default 0.001)"), std::string::npos);
  EXPECT_NE(p.usage().find("[value]..."), std::string::npos);
  EXPECT_EXIT(parse(p, {"--help"}), testing::ExitedWithCode(0), "");
}

TEST(ParseDouble, TakesTheWholeTextOrNothing) {
  EXPECT_EQ(parse_double("x", "1.5"), 1.5);
  EXPECT_EQ(parse_double("x", "-2.5"), -2.5);
  EXPECT_TRUE(std::isinf(parse_double("x", "inf")));
  EXPECT_TRUE(std::isnan(parse_double("x", "nan")));
  EXPECT_TRUE(std::signbit(parse_double("x", "-0")));
  for (const char* bad : {"", "1.5x", "abc", " 1", "1 ", "--1"}) {
    EXPECT_THROW(parse_double("x", bad), InputError) << "'" << bad << "'";
  }
}

TEST(ParseDouble, KeepsSubnormalsAndRejectsOverflow) {
  EXPECT_GT(parse_double("x", "1e-320"), 0.0);  // underflow to a subnormal double is fine
  try {
    parse_double("value", "1e400");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "value: '1e400' is out of the range of a double");
  }
}

TEST(ParseInt, AcceptsIntegralScientificOnly) {
  EXPECT_EQ(parse_int("n", "128"), 128);
  EXPECT_EQ(parse_int("n", "7e9"), 7000000000);
  EXPECT_EQ(parse_int("n", "-3"), -3);
  EXPECT_THROW(parse_int("n", "1.5"), InputError);
  EXPECT_THROW(parse_int("n", "inf"), InputError);
  EXPECT_THROW(parse_int("n", "1e19"), InputError);
}

TEST(ParseBytes, UnitsAreDecimalOrBinary) {
  EXPECT_EQ(parse_bytes("m", "80GB"), 80e9);
  EXPECT_EQ(parse_bytes("m", "80GiB"), 80.0 * 1073741824.0);
  EXPECT_EQ(parse_bytes("m", "512MiB"), 512.0 * 1048576.0);
  EXPECT_EQ(parse_bytes("m", "1.5TB"), 1.5e12);
  EXPECT_EQ(parse_bytes("m", "141e9"), 141e9);
  EXPECT_EQ(parse_bytes("m", "4KB"), 4000.0);
  EXPECT_EQ(parse_bytes("m", "7B"), 7.0);
}

TEST(ParseBytes, BadSizesNameTheWholeText) {
  for (const char* bad : {"-1GB", "GB", "inf", "nan", "infGB", "80 GB", ""}) {
    EXPECT_THROW(parse_bytes("m", bad), InputError) << "'" << bad << "'";
  }
  try {
    parse_bytes("--memory", "80XB");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'80XB'"), std::string::npos) << e.what();
  }
}

TEST(RunMain, InputErrorIsOneLineAndExitCode2) {
  Argv a({});
  testing::internal::CaptureStderr();
  const int code = run_main(a.argc(), a.argv(), [](int, char**) -> int {
    throw InputError("--lr: 'x' is not a number");
  });
  EXPECT_EQ(code, kExitInputError);
  EXPECT_EQ(code, 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "tool: error: --lr: 'x' is not a number\n");
}

TEST(RunMain, OtherExceptionsAreInternalErrorsWithExitCode1) {
  Argv a({});
  testing::internal::CaptureStderr();
  const int code =
      run_main(a.argc(), a.argv(), [](int, char**) -> int { throw std::runtime_error("bug"); });
  EXPECT_EQ(code, 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "tool: internal error: bug\n");
}

TEST(RunMain, ReturnsWhatTheBodyReturns) {
  Argv a({"x"});
  EXPECT_EQ(run_main(a.argc(), a.argv(), [](int argc, char**) { return argc; }), 2);
}

TEST(RunMain, ParserErrorsReachTheUserAsExitCode2) {
  Argv a({"--bogus"});
  testing::internal::CaptureStderr();
  const int code = run_main(a.argc(), a.argv(), [](int argc, char** argv) {
    ArgParser p = make_parser();
    p.parse(argc, argv);
    return 0;
  });
  EXPECT_EQ(code, 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "tool: error: unknown option '--bogus' (see --help)\n");
}

// Error text of f(), which must throw an InputError.
template <class F> std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return {};
}

// One rule for repeated options in every tool: refused, never "the last one wins".
TEST(Cli, AnOptionGivenTwiceIsRefusedNotOverwritten) {
  ArgParser p = make_parser();
  EXPECT_EQ(input_error([&] { parse(p, {"--lr", "0.1", "--lr", "0.2"}); }),
            "--lr is given twice; give each option once");
  EXPECT_EQ(input_error([&] { parse(p, {"--lr=0.1", "--lr", "0.1"}); }),
            "--lr is given twice; give each option once");
  EXPECT_EQ(input_error([&] { parse(p, {"--json", "--json"}); }),
            "--json is given twice; give each option once");
  parse(p, {"--lr", "0.1", "--", "--lr"});  // after --, a positional
  EXPECT_EQ(p.positionals(), std::vector<std::string>{"--lr"});
}

// Numbers are decimal in every tool: "0x2" is refused by name, not read as 2 by some.
TEST(Cli, HexadecimalNumbersAreRefusedByName) {
  for (const char* hex : {"0x2", "0X10", "-0x1p-3", "+0x2"}) {
    EXPECT_NE(input_error([&] { parse_double("--batch", hex); }).find("is hexadecimal"),
              std::string::npos)
        << hex;
    EXPECT_THROW(parse_int("--batch", hex), InputError) << hex;
  }
  ArgParser p = make_parser();
  EXPECT_THROW(parse(p, {"-0x2"}), InputError) << "not a negative number, so an unknown option";
  EXPECT_EQ(parse_int("n", "0"), 0);
  EXPECT_EQ(parse_int("n", "10"), 10);
}

// Too large is "out of range" with the range; a fraction is "not a whole number".
TEST(Cli, WholeNumbersOutsideTheirRangeSaySoAndGiveTheRange) {
  EXPECT_EQ(input_error([] { parse_int("--seed", "1e30"); }),
            "--seed: '1e30' is out of range (whole numbers from -9e18 to 9e18)");
  EXPECT_NE(input_error([] { parse_int("--grad-accum", "9223372036854775807"); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_int("--n", "inf"); }).find("out of range"), std::string::npos);
  EXPECT_EQ(input_error([] { parse_int("--n", "2.5"); }), "--n: '2.5' is not a whole number");
  EXPECT_EQ(input_error([] { parse_int("--ranks", "4294967298", 2, 8); }),
            "--ranks: 4294967298 is out of range (2 to 8)");
  EXPECT_EQ(parse_int("--ranks", "8", 2, 8), 8);
  ArgParser p("tool", "t");
  p.option("ranks", "4", "ranks");
  parse(p, {"--ranks", "4294967298"});
  EXPECT_EQ(input_error([&] { p.get_int("ranks", 2, 8); }),
            "--ranks: 4294967298 is out of range (2 to 8)");
}

// A flag that lost its value must not swallow the next flag (`--save --overwrite` saved into a
// directory named "--overwrite"): refused naming both, unless written --flag=value.
TEST(Cli, AValueThatLooksLikeAFlagIsRefusedUnlessWrittenWithEquals) {
  ArgParser p = make_parser();
  EXPECT_EQ(input_error([&] { parse(p, {"--out", "--json"}); }),
            "--out needs a value, but is followed by the flag '--json' (write --out=--json if "
            "that is the value)");
  EXPECT_NE(input_error([&] { parse(p, {"--out", "--nonsense"}); }).find("--out needs a value"),
            std::string::npos);
  EXPECT_NE(input_error([&] { parse(p, {"--out", "--"}); }).find("--out needs a value"),
            std::string::npos);
  parse(p, {"--out=--json"});
  EXPECT_EQ(p.get("out"), "--json");
  EXPECT_FALSE(p.get_flag("json"));
  parse(p, {"--lr", "-1e-3"});  // one dash: a negative number, still a value
  EXPECT_EQ(p.get_double("lr"), -1e-3);
}

// Whole numbers are taken exactly or refused, never rounded: a seed above 2^53 stays itself.
TEST(ParseInt, TakesTheLiteralsExactValueAbove2To53) {
  EXPECT_EQ(parse_int("--seed", "9007199254740993"), 9007199254740993);
  EXPECT_EQ(parse_int("--seed", "8999999999999999999"), 8999999999999999999);
  EXPECT_EQ(parse_int("n", "1.5e3"), 1500);
  EXPECT_EQ(parse_int("n", "-2.50e1"), -25);
  EXPECT_EQ(parse_int("n", "0.0"), 0);
  EXPECT_EQ(parse_int("n", "1e-0"), 1);
  EXPECT_EQ(input_error([] { parse_int("n", "1.00000000000000001"); }),
            "n: '1.00000000000000001' is not a whole number");
  EXPECT_EQ(input_error([] { parse_int("n", "1e-400"); }), "n: '1e-400' is not a whole number");
  EXPECT_NE(input_error([] { parse_int("n", "9000000000000000001e0"); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_int("n", "1e99999999999"); }).find("out of the range"),
            std::string::npos);
}

TEST(ParseDouble, AWholeNumberADoubleCannotHoldIsRefusedNotRounded) {
  EXPECT_EQ(parse_double("x", "9007199254740992"), 9007199254740992.0);
  EXPECT_EQ(parse_double("x", "9007199254740994"), 9007199254740994.0);
  EXPECT_EQ(parse_double("x", "-9007199254740992"), -9007199254740992.0);
  const std::string e = input_error([] { parse_double("--lr", "9007199254740993"); });
  EXPECT_NE(e.find("--lr: '9007199254740993' is not exactly a double"), std::string::npos) << e;
  EXPECT_THROW(parse_double("--lr", "-9007199254740993"), InputError);
  EXPECT_THROW(parse_double("--lr", "123456789012345678901234567890"), InputError);
  // Written with an exponent or a point, a number is a magnitude, rounded as any double.
  EXPECT_EQ(parse_double("x", "1e30"), 1e30);
  EXPECT_EQ(parse_double("x", "9007199254740993.0"), 9007199254740992.0);
}

// A message holding a newline (a path may) is still the one line the tools promise.
TEST(RunMain, AMessageWithANewlineStaysOneLine) {
  EXPECT_EQ(one_line("a\nb\rc"), "a\\nb\\rc");
  char prog[] = "tool";
  char* argv[] = {prog, nullptr};
  testing::internal::CaptureStderr();
  const int code = run_main(1, argv, [](int, char**) -> int { throw InputError("x\ny: cannot open"); });
  EXPECT_EQ(code, 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "tool: error: x\\ny: cannot open\n");
}

}  // namespace
}  // namespace mixpar
