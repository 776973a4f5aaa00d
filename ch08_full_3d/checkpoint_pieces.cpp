// Pieces of global tensors: where a rank's elements lie in the whole model (runs of the global
// row-major order), how they are cut along the boxes of the global tensor for writing, and how
// a reader finds, by intersecting runs, the stored elements it holds under any other layout.
#include "checkpoint_pieces.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "io/safetensors.h"
#include "util/errors.h"
#include "util/json.h"

namespace mixpar::ch08 {
namespace {

constexpr const char* kIndexKey = "mixpar.pieces";
constexpr std::string_view kHfPrefix = "transformer.";

// Appends a run, merged with the last one when both the global and the local ranges continue.
void append_run(std::vector<PieceRun>& out, PieceRun r) {
  if (r.count <= 0) return;
  if (!out.empty()) {
    PieceRun& last = out.back();
    if (last.global + last.count == r.global && last.local + last.count == r.local) {
      last.count += r.count;
      return;
    }
  }
  out.push_back(r);
}

// The runs whose local positions fall in [begin, begin + count), shifted to start at 0.
std::vector<PieceRun> local_window(std::span<const PieceRun> runs, std::int64_t begin,
                                   std::int64_t count) {
  std::vector<PieceRun> out;
  const std::int64_t end = begin + count;
  for (const PieceRun& r : runs) {
    const std::int64_t lo = std::max(r.local, begin), hi = std::min(r.local + r.count, end);
    if (lo >= hi) continue;
    append_run(out, {r.global + (lo - r.local), lo - begin, hi - lo});
  }
  return out;
}

// A stretch of elements two run lists share: `count` elements from global, at a_local in the
// first and b_local in the second.
struct Overlap {
  std::int64_t global, a_local, b_local, count;
};

// Two-pointer intersection of run lists sorted by global position.
std::vector<Overlap> intersect(std::span<const PieceRun> a, std::span<const PieceRun> b) {
  std::vector<Overlap> out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t lo = std::max(a[i].global, b[j].global);
    const std::int64_t a_end = a[i].global + a[i].count, b_end = b[j].global + b[j].count;
    const std::int64_t hi = std::min(a_end, b_end);
    if (lo < hi) {
      out.push_back({lo, a[i].local + (lo - a[i].global), b[j].local + (lo - b[j].global), hi - lo});
    }
    if (a_end <= b_end) ++i;
    if (b_end <= a_end) ++j;
  }
  return out;
}

std::int64_t runs_numel(std::span<const PieceRun> runs) {
  std::int64_t n = 0;
  for (const PieceRun& r : runs) n += r.count;
  return n;
}

Json shape_json(const Shape& s) {
  Json j = Json::array();
  for (std::int64_t d : s) j.push_back(d);
  return j;
}

Shape shape_of(const Json& j) {
  Shape s;
  for (const Json& d : j.as_array()) s.push_back(d.as_int());
  return s;
}

bool whole_tensor(const Shape& global, const PieceBox& b) {
  return b.shape == global && b.flat_begin == 0 && b.flat_count == shape_numel(global) &&
         std::all_of(b.offset.begin(), b.offset.end(), [](std::int64_t o) { return o == 0; });
}

// One stored piece, as a file's index (or, for a file without one, its tensor) names it.
struct StoredPiece {
  std::string tensor;  // name in the file
  std::string key;
  Shape global;
  PieceBox box;
};

std::vector<StoredPiece> stored_pieces(const SafetensorsReader& r) {
  std::vector<StoredPiece> out;
  const SafetensorsMetadata& meta = r.metadata();
  const auto it = std::find_if(meta.begin(), meta.end(),
                               [](const auto& kv) { return kv.first == kIndexKey; });
  if (it == meta.end()) {  // whole tensors under their (Hugging Face) names
    for (const SafetensorsEntry& e : r.entries()) {
      std::string key = e.name;
      if (key.starts_with(kHfPrefix)) key = key.substr(kHfPrefix.size());
      PieceBox box{Shape(e.shape.size(), 0), e.shape, 0, shape_numel(e.shape)};
      out.push_back({e.name, std::move(key), e.shape, std::move(box)});
    }
    return out;
  }
  try {
    const Json index = Json::parse(it->second, r.path() + " (" + kIndexKey + ")");
    for (const Json& p : index.as_array()) {
      StoredPiece s;
      s.tensor = p.at("tensor").as_string();
      s.key = p.at("key").as_string();
      s.global = shape_of(p.at("global_shape"));
      s.box.offset = shape_of(p.at("offset"));
      s.box.shape = shape_of(p.at("shape"));
      const Json::Array& flat = p.at("flat").as_array();
      if (flat.size() != 2) throw InputError("piece " + s.tensor + ": flat is not [begin, count]");
      s.box.flat_begin = flat[0].as_int();
      s.box.flat_count = flat[1].as_int();
      const SafetensorsEntry* e = r.find(s.tensor);
      if (e == nullptr) throw InputError("the index names " + s.tensor + ", which is not stored");
      if (shape_numel(e->shape) != s.box.flat_count) {
        throw InputError(s.tensor + " holds " + std::to_string(shape_numel(e->shape)) +
                         " elements, the index says " + std::to_string(s.box.flat_count));
      }
      out.push_back(std::move(s));
    }
  } catch (const InputError& e) {
    throw InputError(r.path() + ": " + e.what());
  }
  return out;
}

}  // namespace

