// The GPU layer kernels against the CPU layers they name (common/model/layers.h, common/ops):
// LayerNorm, GELU, residual and bias add, bias gradient, embedding, cross-entropy. Random
// inputs (never zeros), outputs poisoned with NaN before each run, tolerances per dtype from
// cuda_test_util.h. Each test skips, saying why, where no CUDA device is visible.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/kernels.h"
#include "cuda_test_util.h"
#include "model/layers.h"
#include "ops/linear.h"

namespace mixpar::cuda {
namespace {

using cuda_testing::all_close;
using cuda_testing::max_abs;
using cuda_testing::random_host;
using cuda_testing::tolerance_for;

constexpr DType kWorkingTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// A device copy of t whose values are then NaN-poisoned (for outputs), or kept (inputs).
DeviceTensor poisoned_like(const Tensor& t) {
  DeviceTensor d = DeviceTensor::empty(t.shape(), t.dtype());
  d.poison();
  return d;
}

std::vector<float> floats(const Tensor& t) { return t.to_floats(); }

TEST(CudaKernels, LayerNormForwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kWorkingTypes) {
    const std::int64_t N = 37, C = 200;
    const Tensor x = random_host({N, C}, dt, 11, 1.0f, 4.0f);  // a mean far from 0
    const Tensor w = random_host({C}, dt, 12, 0.5f, 1.5f), b = random_host({C}, dt, 13);
    Tensor out = Tensor::empty({N, C}, dt), mean = Tensor::empty({N}, DType::kF32);
    Tensor rstd = Tensor::empty({N}, DType::kF32);
    layers::layernorm_forward(x, w, b, out, mean, rstd);
    DeviceTensor dx = DeviceTensor::from_host(x), dw = DeviceTensor::from_host(w);
    DeviceTensor db = DeviceTensor::from_host(b), dout = poisoned_like(out);
    DeviceTensor dmean = poisoned_like(mean), drstd = poisoned_like(rstd);
    layernorm_forward(dx, dw, db, dout, dmean, drstd, nullptr);
    const std::string tag = std::string(dtype_name(dt));
    EXPECT_TRUE(all_close(dout.to_floats(), floats(out), tolerance_for(dt, 3.0), "out " + tag));
    EXPECT_TRUE(all_close(dmean.to_floats(), floats(mean), {1e-5, 1e-5}, "mean " + tag));
    EXPECT_TRUE(all_close(drstd.to_floats(), floats(rstd), {0, 1e-5}, "rstd " + tag));
  }
}

TEST(CudaKernels, LayerNormBackwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kWorkingTypes) {
    for (bool accumulate : {false, true}) {
      const std::int64_t N = 300, C = 96;  // 300 rows: two chunks in the column sums
      const Tensor x = random_host({N, C}, dt, 21, -2.0f, 3.0f);
      const Tensor w = random_host({C}, dt, 22, 0.5f, 1.5f), b = random_host({C}, dt, 23);
      const Tensor g = random_host({N, C}, dt, 24);
      Tensor y = Tensor::empty({N, C}, dt), mean = Tensor::empty({N}, DType::kF32);
      Tensor rstd = Tensor::empty({N}, DType::kF32);
      layers::layernorm_forward(x, w, b, y, mean, rstd);
      // dx is always added to; dw, db only when accumulating: start them from random values.
      Tensor dx = random_host({N, C}, dt, 25), dw = random_host({C}, dt, 26);
      Tensor dbias = random_host({C}, dt, 27);
      DeviceTensor d_dx = DeviceTensor::from_host(dx);
      DeviceTensor d_dw = DeviceTensor::from_host(dw), d_db = DeviceTensor::from_host(dbias);
      if (!accumulate) {
        d_dw.poison();
        d_db.poison();
      }
      layers::layernorm_backward(g, x, w, mean, rstd, dx, dw, dbias, accumulate);
      layernorm_backward(DeviceTensor::from_host(g), DeviceTensor::from_host(x),
                         DeviceTensor::from_host(w), DeviceTensor::from_host(mean),
                         DeviceTensor::from_host(rstd), d_dx, d_dw, d_db, accumulate, nullptr);
      const std::string tag = std::string(dtype_name(dt)) + (accumulate ? " accumulate" : "");
      EXPECT_TRUE(all_close(d_dx.to_floats(), floats(dx), tolerance_for(dt, 3.0), "dx " + tag));
      // Column sums over 300 rows: the absolute part grows with the sum's terms.
      EXPECT_TRUE(all_close(d_dw.to_floats(), floats(dw), tolerance_for(dt, 30.0), "dw " + tag));
      EXPECT_TRUE(all_close(d_db.to_floats(), floats(dbias), tolerance_for(dt, 30.0), "db " + tag));
    }
  }
}

