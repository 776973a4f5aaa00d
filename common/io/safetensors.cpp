// safetensors reader and writer. The dtype table below lists every dtype of the reference
// format with whole-byte elements, so a file holding, say, an I64 buffer still validates and
// its float tensors load; only loading that I64 tensor itself is refused.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <tuple>

#include "io/atomic_file.h"
#include "util/errors.h"
#include "util/json.h"

namespace mixpar {

namespace {

// The reference refuses headers above 100 MB (MAX_HEADER_SIZE): a corrupt length must not
// make us allocate gigabytes before the JSON has even been looked at.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct SpecDType {
  std::string_view name;
  std::uint64_t size;
};
constexpr SpecDType kSpecDTypes[] = {
    {"BOOL", 1},    {"U8", 1},          {"I8", 1},          {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"F8_E8M0", 1}, {"F8_E4M3FNUZ", 1}, {"F8_E5M2FNUZ", 1}, {"I16", 2},     {"U16", 2},
    {"F16", 2},     {"BF16", 2},        {"I32", 4},         {"U32", 4},     {"F32", 4},
    {"C64", 8},     {"F64", 8},         {"I64", 8},         {"U64", 8}};

std::optional<std::uint64_t> spec_dtype_size(std::string_view name) {
  for (const SpecDType& d : kSpecDTypes) {
    if (d.name == name) return d.size;
  }
  return std::nullopt;
}

// The reference's serialization order: larger elements first (its Dtype enum, compared in
// descending order), so every tensor starts at a multiple of its element size.
int write_rank(DType t) {
  switch (t) {
    case DType::kF64: return 0;
    case DType::kF32: return 1;
    case DType::kBF16: return 2;
    case DType::kF16: return 3;
    case DType::kE4M3: return 4;
    case DType::kE5M2: return 5;
  }
  return 6;
}

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw InputError(source + ": " + what);
}

std::string range_str(std::uint64_t b, std::uint64_t e) {
  std::string s(1, '[');  // built by appending: GCC 12 misreports "[" + string (-Wrestrict)
  s += std::to_string(b) + ", " + std::to_string(e) + ")";
  return s;
}

SafetensorsMetadata parse_metadata(const Json& m, const std::string& source) {
  if (!m.is_object()) bad(source, "__metadata__ must be an object of strings");
  SafetensorsMetadata out;
  for (const auto& [k, v] : m.as_object()) {
    if (!v.is_string()) {
      bad(source, "__metadata__ value of \"" + k + "\" is a " + v.type_name() + ", not a string");
    }
    out.emplace_back(k, v.as_string());
  }
  return out;
}

std::optional<std::uint64_t> non_negative_int(const Json& v) {
  if (!v.is_integer() || v.as_int() < 0) return std::nullopt;
  return static_cast<std::uint64_t>(v.as_int());
}

std::optional<Shape> parse_shape(const Json* shape) {
  if (!shape || !shape->is_array()) return std::nullopt;
  Shape out;
  for (const Json& d : shape->as_array()) {
    const auto v = non_negative_int(d);
    if (!v) return std::nullopt;
    out.push_back(static_cast<std::int64_t>(*v));
  }
  return out;
}

// Bytes of `shape` elements of `size` bytes each; nullopt if that overflows 64 bits.
std::optional<std::uint64_t> byte_count(const Shape& shape, std::uint64_t size) {
  std::uint64_t bytes = size;
  for (std::int64_t d : shape) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && bytes > UINT64_MAX / ud) return std::nullopt;
    bytes *= ud;
  }
  return bytes;
}

