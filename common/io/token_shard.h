// Token shards in the llm.c / nanoGPT `.bin` format: a header of 256 little-endian int32
// (magic 20240520, version 1, token count, the rest zero) followed by the tokens as
// little-endian uint16. The reader checks everything a corrupt or mismatched file can get
// wrong and reports it as one InputError naming the file and the problem.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mixpar {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;  // llm.c: 1 = uint16 tokens (GPT-2)
inline constexpr std::size_t kShardHeaderInts = 256;
inline constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);

// Writes the shard atomically (see atomic_file.h). More than INT32_MAX tokens do not fit
// the header's count and are refused (std::invalid_argument).
void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens);

// Reads and validates a shard: the file exists, the magic and version match, its size is
// exactly header + 2 * count bytes, every token is < vocab_size, and there are at least
// `min_tokens` tokens (a trainer passes B*T+1, what one batch reads).
std::vector<std::uint16_t> read_token_shard(const std::string& path, int vocab_size,
                                            std::int64_t min_tokens = 0);

}  // namespace mixpar
