// FP8 linear layers through the GEMM seam (fp8_linear.h).
#include "ch03_master_weights/fp8_linear.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "util/errors.h"

namespace mixpar::fp8 {
namespace {

constexpr std::int64_t kTile = 128;  // DeepSeek-V3's tile and block edge

// m [rows x cols] as [cols x rows].
std::vector<float> transposed(std::span<const float> m, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(m.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) t[std::size_t(c * rows + r)] = m[std::size_t(r * cols + c)];
  }
  return t;
}

// out = round(c (+ out when accumulate)) into out's dtype, once.
void store(const std::vector<float>& c, Tensor& out, bool accumulate) {
  std::vector<float> v = c;
  if (accumulate) {
    const std::vector<float> old = out.to_floats();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = old[i] + v[i];
  }
  out.copy_from(Tensor::from_floats(v, out.shape(), DType::kF32));
}

}  // namespace

Fp8BlockGemms::Fp8BlockGemms(Fp8LinearConfig config, std::int64_t n_layer)
    : config_(config), n_layer_(n_layer) {
  if (n_layer <= 0) throw InputError("FP8 GEMMs need a model with at least one block");
  stats_.tensors.assign(std::size_t(n_layer * kLinears * 3), CastStats{});
  stats_.scales.assign(stats_.tensors.size(), 0.0f);
  if (config_.recipe != Recipe::kDelayed) return;
  scalers_.reserve(std::size_t(n_layer * kLinears * 3));
  for (std::int64_t i = 0; i < n_layer * kLinears; ++i) {
    scalers_.emplace_back(DType::kE4M3, config_.amax_history, config_.margin);
    scalers_.emplace_back(DType::kE4M3, config_.amax_history, config_.margin);
    scalers_.emplace_back(DType::kE5M2, config_.amax_history, config_.margin);
  }
}

void Fp8BlockGemms::check_layer(std::int64_t layer) const {
  if (layer < 0 || layer >= n_layer_) {
    throw std::logic_error("Fp8BlockGemms: layer " + std::to_string(layer) + " of " +
                           std::to_string(n_layer_));
  }
}

DelayedScaler& Fp8BlockGemms::scaler(std::int64_t layer, Linear which, Role role) {
  return scalers_[std::size_t((layer * kLinears + std::int64_t(which)) * 3 + role)];
}

Fp8Matrix Fp8BlockGemms::cast(std::int64_t layer, Linear which, Role role,
                              std::span<const float> x, std::int64_t rows, std::int64_t cols,
                              bool weight_block) {
  check_layer(layer);
  Fp8Matrix m;
  switch (config_.recipe) {
    case Recipe::kDelayed: {
      DelayedScaler& d = scaler(layer, which, role);
      m = in_step_ ? d.quantize(x, rows, cols)
                   : quantize_with_scale(x, rows, cols, d.format(), d.scale());
      break;
    }
    case Recipe::kTensorwise: {
      const DType format = role == kGrad ? DType::kE5M2 : DType::kE4M3;
      if (tp_amax_) {  // this rank's shard: the scale of the whole tensor, its amax over tp
        m = quantize_with_scale(x, rows, cols, format, current_scale(tp_amax_(amax(x)), format));
      } else {
        m = quantize_current(x, rows, cols, format, rows, cols);
      }
      break;
    }
    case Recipe::kBlockwise:
      // E4M3 for every tensor: fine-grained scales make its range enough (DeepSeek-V3 §3.3.2).
      m = quantize_current(x, rows, cols, DType::kE4M3, weight_block ? kTile : 1, kTile);
      break;
  }
  if (in_step_) {
    CastStats& s = role == kInput ? stats_.input : role == kWeight ? stats_.weight : stats_.grad;
    s += m.stats;
    const std::size_t t = std::size_t((layer * kLinears + std::int64_t(which)) * 3 + role);
    stats_.tensors[t] += m.stats;
    stats_.scales[t] = config_.recipe == Recipe::kBlockwise ? 0.0f : m.scale[0];
  }
  return m;
}

void Fp8BlockGemms::forward(std::int64_t layer, Linear which, const Tensor& x, const Tensor& w,
                            const Tensor& b, Tensor& y) {
  const std::int64_t n = x.dim(0), in = x.dim(1), out = w.dim(1);
  const std::vector<float> xv = x.to_floats();
  const std::vector<float> wt = transposed(w.to_floats(), in, out);  // [out, in]: K-major
  const Fp8Matrix a = cast(layer, which, kInput, xv, n, in, false);
  const Fp8Matrix bm = cast(layer, which, kWeight, wt, out, in, true);
  std::vector<float> c = gemm(a, bm, recipe_gemm(config_.recipe));
  if (b.defined()) {  // none: a row-parallel partial product, its bias added after the sum
    const std::vector<float> bias = b.to_floats();
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < out; ++j) c[std::size_t(r * out + j)] += bias[std::size_t(j)];
    }
  }
  store(c, y, false);
}

