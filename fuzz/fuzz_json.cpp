// The JSON parser (common/util/json.h): any bytes either parse or are an InputError, and what
// parses prints to text that parses back to the same text (dump is a fixed point after one
// round: invalid UTF-8 becomes U+FFFD on the first).
#include "fuzz_util.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mixpar;
  fuzz::expect_only_input_errors([&] {
    const Json j = Json::parse(fuzz::text(data, size), "fuzz input");
    for (int indent : {-1, 2}) {
      const std::string once = Json::parse(j.dump(indent), "dump").dump(indent);
      fuzz::require(Json::parse(once, "dump of dump").dump(indent) == once,
                    "dump(parse(dump(x))) == dump(x)");
    }
  });
  return 0;
}
