// Device tensors: allocation charges the ledger's cuda column, and host <-> device copies keep
// every bit of every dtype. Each test skips, saying why, where no CUDA device is visible; the
// file compiles in every build (device_api hides whether CUDA was built at all).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu.h"
#include "tensor/device_api.h"
#include "tensor/tensor.h"

namespace mixpar {
namespace {

using MC = MemCategory;

// A CPU tensor whose bytes are a deterministic scramble: every bit position is exercised,
// including NaN payloads and subnormals, which a value-level comparison would blur.
Tensor scrambled(std::int64_t n, DType d) {
  Tensor t = Tensor::empty({n}, d);
  auto* bytes = static_cast<unsigned char*>(t.data());
  std::uint32_t x = 0x9e3779b9u;
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    x = x * 1664525u + 1013904223u;  // a plain LCG is enough to vary the bytes
    bytes[i] = static_cast<unsigned char>(x >> 24);
  }
  return t;
}

TEST(TensorCuda, AllocationChargesTheCudaColumnAndFreesIt) {
  SKIP_WITHOUT_GPU();
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  {
    Tensor g = Tensor::empty({256, 4}, DType::kBF16, MC::kGradients, Device::kCUDA);
    EXPECT_EQ(g.device(), Device::kCUDA);
    EXPECT_FALSE(g.is_cpu());
    EXPECT_EQ(ledger.live(MC::kGradients, Device::kCUDA), 2048u);
    EXPECT_EQ(ledger.live(MC::kGradients, Device::kCPU), 0u);
    EXPECT_EQ(ledger.allocations(Device::kCUDA), 1);
  }
  EXPECT_EQ(ledger.live_total(Device::kCUDA), 0u);
  EXPECT_EQ(ledger.peak_total(Device::kCUDA), 2048u);
}

TEST(TensorCuda, HostDeviceRoundTripKeepsEveryBitOfEveryDtype) {
  SKIP_WITHOUT_GPU();
  for (DType d : kAllDTypes) {
    const Tensor host = scrambled(1025, d);
    const Tensor dev = host.to_device(Device::kCUDA);
    const Tensor dev2 = dev.clone();  // device -> device
    const Tensor back = dev2.to_device(Device::kCPU);
    ASSERT_EQ(back.nbytes(), host.nbytes());
    EXPECT_EQ(std::memcmp(back.data(), host.data(), host.nbytes()), 0) << dtype_name(d);
  }
}

TEST(TensorCuda, ExhaustiveFp8PatternsSurviveTheRoundTrip) {
  SKIP_WITHOUT_GPU();
  for (DType d : {DType::kE4M3, DType::kE5M2}) {
    Tensor host = Tensor::empty({256}, d);
    auto* bytes = static_cast<std::uint8_t*>(host.data());
    for (int i = 0; i < 256; ++i) bytes[i] = static_cast<std::uint8_t>(i);
    const Tensor back = host.to_device(Device::kCUDA).to_device(Device::kCPU);
    EXPECT_EQ(std::memcmp(back.data(), host.data(), 256), 0) << dtype_name(d);
  }
}

// A dtype change across devices stages through the host and must match the host conversion.
TEST(TensorCuda, ConvertingCopiesAcrossDevicesMatchTheHostConversion) {
  SKIP_WITHOUT_GPU();
  const std::vector<float> v = {0.1f, -3.5f, 1e-6f, 500.f, 70000.f, 1e-40f};
  const Tensor host = Tensor::from_floats(v, {6});
  const Tensor dev = host.to_device(Device::kCUDA);
  for (DType d : kAllDTypes) {
    const Tensor want = host.to(d);
    const Tensor on_device = dev.to(d);  // device -> device with conversion
    EXPECT_EQ(on_device.device(), Device::kCUDA);
    const Tensor got = on_device.to_device(Device::kCPU);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << dtype_name(d);
    Tensor to_host = Tensor::empty({6}, d);
    to_host.copy_from(dev);  // device f32 -> host d
    EXPECT_EQ(std::memcmp(to_host.data(), want.data(), want.nbytes()), 0) << dtype_name(d);
    Tensor to_dev = Tensor::empty({6}, d, MC::kOther, Device::kCUDA);
    to_dev.copy_from(host);  // host f32 -> device d
    EXPECT_EQ(to_dev.to_floats(), want.to_floats()) << dtype_name(d);
  }
}

TEST(TensorCuda, FillZeroAndItemOnTheDevice) {
  SKIP_WITHOUT_GPU();
  for (DType d : kAllDTypes) {
    Tensor t = Tensor::empty({5, 7}, d, MC::kActivations, Device::kCUDA);
    t.fill(0.1f);
    for (float x : t.to_floats()) ASSERT_EQ(x, round_to(d, 0.1f)) << dtype_name(d);
    t.rows(2, 1).zero();
    const std::vector<float> v = t.to_floats();
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], (i >= 14 && i < 21) ? 0.0f : round_to(d, 0.1f)) << dtype_name(d) << " " << i;
    }
    EXPECT_EQ(Tensor::zeros({1}, d, MC::kOther, Device::kCUDA).item(), 0.0f);
  }
}

TEST(TensorCuda, StagingBuffersAreReturnedToTheLedger) {
  SKIP_WITHOUT_GPU();
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor t = Tensor::empty({100}, DType::kF16, MC::kParameters, Device::kCUDA);
  t.fill(2.0f);
  t.copy_from(Tensor::zeros({100}, DType::kF32, MC::kParameters));
  EXPECT_EQ(ledger.live_total(Device::kCPU), 0u);
  EXPECT_EQ(ledger.live(MC::kParameters, Device::kCUDA), 200u);
}

TEST(TensorCuda, DeviceCountAgreesWithAvailability) {
  SKIP_WITHOUT_GPU();
  EXPECT_GE(cuda_device_count(), 1);
  EXPECT_TRUE(cuda_unavailable_reason().empty());
  cuda_synchronize();
}

}  // namespace
}  // namespace mixpar
