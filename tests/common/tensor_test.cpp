// Tensor as storage: what allocates (and is charged) and what only views, bounds errors,
// copies and conversions between every dtype pair (rounded as formats.h says), fills, and
// the small accessors. Ledger bookkeeping itself is in ledger_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/device_api.h"
#include "tensor/tensor.h"

namespace mixpar {
namespace {

using MC = MemCategory;

// Same value, NaN matching NaN and the sign of zero checked.
bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Values that exercise rounding, subnormals, overflow of each narrow format and specials.
const std::vector<float> kProbe = {0.0f,    -0.0f,  1.0f,     -1.5f,   0.1f,     3.14159265f, 1e-3f,
                                   1e-5f,   1e-8f,  1e-40f,   65504.f, 65520.f,  70000.f,     448.f,
                                   464.f,   500.f,  57344.f,  -2.5e5f, 1e30f,    -3e38f,      1.00390625f,
                                   INFINITY, -INFINITY, NAN};

TEST(Tensor, EmptyHasShapeDtypeCategoryAndDevice) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor t = Tensor::empty({2, 3, 4}, DType::kF16, MC::kGradients);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.dtype(), DType::kF16);
  EXPECT_EQ(t.category(), MC::kGradients);
  EXPECT_EQ(t.device(), Device::kCPU);
  EXPECT_TRUE(t.is_cpu());
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.dim(-3), 2);
  EXPECT_THROW(t.dim(3), std::out_of_range);
  EXPECT_THROW(t.dim(-4), std::out_of_range);
  EXPECT_EQ(ledger.live(MC::kGradients), 48u);
}

TEST(Tensor, CpuDataIs64ByteAligned) {
  for (std::int64_t n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty({n}, DType::kE4M3);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u) << n;
  }
}

TEST(Tensor, UndefinedTensorSaysSo) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THROW(t.device(), std::logic_error);
  EXPECT_THROW(t.category(), std::logic_error);
  EXPECT_THROW(t.data(), std::logic_error);
  EXPECT_THROW(t.zero(), std::logic_error);
}

TEST(Tensor, ShapeHelpers) {
  EXPECT_EQ(shape_str({4, 256}), "[4, 256]");
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_numel({}), 1);  // a 0-d tensor holds one element
  EXPECT_EQ(shape_numel({3, 0, 5}), 0);
  EXPECT_THROW(shape_numel({2, -1}), std::invalid_argument);
  const std::int64_t big = std::int64_t{1} << 32;
  EXPECT_THROW(shape_numel({big, big}), std::invalid_argument);  // 2^64 elements overflow
}

TEST(Tensor, HandleCopiesAndViewsShareStorageAndDoNotAllocate) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor t = Tensor::from_floats(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  const std::int64_t allocations = ledger.allocations();
  Tensor copy = t;
  Tensor v = t.view({4, 3});
  Tensor flat = t.flat_slice(5, 4);
  Tensor r = t.rows(1, 2);
  EXPECT_EQ(ledger.allocations(), allocations);
  EXPECT_EQ(ledger.live(MC::kOther), 48u);

  EXPECT_EQ(v.shape(), (Shape{4, 3}));
  EXPECT_EQ(flat.shape(), (Shape{4}));
  EXPECT_EQ(r.shape(), (Shape{2, 4}));
  EXPECT_EQ(copy.data(), t.data());
  EXPECT_EQ(v.data(), t.data());
  EXPECT_EQ(flat.data(), t.data_as<float>() + 5);
  EXPECT_EQ(r.data(), t.data_as<float>() + 4);
  EXPECT_EQ(flat.to_floats(), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(r.to_floats(), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));

  r.fill(-1.0f);  // writes through a view are seen by every handle
  EXPECT_EQ(t.to_floats()[4], -1.0f);
  EXPECT_EQ(flat.to_floats()[0], -1.0f);

  Tensor nested = r.rows(1, 1).view({2, 2});  // a view of a view keeps the offset
  EXPECT_EQ(nested.data(), t.data_as<float>() + 8);
  t = Tensor();
  copy = Tensor();
  v = Tensor();
  EXPECT_EQ(ledger.live(MC::kOther), 48u);  // views keep the storage alive
  flat = Tensor();
  r = Tensor();
  nested = Tensor();
  EXPECT_EQ(ledger.live(MC::kOther), 0u);  // the last view frees it
}

TEST(Tensor, ViewMustKeepTheElementCount) {
  Tensor t = Tensor::empty({3, 4}, DType::kF32);
  EXPECT_THROW(t.view({5, 2}), std::invalid_argument);
  EXPECT_THROW(t.view({-3, -4}), std::invalid_argument);
  EXPECT_EQ(t.view({12}).numel(), 12);
}

