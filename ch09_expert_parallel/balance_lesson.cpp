// Chapter 9's lesson, second half: load balancing, the aux loss's gradient scaling, and the
// failure modes of expert parallelism (--bug ...). Every number printed is measured.
#include "ch09_expert_parallel/moe_lesson.h"
#include "ch09_expert_parallel/lesson_measures.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>

#include "ch09_expert_parallel/aux_loss_scale.h"
#include "ch09_expert_parallel/capacity.h"
#include "ch09_expert_parallel/expert_mesh.h"
#include "ch09_expert_parallel/grouped_gemm.h"
#include "ch09_expert_parallel/moe_layer.h"
#include "ch09_expert_parallel/permutation.h"
#include "ch09_expert_parallel/router.h"
#include "comm/local_backend.h"
#include "model/block_linear.h"
#include "model/layers.h"
#include "ops/fixed_order.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "random/philox.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/errors.h"

namespace mixpar::ch09 {

namespace {

// A large alpha and gamma: the toy must balance within its few steps (Switch uses 1e-2 over
// a whole training run, DeepSeek-V3 1e-3 per step).
constexpr double kAuxAlpha = 1.0, kBiasGamma = 0.02;

struct LoadShares {
  double first = 0, last = 0;  // the largest expert's share of the tokens, first and last step
  std::vector<std::vector<double>> counts;  // [step][E] the tokens each expert chose (the figure)
};

// Trains the layer (top-1, Switch gates) for `steps` SGD steps on y* = x A.
LoadShares train_max_load(bool aux, bool bias, int steps) {
  MoeConfig c = lesson_config();
  c.top_k = 1;
  c.normalize_gates = false;
  c.aux_loss_coef = aux ? kAuxAlpha : 0;
  c.bias_update_rate = bias ? kBiasGamma : 0;
  MoeLayer layer(c, {});
  const std::int64_t T = 256, C = c.d_model;
  const Tensor x = lesson_tokens(T, C, 61, 0.5f);
  const Tensor a = normal({C, C}, 62, 0.25f);
  Tensor target = Tensor::empty({T, C}, DType::kF32);
  ops::matmul(x, a, target);
  LoadShares shares;
  const float lr = 0.05f;
  for (int step = 0; step < steps; ++step) {
    const Tensor y = layer.forward(x);
    Tensor dy = Tensor::empty({T, C}, DType::kF32);
    for (std::int64_t i = 0; i < T * C; ++i) {
      dy.data_as<float>()[i] = (y.data_as<float>()[i] - target.data_as<float>()[i]) / float(T);
    }
    MoeBackwardOptions o;
    o.aux_seed = aux_grad_seed(c.aux_loss_coef, {});
    layer.backward(dy, o);
    if (bias) layer.update_bias();
    sgd(layer.router_weight(), layer.router_grad(), lr);
    ExpertWeights& w = layer.experts();
    const ExpertWeights& g = layer.expert_grads();
    sgd(w.fc_w, g.fc_w, lr), sgd(w.fc_b, g.fc_b, lr), sgd(w.proj_w, g.proj_w, lr), sgd(w.proj_b, g.proj_b, lr);
    const std::vector<double>& counts = layer.stats().balance.counts;
    shares.last = *std::max_element(counts.begin(), counts.end()) / double(T);
    shares.counts.push_back(counts);
    if (step == 0) shares.first = shares.last;
  }
  return shares;
}

constexpr int kBalanceSteps = 150;

}  // namespace

Section load_balancing() {
  Section s;
  s.title = "Load balancing: router collapse, the aux loss, the aux-loss-free bias";
  const LoadShares n = train_max_load(false, false, kBalanceSteps);
  const LoadShares a = train_max_load(true, false, kBalanceSteps);
  const LoadShares b = train_max_load(false, true, kBalanceSteps);
  const double none = n.last, aux = a.last, bias = b.last;
  TextTable t({"balancing", "largest share, step 1", "after " + num(kBalanceSteps) + " steps"});
  t.add({"none", fmt("%.1f%%", 100 * n.first), fmt("%.1f%%", 100 * none)});
  t.add({fmt("Switch aux loss, alpha %g", kAuxAlpha), fmt("%.1f%%", 100 * a.first), fmt("%.1f%%", 100 * aux)});
  t.add({fmt("DeepSeek-V3 bias, gamma %g", kBiasGamma), fmt("%.1f%%", 100 * b.first), fmt("%.1f%%", 100 * bias)});
  s.text = "E 4, top-1 with Switch gates (g = p), 256 tokens sharing a direction, the router and\n"
           "the experts trained by SGD on y* = x A; balanced is 25%\n" + t.str();
  s.claims.push_back({"without balancing training sends (nearly) every token to one expert", ">= 90%",
                      fmt("%.1f%%", 100 * none), none >= 0.9});
  s.claims.push_back({"with the aux loss the largest share is at most twice the mean", "<= 50%",
                      fmt("%.1f%%", 100 * aux), aux <= 0.5});
  s.claims.push_back({"with the expert bias the largest share is at most twice the mean", "<= 50%",
                      fmt("%.1f%%", 100 * bias), bias <= 0.5});
  s.claims.push_back(claim_broken_by(
      "router-collapse", {"router-collapse run (no balancing): the largest share is at most twice the mean",
                          "<= 50%", fmt("%.1f%%", 100 * none), none <= 0.5}));
  Json runs = Json::array();
  for (const auto& [name, coef, shares] :
       {std::tuple{"none", 0.0, &n}, std::tuple{"aux loss", kAuxAlpha, &a},
        std::tuple{"expert bias", kBiasGamma, &b}}) {
    Json per_step = Json::array();
    for (const std::vector<double>& step : shares->counts) {
      Json row = Json::array();
      for (double v : step) row.push_back(v);
      per_step.push_back(std::move(row));
    }
    Json j = Json::object();
    j.set("balancing", name);
    j.set("coefficient", coef);
    j.set("tokens_per_expert", std::move(per_step));
    runs.push_back(std::move(j));
  }
  Json fig = Json::object();
  fig.set("experts", lesson_config().n_experts);
  fig.set("steps", kBalanceSteps);
  fig.set("runs", std::move(runs));
  s.figure = Json::object();
  s.figure.set("load_balancing", std::move(fig));
  return s;
}

namespace {

// The router's input gradient from the aux loss alone (dy = 0) on T tokens split over `tp`
// sequence-parallel ranks (statistics reduced over them); rows concatenated in rank order.
std::vector<float> aux_input_grad(int tp, bool local_tokens) {
  MoeConfig c = lesson_config();
  c.aux_loss_coef = 1e-2;
  const std::int64_t T = 32, C = c.d_model;
  const Tensor x = lesson_tokens(T, C, 71, 1.0f);
  std::vector<std::vector<float>> parts(static_cast<std::size_t>(tp));
  run_local(tp, [&](Communicator& comm) {
    MoeLayer layer(c, {nullptr, &comm, DispatchKind::kAllToAll});
    const std::int64_t Tl = T / tp;
    const Tensor xl = x.rows(comm.rank() * Tl, Tl).clone();
    layer.forward(xl);
    MoeBackwardOptions o;
    o.aux_seed = aux_grad_seed(c.aux_loss_coef, {});
    if (local_tokens) o.aux_tokens = double(Tl);
    parts[std::size_t(comm.rank())] = layer.backward(Tensor::zeros({Tl, C}, DType::kF32), o).to_floats();
  });
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The router's weight gradient from the aux loss of `m` micro-batches of the same tokens,
// accumulated with the rule's seed (divided by m or not), at loss scale `scale`.
std::vector<float> aux_router_grad(int m, bool divide, float scale) {
  MoeConfig c = lesson_config();
  c.aux_loss_coef = 1e-2;
  MoeLayer layer(c, {});
  const Tensor x = lesson_tokens(32, c.d_model, 72, 1.0f);
  for (int i = 0; i < m; ++i) {
    layer.forward(x);
    MoeBackwardOptions o;
    o.aux_seed = aux_grad_seed(c.aux_loss_coef, {scale, divide ? m : 1});
    o.accumulate = i > 0;
    layer.backward(Tensor::zeros({32, c.d_model}, DType::kF32), o);
  }
  return layer.router_grad().to_floats();
}

double ratio(const std::vector<float>& a, const std::vector<float>& b) {
  double na = 0, nb = 0;
  for (float v : a) na += double(v) * v;
  for (float v : b) nb += double(v) * v;
  return std::sqrt(na / nb);
}

}  // namespace

Section aux_loss_scaling() {
  Section s;
  s.title = "The aux loss's gradient is scaled like the main loss";
  const std::vector<float> one = aux_router_grad(1, true, 1.0f);
  const std::vector<float> four = aux_router_grad(4, true, 1.0f);
  const std::vector<float> four_bug = aux_router_grad(4, false, 1.0f);
  const std::vector<float> scaled = aux_router_grad(1, true, 1024.0f);
  std::vector<float> unscaled = scaled;
  for (float& v : unscaled) v /= 1024.0f;
  const std::vector<float> tp1 = aux_input_grad(1, false);
  TextTable t({"case", "aux gradient norm / one batch's, tp 1's"});
  t.add({"4 micro-batches, seed / 4", fmt("%.6f", ratio(four, one))});
  t.add({"4 micro-batches, seed not divided", fmt("%.6f", ratio(four_bug, one))});
  bool tp_equal = true, tp_bug_grows = true;
  double worst_tp = 1;
  for (int tp : {2, 4}) {
    const std::vector<float> good = aux_input_grad(tp, false), bad = aux_input_grad(tp, true);
    tp_equal = tp_equal && same_bits(good, tp1);
    tp_bug_grows = tp_bug_grows && std::abs(ratio(bad, tp1) - tp) < 1e-4 * tp;
    worst_tp = std::max(worst_tp, ratio(bad, tp1));
    t.add({"tp " + num(tp) + ", the group's T", fmt("%.6f", ratio(good, tp1))});
    t.add({"tp " + num(tp) + ", the rank's own T", fmt("%.6f", ratio(bad, tp1))});
  }
  s.text = "seed = coef x loss_scale / micro_batches, with T the tokens of the ranks that share the\n"
           "statistics (aux_loss_scale.h); the router's gradients from the aux loss alone:\n" + t.str();
  const double m_err = rel_diff(four, one);
  s.claims.push_back(tolerance_claim("4 micro-batches with seed/4 give one batch's aux gradient", m_err, 1e-6));
  s.claims.push_back(yes_claim("at loss scale 1024 the aux gradient is exactly 1024 x, unscaled bitwise",
                               same_bits(unscaled, one)));
  s.claims.push_back(yes_claim("the aux gradient of every token is the same at tp 1, 2, 4, bit for bit", tp_equal));
  s.claims.push_back(yes_claim("dividing by the rank's own T makes it tp times larger", tp_bug_grows));
  const double bug_err = rel_diff(four_bug, one);
  s.claims.push_back(claim_broken_by(
      "aux-not-divided", {"aux-not-divided run: 4 micro-batches give one batch's aux gradient",
                          "<= 1e-06", fmt("%.2e", bug_err), bug_err <= 1e-6}));
  s.claims.push_back(claim_broken_by(
      "aux-local-tokens", {"aux-local-tokens run: the aux gradient does not grow with tp",
                           "1.000000 x", fmt("%.6f x", worst_tp), std::abs(worst_tp - 1) <= 1e-6}));
  return s;
}

// ---- Failure modes of expert parallelism.

std::vector<std::string> bug_names() {
  return {"router-collapse", "capacity-overflow", "aux-not-divided", "aux-local-tokens",
          "bias-counts-local", "expert-grads-wrong-group"};
}

namespace {

Section bias_counts_local_section() {
  Section s;
  s.title = "--bug bias-counts-local: each rank updates its expert bias from its own counts";
  const MoeConfig c = ep_config();
  EpRunOptions o;
  o.ep = 2;
  const EpRun good = run_expert_parallel(c, o);
  o.bias_counts_reduced = false;
  const EpRun bad = run_expert_parallel(c, o);
  const auto differing = [](const EpRun& r) {
    int n = 0;
    for (const auto& b : r.bias) n += same_bits(b, r.bias[0]) ? 0 : 1;
    return n;
  };
  TextTable t({"counts", "ranks whose bias differs from rank 0's"});
  t.add({"reduced over dp", num(differing(good))});
  t.add({"local", num(differing(bad))});
  s.text = "dp 4, ep 2: the bias only chooses experts, but every replica must choose alike\n" + t.str();
  s.claims.push_back(yes_claim("with reduced counts every rank holds the same bias", differing(good) == 0));
  s.claims.push_back(claim_broken_by(
      "bias-counts-local", {"bias-counts-local run: every rank holds the same bias", "0 differ",
                            num(differing(bad)) + " differ", differing(bad) == 0}));
  return s;
}

Section expert_grads_wrong_group_section() {
  Section s;
  s.title = "--bug expert-grads-wrong-group: expert gradients summed over dp instead of edp";
  const MoeConfig c = ep_config();
  EpRunOptions o;
  const EpRun ref = run_expert_parallel(c, o);
  o.ep = 2;
  const EpRun good = run_expert_parallel(c, o);
  o.expert_grads_over_dp = true;
  const EpRun bad = run_expert_parallel(c, o);
  const double g = compare(good, ref).expert_rel, b = compare(bad, ref).expert_rel;
  TextTable t({"expert gradients summed over", "max relative difference from ep 1"});
  t.add({"edp (the ranks holding the same experts)", fmt("%.2e", g)});
  t.add({"dp (every rank: other experts' gradients added in)", fmt("%.2e", b)});
  s.text = "dp 4, ep 2, edp 2\n" + t.str();
  s.claims.push_back(tolerance_claim("summed over edp, expert gradients equal ep 1's", g, kExpertGradBound));
  s.claims.push_back(claim_broken_by(
      "expert-grads-wrong-group",
      tolerance_claim("expert-grads-wrong-group run: expert gradients equal ep 1's", b, kExpertGradBound)));
  return s;
}

}  // namespace

Section bug_section(const std::string& name) {
  if (name == "router-collapse") return load_balancing();
  if (name == "capacity-overflow") return capacity_and_dropping();
  if (name == "aux-not-divided" || name == "aux-local-tokens") return aux_loss_scaling();
  if (name == "bias-counts-local") return bias_counts_local_section();
  if (name == "expert-grads-wrong-group") return expert_grads_wrong_group_section();
  throw InputError("--bug: '" + name + "' is not one of all|none|router-collapse|capacity-overflow|"
                   "aux-not-divided|aux-local-tokens|bias-counts-local|expert-grads-wrong-group");
}

}  // namespace mixpar::ch09
