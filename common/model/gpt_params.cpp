// GptConfig checks and counts, the parameter registry, and GPT-2's parameter list.
#include "model/gpt_params.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "random/philox.h"
#include "util/checked_math.h"
#include "util/errors.h"

namespace mixpar {

void GptConfig::validate() const {
  const std::pair<const char*, std::int64_t> sizes[] = {{"n_layer", n_layer},
                                                        {"n_head", n_head},
                                                        {"n_embd", n_embd},
                                                        {"n_positions", n_positions},
                                                        {"vocab_size", vocab_size}};
  for (const auto& [name, v] : sizes) {
    if (v <= 0)
      throw InputError(std::string("GptConfig: ") + name + " = " + std::to_string(v) +
                       " must be positive");
  }
  if (n_embd % n_head != 0) {
    throw InputError("GptConfig: n_embd = " + std::to_string(n_embd) +
                     " is not a multiple of n_head = " + std::to_string(n_head));
  }
  // num_parameters() and flops_per_token() in checked arithmetic, with room for the 16
  // bytes per parameter of FP32 masters and both Adam moments: a shape whose sizes wrap is
  // refused here, not found as a negative count later (common/util/checked_math.h).
  constexpr std::string_view what = "GptConfig: the parameter count";
  const std::int64_t c = n_embd;
  const std::int64_t block =
      checked_sum(what, checked_product(what, {{"", 12}, {"n_embd", c}, {"n_embd", c}}),
                  checked_product(what, {{"", 13}, {"n_embd", c}}));
  const std::int64_t embeddings =
      checked_sum(what, checked_product(what, {{"vocab_size", vocab_size}, {"n_embd", c}}),
                  checked_product(what, {{"n_positions", n_positions}, {"n_embd", c}}));
  const std::int64_t total = checked_sum(
      what, checked_sum(what, embeddings, checked_product(what, {{"n_layer", n_layer}, {"block", block}})),
      2 * c);
  checked_product("GptConfig: the bytes of the parameters' state", {{"", 16}, {"parameters", total}});
  checked_sum("GptConfig: the FLOPs per token",
              checked_product("GptConfig: the FLOPs per token", {{"", 6}, {"parameters", total}}),
              checked_product("GptConfig: the FLOPs per token",
                              {{"", 6}, {"n_layer", n_layer}, {"n_embd", c}, {"n_positions", n_positions}}));
}

std::int64_t GptConfig::num_parameters() const {
  const std::int64_t c = n_embd;
  return vocab_size * c + n_positions * c + n_layer * (12 * c * c + 13 * c) + 2 * c;
}

std::int64_t GptConfig::flops_per_token(std::int64_t seq_len) const {
  return 6 * num_parameters() + 6 * n_layer * n_embd * seq_len;
}

std::string_view param_split_name(ParamSplit s) {
  switch (s) {
    case ParamSplit::kReplicated:
      return "replicated";
    case ParamSplit::kColumns:
      return "columns";
    case ParamSplit::kRows:
      return "rows";
    case ParamSplit::kVocab:
      return "vocab";
  }
  return "?";
}

namespace {

std::int64_t checked_part(std::int64_t n, std::int64_t parts, const char* what) {
  if (parts < 1 || n % parts != 0) {
    throw std::invalid_argument(std::string("held_shape: ") + what + " " + std::to_string(n) +
                                " does not split into " + std::to_string(parts));
  }
  return n / parts;
}

}  // namespace

Shape held_shape(const Shape& full, const ParamHolding& h) {
  Shape s = full;
  if (h.split == ParamSplit::kReplicated || h.num_shards == 1) return s;
  if (s.empty()) throw std::invalid_argument("held_shape: a split scalar");
  if (h.split == ParamSplit::kColumns) {
    const std::int64_t groups = h.column_groups;
    s.back() = groups * checked_part(checked_part(s.back(), groups, "columns"), h.num_shards,
                                     "column group of");
  } else {
    s.front() = checked_part(s.front(), h.num_shards, "rows");
  }
  return s;
}

std::vector<ElementRange> held_elements(const Shape& full, const ParamHolding& h) {
  const std::int64_t n = shape_numel(full);
  if (h.split == ParamSplit::kReplicated || h.num_shards == 1) return {{0, n}};
  held_shape(full, h);  // the divisibility checks
  const std::int64_t cols = full.back(), rows = n / cols;
  if (h.split != ParamSplit::kColumns) {  // kRows, kVocab: a contiguous block of rows
    const std::int64_t per = n / h.num_shards;
    return {{h.shard * per, per}};
  }
  const std::int64_t group = cols / h.column_groups, part = group / h.num_shards;
  std::vector<ElementRange> out;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < h.column_groups; ++g) {
      out.push_back({r * cols + g * group + h.shard * part, part});
    }
  }
  return out;
}

