#include "model_presets.h"

#include <cmath>
#include <cstdint>

#include "util/errors.h"

namespace mixpar::plan {

namespace {

struct Published {
  const char* name;
  const char* alias;
  std::int64_t params;  // 0: a GPT-2 model given by its shape
  std::int64_t n_layer, n_head, n_embd, vocab;
};

// GPT-2 sizes (Radford et al. 2019); Llama 3 (Llama 3 paper, Table 3: layers, heads, vocabulary;
// parameter counts 8.0B, 70.6B, 405.9B as published with the model cards): docs/SOURCES.md.
constexpr Published kPresets[] = {
    {"gpt2-124m", "124m", 0, 12, 12, 768, 50257},
    {"gpt2-350m", "350m", 0, 24, 16, 1024, 50257},
    {"gpt2-1.5b", "1.5b", 0, 48, 25, 1600, 50257},
    {"llama3-8b", "8b", 8'030'261'248, 32, 32, 0, 128256},
    {"llama3-70b", "70b", 70'553'706'496, 80, 64, 0, 128256},
    {"llama3-405b", "405b", 405'853'388'800, 126, 128, 0, 128256},
};

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const Published& p : kPresets) out.emplace_back(p.name);
  return out;
}

std::int64_t gpt2_width_for(std::int64_t params, std::int64_t n_layer, std::int64_t n_head,
                            std::int64_t vocab, std::int64_t positions) {
  // 12 L C^2 + (V + P + 13 L + 2) C - N = 0, the positive root, then the nearest multiple of
  // n_head by the exact count.
  const double a = 12.0 * static_cast<double>(n_layer);
  const double b = static_cast<double>(vocab + positions + 13 * n_layer + 2);
  const double c = -static_cast<double>(params);
  const double root = (-b + std::sqrt(b * b - 4 * a * c)) / (2 * a);
  std::int64_t best = n_head, best_err = INT64_MAX;
  const auto k0 = static_cast<std::int64_t>(root / static_cast<double>(n_head));
  for (std::int64_t k = std::max<std::int64_t>(1, k0 - 1); k <= k0 + 2; ++k) {
    const GptConfig g{n_layer, n_head, k * n_head, positions, vocab};
    const std::int64_t err = std::llabs(g.num_parameters() - params);
    if (err < best_err) best = k * n_head, best_err = err;
  }
  return best;
}

PlanModel model_preset(const std::string& name, std::int64_t seq) {
  for (const Published& p : kPresets) {
    if (name != p.name && name != p.alias) continue;
    PlanModel m{.name = p.name, .shape = {}, .note = ""};
    const std::int64_t width =
        p.params == 0 ? p.n_embd : gpt2_width_for(p.params, p.n_layer, p.n_head, p.vocab, seq);
    m.shape = GptConfig{p.n_layer, p.n_head, width, seq, p.vocab};
    if (p.params != 0) {
      m.note = std::string(p.name) + " is modelled as a GPT-2 shape of its parameter count (" +
               std::to_string(m.shape.num_parameters()) + " vs " + std::to_string(p.params) +
               " published): n_layer " + std::to_string(p.n_layer) + ", n_head " +
               std::to_string(p.n_head) + ", n_embd " + std::to_string(width) +
               " (Llama's MLP is a 3.5h SwiGLU of 3 matrices and its attention GQA: activations"
               " and the attention FLOPs differ by a few per cent; model_presets.h)";
    }
    return m;
  }
  std::string names;
  for (const Published& p : kPresets) names += (names.empty() ? "" : "|") + std::string(p.name);
  throw InputError("--model: '" + name + "' is not one of " + names +
                   " (or give the shape: --n-layer --n-embd --n-head --vocab-size, or "
                   "--config FILE)");
}

}  // namespace mixpar::plan
