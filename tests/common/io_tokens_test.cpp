// Byte tokenizer (lossless on any UTF-8), token shards (round trip and every corrupt-file
// case refused with a message naming the file and the problem), and the TokenLoader: llm.c's
// sequential windows exactly, the data-parallel view, seeded shuffling, exact resume.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "expect.h"
#include "io/atomic_file.h"
#include "io/token_loader.h"
#include "io/token_shard.h"
#include "io/tokenizer.h"
#include "temp_dir.h"

namespace mixpar {
namespace {

using test_support::input_error_of;
using test_support::TempDir;
using ::testing::HasSubstr;

// ---------------------------------------------------------------- tokenizer

TEST(Tokenizer, RoundTripsUtf8TextAndEveryByte) {
  std::string text = "plain ASCII, \xC3\xA9t\xC3\xA9, \xE4\xB8\xAD\xE6\x96\x87, \xF0\x9F\x98\x80\n";
  for (int b = 0; b < 256; ++b) text += static_cast<char>(b);
  const auto tokens = ByteTokenizer::encode(text);
  ASSERT_EQ(tokens.size(), text.size());
  EXPECT_EQ(ByteTokenizer::decode(tokens), text);
}

TEST(Tokenizer, EachByteIsOneToken) {
  EXPECT_EQ(ByteTokenizer::encode("A\xC3\xA9"), (std::vector<std::uint16_t>{65, 0xC3, 0xA9}));
  EXPECT_EQ(ByteTokenizer::vocab_size(), 256);
}

TEST(Tokenizer, DecodeRefusesTokensOutsideTheVocabulary) {
  const std::vector<std::int32_t> bad = {72, 105, 256};
  EXPECT_THAT(input_error_of([&] { ByteTokenizer::decode(bad); }),
              HasSubstr("token 256 at position 2"));
  const std::vector<std::int32_t> negative = {-1};
  EXPECT_THAT(input_error_of([&] { ByteTokenizer::decode(negative); }), HasSubstr("token -1"));
}

TEST(Tokenizer, EncodesFilesAndNamesAMissingOne) {
  TempDir dir;
  test_support::write_raw(dir.file("a.txt"), "hi\n");
  EXPECT_EQ(ByteTokenizer::encode_file(dir.file("a.txt")),
            (std::vector<std::uint16_t>{'h', 'i', '\n'}));
  EXPECT_THAT(input_error_of([&] { ByteTokenizer::encode_file(dir.file("nope.txt")); }),
              HasSubstr("nope.txt: cannot open"));
}

TEST(Tokenizer, CompleteGreedyStopsAtTheStopByteOrTheLimit) {
  // A "model" that spells "42" after any context, then a newline.
  const NextTokenFn model = [](std::span<const std::uint16_t> ctx) -> int {
    const std::string s = ByteTokenizer::decode(ctx);
    if (s.ends_with("=")) return '4';
    if (s.ends_with("=4")) return '2';
    return '\n';
  };
  EXPECT_EQ(complete_greedy(model, "40+2=", 10), "42");
  EXPECT_EQ(complete_greedy(model, "40+2=", 1), "4");
}

// ---------------------------------------------------------------- shards

std::vector<std::uint16_t> ramp(std::size_t n, int modulo) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>((i * 7 + 3) % modulo);
  return t;
}

TEST(TokenShard, WriteReadRoundTripWithTheLlmcHeader) {
  TempDir dir;
  const auto tokens = ramp(1000, 50257);
  write_token_shard(dir.file("t.bin"), tokens);
  const std::string raw = read_file(dir.file("t.bin"));
  ASSERT_EQ(raw.size(), 1024u + 2 * tokens.size());
  std::int32_t header[256];
  std::memcpy(header, raw.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 1000);
  for (int k = 3; k < 256; ++k) EXPECT_EQ(header[k], 0);
  EXPECT_EQ(read_token_shard(dir.file("t.bin"), 50257), tokens);
}

// A valid shard's bytes with header field `field` replaced, or the size changed.
std::string shard_bytes(const std::vector<std::uint16_t>& tokens) {
  std::int32_t header[256] = {20240520, 1, static_cast<std::int32_t>(tokens.size())};
  std::string s(reinterpret_cast<const char*>(header), sizeof(header));
  s.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return s;
}

std::string shard_error(TempDir& dir, const std::string& bytes, int vocab = 256,
                        std::int64_t min = 0) {
  test_support::write_raw(dir.file("bad.bin"), bytes);
  const std::string msg =
      input_error_of([&] { read_token_shard(dir.file("bad.bin"), vocab, min); });
  EXPECT_THAT(msg, HasSubstr(dir.file("bad.bin") + ": "));  // every message names the file
  return msg;
}

TEST(TokenShard, MissingFileIsRefused) {
  TempDir dir;
  EXPECT_THAT(input_error_of([&] { read_token_shard(dir.file("none.bin"), 256); }),
              HasSubstr("none.bin: cannot open: No such file or directory"));
}

TEST(TokenShard, WrongMagicIsRefused) {
  TempDir dir;
  std::string b = shard_bytes(ramp(10, 256));
  b[0] = 1;
  EXPECT_THAT(shard_error(dir, b), HasSubstr("not a token shard: magic"));
}

TEST(TokenShard, WrongVersionIsRefused) {
  TempDir dir;
  std::string b = shard_bytes(ramp(10, 256));
  b[4] = 2;  // llm.c's version 2 holds uint32 tokens
  EXPECT_THAT(shard_error(dir, b), HasSubstr("unsupported shard version 2"));
}

TEST(TokenShard, TruncatedShardIsRefused) {
  TempDir dir;
  const std::string b = shard_bytes(ramp(10, 256));
  EXPECT_THAT(shard_error(dir, b.substr(0, b.size() - 1)), HasSubstr("truncated"));
  EXPECT_THAT(shard_error(dir, b.substr(0, 100)), HasSubstr("truncated: 100 bytes, shorter than"));
  EXPECT_THAT(shard_error(dir, b + "xy"), HasSubstr("2 extra bytes"));
}

TEST(TokenShard, TokenBeyondTheVocabularyIsRefused) {
  TempDir dir;
  auto tokens = ramp(10, 256);
  tokens[7] = 300;
  EXPECT_THAT(shard_error(dir, shard_bytes(tokens)),
              HasSubstr("token 300 at position 7 is outside the vocabulary (vocab_size 256)"));
}

TEST(TokenShard, FewerTokensThanOneBatchIsRefused) {
  TempDir dir;
  EXPECT_THAT(shard_error(dir, shard_bytes(ramp(128, 256)), 256, 4 * 32 + 1),
              HasSubstr("too few tokens: 128, fewer than the 129"));
}

// ---------------------------------------------------------------- loader

// llm.c's CPU loader (train_gpt2.c, dataloader_next_batch), transcribed: reset to the start
// if B*T+1 tokens no longer fit, read them, advance by B*T.
struct LlmcLoader {
  const std::vector<std::uint16_t>& tokens;
  std::size_t B, T, pos = 0;
  std::vector<std::int32_t> inputs, targets;
  void next() {
    if (pos + B * T + 1 > tokens.size()) pos = 0;
    inputs.assign(tokens.begin() + pos, tokens.begin() + pos + B * T);
    targets.assign(tokens.begin() + pos + 1, tokens.begin() + pos + B * T + 1);
    pos += B * T;
  }
};

std::vector<std::uint16_t> iota_tokens(std::size_t n) {
  std::vector<std::uint16_t> t(n);
  std::iota(t.begin(), t.end(), std::uint16_t{0});
  return t;
}

TEST(TokenLoader, SequentialReproducesLlmcWindowsIncludingTheWrap) {
  const auto tokens = iota_tokens(40);  // B*T = 6: windows at 0, 6, ..., 30; 36+7 > 40 wraps
  TokenLoader ours(tokens, 2, 3, DataOrder::kSequential, 0);
  LlmcLoader ref{tokens, 2, 3, 0, {}, {}};
  EXPECT_EQ(ours.windows_per_epoch(), 6);
  for (int step = 0; step < 20; ++step) {
    ref.next();
    const TokenBatch b = ours.next();
    ASSERT_EQ(b.inputs, ref.inputs) << "step " << step;
    ASSERT_EQ(b.targets, ref.targets) << "step " << step;
    EXPECT_EQ(b.position, (step % 6) * 6);
    EXPECT_EQ(b.epoch, step / 6);
  }
}

TEST(TokenLoader, TargetsAreInputsShiftedByOne) {
  const TokenBatch b = TokenLoader(iota_tokens(100), 3, 5, DataOrder::kSequential, 0).batch_at(2);
  ASSERT_EQ(b.inputs.size(), 15u);
  for (std::size_t i = 0; i < 15; ++i) {
    EXPECT_EQ(b.inputs[i], 30 + static_cast<int>(i));  // row r, column t: 30 + r*T + t
    EXPECT_EQ(b.targets[i], 31 + static_cast<int>(i));
  }
}

// The N ranks' rows, concatenated, equal the batch of one rank holding N*B rows.
void expect_dp_view_matches_one_rank(DataOrder order) {
  auto tokens = std::make_shared<const std::vector<std::uint16_t>>(ramp(5000, 65536));
  const std::int64_t B = 2, T = 8;
  for (int world : {2, 4}) {
    TokenLoader single(tokens, world * B, T, order, 7);
    for (std::int64_t step = 0; step < 3 * single.windows_per_epoch(); step += 5) {
      std::vector<std::int32_t> inputs, targets;
      for (int r = 0; r < world; ++r) {
        const TokenBatch b = TokenLoader(tokens, B, T, order, 7, r, world).batch_at(step);
        inputs.insert(inputs.end(), b.inputs.begin(), b.inputs.end());
        targets.insert(targets.end(), b.targets.begin(), b.targets.end());
      }
      const TokenBatch whole = single.batch_at(step);
      ASSERT_EQ(inputs, whole.inputs) << "world " << world << " step " << step;
      ASSERT_EQ(targets, whole.targets) << "world " << world << " step " << step;
    }
  }
}

TEST(TokenLoader, DataParallelRowsConcatenateToTheOneRankBatchSequential) {
  expect_dp_view_matches_one_rank(DataOrder::kSequential);
}

TEST(TokenLoader, DataParallelRowsConcatenateToTheOneRankBatchShuffled) {
  expect_dp_view_matches_one_rank(DataOrder::kShuffled);
}

TEST(TokenLoader, ShuffledVisitsEveryWindowOncePerEpochInANewOrder) {
  TokenLoader loader(iota_tokens(60001), 4, 25, DataOrder::kShuffled, 3);
  const std::int64_t W = loader.windows_per_epoch();
  ASSERT_EQ(W, 600);
  std::vector<std::vector<std::int64_t>> orders(3);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::int64_t k = 0; k < W; ++k) {
      orders[epoch].push_back(loader.window_start(epoch * W + k));
    }
    std::set<std::int64_t> starts(orders[epoch].begin(), orders[epoch].end());
    ASSERT_EQ(starts.size(), static_cast<std::size_t>(W));
    EXPECT_EQ(*starts.begin(), 0);
    EXPECT_EQ(*starts.rbegin(), (W - 1) * 100);
    for (std::int64_t s : starts) EXPECT_EQ(s % 100, 0);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  std::vector<std::int64_t> sequential(W);
  for (std::int64_t k = 0; k < W; ++k) sequential[k] = k * 100;
  EXPECT_NE(orders[0], sequential);
}

