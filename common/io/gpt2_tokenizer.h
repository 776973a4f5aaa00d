// GPT-2's tokenizer: byte-level BPE (docs/REFERENCE.md, Radford et al. 2019, section 2.2).
// Text is first cut into pieces by GPT-2's pre-tokenizer pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (contractions, a word with its leading space, numbers, punctuation runs, whitespace runs
// that leave their last space to the next word), then each piece's UTF-8 bytes are merged
// pairwise in the order of vocab.bpe's merge list until no listed pair is left. encoder.json
// names every token by its bytes written through GPT-2's byte-to-printable-character map;
// "<|endoftext|>" (id 50256) separates documents. Reads OpenAI's two files as released
// (scripts/prepare_text.sh gets them; docs/SOURCES.md gives their SHA-256), and is checked
// id for id against the reference implementation on the whole Shakespeare corpus
// (tests/common/gpt2_tokenizer_test.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mixpar {

class Gpt2Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Reads DIR/encoder.json and DIR/vocab.bpe. InputError (one line naming the file) when a
  // file is missing or is not a GPT-2 vocabulary: not JSON, a token that is not in the byte
  // alphabet, ids not 0..n-1, no "<|endoftext|>", a merge of tokens the vocabulary lacks.
  static Gpt2Tokenizer from_dir(const std::string& dir);
  static Gpt2Tokenizer from_files(const std::string& encoder_json, const std::string& vocab_bpe);

  int vocab_size() const { return static_cast<int>(bytes_of_.size()); }
  int end_of_text() const { return end_of_text_; }

  // Ids of `text` (any bytes: a byte that is not valid UTF-8 is a piece of its own, so every
  // input round-trips). allow_special: "<|endoftext|>" in the text is the token 50256, as
  // tiktoken's allowed_special; otherwise it is encoded as ordinary text.
  std::vector<std::int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The bytes of the ids, concatenated (a cut inside a character gives its partial bytes).
  // InputError for an id outside [0, vocab_size()).
  std::string decode(std::span<const std::int32_t> ids) const;
  std::string decode(std::span<const std::uint16_t> ids) const;
  // decode() for a terminal: every byte that is not part of valid UTF-8 (a sample cut inside
  // a character, a model that has not learned to finish one) becomes U+FFFD.
  std::string decode_for_display(std::span<const std::int32_t> ids) const;
  // The bytes of one token.
  const std::string& token_bytes(int id) const;

  // The pre-tokenizer alone: the pieces the pattern cuts `text` into, in order (their
  // concatenation is `text`).
  static std::vector<std::string_view> pretokenize(std::string_view text);

 private:
  Gpt2Tokenizer() = default;
  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::vector<std::string> bytes_of_;  // id -> the token's bytes
  std::int32_t byte_id_[256] = {};     // the single-byte tokens
  // (left id << 32 | right id) -> (rank in vocab.bpe, merged id)
  struct Merge {
    std::int32_t rank, id;
  };
  std::unordered_map<std::uint64_t, Merge> merges_;
  int end_of_text_ = -1;
};

}  // namespace mixpar