std::vector<PieceRun> box_runs(const Shape& global, const PieceBox& box) {
  const std::size_t nd = global.size();
  if (box.offset.size() != nd || box.shape.size() != nd) {
    throw std::invalid_argument("box_runs: a box of " + std::to_string(box.shape.size()) +
                                " dimensions in a tensor of " + std::to_string(nd));
  }
  for (std::size_t d = 0; d < nd; ++d) {
    if (box.offset[d] < 0 || box.shape[d] < 0 || box.offset[d] > global[d] ||
        box.shape[d] > global[d] - box.offset[d]) {
      throw std::invalid_argument("box_runs: box at " + shape_str(box.offset) + " of " +
                                  shape_str(box.shape) + " is outside " + shape_str(global));
    }
  }
  const std::int64_t n = shape_numel(box.shape);
  if (box.flat_begin < 0 || box.flat_count < 0 || box.flat_begin + box.flat_count > n) {
    throw std::invalid_argument("box_runs: flat range [" + std::to_string(box.flat_begin) + ", +" +
                                std::to_string(box.flat_count) + ") is outside a box of " +
                                std::to_string(n) + " elements");
  }
  std::vector<PieceRun> all;
  if (n == 0) return all;
  if (nd == 0) {
    all.push_back({0, 0, 1});
    return local_window(all, box.flat_begin, box.flat_count);
  }
  // Each innermost row of the box is one run of the global tensor; consecutive rows merge
  // when the box spans whole rows. Only the rows the flat range touches are walked (a piece's
  // cost is its own size, whatever box an index names).
  Shape stride(nd, 1);
  for (std::size_t d = nd - 1; d > 0; --d) stride[d - 1] = stride[d] * global[d];
  const std::int64_t row = box.shape.back();
  const std::int64_t first = box.flat_begin / row;
  const std::int64_t last = (box.flat_begin + box.flat_count + row - 1) / row;
  for (std::int64_t k = first; k < last; ++k) {
    std::int64_t g = box.offset[nd - 1] * stride[nd - 1], rest = k;
    for (std::size_t d = nd - 1; d-- > 0;) {  // row k's outer indices
      g += (box.offset[d] + rest % box.shape[d]) * stride[d];
      rest /= box.shape[d];
    }
    append_run(all, {g, k * row, row});
  }
  return local_window(all, box.flat_begin, box.flat_count);
}

