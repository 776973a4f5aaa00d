#include "ch08_model_flops/model_flops.h"

namespace mixpar::exercises {

double step_model_flops(const FlopsLayout& l) {
  const auto C = static_cast<double>(l.n_embd), L = static_cast<double>(l.n_layer);
  const std::int64_t padded = (l.vocab + l.tp - 1) / l.tp * l.tp;
  const auto V = static_cast<double>(padded);
  // Block GEMM weights: 3C^2 + C^2 + 4C^2 + 4C^2 = 12 C^2; the tied LM head V' C.
  const double per_token = 6.0 * (12.0 * L * C * C + V * C) + 6.0 * L * C * static_cast<double>(l.seq);
  const double tokens = static_cast<double>(l.batch) * static_cast<double>(l.seq) *
                        static_cast<double>(l.grad_accum) * static_cast<double>(l.dp);
  return per_token * tokens;
}

double mfu(double flops_per_step, double step_seconds, double peak_flops_per_s) {
  return flops_per_step / step_seconds / peak_flops_per_s;
}

}  // namespace mixpar::exercises
