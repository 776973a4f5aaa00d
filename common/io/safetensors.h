// safetensors (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
// mapping tensor names to {dtype, shape, data_offsets} (plus an optional "__metadata__" of
// string pairs), then the raw little-endian, row-major data. The reader validates the header
// the way the reference implementation does, with an InputError naming the file and tensor;
// the writer produces byte-for-byte what the reference `serialize` produces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar {

// F32, F16, BF16, F64, F8_E4M3, F8_E5M2 <-> DType.
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> dtype_from_safetensors(std::string_view name);

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;      // as written: "F32", "I64", ...
  std::optional<DType> dtype;  // nullopt: a valid safetensors dtype mixpar does not compute in
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // byte range within the data section
};

using SafetensorsMetadata = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order
  SafetensorsMetadata metadata;           // in file order
};

// Parses and validates a header for a data section of `data_bytes` bytes: valid JSON object,
// known dtypes, non-negative integer shapes, shape x dtype size == the offsets' span, and
// offsets that tile the data section exactly (no overlap, no gap, nothing left over).
// `source` (the file name) starts every error message.
SafetensorsHeader parse_safetensors_header(std::string_view json, std::uint64_t data_bytes,
                                           const std::string& source);

// Reads the header of a file at construction; tensors are read on demand.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const SafetensorsMetadata& metadata() const { return header_.metadata; }
  const SafetensorsEntry* find(std::string_view name) const;  // nullptr if absent

  // A new tensor of the stored dtype and shape, charged to `category` on `device` (a device
  // tensor is staged through the CPU). InputError if the name is absent or its dtype is one
  // mixpar does not hold (I64, U8, ...).
  Tensor load(std::string_view name, MemCategory category, Device device = Device::kCPU) const;
  std::vector<std::pair<std::string, Tensor>> load_all(MemCategory category,
                                                       Device device = Device::kCPU) const;

 private:
  std::string path_;
  std::uint64_t data_start_ = 0;  // 8 + N
  SafetensorsHeader header_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The whole file in memory: tensors ordered by dtype size, largest first, then by name (the
// reference's order, so every tensor stays aligned to its element size); "__metadata__"
// first when `metadata` is not empty (written sorted by key); the header padded with spaces to
// a multiple of 8 bytes. std::invalid_argument for an undefined tensor or a repeated name.
std::string safetensors_serialize(const NamedTensors& tensors,
                                  const SafetensorsMetadata& metadata = {});

// The same bytes, streamed tensor by tensor into an atomic write (see atomic_file.h).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const SafetensorsMetadata& metadata = {});

}  // namespace mixpar