// One tensor's entry: the dtype is known, the shape and offsets are non-negative integers,
// and shape x element size is exactly the offsets' span.
SafetensorsEntry parse_entry(const std::string& name, const Json& info, const std::string& source) {
  const std::string where = source + ": tensor '" + name + "'";
  if (!info.is_object()) bad(where, "is a " + std::string(info.type_name()) + ", not an object");
  SafetensorsEntry e;
  e.name = name;
  const Json* dtype = info.find("dtype");
  if (!dtype || !dtype->is_string()) bad(where, "has no dtype string");
  e.dtype_name = dtype->as_string();
  const auto size = spec_dtype_size(e.dtype_name);
  if (!size) bad(where, "unknown dtype \"" + e.dtype_name + "\"");
  e.dtype = dtype_from_safetensors(e.dtype_name);
  const auto shape = parse_shape(info.find("shape"));
  if (!shape) bad(where, "shape must be an array of non-negative integers");
  e.shape = *shape;
  const Json* offsets = info.find("data_offsets");
  std::optional<std::uint64_t> begin, end;
  if (offsets && offsets->is_array() && offsets->size() == 2) {
    begin = non_negative_int(offsets->at(0));
    end = non_negative_int(offsets->at(1));
  }
  if (!begin || !end) bad(where, "data_offsets must be two non-negative integers [begin, end]");
  e.begin = *begin;
  e.end = *end;
  if (e.end < e.begin) {
    bad(where, "data_offsets " + range_str(e.begin, e.end) + " end before they begin");
  }
  const auto bytes = byte_count(e.shape, *size);
  if (!bytes) bad(where, "shape " + shape_str(e.shape) + " is too large");
  if (*bytes != e.end - e.begin) {
    bad(where, "shape " + shape_str(e.shape) + " of " + e.dtype_name + " needs " +
                   std::to_string(*bytes) + " bytes but data_offsets " + range_str(e.begin, e.end) +
                   " span " + std::to_string(e.end - e.begin));
  }
  return e;
}

