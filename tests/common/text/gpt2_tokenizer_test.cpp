// GPT-2's byte-level BPE (common/io/gpt2_tokenizer.h) against the reference implementation:
// the expected ids below are tiktoken 0.14.0's (scripts/text/requirements.txt) on GPT-2's own
// files, and the whole-corpus test compares with the shards scripts/prepare_text.sh wrote with
// it. The files come from MIXPAR_TEXT_DATA, the folder the ctest fixture TextData.Prepare
// fills (tests/common/CMakeLists.txt).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/gpt2_tokenizer.h"
#include "io/token_shard.h"
#include "io/unicode_classes.h"
#include "util/errors.h"

namespace mixpar {
namespace {

namespace fs = std::filesystem;

std::string text_data_dir() {
  const char* dir = std::getenv("MIXPAR_TEXT_DATA");
  return dir != nullptr ? dir : "";
}

// The tokenizer of the prepared folder, read once for the whole suite.
const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer t = Gpt2Tokenizer::from_dir(text_data_dir());
  return t;
}

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (text_data_dir().empty()) GTEST_SKIP() << "MIXPAR_TEXT_DATA is not set (run it from ctest)";
    ASSERT_TRUE(fs::exists(text_data_dir() + "/encoder.json"))
        << text_data_dir() << " holds no encoder.json: scripts/prepare_text.sh did not run";
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using Ids = std::vector<std::int32_t>;
using Pieces = std::vector<std::string_view>;

TEST(Gpt2Pretokenize, WhitespaceRunLeavesItsLastSpaceToTheNextWord) {
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("  two spaces"), (Pieces{" ", " two", " spaces"}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("a\n\n\nb"), (Pieces{"a", "\n\n", "\n", "b"}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize(" \n x"), (Pieces{" \n", " x"}));
  // At the end of the text the whole run is one piece; a single tab is `\s+` on its own.
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("tabs\t\tand\r\nCRLF"),
            (Pieces{"tabs", "\t", "\t", "and", "\r", "\n", "CRLF"}));
}

TEST(Gpt2Pretokenize, ContractionsAreLowerCaseOnly) {
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("I'll we've they're he's 't"),
            (Pieces{"I", "'ll", " we", "'ve", " they", "'re", " he", "'s", " '", "t"}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("DON'T"), (Pieces{"DON", "'", "T"}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("'''s"), (Pieces{"'''", "s"}));
}

TEST(Gpt2Pretokenize, UnicodeLettersNumbersAndSpacesByClass) {
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("caf\u00e9 na\u00efve"), (Pieces{"caf\u00e9", " na\u00efve"}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("\u00bd \u2167 \u0661\u0662"),
            (Pieces{"\u00bd", " \u2167", " \u0661\u0662"}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("\u00a0nbsp\u3000x"), (Pieces{"\u00a0", "nbsp", "\u3000", "x"}));
  EXPECT_EQ(Gpt2Tokenizer::pretokenize("emoji \U0001F600!"), (Pieces{"emoji", " \U0001F600!"}));
}

TEST(Gpt2Pretokenize, InvalidUtf8IsAPieceOfNoClass) {
  const std::string s = "a\xff\xfe b";
  EXPECT_EQ(Gpt2Tokenizer::pretokenize(s), (Pieces{"a", "\xff\xfe", " b"}));
}

TEST(UnicodeClasses, MatchTheCategoriesTheyWereGeneratedFrom) {
  EXPECT_TRUE(is_unicode_letter(U'a') && is_unicode_letter(U'\u00e9') && is_unicode_letter(U'\u65e5'));
  EXPECT_FALSE(is_unicode_letter(U'1') || is_unicode_letter(U' ') || is_unicode_letter(U'\''));
  EXPECT_TRUE(is_unicode_number(U'7') && is_unicode_number(U'\u00bd') && is_unicode_number(U'\u2167'));
  EXPECT_TRUE(is_unicode_space(U'\t') && is_unicode_space(U'\u3000') && is_unicode_space(U'\u0085'));
  EXPECT_FALSE(is_unicode_space(U'\x1c'));  // isspace() in Python, not White_Space
  EXPECT_FALSE(is_unicode_letter(0x10FFFF) || is_unicode_number(0x10FFFF) || is_unicode_space(0x10FFFF));
}

TEST_F(Gpt2TokenizerTest, EdgeCasesEncodeToTheReferenceIds) {
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"Hello world", {15496, 995}},
      {"  two spaces before", {220, 734, 9029, 878}},
      {"trailing spaces   ", {9535, 4386, 9029, 220, 220, 220}},
      {"a\n\n\nb", {64, 628, 198, 65}},
      {"tabs\t\tand\r\nCRLF", {8658, 82, 197, 197, 392, 201, 198, 34, 7836, 37}},
      {"I'll, you'd, we've, they're, he's, I'm, 't",
       {40, 1183, 11, 345, 1549, 11, 356, 1053, 11, 484, 821, 11, 339, 338, 11, 314, 1101, 11, 705, 83}},
      {"DON'T 'S", {41173, 6, 51, 705, 50}},
      {"numbers 12345 and 3.14", {77, 17024, 17031, 2231, 290, 513, 13, 1415}},
      {"caf\u00e9 na\u00efve \u00c5ngstr\u00f6m", {66, 1878, 2634, 41492, 6184, 227, 782, 2536, 9101, 76}},
      {"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
       {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"emoji \U0001F600!", {368, 31370, 30325, 222, 0}},
      {"\u00a0nbsp\u3000ideographic", {1849, 77, 24145, 5099, 222, 485, 6826}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(gpt2().encode(text), ids) << text;
    EXPECT_EQ(gpt2().decode(gpt2().encode(text)), text);
  }
}

TEST_F(Gpt2TokenizerTest, EndOfTextIsOneTokenOnlyWhenAllowed) {
  EXPECT_EQ(gpt2().end_of_text(), 50256);
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().encode("x<|endoftext|>y"), (Ids{87, 50256, 88}));
  EXPECT_EQ(gpt2().encode("<|endoftext|><|endoftext|>"), (Ids{50256, 50256}));
  const Ids plain = gpt2().encode("x<|endoftext|>y", /*allow_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(gpt2().decode(plain), "x<|endoftext|>y");
  EXPECT_EQ(gpt2().decode(Ids{50256}), "<|endoftext|>");
}

TEST_F(Gpt2TokenizerTest, AnyBytesRoundTripAndABadIdIsAnInputError) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(gpt2().decode(gpt2().encode(all + all)), all + all);
  EXPECT_TRUE(gpt2().encode("").empty());
  // For a terminal, the bytes of a cut character become U+FFFD; whole characters stay.
  const Ids smiley = gpt2().encode("\U0001F600 \u00e9");
  // The first token holds 3 of the 4 bytes of U+1F600: one U+FFFD each.
  EXPECT_EQ(gpt2().decode_for_display(Ids(smiley.begin(), smiley.begin() + 1)),
            "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(gpt2().decode_for_display(smiley), "\U0001F600 \u00e9");
  EXPECT_THROW((void)gpt2().decode(Ids{50257}), InputError);
  EXPECT_THROW((void)gpt2().decode(Ids{-1}), InputError);
}

// The whole Shakespeare corpus (corpus.txt, 5 MB): the C++ ids equal the reference tokenizer's
// (train.bin then val.bin, split from one encoding), and decode(encode(x)) == x.
TEST_F(Gpt2TokenizerTest, WholeCorpusMatchesTheReferenceIdForId) {
  const std::string corpus = slurp(text_data_dir() + "/corpus.txt");
  ASSERT_GT(corpus.size(), 1000000u);
  std::vector<std::uint16_t> want = read_token_shard(text_data_dir() + "/train.bin", 50257);
  const std::vector<std::uint16_t> val = read_token_shard(text_data_dir() + "/val.bin", 50257);
  want.insert(want.end(), val.begin(), val.end());
  const Ids got = gpt2().encode(corpus);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "first difference at token " << i;
  }
  EXPECT_TRUE(gpt2().decode(got) == corpus);
}

TEST(Gpt2TokenizerFiles, MissingOrCorruptFilesAreOneLineInputErrors) {
  const fs::path dir = fs::temp_directory_path() / "mixpar_gpt2_tokenizer_files";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto expect_error = [&](const std::string& enc, const std::string& bpe,
                                const std::string& needle) {
    std::ofstream(dir / "encoder.json") << enc;
    std::ofstream(dir / "vocab.bpe") << bpe;
    try {
      (void)Gpt2Tokenizer::from_dir(dir.string());
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  EXPECT_THROW((void)Gpt2Tokenizer::from_dir((dir / "absent").string()), InputError);
  // Every byte as its printable character, ids 0..255, then the separator.
  std::string bytes_vocab = "{";
  int n = 0;
  for (char32_t cp = 0; cp < 0x144 && n < 256; ++cp) {
    const bool printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) ||
                           (cp >= 0xAE && cp <= 0xFF) || cp >= 0x100;
    if (!printable) continue;
    std::string s;
    if (cp < 0x80) {
      s = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : std::string(1, static_cast<char>(cp));
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    bytes_vocab += "\"" + s + "\": " + std::to_string(n++) + ", ";
  }
  const std::string good_json = bytes_vocab + "\"ab\": 256, \"<|endoftext|>\": 257}";
  expect_error("not json", "#version: 0.2\na b\n", "encoder.json");
  expect_error(bytes_vocab + "\"ab\": 256}", "#version: 0.2\na b\n", "endoftext");
  expect_error(bytes_vocab + "\"ab\": 7, \"<|endoftext|>\": 257}", "a b\n", "no id of its own");
  expect_error(good_json, "#version: 0.2\na b c\n", "not a merge");
  expect_error(good_json, "#version: 0.2\nx y\n", "lacks");
  expect_error(good_json, "#version: 0.2\n", "no merges");
  std::ofstream(dir / "encoder.json") << good_json;
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\na b\n";
  const Gpt2Tokenizer t = Gpt2Tokenizer::from_dir(dir.string());
  EXPECT_EQ(t.encode("ab<|endoftext|>ba"), (Ids{256, 257, 'b' - '!', 'a' - '!'}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mixpar
