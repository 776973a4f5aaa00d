// Hugging Face GPT-2 directories. The registry already names and lays out every tensor the way
// transformers does (Conv1D weights [in, out]), so saving is a rename at most and loading a
// name lookup plus a dtype conversion; the work here is refusing anything that would load wrong.
#include "model/gpt_hf.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string_view>

#include "io/safetensors.h"
#include "util/errors.h"

namespace mixpar {
namespace {

constexpr std::string_view kPrefix = "transformer.";

std::string torch_dtype_name(DType d) {
  switch (d) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    default:
      throw InputError("HF save: weights are stored as F32, F16 or BF16, not " +
                       std::string(dtype_name(d)));
  }
}

// "h.<digits>.attn.bias" or "h.<digits>.attn.masked_bias": the causal-mask buffers older
// transformers versions saved. They hold no learned value; the mask is implied by GPT-2.
bool is_attention_buffer(std::string_view name) {
  if (!name.starts_with("h.")) return false;
  std::size_t i = 2;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 2) return false;
  const std::string_view rest = name.substr(i);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

std::string_view strip_prefix(std::string_view name) {
  return name.starts_with(kPrefix) ? name.substr(kPrefix.size()) : name;
}


// name -> index into dst, checking dst against the registry of `config` (a programming error
// in the caller, hence std::invalid_argument rather than InputError).
std::map<std::string, std::size_t> index_by_name(const GptConfig& config,
                                                 std::span<const NamedTensor> tensors) {
  const ParamRegistry reg = make_gpt2_registry(config);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const ParamEntry& e = reg.at(tensors[i].name);  // InputError for an unknown name
    if (tensors[i].tensor.shape() != e.shape) {
      throw std::invalid_argument("gpt_hf: " + e.name + " is " +
                                  shape_str(tensors[i].tensor.shape()) + ", the config says " +
                                  shape_str(e.shape));
    }
    if (!index.emplace(e.name, i).second) {
      throw std::invalid_argument("gpt_hf: " + e.name + " given twice");
    }
  }
  if (index.size() != reg.entries().size()) {
    throw std::invalid_argument("gpt_hf: " + std::to_string(index.size()) + " tensors for " +
                                std::to_string(reg.entries().size()) + " parameters");
  }
  return index;
}

std::string model_file(const std::string& dir) {
  return (std::filesystem::path(dir) / "model.safetensors").string();
}

// lm_head.weight is tolerated only as a copy of wte: an untied head would be silently dropped.
void check_tied_head(const SafetensorsReader& reader, const std::string& head_name,
                     const std::string& wte_name) {
  const std::vector<float> head = reader.load(head_name, MemCategory::kOther).to_floats();
  const std::vector<float> wte = reader.load(wte_name, MemCategory::kOther).to_floats();
  if (head != wte) {
    throw InputError(reader.path() +
                     ": lm_head.weight differs from wte.weight; mixpar's "
                     "GPT-2 ties the LM head to the token embedding");
  }
}

}  // namespace

GptConfig gpt_config_from_hf(const HfGpt2Config& hf, const std::string& source) {
  // Every field that changes the model is honoured or refused: mixpar's LayerNorms use
  // kLayerNormEps (GPT-2's 1e-5), so another epsilon (1e-3 was accepted and ignored, and
  // exported as 1e-5) would compute another model.
  if (hf.layer_norm_epsilon != layers::kLayerNormEps) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", hf.layer_norm_epsilon);
    throw InputError(source + ": layer_norm_epsilon is " + text +
                     ", mixpar's GPT-2 LayerNorms use only 1e-05 (another epsilon is another "
                     "model)");
  }
  return {hf.n_layer, hf.n_head, hf.n_embd, hf.n_positions, hf.vocab_size};
}

HfGpt2Config hf_config_from_gpt(const GptConfig& config, DType stored) {
  HfGpt2Config hf;
  hf.n_layer = config.n_layer;
  hf.n_head = config.n_head;
  hf.n_embd = config.n_embd;
  hf.n_positions = config.n_positions;
  hf.vocab_size = config.vocab_size;
  hf.torch_dtype = torch_dtype_name(stored);
  return hf;
}

