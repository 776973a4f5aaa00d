// GptConfig checks and counts, the parameter registry, and GPT-2's parameter list.
#include "model/gpt_params.h"

#include <cmath>
#include <string>
#include <utility>

#include "random/philox.h"
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

ParamEntry& ParamRegistry::add(std::string name, Shape shape, bool weight_decay, ParamInit init,
                               float init_std, ParamHolding holding) {
  for (const ParamEntry& e : entries_) {
    if (e.name == name) throw InputError("ParamRegistry: '" + name + "' is registered twice");
  }
  const std::int64_t n = shape_numel(shape);
  entries_.push_back(ParamEntry{std::move(name), std::move(shape), holding, weight_decay, init,
                                init_std, numel_, Tensor(), Tensor()});
  numel_ += n;
  return entries_.back();
}

void ParamRegistry::allocate(DType dtype) {
  flat_params_ = Tensor::empty({numel_}, dtype, MemCategory::kParameters);
  flat_grads_ = Tensor::zeros({numel_}, dtype, MemCategory::kGradients);
  for (ParamEntry& e : entries_) {
    const std::int64_t n = shape_numel(e.shape);
    e.param = flat_params_.flat_slice(e.offset, n).view(e.shape);
    e.grad = flat_grads_.flat_slice(e.offset, n).view(e.shape);
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
        // fill_normal takes 2 draws per element: start at the entry's place in the model.
        Philox gen(seed, /*stream=*/0, 2 * static_cast<std::uint64_t>(e.offset));
        fill_normal(e.param, gen, 0.0f, e.init_std);
        break;
      }
    }
  }
}

const ParamEntry& ParamRegistry::at(std::string_view name) const {
  for (const ParamEntry& e : entries_) {
    if (e.name == name) return e;
  }
  throw InputError("ParamRegistry: no parameter named '" + std::string(name) + "'");
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

ParamRegistry make_gpt2_registry(const GptConfig& config) {
  config.validate();
  const std::int64_t c = config.n_embd;
  constexpr float kStd = 0.02f;
  // Residual projections are scaled down so the residual stream's variance does not grow with
  // depth (GPT-2 paper, section 2.3): 2 n_layer of them add into it.
  const float proj_std = static_cast<float>(0.02 / std::sqrt(2.0 * double(config.n_layer)));
  ParamRegistry r;
  r.add("wte.weight", {config.vocab_size, c}, true, ParamInit::kNormal, kStd);
  r.add("wpe.weight", {config.n_positions, c}, true, ParamInit::kNormal, kStd);
  auto layernorm = [&](const std::string& p) {
    r.add(p + ".weight", {c}, false, ParamInit::kOnes);
    r.add(p + ".bias", {c}, false, ParamInit::kZeros);
  };
  auto linear = [&](const std::string& p, std::int64_t in, std::int64_t out, float std) {
    r.add(p + ".weight", {in, out}, true, ParamInit::kNormal, std);
    r.add(p + ".bias", {out}, false, ParamInit::kZeros);
  };
  for (std::int64_t l = 0; l < config.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l);
    layernorm(h + ".ln_1");
    linear(h + ".attn.c_attn", c, 3 * c, kStd);
    linear(h + ".attn.c_proj", c, c, proj_std);
    layernorm(h + ".ln_2");
    linear(h + ".mlp.c_fc", c, 4 * c, kStd);
    linear(h + ".mlp.c_proj", 4 * c, c, proj_std);
  }
  layernorm("ln_f");
  return r;
}

}  // namespace mixpar