std::int64_t GptStage::blocks(const GptConfig& c) const { return end(c) - first_block; }

GptStage gpt_stage(const GptConfig& config, int index, int count) {
  if (count < 1 || index < 0 || index >= count) {
    throw InputError("pipeline: stage " + std::to_string(index) + " of " +
                     std::to_string(count) + " does not exist");
  }
  if (count > config.n_layer) {
    throw InputError("pipeline: " + std::to_string(count) + " stages for " +
                     std::to_string(config.n_layer) +
                     " blocks: a stage would have no block to run (pp must be <= n_layer)");
  }
  // The first n_layer % count stages take one block more: ring_chunk's split.
  const std::int64_t base = config.n_layer / count, extra = config.n_layer % count;
  GptStage s;
  s.index = index;
  s.count = count;
  s.first_block = index * base + std::min<std::int64_t>(index, extra);
  s.end_block = s.first_block + base + (index < extra ? 1 : 0);
  return s;
}

ParamEntry& ParamRegistry::add(std::string name, Shape shape, bool weight_decay, ParamInit init,
                               float init_std, ParamHolding holding, std::int64_t init_offset) {
  if (index_.contains(name)) {
    throw InputError("ParamRegistry: '" + name + "' is registered twice");
  }
  const std::int64_t n = shape_numel(held_shape(shape, holding));
  index_.emplace(name, entries_.size());
  entries_.push_back(ParamEntry{std::move(name), std::move(shape), holding, weight_decay, init,
                                init_std, numel_, init_offset < 0 ? numel_ : init_offset,
                                Tensor(), Tensor(), /*init_rows=*/-1});
  numel_ += n;
  return entries_.back();
}

void ParamRegistry::allocate(DType dtype) {
  flat_params_ = Tensor::empty({numel_}, dtype, MemCategory::kParameters);
  flat_grads_ = Tensor::zeros({numel_}, dtype, MemCategory::kGradients);
  for (ParamEntry& e : entries_) {
    const Shape held = held_shape(e.shape, e.holding);
    const std::int64_t n = shape_numel(held);
    e.param = flat_params_.flat_slice(e.offset, n).view(held);
    e.grad = flat_grads_.flat_slice(e.offset, n).view(held);
  }
}

void ParamRegistry::initialize(std::uint64_t seed) {
  for (ParamEntry& e : entries_) {
    switch (e.init) {
      case ParamInit::kZeros:
        e.param.zero();
        break;
      case ParamInit::kOnes:
        e.param.fill(1.0f);
        break;
      case ParamInit::kNormal: {
        // fill_normal takes 2 draws per element: each held run of the full tensor starts at
        // its own place in the whole model, so a shard holds exactly the full tensor's values.
        // Elements past init_rows (padding) are zeros and take no draw.
        const std::int64_t drawn =
            e.init_rows < 0 ? shape_numel(e.shape) : e.init_rows * (shape_numel(e.shape) /
                                                                    e.shape.front());
        std::int64_t k = 0;
        for (const ElementRange& run : held_elements(e.shape, e.holding)) {
          const std::int64_t n = std::clamp<std::int64_t>(drawn - run.begin, 0, run.count);
          if (n > 0) {
            Tensor part = e.param.flat_slice(k, n);
            Philox gen(seed, /*stream=*/0,
                       2 * static_cast<std::uint64_t>(e.init_offset + run.begin));
            fill_normal(part, gen, 0.0f, e.init_std);
          }
          if (n < run.count) {
            Tensor pad = e.param.flat_slice(k + n, run.count - n);
            pad.zero();
          }
          k += run.count;
        }
        break;
      }
    }
  }
}

std::size_t ParamRegistry::index_of(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  if (it == index_.end()) {
    throw InputError("ParamRegistry: no parameter named '" + std::string(name) + "'");
  }
  return it->second;
}

const ParamEntry& ParamRegistry::at(std::string_view name) const {
  return entries_[index_of(name)];
}

ParamEntry& ParamRegistry::at(std::string_view name) {
  return const_cast<ParamEntry&>(std::as_const(*this).at(name));
}

std::vector<NamedTensor> ParamRegistry::parameters() const {
  std::vector<NamedTensor> out;
  for (const ParamEntry& e : entries_) out.push_back({e.name, e.param});
  return out;
}

std::vector<NamedTensor> ParamRegistry::gradients() const {
  std::vector<NamedTensor> out;
  for (const ParamEntry& e : entries_) out.push_back({e.name, e.grad});
  return out;
}

void ParamRegistry::zero_grad() {
  if (flat_grads_.defined()) flat_grads_.zero();
}

