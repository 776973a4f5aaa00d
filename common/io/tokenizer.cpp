// Byte-level tokenizer: a token is a byte, so encode and decode are casts with range checks.
#include "io/tokenizer.h"

#include <stdexcept>
#include <string>

#include "io/atomic_file.h"
#include "util/errors.h"

namespace mixpar {

namespace {

template <class Int>
std::string decode_ints(std::span<const Int> tokens) {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto t = static_cast<std::int64_t>(tokens[i]);
    if (t < 0 || t >= ByteTokenizer::kVocabSize) {
      throw InputError("token " + std::to_string(t) + " at position " + std::to_string(i) +
                       " is outside the byte vocabulary [0, 256)");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(t));
  }
  return text;
}

}  // namespace

std::vector<std::uint16_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::vector<std::uint16_t> ByteTokenizer::encode_file(const std::string& path) {
  return encode(read_file(path));
}

std::string ByteTokenizer::decode(std::span<const std::uint16_t> tokens) {
  return decode_ints(tokens);
}
std::string ByteTokenizer::decode(std::span<const std::int32_t> tokens) {
  return decode_ints(tokens);
}

std::string complete_greedy(const NextTokenFn& next_token, std::string_view prompt,
                            int max_new_tokens, char stop) {
  std::vector<std::uint16_t> context = ByteTokenizer::encode(prompt);
  std::vector<std::uint16_t> produced;
  for (int k = 0; k < max_new_tokens; ++k) {
    const int t = next_token(context);
    if (t == static_cast<unsigned char>(stop)) break;
    if (t < 0 || t >= ByteTokenizer::kVocabSize) {
      throw std::out_of_range("next_token returned " + std::to_string(t) + ", outside [0, 256)");
    }
    context.push_back(static_cast<std::uint16_t>(t));
    produced.push_back(static_cast<std::uint16_t>(t));
  }
  return ByteTokenizer::decode(produced);
}

}  // namespace mixpar