void Fp8BlockGemms::backward_input(std::int64_t layer, Linear which, const Tensor& dy,
                                   const Tensor& w, Tensor& dx) {
  // dx [N, in] = dy [N, out] . w^T: K = out; w [in, out] is already K-major.
  const std::int64_t n = dy.dim(0), out = dy.dim(1), in = w.dim(0);
  const Fp8Matrix a = cast(layer, which, kGrad, dy.to_floats(), n, out, false);
  const Fp8Matrix bm = cast(layer, which, kWeight, w.to_floats(), in, out, true);
  store(gemm(a, bm, recipe_gemm(config_.recipe)), dx, false);
}

void Fp8BlockGemms::backward_weight(std::int64_t layer, Linear which, const Tensor& x,
                                    const Tensor& dy, Tensor& dw, bool accumulate) {
  // dw [in, out] = x^T . dy: K = N, the tokens; both operands transposed to K-major, their
  // blockwise tiles running along the tokens (128x1 of the activations).
  const std::int64_t n = x.dim(0), in = x.dim(1), out = dy.dim(1);
  const Fp8Matrix a = cast(layer, which, kInput, transposed(x.to_floats(), n, in), in, n, false);
  const Fp8Matrix bm = cast(layer, which, kGrad, transposed(dy.to_floats(), n, out), out, n, false);
  store(gemm(a, bm, recipe_gemm(config_.recipe)), dw, accumulate);
}

Fp8StepStats Fp8BlockGemms::end_step() {
  in_step_ = false;
  for (DelayedScaler& s : scalers_) s.update();
  Fp8StepStats out = stats_;
  if (!scalers_.empty()) {
    const DelayedScaler& first = scalers_[kInput];
    out.first_input_scale = first.scale();
    float m = 0;
    for (float a : first.history()) m = std::max(m, a);
    out.first_input_history_max = m;
  }
  stats_.input = stats_.weight = stats_.grad = CastStats{};
  std::fill(stats_.tensors.begin(), stats_.tensors.end(), CastStats{});
  std::fill(stats_.scales.begin(), stats_.scales.end(), 0.0f);
  stats_.first_input_scale = stats_.first_input_history_max = 0;
  return out;
}

std::vector<float> Fp8BlockGemms::pending_amaxes() const {
  std::vector<float> v;
  for (const DelayedScaler& s : scalers_) v.push_back(s.state().pending_amax);
  return v;
}

void Fp8BlockGemms::set_pending_amaxes(std::span<const float> amaxes) {
  if (amaxes.size() != scalers_.size()) {
    throw std::logic_error("Fp8BlockGemms: " + std::to_string(amaxes.size()) + " amaxes for " +
                           std::to_string(scalers_.size()) + " scalers");
  }
  for (std::size_t i = 0; i < scalers_.size(); ++i) {
    DelayedScaler::State st = scalers_[i].state();
    st.pending_amax = amaxes[i];
    scalers_[i].restore(st);
  }
}

std::vector<float> Fp8BlockGemms::state() const {
  std::vector<float> v;
  for (const DelayedScaler& s : scalers_) {
    const DelayedScaler::State st = s.state();
    v.insert(v.end(), st.history.begin(), st.history.end());
    v.push_back(st.scale);
    v.push_back(st.pending_amax);
  }
  return v;
}

void Fp8BlockGemms::restore(std::span<const float> values) {
  const std::size_t per = std::size_t(config_.amax_history) + 2;
  if (values.size() != per * scalers_.size()) {
    throw InputError("FP8 scaling state of " + std::to_string(values.size()) +
                     " values does not fit " + std::string(name(config_.recipe)) +
                     " scaling of " + std::to_string(n_layer_) + " layers with amax history " +
                     std::to_string(config_.amax_history));
  }
  for (std::size_t i = 0; i < scalers_.size(); ++i) {
    DelayedScaler::State st;
    const float* p = values.data() + i * per;
    st.history.assign(p, p + config_.amax_history);
    st.scale = p[config_.amax_history];
    st.pending_amax = p[config_.amax_history + 1];
    scalers_[i].restore(st);
  }
}

}  // namespace mixpar::fp8