TEST(CudaKernels, GeluForwardAndBackwardMatchCpuIncludingTheTails) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kWorkingTypes) {
    const std::int64_t n = 4099;  // not a multiple of the 16-byte packs: the tail runs too
    Tensor x = random_host({n}, dt, 31, -6.0f, 6.0f);
    x.flat_slice(0, 4).copy_from(
        Tensor::from_floats(std::vector<float>{-30.f, 30.f, -9.f, 12.f}, {4}));
    const Tensor g = random_host({n}, dt, 32);
    Tensor y = Tensor::empty({n}, dt), dx = Tensor::empty({n}, dt);
    layers::gelu_forward(x, y);
    layers::gelu_backward(x, g, dx);
    const DeviceTensor d_x = DeviceTensor::from_host(x), d_g = DeviceTensor::from_host(g);
    DeviceTensor d_y = poisoned_like(y), d_dx = poisoned_like(dx);
    gelu_forward(d_x, d_y, nullptr);
    gelu_backward(d_x, d_g, d_dx, nullptr);
    const std::string tag(dtype_name(dt));
    EXPECT_TRUE(all_close(d_y.to_floats(), floats(y), tolerance_for(dt, 6.0), "gelu " + tag));
    EXPECT_TRUE(all_close(d_dx.to_floats(), floats(dx), tolerance_for(dt, 6.0), "dgelu " + tag));
    // Misaligned views (offset by one element) take the scalar path and agree too.
    DeviceTensor d_y1 = poisoned_like(y).flat_slice(1, n - 1);
    gelu_forward(d_x.flat_slice(1, n - 1), d_y1, nullptr);
    const std::vector<float> want = floats(y);
    EXPECT_TRUE(all_close(d_y1.to_floats(), std::vector<float>(want.begin() + 1, want.end()),
                          tolerance_for(dt, 6.0), "gelu misaligned " + tag));
  }
}

// One FP32 addition rounded once, as on the CPU: bit-identical in every dtype.
TEST(CudaKernels, ResidualAndBiasAddMatchCpuBitForBitAlsoInPlace) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kWorkingTypes) {
    const Tensor a = random_host({33, 48}, dt, 41), b = random_host({33, 48}, dt, 42);
    Tensor sum = Tensor::empty({33, 48}, dt);
    layers::residual_forward(a, b, sum);
    DeviceTensor d_a = DeviceTensor::from_host(a), d_out = poisoned_like(sum);
    residual_forward(d_a, DeviceTensor::from_host(b), d_out, nullptr);
    const std::string tag(dtype_name(dt));
    EXPECT_TRUE(all_close(d_out.to_floats(), floats(sum), cuda_testing::kExact, "add " + tag));
    residual_forward(d_a, DeviceTensor::from_host(b), d_a, nullptr);  // out aliases a
    EXPECT_TRUE(
        all_close(d_a.to_floats(), floats(sum), cuda_testing::kExact, "add in place " + tag));

    const Tensor bias = random_host({48}, dt, 43);
    Tensor y = a.clone();
    ops::bias_add(y, bias);
    DeviceTensor d_y = DeviceTensor::from_host(a);
    bias_add(d_y, DeviceTensor::from_host(bias), nullptr);
    EXPECT_TRUE(all_close(d_y.to_floats(), floats(y), cuda_testing::kExact, "bias_add " + tag));
  }
}

TEST(CudaKernels, BiasGradMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kWorkingTypes) {
    for (bool accumulate : {false, true}) {
      const Tensor dy = random_host({700, 40}, dt, 51);  // three row chunks
      Tensor db = random_host({40}, dt, 52);
      DeviceTensor d_db = DeviceTensor::from_host(db);
      if (!accumulate) d_db.poison();
      ops::bias_grad(dy, db, accumulate);
      bias_grad(DeviceTensor::from_host(dy), d_db, accumulate, nullptr);
      EXPECT_TRUE(all_close(d_db.to_floats(), floats(db), tolerance_for(dt, 30.0),
                            std::string("db ") + std::string(dtype_name(dt))));
    }
  }
}

