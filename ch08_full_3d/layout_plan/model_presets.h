// The models mixpar-plan plans for: GPT-2 shapes (mixpar's block: MHA, a 4h GELU MLP of two
// matrices, LM head tied to wte), given by flags, a Hugging Face GPT-2 config.json
// (common/io/gpt_config.h) or a preset. The Llama 3 presets are GPT-2 shapes of the published
// parameter count, not Llama blocks: the same n_layer, n_head and vocabulary, n_embd chosen so
// that GPT-2's count V C + P C + L (12 C^2 + 13 C) + 2 C is nearest the Llama count. What that
// changes (model_note() says it in the tool's output):
//   - FLOPs per token: 6 N the same (same N); the attention term 6 L C T grows with C.
//   - activations: Korthikanti's 34 s b h per layer is GPT-2's (MLP 4h, full K/V); a Llama
//     layer keeps a 3.5h SwiGLU of three matrices (more, ~ +10%) and GQA's K/V 8 heads (less).
//   - the tp all-reduces (b s h per block and pass) scale with C, a few per cent larger.
#pragma once

#include <string>
#include <vector>

#include "model/gpt_params.h"

namespace mixpar::plan {

struct PlanModel {
  std::string name;
  GptConfig shape;
  std::string note;  // "" for a GPT-2 model; what differs for a stand-in
};

std::vector<std::string> model_preset_names();
// gpt2-124m, gpt2-350m, gpt2-1.5b, llama3-8b (alias 8b), llama3-70b (70b), llama3-405b (405b);
// InputError listing them for another name. n_positions is set to `seq`.
PlanModel model_preset(const std::string& name, std::int64_t seq);

// The GPT-2 width whose parameter count with this depth, heads, vocabulary and positions is
// nearest `params` (a multiple of n_head).
std::int64_t gpt2_width_for(std::int64_t params, std::int64_t n_layer, std::int64_t n_head,
                            std::int64_t vocab, std::int64_t positions);

}  // namespace mixpar::plan