void save_gpt_hf(const std::string& dir, const GptConfig& config,
                 std::span<const NamedTensor> params, const HfSaveOptions& options) {
  const HfGpt2Config hf = hf_config_from_gpt(config, options.dtype);  // checks the dtype first
  index_by_name(config, params);
  NamedTensors out;
  out.reserve(params.size());
  for (const NamedTensor& p : params) {
    const std::string name = (options.transformer_prefix ? std::string(kPrefix) : "") + p.name;
    // Same dtype: the handle itself, no copy of a model that may be gigabytes.
    out.emplace_back(name,
                     p.tensor.dtype() == options.dtype ? p.tensor : p.tensor.to(options.dtype));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create directory: " + ec.message());
  // transformers refuses a safetensors file whose metadata does not name its format.
  write_safetensors(model_file(dir), out, {{"format", "pt"}});
  write_gpt2_config((std::filesystem::path(dir) / "config.json").string(), hf);
}

void save_gpt_hf(const std::string& dir, const GptModel& model, const HfSaveOptions& options) {
  const std::vector<NamedTensor> params = model.parameters();
  save_gpt_hf(dir, model.config(), params, options);
}

std::string config_difference(const GptConfig& got, const GptConfig& want) {
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> sizes[] = {
      {"n_layer", {got.n_layer, want.n_layer}},
      {"n_head", {got.n_head, want.n_head}},
      {"n_embd", {got.n_embd, want.n_embd}},
      {"n_positions", {got.n_positions, want.n_positions}},
      {"vocab_size", {got.vocab_size, want.vocab_size}}};
  for (const auto& [key, v] : sizes) {
    if (v.first != v.second) {
      return std::string(key) + " is " + std::to_string(v.first) + ", expected " +
             std::to_string(v.second);
    }
  }
  return {};
}

GptConfig read_gpt_hf_config(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  return gpt_config_from_hf(read_gpt2_config(file), file);
}

namespace {

// A NaN or an infinity in a weight makes every loss NaN from the first step on, and training
// would log "loss nan" to the end: refused, naming the tensor and the first bad element (also
// a finite value that overflowed the target's dtype on the way in).
void check_finite(const std::string& file, const std::string& name, const Tensor& t) {
  const Tensor f = t.dtype() == DType::kF32 ? t : t.to(DType::kF32);
  const float* v = f.data_as<float>();
  const std::int64_t n = f.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) {
      throw InputError(file + ": tensor " + name + " holds a non-finite value (" +
                       (std::isnan(v[i]) ? std::string("nan") : std::string(v[i] > 0 ? "inf" : "-inf")) +
                       " at element " + std::to_string(i) + " of " + std::to_string(n) + ")");
    }
  }
}

}  // namespace

void load_gpt_hf_into(const std::string& dir, const GptConfig& expected,
                      std::span<const NamedTensor> dst) {
  const GptConfig got = read_gpt_hf_config(dir);
  if (const std::string diff = config_difference(got, expected); !diff.empty()) {
    throw InputError(dir + ": model shape differs: " + diff);
  }
  const std::map<std::string, std::size_t> index = index_by_name(expected, dst);
  const SafetensorsReader reader(model_file(dir));
  std::vector<bool> loaded(dst.size(), false);
  std::string head_name, wte_name;
  for (const SafetensorsEntry& e : reader.entries()) {
    const std::string name(strip_prefix(e.name));
    if (is_attention_buffer(name)) continue;
    if (name == "lm_head.weight") {
      head_name = e.name;
      continue;
    }
    const auto it = index.find(name);
    if (it == index.end()) throw InputError(reader.path() + ": unexpected tensor " + e.name);
    if (loaded[it->second]) throw InputError(reader.path() + ": " + name + " stored twice");
    if (e.shape != dst[it->second].tensor.shape()) {
      throw InputError(reader.path() + ": " + e.name + " is " + shape_str(e.shape) +
                       ", the config says " + shape_str(dst[it->second].tensor.shape()));
    }
    Tensor target = dst[it->second].tensor;
    target.copy_from(reader.load(e.name, MemCategory::kOther));  // rounds into target's dtype
    check_finite(reader.path(), e.name, target);
    loaded[it->second] = true;
    if (name == "wte.weight") wte_name = e.name;
  }
  for (const auto& [name, i] : index) {
    if (!loaded[i]) throw InputError(reader.path() + ": missing tensor " + name);
  }
  if (!head_name.empty()) check_tied_head(reader, head_name, wte_name);
}

GptModel load_gpt_hf(const std::string& dir, GptOptions options) {
  GptModel model(read_gpt_hf_config(dir), options);
  const std::vector<NamedTensor> params = model.parameters();
  load_gpt_hf_into(dir, model.config(), params);
  return model;
}

}  // namespace mixpar
