// The byte-level tokenizer: vocabulary 256, token i is the byte i. Any file, UTF-8 or not,
// encodes losslessly (decode(encode(x)) == x), with no merges, no unknown token and nothing
// to download; the cost is ~4x longer sequences than GPT-2's BPE on English text.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mixpar {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  static constexpr int vocab_size() { return kVocabSize; }

  static std::vector<std::uint16_t> encode(std::string_view text);
  static std::vector<std::uint16_t> encode_file(
      const std::string& path);  // InputError if unreadable
  // A token outside [0, 256) is an InputError naming its position.
  static std::string decode(std::span<const std::uint16_t> tokens);
  static std::string decode(std::span<const std::int32_t> tokens);
};

// Greedy completion with any next-token function (the model's argmax at the last position,
// given every token so far): appends tokens after the encoded `prompt` until `stop` is
// produced or `max_new_tokens` were added, and returns the completion without `stop`.
using NextTokenFn = std::function<int(std::span<const std::uint16_t> context)>;
std::string complete_greedy(const NextTokenFn& next_token, std::string_view prompt,
                            int max_new_tokens, char stop = '\n');

}  // namespace mixpar
