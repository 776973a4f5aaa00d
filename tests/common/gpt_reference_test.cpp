// GptModel against PyTorch: tests/data/gpt_fixture/fixture.safetensors, written by
// scripts/make_gpt_fixture.py (a tiny GPT-2 in torch, float64), holds the weights, a batch, the
// logits, the loss, every gradient and the losses of 3 AdamW steps. No Python runs here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/gpt.h"
#include "ops_test_util.h"
#include "optim/adamw.h"

namespace mixpar {
namespace {

using testing::to_doubles;

std::string fixture_path() {
  // tests/data/, as the build names it (tests/common/CMakeLists.txt); without that setting,
  // found beside this file (tests/common/ -> tests/data/).
#ifdef MIXPAR_TEST_DATA_DIR
  const std::filesystem::path data = MIXPAR_TEST_DATA_DIR;
#else
  const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path().parent_path() / "data";
#endif
  return (data / "gpt_fixture" / "fixture.safetensors").string();
}

struct Fixture {
  SafetensorsReader file{fixture_path()};
  GptConfig config;
  std::int64_t B = 0, T = 0;
  std::vector<std::int32_t> tokens, targets;

  Fixture() {
    auto meta = [&](const char* key) {
      for (const auto& [k, v] : file.metadata()) {
        if (k == key) return std::stoll(v);
      }
      ADD_FAILURE() << "fixture metadata lacks " << key;
      return 0LL;
    };
    config = {meta("n_layer"), meta("n_head"), meta("n_embd"), meta("n_positions"),
              meta("vocab_size")};
    B = meta("B");
    T = meta("T");
    for (float f : load("tokens").to_floats()) tokens.push_back(static_cast<std::int32_t>(f));
    for (float f : load("targets").to_floats()) targets.push_back(static_cast<std::int32_t>(f));
  }
  Tensor load(const std::string& name) const { return file.load(name, MemCategory::kOther); }
  std::vector<double> doubles(const std::string& name) const { return to_doubles(load(name)); }

  // A model of `dtype` holding the fixture's weights, every one found by its HF name.
  GptModel model(DType dtype) const {
    GptOptions o;
    o.dtype = dtype;
    GptModel m(config, o);
    for (ParamEntry& e : m.registry().entries()) e.param.copy_from(load(e.name));
    return m;
  }
};

// max |a - b| <= tol * max(1, max |b|): an error bound relative to the tensor's scale.
void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 1, worst = 0;
  std::size_t at = 0;
  for (double v : b) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] - b[i]) > worst) worst = std::fabs(a[i] - b[i]), at = i;
  }
  EXPECT_LE(worst, tol * scale) << what << ": element " << at << " is " << a[at] << ", PyTorch has "
                                << b[at];
}

// Tolerances, relative to each tensor's largest magnitude (at least 1). f64: the same math in
// another summation order, <= 7e-16 measured. f32: FP32 rounding through 2 layers, measured
// <= 3e-7 on logits and loss and <= 7e-8 on gradients; the bounds leave a margin of ~10.
void check_forward_backward(const Fixture& fx, DType dtype, double tol_out, double tol_grad) {
  GptModel m = fx.model(dtype);
  const double loss = m.forward(fx.tokens, fx.targets, fx.B, fx.T);
  const std::string tag = std::string(dtype_name(dtype)) + " ";
  EXPECT_NEAR(loss, fx.doubles("loss")[0], tol_out) << tag << "loss";
  expect_close(to_doubles(m.logits()), fx.doubles("logits"), tol_out, tag + "logits");
  m.backward();
  for (const ParamEntry& e : m.registry().entries()) {
    expect_close(to_doubles(e.grad), fx.doubles("grad." + e.name), tol_grad,
                 tag + "grad " + e.name);
  }
}

TEST(GptModel, MatchesPyTorchReference) {
  const Fixture fx;
  ASSERT_EQ(fx.config, (GptConfig{2, 4, 32, 16, 64}));
  ASSERT_EQ(fx.file.entries().size(), 2 * make_gpt2_registry(fx.config).entries().size() + 6);
  check_forward_backward(fx, DType::kF64, 1e-14, 1e-14);
  check_forward_backward(fx, DType::kF32, 3e-6, 1e-6);
}

// Three AdamW steps (common/optim/adamw.h) on the same batch, weight decay from the registry's
// flag (2-D tensors only) as in the script's two parameter groups. FP32 model and update
// against float64 PyTorch: losses within 5e-7 measured, bound 5e-6.
TEST(GptModel, MatchesPyTorchReferenceOverThreeAdamWSteps) {
  const Fixture fx;
  for (const double wd : {0.0, 0.1}) {
    GptModel m = fx.model(DType::kF32);
    std::vector<Tensor> decay_p, decay_g, rest_p, rest_g;
    for (const ParamEntry& e : m.registry().entries()) {
      (e.weight_decay ? decay_p : rest_p).push_back(e.param);
      (e.weight_decay ? decay_g : rest_g).push_back(e.grad);
    }
    AdamW decay(decay_p, {.lr = 1e-3, .weight_decay = wd});
    AdamW rest(rest_p, {.lr = 1e-3, .weight_decay = 0.0});
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      losses.push_back(m.forward(fx.tokens, fx.targets, fx.B, fx.T));
      m.backward();
      decay.step(decay_g);
      rest.step(rest_g);
    }
    losses.push_back(m.forward(fx.tokens, fx.targets, fx.B, fx.T));
    const std::vector<double> want =
        fx.doubles(wd == 0.0 ? "adamw.wd0.losses" : "adamw.wd0.1.losses");
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(losses[i], want[i], 5e-6) << "wd " << wd << ", loss after " << i << " steps";
    }
  }
}

}  // namespace
}  // namespace mixpar