TEST(TokenLoader, ShuffledIsDeterministicPerSeed) {
  const auto tokens = ramp(20000, 65536);
  TokenLoader a(tokens, 2, 16, DataOrder::kShuffled, 11),
      b(tokens, 2, 16, DataOrder::kShuffled, 11);
  TokenLoader c(tokens, 2, 16, DataOrder::kShuffled, 12);
  bool differs = false;
  for (int k = 0; k < 1000; ++k) {
    const TokenBatch x = a.next(), y = b.next(), z = c.next();
    ASSERT_EQ(x.inputs, y.inputs) << "step " << k;
    differs |= x.inputs != z.inputs;
  }
  EXPECT_TRUE(differs);
}

TEST(TokenLoader, StateSaveRestoreContinuesIdentically) {
  const auto tokens = ramp(3000, 65536);
  for (DataOrder order : {DataOrder::kSequential, DataOrder::kShuffled}) {
    TokenLoader a(tokens, 2, 8, order, 5);
    for (int k = 0; k < 250; ++k) a.next();  // beyond the first epoch of 187 windows
    const Json saved = Json::parse(loader_state_to_json(a.state()).dump());
    TokenLoader b(tokens, 2, 8, order, 5);
    b.restore(loader_state_from_json(saved));
    EXPECT_EQ(b.state(), a.state());
    EXPECT_EQ(b.state().epoch, 1);
    for (int k = 0; k < 300; ++k) {
      const TokenBatch x = a.next(), y = b.next();
      ASSERT_EQ(x.inputs, y.inputs) << data_order_name(order) << " step " << x.step;
      ASSERT_EQ(x.step, y.step);
    }
  }
}

