// Load balancing and the layer's gradients: the whole backward (gates, softmax, aux loss,
// z-loss, experts, input) against finite differences; the aux loss's values; router collapse
// without balancing; the bias that only chooses; and the aux gradient's scaling rule with its
// two failure modes (not divided over micro-batches, growing with tp).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "ch09_expert_parallel/load_balance.h"
#include "ch09_expert_parallel/moe_layer.h"
#include "ch09_expert_parallel/top_k.h"
#include "ch09_test_util.h"

namespace mixpar::ch09 {
namespace {

using testing::claim_of;
using testing::expect_section_holds;

// L = <dy, y> + aux_coef L_aux + z_coef L_z, in double, for the layer's current weights.
double layer_loss(MoeLayer& layer, const Tensor& x, const Tensor& dy) {
  const std::vector<float> y = layer.forward(x).to_floats(), d = dy.to_floats();
  double l = 0;
  for (std::size_t i = 0; i < y.size(); ++i) l += double(y[i]) * d[i];
  const MoeConfig& c = layer.config();
  return l + c.aux_loss_coef * layer.stats().aux_loss + c.z_loss_coef * layer.stats().z_loss;
}

// (L(p + h) - L(p - h)) / 2h for element i of p.
double central_difference(MoeLayer& layer, const Tensor& x, const Tensor& dy, Tensor p, std::int64_t i) {
  const float h = 1e-2f, v = p.data_as<float>()[i];
  p.data_as<float>()[i] = v + h;
  const double up = layer_loss(layer, x, dy);
  p.data_as<float>()[i] = v - h;
  const double down = layer_loss(layer, x, dy);
  p.data_as<float>()[i] = v;
  return (up - down) / (2.0 * double(h));
}

// A pipeline runs several micro-batches' forwards before their backwards (chapter 7): each
// forward's state kept under its slot, the backwards in reverse order give each micro-batch
// its own input gradient and the same accumulated weight gradients as one forward-backward
// after another (bit for bit: the same products, added in the same order by the same
// backwards); a slot is freed by its backward.
TEST(MoeGradients, EachSlotKeepsItsForwardUntilItsBackwardInAnyOrder) {
  MoeConfig c = lesson_config();
  c.aux_loss_coef = 0.5;
  c.z_loss_coef = 0.1;
  const Tensor x[] = {lesson_tokens(12, c.d_model, 5), lesson_tokens(12, c.d_model, 6)};
  const Tensor dy[] = {lesson_tokens(12, c.d_model, 7), lesson_tokens(12, c.d_model, 8)};
  MoeBackwardOptions o;
  o.aux_seed = float(c.aux_loss_coef);
  o.z_seed = float(c.z_loss_coef);
  // One after another, the second micro-batch's backward first (so the sums' order matches).
  MoeLayer serial(c, {});
  std::vector<float> dx_serial[2];
  for (int i : {1, 0}) {
    serial.forward(x[i]);
    o.accumulate = i == 0;
    dx_serial[i] = serial.backward(dy[i], o).to_floats();
  }
  MoeLayer in_flight(c, {});
  in_flight.forward(x[0], 0);
  in_flight.forward(x[1], 1);
  EXPECT_EQ(in_flight.slots_in_flight(), 2u);
  o.accumulate = false;
  EXPECT_EQ(in_flight.backward(dy[1], o, 1).to_floats(), dx_serial[1]);
  o.accumulate = true;
  EXPECT_EQ(in_flight.backward(dy[0], o, 0).to_floats(), dx_serial[0]);
  EXPECT_EQ(in_flight.slots_in_flight(), 0u);
  EXPECT_EQ(in_flight.router_grad().to_floats(), serial.router_grad().to_floats());
  EXPECT_EQ(in_flight.expert_grads().fc_w.to_floats(), serial.expert_grads().fc_w.to_floats());
  EXPECT_EQ(in_flight.expert_grads().proj_b.to_floats(), serial.expert_grads().proj_b.to_floats());
  EXPECT_THROW(in_flight.backward(dy[0], o, 0), std::logic_error);
}

TEST(MoeGradients, RouterExpertAndInputGradientsMatchFiniteDifferences) {
  for (bool normalize : {true, false}) {
    MoeConfig c = lesson_config();
    c.normalize_gates = normalize;
    c.aux_loss_coef = 0.5;
    c.z_loss_coef = 0.1;
    MoeLayer layer(c, {});
    const Tensor x = lesson_tokens(12, c.d_model, 3), dy = lesson_tokens(12, c.d_model, 4);
    layer.forward(x);
    MoeBackwardOptions o;
    o.aux_seed = float(c.aux_loss_coef);
    o.z_seed = float(c.z_loss_coef);
    const std::vector<float> dx = layer.backward(dy, o).to_floats();
    const std::vector<float> dr = layer.router_grad().to_floats();
    const std::vector<float> dfc = layer.expert_grads().fc_w.to_floats();
    const auto check = [&](const char* what, const Tensor& in, Tensor p,
                           const std::vector<float>& analytic) {
      for (std::int64_t i = 0; i < p.numel(); i += 7) {
        const double fd = central_difference(layer, in, dy, p, i);
        EXPECT_NEAR(analytic[std::size_t(i)], fd, 2e-3 + 2e-2 * std::abs(fd))
            << what << "[" << i << "], normalised gates " << normalize;
      }
    };
    check("router", x, layer.router_weight(), dr);
    check("expert c_fc", x, layer.experts().fc_w, dfc);
    const Tensor xc = x.clone();  // perturbed in place: the input itself
    check("x", xc, xc, dx);
  }
}

TEST(AuxLoss, IsOneWhenBalancedAndEWhenOneExpertTakesAll) {
  BalanceStats s;
  s.tokens = 8;
  s.counts = {4, 4, 4, 4};      // top-2 over 4 experts, 8 tokens: 16 choices
  s.prob_sums = {2, 2, 2, 2};
  EXPECT_DOUBLE_EQ(aux_loss(s, 2), 1.0);
  s.counts = {8, 0, 0, 0};
  s.prob_sums = {8, 0, 0, 0};
  EXPECT_DOUBLE_EQ(aux_loss(s, 1), 4.0);
}

TEST(ExpertBias, OnlyChoosesTheExpertsTheGatesStayTheProbabilities) {
  const std::vector<float> p = {0.5f, 0.3f, 0.2f};
  const Tensor probs = Tensor::from_floats(p, {1, 3});
  const std::vector<float> bias = {0.0f, 0.0f, 0.4f};
  const Routing r = select_top_k(probs, bias, 1, false);
  EXPECT_EQ(r.expert[0], 2);  // 0.2 + 0.4 beats 0.5
  EXPECT_EQ(r.gate[0], 0.2f);
  std::vector<float> b = {0, 0, 0};
  update_expert_bias(b, std::vector<double>{6, 3, 0}, 0.25f);  // mean 3
  EXPECT_EQ(b, (std::vector<float>{-0.25f, 0.0f, 0.25f}));
}

TEST(RouterCollapse, WithoutBalancingTopOneSendsNearlyEveryTokenToOneExpert) {
  const Section s = load_balancing();
  expect_section_holds(s);
  EXPECT_TRUE(claim_of(s, "without balancing").ok);
  EXPECT_FALSE(claim_of(s, "router-collapse run").ok);
}

TEST(AuxLossScaling, DividedOverMicroBatchesScaledByTheLossScaleAndNotGrowingWithTp) {
  const Section s = aux_loss_scaling();
  expect_section_holds(s);
  EXPECT_FALSE(claim_of(s, "aux-not-divided run").ok);   // undivided: 4 x
  EXPECT_FALSE(claim_of(s, "aux-local-tokens run").ok);  // the rank's own T: tp x
}

}  // namespace
}  // namespace mixpar::ch09
