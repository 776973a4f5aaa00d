// Text out of a GPT: next-token choice (greedy, or temperature sampling from a seeded Philox
// stream), free generation, and batched greedy completion, which scores the built-in addition
// problems. Inference is the model's own forward with no targets: no separate code path.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/addition_data.h"
#include "model/gpt.h"
#include "random/philox.h"

namespace mixpar::ch08 {

// The next token from one row of logits, among ids [0, limit) (a byte model with a larger
// vocabulary never emits an id the byte decoder cannot print). temperature 0: the first
// maximum (greedy); otherwise one uniform draw of rng against softmax(logits / temperature).
// top_k > 0: the draw is among the top_k largest logits only (ties to the lower id), the rest
// given probability 0 (Fan et al. 2018, docs/REFERENCE.md); 0 = every token.
int pick_token(std::span<const float> logits, std::int64_t limit, double temperature, Philox& rng,
               std::int64_t top_k = 0);

// n tokens after `prompt` (ids; empty: a newline byte), each chosen from the last `context`
// tokens at most.
std::vector<std::int32_t> generate(GptModel& model, std::span<const std::int32_t> prompt,
                                   std::int64_t n, std::int64_t context, std::int64_t limit,
                                   double temperature, std::uint64_t seed, std::int64_t top_k = 0);

// Greedy completions of many prompts at once: rows of one batch, right-padded. Causal attention
// means padding after a position never changes its logits, so each prompt reads its next token
// at its own last position. Each completion stops before `stop` or after max_new tokens.
std::vector<std::string> complete_greedy_batch(GptModel& model,
                                               const std::vector<std::string>& prompts, int max_new,
                                               char stop, std::int64_t context);

// Writes `path` (safetensors, atomic): "tokens" F32 [T] (the ids, exact) and "logits" F32
// [T, V] of one forward over tokens. What scripts/check_hf_roundtrip.py compares with
// transformers' GPT2LMHeadModel on the same directory.
void dump_logits(GptModel& model, std::span<const std::int32_t> tokens, const std::string& path);

// Exact-match accuracy on problems (score_addition), completions made in batches.
AdditionScore evaluate_addition(GptModel& model, std::span<const AdditionProblem> problems,
                                std::int64_t context);

}  // namespace mixpar::ch08