// The global samples (rows of T inputs) that `world` loaders of B rows each read in `steps`
// batches from `state` (none: from the start), rank 0's rows first.
std::vector<std::vector<std::int32_t>> global_rows(const std::vector<std::uint16_t>& tokens,
                                                   std::int64_t B, int world, DataOrder order,
                                                   const LoaderState* state, int steps) {
  std::vector<TokenLoader> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back(tokens, B, 4, order, 5, r, world);
    if (state != nullptr) ranks.back().restore(*state);
  }
  std::vector<std::vector<std::int32_t>> rows;
  for (int k = 0; k < steps; ++k) {
    for (TokenLoader& l : ranks) {
      const TokenBatch b = l.next();
      for (std::int64_t i = 0; i < B; ++i) {
        rows.emplace_back(b.inputs.begin() + i * 4, b.inputs.begin() + (i + 1) * 4);
      }
    }
  }
  return rows;
}

// The loader's place is a global sample: a state saved by 4 ranks x 2 rows resumes on 2 x 2,
// 1 x 2 or 8 x 2 (another dp, or the same samples in more micro-batches) and reads exactly the
// samples the saver would have read next, in both orders and across epoch boundaries (200
// tokens: 6 windows of 8 rows x 4 tokens per epoch).
TEST(TokenLoader, AStateResumesOnAnotherRowsPerBatchReadingTheSameSamples) {
  const auto tokens = ramp(200, 65536);
  for (DataOrder order : {DataOrder::kSequential, DataOrder::kShuffled}) {
    SCOPED_TRACE(std::string(data_order_name(order)));
    const auto straight = global_rows(tokens, 2, 4, order, nullptr, 40);  // 320 samples
    TokenLoader saver(tokens, 2, 4, order, 5, 0, 4);
    for (int k = 0; k < 5; ++k) saver.next();  // 40 samples: into the second epoch (48)
    const LoaderState saved = loader_state_from_json(loader_state_to_json(saver.state()));
    EXPECT_EQ(saved.samples, 40);
    EXPECT_EQ(saved.order_rows, 8);
    for (int world : {2, 1, 8}) {
      SCOPED_TRACE("resumed on " + std::to_string(world) + " ranks");
      const int steps = 8 * 32 / (2 * world);  // 256 samples: three more epoch boundaries
      const auto resumed = global_rows(tokens, 2, world, order, &saved, steps);
      ASSERT_EQ(resumed.size(), 256u);
      for (std::size_t i = 0; i < resumed.size(); ++i) {
        ASSERT_EQ(resumed[i], straight[40 + i]) << "sample " << 40 + i;
      }
    }
  }
}