Shape global_shape(const ParamEntry& e) {
  Shape s = e.shape;
  if (e.init_rows >= 0 && !s.empty()) s.front() = e.init_rows;
  return s;
}

std::vector<PieceBox> held_boxes(const ParamEntry& e) {
  const Shape g = global_shape(e);
  const ParamHolding& h = e.holding;
  auto box = [](Shape offset, Shape shape) {
    const std::int64_t n = shape_numel(shape);
    return PieceBox{std::move(offset), std::move(shape), 0, n};
  };
  if (h.split == ParamSplit::kReplicated || h.num_shards == 1 || g.empty()) {
    return {box(Shape(g.size(), 0), g)};
  }
  std::vector<PieceBox> out;
  if (h.split == ParamSplit::kColumns) {
    const std::int64_t group = g.back() / h.column_groups, part = group / h.num_shards;
    for (std::int64_t k = 0; k < h.column_groups; ++k) {
      Shape offset(g.size(), 0), shape = g;
      offset.back() = k * group + h.shard * part;
      shape.back() = part;
      out.push_back(box(std::move(offset), std::move(shape)));
    }
    return out;
  }
  // kRows, kVocab: rows of the full (padded) shape, the padding left out.
  const std::int64_t per = e.shape.front() / h.num_shards;
  const std::int64_t r0 = h.shard * per, r1 = std::min(r0 + per, g.front());
  if (r1 <= r0) return out;  // padding only
  Shape offset(g.size(), 0), shape = g;
  offset.front() = r0;
  shape.front() = r1 - r0;
  out.push_back(box(std::move(offset), std::move(shape)));
  return out;
}

std::vector<PieceRun> held_runs(const ParamEntry& e) {
  // held_elements walks the full (padded) tensor; its first numel(global) elements are the
  // global tensor's in the same row-major order (padding rows come last), so clipping there
  // drops exactly the padding.
  const std::int64_t real = shape_numel(global_shape(e));
  std::vector<PieceRun> out;
  std::int64_t local = 0;
  for (const ElementRange& r : held_elements(e.shape, e.holding)) {
    const std::int64_t n = std::clamp<std::int64_t>(real - r.begin, 0, r.count);
    append_run(out, {r.begin, local, n});
    local += r.count;
  }
  return out;
}

std::vector<PieceRun> flat_runs(const ParamEntry& e, std::int64_t entry_offset,
                                std::int64_t count) {
  return local_window(held_runs(e), entry_offset, count);
}

void write_pieces(const std::string& path, std::span<const HeldTensor> held) {
  NamedTensors tensors;
  Json index = Json::array();
  std::map<std::string, int> names;
  for (const HeldTensor& t : held) {
    if (!t.writes) continue;
    const Tensor src = t.data.is_cpu() ? t.data : t.data.to_device(Device::kCPU);
    const float* from = src.data_as<float>();
    for (const PieceBox& whole : t.boxes) {
      const std::vector<PieceRun> in_box = box_runs(t.global, whole);
      // a = the box's elements, b = this tensor's: inside one box a held tensor (or a ZeRO
      // flat range of it) is one flat range of the box.
      const std::vector<Overlap> parts = intersect(in_box, t.runs);
      if (parts.empty()) continue;
      std::int64_t n = 0;
      for (const Overlap& o : parts) {
        if (o.a_local != parts.front().a_local + n) {
          throw std::logic_error("write_pieces: " + t.key + " is not one flat range of its box");
        }
        n += o.count;
      }
      PieceBox piece = whole;
      piece.flat_begin = parts.front().a_local;
      piece.flat_count = n;
      const bool all = n == whole.flat_count;
      Tensor out = Tensor::empty(all ? whole.shape : Shape{n}, DType::kF32, MemCategory::kOther);
      float* to = out.data_as<float>();
      for (const Overlap& o : parts) {
        std::copy_n(from + o.b_local, o.count, to + (o.a_local - piece.flat_begin));
      }
      // A whole tensor keeps its own name (a model.safetensors of whole tensors is a Hugging
      // Face file); a piece is named by its key, box offset and flat start.
      std::string name = t.key;
      if (!whole_tensor(t.global, piece)) {
        name += "@";
        for (std::size_t d = 0; d < piece.offset.size(); ++d) {
          name += (d ? "," : "") + std::to_string(piece.offset[d]);
        }
        name += "+" + std::to_string(piece.flat_begin);
      }
      if (const int seen = names[name]++; seen > 0) name += "#" + std::to_string(seen);
      Json p = Json::object();
      p.set("tensor", name);
      p.set("key", t.key);
      p.set("global_shape", shape_json(t.global));
      p.set("offset", shape_json(piece.offset));
      p.set("shape", shape_json(piece.shape));
      Json flat = Json::array();
      flat.push_back(piece.flat_begin);
      flat.push_back(piece.flat_count);
      p.set("flat", std::move(flat));
      index.push_back(std::move(p));
      tensors.emplace_back(std::move(name), std::move(out));
    }
  }
  write_safetensors(path, tensors, {{"format", "pt"}, {kIndexKey, index.dump()}});
}

