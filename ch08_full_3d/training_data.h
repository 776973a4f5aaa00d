// Where the training tokens come from: the built-in addition dataset (default, with held-out
// problems to score), a .bin token shard, or any other file read as bytes. Checked against the
// vocabulary and the batch before training starts, so a bad file fails with one line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/addition_data.h"
#include "io/gpt2_tokenizer.h"

namespace mixpar::ch08 {

struct TrainingData {
  std::shared_ptr<const std::vector<std::uint16_t>> tokens;
  std::string description;               // "built-in addition (1,048,590 tokens)"
  std::vector<AdditionProblem> heldout;  // built-in dataset only
  std::uint64_t fingerprint = 0;         // FNV-1a of the tokens: a resume on other data fails
  // --val-data's tokens (null: none), read like the training tokens, and its description.
  std::shared_ptr<const std::vector<std::uint16_t>> val_tokens;
  std::string val_description;
  // --tokenizer's GPT-2 BPE (null: prompts and samples are bytes, or ids for a shard).
  std::shared_ptr<const Gpt2Tokenizer> tokenizer;
};

// Whether `path` names an llm.c token shard: it ends in ".bin", in any case (a shard named
// DATA.BIN was read as bytes, a vocabulary of 256 bytes and no error).
bool is_token_shard_path(const std::string& path);

// path "" = built-in addition; "*.bin" = llm.c token shard; anything else = bytes. InputError
// if the file is missing or corrupt, a token is >= vocab_size, or fewer than min_tokens.
TrainingData load_training_data(const std::string& path, std::int64_t vocab_size,
                                std::int64_t min_tokens);

// Adds the held-out tokens of `val_path` (read as load_training_data reads --data, at least
// min_tokens) and the GPT-2 tokenizer of `tokenizer_dir` to d; "" skips either. InputError on
// a missing or corrupt file, an id >= vocab_size, or a shard shorter than one batch.
// --prompt as ids: through d.tokenizer when there is one ("" = "<|endoftext|>", where every
// document of the corpus starts), else its bytes ("" = none).
std::vector<std::int32_t> encode_prompt(const std::string& prompt, const TrainingData& d);

void load_text_inputs(TrainingData& d, const std::string& val_path,
                      const std::string& tokenizer_dir, std::int64_t vocab_size,
                      std::int64_t min_tokens);

}  // namespace mixpar::ch08
