// HF GPT-2 config.json. Keys transformers reads that change the computation are checked
// against what mixpar's GPT does; keys that only matter to other heads or to generation
// (summary_*, task_specific_params, ...) are ignored.
#include "io/gpt_config.h"

#include <filesystem>
#include <system_error>

#include "io/atomic_file.h"
#include "util/errors.h"

namespace mixpar {

namespace {

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw InputError(source + ": " + what);
}

std::int64_t positive_int(const Json& j, const char* key, const std::string& source) {
  const Json* v = j.find(key);
  if (!v) bad(source, std::string("missing key \"") + key + "\"");
  if (!v->is_integer() || v->as_int() <= 0) {
    bad(source, std::string(key) + " must be a positive integer, got " + v->dump());
  }
  return v->as_int();
}

// A key that, when present, must hold exactly `want` for our model to compute the same thing.
void require_if_present(const Json& j, const char* key, const Json& want, const std::string& why,
                        const std::string& source) {
  const Json* v = j.find(key);
  if (v && !(*v == want)) {
    bad(source, std::string(key) + " is " + v->dump() + ", mixpar supports only " + want.dump() +
                    " (" + why + ")");
  }
}

void check_model_keys(const Json& j, const HfGpt2Config& c, const std::string& source) {
  require_if_present(j, "model_type", "gpt2", "a GPT-2 model", source);
  const Json* act = j.find("activation_function");
  if (act && !(*act == Json("gelu_new") || *act == Json("gelu_pytorch_tanh"))) {
    bad(source,
        "activation_function is " + act->dump() + ", mixpar's GPT uses the tanh GELU (gelu_new)");
  }
  const Json* inner = j.find("n_inner");
  if (inner && !inner->is_null() && !(inner->is_integer() && inner->as_int() == 4 * c.n_embd)) {
    bad(source, "n_inner is " + inner->dump() +
                    ", mixpar's MLP is 4 * n_embd = " + std::to_string(4 * c.n_embd));
  }
  require_if_present(j, "tie_word_embeddings", true, "the LM head is the token embedding", source);
  require_if_present(j, "scale_attn_weights", true, "attention is scaled by 1/sqrt(head_dim)",
                     source);
  require_if_present(j, "scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling",
                     source);
  require_if_present(j, "reorder_and_upcast_attn", false, "plain attention", source);
  require_if_present(j, "add_cross_attention", false, "a decoder-only model", source);
}

}  // namespace

void validate_gpt2_config(const HfGpt2Config& c, const std::string& source) {
  const std::pair<const char*, std::int64_t> sizes[] = {{"n_layer", c.n_layer},
                                                        {"n_head", c.n_head},
                                                        {"n_embd", c.n_embd},
                                                        {"vocab_size", c.vocab_size},
                                                        {"n_positions", c.n_positions}};
  for (const auto& [key, v] : sizes) {
    if (v <= 0) {
      bad(source, std::string(key) + " must be a positive integer, got " + std::to_string(v));
    }
  }
  if (c.n_embd % c.n_head != 0) {
    bad(source, "n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " +
                    std::to_string(c.n_head));
  }
  if (!(c.layer_norm_epsilon > 0.0)) bad(source, "layer_norm_epsilon must be positive");
}

Json gpt2_config_to_json(const HfGpt2Config& c) {
  validate_gpt2_config(c, "config");
  Json j = Json::object();
  j.set("activation_function", "gelu_new");
  j.set("architectures", Json(Json::Array{Json("GPT2LMHeadModel")}));
  j.set("attn_pdrop", 0.0);
  j.set("bos_token_id", c.vocab_size - 1);
  j.set("embd_pdrop", 0.0);
  j.set("eos_token_id", c.vocab_size - 1);
  j.set("initializer_range", 0.02);
  j.set("layer_norm_epsilon", c.layer_norm_epsilon);
  j.set("model_type", "gpt2");
  j.set("n_ctx", c.n_positions);  // the older name of n_positions, still read by some tools
  j.set("n_embd", c.n_embd);
  j.set("n_head", c.n_head);
  j.set("n_inner", Json());  // null: 4 * n_embd
  j.set("n_layer", c.n_layer);
  j.set("n_positions", c.n_positions);
  j.set("reorder_and_upcast_attn", false);
  j.set("resid_pdrop", 0.0);
  j.set("scale_attn_by_inverse_layer_idx", false);
  j.set("scale_attn_weights", true);
  j.set("tie_word_embeddings", true);
  j.set("torch_dtype", c.torch_dtype);
  j.set("use_cache", true);
  j.set("vocab_size", c.vocab_size);
  return j;
}

HfGpt2Config gpt2_config_from_json(const Json& json, const std::string& source) {
  if (!json.is_object()) {
    bad(source, "expected a JSON object, got " + std::string(json.type_name()));
  }
  HfGpt2Config c;
  c.n_layer = positive_int(json, "n_layer", source);
  c.n_head = positive_int(json, "n_head", source);
  c.n_embd = positive_int(json, "n_embd", source);
  c.vocab_size = positive_int(json, "vocab_size", source);
  c.n_positions = positive_int(json, "n_positions", source);
  if (const Json* eps = json.find("layer_norm_epsilon")) {
    if (!eps->is_number() || !(eps->as_double() > 0.0)) {
      bad(source, "layer_norm_epsilon must be a positive number, got " + eps->dump());
    }
    c.layer_norm_epsilon = eps->as_double();
  }
  if (const Json* dt = json.find("torch_dtype"); dt && !dt->is_null()) {
    if (!dt->is_string()) bad(source, "torch_dtype must be a string, got " + dt->dump());
    c.torch_dtype = dt->as_string();
  }
  check_model_keys(json, c, source);
  validate_gpt2_config(c, source);
  return c;
}

HfGpt2Config read_gpt2_config(const std::string& path) {
  // A path that cannot even be looked up (a name too long, ...) is no directory: read_file
  // then refuses it as an InputError naming it, where is_directory would throw its own error.
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec)
                               ? (std::filesystem::path(path) / "config.json").string()
                               : path;
  return gpt2_config_from_json(Json::parse(read_file(file), file), file);
}

void write_gpt2_config(const std::string& path, const HfGpt2Config& c) {
  validate_gpt2_config(c, path);
  write_file_atomic(path, gpt2_config_to_json(c).dump(2) + "\n");
}

}  // namespace mixpar
