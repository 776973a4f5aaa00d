// Generation and scoring on the CPU model. Logits are read one row at a time from the model's
// [B, T, V] buffer (any working dtype, widened to FP32).
#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "io/safetensors.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

constexpr std::int64_t kEvalBatch = 64;  // prompts per forward: bounds the [B, T, V] logits

// Logits of row b, position t of the last forward, as floats.
std::vector<float> logits_row(const GptModel& m, std::int64_t b, std::int64_t T, std::int64_t t) {
  const Tensor& l = m.logits();
  const std::int64_t V = l.dim(-1);
  return l.view({l.numel() / V, V}).rows(b * T + t, 1).to_floats();
}

// Prompts side by side in one [B, T] batch, right-padded with `pad`; pos[b] is where row b's
// next token goes.
struct PromptBatch {
  std::int64_t B = 0, T = 0;
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> pos;
};

PromptBatch pack_prompts(std::span<const std::string> prompts, int max_new, char pad,
                         std::int64_t context) {
  std::size_t longest = 0;
  for (const std::string& p : prompts) longest = std::max(longest, p.size());
  PromptBatch pb;
  pb.B = static_cast<std::int64_t>(prompts.size());
  pb.T = std::min<std::int64_t>(context, static_cast<std::int64_t>(longest) + max_new);
  if (static_cast<std::int64_t>(longest) >= pb.T) {
    throw InputError("a prompt of " + std::to_string(longest) + " tokens leaves no room in the " +
                     std::to_string(context) + "-token context");
  }
  pb.tokens.assign(static_cast<std::size_t>(pb.B * pb.T), static_cast<unsigned char>(pad));
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const std::string& p = prompts[b];
    for (std::size_t t = 0; t < p.size(); ++t) {
      pb.tokens[b * static_cast<std::size_t>(pb.T) + t] = static_cast<unsigned char>(p[t]);
    }
    pb.pos.push_back(static_cast<std::int64_t>(p.size()));
  }
  return pb;
}

// Greedy completions of one batch of prompts (out[b] receives row b's tokens).
void complete_chunk(GptModel& model, std::span<const std::string> prompts, int max_new, char stop,
                    std::int64_t context, std::span<std::string> out) {
  PromptBatch pb = pack_prompts(prompts, max_new, stop, context);
  std::vector<bool> done(prompts.size(), false);
  Philox unused(0);  // greedy: no draws
  for (int step = 0; step < max_new; ++step) {
    model.forward(pb.tokens, {}, pb.B, pb.T);
    bool any = false;
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      if (done[b]) continue;
      const std::int64_t at = pb.pos[b];
      const int tok = pick_token(logits_row(model, static_cast<std::int64_t>(b), pb.T, at - 1), 256,
                                 0.0, unused);
      done[b] = tok == static_cast<unsigned char>(stop) || at >= pb.T;
      if (done[b]) continue;
      out[b] += static_cast<char>(tok);
      pb.tokens[b * static_cast<std::size_t>(pb.T) + static_cast<std::size_t>(at)] = tok;
      ++pb.pos[b];
      any = true;
    }
    if (!any) break;
  }
}

}  // namespace

int pick_token(std::span<const float> logits, std::int64_t limit, double temperature, Philox& rng,
               std::int64_t top_k) {
  const auto n = static_cast<std::size_t>(
      std::min<std::int64_t>(limit, static_cast<std::int64_t>(logits.size())));
  const auto first = logits.begin();
  const std::size_t best = static_cast<std::size_t>(
      std::max_element(first, first + static_cast<std::ptrdiff_t>(n)) - first);
  if (temperature <= 0.0) return static_cast<int>(best);
  // softmax(l / temperature) in double, shifted by the maximum so exp never overflows.
  std::vector<double> p(n);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - logits[best]) / temperature);
  }
  if (top_k > 0 && static_cast<std::size_t>(top_k) < n) {
    // The k largest logits, ties to the lower id; every other token's probability is 0.
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    const auto k = static_cast<std::ptrdiff_t>(top_k);
    std::nth_element(order.begin(), order.begin() + k - 1, order.end(),
                     [&](std::size_t a, std::size_t b) {
                       return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                     });
    std::vector<bool> keep(n, false);
    for (std::ptrdiff_t j = 0; j < k; ++j) keep[order[static_cast<std::size_t>(j)]] = true;
    for (std::size_t i = 0; i < n; ++i) {
      if (!keep[i]) p[i] = 0.0;
    }
  }
  for (std::size_t i = 0; i < n; ++i) sum += p[i];
  double u = static_cast<double>(rng.next_uniform()) * sum;
  for (std::size_t i = 0; i < n; ++i) {
    if ((u -= p[i]) < 0.0) return static_cast<int>(i);
  }
  return static_cast<int>(best);  // rounding left u a hair above the total
}