void read_pieces(std::span<const std::string> files, std::span<HeldTensor> held) {
  std::map<std::string, std::vector<std::size_t>> by_key;
  for (std::size_t i = 0; i < held.size(); ++i) by_key[held[i].key].push_back(i);
  // Fill CPU copies (the trainer's tensors may live elsewhere), counting what each receives.
  std::vector<Tensor> into(held.size());
  std::vector<std::int64_t> found(held.size(), 0);
  for (std::size_t i = 0; i < held.size(); ++i) {
    into[i] = held[i].data.is_cpu() ? held[i].data : held[i].data.to_device(Device::kCPU);
  }
  for (const std::string& file : files) {
    const SafetensorsReader r(file);
    for (const StoredPiece& p : stored_pieces(r)) {
      const auto it = by_key.find(p.key);
      if (it == by_key.end()) continue;  // not held here (another stage, a buffer, lm_head)
      for (std::size_t i : it->second) {  // the shape first: nothing is walked for another model
        if (p.global != held[i].global) {
          throw InputError(file + ": " + p.key + " is " + shape_str(p.global) +
                           " in the checkpoint, this run's model has " +
                           shape_str(held[i].global));
        }
      }
      std::vector<PieceRun> runs;
      try {
        runs = box_runs(p.global, p.box);
      } catch (const std::invalid_argument& e) {
        throw InputError(file + ": piece " + p.tensor + ": " + e.what());
      }
      Tensor loaded;  // read on first overlap only
      for (std::size_t i : it->second) {
        const std::vector<Overlap> parts = intersect(runs, held[i].runs);
        if (parts.empty()) continue;
        if (!loaded.defined()) {
          loaded = r.load(p.tensor, MemCategory::kOther);
          if (loaded.dtype() != DType::kF32) loaded = loaded.to(DType::kF32);
        }
        const float* from = loaded.data_as<float>();
        float* to = into[i].data_as<float>();
        for (const Overlap& o : parts) {
          std::copy_n(from + o.a_local, o.count, to + o.b_local);
          found[i] += o.count;
        }
      }
    }
  }
  for (std::size_t i = 0; i < held.size(); ++i) {
    const std::int64_t need = runs_numel(held[i].runs);
    if (found[i] != need) {
      throw InputError(held[i].key + ": the checkpoint holds " + std::to_string(found[i]) +
                       " of the " + std::to_string(need) + " elements this rank needs" +
                       (found[i] > need ? " (pieces overlap)" : " (pieces missing)"));
    }
    if (!held[i].data.is_cpu()) {
      Tensor dst = held[i].data;
      dst.copy_from(into[i]);
    }
  }
}

}  // namespace mixpar::ch08