TEST(Tensor, FlatSliceBoundsAreChecked) {
  Tensor t = Tensor::empty({10}, DType::kF32);
  EXPECT_NO_THROW(t.flat_slice(0, 10));
  EXPECT_NO_THROW(t.flat_slice(10, 0));  // an empty slice at the end
  EXPECT_THROW(t.flat_slice(0, 11), std::out_of_range);
  EXPECT_THROW(t.flat_slice(9, 2), std::out_of_range);
  EXPECT_THROW(t.flat_slice(11, 0), std::out_of_range);
  EXPECT_THROW(t.flat_slice(-1, 1), std::out_of_range);
  EXPECT_THROW(t.flat_slice(1, -1), std::out_of_range);
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  EXPECT_THROW(t.flat_slice(5, huge), std::out_of_range);  // begin + count would overflow
}

TEST(Tensor, RowsBoundsAreChecked) {
  Tensor t = Tensor::empty({4, 3}, DType::kBF16);
  EXPECT_EQ(t.rows(3, 1).numel(), 3);
  EXPECT_EQ(t.rows(4, 0).numel(), 0);
  EXPECT_THROW(t.rows(2, 3), std::out_of_range);
  EXPECT_THROW(t.rows(-1, 1), std::out_of_range);
  EXPECT_THROW(t.rows(0, -1), std::out_of_range);
  EXPECT_THROW(t.rows(1, std::numeric_limits<std::int64_t>::max()), std::out_of_range);
  Tensor scalar = Tensor::empty({}, DType::kF32);
  EXPECT_THROW(scalar.rows(0, 1), std::invalid_argument);
}

TEST(Tensor, FromFloatsRejectsAShapeOfAnotherSize) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  EXPECT_THROW(Tensor::from_floats(v, {4, 2}), std::invalid_argument);
  EXPECT_THROW(Tensor::from_floats(v, {7}), std::invalid_argument);
  EXPECT_EQ(Tensor::from_floats(v, {2, 3}).shape(), (Shape{2, 3}));
}

TEST(Tensor, FromFloatsRoundsToTheDtype) {
  for (DType d : kAllDTypes) {
    const Tensor t = Tensor::from_floats(kProbe, {static_cast<std::int64_t>(kProbe.size())}, d);
    const std::vector<float> got = t.to_floats();
    for (std::size_t i = 0; i < kProbe.size(); ++i) {
      EXPECT_TRUE(same_value(got[i], round_to(d, kProbe[i])))
          << dtype_name(d) << ": " << kProbe[i] << " -> " << got[i] << ", want " << round_to(d, kProbe[i]);
    }
  }
}

// Every (source, destination) pair: each source value is exactly a float (every format but
// f64 is a subset of f32, and the f64 probes are floats), so the destination must hold
// round_to(destination, value), through to() and through copy_from alike.
TEST(Tensor, ToAndCopyFromConvertBetweenEveryDtypePair) {
  const Shape shape = {static_cast<std::int64_t>(kProbe.size())};
  for (DType s : kAllDTypes) {
    const Tensor src = Tensor::from_floats(kProbe, shape, s);
    const std::vector<float> src_values = src.to_floats();
    for (DType d : kAllDTypes) {
      const Tensor converted = src.to(d);
      Tensor copied = Tensor::empty(shape, d);
      copied.copy_from(src);
      EXPECT_EQ(converted.dtype(), d);
      const std::vector<float> a = converted.to_floats(), b = copied.to_floats();
      for (std::size_t i = 0; i < kProbe.size(); ++i) {
        const float want = round_to(d, src_values[i]);
        EXPECT_TRUE(same_value(a[i], want)) << dtype_name(s) << " -> " << dtype_name(d) << " to(): "
                                            << src_values[i] << " -> " << a[i] << ", want " << want;
        EXPECT_TRUE(same_value(b[i], want)) << dtype_name(s) << " -> " << dtype_name(d) << " copy_from: "
                                            << src_values[i] << " -> " << b[i] << ", want " << want;
      }
    }
  }
}

TEST(Tensor, SameDtypeCopyKeepsEveryBit) {
  for (DType d : kAllDTypes) {
    Tensor src = Tensor::empty({64}, d);
    auto* bytes = static_cast<unsigned char*>(src.data());
    for (std::size_t i = 0; i < src.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
    const Tensor dst = src.clone();
    EXPECT_NE(dst.data(), src.data());
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), src.nbytes()), 0) << dtype_name(d);
  }
}

// f64 narrows once, from the double: 1 + 2^-11 + 2^-40 lies just above the f16 midpoint
// between 1 and 1 + 2^-10, while going through f32 first would land exactly on the midpoint
// and tie to even (1).
TEST(Tensor, F64NarrowsWithoutDoubleRounding) {
  Tensor d = Tensor::empty({1}, DType::kF64);
  d.data_as<double>()[0] = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(d.to(DType::kF16).item(), 1.0f + 0x1p-10f);
  EXPECT_EQ(d.to(DType::kF32).item(), 1.0f + 0x1p-11f);
}

