// The NCCL backend against the local backend, on real GPUs: skipped, saying how many GPUs it
// needs and found, wherever fewer are visible (and entirely in builds without NCCL). Ranks
// are threads here, one GPU each, bootstrapped through the local backend or a file.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/local_backend.h"
#include "comm_local_test_util.h"
#ifdef MIXPAR_HAVE_NCCL
#include <unistd.h>

#include "comm/nccl_backend.h"
#endif

namespace mixpar {
namespace {

#ifdef MIXPAR_HAVE_NCCL
using namespace comm_testing;

#define MIXPAR_NEEDS_GPUS(n)                                                    \
  do {                                                                          \
    const int found = nccl_visible_gpus();                                      \
    if (found < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs; found " << found; \
  } while (0)

Tensor on_gpu(const Tensor& t) { return t.to_device(Device::kCUDA); }
Tensor on_cpu(const Tensor& t) { return t.to_device(Device::kCPU); }

TEST(Nccl, OneRankFromAFileIsTheIdentityAndRefusesCpuTensors) {
  MIXPAR_NEEDS_GPUS(1);
  const std::string path = "/tmp/mixpar_nccl_id_" + std::to_string(::getpid());
  std::remove(path.c_str());
  auto c = NcclCommunicator::create_from_file(path, 0, 1);
  const Tensor host = rank_data(0, 1031, DType::kF32);
  Tensor d = on_gpu(host);
  c->all_reduce(d);
  EXPECT_TRUE(same_bits(on_cpu(d), host));
  Tensor cpu = host.clone();
  EXPECT_THROW(c->all_reduce(cpu), std::invalid_argument);
  std::remove(path.c_str());
}

// Everything one GPU allows: every collective of a one-rank communicator is the identity (a
// copy for reduce-scatter and all-gather), on tensors whose producers ran on the default
// stream just before (the communicator's non-blocking stream must wait for them), and a split.
TEST(Nccl, OneRankRunsEveryCollectiveAndSplitOnOneGpu) {
  MIXPAR_NEEDS_GPUS(1);
  const std::string path = "/tmp/mixpar_nccl_id1_" + std::to_string(::getpid());
  std::remove(path.c_str());
  auto c = NcclCommunicator::create_from_file(path, 0, 1);
  std::remove(path.c_str());
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->backend(), "nccl");
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor host = rank_data(0, 4099, dt);
    Tensor d = on_gpu(host);
    c->all_reduce(d, ReduceOp::kMax);
    EXPECT_TRUE(same_bits(on_cpu(d), host)) << dtype_name(dt);
    c->broadcast(d, 0);
    EXPECT_TRUE(same_bits(on_cpu(d), host)) << dtype_name(dt);
    Tensor rs = Tensor::empty({4099}, dt, MemCategory::kOther, Device::kCUDA);
    c->reduce_scatter(d, rs);
    EXPECT_TRUE(same_bits(on_cpu(rs), host)) << dtype_name(dt);
    Tensor ag = Tensor::empty({4099}, dt, MemCategory::kOther, Device::kCUDA);
    c->all_gather(rs, ag);
    EXPECT_TRUE(same_bits(on_cpu(ag), host)) << dtype_name(dt);
  }
  c->barrier();
  EXPECT_EQ(c->traffic().totals("barrier").bytes_sent, 0u);
  auto sub = c->split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  const Tensor host = rank_data(0, 17, DType::kF32);
  Tensor d = on_gpu(host);
  sub->all_reduce(d);
  EXPECT_TRUE(same_bits(on_cpu(d), host));
  // A wrong size is refused before anything is enqueued.
  Tensor small = Tensor::empty({3}, DType::kF32, MemCategory::kOther, Device::kCUDA);
  EXPECT_THROW(c->reduce_scatter(d, small), std::invalid_argument);
  // The control collectives take host bytes and stage them through the device.
  EXPECT_TRUE(c->all_reduce_or(true));
  EXPECT_FALSE(c->all_reduce_or(false));
  std::vector<std::byte> bytes(256), gathered(256);
  for (int b = 0; b < 256; ++b) bytes[std::size_t(b)] = std::byte(b);
  c->broadcast_bytes(bytes, 0);
  c->all_gather_bytes(bytes, gathered);
  EXPECT_EQ(gathered, bytes);
  // all_to_all to itself: a copy.
  Tensor a2a = Tensor::empty({17}, DType::kF32, MemCategory::kOther, Device::kCUDA);
  const std::int64_t seventeen[] = {17};
  sub->all_to_all(d, seventeen, a2a, seventeen);
  EXPECT_TRUE(same_bits(on_cpu(a2a), host));
}

TEST(Nccl, TwoGpusMatchTheLocalBackend) {
  MIXPAR_NEEDS_GPUS(2);
  run_local(2, [](Communicator& local) {
    NcclOptions o;
    o.device = local.rank();
    auto c = NcclCommunicator::create(local, o);
    // Sums of two values commute exactly: f32 and bf16 equal the local backend bit for bit.
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Tensor mine = rank_data(local.rank(), 1031, dt);
      Tensor d = on_gpu(mine), want = mine.clone();
      c->all_reduce(d);
      local.all_reduce(want);
      EXPECT_TRUE(same_bits(on_cpu(d), want)) << dtype_name(dt);
    }
    const Tensor in = rank_data(local.rank(), 2 * 5, DType::kF32);
    Tensor out = Tensor::empty({5}, DType::kF32, MemCategory::kOther, Device::kCUDA);
    Tensor want = Tensor::empty({5}, DType::kF32);
    c->reduce_scatter(on_gpu(in), out);
    local.reduce_scatter(in, want);
    EXPECT_TRUE(same_bits(on_cpu(out), want));
    Tensor all = Tensor::empty({10}, DType::kF32, MemCategory::kOther, Device::kCUDA);
    c->all_gather(out, all);
    Tensor all_want = Tensor::empty({10}, DType::kF32);
    local.all_gather(want, all_want);
    EXPECT_TRUE(same_bits(on_cpu(all), all_want));
    Tensor got = Tensor::empty({5}, DType::kF32, MemCategory::kOther, Device::kCUDA);
    c->sendrecv(out, 1 - local.rank(), got, 1 - local.rank());
    EXPECT_EQ(c->traffic().totals("sendrecv").bytes_sent, 20u);
    // The control collectives agree with the local backend's.
    for (int yes : {-1, 0, 1}) {
      EXPECT_EQ(c->all_reduce_or(local.rank() == yes), local.all_reduce_or(local.rank() == yes));
    }
    std::vector<std::byte> text(3, std::byte(local.rank() == 1 ? 0xab : 0));
    c->broadcast_bytes(text, 1);
    EXPECT_EQ(text, std::vector<std::byte>(3, std::byte{0xab}));
    // all_to_all with variable counts, a zero among them, equals the local backend's.
    const int r = local.rank();
    const std::vector<std::int64_t> sc = {r == 0 ? 0 : 3, 2}, rc = {r == 0 ? 0 : 2, r == 0 ? 3 : 2};
    const Tensor mine = rank_data(r, sc[0] + sc[1], DType::kBF16);
    Tensor a2a = Tensor::empty({rc[0] + rc[1]}, DType::kBF16, MemCategory::kOther, Device::kCUDA);
    Tensor a2a_want = Tensor::empty({rc[0] + rc[1]}, DType::kBF16);
    c->all_to_all(on_gpu(mine), sc, a2a, rc);
    local.all_to_all(mine, sc, a2a_want, rc);
    EXPECT_TRUE(same_bits(on_cpu(a2a), a2a_want));
    c->barrier();
  });
}

#else

TEST(Nccl, SkippedInABuildWithoutNccl) { GTEST_SKIP() << "mixpar was built without NCCL"; }

#endif

}  // namespace
}  // namespace mixpar
