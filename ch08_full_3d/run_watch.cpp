#include "run_watch.h"

#include <algorithm>
#include <cmath>

#include "ops/reductions.h"
#include "report/format.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using mixpar::num;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<std::string> RunWatch::observe(const StepStats& s) {
  std::vector<std::string> out;
  const auto key = std::make_pair(s.epoch, s.data_position);
  const auto [it, fresh] = seen_.emplace(key, s.step);
  if (!fresh) {
    out.push_back("warning: step " + num(s.step) + " reads data position " +
                  num(s.data_position) + " again within epoch " + num(s.epoch) +
                  " (first read at step " + num(it->second) +
                  "): a repeated batch, the loader or a resume is wrong");
  }
  if (std::isfinite(s.loss) && !s.skipped) {
    if (recent_.size() >= config_.min_history) {
      const double med = median({recent_.begin(), recent_.end()});
      if (s.loss > config_.spike_factor * med) {
        ++spikes_;
        out.push_back("warning: loss spike at step " + num(s.step) + ": " + num(s.loss, 5) +
                      " > " + num(config_.spike_factor) + " x the running median " +
                      num(med, 5) + " of the last " + num(recent_.size()) +
                      " steps; its batch starts at data position " + num(s.data_position) +
                      ", epoch " + num(s.epoch) + " (replay: TokenLoader::batch_at)");
      }
    }
    recent_.push_back(s.loss);
    if (recent_.size() > config_.spike_window) recent_.pop_front();
  }
  return out;
}

std::string effective_batch_warning(const TrainerConfig& c) {
  if (c.grad_accum <= 1) return "";
  const std::int64_t per_micro = c.batch * c.dp;
  const double m = static_cast<double>(c.grad_accum);
  return "warning: --grad-accum " + num(c.grad_accum) + " makes the global batch " +
         num(c.sequences_per_step()) + " sequences, " + num(c.grad_accum) + " x the " +
         num(per_micro) + " of --batch x dp, at --lr " + num(c.schedule.lr) +
         ": an lr tuned for " + num(per_micro) + " sequences would scale to " +
         num(c.schedule.lr * std::sqrt(m), 4) + " (square-root rule) or " +
         num(c.schedule.lr * m, 4) + " (linear rule); if --lr was chosen for " +
         num(c.sequences_per_step()) + ", nothing to do";
}

std::string first_non_finite_layer(const GptModel& model, std::span<const std::int32_t> inputs,
                                   std::int64_t B, std::int64_t T) {
  const GptConfig& cfg = model.config();
  GptOptions o;
  o.dtype = model.options().dtype;
  // The prefix of k blocks as the first of two stages: its stage_output() is block k-1's. The
  // prefix is cut from a model of k + 1 blocks, so that a second stage exists even when k is
  // the whole stack (n_layer = 1 included); its parameters are copied from `model` by name.
  for (std::int64_t k = 1; k <= cfg.n_layer; ++k) {
    GptOptions po = o;
    po.stage = GptStage{0, 2, 0, k};
    GptConfig prefix_cfg = cfg;
    prefix_cfg.n_layer = k + 1;
    GptModel prefix(prefix_cfg, po);
    for (const NamedTensor& p : prefix.parameters()) {
      Tensor dst = p.tensor;
      dst.copy_from(model.param(p.name));
    }
    prefix.forward(inputs, {}, B, T);
    if (!ops::has_inf_or_nan(prefix.stage_output())) continue;
    if (k == 1 && (ops::has_inf_or_nan(model.param("wte.weight")) ||
                   ops::has_inf_or_nan(model.param("wpe.weight")))) {
      return "the embedding (wte + wpe)";
    }
    return "block " + num(k - 1) + " (h." + num(k - 1) + ")";
  }
  return "the final LayerNorm and head (ln_f, logits)";
}

}  // namespace mixpar::ch08
