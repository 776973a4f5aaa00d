// The token-shard reader (common/io/token_shard.h, llm.c's .bin format): any bytes are a
// shard whose header, size and token ids check out, or an InputError.
#include "fuzz_util.h"
#include "io/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mixpar;
  const std::string path = fuzz::write_input(fuzz::scratch() / "tokens.bin", data, size);
  for (int vocab : {256, 50257}) {
    fuzz::expect_only_input_errors([&] {
      const std::vector<std::uint16_t> tokens = read_token_shard(path, vocab, 0);
      for (std::uint16_t t : tokens) fuzz::require(t < vocab, "every token id < vocab_size");
    });
  }
  return 0;
}
