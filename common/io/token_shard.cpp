// Token shard reader and writer. The format is little-endian on disk, and so is every host
// mixpar builds for (checked below), so header and tokens are copied as they are.
#include "io/token_shard.h"

#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "io/atomic_file.h"
#include "util/errors.h"

namespace mixpar {

static_assert(std::endian::native == std::endian::little,
              "token shards and safetensors are little-endian; add byte swaps for this host");

namespace {

[[noreturn]] void bad_shard(const std::string& path, const std::string& what) {
  throw InputError(path + ": " + what);
}

// The three header fields; the size check needs the count before any token is touched.
std::int64_t check_header(const std::string& path, const std::string& bytes) {
  if (bytes.size() < kShardHeaderBytes) {
    bad_shard(path, "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                        std::to_string(kShardHeaderBytes) + "-byte shard header");
  }
  std::int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[0] != kShardMagic) {
    bad_shard(path, "not a token shard: magic " + std::to_string(header[0]) + ", expected " +
                        std::to_string(kShardMagic));
  }
  if (header[1] != kShardVersion) {
    bad_shard(path, "unsupported shard version " + std::to_string(header[1]) + " (expected " +
                        std::to_string(kShardVersion) + ": uint16 tokens)");
  }
  if (header[2] < 0) bad_shard(path, "negative token count " + std::to_string(header[2]));
  const std::int64_t count = header[2];
  const std::uint64_t want = kShardHeaderBytes + 2 * static_cast<std::uint64_t>(count);
  if (bytes.size() < want) {
    bad_shard(path, "truncated: the header promises " + std::to_string(count) + " tokens (" +
                        std::to_string(want) + " bytes) but the file has " +
                        std::to_string(bytes.size()) + " bytes");
  }
  if (bytes.size() > want) {
    bad_shard(path, "size mismatch: the header promises " + std::to_string(count) + " tokens (" +
                        std::to_string(want) + " bytes) but the file has " +
                        std::to_string(bytes.size() - want) + " extra bytes");
  }
  return count;
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::invalid_argument("write_token_shard: " + std::to_string(tokens.size()) +
                                " tokens do not fit the int32 count of the header");
  }
  std::int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  write_file_atomic(path, [&](FileSink& sink) {
    sink.write(header, sizeof(header));
    sink.write(tokens.data(), tokens.size_bytes());
  });
}

std::vector<std::uint16_t> read_token_shard(const std::string& path, int vocab_size,
                                            std::int64_t min_tokens) {
  const std::string bytes = read_file(path);
  const std::int64_t count = check_header(path, bytes);
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  // An empty vector's data() may be null, and memcpy's pointers must not be even for 0 bytes.
  if (!tokens.empty()) {
    std::memcpy(tokens.data(), bytes.data() + kShardHeaderBytes,
                tokens.size() * sizeof(std::uint16_t));
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      bad_shard(path, "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                          " is outside the vocabulary (vocab_size " + std::to_string(vocab_size) +
                          "): was it tokenized for another model?");
    }
  }
  if (count < min_tokens) {
    bad_shard(path, "too few tokens: " + std::to_string(count) + ", fewer than the " +
                        std::to_string(min_tokens) + " one batch reads (B*T+1)");
  }
  return tokens;
}

}  // namespace mixpar
