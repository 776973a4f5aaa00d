// The safetensors reader (common/io/safetensors.h): a file of any bytes is read (header,
// entries) and every tensor it lists loaded; the reader must refuse, with an InputError, any
// header whose offsets, shapes or dtypes do not describe the bytes that follow.
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mixpar;
  const std::string path = fuzz::write_input(fuzz::scratch() / "model.safetensors", data, size);
  fuzz::expect_only_input_errors([&] {
    const SafetensorsReader r(path);
    for (const SafetensorsEntry& e : r.entries()) {
      const Tensor t = r.load(e.name, MemCategory::kOther);
      fuzz::require(t.shape() == e.shape, "a loaded tensor has its entry's shape");
    }
  });
  return 0;
}
