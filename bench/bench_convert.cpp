// Bulk conversion throughput of the software formats: FP32 -> FP16/BF16/E4M3/E5M2 and back,
// 1M elements per call (4 MB of FP32: about L2/L3 sized, so this measures the arithmetic,
// not DRAM). bytes/s counts bytes read plus bytes written; items/s counts elements.
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdint>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include "numerics/formats.h"

namespace {

using mixpar::Saturation;
constexpr std::size_t kN = 1 << 20;

// Normal-distributed activations-like values with a sprinkle of outliers and tiny values, so
// every path (normal, subnormal, overflow) is taken as real tensors would take it.
const std::vector<float>& inputs() {
  static const std::vector<float> v = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> out(kN);
    for (std::size_t i = 0; i < kN; ++i) {
      const float scale = i % 97 == 0 ? 1e5f : i % 89 == 0 ? 1e-6f : 1.0f;
      out[i] = normal(rng) * scale;
    }
    return out;
  }();
  return v;
}

void set_counters(benchmark::State& state, std::size_t in_bytes, std::size_t out_bytes) {
  const auto items = static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kN);
  state.SetItemsProcessed(items);
  state.SetBytesProcessed(items * static_cast<std::int64_t>(in_bytes + out_bytes));
}

template <class T> void BM_FloatTo(benchmark::State& state) {
  const std::vector<float>& in = inputs();
  std::vector<T> out(kN);
  const Saturation sat = state.range(0) == 0 ? Saturation::kSatFinite : Saturation::kNoSat;
  for (auto _ : state) {
    if constexpr (std::is_same_v<T, mixpar::Half> || std::is_same_v<T, mixpar::BFloat16>) {
      mixpar::convert(std::span<const float>(in), std::span<T>(out));
    } else {
      mixpar::convert(std::span<const float>(in), std::span<T>(out), sat);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, sizeof(float), sizeof(T));
}

template <class T> void BM_ToFloat(benchmark::State& state) {
  std::vector<T> in(kN);
  if constexpr (std::is_same_v<T, mixpar::Half> || std::is_same_v<T, mixpar::BFloat16>) {
    mixpar::convert(std::span<const float>(inputs()), std::span<T>(in));
  } else {
    mixpar::convert(std::span<const float>(inputs()), std::span<T>(in), Saturation::kSatFinite);
  }
  std::vector<float> out(kN);
  for (auto _ : state) {
    mixpar::convert(std::span<const T>(in), std::span<float>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, sizeof(T), sizeof(float));
}

// The generic any-to-any entry point (chunked through FP32) for comparison with the spans.
void BM_BulkFloatToHalfViaDType(benchmark::State& state) {
  const std::vector<float>& in = inputs();
  std::vector<std::uint16_t> out(kN);
  for (auto _ : state) {
    mixpar::convert(in.data(), mixpar::DType::kF32, out.data(), mixpar::DType::kF16, kN);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, sizeof(float), 2);
}

}  // namespace

BENCHMARK(BM_FloatTo<mixpar::Half>)->Arg(0);
BENCHMARK(BM_FloatTo<mixpar::BFloat16>)->Arg(0);
BENCHMARK(BM_FloatTo<mixpar::Float8E4M3>)->Arg(0)->Arg(1)->ArgName("nosat");
BENCHMARK(BM_FloatTo<mixpar::Float8E5M2>)->Arg(0)->Arg(1)->ArgName("nosat");
BENCHMARK(BM_ToFloat<mixpar::Half>);
BENCHMARK(BM_ToFloat<mixpar::BFloat16>);
BENCHMARK(BM_ToFloat<mixpar::Float8E4M3>);
BENCHMARK(BM_ToFloat<mixpar::Float8E5M2>);
BENCHMARK(BM_BulkFloatToHalfViaDType);

BENCHMARK_MAIN();