std::vector<std::int32_t> generate(GptModel& model, std::span<const std::int32_t> prompt,
                                   std::int64_t n, std::int64_t context, std::int64_t limit,
                                   double temperature, std::uint64_t seed, std::int64_t top_k) {
  std::vector<std::int32_t> all(prompt.begin(), prompt.end());
  if (all.empty()) all.push_back('\n');
  Philox rng(seed, /*stream=*/1);  // stream 0 draws the initial weights
  for (std::int64_t i = 0; i < n; ++i) {
    const auto T = std::min<std::int64_t>(context, static_cast<std::int64_t>(all.size()));
    const std::span<const std::int32_t> window(
        all.data() + all.size() - static_cast<std::size_t>(T), static_cast<std::size_t>(T));
    model.forward(window, {}, 1, T);
    all.push_back(pick_token(logits_row(model, 0, T, T - 1), limit, temperature, rng, top_k));
  }
  return {all.end() - n, all.end()};
}

std::vector<std::string> complete_greedy_batch(GptModel& model,
                                               const std::vector<std::string>& prompts, int max_new,
                                               char stop, std::int64_t context) {
  std::vector<std::string> out(prompts.size());
  for (std::size_t first = 0; first < prompts.size(); first += kEvalBatch) {
    const std::size_t n = std::min<std::size_t>(kEvalBatch, prompts.size() - first);
    complete_chunk(model, std::span(prompts).subspan(first, n), max_new, stop, context,
                   std::span(out).subspan(first, n));
  }
  return out;
}

void dump_logits(GptModel& model, std::span<const std::int32_t> tokens, const std::string& path) {
  const auto T = static_cast<std::int64_t>(tokens.size());
  if (T < 1 || T > model.config().n_positions) {
    throw InputError("--dump-logits: " + std::to_string(T) + " tokens, the model takes 1.." +
                     std::to_string(model.config().n_positions));
  }
  model.forward(tokens, {}, 1, T);
  std::vector<float> ids(tokens.begin(), tokens.end());
  const NamedTensors out = {
      {"tokens", Tensor::from_floats(ids, {T})},
      {"logits", model.logits().view({T, model.config().vocab_size}).to(DType::kF32)}};
  write_safetensors(path, out);
}

AdditionScore evaluate_addition(GptModel& model, std::span<const AdditionProblem> problems,
                                std::int64_t context) {
  // In the training stream every problem follows the newline that ends the previous one: the
  // prompt gets that newline too, so the model sees a problem start the way it learned it.
  std::vector<std::string> prompts;
  for (const AdditionProblem& p : problems) {
    std::string prompt = "\n";  // appended: GCC 12 warns falsely on "\n" + string (105329)
    prompt += p.prompt();
    prompts.push_back(std::move(prompt));
  }
  // Answers of 2-digit operands have at most 3 digits; a few more show what the model does
  // when it fails to stop.
  const std::vector<std::string> done = complete_greedy_batch(model, prompts, 6, '\n', context);
  std::map<std::string, std::string> by_prompt;
  for (std::size_t i = 0; i < prompts.size(); ++i) by_prompt[prompts[i].substr(1)] = done[i];
  return score_addition(problems, [&](const std::string& p) { return by_prompt.at(p); });
}

}  // namespace mixpar::ch08
