// A Hugging Face config.json (common/io/gpt_config.h): any bytes are a GPT-2 config mixpar
// computes, or an InputError naming the key; what is accepted writes and reads back equal.
#include "fuzz_util.h"
#include "io/gpt_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mixpar;
  const std::string path = fuzz::write_input(fuzz::scratch() / "config.json", data, size);
  fuzz::expect_only_input_errors([&] {
    const HfGpt2Config c = read_gpt2_config(path);
    fuzz::require(gpt2_config_from_json(gpt2_config_to_json(c), "round trip") == c,
                  "an accepted config.json writes and reads back equal");
  });
  return 0;
}
