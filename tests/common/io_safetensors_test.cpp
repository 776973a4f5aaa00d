// safetensors: every dtype round-trips bit for bit, the writer's bytes equal files built by
// hand from the format's definition (the reference implementation's own test vectors), and
// every kind of corrupt header is refused with a message naming the file and the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "expect.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "random/philox.h"
#include "temp_dir.h"

namespace mixpar {
namespace {

using test_support::input_error_of;
using test_support::TempDir;
using ::testing::HasSubstr;

// A tensor whose bytes are random bit patterns (NaNs, infinities and subnormals included).
Tensor random_bits(Shape shape, DType dtype, std::uint64_t seed) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  Philox g(seed);
  auto* p = static_cast<unsigned char*>(t.data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(g.next_u32());
  return t;
}

std::string bytes_of(const Tensor& t) { return {static_cast<const char*>(t.data()), t.nbytes()}; }

// The file format by hand: little-endian u64 header length, the header, the data.
std::string hand_built(const std::string& header, const std::string& data) {
  std::string out;
  std::uint64_t n = header.size();
  for (int k = 0; k < 8; ++k, n >>= 8) out += static_cast<char>(n & 0xFF);
  return out + header + data;
}

std::string floats_le(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

TEST(Safetensors, DtypeNamesMapBothWays) {
  for (DType t : kAllDTypes) EXPECT_EQ(dtype_from_safetensors(safetensors_dtype_name(t)), t);
  EXPECT_EQ(safetensors_dtype_name(DType::kE4M3), "F8_E4M3");
  EXPECT_EQ(safetensors_dtype_name(DType::kBF16), "BF16");
  EXPECT_FALSE(dtype_from_safetensors("I64").has_value());
}

TEST(Safetensors, RoundTripsEveryDtypeBitExact) {
  TempDir dir;
  NamedTensors tensors;
  std::uint64_t seed = 1;
  for (DType t : kAllDTypes) {
    const std::string name(dtype_name(t));
    tensors.emplace_back("w." + name, random_bits({3, 5, 7}, t, seed++));
    tensors.emplace_back("scalar." + name, random_bits({}, t, seed++));
    tensors.emplace_back("empty." + name, random_bits({0, 4}, t, seed++));
  }
  write_safetensors(dir.file("m.safetensors"), tensors, {{"format", "pt"}});
  const SafetensorsReader reader(dir.file("m.safetensors"));
  ASSERT_EQ(reader.entries().size(), tensors.size());
  EXPECT_EQ(reader.metadata(), (SafetensorsMetadata{{"format", "pt"}}));
  for (const auto& [name, want] : tensors) {
    const Tensor got = reader.load(name, MemCategory::kParameters);
    EXPECT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_EQ(got.shape(), want.shape()) << name;
    EXPECT_EQ(got.category(), MemCategory::kParameters) << name;
    EXPECT_EQ(bytes_of(got), bytes_of(want)) << name;
  }
  EXPECT_EQ(read_file(dir.file("m.safetensors")),
            safetensors_serialize(tensors, {{"format", "pt"}}));
}

TEST(Safetensors, MatchesHandBuiltFilesByteForByte) {
  // The reference implementation's test vectors (safetensors/src/tensor.rs):
  // a 64-byte header that needs no padding...
  const Tensor a = Tensor::from_floats(std::vector<float>{0, 1, 2, 3, 4, 5}, {1, 2, 3});
  const std::string h1 = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(h1.size(), 64u);
  EXPECT_EQ(safetensors_serialize({{"attn.0", a}}), hand_built(h1, floats_le({0, 1, 2, 3, 4, 5})));
  // ...one padded with 7 spaces to 72 bytes so the data starts 8-byte aligned...
  const std::string h2 = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  EXPECT_EQ(safetensors_serialize({{"attn0", a.view({1, 1, 2, 3})}}),
            hand_built(h2 + "       ", floats_le({0, 1, 2, 3, 4, 5})));
  // ...and the empty file, with and without metadata.
  EXPECT_EQ(safetensors_serialize({}), hand_built("{}      ", ""));
  EXPECT_EQ(safetensors_serialize({}, {{"framework", "pt"}}),
            hand_built(R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '), ""));
}

TEST(Safetensors, OrdersLargerElementsFirstThenNames) {
  const Tensor h = Tensor::from_floats(std::vector<float>{1, 2}, {2}, DType::kF16);
  const Tensor f = Tensor::from_floats(std::vector<float>{3}, {1}, DType::kF32);
  const std::string bytes = safetensors_serialize({{"b16", h}, {"z32", f}, {"a32", f}});
  const std::string header = R"({"a32":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("z32":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("b16":{"dtype":"F16","shape":[2],"data_offsets":[8,12]}})";
  EXPECT_EQ(bytes.substr(8, header.size()), header);
}

TEST(Safetensors, RefusesUndefinedOrRepeatedTensorsOnWrite) {
  const Tensor f = Tensor::from_floats(std::vector<float>{3}, {1});
  EXPECT_THROW(safetensors_serialize({{"x", f}, {"x", f}}), std::invalid_argument);
  EXPECT_THROW(safetensors_serialize({{"x", Tensor()}}), std::invalid_argument);
}

// Writes a hand-built file and returns the reader's error, which must name the file.
std::string open_error(TempDir& dir, const std::string& bytes) {
  test_support::write_raw(dir.file("bad.safetensors"), bytes);
  const std::string msg = input_error_of([&] { SafetensorsReader r(dir.file("bad.safetensors")); });
  EXPECT_THAT(msg, HasSubstr(dir.file("bad.safetensors") + ": "));
  return msg;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

TEST(Safetensors, RefusesFilesTooShortOrWithAHeaderLengthBeyondTheFile) {
  TempDir dir;
  EXPECT_THAT(open_error(dir, "abc"), HasSubstr("too short for the header length"));
  std::string b = hand_built("{}", "");
  b[0] = 100;
  EXPECT_THAT(open_error(dir, b),
              HasSubstr("header length 100 runs past the end of the file (10 bytes)"));
  b = hand_built("{}", "");
  b[7] = 1;  // 2^56 + 2
  EXPECT_THAT(open_error(dir, b), HasSubstr("runs past the end"));
}

TEST(Safetensors, RefusesBadJson) {
  TempDir dir;
  EXPECT_THAT(open_error(dir, hand_built(R"({"a":{"dtype":"F32",})", "")),
              HasSubstr("header: invalid JSON at byte 20"));
  EXPECT_THAT(open_error(dir, hand_built("[1,2]", "")), HasSubstr("not an object"));
}

TEST(Safetensors, RefusesAnUnknownDtypeNamingTheTensor) {
  TempDir dir;
  const std::string h = "{" + entry("h.0.w", "F33", "[2]", "[0,8]") + "}";
  EXPECT_THAT(open_error(dir, hand_built(h, std::string(8, '\0'))),
              HasSubstr("tensor 'h.0.w': unknown dtype \"F33\""));
}

TEST(Safetensors, RefusesShapeTimesDtypeThatIsNotTheByteSpan) {
  TempDir dir;
  const std::string h = "{" + entry("w", "F32", "[2,3]", "[0,20]") + "}";
  EXPECT_THAT(
      open_error(dir, hand_built(h, std::string(20, '\0'))),
      HasSubstr("tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20) span 20"));
  const std::string neg = "{" + entry("w", "F32", "[-2]", "[0,8]") + "}";
  EXPECT_THAT(open_error(dir, hand_built(neg, std::string(8, '\0'))),
              HasSubstr("tensor 'w': shape must be an array of non-negative integers"));
  const std::string bad_off = "{" + entry("w", "F32", "[2]", "[0]") + "}";
  EXPECT_THAT(open_error(dir, hand_built(bad_off, std::string(8, '\0'))),
              HasSubstr("data_offsets must be"));
}

TEST(Safetensors, RefusesOffsetsOutOfRange) {
  TempDir dir;
  const std::string h = "{" + entry("w", "F32", "[4]", "[0,16]") + "}";
  EXPECT_THAT(
      open_error(dir, hand_built(h, std::string(8, '\0'))),
      HasSubstr("tensor 'w': data_offsets [0, 16) out of range: the data section has 8 bytes"));
}

TEST(Safetensors, RefusesOverlappingTensors) {
  TempDir dir;
  const std::string h =
      "{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}";
  EXPECT_THAT(open_error(dir, hand_built(h, std::string(12, '\0'))),
              HasSubstr("tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
}

TEST(Safetensors, RefusesGapsAndTrailingBytes) {
  TempDir dir;
  const std::string gap =
      "{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[8,12]") + "}";
  EXPECT_THAT(open_error(dir, hand_built(gap, std::string(12, '\0'))),
              HasSubstr("bytes [4, 8) of the data section belong to no tensor (before 'b')"));
  const std::string one = "{" + entry("a", "F32", "[1]", "[0,4]") + "}";
  EXPECT_THAT(open_error(dir, hand_built(one, std::string(12, '\0'))),
              HasSubstr("the tensors cover 4 of the 12 data bytes"));
}

TEST(Safetensors, RefusesMetadataThatIsNotStrings) {
  TempDir dir;
  EXPECT_THAT(open_error(dir, hand_built(R"({"__metadata__":{"step":5}})", "")),
              HasSubstr("__metadata__ value of \"step\" is a number, not a string"));
}

TEST(Safetensors, OtherSpecDtypesValidateButOnlyOursLoad) {
  TempDir dir;
  const std::string h =
      "{" + entry("ids", "I64", "[1]", "[0,8]") + "," + entry("w", "F32", "[1]", "[8,12]") + "}";
  test_support::write_raw(dir.file("mixed.safetensors"),
                          hand_built(h, std::string(8, '\0') + floats_le({2.5f})));
  const SafetensorsReader r(dir.file("mixed.safetensors"));
  EXPECT_EQ(r.load("w", MemCategory::kOther).item(), 2.5f);
  EXPECT_THAT(input_error_of([&] { r.load("ids", MemCategory::kOther); }),
              HasSubstr("tensor 'ids' has dtype I64, which mixpar does not load"));
  EXPECT_THAT(input_error_of([&] { r.load("nope", MemCategory::kOther); }),
              HasSubstr("no tensor named 'nope'"));
}

TEST(Safetensors, ReadsFilesWithEntriesInAnyHeaderOrder) {
  TempDir dir;
  // Older writers sorted by name only: offsets need not follow the header's order.
  const std::string h =
      "{" + entry("b", "F32", "[1]", "[4,8]") + "," + entry("a", "F32", "[1]", "[0,4]") + "}";
  test_support::write_raw(dir.file("o.safetensors"), hand_built(h, floats_le({1.f, 2.f})));
  const SafetensorsReader r(dir.file("o.safetensors"));
  EXPECT_EQ(r.entries()[0].name, "a");
  EXPECT_EQ(r.load("a", MemCategory::kOther).item(), 1.f);
  EXPECT_EQ(r.load("b", MemCategory::kOther).item(), 2.f);
}

}  // namespace
}  // namespace mixpar
