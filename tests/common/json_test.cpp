// Json: every type round-trips through the compact and the pretty writer, numbers keep
// exact integers and shortest doubles, escapes and \uXXXX decode to UTF-8, and every kind
// of malformed input is refused with the byte offset where it went wrong.
#include "util/json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "expect.h"
#include "util/errors.h"

namespace mixpar {
namespace {

using test_support::input_error_of;
using ::testing::HasSubstr;

Json sample_document() {
  Json doc = Json::object();
  doc.set("name", "gpt2 \"tiny\"\n\xC3\xA9");  // quote, newline and a 2-byte UTF-8 char
  doc.set("layers", 12);
  doc.set("eps", 1e-5);
  doc.set("big", std::int64_t{9007199254740993});  // 2^53 + 1: no double holds it
  doc.set("neg", -3.25);
  doc.set("flags", Json(Json::Array{true, false, Json()}));
  Json nested = Json::object();
  nested.set("empty_array", Json::array());
  nested.set("empty_object", Json::object());
  nested.set("list", Json(Json::Array{1, 2.5, "x"}));
  doc.set("nested", nested);
  return doc;
}

TEST(Json, RoundTripsEveryTypeCompactAndPretty) {
  const Json doc = sample_document();
  EXPECT_EQ(Json::parse(doc.dump()), doc);
  EXPECT_EQ(Json::parse(doc.dump(2)), doc);
  EXPECT_EQ(Json::parse(doc.dump(2)).dump(), doc.dump());  // same text, not just same value
}

TEST(Json, CompactAndPrettyFormsAreExact) {
  Json doc = Json::object();
  doc.set("a", Json(Json::Array{1, 2}));
  doc.set("b", Json::object());
  EXPECT_EQ(doc.dump(), R"({"a":[1,2],"b":{}})");
  EXPECT_EQ(doc.dump(2), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
}

TEST(Json, KeepsInsertionOrderOfObjects) {
  const std::string text = R"({"zeta":1,"alpha":2,"mid":{"y":1,"x":2}})";
  EXPECT_EQ(Json::parse(text).dump(), text);
  Json j = Json::parse(text);
  j.set("alpha", 5);  // replaced in place, not moved to the end
  j.set("new", 6);
  EXPECT_EQ(j.dump(), R"({"zeta":1,"alpha":5,"mid":{"y":1,"x":2},"new":6})");
}

TEST(Json, IntegersAreExactOverTheWholeInt64Range) {
  for (const char* text :
       {"9007199254740993", "-9223372036854775808", "9223372036854775807", "0"}) {
    const Json j = Json::parse(text);
    EXPECT_TRUE(j.is_integer()) << text;
    EXPECT_EQ(std::to_string(j.as_int()), text);
    EXPECT_EQ(j.dump(), text);
  }
}

TEST(Json, IntegersBeyondInt64BecomeDoubles) {
  const Json j = Json::parse("18446744073709551616");  // 2^64
  EXPECT_DOUBLE_EQ(j.as_double(), 18446744073709551616.0);
  EXPECT_FALSE(j.is_integer());
  EXPECT_THAT(input_error_of([&] { j.as_int(); }), HasSubstr("expected an integer"));
}

TEST(Json, DoublesPrintShortestAndStayDoubles) {
  EXPECT_EQ(Json(0.1).dump(), "0.1");
  EXPECT_EQ(Json(1e-5).dump(), "1e-05");
  EXPECT_EQ(Json(1.0).dump(), "1.0");
  EXPECT_EQ(Json(-2.5e300).dump(), "-2.5e+300");
  for (double v : {0.1, 1.0 / 3.0, 6.02214076e23, 5e-324, -0.0}) {
    const Json back = Json::parse(Json(v).dump());
    EXPECT_EQ(std::signbit(back.as_double()), std::signbit(v));
    EXPECT_EQ(back.as_double(), v);
  }
}

TEST(Json, IntegralDoublesReadAsIntegersButFractionsDoNot) {
  EXPECT_EQ(Json::parse("1.5e3").as_int(), 1500);
  EXPECT_EQ(Json::parse("768.0").as_int(), 768);
  EXPECT_THAT(input_error_of([] { Json::parse("3.5").as_int(); }), HasSubstr("3.5"));
}

TEST(Json, TinyNumbersUnderflowToZero) {
  EXPECT_EQ(Json::parse("1e-400").as_double(), 0.0);
  EXPECT_TRUE(std::signbit(Json::parse("-1e-400").as_double()));
}

TEST(Json, NonFiniteNumbersAreWrittenAsNull) {
  EXPECT_EQ(Json(std::numeric_limits<double>::quiet_NaN()).dump(), "null");
  EXPECT_EQ(Json(-std::numeric_limits<double>::infinity()).dump(), "null");
}

TEST(Json, DecodesEscapesAndUnicodeToUtf8) {
  const Json j = Json::parse(R"("\u00e9\u4e2d\ud83d\ude00\n\t\"\\\/\b\f\r\u0000")");
  EXPECT_EQ(j.as_string(), std::string("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\n\t\"\\/\b\f\r") +
                               std::string(1, '\0'));
}

TEST(Json, WriterEscapesControlsAndKeepsUtf8) {
  EXPECT_EQ(Json(std::string("a\x01\x1f\x7f\xC3\xA9\"\\")).dump(),
            "\"a\\u0001\\u001f\x7f\xC3\xA9\\\"\\\\\"");
  EXPECT_EQ(Json("\n\t").dump(), R"("\n\t")");
}

TEST(Json, WriterReplacesInvalidUtf8SoOutputStaysValid) {
  const std::string out = Json(std::string("a\xFF"
                                           "b\xC3"))
                              .dump();
  EXPECT_EQ(out,
            "\"a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\"");
  EXPECT_NO_THROW(Json::parse(out));
}

TEST(Json, TypedAccessErrorsAreInputErrors) {
  EXPECT_THAT(input_error_of([] { Json(1).as_string(); }),
              HasSubstr("expected a string, got number"));
  EXPECT_THAT(input_error_of([] { Json("x").as_object(); }),
              HasSubstr("expected an object, got string"));
  EXPECT_THAT(input_error_of([] { Json::object().at("n_head"); }),
              HasSubstr("missing key \"n_head\""));
  EXPECT_THAT(input_error_of([] { Json::array().at(std::size_t{0}); }), HasSubstr("index 0"));
}

TEST(Json, NumbersCompareByValue) {
  EXPECT_EQ(Json(1), Json(1.0));
  EXPECT_NE(Json(1), Json(2));
  EXPECT_NE(Json(1), Json("1"));
}

struct Malformed {
  std::string text;
  std::size_t offset;
  const char* what;
};

TEST(Json, MalformedInputsAreRefusedWithTheirByteOffset) {
  const Malformed cases[] = {
      {"", 0, "unexpected end"},
      {"{\"a\":1,}", 7, "expected a string key"},
      {"[1,2,]", 5, "unexpected character"},
      {"[1 2]", 3, "expected ']'"},
      {"{\"a\" 1}", 5, "expected ':'"},
      {"01", 0, "leading zero"},
      {"1.", 2, "expected a digit after '.'"},
      {"1e", 2, "exponent"},
      {"-", 1, "expected a digit"},
      {"tru", 0, "unexpected character"},
      {"NaN", 0, "unexpected character"},
      {"// comment\n1", 0, "unexpected character"},
      {"\"abc", 4, "unterminated string"},
      {"\"a\nb\"", 2, "control character"},
      {"\"\\x\"", 2, "unknown escape"},
      {"\"\\u12G4\"", 5, "bad hex digit"},
      {"\"\\ud800\"", 1, "high surrogate without a low surrogate"},
      {"\"\\udc00\"", 1, "lone low surrogate"},
      {"\"\xC3\x28\"", 1, "invalid UTF-8"},
      {"\"\xC0\xAF\"", 1, "invalid UTF-8"},      // overlong '/'
      {"\"\xED\xA0\x80\"", 1, "invalid UTF-8"},  // a surrogate encoded in UTF-8
      {"{\"a\":1,\"a\":2}", 7, "duplicate key \"a\""},
      {"[1] x", 4, "unexpected text after the value"},
      {"1e999", 0, "out of range"},
  };
  for (const Malformed& c : cases) {
    const std::string msg = input_error_of([&] { Json::parse(c.text, "t.json"); });
    EXPECT_THAT(msg, HasSubstr("t.json: invalid JSON at byte " + std::to_string(c.offset) + ": "))
        << "input: " << c.text;
    EXPECT_THAT(msg, HasSubstr(c.what)) << "input: " << c.text;
  }
}

TEST(Json, DeepNestingIsRefusedNotACrash) {
  const std::string deep(100000, '[');
  EXPECT_THAT(input_error_of([&] { Json::parse(deep); }), HasSubstr("nesting deeper than"));
  const std::string ok = std::string(200, '[') + std::string(200, ']');
  EXPECT_NO_THROW(Json::parse(ok));
}

TEST(Json, SurroundingWhitespaceIsAllowed) {
  EXPECT_EQ(Json::parse(" \t\r\n{\"a\" : [ 1 , 2 ] }\n  ").dump(), R"({"a":[1,2]})");
}

}  // namespace
}  // namespace mixpar
