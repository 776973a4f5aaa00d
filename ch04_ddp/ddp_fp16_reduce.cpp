// The fp16-reduce failure mode, measured: FP16 gradients scaled so that each rank's fit in
// FP16 but their sum over ranks does not, reduced once in FP32 (then averaged and rounded)
// and once in FP16, each followed by chapter 3's mixed-precision optimizer step.
#include <cmath>

#include "ch03_master_weights/mixed_precision_optimizer.h"
#include "comm/local_backend.h"
#include "ddp_scenarios.h"
#include "io/token_loader.h"
#include "ops/compute_threads.h"
#include "report/format.h"
#include "report/text_table.h"

namespace mixpar::ch04 {


namespace {

constexpr double kFp16Max = 65504.0;

std::vector<Tensor> tensors(const std::vector<NamedTensor>& named) {
  std::vector<Tensor> out;
  for (const NamedTensor& n : named) out.push_back(n.tensor);
  return out;
}

float max_abs(const Tensor& t) {
  float m = 0;
  for (float v : t.to_floats()) m = std::isnan(v) ? v : std::max(m, std::abs(v));
  return m;
}

float all_max(Communicator& comm, float v) {
  Tensor t = Tensor::from_floats({&v, 1}, {1});
  comm.all_reduce(t, ReduceOp::kMax);
  return t.item();
}

GptOptions f16_options(const LessonConfig& c) {
  GptOptions o;
  o.dtype = DType::kF16;
  o.seed = c.seed;
  return o;
}

// The scale S with max_r |S g_r| < 65504 < max |S sum_r g_r|: the geometric middle of the
// interval, from an unscaled probe backward. Sets m.local_max/sum_max to the scaled maxima.
double choose_scale(Communicator& comm, const LessonConfig& c, const TokenBatch& b,
                    Fp16ReduceMeasure& m) {
  GptModel probe(c.model, f16_options(c));
  probe.forward(b.inputs, b.targets, b.B, b.T);
  probe.backward(1.0f);
  Tensor g = probe.registry().flat_grads().to(DType::kF32);
  const double local = all_max(comm, max_abs(g));
  comm.all_reduce(g);
  const double sum = max_abs(g);
  const double scale = kFp16Max / std::sqrt(local * sum);
  m.sum_max = sum * scale;
  return scale;
}

// One DDP step of a fresh FP16 model: backward at `scale`, the reduction, the optimizer.
void one_step(Communicator& comm, const LessonConfig& c, const TokenBatch& b, double scale,
              bool fp32_reduce, Fp16ReduceMeasure& m) {
  GptModel model(c.model, f16_options(c));
  DdpConfig d = c.ddp;
  d.reducer.reduce_in_fp32 = fp32_reduce;
  DistributedDataParallel ddp(model, comm, d);
  ch03::MixedPrecisionConfig mc;
  mc.scaler = ch02::static_config(scale);
  ch03::MixedPrecisionOptimizer opt(tensors(model.parameters()), tensors(model.gradients()), mc);
  ddp.forward(b.inputs, b.targets, b.B, b.T);
  ddp.backward(static_cast<float>(scale), /*sync=*/false);  // this rank's own gradients
  const float local = all_max(comm, max_abs(model.registry().flat_grads()));
  ddp.reduce_gradients();
  const bool inf = ch02::LossScaler::found_inf(std::vector<Tensor>{model.registry().flat_grads()});
  const bool taken = opt.step().taken;
  if (fp32_reduce) {
    m.local_max = local;
    m.fp32_inf = inf;
    m.fp32_taken = taken;
  } else {
    m.fp16_inf = inf;
    m.fp16_taken = taken;
  }
}

}  // namespace

Fp16ReduceMeasure measure_fp16_reduce(int ranks, const LessonConfig& base) {
  const Tokens tokens = lesson_tokens(base.data_seed);
  std::vector<Fp16ReduceMeasure> per_rank(static_cast<std::size_t>(ranks));
  run_local(ranks, [&](Communicator& comm) {
    ops::set_compute_threads(base.threads_per_rank > 0 ? base.threads_per_rank : 1);
    TokenLoader loader(tokens, base.B, base.T, DataOrder::kSequential, base.data_seed, comm.rank(),
                       comm.size());
    const TokenBatch b = loader.next();
    Fp16ReduceMeasure& m = per_rank[static_cast<std::size_t>(comm.rank())];
    m.scale = choose_scale(comm, base, b, m);
    one_step(comm, base, b, m.scale, true, m);
    one_step(comm, base, b, m.scale, false, m);
  });
  return per_rank[0];
}

ScenarioResult fp16_reduce_scenario(int ranks, const LessonConfig& base) {
  const Fp16ReduceMeasure m = measure_fp16_reduce(ranks, base);
  ScenarioResult r;
  r.name = "fp16-reduce";
  r.title = fmt("%d ranks all-reduce FP16 gradients scaled by %.0f in FP16", ranks, m.scale);
  r.symptom = "the sum overflows to inf: every rank skips a step an FP32 reduction keeps";
  TextTable t({"reduction", "max |scaled grad| per rank", "max |sum|", "inf after reduce", "step"});
  t.add({"FP32 bucket (correct)", fmt("%.0f", m.local_max), fmt("%.0f", m.sum_max),
         m.fp32_inf ? "yes" : "no", m.fp32_taken ? "taken" : "skipped"});
  t.add({"FP16 in place (bug)", fmt("%.0f", m.local_max), fmt("%.0f", m.sum_max),
         m.fp16_inf ? "yes" : "no", m.fp16_taken ? "taken" : "skipped"});
  r.table = t.str();
  r.claims.push_back({"each rank's scaled gradients fit in FP16", "< 65504",
                      fmt("%.0f", m.local_max), m.local_max < kFp16Max});
  r.claims.push_back(
      {"their sum over ranks does not", "> 65504", fmt("%.0f", m.sum_max), m.sum_max > kFp16Max});
  r.claims.push_back({"FP32 reduction: finite, step taken", "finite, taken",
                      m.fp32_inf ? "inf" : (m.fp32_taken ? "finite, taken" : "skipped"),
                      !m.fp32_inf && m.fp32_taken});
  r.claims.push_back({"FP16 reduction: inf, step skipped", "inf, skipped",
                      m.fp16_inf ? (m.fp16_taken ? "inf, taken" : "inf, skipped") : "finite",
                      m.fp16_inf && !m.fp16_taken});
  r.claims.push_back(claim_broken_by(
      "fp16-reduce",
      {"fp16-reduce run: the reduced gradients are finite, the step taken", "finite, taken",
       m.fp16_inf ? (m.fp16_taken ? "inf, taken" : "inf, skipped") : "finite",
       !m.fp16_inf && m.fp16_taken}));
  return r;
}

}  // namespace mixpar::ch04
