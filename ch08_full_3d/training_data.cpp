// Training data sources. The byte path checks ids against the vocabulary itself (the shard
// reader does it for shards): a model with vocab_size < 256 cannot embed every byte.
#include "training_data.h"

#include <algorithm>
#include <cctype>

#include "io/token_shard.h"
#include "io/tokenizer.h"
#include "util/errors.h"

namespace mixpar::ch08 {

bool is_token_shard_path(const std::string& path) {
  if (path.size() <= 4) return false;
  std::string ext = path.substr(path.size() - 4);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".bin";
}
namespace {

std::uint64_t fnv1a(const std::vector<std::uint16_t>& tokens) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::uint16_t t : tokens) {
    h = (h ^ (t & 0xFFu)) * 1099511628211ull;
    h = (h ^ (t >> 8)) * 1099511628211ull;
  }
  return h;
}

// Built digit by digit rather than with insert(): GCC 12 warns falsely on that (bug 105329).
std::string with_commas(std::int64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') s += ',';
    s += digits[i];
  }
  return s;
}

void check_count(const std::string& what, std::size_t n, std::int64_t min_tokens) {
  if (static_cast<std::int64_t>(n) < min_tokens) {
    throw InputError(what + ": " + with_commas(static_cast<std::int64_t>(n)) +
                     " tokens, fewer than one batch needs (" + with_commas(min_tokens) + ")");
  }
}

}  // namespace

TrainingData load_training_data(const std::string& path, std::int64_t vocab_size,
                                std::int64_t min_tokens) {
  TrainingData d;
  std::vector<std::uint16_t> tokens;
  if (path.empty()) {
    AdditionDataset ds = make_addition_dataset(AdditionConfig{});
    tokens = std::move(ds.train_tokens);
    d.heldout = std::move(ds.heldout);
    d.description = "built-in addition";
  } else if (is_token_shard_path(path)) {
    tokens = read_token_shard(path, static_cast<int>(vocab_size), min_tokens);
    d.description = "token shard " + path;
  } else {
    tokens = ByteTokenizer::encode_file(path);
    d.description = "bytes of " + path;
    const auto it = std::max_element(tokens.begin(), tokens.end());
    if (it != tokens.end() && *it >= vocab_size) {
      throw InputError(path + ": byte " + std::to_string(*it) + " at offset " +
                       std::to_string(it - tokens.begin()) + " is >= vocab_size " +
                       std::to_string(vocab_size));
    }
  }
  check_count(path.empty() ? "built-in dataset" : path, tokens.size(), min_tokens);
  d.description += " (" + with_commas(static_cast<std::int64_t>(tokens.size())) + " tokens)";
  d.fingerprint = fnv1a(tokens);
  d.tokens = std::make_shared<const std::vector<std::uint16_t>>(std::move(tokens));
  return d;
}

std::vector<std::int32_t> encode_prompt(const std::string& prompt, const TrainingData& d) {
  if (d.tokenizer) {
    return prompt.empty() ? std::vector<std::int32_t>{d.tokenizer->end_of_text()}
                          : d.tokenizer->encode(prompt);
  }
  std::vector<std::int32_t> ids;
  for (unsigned char ch : prompt) ids.push_back(ch);
  return ids;
}

void load_text_inputs(TrainingData& d, const std::string& val_path,
                      const std::string& tokenizer_dir, std::int64_t vocab_size,
                      std::int64_t min_tokens) {
  if (!val_path.empty()) {
    TrainingData v = load_training_data(val_path, vocab_size, min_tokens);
    d.val_tokens = std::move(v.tokens);
    d.val_description = std::move(v.description);
  }
  if (!tokenizer_dir.empty()) {
    d.tokenizer = std::make_shared<const Gpt2Tokenizer>(Gpt2Tokenizer::from_dir(tokenizer_dir));
  }
}

}  // namespace mixpar::ch08