// Sorted by offset, the tensors must tile [0, data_bytes) exactly, as the reference demands.
void check_tiling(std::vector<SafetensorsEntry>& entries, std::uint64_t data_bytes,
                  const std::string& source) {
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  std::uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.end > data_bytes) {
      bad(source, "tensor '" + e.name + "': data_offsets " + range_str(e.begin, e.end) +
                      " out of range: the data section has " + std::to_string(data_bytes) +
                      " bytes");
    }
    if (e.begin < pos) {
      bad(source, "tensors '" + prev->name + "' " + range_str(prev->begin, prev->end) + " and '" +
                      e.name + "' " + range_str(e.begin, e.end) + " overlap");
    }
    if (e.begin > pos) {
      bad(source, "bytes " + range_str(pos, e.begin) +
                      " of the data section belong to no tensor (before '" + e.name + "')");
    }
    pos = e.end;
    prev = &e;
  }
  if (pos != data_bytes) {
    bad(source, "the tensors cover " + std::to_string(pos) + " of the " +
                    std::to_string(data_bytes) +
                    " data bytes: the file has trailing bytes or lost a tensor");
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF64: return "F64";
    case DType::kE4M3: return "F8_E4M3";
    case DType::kE5M2: return "F8_E5M2";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (DType t : kAllDTypes) {
    if (safetensors_dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

SafetensorsHeader parse_safetensors_header(std::string_view json, std::uint64_t data_bytes,
                                           const std::string& source) {
  const Json root = Json::parse(json, source + ": header");
  if (!root.is_object()) {
    bad(source, "the header is a JSON " + std::string(root.type_name()) + ", not an object");
  }
  SafetensorsHeader h;
  for (const auto& [name, info] : root.as_object()) {
    if (name == "__metadata__") {
      h.metadata = parse_metadata(info, source);
    } else {
      h.entries.push_back(parse_entry(name, info, source));
    }
  }
  check_tiling(h.entries, data_bytes, source);
  return h;
}

// ---------------------------------------------------------------- reader

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  const std::uint64_t size = file_size(path_);
  std::ifstream in(path_, std::ios::binary);
  if (size < 8 || !in) {
    bad(path_, "not a safetensors file: " + std::to_string(size) +
                   " bytes, too short for the header length");
  }
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | len_bytes[k];  // little-endian
  if (n > size - 8) {
    bad(path_, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  }
  if (n > kMaxHeaderBytes) {
    bad(path_, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  }
  std::string json(n, '\0');
  if (!in.read(json.data(), static_cast<std::streamsize>(n))) bad(path_, "cannot read the header");
  data_start_ = 8 + n;
  header_ = parse_safetensors_header(json, size - data_start_, path_);
}

const SafetensorsEntry* SafetensorsReader::find(std::string_view name) const {
  for (const SafetensorsEntry& e : header_.entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Tensor SafetensorsReader::load(std::string_view name, MemCategory category, Device device) const {
  const SafetensorsEntry* e = find(name);
  if (!e) bad(path_, "no tensor named '" + std::string(name) + "'");
  if (!e->dtype) {
    bad(path_, "tensor '" + e->name + "' has dtype " + e->dtype_name +
                   ", which mixpar does not load (F32, F16, BF16, F64, F8_E4M3, F8_E5M2 only)");
  }
  Tensor t = Tensor::empty(e->shape, *e->dtype, category, Device::kCPU);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + e->begin));
  if (!in || !in.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(t.nbytes()))) {
    bad(path_, "cannot read tensor '" + e->name + "' (was the file changed since it was opened?)");
  }
  return device == Device::kCPU ? t : t.to_device(device);
}

std::vector<std::pair<std::string, Tensor>> SafetensorsReader::load_all(MemCategory category,
                                                                        Device device) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const SafetensorsEntry& e : header_.entries) {
    out.emplace_back(e.name, load(e.name, category, device));
  }
  return out;
}

// ---------------------------------------------------------------- writer

namespace {

struct Prepared {
  std::string length_and_header;  // 8-byte length + padded JSON
  std::vector<const Tensor*> order;
};

// The reference's serialization order, after refusing what no file can hold.
std::vector<const std::pair<std::string, Tensor>*> writing_order(const NamedTensors& tensors) {
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  std::set<std::string_view> names;
  for (const auto& nt : tensors) {
    if (!nt.second.defined()) {
      throw std::invalid_argument("safetensors: tensor '" + nt.first + "' is undefined");
    }
    if (!names.insert(nt.first).second) {
      throw std::invalid_argument("safetensors: name '" + nt.first + "' repeated");
    }
    sorted.push_back(&nt);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    const int ra = write_rank(a->second.dtype()), rb = write_rank(b->second.dtype());
    return ra != rb ? ra < rb : a->first < b->first;
  });
  return sorted;
}

Prepared prepare(const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    SafetensorsMetadata m = metadata;
    std::sort(m.begin(), m.end());
    Json& mj = header["__metadata__"] = Json::object();
    for (const auto& [k, v] : m) mj.set(k, v);
  }
  Prepared p;
  std::uint64_t offset = 0;
  for (const auto* nt : writing_order(tensors)) {
    const Tensor& t = nt->second;
    Json info = Json::object();
    info.set("dtype", safetensors_dtype_name(t.dtype()));
    Json shape = Json::array();
    for (std::int64_t d : t.shape()) shape.push_back(d);
    info.set("shape", std::move(shape));
    info.set("data_offsets", Json(Json::Array{Json(offset), Json(offset + t.nbytes())}));
    offset += t.nbytes();
    header.set(nt->first, std::move(info));
    p.order.push_back(&t);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::uint64_t n = json.size();
  for (int k = 0; k < 8; ++k, n >>= 8) p.length_and_header += static_cast<char>(n & 0xFF);
  p.length_and_header += json;
  return p;
}

template <class Sink>
void emit(const Prepared& p, Sink&& write) {
  write(p.length_and_header.data(), p.length_and_header.size());
  for (const Tensor* t : p.order) {
    const Tensor host = t->is_cpu() ? *t : t->to_device(Device::kCPU);
    if (host.nbytes()) write(host.data(), host.nbytes());
  }
}

}  // namespace

std::string safetensors_serialize(const NamedTensors& tensors,
                                  const SafetensorsMetadata& metadata) {
  const Prepared p = prepare(tensors, metadata);
  std::string out;
  emit(p, [&](const void* data, std::size_t n) { out.append(static_cast<const char*>(data), n); });
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const SafetensorsMetadata& metadata) {
  const Prepared p = prepare(tensors, metadata);
  write_file_atomic(path, [&](FileSink& sink) {
    emit(p, [&](const void* data, std::size_t n) { sink.write(data, n); });
  });
}

}  // namespace mixpar
