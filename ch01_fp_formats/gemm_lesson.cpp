// gemm_lesson: the lesson's own blocked GEMM loops and their error against FP64.
// Blocking is over rows of A: a block of C rows stays in L1 while B streams past once per
// block. Good enough for a 256x256x4096 lesson in about a second; not a fast GEMM.
#include "gemm_lesson.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

namespace mixpar::ch01 {

namespace {

constexpr int kRowBlock = 8;  // 8 rows of C (8 KB of floats at n = 256) per pass over B

// Calls body(i0, i1) for every block of rows, spread over the machine's threads. Blocks are
// independent and each element is summed in k order, so threads never change a result.
template <class Body>
void for_row_blocks(int m, const Body& body) {
  const int blocks = (m + kRowBlock - 1) / kRowBlock;
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = std::clamp(hw, 1, std::max(blocks, 1));
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int blk = next++; blk < blocks; blk = next++) {
      body(blk * kRowBlock, std::min(m, (blk + 1) * kRowBlock));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

// c[i0:i1, :] = a[i0:i1, :] x b, with round() applied after every multiply-add.
template <class Acc, class Round>
void gemm_rows(const float* a, const float* b, Acc* c, int i0, int i1, int n, int k,
               const Round& round) {
  std::fill(c + static_cast<std::ptrdiff_t>(i0) * n, c + static_cast<std::ptrdiff_t>(i1) * n,
            Acc(0));
  for (int p = 0; p < k; ++p) {
    const float* brow = b + static_cast<std::ptrdiff_t>(p) * n;  // [n]
    for (int i = i0; i < i1; ++i) {
      const Acc av = a[static_cast<std::ptrdiff_t>(i) * k + p];
      Acc* crow = c + static_cast<std::ptrdiff_t>(i) * n;  // [n]
      for (int j = 0; j < n; ++j) crow[j] = round(crow[j] + av * Acc(brow[j]));
    }
  }
}

// splitmix64: a tiny generator with a fixed output on every platform (std::uniform_*
// distributions are not specified bit for bit, and the lesson's numbers must not move).
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Tensor random_fp16(const Shape& shape, GemmInputs inputs, std::uint64_t seed) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  std::uint64_t state = seed;
  for (float& v : values) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1p-53;  // [0, 1)
    v = static_cast<float>(inputs == GemmInputs::kPositive ? u : 2.0 * u - 1.0);
  }
  return Tensor::from_floats(values, shape, DType::kF16);  // rounds each value to FP16
}

void gemm_fp16_acc(const float* a, const float* b, float* c, int m, int n, int k) {
  // The FP32 sum is rounded to FP16 after every step, as an FP16 accumulator would hold it.
  // (Rounding first to FP32 and then to FP16 can differ from one fused rounding only in
  // rare ties: far below the effect measured here.)
  const auto round16 = [](float x) { return Half(x).to_float(); };
  for_row_blocks(m, [&](int i0, int i1) { gemm_rows(a, b, c, i0, i1, n, k, round16); });
}

void gemm_fp32_acc(const float* a, const float* b, float* c, int m, int n, int k) {
  const auto keep = [](float x) { return x; };
  for_row_blocks(m, [&](int i0, int i1) { gemm_rows(a, b, c, i0, i1, n, k, keep); });
}

void gemm_fp64_ref(const float* a, const float* b, double* c, double* c_abs, int m, int n, int k) {
  const auto keep = [](double x) { return x; };
  for_row_blocks(m, [&](int i0, int i1) { gemm_rows(a, b, c, i0, i1, n, k, keep); });
  // |A| x |B| is the same loop on absolute values; only signed inputs make it differ.
  std::vector<float> abs_a(a, a + static_cast<std::ptrdiff_t>(m) * k);
  std::vector<float> abs_b(b, b + static_cast<std::ptrdiff_t>(k) * n);
  for (float& v : abs_a) v = std::fabs(v);
  for (float& v : abs_b) v = std::fabs(v);
  for_row_blocks(
      m, [&](int i0, int i1) { gemm_rows(abs_a.data(), abs_b.data(), c_abs, i0, i1, n, k, keep); });
}

GemmError gemm_error(const std::vector<float>& c, const std::vector<double>& ref,
                     const std::vector<double>& ref_abs) {
  GemmError e{0.0, 0.0};
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(c[i]) - ref[i]);
    const double rel = ref_abs[i] > 0 ? diff / ref_abs[i] : diff;
    e.max_rel = std::max(e.max_rel, rel);
    e.mean_rel += rel;
  }
  if (!c.empty()) e.mean_rel /= static_cast<double>(c.size());
  return e;
}

GemmLesson gemm_lesson(int m, int n, int k, GemmInputs inputs, std::uint64_t seed) {
  // The inputs live in FP16 tensors (what the lesson is about); the loops read them as
  // floats, which hold every FP16 value exactly.
  const std::vector<float> a = random_fp16({m, k}, inputs, seed).to_floats();      // [m, k]
  const std::vector<float> b = random_fp16({k, n}, inputs, seed + 1).to_floats();  // [k, n]
  const std::size_t mn = static_cast<std::size_t>(m) * static_cast<std::size_t>(n);
  std::vector<double> ref(mn), ref_abs(mn);
  std::vector<float> c16(mn), c32(mn);
  gemm_fp64_ref(a.data(), b.data(), ref.data(), ref_abs.data(), m, n, k);
  gemm_fp16_acc(a.data(), b.data(), c16.data(), m, n, k);
  gemm_fp32_acc(a.data(), b.data(), c32.data(), m, n, k);
  return GemmLesson{m, n, k, inputs, gemm_error(c16, ref, ref_abs), gemm_error(c32, ref, ref_abs)};
}

}  // namespace mixpar::ch01
