// A training checkpoint's two JSON files (ch08_full_3d/checkpoint.h). The input is split at
// the first NUL byte: before it, manifest.json of a checkpoint directory step-00000003/ that
// holds one file, a.txt; after it, trainer_state.json. The manifest goes through
// verify_checkpoint (format, step against the directory, the file list, sizes and checksums),
// the state through check_trainer_state. Both answer bad input with an InputError only.
#include <algorithm>
#include <filesystem>

#include "checkpoint.h"
#include "fuzz_util.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mixpar;
  const std::string_view all = fuzz::text(data, size);
  const std::size_t cut = std::min(all.find('\0'), all.size());
  const std::filesystem::path dir = fuzz::scratch() / "step-00000003";
  std::filesystem::create_directories(dir);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(all.data());
  fuzz::write_input(dir / "a.txt", reinterpret_cast<const std::uint8_t*>("abc"), 3);
  fuzz::write_input(dir / "manifest.json", bytes, cut);
  fuzz::expect_only_input_errors([&] { (void)ch08::verify_checkpoint(dir.string()); });
  const std::string_view state = cut < all.size() ? all.substr(cut + 1) : std::string_view();
  fuzz::expect_only_input_errors([&] {
    const Json st = Json::parse(state, "trainer_state.json");
    ch08::check_trainer_state(st, dir.string(), 10);
  });
  return 0;
}