std::int64_t padded_vocab(std::int64_t vocab, int tp) {
  if (tp <= 1) return vocab;
  return (vocab + tp - 1) / tp * tp;
}

ParamRegistry make_gpt2_registry(const GptConfig& config, const GptStage& stage,
                                 const TensorShard& tp) {
  config.validate();
  if (!stage.whole()) gpt_stage(config, stage.index, stage.count);  // InputError if impossible
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    throw InputError("tensor parallel: rank " + std::to_string(tp.rank) + " of " +
                     std::to_string(tp.size) + " does not exist");
  }
  for (const auto& [what, n] : {std::pair<const char*, std::int64_t>{"n_head", config.n_head},
                                {"4 x n_embd", 4 * config.n_embd}}) {
    if (n % tp.size != 0) {
      throw InputError("tensor parallel: tp " + std::to_string(tp.size) + " does not divide " +
                       what + " = " + std::to_string(n));
    }
  }
  auto split = [&](ParamSplit how, int groups = 1) {
    ParamHolding h;
    h.stage = stage.index;
    if (tp.size == 1) return h;
    h.split = how;
    h.shard = tp.rank;
    h.num_shards = tp.size;
    h.column_groups = groups;
    return h;
  };
  const std::int64_t c = config.n_embd;
  constexpr float kStd = 0.02f;
  // Residual projections are scaled down so the residual stream's variance does not grow with
  // depth (GPT-2 paper, section 2.3): 2 n_layer of them add into it.
  const float proj_std = static_cast<float>(0.02 / std::sqrt(2.0 * double(config.n_layer)));
  ParamRegistry r;
  // Every parameter of the whole model is walked in order, so that each keeps its place in the
  // whole model (init_offset) whichever of them this stage registers.
  std::int64_t whole_offset = 0;
  bool included = true;
  auto add = [&](const std::string& name, Shape shape, bool decay, ParamInit init, float std,
                 const ParamHolding& holding) {
    const std::int64_t n = shape_numel(shape);
    if (included) r.add(name, std::move(shape), decay, init, std, holding, whole_offset);
    whole_offset += n;
  };
  const ParamHolding whole = split(ParamSplit::kReplicated);
  auto layernorm = [&](const std::string& p) {
    add(p + ".weight", {c}, false, ParamInit::kOnes, 0.0f, whole);
    add(p + ".bias", {c}, false, ParamInit::kZeros, 0.0f, whole);
  };
  // Column-parallel: weight and bias split by output columns. Row-parallel: the weight by
  // input rows, the bias whole (added once, after the all-reduce of the partial products).
  auto column_linear = [&](const std::string& p, std::int64_t in, std::int64_t out, float std,
                           int groups) {
    add(p + ".weight", {in, out}, true, ParamInit::kNormal, std, split(ParamSplit::kColumns, groups));
    add(p + ".bias", {out}, false, ParamInit::kZeros, 0.0f, split(ParamSplit::kColumns, groups));
  };
  auto row_linear = [&](const std::string& p, std::int64_t in, std::int64_t out, float std) {
    add(p + ".weight", {in, out}, true, ParamInit::kNormal, std, split(ParamSplit::kRows));
    add(p + ".bias", {out}, false, ParamInit::kZeros, 0.0f, whole);
  };
  // wte is the embedding (first stage) and the tied LM head (last stage): held by both.
  included = stage.is_first() || stage.is_last();
  ParamHolding wte = split(ParamSplit::kVocab);
  wte.tied_copy = !stage.is_first();
  // Padded to a multiple of tp: the padding rows are zeros and take no place in the whole
  // model's init order (wpe and the blocks start where they do unpadded).
  const std::int64_t vocab = padded_vocab(config.vocab_size, tp.size);
  if (included) {
    r.add("wte.weight", {vocab, c}, true, ParamInit::kNormal, kStd, wte, whole_offset).init_rows =
        config.vocab_size;
  }
  whole_offset += config.vocab_size * c;
  included = stage.is_first();
  add("wpe.weight", {config.n_positions, c}, true, ParamInit::kNormal, kStd, whole);
  for (std::int64_t l = 0; l < config.n_layer; ++l) {
    included = l >= stage.first_block && l < stage.end(config);
    const std::string h = "h." + std::to_string(l);
    layernorm(h + ".ln_1");
    column_linear(h + ".attn.c_attn", c, 3 * c, kStd, 3);  // q | k | v, each by heads
    row_linear(h + ".attn.c_proj", c, c, proj_std);
    layernorm(h + ".ln_2");
    column_linear(h + ".mlp.c_fc", c, 4 * c, kStd, 1);
    row_linear(h + ".mlp.c_proj", 4 * c, c, proj_std);
  }
  included = stage.is_last();
  layernorm("ln_f");
  return r;
}

}  // namespace mixpar