// A state written before the loader stored its sample ({step, epoch}) counted batches of the
// saver's N*B, which a resume then keeps: it continues at step * N*B.
TEST(TokenLoader, AStateWithoutSamplesContinuesAtItsStepOfThisBatch) {
  const auto tokens = ramp(3000, 65536);
  TokenLoader a(tokens, 2, 8, DataOrder::kShuffled, 5);
  for (int k = 0; k < 250; ++k) a.next();
  TokenLoader b(tokens, 2, 8, DataOrder::kShuffled, 5);
  b.restore(loader_state_from_json(Json::parse(R"({"step":250,"epoch":1})")));
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(b.next().inputs, a.next().inputs);
}

TEST(TokenLoader, RestoreRefusesAStateFromOtherData) {
  TokenLoader loader(iota_tokens(1000), 2, 8, DataOrder::kSequential, 0);  // 62 windows
  EXPECT_THAT(input_error_of([&] {
                loader.restore({100, 3});
              }),
              HasSubstr("did the data, B, T or the ranks change?"));
  EXPECT_THAT(input_error_of([] { loader_state_from_json(Json::parse(R"({"step":1})")); }),
              HasSubstr("data loader state: missing key \"epoch\""));
}

TEST(TokenLoader, RefusesAStreamShorterThanOneGlobalBatch) {
  EXPECT_THAT(
      input_error_of([] { TokenLoader(iota_tokens(64), 2, 8, DataOrder::kSequential, 0, 0, 4); }),
      HasSubstr("64 tokens, fewer than the 65 one global batch reads"));
  EXPECT_THAT(input_error_of([] { TokenLoader(iota_tokens(64), 0, 8, DataOrder::kSequential, 0); }),
              HasSubstr("must be >= 1"));
}

TEST(TokenLoader, ParsesDataOrderNames) {
  EXPECT_EQ(parse_data_order("sequential"), DataOrder::kSequential);
  EXPECT_EQ(parse_data_order("shuffled"), DataOrder::kShuffled);
  EXPECT_THAT(input_error_of([] { parse_data_order("random"); }),
              HasSubstr("'random' is not one of sequential|shuffled"));
}

}  // namespace
}  // namespace mixpar