TEST(Tensor, SaturationModeReachesFp8Conversions) {
  const Tensor t = Tensor::from_floats(std::vector<float>{500.f, 70000.f}, {2});
  EXPECT_EQ(t.to(DType::kE4M3).to_floats()[0], 448.f);
  EXPECT_TRUE(std::isnan(t.to(DType::kE4M3, Saturation::kNoSat).to_floats()[0]));
  EXPECT_EQ(t.to(DType::kE5M2).to_floats()[1], 57344.f);
  EXPECT_TRUE(std::isinf(t.to(DType::kE5M2, Saturation::kNoSat).to_floats()[1]));
  Tensor dst = Tensor::empty({2}, DType::kE4M3);
  dst.copy_from(t, Saturation::kNoSat);
  EXPECT_TRUE(std::isnan(dst.to_floats()[0]));
}

TEST(Tensor, CopyFromRejectsAnotherElementCountButNotAnotherShape) {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  const Tensor b = Tensor::from_floats(std::vector<float>{1, 2, 3, 4, 5, 6}, {6});
  EXPECT_THROW(a.copy_from(Tensor::empty({5}, DType::kF32)), std::invalid_argument);
  a.copy_from(b);
  EXPECT_EQ(a.to_floats(), b.to_floats());
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
}

TEST(Tensor, CopyBetweenOverlappingViewsOfOneStorage) {
  Tensor t = Tensor::from_floats(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  Tensor dst = t.flat_slice(2, 6);
  dst.copy_from(t.flat_slice(0, 6));  // like memmove, not an element-by-element smear
  EXPECT_EQ(t.to_floats(), (std::vector<float>{0, 1, 0, 1, 2, 3, 4, 5}));
}

TEST(Tensor, NewTensorsKeepCategoryUnlessAskedAndAreChargedToTheCurrentLedger) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  const Tensor p = Tensor::zeros({10}, DType::kF32, MC::kParameters);
  const Tensor half = p.to(DType::kBF16);
  const Tensor c = p.clone();
  const Tensor m = p.with_category(MC::kMasterParams);
  EXPECT_EQ(half.category(), MC::kParameters);
  EXPECT_EQ(c.category(), MC::kParameters);
  EXPECT_EQ(m.category(), MC::kMasterParams);
  EXPECT_EQ(ledger.live(MC::kParameters), 40u + 20u + 40u);
  EXPECT_EQ(ledger.live(MC::kMasterParams), 40u);
  EXPECT_NE(c.data(), p.data());
}

TEST(Tensor, FillAndZeroEveryDtype) {
  for (DType d : kAllDTypes) {
    Tensor t = Tensor::empty({3, 5}, d);
    t.fill(0.1f);
    for (float v : t.to_floats()) ASSERT_EQ(v, round_to(d, 0.1f)) << dtype_name(d);
    t.fill(1e6f);  // saturates in the FP8 formats, inf in f16
    for (float v : t.to_floats()) ASSERT_EQ(v, round_to(d, 1e6f)) << dtype_name(d);
    t.rows(1, 1).zero();
    const std::vector<float> v = t.to_floats();
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], (i >= 5 && i < 10) ? 0.0f : round_to(d, 1e6f)) << dtype_name(d) << " " << i;
    }
    t.zero();
    for (float x : t.to_floats()) ASSERT_EQ(x, 0.0f) << dtype_name(d);
    EXPECT_EQ(Tensor::zeros({4}, d).to_floats(), std::vector<float>(4, 0.0f));
  }
}

TEST(Tensor, EmptyTensorsCopyFillAndConvert) {
  Tensor e = Tensor::empty({0, 4}, DType::kF16);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.nbytes(), 0u);
  e.zero();
  e.fill(1.0f);
  e.copy_from(Tensor::empty({0}, DType::kF32));
  EXPECT_TRUE(e.to_floats().empty());
  EXPECT_EQ(e.to(DType::kE5M2).numel(), 0);
}

TEST(Tensor, TypedAccessChecksTheDtype) {
  Tensor t = Tensor::from_floats(std::vector<float>{1.5f, 2.5f}, {2}, DType::kBF16);
  EXPECT_THROW(t.data_as<float>(), std::invalid_argument);
  EXPECT_THROW(t.span<Half>(), std::invalid_argument);
  const std::span<BFloat16> s = t.span<BFloat16>();
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].to_float(), 2.5f);
  EXPECT_EQ(dtype_of<Float8E5M2>, DType::kE5M2);
}

TEST(Tensor, ItemNeedsExactlyOneElement) {
  EXPECT_EQ(Tensor::from_floats(std::vector<float>{3.0f}, {}).item(), 3.0f);
  EXPECT_EQ(Tensor::from_floats(std::vector<float>{3.0f}, {1, 1}, DType::kE4M3).item(), 3.0f);
  EXPECT_THROW(Tensor::zeros({2}, DType::kF32).item(), std::invalid_argument);
}

TEST(Tensor, CudaTensorsFailCleanlyWithoutADevice) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is visible; tensor_cuda_test.cpp covers it";
  MemoryLedger ledger;
  EXPECT_THROW(Tensor::empty({4}, DType::kF32, MC::kOther, Device::kCUDA, &ledger), std::runtime_error);
  EXPECT_EQ(ledger.allocations(Device::kCUDA), 0);  // nothing charged for a failed allocation
  EXPECT_FALSE(cuda_unavailable_reason().empty());
}

}  // namespace
}  // namespace mixpar