// The scatter-add visits each token's rows in the CPU's order and sums in FP32 like the CPU,
// rounding once: bit-identical in every dtype (as is the forward's single addition).
TEST(CudaKernels, EmbeddingForwardAndBackwardMatchCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const std::int64_t B = 3, T = 7, C = 64, V = 50, Vp = 64, P = 9;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::int32_t>((i * 7) % 11 + (i % 3) * 13);
  for (DType dt : kWorkingTypes) {
    const Tensor wte = random_host({V, C}, dt, 61), wpe = random_host({P, C}, dt, 62);
    Tensor out = Tensor::empty({B, T, C}, dt);
    layers::embedding_forward(tokens, wte, 0, &wpe, out);
    DeviceTensor d_wte = DeviceTensor::empty({Vp, C}, dt);  // padded like the model's
    d_wte.rows(0, V).copy_from_host(wte);
    d_wte.rows(V, Vp - V).zero();
    const DeviceIds ids = DeviceIds::upload(tokens);
    DeviceTensor d_out = poisoned_like(out);
    embedding_forward(ids, d_wte, DeviceTensor::from_host(wpe), d_out, nullptr);
    const std::string tag(dtype_name(dt));
    EXPECT_TRUE(all_close(d_out.to_floats(), floats(out), cuda_testing::kExact, "embed " + tag));

    for (bool accumulate : {false, true}) {
      const Tensor g = random_host({B, T, C}, dt, 63);
      Tensor dwte = random_host({V, C}, dt, 64), dwpe = random_host({P, C}, dt, 65);
      DeviceTensor d_dwte = DeviceTensor::empty({Vp, C}, dt);
      d_dwte.rows(0, V).copy_from_host(dwte);
      d_dwte.rows(V, Vp - V).zero();
      DeviceTensor d_dwpe = DeviceTensor::from_host(dwpe);
      layers::embedding_backward(tokens, g, 0, dwte, &dwpe, accumulate);
      const EmbeddingBuckets buckets = make_embedding_buckets(tokens, nullptr);
      embedding_backward(buckets, DeviceTensor::from_host(g), d_dwte, &d_dwpe, accumulate, nullptr);
      const cuda_testing::Tolerance tol = cuda_testing::kExact;
      const std::string t2 = tag + (accumulate ? " accumulate" : "");
      EXPECT_TRUE(all_close(d_dwte.rows(0, V).to_floats(), floats(dwte), tol, "dwte " + t2));
      EXPECT_TRUE(all_close(d_dwpe.to_floats(), floats(dwpe), tol, "dwpe " + t2));
      for (float v : d_dwte.rows(V, Vp - V).to_floats()) ASSERT_EQ(v, 0.0f) << "padding " << t2;
    }
  }
}

TEST(CudaKernels, CrossEntropyForwardAndBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  const std::int64_t N = 13, V = 1000, Vp = 1024;
  std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
  for (std::size_t i = 0; i < targets.size(); ++i)
    targets[i] = static_cast<std::int32_t>((i * 389) % V);
  for (DType dt : kWorkingTypes) {
    const Tensor logits = random_host({N, V}, dt, 71, -4.0f, 4.0f);
    Tensor lse;
    const double loss = layers::crossentropy_forward(logits, targets, lse);
    Tensor dlogits = Tensor::empty({N, V}, dt);
    layers::crossentropy_backward(logits, targets, 0, lse, 1024.0f, dlogits);

    DeviceTensor d_logits = DeviceTensor::empty({N, Vp}, dt);
    d_logits.poison();  // the padding columns hold NaN: they must never be read
    for (std::int64_t r = 0; r < N; ++r) {
      d_logits.flat_slice(r * Vp, V).copy_from_host(logits.rows(r, 1));
    }
    const DeviceIds ids = DeviceIds::upload(targets);
    DeviceTensor d_lse = DeviceTensor::empty({N}, DType::kF32);
    DeviceTensor d_tl = DeviceTensor::empty({N}, DType::kF32);
    d_lse.poison();
    d_tl.poison();
    DeviceTensor d_loss = DeviceTensor::empty({1}, DType::kF64);
    crossentropy_forward(d_logits, V, ids, d_lse, d_tl, nullptr);
    crossentropy_mean(d_lse, d_tl, d_loss, nullptr);
    const std::string tag(dtype_name(dt));
    EXPECT_TRUE(all_close(d_lse.to_floats(), floats(lse), {1e-5, 1e-6}, "lse " + tag));
    const double gpu_loss = d_loss.to_host().data_as<double>()[0];
    EXPECT_NEAR(gpu_loss, loss, 1e-5 * std::fabs(loss)) << tag;

    crossentropy_backward(d_logits, V, ids, d_lse, 1024.0f, d_logits, nullptr);  // in place
    std::vector<float> got;
    const std::vector<float> all = d_logits.to_floats();
    for (std::int64_t r = 0; r < N; ++r) {
      got.insert(got.end(), all.begin() + r * Vp, all.begin() + r * Vp + V);
      for (std::int64_t j = V; j < Vp; ++j)
        ASSERT_EQ(all[static_cast<std::size_t>(r * Vp + j)], 0.0f);
    }
    // scale (p - onehot) / N from the same logits and (to FP32 noise) the same lse: the
    // terms are about 1024 / 13 at the targets.
    EXPECT_TRUE(all_close(got, floats(dlogits), tolerance_for(dt, 80.0), "dlogits " + tag));
  }
}

}  // namespace
}  // namespace mixpar::cuda

#endif  // MIXPAR_HAVE_CUDA
